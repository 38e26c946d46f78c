"""Exercícios do notebook 09 (geração): ``ex = checks("generation")``.

1. :func:`check_top_p`: o filtro top-p (amostragem de núcleo) escrito pelo aluno.
2. :func:`check_repetition_penalty`: a penalidade de repetição do CTRL, sem laços.
3. :func:`check_cached_attention`: um passo de atenção com ``tpt.KVCache``, a partir das
   projeções de uma ``tpt.MultiHeadAttention``.

Cada conferência usa a máquina comum (``core``, ``rules``, ``guards``): as entradas são
as de verdade (e conferidas depois da chamada), há casos fixos e casos sorteados a cada
execução, e um diagnóstico só aparece quando a variante errada correspondente foi
calculada e bateu com a resposta. As regras valem pelo que **roda**: "não use
``top_p_filter``" e "não chame a ``MultiHeadAttention``" olham as funções Python que
executaram (pelo código delas, não pelo nome), "sem laços" conta as operações ATen em
dois tamanhos.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.attention import MultiHeadAttention
from tpt.exercises.core import (
    ExerciseError,
    exercise,
    expect,
    expect_close,
    max_abs_diff,
    unambiguous,
)
from tpt.exercises.guards import call_answer, case_generator
from tpt.exercises.rules import op_counts_by_size, record_python_calls
from tpt.generation import top_p_filter as _tpt_top_p_filter
from tpt.kv_cache import KVCache
from tpt.masks import causal_mask
from tpt.numfmt import fmt

__all__ = ["check_top_p", "check_repetition_penalty", "check_cached_attention"]

_ATOL = 1e-5


def _expect_float_like(received: Any, expected: Tensor, where: str) -> Tensor:
    """A resposta é um tensor float com a forma do esperado? Devolve-o sem grafo."""
    expect(
        isinstance(received, Tensor),
        f"{where}, esperava um tensor; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == tuple(expected.shape),
        f"{where}, esperava a forma {tuple(expected.shape)} (a mesma dos logits); recebi "
        f"{tuple(received.shape)}.",
    )
    expect(
        received.is_floating_point(),
        f"{where}, esperava um tensor float (logits); recebi dtype {received.dtype}.",
    )
    return received.detach()


# --------------------------------------------------------------------------------------
# Exercício 1: top-p escrito por você
# --------------------------------------------------------------------------------------
_TOP_P_HINT = (
    "Confira a assinatura, top_p(logits, p), e os eixos: logits tem forma (..., V), e a "
    "ordenação e a soma acumulada vão ao longo do último (dim=-1)."
)


def _from_probs(probs: list[float]) -> Tensor:
    return torch.tensor(probs, dtype=torch.float64).log().float()


def _top_p_fixed_cases() -> list[tuple[str, Tensor, float]]:
    """(descrição, logits, p): os casos de borda do enunciado."""
    gen = torch.Generator().manual_seed(9)
    shuffled = _from_probs([0.1, 0.5, 0.05, 0.2, 0.15])
    two_rows = torch.stack(
        [_from_probs([0.9, 0.04, 0.03, 0.02, 0.01]), _from_probs([0.22, 0.21, 0.2, 0.19, 0.18])]
    )  # (2, 5): linhas diferentes guardam quantidades diferentes
    long_tail = torch.cat([torch.randn(20, generator=gen), torch.full((30,), -40.0)])  # (50,)
    return [
        ("logits do enunciado (probabilidades 0,1 0,5 0,05 0,2 0,15), p=0,65", shuffled, 0.65),
        ("um lote (2, 5) com uma linha concentrada e outra espalhada, p=0,8", two_rows, 0.8),
        (
            "logits aleatórios de forma (2, 3, 7), p=0,7",
            torch.randn(2, 3, 7, generator=gen) * 2,
            0.7,
        ),
        ("50 logits, 30 deles quase impossíveis (-40), p=1", long_tail, 1.0),
        ("logits do enunciado, p=0,0001", shuffled, 1e-4),
        (
            "logits que já têm -inf (depois de um top-k), p=0,9",
            torch.tensor([1.0, float("-inf"), 3.0, 0.5, float("-inf"), 2.0]),
            0.9,
        ),
        ("logits enormes [1000, 998, 990, 997], p=0,9", torch.tensor([1000.0, 998, 990, 997]), 0.9),
        ("quatro logits empatados [2, 2, 2, 2, 0], p=0,5", torch.tensor([2.0, 2, 2, 2, 0]), 0.5),
    ]


def _top_p_random_case(gen: torch.Generator, seed: int) -> tuple[str, Tensor, float]:
    """Logits ``(b, V)`` sorteados e um ``p`` longe de qualquer soma parcial (sem ambiguidade)."""
    b = int(torch.randint(1, 4, (), generator=gen))
    vocab = int(torch.randint(6, 40, (), generator=gen))
    spread = float(torch.empty(()).uniform_(0.5, 3, generator=gen))
    logits = torch.randn(b, vocab, generator=gen) * spread  # (b, V)
    probs = logits.double().softmax(-1).sort(dim=-1, descending=True).values  # (b, V)
    partial_sums = torch.cat([torch.zeros(b, 1, dtype=torch.float64), probs.cumsum(-1)], dim=-1)
    while True:
        p = float(torch.empty(()).uniform_(0.05, 0.97, generator=gen))
        if bool(((partial_sums - p).abs() > 1e-3).all()):
            break
    where = f"logits sorteados de forma {(b, vocab)}, p={fmt(p, 4)} (caso sorteado, semente {seed})"
    return where, logits, p


def _nucleus(logits: Tensor, p: float, *, fill: float = float("-inf")) -> Tensor:
    """A resposta certa (desempate pela ordem do sort): logits no núcleo, ``fill`` fora."""
    if p >= 1.0:
        return logits.clone()
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
    probs = sorted_logits.double().softmax(dim=-1)  # (..., V)
    remove_sorted = probs.cumsum(-1) - probs >= p  # soma dos ANTERIORES já passou de p
    remove = remove_sorted.scatter(-1, order, remove_sorted)  # (..., V) na ordem do vocabulário
    return logits.masked_fill(remove, fill)


def _nucleus_size(logits: Tensor, p: float) -> Tensor:
    """Tamanho do menor conjunto com soma >= p, por linha: ``(..., V) -> (...)``."""
    return torch.isfinite(_nucleus(logits, p)).sum(-1)


def _is_valid_nucleus(logits: Tensor, received: Tensor, p: float) -> bool:
    """Logits originais num conjunto mínimo dos mais prováveis, ``-inf`` no resto (aceita
    qualquer desempate entre tokens empatados)."""
    kept = torch.isfinite(received)  # (..., V)
    if not bool(torch.isneginf(received[~kept]).all()):
        return False  # NaN ou +inf fora do núcleo
    if max_abs_diff(received[kept], logits[kept]) > _ATOL:
        return False  # os logits mantidos mudaram
    if p >= 1.0:
        return bool((kept | torch.isneginf(logits)).all())
    if not torch.equal(kept.sum(-1), _nucleus_size(logits, p)):
        return False
    probs = logits.double().softmax(-1)  # (..., V)
    low_kept = probs.masked_fill(~kept, float("inf")).min(-1).values  # (...)
    high_dropped = probs.masked_fill(kept, float("-inf")).max(-1).values  # (...)
    return bool((low_kept >= high_dropped - 1e-12).all())


def _top_p_variants(logits: Tensor, p: float) -> list[tuple[str, Tensor]]:
    """Os enganos típicos, calculados: (diagnóstico, saída que esse engano dá)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
    sorted_probs = sorted_logits.float().softmax(-1)  # (..., V)
    cumulative = sorted_probs.cumsum(-1)  # (..., V)

    def back(remove_sorted: Tensor) -> Tensor:  # (..., V) ordenado -> ordem do vocabulário
        return remove_sorted.scatter(-1, order, remove_sorted)

    crossing = cumulative > p  # corta o token que cruza o limiar
    crossing[..., 0] = False
    exp = sorted_logits.double().exp()  # estoura com logits enormes
    manual = exp / exp.sum(-1, keepdim=True)
    kept = torch.isfinite(_nucleus(logits, p))
    tied = _nucleus(logits, p).masked_fill(~kept, float("inf")).min(-1, keepdim=True).values
    variants = [
        (
            "o token que cruza o limiar foi jogado fora. Ele também fica: guarde o token i "
            "enquanto a soma dos ANTERIORES a ele ainda é < p (cortar onde a soma acumulada, "
            "já com o próprio token, passa de p tira um token a mais).",
            logits.masked_fill(back(crossing), float("-inf")),
        ),
        (
            "a saída ficou na ordem ordenada (do mais provável ao menos provável). Cada posição "
            "precisa continuar sendo o mesmo token da entrada: volte à ordem do vocabulário com "
            "os índices do sort (scatter).",
            _nucleus(sorted_logits, p),
        ),
        (
            "sua função devolveu probabilidades, não os logits. Devolva os logits originais no "
            "núcleo e -inf fora: o softmax fica para o sorteio, depois de todos os filtros.",
            logits.double().softmax(-1).masked_fill(~kept, float("-inf")),
        ),
        (
            "os tokens removidos viraram 0, não -inf. Um logit 0 ainda tem probabilidade "
            "exp(0) > 0 depois do softmax: use float('-inf').",
            _nucleus(logits, p, fill=0.0),
        ),
        *(
            []
            if p < 1.0
            else [
                (
                    "com p=1 a soma acumulada em float termina abaixo de 1 (por exemplo "
                    "0,99999994) e tokens quase impossíveis caíram fora. Trate p >= 1 à parte: "
                    "nada é filtrado.",
                    logits.masked_fill(back(cumulative - sorted_probs >= p), float("-inf")),
                )
            ]
        ),
        (
            "você manteve todos os tokens empatados com o último do núcleo. O núcleo é o MENOR "
            "conjunto com soma >= p: entre empatados, fique só com os que faltam.",
            logits.masked_fill(logits < tied, float("-inf")),
        ),
    ]
    if not bool(torch.isfinite(exp).all()):  # só quando o exp de fato estoura
        variants.append(
            (
                "as probabilidades saíram de exp(logit) / soma, que estoura com logits grandes "
                "(exp(1000) = inf e inf / inf = NaN). Use F.softmax, que subtrai o maior logit "
                "antes do exp.",
                logits.masked_fill(back((manual.cumsum(-1) - manual) >= p), float("-inf")),
            )
        )
    return variants


