"""Conferências dos exercícios de notebooks/04_atencao_multicabeca.ipynb.

Os exercícios, na ordem do notebook:

1. :func:`check_head_contributions`: a parte da saída de um ``tpt.MultiHeadAttention``
   que vem de cada cabeça, ``(b, h, t, d)``, com a fatia certa de ``W^O`` para cada uma;
   todas as cabeças de uma vez;
2. :func:`check_gqa_forward`: a atenção com consultas agrupadas (GQA) escrita a partir de
   ``mha.project_qkv`` e ``mha.out_proj``, sem o ``forward`` pronto, com todas as cabeças
   de uma vez e com os gradientes do módulo;
3. :func:`check_attention_flops`: os FLOPs de ``mha(query, key_value, need_weights=True)``
   como fórmula de ``b``, ``t``, ``s``, ``d``, ``h`` e ``h_kv``, conferida contra o
   ``FlopCounterMode`` em configurações sorteadas.

As regras valem pelo que roda: operações ATen gravadas (:mod:`tpt.exercises.rules`) e,
para "sem o módulo pronto", as funções Python executadas durante a chamada. As entradas do
aluno são as de verdade e são conferidas depois (:mod:`tpt.exercises.guards`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import tpt.attention
from tpt.attention import MultiHeadAttention
from tpt.exercises.core import ExerciseError, exercise, expect, expect_close
from tpt.exercises.guards import call_answer, case_generator, check_gradients
from tpt.exercises.rules import op_counts_by_size, record_ops, record_python_calls
from tpt.numfmt import fmt

__all__ = ["check_head_contributions", "check_gqa_forward", "check_attention_flops"]


def _module(
    d: int, h: int, h_kv: int | None = None, bias: bool = True, seed: int = 0
) -> MultiHeadAttention:
    """Um ``tpt.MultiHeadAttention`` sorteado sem mexer no gerador global do aluno."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultiHeadAttention(d, h, h_kv, bias=bias).eval()


def _split(x: Tensor, heads: int, d_h: int) -> Tensor:
    """``(b, n, heads * d_h)`` -> ``(b, heads, n, d_h)``."""
    b, n = x.shape[:2]
    return x.view(b, n, heads, d_h).transpose(1, 2)


