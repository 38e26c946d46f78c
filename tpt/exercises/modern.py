"""Exercícios do notebook 10 (Transformers modernos): ``ex = checks("modern")``.

1. :func:`check_rope_half`: o RoPE no arranjo "metade e metade" (``rotate_half`` do
   GPT-NeoX e do Hugging Face): a coordenada ``i`` forma par com a ``i + d/2``.
2. :func:`check_gqa_attention`: a atenção com consultas agrupadas (GQA) sem repetir K e V:
   nenhum tensor do tamanho de K (ou V) repetido ``g`` vezes pode ser criado durante a
   chamada, nem pela resposta nem pelo PyTorch por baixo (um ``matmul`` com broadcast
   copia o operando expandido).
3. :func:`check_merge_partials`: juntar dois resultados parciais de atenção (saída
   normalizada, log-soma-exp), como no Flash-Decoding e na atenção em anel.

As três contas ficam num caminho treinável (consultas e chaves de um modelo, a atenção
do treino em anel): a conferência passa entradas que pedem gradiente e compara os
gradientes com os da referência. Há casos fixos e casos sorteados a cada execução; um
diagnóstico só aparece quando a variante errada correspondente foi calculada e bateu.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.exercises.core import exercise, expect, expect_close, max_abs_diff
from tpt.exercises.guards import call_answer, case_generator, check_gradients
from tpt.exercises.rules import (
    ATTENTION_KERNEL_OPS,
    record_ops,
    record_python_calls,
    record_torch_calls,
)
from tpt.numfmt import fmt
from tpt.positional import RotaryEmbedding, apply_rope

__all__ = ["check_rope_half", "check_gqa_attention", "check_merge_partials"]

_ATOL = 1e-5


# --------------------------------------------------------------------------------------
# Exercício 1: RoPE "metade e metade"
# --------------------------------------------------------------------------------------
_ROPE_HINT = (
    "Confira a assinatura, rope_half(x, theta), e as formas: x tem forma (..., t, d), as "
    "posições estão no penúltimo eixo e os pares são (x[..., i], x[..., i + d/2])."
)


def _rope_half(
    x: Tensor,
    theta: float,
    *,
    start: int = 0,
    scale: float = 2.0,
    sign: float = 1.0,
    angles: str = "cat",
) -> Tensor:
    """RoPE metade e metade (ou, com os argumentos, um engano típico). ``(..., t, d)``."""
    t, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freqs = theta ** (-scale * torch.arange(half, dtype=torch.float64) / d)  # (d/2,)
    pos = torch.arange(start, start + t, dtype=torch.float64)[:, None] * freqs  # (t, d/2)
    if angles == "cat":
        pos = torch.cat((pos, pos), dim=-1)  # (t, d): i e i + d/2 com o mesmo ângulo
    else:
        pos = pos.repeat_interleave(2, dim=-1)  # (t, d): ângulos de pares vizinhos
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (..., t, d)
    return x * pos.cos().to(x.dtype) + sign * rotated * pos.sin().to(x.dtype)


def _rope_pairs(x: Tensor, theta: float) -> Tensor:
    """O arranjo do tpt (pares vizinhos), para reconhecer a confusão entre os dois."""
    t, d = x.shape[-2], x.shape[-1]
    freqs = theta ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    pos = torch.arange(t, dtype=torch.float64)[:, None] * freqs  # (t, d/2)
    cos, sin = pos.cos().to(x.dtype), pos.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., t, d/2)
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


_ROPE_VARIANTS: list[tuple[str, Callable[[Tensor, float], Tensor]]] = [
    (
        "você girou pares de coordenadas vizinhas (2i, 2i+1), o arranjo do tpt e do RoFormer. "
        "Aqui os pares são (i, i + d/2): a primeira metade do vetor com a segunda.",
        _rope_pairs,
    ),
    (
        "o ângulo da coordenada j deve ser o mesmo da j + d/2 (as duas formam um par): repita "
        "as frequências com torch.cat((f, f)), não com repeat_interleave, que serve a pares "
        "vizinhos.",
        lambda x, th: _rope_half(x, th, angles="interleave"),
    ),
    (
        "a rotação está no sentido contrário (ângulo -p·ω): o par (x1, x2) vira "
        "(x1 cos - x2 sin, x2 cos + x1 sin).",
        lambda x, th: _rope_half(x, th, sign=-1.0),
    ),
    (
        "o expoente da frequência está errado: ω_i = theta^(-2i/d), com 2i, não i.",
        lambda x, th: _rope_half(x, th, scale=1.0),
    ),
    (
        "as posições começam em 0 (o primeiro token não é girado), não em 1.",
        lambda x, th: _rope_half(x, th, start=1),
    ),
]


def _rope_cases(gen: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...], float]]:
    d = 2 * int(torch.randint(2, 9, (), generator=gen))
    t = int(torch.randint(2, 10, (), generator=gen))
    b = int(torch.randint(1, 4, (), generator=gen))
    theta = float(torch.randint(50, 20000, (), generator=gen))
    return [
        ("x de forma (1, 6, 8), theta=10000", (1, 6, 8), 10000.0),
        ("x de forma (2, 3, 5, 16), theta=10000", (2, 3, 5, 16), 10000.0),
        ("x de forma (7, 4), theta=100", (7, 4), 100.0),
        (
            f"x de forma {(b, t, d)}, theta={fmt(theta, 0)} (caso sorteado, semente {seed})",
            (b, t, d),
            theta,
        ),
    ]


@exercise("Exercício 1 (RoPE metade e metade)")
def check_rope_half(rope_half: Callable[[Tensor, float], Tensor]) -> None:
    """``rope_half(x (..., t, d), theta) -> (..., t, d)`` no arranjo ``rotate_half``."""
    gen, seed = case_generator()
    for description, shape, theta in _rope_cases(gen, seed):
        where = f"Para {description}"
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        with record_python_calls() as codes:
            received = call_answer(rope_half, {"x": x, "theta": theta}, where, _ROPE_HINT)
        expect(
            not {apply_rope.__code__, RotaryEmbedding.forward.__code__} & codes,
            f"{where}, sua função usou tpt.apply_rope ou tpt.RotaryEmbedding (que giram pares "
            "vizinhos): o exercício pede a rotação metade e metade escrita por você.",
        )
        expected = _rope_half(x, theta)
        variants = [(diagnosis, wrong(x, theta)) for diagnosis, wrong in _ROPE_VARIANTS]
        if isinstance(received, Tensor) and received.shape == x.shape:
            norms = received.detach().double().norm(dim=-1)  # (..., t)
            change = max_abs_diff(norms, x.norm(dim=-1))
            expect(
                change <= 1e-4 or not _far_from_all(received, expected, variants),
                f"{where}, a norma de algum vetor mudou (em até {fmt(change, 2, sci=True)}): "
                "uma rotação preserva a norma. Use o cos e o sin do MESMO ângulo nos dois "
                "membros de cada par.",
            )
        expect_close(received, expected, where, atol=_ATOL, variants=variants)
    # float32: o gradiente que volta tem o dtype da saída, o mesmo na resposta e na referência.
    x = torch.randn(2, 5, 6, generator=gen)
    check_gradients(
        rope_half,
        _rope_half,
        {"x": x, "theta": 500.0},
        "No teste de gradiente (x (2, 5, 6), float32)",
        wrt=("x",),
        atol=1e-4,
    )


def _far_from_all(received: Tensor, expected: Tensor, variants: list[tuple[str, Tensor]]) -> bool:
    """A resposta não bate nem com o esperado nem com nenhuma variante calculada?"""
    return all(max_abs_diff(received, ref) > _ATOL for ref in [expected, *(w for _, w in variants)])


# --------------------------------------------------------------------------------------
# Exercício 2: GQA sem repetir K e V
# --------------------------------------------------------------------------------------
_GQA_HINT = (
    "Confira a assinatura, gqa_attention(q, k, v), e as formas: q é (b, h, t, d_h) e k, v "
    "são (b, h_kv, s, d_h); as g = h / h_kv cabeças de um grupo podem virar g·t linhas de "
    "consulta, q.reshape(b, h_kv, g * t, d_h)."
)


def _gqa(
    q: Tensor, k: Tensor, v: Tensor, *, modulo: bool = False, scale: bool = True, dim: int = -1
) -> Tensor:
    """GQA de referência (ou um engano típico): ``(b, h, t, d_h)``."""
    h, h_kv = q.shape[1], k.shape[1]
    heads = torch.arange(h) % h_kv if modulo else torch.arange(h) // (h // h_kv)
    scores = q @ k[:, heads].transpose(-2, -1)  # (b, h, t, s)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=dim) @ v[:, heads]  # (b, h, t, d_h)


def _gqa_softmax_over_rows(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Engano típico: softmax sobre as g·t linhas de consulta do grupo, não sobre as chaves."""
    b, h, t, d_h = q.shape
    grouped = q.reshape(b, k.shape[1], -1, d_h)  # (b, h_kv, g·t, d_h)
    weights = torch.softmax(grouped @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-2)
    return (weights @ v).reshape(b, h, t, d_h)


