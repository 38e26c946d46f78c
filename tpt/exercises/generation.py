"""Exercícios do notebook 09 (geração): ``ex = checks("generation")``.

1. :func:`check_min_p`: o filtro min-p (limiar relativo ao token mais provável), sem laços.
2. :func:`check_repetition_penalty`: a penalidade de repetição (a regra de sinal do
   Hugging Face sobre a do CTRL), sem laços.
3. :func:`check_cached_attention`: um passo de atenção com ``tpt.KVCache``, a partir das
   projeções de uma ``tpt.MultiHeadAttention``, projetando só os tokens novos.

Cada conferência usa a máquina comum (``core``, ``rules``, ``guards``): as entradas são
as de verdade (e conferidas depois da chamada), há casos fixos e casos sorteados a cada
execução, e um diagnóstico só aparece quando a variante errada correspondente foi
calculada e bateu com a resposta. As regras valem pelo que **roda**: "sem os filtros
prontos" e "não chame a ``MultiHeadAttention``" olham as funções Python que executaram
(pelo código delas, não pelo nome), "sem laços" conta as operações ATen em dois tamanhos
e "projete só os tokens novos" soma as multiplicações feitas com a matriz
``[W_Q | W_K | W_V]`` (ou com cópias dela).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import tpt.generation as generation_module
from tpt.attention import MultiHeadAttention
from tpt.exercises.core import (
    ExerciseError,
    exercise,
    expect,
    expect_close,
    max_abs_diff,
    same_values,
    unambiguous,
)
from tpt.exercises.guards import call_answer, case_generator, randint
from tpt.exercises.rules import functions_from_file, op_counts_by_size, record_python_calls
from tpt.kv_cache import KVCache
from tpt.masks import causal_mask
from tpt.numfmt import fmt

__all__ = ["check_min_p", "check_repetition_penalty", "check_cached_attention"]

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
# Exercício 1: o filtro min-p, sem laços
# --------------------------------------------------------------------------------------
_MIN_P_HINT = (
    "Confira a assinatura, min_p(logits, p_min), e os eixos: logits tem forma (b, V), e o "
    "máximo de cada linha vai ao longo do último eixo (dim=-1, keepdim=True)."
)
_GENERATION_FILE = str(Path(generation_module.__file__).resolve())
# Os filtros prontos do transformers (MinPLogitsWarper e companhia) moram neste arquivo.
_HF_LOGITS_PROCESS = ("transformers", "generation", "logits_process.py")


def _from_probs(rows: list[list[float]]) -> Tensor:
    """Logits ``(b, V)`` cujo softmax dá as probabilidades pedidas."""
    return torch.tensor(rows, dtype=torch.float64).log().float()


def _min_p_fixed_cases() -> list[tuple[str, Tensor, float]]:
    """(descrição, logits (b, V), p_min): os casos do enunciado, longe da ambiguidade."""
    return [
        (
            "logits do enunciado (probabilidades 0,1 0,5 0,05 0,2 0,15), p_min=0,25",
            _from_probs([[0.1, 0.5, 0.05, 0.2, 0.15]]),
            0.25,
        ),
        (
            "um lote (2, 5) com uma linha concentrada (0,9 …) e outra espalhada (0,28 … 0,12), "
            "p_min=0,3",
            _from_probs([[0.9, 0.04, 0.03, 0.02, 0.01], [0.28, 0.24, 0.2, 0.16, 0.12]]),
            0.3,
        ),
        (
            "empates com o mais provável, logits [[2, 2, 1, 2, 0], [3, 1, 1, 0, -1]], p_min=1",
            torch.tensor([[2.0, 2, 1, 2, 0], [3.0, 1, 1, 0, -1]]),
            1.0,
        ),
        (
            "logits todos negativos [-1, -2, -3, -0,5], p_min=0,5",
            torch.tensor([[-1.0, -2, -3, -0.5]]),
            0.5,
        ),
        (
            "logits que já têm -inf (depois de um top-k) [1, -inf, 3, 0,5, -inf, 2], p_min=0,2",
            torch.tensor([[1.0, float("-inf"), 3.0, 0.5, float("-inf"), 2.0]]),
            0.2,
        ),
        (
            "logits enormes [1000, 998, 990, 997, 0], p_min=0,1",
            torch.tensor([[1000.0, 998, 990, 997, 0]]),
            0.1,
        ),
        (
            "p_min=0 com um logit muito baixo e um -inf, logits [0, -200, -inf, 1]",
            torch.tensor([[0.0, -200.0, float("-inf"), 1.0]]),
            0.0,
        ),
        _threshold_case(),
    ]


# Distância relativa ao limiar dos dois tokens do caso de limiar: uns 40 arredondamentos
# do float32 (uma resposta em float32 erra a razão p_i / p_max em menos de 1e-6), e
# pequena demais para uma tolerância (1e-6 absoluto nas probabilidades, torch.isclose).
_NEAR = 5e-6


def _threshold_case() -> tuple[str, Tensor, float]:
    """Um token logo abaixo do limiar p_min · p_max e outro logo acima (sem empate)."""
    p_min, top = 0.05, 2.0
    cut = top + math.log(p_min)  # o logit de quem fica exatamente no limiar
    logits = torch.tensor([[top, cut - _NEAR, 0.7, cut + _NEAR, -0.4, 1.3]])  # float32
    near = fmt(_NEAR, 0, sci=True)
    return (
        f"um token logo abaixo do limiar (posição 1, p_i / p_max = p_min · (1 − {near})) e "
        f"outro logo acima (posição 3, p_min · (1 + {near})), p_min={fmt(p_min, 2)}: o limiar "
        "é exato, sem tolerância",
        logits,
        p_min,
    )


def _min_p_random_case(gen: torch.Generator, seed: int) -> tuple[str, Tensor, float]:
    """Logits ``(b, V)`` sorteados e um ``p_min`` longe de qualquer razão ``p_i / p_max``."""
    b = randint(gen, 2, 4)
    vocab = randint(gen, 6, 39)
    spread = float(torch.empty(()).uniform_(0.5, 3, generator=gen))
    logits = torch.randn(b, vocab, generator=gen) * spread  # (b, V)
    log_ratios = logits.double() - logits.double().amax(-1, keepdim=True)  # ln(p_i / p_max)
    while True:
        p_min = float(torch.empty(()).uniform_(0.02, 0.9, generator=gen))
        if bool(((log_ratios - math.log(p_min)).abs() > 1e-3).all()):
            break
    where = (
        f"logits sorteados de forma {(b, vocab)}, p_min={fmt(p_min, 4)} (caso sorteado, "
        f"semente {seed})"
    )
    return where, logits, p_min


def _min_p_keep(logits: Tensor, p_min: float) -> Tensor:
    """Quem fica: ``p_i >= p_min * p_max`` na linha, ``(b, V)`` booleano."""
    probs = logits.double().softmax(dim=-1)  # (b, V)
    return probs >= p_min * probs.amax(dim=-1, keepdim=True)


def _min_p_variants(logits: Tensor, p_min: float) -> list[tuple[str, Tensor]]:
    """Os enganos típicos, calculados: (diagnóstico, saída que esse engano dá)."""
    inf = float("-inf")
    probs = logits.double().softmax(dim=-1)  # (b, V)
    top = probs.amax(dim=-1, keepdim=True)  # (b, 1)
    keep = _min_p_keep(logits, p_min)
    variants = [
        (
            "com > no lugar de >=, um token com p_i exatamente igual a p_min · p_max saiu. "
            "A igualdade conta: com p_min = 1 ficam o mais provável e os empatados com ele.",
            logits.masked_fill(~(probs > p_min * top), inf),
        ),
        (
            "o limiar foi p_min sozinho (absoluto). No min-p ele é relativo: p_min vezes a "
            "probabilidade do mais provável DA LINHA.",
            logits.masked_fill(~(probs >= p_min), inf),
        ),
        (
            "o limiar foi aplicado aos logits (logit >= p_min · maior logit), não às "
            "probabilidades. Compare probabilidades (softmax), ou, em logits, "
            "logit_i >= maior logit + ln(p_min).",
            logits.masked_fill(~(logits >= p_min * logits.amax(dim=-1, keepdim=True)), inf),
        ),
        (
            "o máximo foi tomado no lote inteiro, não em cada linha. Cada linha tem o seu mais "
            "provável: amax(dim=-1, keepdim=True).",
            logits.masked_fill(~(probs >= p_min * probs.max()), inf),
        ),
        (
            "a máscara ficou invertida: saíram os tokens que deviam ficar e ficaram os outros.",
            logits.masked_fill(keep, inf),
        ),
        (
            "sua função devolveu probabilidades, não os logits. Devolva os logits originais "
            "dos tokens que ficam e -inf nos outros: o softmax fica para o sorteio.",
            probs.masked_fill(~keep, inf),
        ),
        (
            "os tokens removidos viraram 0, não -inf. Um logit 0 ainda tem probabilidade "
            "exp(0) > 0 depois do softmax: use float('-inf').",
            logits.masked_fill(~keep & torch.isfinite(logits), 0.0),
        ),
    ]
    exp = logits.double().exp()  # estoura com logits enormes
    if not bool(torch.isfinite(exp[torch.isfinite(logits)]).all()):  # só quando estoura
        manual = exp / exp.sum(dim=-1, keepdim=True)  # (b, V), com NaN
        limit = p_min * manual.amax(dim=-1, keepdim=True)  # NaN: toda comparação dá False
        overflow = (
            "as probabilidades saíram de exp(logit) / soma, que estoura com logits grandes "
            "(exp(1000) passa do maior float e a divisão dá NaN, e toda comparação com NaN "
            "dá False). Use F.softmax, que subtrai o maior logit antes do exp."
        )
        variants.append((overflow, logits.masked_fill(manual < limit, inf)))  # fica tudo
        variants.append((overflow, logits.masked_fill(~(manual >= limit), inf)))  # sai tudo
    return variants


def _ready_made_filters(codes: set[types.CodeType]) -> set[str]:
    """Funções de tpt.generation e dos filtros do transformers que rodaram."""
    found = functions_from_file(codes, _GENERATION_FILE)
    found |= {
        getattr(code, "co_qualname", code.co_name)
        for code in tuple(codes)
        if Path(code.co_filename).parts[-3:] == _HF_LOGITS_PROCESS
    }
    return found


@exercise("Exercício 1 (o filtro min-p, sem laços)")
def check_min_p(min_p: Callable[[Tensor, float], Tensor]) -> None:
    """``min_p(logits (b, V), p_min) -> (b, V)``: logits com ``p_i >= p_min * p_max``, ``-inf``
    nos outros."""
    gen, seed = case_generator()
    cases = _min_p_fixed_cases() + [_min_p_random_case(gen, seed) for _ in range(3)]
    for description, logits, p_min in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            received = call_answer(min_p, {"logits": logits, "p_min": p_min}, where, _MIN_P_HINT)
        ready_made = sorted(_ready_made_filters(codes))
        expect(
            not ready_made,
            f"{where}, rodou um filtro pronto durante a sua função ({', '.join(ready_made)}): o "
            "exercício pede o min-p escrito por você, sem os filtros de tpt.generation nem os "
            "do transformers.",
        )
        received = _expect_float_like(received, logits, where)
        expected = logits.masked_fill(~_min_p_keep(logits, p_min), float("-inf"))
        if same_values(received, expected, _ATOL):
            continue
        _explain_min_p(logits, received, p_min, where)

    def make_args(n: int) -> tuple[Tensor, float]:
        # O lote e o vocabulário crescem juntos: um laço sobre qualquer um dos dois aparece.
        return torch.randn(n, 8 * n, generator=torch.Generator().manual_seed(n)), 0.1

    small, large = op_counts_by_size(min_p, make_args, (3, 9))
    expect(
        small == large,
        f"sem laços: com b=3 linhas e V=24 sua função executou {small} operações do PyTorch, "
        f"e com b=9 e V=72, {large}. Numa função vetorizada o número de operações não cresce "
        "com o lote nem com o vocabulário: há um laço em Python (for, while, map, compreensão "
        "ou função auxiliar) sobre as linhas ou sobre os tokens. Trate o lote inteiro de uma "
        "vez (softmax e amax com dim=-1).",
    )


def _describe(value: float) -> str:
    """Um valor da saída, dito em palavras quando não é um número finito."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return fmt(value, 4)


