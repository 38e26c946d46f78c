"""Conferências dos exercícios de notebooks/03_atencao_produto_escalar.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_attention_weights`: os pesos de atenção
   ``softmax(Q K^T / sqrt(d_k))``, com o softmax sobre as CHAVES, forma ``(..., t, s)``;
2. :func:`check_attention_entropy`: a entropia (em nats) de cada linha de pesos, com
   ``0 log 0 = 0``, forma ``(..., t)``;
3. :func:`check_attention_memory`: quantos bytes ocupa a matriz de pesos
   ``(b, h, t, s)``.

Cada conferência compara a resposta do aluno com uma referência e diz, em português,
qual entrada falhou, o que era esperado e o que veio. Os erros mais comuns (``Q^T K``,
softmax no eixo errado, esquecer a escala, esquecer as cabeças) têm mensagens próprias.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.attention import scaled_dot_product_attention
from tpt.exercises import exercise, expect

__all__ = ["check_attention_weights", "check_attention_entropy", "check_attention_memory"]

# Tolerância das comparações em float32 (os casos são pequenos: d_k <= 16).
_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=_ATOL, rtol=1e-4)


def _max_diff(a: Tensor, b: Tensor) -> str:
    return f"{(a - b).abs().max().item():.2g}"


# --------------------------------------------------------------------------------------
# Exercício 1: pesos de atenção
# --------------------------------------------------------------------------------------


def _weight_cases() -> list[tuple[str, Tensor, Tensor]]:
    """Casos ``(descrição, query, key)``; a autoatenção vem primeiro (t == s)."""
    g = torch.Generator().manual_seed(3)
    return [
        ("autoatenção com Q (4, 8) e K (4, 8)", torch.randn(4, 8, generator=g),
         torch.randn(4, 8, generator=g)),
        ("Q (3, 16) e K (5, 16), t != s", torch.randn(3, 16, generator=g),
         torch.randn(5, 16, generator=g)),
        ("um lote: Q (2, 3, 4) e K (2, 6, 4)", torch.randn(2, 3, 4, generator=g),
         torch.randn(2, 6, 4, generator=g)),
    ]


@exercise("Exercício 1 (pesos de atenção)")
def check_attention_weights(attention_weights: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``attention_weights(query, key) -> (..., t, s)`` = softmax(Q K^T / sqrt(d_k), dim=-1)."""
    for where, query, key in _weight_cases():
        t, s, d_k = query.shape[-2], key.shape[-2], query.shape[-1]
        scores = query @ key.transpose(-2, -1)  # (..., t, s), sem escala
        _, expected = scaled_dot_product_attention(query, key, key)  # (..., t, s)
        received = attention_weights(query.clone(), key.clone())
        expect(
            isinstance(received, Tensor),
            f"para {where}, esperava um tensor (..., t, s); recebi {type(received).__name__}.",
        )
        expected_shape = (*query.shape[:-2], t, s)
        if tuple(received.shape) == (*query.shape[:-2], d_k, d_k) and d_k != s:
            expect(
                False,
                f"para {where}, recebi forma {_shape(received)} = (d_k, d_k): isso é Q^T K. "
                f"As pontuações são Q K^T (tokens nas linhas), forma (t, s) = {expected_shape}.",
            )
        if tuple(received.shape) == (*query.shape[:-2], s, t) and s != t:
            expect(
                False,
                f"para {where}, recebi forma {_shape(received)} = (s, t); esperava "
                f"{expected_shape} = (t, s): uma LINHA por consulta, uma COLUNA por chave. "
                "Calcule Q @ K.transpose(-2, -1), não K @ Q.transpose(-2, -1).",
            )
        expect(
            tuple(received.shape) == expected_shape,
            f"para {where}, esperava forma {expected_shape} = (t, s); recebi {_shape(received)}.",
        )
        received = received.detach().to(torch.float32)
        expect(
            bool(torch.isfinite(received).all()),
            f"para {where}, os pesos têm NaN ou infinito.",
        )
        rows = received.sum(dim=-1)
        if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
            cols = received.sum(dim=-2)
            expect(
                not torch.allclose(cols, torch.ones_like(cols), atol=1e-4),
                f"para {where}, são as COLUNAS que somam 1: o softmax foi feito sobre as "
                "consultas. Use softmax(..., dim=-1), sobre as chaves, para que cada consulta "
                "distribua 1 de peso entre as chaves.",
            )
            expect(
                False,
                f"para {where}, cada linha dos pesos deveria somar 1; as somas foram "
                f"{rows.reshape(-1)[:6].tolist()}. Faltou o softmax sobre as chaves (dim=-1)?",
            )
        if _close(received, torch.softmax(scores, dim=-1)):
            expect(
                False,
                f"para {where} (d_k={d_k}), seus pesos são softmax(Q K^T): faltou dividir as "
                f"pontuações por sqrt(d_k) = {math.sqrt(d_k):.4g} antes do softmax.",
            )
        if _close(received, torch.softmax(scores / d_k, dim=-1)):
            expect(
                False,
                f"para {where} (d_k={d_k}), você dividiu por d_k = {d_k}; a escala é "
                f"1/sqrt(d_k) = 1/{math.sqrt(d_k):.4g}.",
            )
        if s == t and _close(received, torch.softmax(scores.transpose(-2, -1) / d_k**0.5, -1)):
            expect(
                False,
                f"para {where}, seus pesos são softmax(K Q^T / sqrt(d_k)): as pontuações saíram "
                "transpostas (linha = chave). Calcule Q @ K.transpose(-2, -1), para que a linha "
                "i seja a consulta i.",
            )
        expect(
            _close(received, expected),
            f"para {where}, os pesos diferem de softmax(Q K^T / sqrt(d_k)) em até "
            f"{_max_diff(received, expected)} (tolerância {_ATOL}).",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: entropia de cada linha de pesos
# --------------------------------------------------------------------------------------


def _reference_entropy(weights: Tensor) -> Tensor:
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # (..., t); 0 log 0 = 0


def _entropy_cases() -> list[tuple[str, Tensor]]:
    g = torch.Generator().manual_seed(5)
    random_rows = torch.softmax(torch.randn(2, 3, 5, generator=g), dim=-1)  # (2, 3, 5)
    return [
        ("uma linha uniforme sobre 4 chaves", torch.full((1, 4), 0.25)),
        ("pesos aleatórios de forma (2, 3, 5)", random_rows),
        ("uma linha com zeros: [[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]",
         torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])),
    ]


