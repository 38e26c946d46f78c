"""Conferências dos exercícios de notebooks/04_atencao_multicabeca.ipynb.

Os exercícios, na ordem do notebook:

1. :func:`check_permute_heads`: um ``tpt.MultiHeadAttention`` novo com as cabeças de outro
   em outra ordem (a cabeça ``i`` do novo é a ``order[i]`` do original) e a mesma saída:
   as fatias de ``W^Q``, ``W^K`` e ``W^V`` nos três blocos de linhas de ``qkv_proj`` e as
   colunas de ``W^O`` mudam de lugar juntas;
2. :func:`check_gqa_to_mha`: um ``tpt.MultiHeadAttention`` sem GQA que calcula o mesmo
   que um com ``num_kv_heads < num_heads``, com as linhas de K e V de cada cabeça
   copiadas para as cabeças de consulta do grupo;
3. :func:`check_attention_flops`: os FLOPs de ``mha(query, key_value, need_weights=True)``
   como fórmula de ``b``, ``t``, ``s``, ``d``, ``h`` e ``h_kv``, conferida contra o
   ``FlopCounterMode`` em configurações sorteadas.

Nos exercícios 1 e 2 quem decide são os **parâmetros** do módulo devolvido: a conferência
copia o ``state_dict`` dele para um ``tpt.MultiHeadAttention`` recém-criado e compara
pesos de atenção e saídas com os do original, em autoatenção e em atenção cruzada (um
``forward`` trocado ou um gancho no módulo devolvido não muda nada). As regras valem
pelo que roda: operações ATen gravadas (:mod:`tpt.exercises.rules`); as entradas do aluno
são as de verdade e são conferidas depois (:mod:`tpt.exercises.guards`).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from tpt.attention import MultiHeadAttention
from tpt.exercises.core import ExerciseError, exercise, expect, expect_close, max_abs_diff
from tpt.exercises.guards import call_answer, case_generator, shared_memory
from tpt.exercises.rules import record_ops
from tpt.numfmt import fmt

__all__ = ["check_permute_heads", "check_gqa_to_mha", "check_attention_flops"]


def _module(
    d: int, h: int, h_kv: int | None = None, bias: bool = True, seed: int = 0
) -> MultiHeadAttention:
    """Um ``tpt.MultiHeadAttention`` sorteado sem mexer no gerador global do aluno."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultiHeadAttention(d, h, h_kv, bias=bias).eval()


# Tolerância das comparações de módulos (float32, contas pequenas).
_ATOL = 1e-5


def _has_bias(mha: MultiHeadAttention) -> bool:
    return mha.qkv_proj.bias is not None


# ======================================================================================
# Exercícios 1 e 2: um módulo novo, julgado pelos seus parâmetros
# ======================================================================================
def _expect_new_module(
    where: str, received: Any, original: MultiHeadAttention, num_kv_heads: int
) -> MultiHeadAttention:
    """Confere o módulo devolvido e devolve uma cópia limpa, com os mesmos parâmetros.

    A cópia é um ``tpt.MultiHeadAttention`` recém-criado com o ``state_dict`` da resposta:
    é ela que a conferência roda, de modo que só os parâmetros contam.
    """
    d, h = original.embed_dim, original.num_heads
    bias = _has_bias(original)
    expect(
        isinstance(received, MultiHeadAttention),
        f"{where}, esperava um tpt.MultiHeadAttention; recebi {type(received).__name__}.",
    )
    expect(
        received is not original,
        f"{where}, sua função devolveu o próprio módulo recebido; o exercício pede um módulo "
        "novo (o original continua em uso).",
    )
    config = (received.embed_dim, received.num_heads, received.num_kv_heads, _has_bias(received))
    wanted = (d, h, num_kv_heads, bias)
    expect(
        config == wanted,
        f"{where}, esperava um módulo com embed_dim={d}, num_heads={h}, "
        f"num_kv_heads={num_kv_heads}"
        + ("" if bias else " e bias=False")
        + f"; recebi embed_dim={config[0]}, num_heads={config[1]}, num_kv_heads={config[2]}"
        + ("" if config[3] else ", bias=False")
        + ".",
    )
    expect(
        received.positional is None and received.dropout == 0.0,
        f"{where}, o módulo devolvido tem positional={received.positional!r} e "
        f"dropout={received.dropout}; o original não tem posições nem dropout.",
    )
    fresh = _module(d, h, num_kv_heads, bias=bias)
    state = received.state_dict()
    shapes = {name: tuple(value.shape) for name, value in state.items()}
    wanted_shapes = {name: tuple(value.shape) for name, value in fresh.state_dict().items()}
    expect(
        shapes == wanted_shapes,
        f"{where}, os parâmetros do módulo devolvido têm formas {shapes}; esperava "
        f"{wanted_shapes}.",
    )
    frozen = [name for name, p in received.named_parameters() if not p.requires_grad]
    expect(
        not frozen,
        f"{where}, {', '.join(frozen)} do módulo devolvido tem requires_grad=False: o módulo "
        "novo precisa ser treinável como o original.",
    )
    shared = [name for name, _ in shared_memory(state, original.state_dict())]
    expect(
        not shared,
        f"{where}, o módulo devolvido usa a mesma memória do original em {', '.join(shared)}: "
        "treinar um mudaria o outro. Dê ao módulo novo cópias (.clone(), ou copy_ num "
        "módulo recém-criado).",
    )
    with torch.no_grad():
        fresh.load_state_dict(state)
    return fresh