def _explain_min_p(logits: Tensor, received: Tensor, p_min: float, where: str) -> None:
    """Diz o que há de errado: um engano típico reconhecido, ou os fatos da primeira linha."""
    variants = [(d, w.to(received.dtype)) for d, w in _min_p_variants(logits, p_min)]
    for diagnosis, wrong in unambiguous(variants, _ATOL):
        if same_values(received, wrong, _ATOL):
            raise ExerciseError(f"{where}, {diagnosis}")
    keep = _min_p_keep(logits, p_min)  # (b, V)
    received = received.double()
    # Fora do filtro: só -inf.
    bad_out = ~keep & ~torch.isneginf(received)
    if bool(bad_out.any()):
        row, col = (int(i) for i in bad_out.nonzero()[0])
        raise ExerciseError(
            f"{where}, o token {col} da linha {row} devia sair (p_i < p_min · p_max) e virar "
            f"-inf; sua saída tem {_describe(float(received[row, col]))} ali."
        )
    # Dentro do filtro: os logits originais.
    nan_in = keep & torch.isnan(received)
    if bool(nan_in.any()):
        row, col = (int(i) for i in nan_in.nonzero()[0])
        raise ExerciseError(
            f"{where}, o token {col} da linha {row} devia ficar com o logit original; sua "
            "saída tem NaN ali."
        )
    emptied = torch.isneginf(received).all(dim=-1) & ~torch.isneginf(logits).all(dim=-1)
    if bool(emptied.any()):
        row = int(emptied.nonzero()[0])
        raise ExerciseError(
            f"{where}, a linha {row} ficou só com -inf. O mais provável sempre fica: p_max >= "
            "p_min · p_max, com igualdade quando p_min = 1 (a comparação é >=, não >)."
        )
    lost = keep & torch.isneginf(received) & ~torch.isneginf(logits)
    if bool(lost.any()):
        row, col = (int(i) for i in lost.nonzero()[0])
        raise ExerciseError(
            f"{where}, o token {col} da linha {row} devia ficar (p_i >= p_min · p_max), mas "
            "sua saída pôs -inf nele."
        )
    diff = max_abs_diff(received[keep], logits[keep].double())
    raise ExerciseError(
        f"{where}, os tokens que ficam são os certos, mas os logits deles mudaram: maior "
        f"diferença {_describe(diff) if math.isinf(diff) else fmt(diff, 2, sci=True)} "
        f"(tolerância {fmt(_ATOL, 0, sci=True)}). Devolva os logits originais, sem "
        "normalizar nem dividir."
    )


