"""Conferências automáticas dos exercícios dos notebooks, com retorno em português.

Cada notebook tem um módulo aqui (``tpt.exercises.tokens`` para o 01, e assim por
diante). Um exercício é uma função que o aluno escreve no notebook; a conferência
chama essa função com casos de teste e diz o que está certo ou errado.

Enquanto o aluno não resolve, a célula do exercício levanta ``NotImplementedError``
e a conferência só avisa que ele está pendente, sem erro: por isso o notebook inteiro
roda sem intervenção (papermill, nbval) e continua sendo um exercício de verdade.

O notebook usa ``ex = checks("attention")``: só os verificadores, sem as referências.
A máquina comum mora em cinco arquivos, com as dependências num sentido só
(``messages`` ← ``rules`` ← ``guards`` ← ``core``; ``integrity`` ← ``guards``):

- ``messages``: as mensagens (:func:`expect`, :func:`expect_close` com diagnósticos só de
  variantes calculadas, :func:`difference_text`) e :class:`ExerciseError`;
- ``rules``: regras verificadas pelas operações que rodaram (:func:`record_ops`), não
  pelos nomes no código;
- ``integrity``: o retrato do que as conferências usam (módulos de conferência, ``torch``,
  ``torch.nn.functional``, ``torch.Tensor``), o mesmo da correção de uma turma e das
  células de nota do nbgrader;
- ``guards``: entradas intactas (:func:`call_answer`), gradientes
  (:func:`check_gradients`), casos sorteados (:func:`case_generator`, :func:`randsize`) e
  a guarda em volta de cada conferência (:func:`sandbox`: sem threads nem processos, sem
  código da conferência chamado pela resposta, sem peças da conferência trocadas);
- ``core``: o veredito (:func:`exercise`) e :func:`checks`.
"""

from __future__ import annotations

from tpt.exercises.core import Checks, checks, exercise
from tpt.exercises.guards import (
    SEED_VARIABLE,
    Snapshot,
    allow_callback,
    call_answer,
    case_generator,
    check_gradients,
    expect_finite_gradient,
    fixed_seed,
    randint,
    randsize,
    sandbox,
    seed_note,
)
from tpt.exercises.messages import (
    ExerciseError,
    autograd_explanation,
    difference_text,
    expect,
    expect_close,
    first_line,
    max_abs_diff,
    same_values,
    unambiguous,
)
from tpt.exercises.rules import (
    ATTENTION_KERNEL_OPS,
    REPEAT_OPS,
    SOFTMAX_OPS,
    OpRecord,
    code_kind,
    functions_from_file,
    op_counts_by_size,
    record_modules,
    record_ops,
    record_python_calls,
    record_torch_calls,
    watch_autograd,
)

__all__ = [
    "ExerciseError",
    "expect",
    "exercise",
    "expect_close",
    "max_abs_diff",
    "difference_text",
    "autograd_explanation",
    "same_values",
    "unambiguous",
    "first_line",
    "checks",
    "Checks",
    "call_answer",
    "check_gradients",
    "case_generator",
    "expect_finite_gradient",
    "randint",
    "randsize",
    "sandbox",
    "allow_callback",
    "seed_note",
    "fixed_seed",
    "SEED_VARIABLE",
    "Snapshot",
    "record_ops",
    "OpRecord",
    "op_counts_by_size",
    "record_python_calls",
    "functions_from_file",
    "record_torch_calls",
    "record_modules",
    "watch_autograd",
    "code_kind",
    "SOFTMAX_OPS",
    "ATTENTION_KERNEL_OPS",
    "REPEAT_OPS",
]