@exercise("Exercício 1 (top-p escrito por você)")
def check_top_p(top_p: Callable[[Tensor, float], Tensor]) -> None:
    """``top_p(logits (..., V), p) -> (..., V)``: logits no núcleo, ``-inf`` fora dele."""
    gen, seed = case_generator()
    cases = _top_p_fixed_cases() + [_top_p_random_case(gen, seed) for _ in range(3)]
    for description, logits, p in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            received = call_answer(top_p, {"logits": logits, "p": p}, where, _TOP_P_HINT)
        expect(
            _tpt_top_p_filter.__code__ not in codes,
            f"{where}, sua função chamou tpt.generation.top_p_filter (diretamente ou por "
            "outra função, como sample_next_token): o exercício pede o filtro escrito por "
            "você.",
        )
        received = _expect_float_like(received, logits, where)
        if _is_valid_nucleus(logits, received, p):
            continue
        _explain_top_p(logits, received, p, where)


def _explain_top_p(logits: Tensor, received: Tensor, p: float, where: str) -> None:
    variants = [(d, w.to(received.dtype)) for d, w in _top_p_variants(logits, p)]
    for diagnosis, wrong in unambiguous(variants, _ATOL):
        if max_abs_diff(received, wrong) <= _ATOL:
            raise ExerciseError(f"{where}, {diagnosis}")
    kept = torch.isfinite(received)
    expect(
        not bool(torch.isnan(received).any()),
        f"{where}, a saída tem NaN (esperava os logits originais no núcleo e -inf fora).",
    )
    expect(
        bool(kept.any(-1).all()),
        f"{where}, alguma linha ficou só com -inf. O token mais provável sempre fica, mesmo "
        "quando a probabilidade dele sozinho já passa de p.",
    )
    expected = _nucleus(logits, p)
    raise ExerciseError(
        f"{where}, esperava manter {_counts(torch.isfinite(expected))} token(s) por linha "
        f"(os mais prováveis, com os logits originais); sua saída manteve {_counts(kept)}, "
        f"com maior diferença {fmt(max_abs_diff(received, expected), 2, sci=True)} em "
        "relação ao esperado."
    )