# --------------------------------------------------------------------------------------
# Exercício 2: penalidade de repetição (o CTRL com o sinal corrigido pelo Hugging Face), sem laços
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
            "AUMENTA a chance do token (é a regra original do CTRL, que o Hugging Face "
            "corrigiu). Divida os positivos e multiplique os negativos (torch.where).",
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


# Multiplicações de matrizes: o trabalho é (elementos da saída) × (eixo somado).
_MATMUL_OPS = {
    "mm": 0,
    "addmm": 1,
    "bmm": 0,
    "baddbmm": 1,
    "mv": 0,
    "addmv": 1,
    "dot": 0,
    "vdot": 0,
    "addbmm": 1,
    "_addmm_activation": 1,
}  # nome do núcleo ATen -> posição do primeiro fator nos argumentos


def _storage(tensor: Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _flat_tensors(values: tuple[Any, ...] | list[Any]) -> list[Tensor]:
    """Os tensores de uma lista de argumentos (e de listas dentro dela, como no ``cat``)."""
    found = []
    for value in values:
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, Tensor))
    return found


class _ProjectionWork(TorchDispatchMode):
    """Soma as multiplicações feitas com ``weight`` ou com qualquer tensor derivado dele.

    Uma cópia (``clone``, ``.to``, ``contiguous``, um pedaço com ``split``) continua
    "a matriz de projeção": as saídas de operações que não são multiplicações de matrizes
    herdam a marca. Os tensores marcados ficam guardados até o fim, para que a memória
    deles não seja reaproveitada por outro tensor durante a chamada.
    """

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.marked = {_storage(weight)}
        self.kept: list[Tensor] = []
        self.multiplies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if any(_storage(t) in self.marked for t in _flat_tensors((*args, *kwargs.values()))):
            name = func.overloadpacket.__name__
            if name in _MATMUL_OPS:
                first = args[_MATMUL_OPS[name]]
                self.multiplies += out.numel() * first.shape[-1]
            else:
                for tensor in _flat_tensors(out if isinstance(out, (list, tuple)) else (out,)):
                    self.marked.add(_storage(tensor))
                    self.kept.append(tensor)
        return out


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
            work = _ProjectionWork(mha.qkv_proj.weight)
            with torch.no_grad(), record_python_calls() as codes, work:
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
            weight = mha.qkv_proj.weight  # (3d, d): [W_Q | W_K | W_V] empilhadas
            projected = work.multiplies / weight.numel()  # posições projetadas, em média
            expect(
                work.multiplies <= b * size * weight.numel(),
                f"{where}, sua função fez com a matriz [W_Q | W_K | W_V] (mha.qkv_proj.weight) "
                f"o trabalho de projetar {fmt(projected, 0)} posições; os tokens novos são "
                f"b × t = {b * size}. Projete só x_new: as chaves e os valores das posições "
                "antigas já estão no cache, e é isso que o cache economiza.",
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