def _inputs(g: torch.Generator, d: int) -> list[tuple[str, Tensor, Tensor]]:
    query = torch.randn(2, 4, d, generator=g)
    return [
        ("na autoatenção", query, query),
        ("na atenção cruzada (t=4, s=6)", query, torch.randn(2, 6, d, generator=g)),
    ]


def _run(mha: MultiHeadAttention, query: Tensor, key_value: Tensor) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        out, weights = mha(query, key_value, need_weights=True)
    return out, weights  # (b, t, d), (b, h, t, s)


def _compare_modules(
    where: str,
    received: MultiHeadAttention,
    expected_run: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
    variants: Callable[[], list[tuple[str, MultiHeadAttention]]],
    g: torch.Generator,
) -> None:
    """Pesos por cabeça e saídas da resposta contra os esperados, com os diagnósticos.

    ``variants`` só é chamada (e os módulos errados só são montados) quando algo difere.
    """
    for label, query, key_value in _inputs(g, received.embed_dim):
        got_out, got_weights = _run(received, query, key_value)
        want_out, want_weights = expected_run(query, key_value)
        if max_abs_diff(got_weights, want_weights) <= _ATOL and (
            max_abs_diff(got_out, want_out) <= _ATOL
        ):
            continue
        wrong = [(diag, _run(module, query, key_value)) for diag, module in variants()]
        expect_close(
            got_weights,
            want_weights,
            f"{where}, {label}",
            atol=_ATOL,
            name="o mapa de pesos de cada cabeça (need_weights=True)",
            variants=[(diag, w) for diag, (_, w) in wrong if _far(w, want_weights)],
        )
        expect_close(
            got_out,
            want_out,
            f"{where}, {label}",
            atol=_ATOL,
            name="a saída",
            variants=[(diag, o) for diag, (o, _) in wrong if _far(o, want_out)],
        )


def _far(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) > 1e-4


def _with(
    mha: MultiHeadAttention,
    h_kv: int,
    weight: Tensor,
    bias: Tensor | None,
    out_weight: Tensor,
    out_bias: Tensor | None,
) -> MultiHeadAttention:
    """Um módulo com ``num_kv_heads=h_kv`` e os parâmetros dados (as variantes e referências)."""
    new = _module(mha.embed_dim, mha.num_heads, h_kv, bias=bias is not None)
    with torch.no_grad():
        new.qkv_proj.weight.copy_(weight)
        new.out_proj.weight.copy_(out_weight)
        if bias is not None:
            new.qkv_proj.bias.copy_(bias)
            new.out_proj.bias.copy_(out_bias)
    return new


