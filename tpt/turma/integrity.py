"""O retrato das conferências da correção: o mesmo de :mod:`tpt.exercises.integrity`.

Antes de qualquer célula do aluno, o processo da correção tira o retrato de tudo de que
as conferências dependem (os verificadores de ``ex``, os módulos ``tpt.*``, ``builtins``,
``torch``, ``torch.nn.functional``, ``torch.Tensor``...); depois das células, e depois de
cada conferência, qualquer diferença é "conferência alterada". As células de nota do
nbgrader e a guarda das conferências no notebook usam o mesmo retrato.
"""

from __future__ import annotations

from tpt.exercises.integrity import IntegrityError, Snapshot, describe

__all__ = ["Snapshot", "IntegrityError", "describe"]
