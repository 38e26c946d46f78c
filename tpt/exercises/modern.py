"""Conferências dos exercícios de notebooks/10_transformers_modernos.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_rope_half`: o RoPE no arranjo "metade e metade" do GPT-NeoX e do Hugging
   Face (``rotate_half``; o LLaMA original, como o ``tpt``, gira pares vizinhos): a
   coordenada ``i`` forma par com a ``i + d/2``, não com a vizinha. Sem usar
   ``tpt.apply_rope`` nem ``tpt.RotaryEmbedding``.
2. :func:`check_gqa_attention`: a atenção com consultas agrupadas (GQA) a partir de
   ``q`` ``(b, h, t, d_h)`` e ``k``/``v`` ``(b, h_kv, s, d_h)``, **sem** repetir K e V
   (nada de ``repeat_interleave``, ``repeat``, ``expand``, ``tile``, ``cat``/``stack``
   nem a função fundida do PyTorch).
3. :func:`check_merge_partials`: juntar dois resultados parciais de atenção, cada um
   calculado sobre um bloco de chaves e guardado como (saída normalizada, log-soma-exp),
   como na decodificação com K/V dividido entre vários processadores. A conta precisa
   ser estável (pontuações grandes não podem virar ``inf``/``NaN``).

As regras ditas nos enunciados são conferidas: as funções proibidas são trocadas por
versões que levantam um erro explicado durante a chamada do aluno (``forbid``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import tpt
import tpt.attention
import tpt.positional
from tpt.exercises import exercise, expect, forbid
from tpt.numfmt import fmt

__all__ = ["check_rope_half", "check_gqa_attention", "check_merge_partials"]

_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _close(received: Tensor, expected: Tensor, atol: float = _ATOL) -> bool:
    return received.shape == expected.shape and torch.allclose(
        received.detach().double(), expected.double(), atol=atol, rtol=0
    )


def _max_diff(a: Tensor, b: Tensor) -> str:
    return fmt((a.detach().double() - b.double()).abs().max().item(), sci=True)


def _as_tensor(value: Any, where: str) -> Tensor:
    expect(
        isinstance(value, Tensor),
        f"{where}: esperava um tensor; recebi {type(value).__name__}.",
    )
    return value.detach().cpu()


# --------------------------------------------------------------------------------------
# Exercício 1: RoPE "metade e metade" (rotate_half)
# --------------------------------------------------------------------------------------
def _half_angles(
    t: int, d: int, theta: float, *, start: int = 0, scale: float = 2.0, interleave: bool = False
) -> Tensor:
    """Ângulos ``(t, d)`` do arranjo metade-e-metade (ou, com erro, intercalados)."""
    half = d // 2
    freqs = theta ** (-scale * torch.arange(half, dtype=torch.float64) / d)  # (d/2,)
    positions = torch.arange(start, start + t, dtype=torch.float64)  # (t,)
    angles = positions[:, None] * freqs[None, :]  # (t, d/2)
    if interleave:
        return angles.repeat_interleave(2, dim=-1)  # (t, d): erro comum
    return torch.cat((angles, angles), dim=-1)  # (t, d): j e j + d/2 com o mesmo ângulo


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (..., d)


def _rope_half_reference(x: Tensor, theta: float, **kwargs: Any) -> Tensor:
    t, d = x.shape[-2], x.shape[-1]
    angles = _half_angles(t, d, theta, **kwargs)  # (t, d)
    return x * torch.cos(angles) + _rotate_half(x) * torch.sin(angles)


def _rope_interleaved(x: Tensor, theta: float) -> Tensor:
    t, d = x.shape[-2], x.shape[-1]
    rope = tpt.positional.RotaryEmbedding(d, max_len=t, theta=theta).double()
    return rope(x)


_ROPE_CASES: list[tuple[tuple[int, ...], float]] = [
    ((1, 6, 8), 10000.0),
    ((2, 3, 5, 16), 10000.0),
    ((7, 4), 100.0),
    ((2, 2, 9, 6), 500.0),
]


@contextlib.contextmanager
def _no_tpt_rope() -> Iterator[None]:
    reason = (
        "o exercício pede o RoPE escrito por você: não use tpt.apply_rope nem "
        "tpt.RotaryEmbedding (eles usam o outro arranjo, com pares vizinhos)."
    )
    with contextlib.ExitStack() as stack:
        for owner in (tpt, tpt.positional):
            stack.enter_context(forbid(owner, "apply_rope", reason))
        stack.enter_context(forbid(tpt.positional.RotaryEmbedding, "forward", reason))
        yield


def _relative_gap(rope: Callable[..., Tensor], d: int, theta: float) -> float:
    """Maior variação de <rope(q)_p, rope(k)_p'> entre pares (p, p') com o mesmo p - p'."""
    generator = torch.Generator().manual_seed(11)
    q, k = torch.randn(2, d, generator=generator, dtype=torch.float64)
    t = 8
    with _no_tpt_rope():
        rq = rope(q.expand(t, d).clone(), theta)  # (t, d): q em todas as posições
        rk = rope(k.expand(t, d).clone(), theta)  # (t, d): k em todas as posições
    scores = rq.detach().double() @ rk.detach().double().T  # (t, t): [p, p']
    gap = 0.0
    for offset in range(-(t - 1), t):
        diag = torch.diagonal(scores, offset=-offset)  # pares com p - p' = offset
        gap = max(gap, float(diag.max() - diag.min()))
    return gap