# --------------------------------------------------------------------------------------
# Exercício 1: as cabeças em outra ordem
# --------------------------------------------------------------------------------------
def _permuted(
    mha: MultiHeadAttention,
    order: list[int],
    *,
    blocks: str = "qkv",
    out_columns: bool = True,
    out_rows: bool = False,
    interleaved: bool = False,
) -> MultiHeadAttention:
    """As cabeças de ``mha`` na ordem ``order``; os argumentos montam os erros típicos.

    ``blocks``: quais blocos de ``qkv_proj`` mudam de lugar; ``out_columns``/``out_rows``:
    o que muda em ``out_proj.weight``; ``interleaved``: linhas de ``qkv_proj`` lidas como
    ``[q k v da cabeça 0 | q k v da cabeça 1 | ...]``.
    """
    d, h, d_h = mha.embed_dim, mha.num_heads, mha.head_dim
    index = torch.tensor(order)
    weight, bias = mha.qkv_proj.weight.detach(), mha.qkv_proj.bias
    if interleaved:
        new_weight = weight.view(h, 3 * d_h, d)[index].reshape(3 * d, d)
        new_bias = None if bias is None else bias.detach().view(h, 3 * d_h)[index].reshape(3 * d)
    else:
        parts = weight.view(3, h, d_h, d).clone()  # (bloco, cabeça, d_h, d)
        for n, block in enumerate("qkv"):
            if block in blocks:
                parts[n] = parts[n][index]
        new_weight = parts.reshape(3 * d, d)
        new_bias = None
        if bias is not None:
            b_parts = bias.detach().view(3, h, d_h).clone()
            for n, block in enumerate("qkv"):
                if block in blocks:
                    b_parts[n] = b_parts[n][index]
            new_bias = b_parts.reshape(3 * d)
    out_weight = mha.out_proj.weight.detach()
    if out_columns:
        out_weight = out_weight.view(d, h, d_h)[:, index].reshape(d, d)
    if out_rows:
        out_weight = out_weight.view(h, d_h, d)[index].reshape(d, d)
    out_bias = None if mha.out_proj.bias is None else mha.out_proj.bias.detach()
    return _with(mha, h, new_weight, new_bias, out_weight, out_bias)


def _permute_variants(
    mha: MultiHeadAttention, order: list[int]
) -> list[tuple[str, MultiHeadAttention]]:
    inverse = torch.tensor(order).argsort().tolist()
    variants = [
        (
            "você aplicou a permutação inversa: a cabeça i do original foi para a posição "
            "order[i]. O pedido é o contrário: a cabeça i do novo é a order[i] do original "
            "(como em x[order]).",
            _permuted(mha, inverse),
        ),
        (
            "só as linhas de W^Q mudaram de lugar. A cabeça i é o trio de fatias "
            "i·d_h:(i+1)·d_h dos três blocos de qkv_proj (W^Q, W^K e W^V): as três vão juntas.",
            _permuted(mha, order, blocks="q"),
        ),
        (
            "as linhas de W^V ficaram no lugar: os pesos de cada cabeça conferem, mas ela lê os "
            "valores de outra cabeça. Mova também a fatia da cabeça no bloco de W^V.",
            _permuted(mha, order, blocks="qk"),
        ),
        (
            "as linhas de qkv_proj foram lidas como [q, k, v da cabeça 0 | q, k, v da cabeça 1 "
            "| ...]. No tpt são três blocos, [W^Q | W^K | W^V] (d linhas cada), e dentro de "
            "cada bloco as h cabeças vêm uma depois da outra.",
            _permuted(mha, order, interleaved=True),
        ),
        (
            "os pesos conferem, mas W^O ficou como estava: a cabeça que foi para a posição i "
            "precisa levar junto as colunas de out_proj.weight que a leem "
            "(out_proj.weight[:, order[i]·d_h:(order[i]+1)·d_h] vai para as colunas da cabeça i).",
            _permuted(mha, order, out_columns=False),
        ),
        (
            "os pesos conferem, mas em out_proj.weight você moveu as linhas, que produzem as "
            "colunas da saída. No nn.Linear, weight é (saída, entrada): a cabeça i entra pelas "
            "colunas i·d_h:(i+1)·d_h.",
            _permuted(mha, order, out_columns=False, out_rows=True),
        ),
    ]
    return variants


# (d, h, bias, order): duas, três (ciclo: a inversa é outra) e quatro cabeças, sem viés.
_PERMUTE_CASES = [
    (8, 2, True, [1, 0]),
    (12, 3, True, [2, 0, 1]),
    (16, 4, False, [3, 0, 1, 2]),
    (12, 4, True, [0, 3, 1, 2]),
]


