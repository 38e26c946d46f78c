"""Conferências dos exercícios de notebooks/04_atencao_multicabeca.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_split_heads`: dividir ``(b, t, d)`` em cabeças ``(b, h, t, d_h)``
   (``view`` para ``(b, t, h, d_h)`` e depois ``transpose(1, 2)``);
2. :func:`check_multihead_forward`: a atenção multicabeça inteira com os pesos de um
   ``tpt.MultiHeadAttention``, inclusive na atenção cruzada (``t != s``);
3. :func:`check_num_parameters`: a contagem de parâmetros ``4 d^2 + 4 d`` (e a versão
   com ``num_kv_heads``, prévia do GQA).

Cada conferência compara a resposta do aluno com a referência do tpt e diz, em
português, qual entrada falhou, o que era esperado e o que veio.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.attention import MultiHeadAttention, scaled_dot_product_attention
from tpt.exercises import exercise, expect

__all__ = ["check_split_heads", "check_multihead_forward", "check_num_parameters"]


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _max_diff(a: Tensor, b: Tensor) -> str:
    return f"{(a.double() - b.double()).abs().max().item():.2g}"


# --------------------------------------------------------------------------------------
# Exercício 1: dividir em cabeças
# --------------------------------------------------------------------------------------

# (b, t, d, h): inclui t == h e t == d_h, em que a forma certa não denuncia a troca de eixos.
_SPLIT_CASES: list[tuple[int, int, int, int]] = [
    (1, 5, 12, 3),
    (2, 4, 8, 4),
    (3, 2, 6, 2),
    (2, 7, 16, 1),
    (1, 6, 24, 6),
]


def _reference_split(x: Tensor, num_heads: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)  # (b, h, t, d_h)


@exercise("Exercício 1 (dividir em cabeças)")
def check_split_heads(split_heads: Callable[[Tensor, int], Tensor]) -> None:
    """``split_heads(x (b, t, d), num_heads) -> (b, h, t, d / h)``."""
    generator = torch.Generator().manual_seed(4)
    for b, t, d, h in _SPLIT_CASES:
        d_h = d // h
        x = torch.randn(b, t, d, generator=generator)
        expected = _reference_split(x, h)
        received = split_heads(x.clone(), h)
        where = f"para x de forma {(b, t, d)} e num_heads={h}"
        expect(
            isinstance(received, Tensor),
            f"{where} esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) == (b, t, h, d_h) and (b, t, h, d_h) != (b, h, t, d_h):
            expect(
                False,
                f"{where} esperava a forma {(b, h, t, d_h)} (b, h, t, d_h), mas recebi "
                f"{_shape(received)} = (b, t, h, d_h): falta o transpose(1, 2) depois do view.",
            )
        expect(
            tuple(received.shape) == (b, h, t, d_h),
            f"{where} esperava a forma {(b, h, t, d_h)} (b, h, t, d_h); recebi {_shape(received)}.",
        )
        if not torch.equal(received, expected):
            wrong_view = x.reshape(b, h, t, d_h)
            expect(
                not torch.equal(received, wrong_view),
                f"{where} a forma está certa, mas os valores não: x.view(b, h, t, d_h) "
                "direto mistura dimensões de tokens diferentes na mesma cabeça. Primeiro "
                "x.view(b, t, h, d_h), depois .transpose(1, 2).",
            )
            bad = next(i for i in range(h) if not torch.equal(received[:, i], expected[:, i]))
            diff = _max_diff(received[:, bad], expected[:, bad])
            expect(
                False,
                f"{where} a forma está certa, mas a cabeça {bad} deveria conter as colunas "
                f"{bad * d_h} a {(bad + 1) * d_h - 1} de x (para cada token); diferença "
                f"máxima {diff}.",
            )


# --------------------------------------------------------------------------------------
# Exercício 2: a atenção multicabeça inteira (autoatenção e atenção cruzada)
# --------------------------------------------------------------------------------------

# (b, t, s, d, h): autoatenção primeiro (t == s), depois atenção cruzada (t != s).
_FORWARD_CASES: list[tuple[int, int, int, int, int]] = [
    (1, 5, 5, 8, 2),
    (2, 6, 6, 12, 3),
    (1, 6, 4, 8, 2),
    (2, 3, 7, 16, 4),
]
# float32: a conferência usa atol=1e-5 (caminho rápido do tpt x caminho explícito do aluno).
_FORWARD_ATOL = 1e-5


@exercise("Exercício 2 (atenção multicabeça com t != s)")
def check_multihead_forward(
    multihead_forward: Callable[[Tensor, Tensor, MultiHeadAttention], Tensor],
) -> None:
    """``multihead_forward(query (b, t, d), key_value (b, s, d), mha) -> (b, t, d)``.

    Deve dar o mesmo que ``mha(query, key_value)[0]``.
    """
    generator = torch.Generator().manual_seed(5)
    for b, t, s, d, h in _FORWARD_CASES:
        with torch.random.fork_rng(devices=[]):  # não mexe no gerador global do aluno
            torch.manual_seed(1000 * d + 10 * h + t)
            mha = MultiHeadAttention(d, h).eval()
        query = torch.randn(b, t, d, generator=generator)
        key_value = query if s == t else torch.randn(b, s, d, generator=generator)
        kind = "autoatenção" if key_value is query else "atenção cruzada"
        where = (
            f"em {kind} com query de forma {(b, t, d)}, key_value de forma {(b, s, d)} e "
            f"num_heads={h}"
        )
        with torch.no_grad():
            expected = mha(query, key_value)[0]  # (b, t, d)
            try:
                received = multihead_forward(query, key_value, mha)
            except NotImplementedError:
                raise
            except RuntimeError as err:
                if t != s:
                    expect(
                        False,
                        f"{where} sua função levantou RuntimeError ({err}). Com t != s, K e V "
                        f"devem ser reorganizados com o comprimento DELES: view(b, s, h, d_h) "
                        f"com s={s}, não com t={t}.",
                    )
                raise
        expect(
            isinstance(received, Tensor),
            f"{where} esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where} esperava a forma {(b, t, d)} (b, t, d); recebi {_shape(received)}.",
        )
        if torch.allclose(received, expected, atol=_FORWARD_ATOL, rtol=0):
            continue
        with torch.no_grad():
            concat = _concat_heads(query, key_value, mha)  # (b, t, d), antes de W_O
        expect(
            not torch.allclose(received, concat, atol=_FORWARD_ATOL, rtol=0),
            f"{where} sua saída é a concatenação das cabeças, mas falta a projeção final "
            "W_O: aplique mha.out_proj no fim.",
        )
        expect(
            False,
            f"{where} a saída difere de mha(query, key_value)[0] (diferença máxima "
            f"{_max_diff(received, expected)}, tolerância {_FORWARD_ATOL}). Confira: projetar "
            "Q com query e K, V com key_value; dividir em cabeças com view + transpose(1, 2); "
            "uma chamada de tpt.scaled_dot_product_attention; transpose(1, 2) + reshape para "
            "(b, t, d); mha.out_proj.",
        )


def _concat_heads(query: Tensor, key_value: Tensor, mha: MultiHeadAttention) -> Tensor:
    """Referência sem ``W_O``: a concatenação das cabeças ``(b, t, d)``."""
    b, t, d = query.shape
    s = key_value.shape[1]
    h, d_h = mha.num_heads, mha.head_dim
    q = mha.q_proj(query).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    k = mha.k_proj(key_value).view(b, s, h, d_h).transpose(1, 2)  # (b, h, s, d_h)
    v = mha.v_proj(key_value).view(b, s, h, d_h).transpose(1, 2)  # (b, h, s, d_h)
    out, _ = scaled_dot_product_attention(q, k, v)  # (b, h, t, d_h)
    return out.transpose(1, 2).reshape(b, t, d)  # (b, t, d)


# --------------------------------------------------------------------------------------
# Exercício 3: contar parâmetros
# --------------------------------------------------------------------------------------

# (embed_dim, num_heads, num_kv_heads, bias)
_PARAM_CASES: list[tuple[int, int, int | None, bool]] = [
    (16, 4, None, True),
    (512, 8, None, True),
    (512, 1, None, True),
    (32, 4, None, False),
    (64, 8, 2, True),
    (64, 8, 1, True),
    (48, 6, 3, False),
]


def _reference_count(embed_dim: int, num_heads: int, num_kv_heads: int | None, bias: bool) -> int:
    with torch.random.fork_rng(devices=[]):  # não mexe no gerador global do aluno
        module = MultiHeadAttention(embed_dim, num_heads, num_kv_heads, bias=bias)
    return sum(p.numel() for p in module.parameters())


@exercise("Exercício 3 (número de parâmetros)")
def check_num_parameters(num_parameters: Callable[..., int]) -> None:
    """``num_parameters(embed_dim, num_heads, num_kv_heads=None, bias=True) -> int``."""
    for d, h, h_kv, bias in _PARAM_CASES:
        expected = _reference_count(d, h, h_kv, bias)
        received = num_parameters(d, h, num_kv_heads=h_kv, bias=bias)
        where = f"para embed_dim={d}, num_heads={h}, num_kv_heads={h_kv}, bias={bias}"
        expect(
            isinstance(received, numbers.Integral) and not isinstance(received, bool),
            f"{where} esperava um int; recebi {type(received).__name__} ({received!r}).",
        )
        received = int(received)
        if received == expected:
            continue
        expect(
            received != 4 * h * d * d + (4 * h * d if bias else 0),
            f"{where} esperava {expected}, recebi {received}: parece que cada cabeça ganhou "
            "matrizes d x d próprias. As h cabeças DIVIDEM as mesmas 4 matrizes d x d "
            "(cada uma usa d/h colunas), então o total não depende de num_heads.",
        )
        d_h = d // h
        kv_dim = (h if h_kv is None else h_kv) * d_h
        full = 4 * d * d + (4 * d if bias else 0)
        formula = "4 d^2 + 4 d" if bias else "4 d^2"
        expect(
            not (h_kv is not None and h_kv != h and received == full),
            f"{where} esperava {expected}, recebi {received} = {formula}, que vale só "
            f"com num_kv_heads = num_heads. Com num_kv_heads={h_kv}, k_proj e v_proj "
            f"produzem num_kv_heads * d_h = {kv_dim} colunas, não {d}.",
        )
        bias_count = 2 * d + 2 * kv_dim  # vieses de q_proj e out_proj (d) e de k_proj e v_proj
        expect(
            not (bias and received == expected - bias_count),
            f"{where} esperava {expected}, recebi {received}: faltam os vieses "
            f"({bias_count} com bias=True).",
        )
        expect(
            not (not bias and received == expected + bias_count),
            f"{where} esperava {expected}, recebi {received}: com bias=False não há vieses; "
            f"tire os {bias_count}.",
        )
        expect(False, f"{where} esperava {expected}, recebi {received}.")