def _counts(kept: Tensor) -> str:
    sizes = kept.reshape(-1, kept.shape[-1]).sum(-1).tolist()
    return ", ".join(str(n) for n in sizes)


# --------------------------------------------------------------------------------------
# Exercício 2: penalidade de repetição (CTRL), sem laços
# --------------------------------------------------------------------------------------
_PENALTY_HINT = (
    "Confira a assinatura, repetition_penalty(logits, previous, penalty), e as formas: "
    "logits é (b, V) e previous é (b, t) com ids long; logits.gather(-1, previous) dá "
    "(b, t) e logits.scatter(-1, previous, novos) volta a (b, V)."
)


def _penalized(logits: Tensor, previous: Tensor, penalty: float) -> Tensor:
    seen = logits.gather(-1, previous)  # (b, t)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)  # (b, t)
    return logits.scatter(-1, previous, seen)  # (b, V)


def _penalty_variants(logits: Tensor, previous: Tensor, penalty: float) -> list[tuple[str, Tensor]]:
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, previous, True)  # (b, V)
    counts = torch.zeros_like(logits).scatter_add(
        -1, previous, torch.ones_like(previous, dtype=logits.dtype)
    )  # (b, V): ocorrências de cada token
    factor = penalty**counts
    return [
        (
            "os logits negativos foram divididos pela penalidade, o que os aproxima de zero e "
            "AUMENTA a chance do token. Divida os positivos e multiplique os negativos "
            "(torch.where).",
            torch.where(seen, logits / penalty, logits),
        ),
        (
            "o sinal está trocado: os positivos foram multiplicados e os negativos divididos.",
            torch.where(seen, torch.where(logits > 0, logits * penalty, logits / penalty), logits),
        ),
        (
            "um token repetido foi penalizado uma vez POR OCORRÊNCIA. Cada token do histórico "
            "conta uma vez só (scatter escreve o mesmo valor nas posições repetidas; scatter_add "
            "acumula).",
            torch.where(logits > 0, logits / factor, logits * factor),
        ),
        (
            "todas as linhas usaram o histórico da primeira. Cada linha do lote tem o seu "
            "histórico: gather e scatter ao longo de dim=-1, linha a linha.",
            _penalized(logits, previous[:1].expand_as(previous), penalty),
        ),
        (
            "todos os tokens foram penalizados, não só os do histórico da linha.",
            torch.where(logits > 0, logits / penalty, logits * penalty),
        ),
    ]