def _heads(
    query: Tensor,
    key_value: Tensor,
    mha: MultiHeadAttention,
    *,
    tiled: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Passos 1 a 4 com GQA: a saída de cada cabeça, ``(b, h, t, d_h)``."""
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    q, k, v = mha.project_qkv(query, key_value)  # (b, t, d), 2 x (b, s, d_kv)
    q, k, v = _split(q, h, d_h), _split(k, h_kv, d_h), _split(v, h_kv, d_h)
    group = h // h_kv
    if tiled:  # o erro típico: cópias intercaladas (0, 1, 0, 1...)
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    else:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out, _ = tpt.attention.scaled_dot_product_attention(q, k, v, scale=scale)
    return out  # (b, h, t, d_h)


def _expect_tensor(where: str, received: Any, shape: tuple[int, ...], meaning: str) -> None:
    expect(
        isinstance(received, Tensor),
        f"{where}, esperava um tensor; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == shape,
        f"{where}, esperava a forma {shape} = {meaning}; recebi {tuple(received.shape)}.",
    )


# ======================================================================================
# Exercício 1: a contribuição de cada cabeça
# ======================================================================================
def _contributions(x: Tensor, mha: MultiHeadAttention) -> Tensor:
    heads = _heads(x, x, mha)  # (b, h, t, d_h)
    d, h, d_h = mha.embed_dim, mha.num_heads, mha.head_dim
    w_o = mha.out_proj.weight.view(d, h, d_h)  # (d saída, h, d_h): colunas de cada cabeça
    return torch.einsum("bhtk,ohk->bhto", heads, w_o)  # (b, h, t, d)


def _contribution_variants(x: Tensor, mha: MultiHeadAttention) -> list[tuple[str, Tensor]]:
    heads = _heads(x, x, mha)  # (b, h, t, d_h)
    d, h, d_h = mha.embed_dim, mha.num_heads, mha.head_dim
    weight = mha.out_proj.weight  # (d saída, d entrada)
    right = _contributions(x, mha)
    variants = [
        (
            "usou as linhas i·d_h:(i+1)·d_h de out_proj.weight. No nn.Linear, weight tem forma "
            "(saída, entrada) e calcula x Wᵀ: a cabeça i entra pelas colunas "
            "out_proj.weight[:, i·d_h:(i+1)·d_h].",
            torch.einsum("bhtk,hko->bhto", heads, weight.view(h, d_h, d)),
        ),
        (
            "usou colunas intercaladas de out_proj.weight; as colunas da cabeça i são "
            "vizinhas, i·d_h:(i+1)·d_h (o mesmo view(b, t, h, d_h) do passo 2).",
            torch.einsum("bhtk,okh->bhto", heads, weight.view(d, d_h, h)),
        ),
    ]
    bias = mha.out_proj.bias
    if bias is not None:
        variants += [
            (
                "cada cabeça recebeu o viés de out_proj inteiro; o viés é somado uma vez só, "
                "fora das contribuições (a soma das cabeças + out_proj.bias dá a saída).",
                right + bias,
            ),
            (
                "o viés de out_proj foi repartido entre as cabeças (out_proj.bias / h); o "
                "enunciado deixa o viés fora das contribuições.",
                right + bias / h,
            ),
        ]
    return variants


# (b, t, d, h, bias): uma cabeça, várias, sem viés.
_CONTRIBUTION_CASES = [
    (1, 4, 8, 2, True),
    (2, 5, 12, 3, False),
    (1, 3, 8, 1, True),
    (2, 6, 16, 4, True),
]


def _contribution_cases(g: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    cases = [
        (
            f"para x {(b, t, d)} e num_heads={h}" + ("" if bias else ", bias=False"),
            (b, t, d, h, bias),
        )
        for b, t, d, h, bias in _CONTRIBUTION_CASES
    ]
    for _ in range(2):
        b, t, d_h, h = (int(n) for n in torch.randint(1, 6, (4,), generator=g))
        bias = bool(torch.randint(2, (1,), generator=g))
        cases.append(
            (
                f"num caso sorteado (semente {seed}): x {(b, t, h * d_h)}, num_heads={h}",
                (b, t, h * d_h, h, bias),
            )
        )
    return cases


@exercise("Exercício 1 (a contribuição de cada cabeça)")
def check_head_contributions(
    head_contributions: Callable[[Tensor, MultiHeadAttention], Tensor],
) -> None:
    """``head_contributions(x (b, t, d), mha) -> (b, h, t, d)``.

    A contribuição da cabeça ``i`` é a saída dela multiplicada pela fatia de ``W^O`` que a
    lê (as colunas ``i·d_h:(i+1)·d_h`` de ``out_proj.weight``), sem o viés: a soma das
    contribuições mais ``out_proj.bias`` é ``mha(x)[0]``. Regras: o número de operações
    não cresce com ``h`` (todas as cabeças de uma vez); ``x`` e ``mha`` ficam intactos.
    """
    g, seed = case_generator()
    for index, (where, (b, t, d, h, bias)) in enumerate(_contribution_cases(g, seed)):
        mha = _module(d, h, bias=bias, seed=index)
        x = torch.randn(b, t, d, generator=g)
        received = call_answer(
            head_contributions,
            {"x": x, "mha": mha},
            where,
            "A saída de cada cabeça tem forma (b, h, t, d_h); a fatia de W^O de cada uma, "
            "(d, d_h).",
        )
        _expect_tensor(where, received, (b, h, t, d), "(b, h, t, d)")
        with torch.no_grad():
            expected = _contributions(x, mha)
            variants = _contribution_variants(x, mha)
        variants = [
            (diag, wrong)
            for diag, wrong in variants
            if float((wrong - expected).abs().max()) > 1e-4
        ]
        expect_close(received, expected, where, atol=1e-5, name="o resultado", variants=variants)

    def make_args(h: int) -> tuple[Tensor, MultiHeadAttention]:
        return torch.randn(2, 3, 4 * h, generator=g), _module(4 * h, h)

    def answer(x: Tensor, mha: MultiHeadAttention) -> Any:
        return call_answer(head_contributions, {"x": x, "mha": mha}, "Na contagem de operações")

    small, large = op_counts_by_size(answer, make_args, (2, 8))
    expect(
        small == large,
        f"com 2 cabeças sua função executou {small} operações do PyTorch, e com 8 cabeças "
        f"{large}: o número cresce com h, então há um laço sobre as cabeças (for, map, "
        "compreensão ou função auxiliar). O exercício pede todas de uma vez.",
    )


# As etapas prontas que fariam o exercício pelo aluno (o tpt e o PyTorch).
_READY_MADE = {
    MultiHeadAttention.forward.__code__: "MultiHeadAttention.forward (mha(...))",
    MultiHeadAttention._attend.__code__: "MultiHeadAttention._attend",
    MultiHeadAttention._expand_kv_heads.__code__: "MultiHeadAttention._expand_kv_heads",
    MultiHeadAttention._split_heads.__code__: "MultiHeadAttention._split_heads",
    tpt.attention._fused_attention.__code__: "tpt.attention._fused_attention",
    nn.MultiheadAttention.forward.__code__: "nn.MultiheadAttention",
    F.multi_head_attention_forward.__code__: "F.multi_head_attention_forward",
}


def _gqa_reference(query: Tensor, key_value: Tensor, mha: MultiHeadAttention) -> Tensor:
    return mha(query, key_value)[0]  # (b, t, d)


def _gqa_variants(
    query: Tensor, key_value: Tensor, mha: MultiHeadAttention
) -> list[tuple[str, Tensor]]:
    b, t, d = query.shape

    def finish(heads: Tensor) -> Tensor:
        return mha.out_proj(heads.transpose(1, 2).reshape(b, t, d))

    variants = [
        (
            "falta a projeção final W^O: a saída é a concatenação das cabeças. Aplique "
            "mha.out_proj no fim.",
            _heads(query, key_value, mha).transpose(1, 2).reshape(b, t, d),
        ),
        (
            "a escala usada foi 1/√d, e não 1/√d_h: o d_k da fórmula é a largura de uma cabeça.",
            finish(_heads(query, key_value, mha, scale=1 / math.sqrt(d))),
        ),
        (
            "as cabeças de K/V foram repetidas na ordem errada: com repeat as cópias se "
            "intercalam (0, 1, 0, 1...), e a cabeça de consulta i usa a de K/V i % h_kv. No "
            "GQA a cabeça i usa a de K/V i // (h / h_kv) (repeat_interleave).",
            finish(_heads(query, key_value, mha, tiled=True)),
        ),
    ]
    if key_value is not query:
        variants.append(
            (
                "K e V saíram de query: na atenção cruzada eles vêm de key_value "
                "(mha.project_qkv(query, key_value)).",
                finish(_heads(query, query, mha)),
            )
        )
    return variants


# (b, t, s, d, h, h_kv, bias): autoatenção e atenção cruzada (t != s); MHA, GQA e MQA.
_GQA_CASES = [
    (1, 5, 5, 8, 2, 2, True),
    (2, 4, 6, 16, 4, 2, True),
    (1, 6, 3, 24, 6, 3, True),
    (2, 3, 7, 16, 8, 1, True),
    (1, 4, 4, 12, 4, 2, False),
]


def _gqa_cases(g: torch.Generator, seed: int) -> list[tuple[str, tuple[Any, ...]]]:
    cases = []
    for b, t, s, d, h, h_kv, bias in _GQA_CASES:
        kind = "autoatenção" if t == s else "atenção cruzada"
        cases.append(
            (
                f"em {kind} com query {(b, t, d)}, key_value {(b, s, d)}, num_heads={h}, "
                f"num_kv_heads={h_kv}" + ("" if bias else ", bias=False"),
                (b, t, s, d, h, h_kv, bias),
            )
        )
    for _ in range(2):
        h_kv, group, d_h, b, t, s = (int(n) for n in torch.randint(1, 5, (6,), generator=g))
        h = h_kv * group
        bias = bool(torch.randint(2, (1,), generator=g))
        cases.append(
            (
                f"num caso sorteado (semente {seed}): query {(b, t, h * d_h)}, key_value "
                f"{(b, s, h * d_h)}, num_heads={h}, num_kv_heads={h_kv}",
                (b, t, s, h * d_h, h, h_kv, bias),
            )
        )
    return cases


@exercise("Exercício 2 (atenção com consultas agrupadas)")
def check_gqa_forward(gqa_forward: Callable[[Tensor, Tensor, MultiHeadAttention], Tensor]) -> None:
    """``gqa_forward(query (b, t, d), key_value (b, s, d), mha) -> (b, t, d)``.

    Deve dar ``mha(query, key_value)[0]``. Regras: nenhuma etapa pronta do módulo roda
    (``forward``, ``_attend``, ``_expand_kv_heads``, ``_split_heads``, nem
    ``nn.MultiheadAttention``); o número de operações não cresce com ``h``; as entradas
    ficam intactas; os gradientes (das entradas e dos pesos do módulo) são os do módulo.
    """
    g, seed = case_generator()
    for index, (where, (b, t, s, d, h, h_kv, bias)) in enumerate(_gqa_cases(g, seed)):
        mha = _module(d, h, h_kv, bias=bias, seed=index)
        query = torch.randn(b, t, d, generator=g)
        key_value = query if (t == s and index % 2 == 0) else torch.randn(b, s, d, generator=g)
        with record_python_calls() as ran:
            received = call_answer(
                gqa_forward,
                {"query": query, "key_value": key_value, "mha": mha},
                where,
                f"Q tem num_heads={h} cabeças e K, V têm num_kv_heads={h_kv}, cada uma com "
                f"d_h={mha.head_dim} colunas e o comprimento delas (t={t} para Q, s={s} para "
                "K e V).",
            )
        ready = sorted(name for code, name in _READY_MADE.items() if code in ran)
        expect(
            not ready,
            f"durante a sua função rodou {', '.join(ready)}: o exercício pede os passos escritos "
            "por você a partir de mha.project_qkv (ou mha.qkv_proj) e mha.out_proj, sem as "
            "etapas prontas do módulo.",
        )
        _expect_tensor(where, received, (b, t, d), "(b, t, d)")
        with torch.no_grad():
            expected = _gqa_reference(query, key_value, mha)
            variants = [
                (diag, wrong)
                for diag, wrong in _gqa_variants(query, key_value, mha)
                if float((wrong - expected).abs().max()) > 1e-4
            ]
        expect_close(received, expected, where, atol=1e-5, variants=variants)
        if index in (1, len(_GQA_CASES)):  # um caso fixo e um sorteado, com gradientes
            check_gradients(
                gqa_forward,
                _gqa_reference,
                {"query": query, "key_value": key_value, "mha": mha},
                f"{where} (gradientes)",
                wrt=("query", "key_value"),
                atol=1e-4,
            )

    def make_args(h_kv: int) -> tuple[Tensor, Tensor, MultiHeadAttention]:
        # Nenhum eixo de tamanho 1 (h_kv >= 2, grupos de 2): um reshape que vira view num
        # eixo unitário mudaria a contagem sem laço nenhum.
        h, d = 2 * h_kv, 8 * h_kv
        return (
            torch.randn(2, 3, d, generator=g),
            torch.randn(2, 5, d, generator=g),
            _module(d, h, h_kv),
        )

    def answer(query: Tensor, key_value: Tensor, mha: MultiHeadAttention) -> Any:
        return call_answer(
            gqa_forward,
            {"query": query, "key_value": key_value, "mha": mha},
            "Na contagem de operações",
        )

    small, large = op_counts_by_size(answer, make_args, (2, 8))
    expect(
        small == large,
        f"com 4 cabeças sua função executou {small} operações do PyTorch, e com 16 cabeças "
        f"{large}: o número cresce com h, então há um laço sobre as cabeças (for, map, "
        "compreensão ou função auxiliar). O exercício pede todas as cabeças numa chamada "
        "de atenção só, com (b, h) como lote.",
    )


# ======================================================================================
# Exercício 3: os FLOPs da atenção multicabeça, como fórmula
# ======================================================================================
_FORMULA_RULE = (
    "o exercício pede uma fórmula com inteiros do Python, e durante a sua função rodaram "
    "{n} operações do PyTorch ({ops}): nada de construir o módulo, sortear tensores ou "
    "contar com o FlopCounterMode."
)


def _measured_flops(b: int, t: int, s: int, d: int, h: int, h_kv: int) -> int:
    """FLOPs de ``mha(query, key_value, need_weights=True)`` pelo ``FlopCounterMode``.

    Tensores no dispositivo ``meta``: só as formas existem, e a contagem sai igual.
    """
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        mha = MultiHeadAttention(d, h, h_kv).eval()
        query, key_value = torch.empty(b, t, d), torch.empty(b, s, d)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        mha(query, key_value, need_weights=True)
    return int(counter.get_total_flops())


def _flops_variants(b: int, t: int, s: int, d: int, h: int, h_kv: int) -> list[tuple[str, int]]:
    kv = h_kv * (d // h)
    projections = 2 * b * t * d * d + 2 * 2 * b * s * d * kv + 2 * b * t * d * d
    attention = 4 * b * t * s * d
    return [
        (
            "é a fórmula da seção 9, 8·b·t·d² + 4·b·t·s·d, que vale só com s = t e sem GQA: "
            "as projeções de K e V leem key_value (s posições) e produzem h_kv · d_h colunas.",
            8 * b * t * d * d + attention,
        ),
        (
            "as projeções de K e V usaram t, mas elas leem key_value, de comprimento s.",
            2 * b * t * d * d + 4 * b * t * d * kv + attention + 2 * b * t * d * d,
        ),
        (
            "a atenção usou t², mas as pontuações são (b, h, t, s): t consultas contra s chaves.",
            projections + 4 * b * t * t * d,
        ),
        (
            "o GQA foi ignorado: as projeções de K e V produzem h_kv · d_h colunas, não d.",
            4 * b * t * d * d + 4 * b * s * d * d + attention,
        ),
        (
            "cada multiplicação-e-soma contou 1 FLOP; o FlopCounterMode conta 2.",
            (projections + attention) // 2,
        ),
        (
            "falta a projeção de saída W^O (2·b·t·d² FLOPs).",
            projections - 2 * b * t * d * d + attention,
        ),
        ("falta a atenção (QKᵀ e pesos · V, 4·b·t·s·d FLOPs).", projections),
    ]


# (b, t, s, d, h, h_kv): a tabela da seção 9, atenção cruzada, GQA e MQA.
_FLOPS_CASES = [
    (1, 128, 128, 256, 8, 8),
    (2, 5, 7, 32, 8, 2),
    (4, 100, 300, 512, 8, 2),
    (1, 1, 10, 64, 4, 1),
]


@exercise("Exercício 3 (os FLOPs da atenção multicabeça)")
def check_attention_flops(attention_flops: Callable[..., int]) -> None:
    """``attention_flops(batch_size, t, s, embed_dim, num_heads, num_kv_heads) -> int``.

    Os FLOPs de ``mha(query (b, t, d), key_value (b, s, d), need_weights=True)`` contados
    pelo ``FlopCounterMode``. Regra: nenhuma operação do PyTorch roda na chamada.
    """
    g, seed = case_generator()
    cases = [("", case) for case in _FLOPS_CASES]
    for _ in range(3):
        h_kv, group, d_h = (int(n) for n in torch.randint(1, 9, (3,), generator=g))
        b, t, s = (int(n) for n in torch.randint(1, 200, (3,), generator=g))
        cases.append(
            (
                f"num caso sorteado (semente {seed}), ",
                (b, t, s, h_kv * group * d_h, h_kv * group, h_kv),
            )
        )
    for prefix, (b, t, s, d, h, h_kv) in cases:
        where = (
            f"{prefix or 'para '}batch_size={b}, t={t}, s={s}, embed_dim={d}, "
            f"num_heads={h}, num_kv_heads={h_kv}"
        )
        with record_ops() as ops:
            received = call_answer(
                attention_flops,
                {
                    "batch_size": b,
                    "t": t,
                    "s": s,
                    "embed_dim": d,
                    "num_heads": h,
                    "num_kv_heads": h_kv,
                },
                where,
                "Some as multiplicações de matrizes: as três projeções, QKᵀ, pesos · V e W^O.",
            )
        expect(ops.total == 0, _FORMULA_RULE.format(n=ops.total, ops=", ".join(sorted(ops.counts))))
        expect(
            isinstance(received, numbers.Integral) and not isinstance(received, bool),
            f"{where}, esperava um int; recebi {type(received).__name__} ({received!r}). FLOPs "
            "se contam: use // (divisão inteira) em vez de /.",
        )
        expected = _measured_flops(b, t, s, d, h, h_kv)
        received = int(received)
        if received == expected:
            continue
        # Todas as variantes calculadas que batem (com t = 2d, por exemplo, W^O e a atenção
        # custam o mesmo): o aluno lê todas as explicações possíveis, e só elas.
        matches = [
            diagnosis
            for diagnosis, wrong in _flops_variants(b, t, s, d, h, h_kv)
            if wrong != expected and received == wrong
        ]
        explanation = f": {' Ou então: '.join(matches)}" if matches else "."
        raise ExerciseError(
            f"{where}, esperava {fmt(expected)} FLOPs, recebi {fmt(received)}{explanation}"
        )
