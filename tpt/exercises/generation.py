"""Conferências dos exercícios de notebooks/09_geracao.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_top_p`: a amostragem de núcleo (top-p) escrita pelo aluno, sem
   ``tpt.generation.top_p_filter``: dado ``logits`` ``(..., V)`` e ``p``, manter o
   **menor** conjunto de tokens mais prováveis cuja probabilidade somada é ``>= p`` e
   pôr ``-inf`` nos demais. Casos de borda: empates (qualquer escolha entre tokens
   empatados é aceita, desde que o conjunto seja mínimo), ``p = 1`` (não filtra nada,
   mesmo com a soma acumulada em float arredondando para baixo), ``p`` minúsculo (fica
   pelo menos o mais provável), logits enormes e ``-inf`` já presentes.
2. :func:`check_repetition_penalty`: a penalidade de repetição do CTRL (Keskar et al.,
   2019) para um lote, **sem laços** em Python: cada token que já aparece no histórico
   da **sua** linha tem o logit dividido por ``penalty`` se for positivo e multiplicado
   se for negativo, uma vez só, por mais que se repita.
3. :func:`check_cached_attention`: um passo de atenção com cache de chaves e valores,
   a partir das projeções de uma ``tpt.MultiHeadAttention``: projetar **só** os tokens
   novos, acrescentá-los ao ``KVCache`` e atender às chaves guardadas com a máscara
   causal alinhada ao fim. A saída deve ser igual à da atenção sem cache sobre a
   sequência inteira. Regra: sem chamar a própria ``MultiHeadAttention`` (o ``forward``
   fica bloqueado durante a conferência).

Cada conferência compara com uma referência e, quando a resposta erra, procura o engano
mais provável (probabilidades no lugar de logits, o token que cruza o limiar jogado
fora, saída na ordem ordenada, sinal da penalidade, máscara causal esquecida no prefill
ou alinhada pelo começo, cache que não cresce...) para dizer, em português, o que
corrigir.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import tpt
import tpt.generation
from tpt.attention import MultiHeadAttention
from tpt.exercises import (
    ExerciseError,
    _code_objects,
    _function_code,
    exercise,
    expect,
    forbid,
    references,
    uses_loops,
)
from tpt.generation import top_p_filter as _tpt_top_p_filter
from tpt.kv_cache import KVCache
from tpt.masks import causal_mask
from tpt.numfmt import fmt

__all__ = ["check_top_p", "check_repetition_penalty", "check_cached_attention"]

_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _max_diff(a: Tensor, b: Tensor) -> str:
    diff = (a.double() - b.double()).abs()
    diff = diff.masked_fill(torch.isnan(diff), float("inf"))
    return fmt(diff.max().item(), sci=True)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else ""


def _call(fn: Callable[..., Any], args: tuple[Any, ...], where: str, hint: str) -> Any:
    """Chama a função do aluno; um erro do PyTorch vira uma explicação em português."""
    try:
        return fn(*args)
    except (NotImplementedError, ExerciseError):
        raise
    except TypeError as err:
        if "positional argument" in str(err) or "unexpected keyword" in str(err):
            raise ExerciseError(
                f"{where}, a conferência chamou a sua função com {len(args)} argumentos e ela "
                f"os recusou. Confira a assinatura pedida no enunciado (mensagem original: "
                f"{_first_line(err)})"
            ) from None
        raise ExerciseError(
            f"{where}, sua função levantou TypeError. {hint} (mensagem original: "
            f"{_first_line(err)})"
        ) from None
    except Exception as err:
        raise ExerciseError(
            f"{where}, sua função levantou {type(err).__name__}. {hint} (mensagem original: "
            f"{_first_line(err)})"
        ) from None


def _as_tensor(value: Any, where: str, shape: tuple[int, ...]) -> Tensor:
    expect(
        isinstance(value, Tensor),
        f"{where}: esperava um tensor de forma {shape}; recebi {type(value).__name__}.",
    )
    expect(
        tuple(value.shape) == shape,
        f"{where}: esperava a forma {shape}, a mesma da entrada; recebi {_shape(value)}.",
    )
    expect(
        value.is_floating_point(),
        f"{where}: esperava um tensor float (logits); recebi dtype {value.dtype}.",
    )
    return value.detach()


# --------------------------------------------------------------------------------------
# Exercício 1: top-p (amostragem de núcleo) escrito por você
# --------------------------------------------------------------------------------------

_TOP_P_RULE = (
    "o exercício pede o filtro top-p escrito por você (ordenar, somar, cortar e voltar à "
    "ordem do vocabulário), sem tpt.generation.top_p_filter. A função do tpt serve para "
    "conferir depois, não para a resposta."
)
_TOP_P_HINT = (
    "Confira as formas: ordene ao longo do último eixo (dim=-1), some com cumsum(dim=-1) e "
    "devolva um tensor com a forma dos logits."
)


def _logits_from_probs(probs: list[float]) -> Tensor:
    return torch.tensor(probs, dtype=torch.float64).log().float()


def _top_p_cases() -> list[tuple[str, Tensor, float]]:
    """(descrição, logits, p). Sem empates na fronteira, salvo no caso dos empates."""
    gen = torch.Generator().manual_seed(9)
    # O exemplo do enunciado, fora de ordem: 0,5 0,2 0,15 0,1 0,05 embaralhados.
    shuffled = _logits_from_probs([0.1, 0.5, 0.05, 0.2, 0.15])
    peaked_and_flat = torch.stack(
        [
            _logits_from_probs([0.9, 0.04, 0.03, 0.02, 0.01]),
            _logits_from_probs([0.22, 0.21, 0.2, 0.19, 0.18]),
        ]
    )  # (2, 5): linhas diferentes guardam quantidades diferentes
    three_d = torch.randn(2, 3, 7, generator=gen) * 2.0  # (2, 3, 7)
    long_tail = torch.cat([torch.randn(20, generator=gen), torch.full((30,), -40.0)])  # (50,)
    with_inf = torch.tensor([1.0, float("-inf"), 3.0, 0.5, float("-inf"), 2.0])
    huge = torch.tensor([1000.0, 998.0, 990.0, 997.0])
    return [
        ("logits do enunciado (probabilidades 0,1 0,5 0,05 0,2 0,15), p=0,65", shuffled, 0.65),
        ("os mesmos logits, p=0,9", shuffled, 0.9),
        ("um lote (2, 5) com uma linha concentrada e outra espalhada, p=0,8", peaked_and_flat, 0.8),
        ("logits aleatórios de forma (2, 3, 7), p=0,7", three_d, 0.7),
        ("50 logits, 30 deles quase impossíveis (-40), p=1", long_tail, 1.0),
        ("logits do enunciado, p=0,0001", shuffled, 1e-4),
        ("logits que já têm -inf (depois de um top-k), p=0,9", with_inf, 0.9),
        ("logits enormes [1000, 998, 990, 997], p=0,9", huge, 0.9),
    ]


def _nucleus_size(probs: Tensor, p: float) -> Tensor:
    """Tamanho do menor conjunto com soma >= p, por linha: ``(..., V) -> (...)``."""
    sorted_probs = probs.sort(dim=-1, descending=True).values  # (..., V)
    before = sorted_probs.cumsum(-1) - sorted_probs  # soma dos anteriores, (..., V)
    return (before < p - 1e-12).sum(-1).clamp(min=1)  # (...)


def _is_valid_nucleus(logits: Tensor, kept: Tensor, p: float) -> bool:
    """``kept`` (..., V) é um núcleo mínimo válido? Aceita qualquer desempate."""
    probs = F.softmax(logits.double(), dim=-1)  # (..., V)
    if p >= 1.0:
        return bool((kept | torch.isneginf(logits)).all())
    finite = ~torch.isneginf(logits)
    if bool((kept & ~finite).any()):
        return False
    size_ok = torch.equal(kept.sum(-1), _nucleus_size(probs, p))
    # Todo token guardado é pelo menos tão provável quanto qualquer um jogado fora.
    low_kept = probs.masked_fill(~kept, float("inf")).min(-1).values  # (...)
    high_dropped = probs.masked_fill(kept, float("-inf")).max(-1).values  # (...)
    top_ok = bool((low_kept >= high_dropped - 1e-12).all())
    mass_ok = bool(((probs * kept).sum(-1) >= p - 1e-9).all())
    return size_ok and top_ok and mass_ok


def _diagnose_top_p(logits: Tensor, received: Tensor, p: float, where: str) -> None:
    """Procura o engano mais provável e levanta a mensagem dele."""
    probs = F.softmax(logits.double(), dim=-1)  # (..., V)
    expect(
        not bool(torch.isnan(received).any()),
        f"{where}: a saída tem NaN. Com logits grandes, exp(logit) estoura: use F.softmax "
        "(ou subtraia o máximo antes do exp) para ter as probabilidades.",
    )
    zeroed = (received == 0) & (logits != 0)  # removidos com 0 em vez de -inf?
    expect(
        not bool(zeroed.any()) or bool(torch.isneginf(received).any()),
        f"{where}: os tokens removidos viraram 0, não -inf. Um logit 0 ainda tem "
        "probabilidade exp(0) > 0 depois do softmax: use float('-inf').",
    )
    kept = torch.isfinite(received)  # (..., V)
    kept_values = received[kept].double()
    expect(
        not (
            kept_values.numel() > 0
            and bool(((kept_values >= 0) & (kept_values <= 1)).all())
            and not torch.allclose(kept_values, logits[kept].double(), atol=_ATOL)
        ),
        f"{where}: sua função devolveu probabilidades (depois do softmax). Devolva os "
        "logits originais nos tokens mantidos e -inf nos outros: quem transforma em "
        "probabilidades é o sorteio, depois de todos os filtros.",
    )
    sorted_logits = logits.sort(dim=-1, descending=True).values  # (..., V)
    expect(
        not torch.equal(received, _tpt_top_p_filter(sorted_logits, p))
        or torch.equal(sorted_logits, logits),
        f"{where}: a saída ficou na ordem ordenada (do mais provável ao menos). Cada "
        "posição da saída precisa continuar sendo o mesmo token da entrada: volte à "
        "ordem do vocabulário com os índices do sort (scatter) antes de devolver.",
    )
    expect(
        bool(kept.any(-1).all()),
        f"{where}: alguma linha ficou só com -inf. O mais provável sempre fica, mesmo "
        "quando a probabilidade dele sozinho já passa de p (e o softmax de uma linha só de "
        "-inf dá NaN).",
    )
    expect(
        bool((kept_values - logits[kept].double()).abs().max() <= _ATOL),
        f"{where}: os logits mantidos mudaram (diferença máxima "
        f"{_max_diff(received[kept], logits[kept])}). Mantenha os valores originais; só os "
        "removidos viram -inf (não renormalize nem devolva log-probabilidades).",
    )
    expect(
        not bool(logits[torch.isfinite(logits)].abs().max() > 80),
        f"{where}: o núcleo saiu errado com logits grandes. exp(1000) estoura o float "
        "(vira inf, e inf / inf = NaN): calcule as probabilidades com F.softmax, ou "
        "subtraia o maior logit antes do exp.",
    )
    expect(
        p < 1.0,
        f"{where}: com p=1 nada deve ser filtrado, e a sua função removeu "
        f"{int((~kept & torch.isfinite(logits)).sum())} token(s). Em float, a soma "
        "acumulada pode terminar em 0,99999994 (menor que 1), e tokens quase impossíveis "
        "caem fora. Trate p >= 1 à parte (devolva uma cópia dos logits).",
    )
    mass = (probs * kept).sum(-1)  # (...)
    expected_size = _nucleus_size(probs, p)  # (...)
    expect(
        bool((mass >= p - 1e-9).all()),
        f"{where}: os tokens mantidos somam {fmt(mass.min().item(), 3)} de probabilidade, "
        f"menos que p={fmt(p, 4)}. O token que cruza o limiar também fica: guarde o token "
        "i enquanto a soma dos anteriores a ele ainda é < p (um erro comum é cortar onde a "
        "soma acumulada, já incluindo o próprio token, passa de p).",
    )
    expect(
        bool((kept.sum(-1) <= expected_size).all()),
        f"{where}: você guardou tokens demais ({int(kept.sum(-1).max())} numa linha que "
        f"precisa de só {int(expected_size.max())}). O núcleo é o menor conjunto cuja soma "
        "é >= p; com empates, escolha qualquer um dos empatados, mas não todos.",
    )
    expect(
        False,
        f"{where}: o conjunto mantido não é o dos tokens mais prováveis. Ordene as "
        "probabilidades em ordem decrescente (descending=True) e volte à ordem do "
        "vocabulário com os índices do sort.",
    )


def _uses_tpt_top_p(fn: Callable[..., Any]) -> bool:
    """A função cita ``top_p_filter`` ou um apelido dele (``from ... import X as Y``)?"""
    if references(fn, "top_p_filter"):
        return True
    fn = inspect.unwrap(fn)
    names = {n for code in _code_objects(_function_code(fn)) for n in code.co_names}
    scope = getattr(fn, "__globals__", {})
    cells = [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ())]
    return any(scope.get(n) is _tpt_top_p_filter for n in names) or any(
        c is _tpt_top_p_filter for c in cells
    )


@exercise("Exercício 1 (top-p escrito por você)")
def check_top_p(top_p: Callable[[Tensor, float], Tensor]) -> None:
    """``top_p(logits (..., V), p) -> logits (..., V)`` com ``-inf`` fora do núcleo."""
    expect(not _uses_tpt_top_p(top_p), f"sua função usa top_p_filter: {_TOP_P_RULE}")
    cases = _top_p_cases()
    # Empates: quatro tokens empatados no topo (0,237 cada) e p=0,5 pedem exatamente 3.
    cases.append(
        (
            "quatro logits empatados [2, 2, 2, 2, 0], p=0,5",
            torch.tensor([2.0, 2.0, 2.0, 2.0, 0.0]),
            0.5,
        )
    )
    with forbid(tpt.generation, "top_p_filter", f"sua função chamou top_p_filter: {_TOP_P_RULE}"):
        for description, logits, p in cases:
            where = f"para {description}"
            original = logits.clone()
            received = _call(top_p, (logits, p), where, _TOP_P_HINT)
            expect(
                torch.equal(logits, original),
                f"{where}: sua função modificou os logits de entrada no lugar. Devolva um "
                "tensor novo (masked_fill, não masked_fill_), porque quem chamou ainda usa "
                "os logits originais.",
            )
            received = _as_tensor(received, where, tuple(logits.shape)).float()
            kept = torch.isfinite(received)
            values_ok = bool(kept.any()) and bool(
                (received[kept].double() - logits[kept].double()).abs().max() <= _ATOL
            )
            only_inf = bool(torch.isneginf(received[~kept]).all())
            if values_ok and only_inf and _is_valid_nucleus(logits, kept, p):
                continue
            _diagnose_top_p(logits, received, p, where)


# --------------------------------------------------------------------------------------
# Exercício 2: penalidade de repetição (CTRL), sem laços
# --------------------------------------------------------------------------------------

_PENALTY_HINT = (
    "Confira as formas: logits é (b, V) e previous é (b, t) com ids long; logits.gather("
    "-1, previous) dá (b, t) e logits.scatter(-1, previous, novos) volta a (b, V)."
)


def _reference_penalty(logits: Tensor, previous: Tensor, penalty: float) -> Tensor:
    seen = logits.gather(-1, previous)  # (b, t)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)  # (b, t)
    return logits.scatter(-1, previous, seen)  # (b, V)


def _penalty_cases() -> list[tuple[str, Tensor, Tensor, float]]:
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 10, generator=gen) * 2.0  # (3, 10): positivos e negativos
    logits[0, 2] = 0.0  # um logit zero no histórico: continua 0
    previous = torch.tensor(
        [[2, 5, 5, 5, 1, 7], [0, 0, 0, 0, 0, 0], [9, 3, 8, 3, 4, 6]]
    )  # (3, 6): repetições e históricos diferentes por linha
    logits_b = torch.randn(2, 12, generator=gen) * 3.0
    previous_b = torch.tensor([[11, 4, 4], [4, 0, 11]])  # (2, 3)
    return [
        (
            "um lote (3, 10) com históricos diferentes por linha e penalty=1,3",
            logits,
            previous,
            1.3,
        ),
        ("outro lote (2, 12) com penalty=2", logits_b, previous_b, 2.0),
        ("penalty=1 (não deve mudar nada)", logits_b, previous_b, 1.0),
    ]


def _diagnose_penalty(
    logits: Tensor, previous: Tensor, penalty: float, received: Tensor, where: str
) -> None:
    def close(candidate: Tensor) -> bool:
        return torch.allclose(received.double(), candidate.double(), atol=_ATOL, rtol=0)

    seen = logits.gather(-1, previous)
    divided = logits.scatter(-1, previous, seen / penalty)
    expect(
        not close(divided),
        f"{where}: você dividiu todos os logits do histórico por penalty. Para um logit "
        "NEGATIVO, dividir o aproxima de zero e DEIXA o token mais provável. A regra do "
        "CTRL: positivo / penalty, negativo * penalty (torch.where(seen > 0, ...)).",
    )
    # Penalizado uma vez por ocorrência: x / penalty^n (ou x * penalty^n).
    counts = torch.zeros_like(logits).scatter_add(
        -1, previous, torch.ones_like(previous, dtype=logits.dtype)
    )
    factor = penalty**counts
    repeated = torch.where(logits > 0, logits / factor, logits * factor)
    expect(
        not close(repeated),
        f"{where}: tokens repetidos no histórico foram penalizados uma vez POR OCORRÊNCIA. "
        "A penalidade do CTRL vale uma vez por token já visto, por mais que ele se repita "
        "(scatter escreve o mesmo valor nas posições repetidas; não acumule).",
    )
    first_row = _reference_penalty(logits, previous[:1].expand_as(previous), penalty)
    expect(
        not close(first_row) or torch.equal(previous, previous[:1].expand_as(previous)),
        f"{where}: todas as linhas usaram o histórico da primeira. Cada linha do lote tem "
        "o SEU histórico: use previous inteiro (b, t) no gather/scatter, linha a linha.",
    )
    expect(
        False,
        f"{where}: a saída difere da esperada (diferença máxima "
        f"{_max_diff(received, _reference_penalty(logits, previous, penalty))}). Só os "
        "tokens que aparecem no histórico da linha mudam; os outros logits ficam iguais.",
    )


@exercise("Exercício 2 (penalidade de repetição, sem laços)")
def check_repetition_penalty(repetition_penalty: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """``repetition_penalty(logits (b, V), previous (b, t), penalty) -> (b, V)``."""
    for description, logits, previous, penalty in _penalty_cases():
        where = f"para {description}"
        original = logits.clone()
        received = _call(repetition_penalty, (logits, previous, penalty), where, _PENALTY_HINT)
        expect(
            torch.equal(logits, original),
            f"{where}: sua função modificou os logits de entrada no lugar. Devolva um tensor "
            "novo (scatter, não scatter_), porque o gerador ainda usa os logits originais.",
        )
        received = _as_tensor(received, where, tuple(logits.shape))
        expected = _reference_penalty(logits, previous, penalty)
        if not torch.allclose(received.double(), expected.double(), atol=_ATOL, rtol=0):
            _diagnose_penalty(logits, previous, penalty, received, where)
    expect(
        not uses_loops(repetition_penalty),
        "os valores estão certos, mas a sua função tem um laço (for, while ou compreensão "
        "de lista). O enunciado pede sem laços: esta função roda a cada token gerado, para "
        "o lote inteiro. Use logits.gather(-1, previous), torch.where e "
        "logits.scatter(-1, previous, ...).",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: um passo de atenção com cache de chaves e valores
# --------------------------------------------------------------------------------------

_CACHE_RULE = (
    "o exercício pede o passo de atenção escrito por você, com mha.project_qkv (ou "
    "mha.qkv_proj) e mha.out_proj; chamar a própria MultiHeadAttention (mha(...) ou "
    "mha.forward) não vale."
)
_CACHE_HINT = (
    "Confira as formas: (b, t, d) -> view(b, t, h, d_h) -> transpose(1, 2) dá (b, h, t, d_h); "
    "cache.update(k, v) devolve K e V (b, h, s, d_h) com todas as posições guardadas."
)
# Tamanhos dos pedaços: um prefill de 4 tokens, passos de 1 e um pedaço de 2.
_CHUNKS = (4, 1, 1, 2, 1)


def _heads(x: Tensor, h: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)  # (b, h, t, d_h)


def _manual_attention(
    mha: MultiHeadAttention, x_full: Tensor, start: int, end: int, variant: str
) -> Tensor:
    """Saída das posições start..end-1 com uma variante (certa ou errada) da máscara."""
    h = mha.num_heads
    q = _heads(mha.project_qkv(x_full[:, start:end])[0], h)  # (b, h, t, d_h)
    _, k, v = mha.project_qkv(x_full[:, :end])  # 2 x (b, s, d)
    k, v = _heads(k, h), _heads(v, h)  # (b, h, s, d_h)
    t, s = end - start, end
    scale = 1.0 if variant == "no_scale" else 1.0 / math.sqrt(mha.head_dim)
    scores = q @ k.transpose(-2, -1) * scale  # (b, h, t, s)
    if variant == "no_mask":
        mask = None
    elif variant == "top_left":
        mask = torch.ones(t, s, dtype=torch.bool).triu(1)  # alinhada pelo começo
    else:
        mask = causal_mask(t, s)  # alinhada pelo fim: a consulta i é a posição s - t + i
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    out = scores.softmax(-1) @ v  # (b, h, t, d_h)
    out = out.transpose(1, 2).reshape(x_full.shape[0], t, mha.embed_dim)  # (b, t, d)
    return out if variant == "no_out_proj" else mha.out_proj(out)


@contextmanager
def _row_counter(mha: MultiHeadAttention) -> Iterator[dict[str, int]]:
    """Conta quantas posições chegaram à projeção de K e V (para saber se só os novos entraram).

    Vale para ``mha.project_qkv(...)`` e para ``mha.qkv_proj(...)``; ``rows["kv"]`` fica 0
    quando nenhuma das duas é chamada (um ``F.linear`` com os pesos, por exemplo).
    """
    rows = {"kv": 0}
    project_qkv = mha.project_qkv

    def counted(query: Tensor, key: Tensor | None = None, value: Tensor | None = None) -> Any:
        source = query if key is None else key
        rows["kv"] = max(rows["kv"], source.shape[-2] if source.dim() > 1 else 1)
        return project_qkv(query, key, value)

    def hook(_module: Any, inputs: tuple[Tensor, ...], _output: Any) -> None:
        rows["kv"] = max(rows["kv"], inputs[0].shape[-2] if inputs[0].dim() > 1 else 1)

    handle = mha.qkv_proj.register_forward_hook(hook)
    mha.project_qkv = counted  # type: ignore[method-assign]
    try:
        yield rows
    finally:
        del mha.project_qkv
        handle.remove()


def _diagnose_cached(
    mha: MultiHeadAttention, x_full: Tensor, start: int, end: int, received: Tensor, where: str
) -> None:
    def close(variant: str) -> bool:
        candidate = _manual_attention(mha, x_full, start, end, variant)
        return torch.allclose(received.double(), candidate.double(), atol=_ATOL, rtol=0)

    t = end - start
    expect(
        not (t > 1 and close("no_mask")),
        f"{where}: as {t} consultas novas enxergaram chaves do futuro: faltou a máscara "
        "causal quando entra mais de um token (o prefill do prompt, por exemplo). Só a "
        "última linha sai certa sem ela: no prefill, como no treino, a posição i só vê 0..i.",
    )
    expect(
        not close("top_left"),
        f"{where}: a máscara causal está alinhada pelo COMEÇO (como a de "
        "F.scaled_dot_product_attention(is_causal=True) com t < s): a consulta nova só "
        "enxergou as primeiras chaves. Com cache, as t consultas são as ÚLTIMAS posições: "
        "use tpt.scaled_dot_product_attention(q, k, v, is_causal=True), que alinha pelo "
        "fim, ou a máscara tpt.causal_mask(t, s).",
    )
    expect(
        not close("no_scale"),
        f"{where}: faltou dividir as pontuações por sqrt(d_h) (d_h = {mha.head_dim}, a "
        "largura de cada cabeça).",
    )
    expect(
        not close("no_out_proj"),
        f"{where}: faltou a projeção de saída: junte as cabeças em (b, t, d) e aplique "
        "mha.out_proj.",
    )
    expected = _manual_attention(mha, x_full, start, end, "right")
    expect(
        False,
        f"{where}: a saída difere da atenção sem cache (diferença máxima "
        f"{_max_diff(received, expected)}). Confira a divisão em cabeças: view(b, t, h, d_h) "
        "seguido de transpose(1, 2), e o caminho de volta transpose(1, 2).reshape(b, t, d).",
    )


@exercise("Exercício 3 (um passo de atenção com cache)")
def check_cached_attention(
    cached_attention: Callable[[MultiHeadAttention, Tensor, KVCache], Tensor],
) -> None:
    """``cached_attention(mha, x_new (b, t, d), cache) -> (b, t, d)``, igual à sem cache."""
    torch.manual_seed(11)
    embed_dim, num_heads, batch = 16, 4, 2
    mha = MultiHeadAttention(embed_dim, num_heads).eval()
    x_full = torch.randn(batch, sum(_CHUNKS), embed_dim)  # (b, s_total, d)
    cache = KVCache()
    with torch.no_grad(), ExitStack() as stack:
        message = f"sua função chamou a MultiHeadAttention: {_CACHE_RULE}"
        stack.enter_context(forbid(mha, "forward", message))
        stack.enter_context(forbid(MultiHeadAttention, "forward", message))
        start = 0
        for step, size in enumerate(_CHUNKS):
            end = start + size
            where = f"no pedaço {step + 1} (posições {start} a {end - 1}, com {start} já no cache)"
            x_new = x_full[:, start:end]  # (b, t, d)
            with _row_counter(mha) as rows:
                received = _call(cached_attention, (mha, x_new, cache), where, _CACHE_HINT)
            expect(
                isinstance(received, Tensor),
                f"{where}: esperava um tensor (b, t, d); recebi {type(received).__name__}.",
            )
            expect(
                tuple(received.shape) == (batch, size, embed_dim),
                f"{where}: esperava a forma {(batch, size, embed_dim)} (b, t, d), uma linha por "
                f"token NOVO; recebi {_shape(received)}.",
            )
            expect(
                len(cache) == end,
                f"{where}: depois da chamada o cache deveria guardar {end} posições, mas "
                f"guarda {len(cache)}. Acrescente as chaves e os valores novos com "
                "k, v = cache.update(k, v) e atenda aos K e V que ele devolve.",
            )
            expect(
                rows["kv"] <= size,
                f"{where}: as projeções de K e V receberam {rows['kv']} "
                f"posições, mas só {size} são novas. As antigas já estão no cache: projete só "
                "x_new (é exatamente o trabalho que o cache economiza).",
            )
            expected = _manual_attention(mha, x_full, start, end, "right")
            if not torch.allclose(received.double(), expected.double(), atol=_ATOL, rtol=0):
                _diagnose_cached(mha, x_full, start, end, received, where)
            start = end