def _gqa_cases(gen: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    """(descrição, (b, h, h_kv, t, s, d_h)). Com t < s e t < d_h, nenhum tensor legítimo da
    conta (q, pontuações, saída) chega ao tamanho de K repetido g vezes."""
    h_kv = int(torch.randint(1, 4, (), generator=gen))
    g = int(torch.randint(2, 4, (), generator=gen))
    t = int(torch.randint(1, 4, (), generator=gen))
    s = t + int(torch.randint(1, 6, (), generator=gen))
    d_h = t + int(torch.randint(1, 6, (), generator=gen))
    b = int(torch.randint(1, 3, (), generator=gen))
    random = (b, g * h_kv, h_kv, t, s, d_h)
    return [
        ("h=4, h_kv=2 (grupos de 2)", (2, 4, 2, 3, 5, 8)),
        ("h=6, h_kv=3 (grupos de 2)", (1, 6, 3, 2, 4, 5)),
        ("h=4, h_kv=1 (MQA)", (2, 4, 1, 1, 7, 4)),
        ("h=3, h_kv=3 (MHA: grupos de 1)", (1, 3, 3, 2, 6, 4)),
        (f"h={g * h_kv}, h_kv={h_kv} (caso sorteado, semente {seed})", random),
    ]


_ATTENTION_FUNCTIONS = {"scaled_dot_product_attention", "multi_head_attention_forward"}


@exercise("Exercício 2 (GQA sem repetir K e V)")
def check_gqa_attention(gqa_attention: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """``gqa_attention(q (b, h, t, d_h), k, v (b, h_kv, s, d_h)) -> (b, h, t, d_h)``."""
    gen, seed = case_generator()
    for description, (b, h, h_kv, t, s, d_h) in _gqa_cases(gen, seed):
        g = h // h_kv
        where = f"Para q {(b, h, t, d_h)} e k, v {(b, h_kv, s, d_h)}, {description}"
        q, k, v = (
            torch.randn(*shape, generator=gen, dtype=torch.float64)
            for shape in ((b, h, t, d_h), (b, h_kv, s, d_h), (b, h_kv, s, d_h))
        )
        with record_ops() as ops, record_torch_calls() as calls:
            received = call_answer(gqa_attention, {"q": q, "k": k, "v": v}, where, _GQA_HINT)
        # O núcleo fundido pelo nome ATen, ou a função do PyTorch por qualquer caminho (no
        # torch 2.6, o F.scaled_dot_product_attention com GQA na CPU vira contas comuns).
        fused = ops.used(ATTENTION_KERNEL_OPS) | (calls & _ATTENTION_FUNCTIONS)
        expect(
            not fused,
            f"{where}, sua função usou a atenção fundida do PyTorch ({', '.join(sorted(fused))}): "
            "o exercício pede a conta escrita por você.",
        )
        copies = [(op, shape) for op, shape in ops.outputs if math.prod(shape) >= g * k.numel()]
        expect(
            g == 1 or not copies,
            f"{where}, durante a chamada foi criado um tensor {copies[0][1] if copies else ''} "
            f"(pela operação {copies[0][0] if copies else ''}) com {g} vezes os elementos de K: "
            "K ou V foram repetidos, por você ou pelo PyTorch por baixo (um matmul entre "
            "(b, h_kv, g, t, d_h) e (b, h_kv, 1, d_h, s) copia K expandido). Junte as g "
            "cabeças de um grupo como g·t linhas de consulta.",
        )
        if isinstance(received, Tensor) and tuple(received.shape) == (b, h_kv, g * t, d_h):
            expect(
                g == 1,
                f"{where}, recebi a forma (b, h_kv, g·t, d_h) = {tuple(received.shape)}: falta "
                f"desfazer o agrupamento e voltar a (b, h, t, d_h) = {(b, h, t, d_h)}.",
            )
        variants = [
            (
                "a cabeça de consulta j usou a cabeça de K/V j % h_kv (o que .repeat daria); "
                "ela usa j // g, porque as g cabeças de um grupo são vizinhas.",
                _gqa(q, k, v, modulo=True),
            ),
            ("faltou dividir as pontuações por sqrt(d_h).", _gqa(q, k, v, scale=False)),
            (
                "o softmax foi tirado sobre as consultas; ele é sobre as chaves (dim=-1).",
                _gqa(q, k, v, dim=-2),
            ),
            (
                "o softmax foi tirado sobre as g·t linhas de consulta do grupo; ele é sobre as "
                "chaves (dim=-1).",
                _gqa_softmax_over_rows(q, k, v),
            ),
        ]
        expect_close(received, _gqa(q, k, v), where, atol=_ATOL, variants=variants)
    q, k, v = (
        torch.randn(*shape, generator=gen, dtype=torch.float64)
        for shape in ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5))
    )
    check_gradients(
        gqa_attention,
        _gqa,
        {"q": q, "k": k, "v": v},
        "No teste de gradiente (h=4, h_kv=2)",
        atol=1e-6,
    )