@exercise("Exercício 1 (RoPE metade e metade)")
def check_rope_half(rope_half: Callable[[Tensor, float], Tensor]) -> None:
    """``rope_half(x (..., t, d), theta) -> (..., t, d)`` no arranjo ``rotate_half``."""
    generator = torch.Generator().manual_seed(7)
    for shape, theta in _ROPE_CASES:
        x = torch.randn(*shape, generator=generator, dtype=torch.float64)
        where = f"para x de forma {shape} e theta={theta:g}"
        original = x.clone()
        with _no_tpt_rope():
            received = rope_half(x, theta)
        received = _as_tensor(received, where)
        expect(
            torch.equal(x, original),
            f"{where}: sua função modificou x no lugar; devolva um tensor novo.",
        )
        expect(
            received.shape == x.shape,
            f"{where}: esperava a forma {shape} (a mesma da entrada); recebi {_shape(received)}.",
        )
        expected = _rope_half_reference(x, theta)
        if _close(received, expected):
            continue
        d = shape[-1]
        if d > 2:
            expect(
                not _close(received, _rope_interleaved(x, theta)),
                f"{where}: você girou pares de coordenadas vizinhas (2i, 2i+1), o arranjo do "
                "tpt e do artigo RoFormer. Aqui os pares são (i, i + d/2): a primeira metade "
                "do vetor forma par com a segunda metade.",
            )
        expect(
            not _close(received, _rope_half_reference(x, theta, interleave=True)),
            f"{where}: o ângulo da coordenada j deve ser o mesmo da coordenada j + d/2 "
            "(são um par). Repita as frequências com torch.cat((f, f)), não com "
            "repeat_interleave, que é para pares vizinhos.",
        )
        backwards = x * torch.cos(_half_angles(shape[-2], d, theta)) - _rotate_half(x) * torch.sin(
            _half_angles(shape[-2], d, theta)
        )
        expect(
            not _close(received, backwards),
            f"{where}: a rotação está no sentido contrário (ângulo -p·ω). O par (x1, x2) "
            "vira (x1 cos - x2 sin, x2 cos + x1 sin).",
        )
        expect(
            not _close(received, _rope_half_reference(x, theta, scale=1.0)),
            f"{where}: o expoente da frequência está errado: ω_i = 1 / theta^(2i/d), com 2i, "
            "não i.",
        )
        expect(
            not _close(received, _rope_half_reference(x, theta, start=1)),
            f"{where}: as posições começam em 0 (o primeiro token não é girado), não em 1.",
        )
        norms_kept = torch.allclose(
            received.double().norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5
        )
        expect(
            norms_kept,
            f"{where}: a norma de cada vetor mudou, então isto não é uma rotação. Use cos e "
            "sin do mesmo ângulo nos dois membros de cada par.",
        )
        expect(
            False,
            f"{where}: a saída difere da referência (diferença máxima "
            f"{_max_diff(received, expected)}, tolerância {fmt(_ATOL, sci=True)}).",
        )
    gap = _relative_gap(rope_half, 8, 10000.0)
    expect(
        gap < 1e-6,
        f"<R(p)q, R(p')k> deveria depender só de p - p', mas variou {fmt(gap, sci=True)} "
        "entre pares com o mesmo deslocamento.",
    )