def _permute_cases(g: torch.Generator, seed: int) -> list[tuple[str, tuple[Any, ...]]]:
    cases = [
        (
            f"para embed_dim={d}, num_heads={h}, order={order}" + ("" if bias else ", bias=False"),
            (d, h, bias, order),
        )
        for d, h, bias, order in _PERMUTE_CASES
    ]
    for _ in range(2):
        h = int(torch.randint(2, 7, (1,), generator=g))
        d_h = int(torch.randint(1, 6, (1,), generator=g))
        bias = bool(torch.randint(2, (1,), generator=g))
        order = torch.randperm(h, generator=g).tolist()
        cases.append(
            (
                f"num caso sorteado (semente {seed}): embed_dim={h * d_h}, num_heads={h}, "
                f"order={order}" + ("" if bias else ", bias=False"),
                (h * d_h, h, bias, order),
            )
        )
    return cases


@exercise("Exercício 1 (as cabeças em outra ordem)")
def check_permute_heads(
    permute_heads: Callable[[MultiHeadAttention, list[int]], MultiHeadAttention],
) -> None:
    """``permute_heads(mha, order) -> tpt.MultiHeadAttention`` novo.

    A cabeça ``i`` do módulo novo é a cabeça ``order[i]`` de ``mha``: os pesos de atenção
    por cabeça saem na ordem ``order`` e a saída é a mesma de ``mha``, em autoatenção e em
    atenção cruzada. Regras: ``mha`` e ``order`` ficam intactos; o módulo novo é
    treinável (``requires_grad``) e não divide memória com o original.
    """
    g, seed = case_generator()
    for index, (where, (d, h, bias, order)) in enumerate(_permute_cases(g, seed)):
        mha = _module(d, h, bias=bias, seed=index)
        received = call_answer(
            permute_heads,
            {"mha": mha, "order": list(order)},
            where,
            "qkv_proj.weight tem forma (3d, d): os blocos de W^Q, W^K e W^V, cada um com as h "
            "cabeças de d_h linhas; out_proj.weight tem forma (d, d), e a cabeça i entra pelas "
            "colunas i·d_h:(i+1)·d_h.",
        )
        fresh = _expect_new_module(where, received, mha, h)
        index_t = torch.tensor(order)

        def expected_run(
            query: Tensor, key_value: Tensor, mha: MultiHeadAttention = mha, index: Tensor = index_t
        ) -> Any:
            out, weights = _run(mha, query, key_value)
            return out, weights[:, index]

        _compare_modules(
            where,
            fresh,
            expected_run,
            lambda mha=mha, order=order: _permute_variants(mha, order),
            g,
        )


# --------------------------------------------------------------------------------------
# Exercício 2: de GQA para MHA
# --------------------------------------------------------------------------------------
def _expanded(mha: MultiHeadAttention, how: str = "heads") -> MultiHeadAttention:
    """O MHA equivalente a ``mha`` (GQA); ``how`` monta os erros típicos.

    ``"heads"``: cada cabeça de K/V (``d_h`` linhas) repetida para as ``h / h_kv`` cabeças de
    consulta vizinhas; ``"tiled"``: cópias intercaladas (``repeat``); ``"rows"``: cada
    linha repetida seguida; ``"swapped"``: os blocos de K e V trocados.
    """
    d, h, h_kv, d_h = mha.embed_dim, mha.num_heads, mha.num_kv_heads, mha.head_dim
    kv, group = mha.kv_dim, h // h_kv

    def expand(rows: Tensor) -> Tensor:  # (d_kv, ...) -> (d, ...)
        tail = rows.shape[1:]
        if how == "tiled":
            return (
                rows.view(h_kv, d_h, *tail)
                .repeat(group, *([1] * (1 + len(tail))))
                .reshape(d, *tail)
            )
        if how == "rows":
            return rows.repeat_interleave(group, dim=0)
        return rows.view(h_kv, d_h, *tail).repeat_interleave(group, dim=0).reshape(d, *tail)

    def stack(p: Tensor) -> Tensor:
        q, k, v = p.detach().split([d, kv, kv])
        if how == "swapped":
            k, v = v, k
        return torch.cat([q, expand(k), expand(v)])

    bias = mha.qkv_proj.bias
    out_bias = mha.out_proj.bias
    return _with(
        mha,
        h,
        stack(mha.qkv_proj.weight),
        None if bias is None else stack(bias),
        mha.out_proj.weight.detach(),
        None if out_bias is None else out_bias.detach(),
    )