@exercise("Exercício 2 (entropia dos pesos)")
def check_attention_entropy(attention_entropy: Callable[[Tensor], Tensor]) -> None:
    """``attention_entropy(weights (..., t, s)) -> (..., t)``: -sum p ln p, com 0 ln 0 = 0."""
    for where, weights in _entropy_cases():
        expected = _reference_entropy(weights)  # (..., t)
        received = attention_entropy(weights.clone())
        expect(
            isinstance(received, Tensor),
            f"para {where}, esperava um tensor (..., t); recebi {type(received).__name__}.",
        )
        if received.shape == weights.shape:
            expect(
                False,
                f"para {where}, recebi forma {_shape(received)}, a mesma dos pesos: falta somar "
                "-p ln p sobre as chaves (dim=-1), para ficar UM número por consulta.",
            )
        if received.numel() == 1 and expected.numel() > 1:
            expect(
                False,
                f"para {where}, recebi um único número; esperava uma entropia por consulta, "
                f"forma {tuple(expected.shape)} (não tire a média nem some tudo).",
            )
        expect(
            received.shape == expected.shape,
            f"para {where}, esperava forma {tuple(expected.shape)} (uma entropia por consulta); "
            f"recebi {_shape(received)}.",
        )
        received = received.detach().to(torch.float32)
        expect(
            not bool(torch.isnan(received).any()),
            f"para {where}, a entropia deu NaN: 0 * ln(0) vira 0 * (-inf) = NaN. Por "
            "definição 0 ln 0 = 0: use torch.special.xlogy(p, p) ou zere esses termos.",
        )
        if _close(received, -expected) and expected.abs().max() > 0:
            expect(
                False,
                f"para {where}, recebi {received.tolist()}: a entropia é -sum p ln p; faltou o "
                "sinal de menos (ela nunca é negativa).",
            )
        if _close(received, expected / math.log(2)) and expected.abs().max() > 0:
            expect(
                False,
                f"para {where}, recebi a entropia em bits (log na base 2); aqui usamos o "
                "logaritmo natural (nats): torch.log.",
            )
        expect(
            _close(received, expected),
            f"para {where}, esperava {[round(x, 4) for x in expected.reshape(-1).tolist()]}; "
            f"recebi {[round(x, 4) for x in received.reshape(-1).tolist()]}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: memória da matriz de pesos
# --------------------------------------------------------------------------------------

# (batch_size, num_heads, t, s, bytes_per_element)
_MEMORY_CASES: list[tuple[int, int, int, int, int]] = [
    (1, 1, 512, 512, 4),
    (8, 12, 1024, 1024, 2),
    (2, 4, 100, 300, 4),
    (3, 16, 2048, 2048, 4),
]


@exercise("Exercício 3 (memória dos pesos de atenção)")
def check_attention_memory(attention_memory_bytes: Callable[..., int]) -> None:
    """``attention_memory_bytes(batch_size, num_heads, t, s, bytes_per_element) -> int``."""
    for b, h, t, s, nbytes in _MEMORY_CASES:
        where = f"para batch_size={b}, num_heads={h}, t={t}, s={s}, bytes_per_element={nbytes}"
        expected = b * h * t * s * nbytes
        received = attention_memory_bytes(b, h, t, s, nbytes)
        if isinstance(received, float) and received.is_integer():
            received = int(received)
        expect(
            isinstance(received, int) and not isinstance(received, bool),
            f"{where}, esperava um número inteiro de bytes; recebi {received!r}.",
        )
        if received == b * t * s * nbytes and h > 1:
            expect(
                False,
                f"{where}, recebi {received}, que não cresce com num_heads: cada cabeça guarda a "
                f"SUA matriz (t, s); esperava {expected}.",
            )
        if received == b * h * t * s and nbytes > 1:
            expect(
                False,
                f"{where}, recebi {received}: isso é o número de ELEMENTOS; multiplique por "
                f"bytes_per_element={nbytes} para ter bytes ({expected}).",
            )
        if received == b * h * t * t * nbytes and t != s:
            expect(
                False,
                f"{where}, recebi {received} = b·h·t·t·bytes; a matriz de pesos é (t, s), uma "
                f"coluna por CHAVE: esperava {expected}.",
            )
        expect(
            received == expected,
            f"{where}, esperava {expected} bytes (b·h·t·s·bytes); recebi {received}.",
        )