# --------------------------------------------------------------------------------------
# Exercício 3: juntar dois resultados parciais (saída, log-soma-exp)
# --------------------------------------------------------------------------------------
_MERGE_HINT = (
    "Confira a assinatura, merge(o1, lse1, o2, lse2), e as formas: o1, o2 são (..., t, d_v) e "
    "lse1, lse2 são (..., t, 1); devolva a tupla (o, lse)."
)


def _partial(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Atenção só sobre estas chaves: (saída normalizada (..., t, d_v), lse (..., t, 1))."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., t, s)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (..., t, 1)
    return torch.exp(scores - lse) @ v, lse


def _merge(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    lse = torch.logaddexp(lse1, lse2)  # (..., t, 1)
    return o1 * torch.exp(lse1 - lse) + o2 * torch.exp(lse2 - lse), lse


def _merge_cases(
    gen: torch.Generator, seed: int
) -> list[tuple[str, tuple[int, ...], int, int, float]]:
    """(descrição, lote, t, s, escala das consultas)."""
    t = int(torch.randint(1, 5, (), generator=gen))
    s = int(torch.randint(4, 12, (), generator=gen))
    return [
        ("lote (1,), 3 consultas, 8 chaves", (1,), 3, 8, 1.0),
        ("lote (2, 2), 4 consultas, 10 chaves", (2, 2), 4, 10, 1.0),
        ("pontuações enormes (lse perto de mil)", (1,), 5, 6, 1000.0),
        (
            f"lote (2,), {t} consultas, {s} chaves (caso sorteado, semente {seed})",
            (2,),
            t,
            s,
            float(torch.empty(()).uniform_(0.5, 3, generator=gen)),
        ),
    ]


def _call_merge(
    merge: Callable[..., Any],
    first: tuple[Tensor, Tensor],
    second: tuple[Tensor, Tensor],
    where: str,
) -> tuple[Tensor, Tensor]:
    args = {"o1": first[0], "lse1": first[1], "o2": second[0], "lse2": second[1]}
    result = call_answer(merge, args, where, _MERGE_HINT)
    expect(
        isinstance(result, tuple) and len(result) == 2,
        f"{where}, esperava uma tupla (saída, lse); recebi {type(result).__name__}"
        + (f" com {len(result)} itens" if isinstance(result, tuple) else "")
        + ".",
    )
    return result


_OVERFLOW = (
    "a conta com exp(lse) estoura quando as pontuações são grandes (exp(800) não cabe num "
    "float): subtraia o máximo antes da exponencial, ou use torch.logaddexp."
)
_LSE_UNION = "o lse da união é log(exp(lse1) + exp(lse2)) (torch.logaddexp)"


@exercise("Exercício 3 (juntar resultados parciais)")
def check_merge_partials(merge: Callable[[Tensor, Tensor, Tensor, Tensor], Any]) -> None:
    """``merge(o1, lse1, o2, lse2) -> (o, lse)`` da atenção sobre a união das chaves."""
    gen, seed = case_generator()
    for description, batch, t, s, scale in _merge_cases(gen, seed):
        where = f"Para {description}"
        q = torch.randn(*batch, t, 4, generator=gen, dtype=torch.float64) * scale
        k, v = (torch.randn(*batch, s, 4, generator=gen, dtype=torch.float64) for _ in range(2))
        cut = s // 2
        first, second = (
            _partial(q, k[..., :cut, :], v[..., :cut, :]),
            _partial(q, k[..., cut:, :], v[..., cut:, :]),
        )
        full_out, full_lse = _partial(q, k, v)
        out, lse = _call_merge(merge, first, second, where)
        (o1, lse1), (o2, lse2) = first, second
        w1, w2 = torch.exp(lse1), torch.exp(lse2)  # estoura com pontuações enormes
        naive = ((o1 * w1 + o2 * w2) / (w1 + w2), torch.log(w1 + w2))
        if isinstance(out, Tensor) and out.shape == full_out.shape:
            broken = ~torch.isfinite(out)  # (..., t, d_v)
            tested = torch.equal(broken, ~torch.isfinite(naive[0]))  # a conta ingênua faz igual?
            expect(
                not bool(broken.any()),
                f"{where}, a saída tem inf ou NaN" + (f": {_OVERFLOW}" if tested else "."),
            )
        out_variants = [
            (_OVERFLOW, naive[0]),
            (
                "a média simples das duas saídas ignora quanta massa do softmax cada bloco "
                "tem: pese cada saída por exp(lse_i - lse).",
                (o1 + o2) / 2,
            ),
            (
                "os pesos estão trocados: a saída do bloco 1 é pesada por exp(lse1 - lse), a "
                "do bloco 2 por exp(lse2 - lse).",
                _merge(o1, lse2, o2, lse1)[0],
            ),
        ]
        expect_close(
            out, full_out, where, atol=_ATOL, name="o resultado `o`", variants=out_variants
        )
        lse_variants = [
            (f"{_LSE_UNION}, não a soma.", lse1 + lse2),
            (f"{_LSE_UNION}, não o máximo.", torch.maximum(lse1, lse2)),
            (_OVERFLOW, naive[1]),
        ]
        expect_close(lse, full_lse, where, atol=_ATOL, name="o `lse`", variants=lse_variants)
    # Três blocos, juntados em sequência: merge(merge(A, B), C).
    q = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 9, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    blocks = [_partial(q, k[:, i : i + 3], v[:, i : i + 3]) for i in (0, 3, 6)]
    where = "Juntando três blocos de 3 chaves, merge(merge(A, B), C)"
    out, lse = _call_merge(merge, _call_merge(merge, blocks[0], blocks[1], where), blocks[2], where)
    full_out, full_lse = _partial(q, k, v)
    expect_close(out, full_out, where, atol=_ATOL, name="o resultado `o`")
    expect_close(lse, full_lse, where, atol=_ATOL, name="o `lse`")
    # O gradiente: na atenção em anel do treino, esta junção fica no caminho dos pesos.
    o1, lse1 = blocks[0]
    o2, lse2 = blocks[1]
    check_gradients(
        lambda o1, lse1, o2, lse2: torch.cat(merge(o1, lse1, o2, lse2), dim=-1).to(o1.dtype),
        lambda o1, lse1, o2, lse2: torch.cat(_merge(o1, lse1, o2, lse2), dim=-1),
        {"o1": o1, "lse1": lse1, "o2": o2, "lse2": lse2},
        "No teste de gradiente",
        atol=1e-6,
    )