def _gqa_variants(mha: MultiHeadAttention) -> list[tuple[str, MultiHeadAttention]]:
    return [
        (
            "as cópias das cabeças de K e V se intercalam (0, 1, 0, 1...), como com repeat: a "
            "cabeça de consulta i ficou com a de K/V i % h_kv. No GQA, ela usa a "
            "i // (h / h_kv), e as cópias de cada cabeça vêm seguidas.",
            _expanded(mha, "tiled"),
        ),
        (
            "cada linha de W^K e W^V foi repetida seguida (repeat_interleave nas linhas). Quem "
            "se repete é a cabeça inteira, um bloco de d_h linhas: separe as cabeças "
            "(view(h_kv, d_h, d)) antes de repetir.",
            _expanded(mha, "rows"),
        ),
        (
            "os blocos de K e V estão trocados: em qkv_proj a ordem das linhas é "
            "[W^Q | W^K | W^V].",
            _expanded(mha, "swapped"),
        ),
    ]


# (d, h, h_kv, bias): GQA com grupos de 2 e de 3, MQA, e sem viés.
_GQA_CASES = [(16, 4, 2, True), (24, 6, 2, True), (16, 8, 1, True), (12, 4, 2, False)]


def _gqa_cases(g: torch.Generator, seed: int) -> list[tuple[str, tuple[Any, ...]]]:
    cases = [
        (
            f"para embed_dim={d}, num_heads={h}, num_kv_heads={h_kv}"
            + ("" if bias else ", bias=False"),
            (d, h, h_kv, bias),
        )
        for d, h, h_kv, bias in _GQA_CASES
    ]
    for _ in range(2):
        h_kv = int(torch.randint(1, 4, (1,), generator=g))
        group = int(torch.randint(2, 4, (1,), generator=g))
        d_h = int(torch.randint(1, 5, (1,), generator=g))
        bias = bool(torch.randint(2, (1,), generator=g))
        h = h_kv * group
        cases.append(
            (
                f"num caso sorteado (semente {seed}): embed_dim={h * d_h}, num_heads={h}, "
                f"num_kv_heads={h_kv}" + ("" if bias else ", bias=False"),
                (h * d_h, h, h_kv, bias),
            )
        )
    return cases


@exercise("Exercício 2 (de GQA para atenção multicabeça comum)")
def check_gqa_to_mha(gqa_to_mha: Callable[[MultiHeadAttention], MultiHeadAttention]) -> None:
    """``gqa_to_mha(mha) -> tpt.MultiHeadAttention`` novo, com ``num_kv_heads == num_heads``.

    ``mha`` tem ``num_kv_heads < num_heads``; o módulo novo dá os mesmos pesos por cabeça e
    a mesma saída, em autoatenção e em atenção cruzada. Regras: ``mha`` fica intacto; o
    módulo novo é treinável (``requires_grad``) e não divide memória com o original.
    """
    g, seed = case_generator()
    for index, (where, (d, h, h_kv, bias)) in enumerate(_gqa_cases(g, seed)):
        mha = _module(d, h, h_kv, bias=bias, seed=index)
        received = call_answer(
            gqa_to_mha,
            {"mha": mha},
            where,
            f"qkv_proj.weight tem forma (d + 2·d_kv, d) = {tuple(mha.qkv_proj.weight.shape)}: "
            f"d linhas de W^Q e d_kv = num_kv_heads·d_h = {mha.kv_dim} de W^K e de W^V; no "
            f"módulo novo, d = {d} linhas em cada bloco.",
        )
        fresh = _expect_new_module(where, received, mha, h)

        def expected_run(query: Tensor, key_value: Tensor, mha: MultiHeadAttention = mha) -> Any:
            return _run(mha, query, key_value)

        _compare_modules(where, fresh, expected_run, lambda mha=mha: _gqa_variants(mha), g)


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