# --------------------------------------------------------------------------------------
# Exercício 2: GQA sem repetir K e V
# --------------------------------------------------------------------------------------
_GQA_CASES: list[tuple[int, int, int, int, int, int]] = [  # (b, h, h_kv, t, s, d_h)
    (2, 4, 2, 3, 5, 8),
    (1, 6, 3, 4, 4, 4),
    (2, 4, 1, 5, 3, 8),  # MQA
    (1, 3, 3, 2, 6, 4),  # MHA
    (1, 8, 2, 1, 7, 2),
]

_NO_REPEAT = (
    "o exercício pede GQA sem repetir K e V: não use {name}. Agrupe as consultas: "
    "q.view(b, h_kv, g, t, d_h) (ou g * t linhas por grupo) contra k de forma (b, h_kv, s, d_h)."
)


@contextlib.contextmanager
def _no_repeat() -> Iterator[None]:
    forbidden = [
        (torch, "repeat_interleave", "torch.repeat_interleave"),
        (Tensor, "repeat_interleave", "Tensor.repeat_interleave"),
        (Tensor, "repeat", "Tensor.repeat"),
        (Tensor, "expand", "Tensor.expand"),
        (Tensor, "expand_as", "Tensor.expand_as"),
        (torch, "tile", "torch.tile"),
        (Tensor, "tile", "Tensor.tile"),
        (torch, "cat", "torch.cat"),
        (torch, "concat", "torch.concat"),
        (torch, "stack", "torch.stack"),
        (torch, "broadcast_to", "torch.broadcast_to"),
        (F, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
        (tpt, "scaled_dot_product_attention", "tpt.scaled_dot_product_attention"),
        (tpt.attention, "scaled_dot_product_attention", "tpt.scaled_dot_product_attention"),
        (tpt, "MultiHeadAttention", "tpt.MultiHeadAttention"),
    ]
    with contextlib.ExitStack() as stack:
        for owner, attr, name in forbidden:
            stack.enter_context(forbid(owner, attr, _NO_REPEAT.format(name=name)))
        yield


def _gqa_reference(q: Tensor, k: Tensor, v: Tensor, *, modulo: bool = False) -> Tensor:
    h, h_kv = q.shape[1], k.shape[1]
    group = h // h_kv
    if modulo:  # erro comum: cabeça j usa a cabeça de K/V j % h_kv
        heads = torch.arange(h) % h_kv
    else:
        heads = torch.arange(h) // group
    k, v = k[:, heads], v[:, heads]  # (b, h, s, d_h)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, h, t, s)
    return torch.softmax(scores, dim=-1) @ v  # (b, h, t, d_h)


@exercise("Exercício 2 (GQA sem repetir K e V)")
def check_gqa_attention(gqa_attention: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """``gqa_attention(q (b, h, t, d_h), k, v (b, h_kv, s, d_h)) -> (b, h, t, d_h)``."""
    generator = torch.Generator().manual_seed(3)
    for b, h, h_kv, t, s, d_h in _GQA_CASES:
        q = torch.randn(b, h, t, d_h, generator=generator, dtype=torch.float64)
        k = torch.randn(b, h_kv, s, d_h, generator=generator, dtype=torch.float64)
        v = torch.randn(b, h_kv, s, d_h, generator=generator, dtype=torch.float64)
        where = (
            f"para q {(b, h, t, d_h)}, k e v {(b, h_kv, s, d_h)} "
            f"(h={h}, h_kv={h_kv}, grupos de {h // h_kv})"
        )
        with _no_repeat():
            received = gqa_attention(q, k, v)
        received = _as_tensor(received, where)
        expected = _gqa_reference(q, k, v)
        if tuple(received.shape) == (b, h_kv, (h // h_kv) * t, d_h) and h_kv != h:
            expect(
                False,
                f"{where}: recebi a forma {_shape(received)} = (b, h_kv, g·t, d_h); falta "
                f"desfazer o agrupamento e voltar para (b, h, t, d_h) = {(b, h, t, d_h)}.",
            )
        expect(
            tuple(received.shape) == (b, h, t, d_h),
            f"{where}: esperava a forma {(b, h, t, d_h)} (b, h, t, d_h); "
            f"recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        expect(
            h_kv in (1, h) or not _close(received, _gqa_reference(q, k, v, modulo=True)),
            f"{where}: a cabeça de consulta j deve usar a cabeça de K/V j // g (grupos de "
            "cabeças vizinhas, como repeat_interleave no tpt), não j % h_kv (que é o que "
            "repeat faria). Com view(b, h_kv, g, t, d_h), as g cabeças de um grupo são "
            "vizinhas.",
        )
        unscaled = _gqa_reference(q * math.sqrt(d_h), k, v)
        expect(
            not _close(received, unscaled),
            f"{where}: faltou dividir as pontuações por sqrt(d_h) = sqrt({d_h}).",
        )
        expect(
            False,
            f"{where}: a saída difere da atenção de referência (diferença máxima "
            f"{_max_diff(received, expected)}, tolerância {fmt(_ATOL, sci=True)}). Confira o "
            "softmax sobre as chaves (dim=-1) e a escala 1/sqrt(d_h).",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: juntar dois resultados parciais (saída, log-soma-exp)
# --------------------------------------------------------------------------------------
def _partial(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Atenção só sobre estas chaves: (saída normalizada (..., t, d_v), lse (..., t, 1))."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., t, s)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (..., t, 1)
    return torch.exp(scores - lse) @ v, lse


def _call_merge(
    merge: Callable[..., Any], a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], where: str
) -> tuple[Tensor, Tensor]:
    result = merge(a[0].clone(), a[1].clone(), b[0].clone(), b[1].clone())
    expect(
        isinstance(result, tuple) and len(result) == 2,
        f"{where}: esperava uma tupla (saída, lse); recebi {type(result).__name__}"
        + (f" com {len(result)} itens" if isinstance(result, tuple) else "")
        + ".",
    )
    out = _as_tensor(result[0], f"{where} (saída)")
    lse = _as_tensor(result[1], f"{where} (lse)")
    return out, lse


_MERGE_CASES: list[tuple[tuple[int, ...], int, int, float]] = [  # (lote, t, s, escala)
    ((1,), 3, 8, 1.0),
    ((2, 2), 4, 10, 1.0),
    ((1,), 5, 6, 1000.0),  # pontuações enormes: exp direto estoura
]


@exercise("Exercício 3 (juntar resultados parciais)")
def check_merge_partials(merge: Callable[[Tensor, Tensor, Tensor, Tensor], Any]) -> None:
    """``merge(o1, lse1, o2, lse2) -> (o, lse)`` da atenção sobre a união das chaves."""
    generator = torch.Generator().manual_seed(21)
    for batch, t, s, scale in _MERGE_CASES:
        d = 4
        q = torch.randn(*batch, t, d, generator=generator, dtype=torch.float64) * scale
        k = torch.randn(*batch, s, d, generator=generator, dtype=torch.float64)
        v = torch.randn(*batch, s, d, generator=generator, dtype=torch.float64)
        cut = s // 3
        first = _partial(q, k[..., :cut, :], v[..., :cut, :])
        second = _partial(q, k[..., cut:, :], v[..., cut:, :])
        full_out, full_lse = _partial(q, k, v)
        where = f"para {s} chaves divididas em blocos de {cut} e {s - cut}" + (
            f" (pontuações grandes, lse até {fmt(full_lse.abs().max().item(), 0)})"
            if scale > 1
            else ""
        )
        out, lse = _call_merge(merge, first, second, where)
        expect(
            out.shape == full_out.shape,
            f"{where}: a saída deveria ter forma {tuple(full_out.shape)}; recebi {_shape(out)}.",
        )
        expect(
            lse.shape == full_lse.shape,
            f"{where}: o lse deveria ter forma {tuple(full_lse.shape)} (..., t, 1); "
            f"recebi {_shape(lse)}.",
        )
        if not (torch.isfinite(out).all() and torch.isfinite(lse).all()):
            expect(
                False,
                f"{where}: apareceu inf ou NaN. exp(lse) estoura quando as pontuações são "
                "grandes (exp(800) não cabe num float); subtraia o máximo antes da "
                "exponencial (ou use torch.logaddexp).",
            )
        if _close(out, full_out) and _close(lse, full_lse):
            continue
        if _close(out, full_out):
            bad = (first[1] + second[1], torch.maximum(first[1], second[1]))
            expect(
                not any(_close(lse, wrong) for wrong in bad),
                f"{where}: a saída está certa, mas o lse da união é "
                "log(exp(lse1) + exp(lse2)) (torch.logaddexp), não a soma nem o máximo.",
            )
            expect(
                False,
                f"{where}: a saída está certa, mas o lse difere (diferença máxima "
                f"{_max_diff(lse, full_lse)}).",
            )
        average = (first[0] + second[0]) / 2
        expect(
            not _close(out, average),
            f"{where}: a média simples das duas saídas ignora quanta massa de softmax cada "
            "bloco tem. Pese cada saída por exp(lse_i - lse), com lse = logaddexp(lse1, lse2).",
        )
        swapped_w1 = torch.exp(second[1] - full_lse)
        swapped = first[0] * swapped_w1 + second[0] * torch.exp(first[1] - full_lse)
        expect(
            not _close(out, swapped),
            f"{where}: os pesos estão trocados: a saída do bloco 1 é pesada por "
            "exp(lse1 - lse), a do bloco 2 por exp(lse2 - lse).",
        )
        expect(
            False,
            f"{where}: a saída difere da atenção sobre todas as chaves (diferença máxima "
            f"{_max_diff(out, full_out)}, tolerância {fmt(_ATOL, sci=True)}).",
        )
    # Três blocos, juntados em sequência: merge(merge(A, B), C).
    q = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 9, 4, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 9, 4, generator=generator, dtype=torch.float64)
    blocks = [_partial(q, k[:, i : i + 3], v[:, i : i + 3]) for i in (0, 3, 6)]
    where = "juntando três blocos de 3 chaves, merge(merge(A, B), C)"
    ab = _call_merge(merge, blocks[0], blocks[1], where)
    out, lse = _call_merge(merge, ab, blocks[2], where)
    full_out, full_lse = _partial(q, k, v)
    expect(
        _close(out, full_out) and _close(lse, full_lse),
        f"{where}: o resultado difere da atenção sobre as 9 chaves (diferença máxima "
        f"{_max_diff(out, full_out)}).",
    )
