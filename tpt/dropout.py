"""Dropout que não custa nada quando não age (avaliação, ou ``p = 0``).

Em avaliação, ou com ``p = 0``, ``nn.Dropout`` devolve a entrada como está (na CPU e na
GPU, sem sortear nada). Ainda assim, chamar o módulo custa alguns microssegundos de
Python (a maquinaria de ``nn.Module.__call__``). Na geração, token a token, um GPT chama
três ou quatro dropouts por camada a cada token: ``apply_dropout`` pula a chamada
quando ela não mudaria nada. Os módulos continuam lá (``print(model)`` os mostra,
``from_torch`` copia o ``p``, ``model.train()`` os liga).
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["apply_dropout"]


def apply_dropout(dropout: nn.Dropout, x: Tensor) -> Tensor:
    """``dropout(x)`` em modo treino com ``p > 0``; senão ``x`` sem chamar o módulo. Mesma forma."""
    return dropout(x) if dropout.training and dropout.p > 0 else x
