"""Conferências dos exercícios de notebooks/05_codificacao_posicional.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_sinusoidal_encoding`: a tabela senoidal ``(max_len, d)`` com seno e
   cosseno INTERCALADOS: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``,
   ``w_i = 1 / theta^(2i/d)``;
2. :func:`check_pe_rotation`: a rotação bloco-diagonal ``R(k)`` ``(d, d)`` com
   ``PE(p + k) = R(k) PE(p)``;
3. :func:`check_add_positional`: somar a tabela ao longo do eixo da SEQUÊNCIA de uma
   entrada com o lote primeiro ``(b, t, d)``, a partir de ``offset``, sem cortar o
   gradiente.

Cada conferência compara a resposta do aluno com a referência do tpt e diz, em
português, qual entrada falhou, o que era esperado e o que veio. Os erros mais comuns
(senos e cossenos concatenados em vez de intercalados, expoente ``i/d`` em vez de
``2i/d``, rotação transposta, PE do índice do lote) têm mensagens próprias.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.exercises import exercise, expect
from tpt.positional import pe_rotation, sinusoidal_encoding

__all__ = ["check_sinusoidal_encoding", "check_pe_rotation", "check_add_positional"]

# Tolerância: a resposta pode vir em float32 (erro de arredondamento ~1e-7 nos senos).
_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _close(received: Tensor, expected: Tensor) -> bool:
    return received.shape == expected.shape and torch.allclose(
        received.double(), expected.double(), atol=_ATOL, rtol=0
    )


def _max_diff(a: Tensor, b: Tensor) -> str:
    return f"{(a.double() - b.double()).abs().max().item():.2g}"


def _frequencies(embed_dim: int, theta: float, exponent_scale: float = 2.0) -> Tensor:
    """``1 / theta^(c i / d)`` para ``i = 0..d/2-1`` (``c = 2`` é o certo): ``(d/2,)``."""
    i = torch.arange(embed_dim // 2, dtype=torch.float64)  # (d/2,)
    return theta ** (-exponent_scale * i / embed_dim)  # (d/2,)


def _angles(max_len: int, embed_dim: int, theta: float, exponent_scale: float = 2.0) -> Tensor:
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    return positions * _frequencies(embed_dim, theta, exponent_scale)[None, :]  # (max_len, d/2)


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    """Colunas pares de ``even`` e ímpares de ``odd``: ``(n, d/2)`` x 2 -> ``(n, d)``."""
    return torch.stack((even, odd), dim=-1).flatten(-2)  # (n, d)


def _first_mismatch(received: Tensor, expected: Tensor) -> str:
    """Descreve a primeira célula ``[p, j]`` que difere (para a mensagem)."""
    bad = ((received.double() - expected.double()).abs() > _ATOL).nonzero()[0].tolist()
    index = ", ".join(str(i) for i in bad)
    return (
        f"PE[{index}] deveria ser {expected[tuple(bad)].item():.4f}, "
        f"mas veio {received[tuple(bad)].item():.4f}"
    )


# --------------------------------------------------------------------------------------
# Exercício 1: a tabela senoidal
# --------------------------------------------------------------------------------------

# (max_len, embed_dim, theta): o primeiro é a tabela calculada à mão no notebook.
_TABLE_CASES: list[tuple[int, int, float]] = [
    (5, 4, 10000.0),
    (12, 8, 10000.0),
    (7, 6, 100.0),
    (40, 16, 10000.0),
]


@exercise("Exercício 1 (tabela senoidal)")
def check_sinusoidal_encoding(sinusoidal: Callable[[int, int, float], Tensor]) -> None:
    """``sinusoidal(max_len, embed_dim, theta) -> (max_len, embed_dim)`` intercalada."""
    for max_len, d, theta in _TABLE_CASES:
        where = f"para max_len={max_len}, embed_dim={d}, theta={theta:g}"
        expected = sinusoidal_encoding(max_len, d, theta, dtype=torch.float64)
        received = sinusoidal(max_len, d, theta)
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        received = received.detach().cpu()
        expect(
            tuple(received.shape) != (d, max_len) or d == max_len,
            f"{where}: esperava a forma {(max_len, d)} (posições x dimensões); recebi "
            f"{_shape(received)}: a tabela está transposta.",
        )
        expect(
            tuple(received.shape) == (max_len, d),
            f"{where}: esperava a forma {(max_len, d)} (max_len, embed_dim); "
            f"recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        angles = _angles(max_len, d, theta)
        concatenated = torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)
        expect(
            not _close(received, concatenated),
            f"{where}: você pôs todos os senos na primeira metade das colunas e os cossenos "
            "na segunda. Aqui eles são INTERCALADOS: PE[:, 0::2] = sin e PE[:, 1::2] = cos "
            "(a mesma informação, em outra ordem de colunas).",
        )
        swapped = _interleave(torch.cos(angles), torch.sin(angles))
        expect(
            not _close(received, swapped),
            f"{where}: seno e cosseno estão trocados: as colunas PARES (2i) levam o seno e "
            "as ímpares (2i+1) o cosseno. Confira a linha da posição 0: deve ser "
            "[0, 1, 0, 1, ...].",
        )
        half_angles = _angles(max_len, d, theta, exponent_scale=1.0)
        wrong_exponent = _interleave(torch.sin(half_angles), torch.cos(half_angles))
        expect(
            not _close(received, wrong_exponent),
            f"{where}: o expoente está errado: a frequência do par i é 1 / theta^(2i/d), "
            "com 2i (o índice da coluna par), não 1 / theta^(i/d).",
        )
        if theta != 10000.0:
            fixed = sinusoidal_encoding(max_len, d, 10000.0, dtype=torch.float64)
            expect(
                not _close(received, fixed),
                f"{where}: sua tabela é a de theta=10000: use o argumento theta na "
                "frequência 1 / theta^(2i/d) em vez de um valor fixo.",
            )
        expect(False, f"{where}: {_first_mismatch(received, expected)}.")


# --------------------------------------------------------------------------------------
# Exercício 2: a rotação R(k)
# --------------------------------------------------------------------------------------

# (offset, embed_dim, theta): inclui k = 0 (identidade) e um k negativo (R(-k) = R(k)^T).
_ROTATION_CASES: list[tuple[int, int, float]] = [
    (1, 4, 10000.0),
    (3, 8, 10000.0),
    (5, 6, 100.0),
    (0, 4, 10000.0),
    (-2, 8, 10000.0),
]


@exercise("Exercício 2 (rotação R(k))")
def check_pe_rotation(rotation: Callable[[int, int, float], Tensor]) -> None:
    """``rotation(offset, embed_dim, theta) -> (d, d)`` com ``PE(p + k) = R(k) PE(p)``."""
    for k, d, theta in _ROTATION_CASES:
        where = f"para offset k={k}, embed_dim={d}, theta={theta:g}"
        expected = pe_rotation(k, d, theta, dtype=torch.float64)
        received = rotation(k, d, theta)
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        received = received.detach().cpu()
        expect(
            tuple(received.shape) == (d, d),
            f"{where}: esperava uma matriz {(d, d)} (d, d); recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        expect(
            not _close(received, expected.T),
            f"{where}: sua matriz leva PE(p) a PE(p - k): é a transposta, R(-k). Confira os "
            "sinais: sin(a + b) = sin a cos b + cos a sin b e cos(a + b) = cos a cos b - "
            "sin a sin b, logo o bloco é [[cos b, sin b], [-sin b, cos b]].",
        )
        block = pe_rotation(k, 2, theta, dtype=torch.float64)  # (2, 2): o ângulo k do par 0
        same_angle = torch.block_diag(*[block] * (d // 2))  # (d, d): o mesmo ângulo em todos
        expect(
            not _close(received, same_angle),
            f"{where}: todos os blocos giram o mesmo ângulo k. O bloco do par i gira "
            "k * w_i, com w_i = 1 / theta^(2i/d): cada par tem a sua frequência.",
        )
        # Diagnóstico pela propriedade: PE(p + k) contra R PE(p) nas posições 0..9.
        pe = sinusoidal_encoding(30, d, theta, dtype=torch.float64)  # (30, d)
        start = max(0, -k)
        before = pe[start : start + 10]  # (10, d): PE(p)
        after = pe[start + k : start + k + 10]  # (10, d): PE(p + k)
        predicted = before @ received.double().T  # (10, d): R PE(p), linha a linha
        expect(
            False,
            f"{where}: R(k) PE(p) deveria dar PE(p + k), mas a diferença máxima nas "
            f"posições p = {start}..{start + 9} é {_max_diff(predicted, after)} "
            f"(tolerância {_ATOL}). {_first_mismatch(received, expected).replace('PE', 'R')}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: somar a codificação no eixo certo
# --------------------------------------------------------------------------------------

# (b, t, d, offset): inclui b != t, b = 1 e offset > 0.
_ADD_CASES: list[tuple[int, int, int, int]] = [
    (2, 5, 8, 0),
    (3, 4, 8, 0),
    (1, 6, 4, 0),
    (2, 3, 8, 4),
    (4, 2, 6, 7),
]
_ADD_MAX_LEN = 16


@exercise("Exercício 3 (somar a codificação ao longo da sequência)")
def check_add_positional(add_positional: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``add_positional(x (b, t, d), pe (max_len, d), offset) -> x + pe[offset:offset+t]``."""
    generator = torch.Generator().manual_seed(5)
    for b, t, d, offset in _ADD_CASES:
        where = (
            f"para x de forma {(b, t, d)} (b, t, d), pe de forma {(_ADD_MAX_LEN, d)} "
            f"e offset={offset}"
        )
        pe = sinusoidal_encoding(_ADD_MAX_LEN, d)  # (max_len, d)
        x = torch.randn(b, t, d, generator=generator)
        original = x.clone()
        x.requires_grad_(True)
        expected = original + pe[offset : offset + t][None]  # (b, t, d)
        received = add_positional(x, pe, offset)
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            torch.equal(x.detach(), original),
            f"{where}: sua função modificou x no lugar; devolva um tensor novo (x + ..., não "
            "x += ...).",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where}: esperava a forma {(b, t, d)}; recebi {_shape(received)}.",
        )
        if not _close(received.detach(), expected):
            batch_bug = original + pe[:b][:, None, :]  # (b, 1, d) espalhado sobre t
            expect(
                not _close(received.detach(), batch_bug),
                f"{where}: cada token recebeu a PE do índice do LOTE (o elemento j do lote "
                "ganhou PE(j) em todas as posições). Com o lote primeiro, as posições "
                "estão no eixo 1: some pe[offset:offset + t] ao longo de x.shape[1].",
            )
            no_offset = original + pe[:t][None]
            expect(
                offset == 0 or not _close(received.detach(), no_offset),
                f"{where}: você somou pe[0:t], ignorando o offset: as posições desta "
                f"entrada são {offset}..{offset + t - 1}, então use pe[offset:offset + t].",
            )
            expect(
                False,
                f"{where}: a saída difere de x + pe[offset:offset + t] (diferença máxima "
                f"{_max_diff(received.detach(), expected)}, tolerância {_ATOL}).",
            )
        expect(
            received.requires_grad,
            f"{where}: a saída não tem gradiente (requires_grad=False): não use "
            "torch.no_grad() nem .detach() no caminho de x; o gradiente precisa chegar "
            "às embeddings.",
        )
        received.sum().backward()
        expect(
            x.grad is not None and torch.allclose(x.grad, torch.ones_like(x)),
            f"{where}: o gradiente de saída.sum() em relação a x deveria ser 1 em toda "
            "parte (somar uma constante não muda o gradiente).",
        )