def _penalty_fixed_cases() -> list[tuple[str, Tensor, Tensor, float]]:
    logits = torch.tensor(
        [[2.0, -1.0, 0.5, 0.0, -3.0, 1.5], [-2.0, 1.0, -0.5, 3.0, 0.25, -1.5]]
    )  # (2, 6): positivos, negativos e um zero
    previous = torch.tensor([[0, 1, 1, 4], [3, 3, 3, 2]])  # (2, 4): repetições, linhas diferentes
    return [
        (
            "logits (2, 6) com positivos, negativos e zero; histórico com repetições, penalty=2",
            logits,
            previous,
            2.0,
        )
    ]


def _penalty_random_case(gen: torch.Generator, seed: int) -> tuple[str, Tensor, Tensor, float]:
    b = int(torch.randint(2, 5, (), generator=gen))
    vocab = int(torch.randint(8, 30, (), generator=gen))
    t = int(torch.randint(3, 12, (), generator=gen))
    logits = torch.randn(b, vocab, generator=gen) * 2  # (b, V)
    previous = torch.randint(0, vocab // 2, (b, t), generator=gen)  # (b, t): com repetições
    penalty = round(float(torch.empty(()).uniform_(1.2, 3.0, generator=gen)), 2)
    where = (
        f"logits sorteados (b={b}, V={vocab}), histórico de {t} tokens, penalty="
        f"{fmt(penalty, 2)} (caso sorteado, semente {seed})"
    )
    return where, logits, previous, penalty


@exercise("Exercício 2 (penalidade de repetição, sem laços)")
def check_repetition_penalty(
    repetition_penalty: Callable[[Tensor, Tensor, float], Tensor],
) -> None:
    """``repetition_penalty(logits (b, V), previous (b, t), penalty) -> (b, V)``, vetorizada."""
    gen, seed = case_generator()
    cases = _penalty_fixed_cases() + [_penalty_random_case(gen, seed) for _ in range(3)]
    for description, logits, previous, penalty in cases:
        where = f"Para {description}"
        args = {"logits": logits, "previous": previous, "penalty": penalty}
        received = call_answer(repetition_penalty, args, where, _PENALTY_HINT)
        expected = _penalized(logits, previous, penalty)
        received = _expect_float_like(received, expected, where)
        variants = _penalty_variants(logits, previous, penalty)
        expect_close(received, expected, where, atol=_ATOL, variants=variants)

    def make_args(n: int) -> tuple[Tensor, Tensor, float]:
        g = torch.Generator().manual_seed(n)
        return torch.randn(n, 40, generator=g), torch.randint(0, 40, (n, n + 3), generator=g), 1.5

    small, large = op_counts_by_size(repetition_penalty, make_args, (3, 9))
    expect(
        small == large,
        f"sem laços: com b=3 e t=6 sua função executou {small} operações do PyTorch, e com b=9 "
        f"e t=12, {large}. Numa função vetorizada o número de operações não cresce com o "
        "tamanho: há um laço em Python (for, while, map, compreensão ou função auxiliar) sobre "
        "as linhas ou os tokens. Use gather, torch.where e scatter no lote inteiro.",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: um passo de atenção com cache
# --------------------------------------------------------------------------------------
_CACHE_HINT = (
    "Confira a assinatura, cached_attention(mha, x_new, cache), e as formas: x_new é "
    "(b, t, d); depois de dividir em cabeças, q, k e v são (b, h, t, d_h), e "
    "cache.update(k, v) devolve (b, h, s, d_h)."
)


def _heads(x: Tensor, h: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)  # (b, h, t, d_h)


def _cached_variant(
    mha: MultiHeadAttention, x_full: Tensor, start: int, end: int, variant: str = ""
) -> Tensor:
    """Saída das posições ``start..end-1`` calculada de um jeito (certo, ou um engano)."""
    h, d_h = mha.num_heads, mha.head_dim
    first = start if variant == "only_new" else 0  # "only_new": o cache foi ignorado
    q, k, v = mha.project_qkv(x_full[:, first:end])  # (b, s, d) cada
    if variant == "no_transpose":  # divisão em cabeças por reshape, sem transpose
        b, s, d = q.shape
        q, k, v = (z.reshape(b, h, s, d_h) for z in (q, k, v))
    else:
        q, k, v = (_heads(z, h) for z in (q, k, v))  # (b, h, s, d_h)
    q = q[:, :, start - first :]  # (b, h, t, d_h): só as consultas novas
    t, s = end - start, end - first
    scale = {"no_scale": 1.0, "sqrt_d": mha.embed_dim**-0.5, "d_h": 1.0 / d_h}.get(
        variant, d_h**-0.5
    )
    scores = q @ k.transpose(-2, -1) * scale  # (b, h, t, s)
    if variant == "top_mask":  # máscara causal alinhada pelo começo
        mask = torch.ones(t, s, dtype=torch.bool).triu(1)
    elif variant == "no_mask":
        mask = torch.zeros(t, s, dtype=torch.bool)
    else:
        mask = causal_mask(t, s)  # (t, s), alinhada ao fim
    weights = scores.masked_fill(mask, float("-inf")).softmax(-1)  # (b, h, t, s)
    out = (weights @ v).transpose(1, 2).reshape(q.shape[0], t, mha.embed_dim)  # (b, t, d)
    return out if variant == "no_out_proj" else mha.out_proj(out)


_CACHE_DIAGNOSES = {
    "no_mask": "a máscara causal ficou de fora: com mais de um token novo (o prefill), cada "
    "consulta enxergou chaves do seu futuro.",
    "top_mask": "a máscara causal está alinhada pelo COMEÇO (o is_causal do "
    "F.scaled_dot_product_attention faz isso quando s > t). A consulta i é a posição "
    "s - t + i: alinhe a máscara ao fim (tpt.causal_mask(t, s)).",
    "no_scale": "faltou dividir as pontuações por sqrt(d_h).",
    "sqrt_d": "as pontuações foram divididas por sqrt(d), a largura do modelo; a escala é "
    "1/sqrt(d_h), a largura de UMA cabeça.",
    "d_h": "as pontuações foram divididas por d_h; a escala é 1/sqrt(d_h).",
    "no_out_proj": "faltou aplicar mha.out_proj depois de juntar as cabeças.",
    "only_new": "a atenção olhou só para os tokens novos: use os K e V que cache.update(k, v) "
    "devolve (as posições guardadas + as novas).",
    "no_transpose": "a divisão em cabeças misturou posições: (b, t, d) vira (b, t, h, d_h) "
    "com view e só então (b, h, t, d_h) com transpose(1, 2) (um reshape direto para "
    "(b, h, t, d_h) embaralha os dados).",
}


def _cache_setups(gen: torch.Generator, seed: int) -> list[tuple[str, int, int, int, list[int]]]:
    """(descrição, b, h, d_h, pedaços): um fixo e um sorteado."""
    b = int(torch.randint(1, 3, (), generator=gen))
    h = int(torch.randint(2, 5, (), generator=gen))
    d_h = int(torch.randint(3, 7, (), generator=gen))
    chunks = [int(torch.randint(2, 5, (), generator=gen))] + [
        int(torch.randint(1, 3, (), generator=gen)) for _ in range(3)
    ]
    return [
        ("b=2, d=16, h=2", 2, 2, 8, [4, 1, 1, 2]),
        (f"b={b}, d={h * d_h}, h={h} (caso sorteado, semente {seed})", b, h, d_h, chunks),
    ]


@exercise("Exercício 3 (um passo de atenção com cache)")
def check_cached_attention(
    cached_attention: Callable[[MultiHeadAttention, Tensor, KVCache], Tensor],
) -> None:
    """``cached_attention(mha, x_new (b, t, d), cache) -> (b, t, d)``, igual à atenção sem cache."""
    gen, seed = case_generator()
    for description, b, h, d_h, chunks in _cache_setups(gen, seed):
        with torch.random.fork_rng(devices=[]):  # não mexe no gerador global do aluno
            torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
            mha = MultiHeadAttention(h * d_h, h).eval()
        x_full = torch.randn(b, sum(chunks), h * d_h, generator=gen)  # (b, s_total, d)
        with torch.no_grad():
            full = mha(x_full, is_causal=True)[0]  # (b, s_total, d): sem cache, tudo de uma vez
        cache = KVCache()
        start = 0
        for number, size in enumerate(chunks, 1):
            end = start + size
            kind = "prefill" if number == 1 else "passo"
            where = (
                f"Para {description}, pedaço {number} ({kind} de {size} token(s), posições "
                f"{start} a {end - 1})"
            )
            x_new = x_full[:, start:end].clone()  # (b, t, d)
            with torch.no_grad(), record_python_calls() as codes:
                received = call_answer(
                    lambda mha, x_new, cache=cache: cached_attention(mha, x_new, cache),
                    {"mha": mha, "x_new": x_new},
                    where,
                    _CACHE_HINT,
                )
            expect(
                MultiHeadAttention.forward.__code__ not in codes,
                f"{where}, sua função chamou a própria MultiHeadAttention (mha(...) ou "
                "mha.forward): o exercício pede o passo escrito com mha.project_qkv e "
                "mha.out_proj.",
            )
            expect(
                len(cache) == end,
                f"{where}, depois da chamada o cache tem {len(cache)} posições; esperava "
                f"{end}. Acrescente as chaves e os valores novos com k, v = cache.update(k, v).",
            )
            with torch.no_grad():
                variants = [
                    (diagnosis, _cached_variant(mha, x_full, start, end, variant))
                    for variant, diagnosis in _CACHE_DIAGNOSES.items()
                ]
            expect(
                isinstance(received, Tensor) and tuple(received.shape) == (b, size, h * d_h),
                f"{where}, esperava a saída (b, t, d) = {(b, size, h * d_h)}; recebi "
                + (
                    str(tuple(received.shape))
                    if isinstance(received, Tensor)
                    else type(received).__name__
                )
                + ".",
            )
            expect_close(received, full[:, start:end], where, atol=1e-4, variants=variants)
            start = end
