"""Conferências dos exercícios de notebooks/06_mascaras.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_sliding_window_mask`: a máscara causal com janela deslizante (atenção
   local) ``(t, t)`` na convenção do tpt (``True`` = bloqueado), sem laços e sem
   ``tpt.sliding_window_mask``;
2. :func:`check_left_padded_decoder_mask`: a máscara do decoder ``(b, 1, t, t)`` de um lote
   preenchido à esquerda, a partir dos comprimentos, sem laços;
3. :func:`check_masked_softmax`: um softmax com máscara sem NaN na ida e na volta, em que
   uma linha sem nenhuma chave visível dá pesos 0, sem a atenção do tpt nem
   ``F.scaled_dot_product_attention``.

As regras são conferidas pelo que roda: "sem laços" é "o número de operações do PyTorch
não cresce com o tamanho" (:func:`op_counts_by_size`); "não use ``F.sdpa``" olha os
núcleos ATen que rodaram; "não use a função X do tpt" olha as funções Python que rodaram
(um apelido, um argumento padrão ou um ``partial`` chegam ao mesmo código). Além dos casos
fixos, cada execução sorteia casos novos, e um diagnóstico ("janela com uma chave a mais")
só aparece quando a variante errada foi calculada e bateu com a resposta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

import tpt.attention
import tpt.masks
from tpt.exercises import (
    ATTENTION_KERNEL_OPS,
    call_answer,
    case_generator,
    check_gradients,
    exercise,
    expect,
    expect_close,
    op_counts_by_size,
    record_ops,
)
from tpt.exercises.core import unambiguous
from tpt.exercises.rules import record_python_calls
from tpt.masks import causal_mask, sliding_window_mask

__all__ = [
    "check_sliding_window_mask",
    "check_left_padded_decoder_mask",
    "check_masked_softmax",
]


def _no_loops(
    answer: Callable[..., Any], make_args: Callable[[int], tuple], sizes: Callable[[int], str]
) -> None:
    small, large = op_counts_by_size(answer, make_args, (3, 7))
    expect(
        small == large,
        f"Sem laços: com {sizes(3)} a sua função executou {small} operações do PyTorch, e "
        f"com {sizes(7)}, {large}. Um laço em Python (for, while, map, compreensão ou função "
        "auxiliar chamada por posição) faz o número crescer; monte a máscara inteira de uma "
        "vez, com torch.arange, comparações e broadcasting.",
    )


def _describe(blocked: bool) -> str:
    return "bloqueada (True)" if blocked else "livre (False)"


def _expect_mask(
    received: Any,
    expected: Tensor,
    where: str,
    axes: tuple[str, ...],
    variants: list[tuple[str, Tensor]],
) -> None:
    """Confere tipo, forma, dtype e valores de uma máscara booleana."""
    expect(
        isinstance(received, Tensor),
        f"{where}, esperava um tensor booleano; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == tuple(expected.shape),
        f"{where}, esperava a forma {tuple(expected.shape)}; recebi {tuple(received.shape)}.",
    )
    expect(
        received.dtype == torch.bool,
        f"{where}, a máscara tem dtype {received.dtype}, mas o tpt usa máscaras booleanas "
        "(torch.bool) com True = bloqueado. Uma 0/1 vira booleana com `.bool()` ou com uma "
        "comparação (`j > i` já é booleano).",
    )
    received = received.detach().cpu()
    if torch.equal(received, expected):
        return
    for n, (diagnosis, wrong) in enumerate(variants):
        ambiguous = any(
            torch.equal(wrong, other) for m, (_, other) in enumerate(variants) if m != n
        )
        if torch.equal(received, wrong) and not ambiguous:
            expect(False, f"{where}, a máscara está errada: {diagnosis}")
    index = (received != expected).nonzero()[0].tolist()
    cell = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    expect(
        False,
        f"{where}, na posição ({cell}) a chave deveria estar "
        f"{_describe(bool(expected[tuple(index)]))}, mas veio "
        f"{_describe(bool(received[tuple(index)]))}.",
    )


# --------------------------------------------------------------------------------------
# Exercício 1: máscara causal com janela deslizante
# --------------------------------------------------------------------------------------
_WINDOW_HINT = (
    "Use `i = torch.arange(t)[:, None]` (consultas, forma (t, 1)) e "
    "`j = torch.arange(t)[None, :]` (chaves, forma (1, t)): comparações entre eles dão a "
    "máscara (t, t) inteira por broadcasting."
)


def _window_cases() -> list[tuple[str, int, int]]:
    fixed = [(6, 3), (5, 2), (6, 1), (4, 4), (7, 10), (1, 1), (8, 3)]
    cases = [(f"Para t={t}, window={w}", t, w) for t, w in fixed]
    g, seed = case_generator()
    for _ in range(3):
        t = int(torch.randint(3, 13, (), generator=g))
        w = int(torch.randint(1, t, (), generator=g))  # window < t: a janela corta de verdade
        cases.append((f"No caso sorteado t={t}, window={w} (semente {seed})", t, w))
    return cases


def _window_variants(t: int, window: int) -> list[tuple[str, Tensor]]:
    i = torch.arange(t)[:, None]  # (t, 1)
    j = torch.arange(t)[None, :]  # (1, t)
    expected = (j > i) | (j <= i - window)
    return [
        (
            "está com a convenção invertida (True onde a chave pode ser vista, como em "
            "F.scaled_dot_product_attention). No tpt, True = bloqueado.",
            ~expected,
        ),
        (
            "a janela é simétrica: cada consulta também vê as window - 1 chaves seguintes. A "
            "atenção local do decoder continua causal: bloqueie também j > i.",
            (i - j).abs() >= window,
        ),
        (
            "a janela tem uma chave a mais: a consulta i vê window + 1 chaves (de i - window "
            "até i). Com window chaves, ela mesma incluída, a mais antiga visível é "
            "i - window + 1.",
            (j > i) | (j < i - window),
        ),
        (
            "a janela tem uma chave a menos: a consulta i vê só window - 1 chaves. Ela mesma "
            "conta como uma das window (de i - window + 1 até i).",
            (j > i) | (j <= i - window + 1),
        ),
        (
            "é a máscara causal comum: faltou bloquear as chaves antigas demais (j <= i - window).",
            j > i,
        ),
    ]


@exercise("Exercício 1 (máscara com janela deslizante)")
def check_sliding_window_mask(sliding_window: Callable[[int, int], Tensor]) -> None:
    """``sliding_window(t, window) -> (t, t)`` bool, True = bloqueado."""
    for where, t, window in _window_cases():
        with record_python_calls() as calls:
            received = call_answer(sliding_window, {"t": t, "window": window}, where, _WINDOW_HINT)
        expect(
            sliding_window_mask.__code__ not in calls,
            f"{where}, sua função chamou tpt.sliding_window_mask (com esse nome ou com "
            "outro): o exercício pede a máscara escrita por você, e é com ela que a "
            "conferência compara.",
        )
        _expect_mask(
            received,
            sliding_window_mask(t, window),
            where,
            ("consulta", "chave"),
            _window_variants(t, window) if t > 1 else [],
        )
    _no_loops(sliding_window, lambda n: (2 * n, n), lambda n: f"t={2 * n}, window={n}")


# --------------------------------------------------------------------------------------
# Exercício 2: máscara do decoder com preenchimento à esquerda
# --------------------------------------------------------------------------------------
_LEFT_HINT = (
    "Com preenchimento à esquerda, o exemplo de comprimento n tem t - n <pad> no começo: "
    "a chave j é <pad> quando j < t - n. Compare torch.arange(t) com (t - lengths)[:, None] "
    "e junte com a máscara causal usando | e broadcasting: (b, 1, 1, t) | (1, 1, t, t)."
)


def _left_pads(lengths: Tensor, t: int) -> Tensor:
    return (torch.arange(t)[None, :] < (t - lengths)[:, None])[:, None, None, :]  # (b, 1, 1, t)


def _left_reference(lengths: Tensor, t: int) -> Tensor:
    return _left_pads(lengths, t) | causal_mask(t)[None, None]  # (b, 1, t, t)


def _left_cases() -> list[tuple[str, list[int], int]]:
    fixed = [([3, 5, 1], 5), ([4, 4], 4), ([2, 6, 4, 1], 7), ([1], 1), ([3, 2], 3)]
    cases = [(f"Para lengths={lengths}, t={t}", lengths, t) for lengths, t in fixed]
    g, seed = case_generator()
    for _ in range(3):
        b, t = int(torch.randint(1, 6, (), generator=g)), int(torch.randint(2, 10, (), generator=g))
        lengths = torch.randint(1, t + 1, (b,), generator=g).tolist()
        cases.append((f"No caso sorteado lengths={lengths}, t={t} (semente {seed})", lengths, t))
    return cases


@exercise("Exercício 2 (máscara do decoder com <pad> à esquerda)")
def check_left_padded_decoder_mask(decoder_mask: Callable[[Tensor, int], Tensor]) -> None:
    """``decoder_mask(lengths (b,), t) -> (b, 1, t, t)`` bool, True = bloqueado."""
    for where, lengths_list, t in _left_cases():
        lengths = torch.tensor(lengths_list)
        b = len(lengths_list)
        received = call_answer(decoder_mask, {"lengths": lengths, "t": t}, where, _LEFT_HINT)
        shape = tuple(received.shape) if isinstance(received, Tensor) else None
        expect(
            shape != (b, t, t) or b == 1,
            f"{where}, recebi a forma {shape} = (b, t, t); falta o eixo das cabeças. Com "
            f"(b, 1, t, t) = {(b, 1, t, t)} a mesma máscara serve a todas as h cabeças das "
            "pontuações (b, h, t, t) por broadcasting.",
        )
        expected = _left_reference(lengths, t)
        causal = causal_mask(t)[None, None].expand(b, 1, t, t)
        right = (torch.arange(t)[None, :] >= lengths[:, None])[:, None, None, :]
        _expect_mask(
            received,
            expected,
            where,
            ("exemplo", "cabeça", "consulta", "chave"),
            [
                (
                    "está com a convenção invertida (True onde a chave pode ser vista). No "
                    "tpt, True = bloqueado.",
                    ~expected,
                ),
                (
                    "você bloqueou o fim de cada linha, como num lote preenchido à direita (é "
                    "o que tpt.padding_mask faz). Aqui os <pad> estão no começo: a chave j é "
                    "<pad> quando j < t - lengths[b].",
                    right | causal,
                ),
                (
                    "é só a máscara causal: faltou bloquear as chaves <pad> do começo de cada "
                    "linha.",
                    causal,
                ),
                (
                    "é só a máscara de preenchimento: faltou a parte causal (o decoder não pode "
                    "ver o futuro, j > i).",
                    _left_pads(lengths, t).expand(b, 1, t, t),
                ),
            ],
        )
    _no_loops(
        decoder_mask,
        lambda n: (torch.arange(1, n + 1), n + 2),
        lambda n: f"lengths={list(range(1, n + 1))}, t={n + 2}",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: softmax com máscara, sem NaN na ida e na volta
# --------------------------------------------------------------------------------------
_SOFTMAX_HINT = (
    "scores e mask podem ter formas diferentes que fazem broadcasting (por exemplo "
    "(b, h, t, s) e (t, s)); use masked_fill/torch.where, que aceitam isso."
)


def _reference_masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    masked = scores.masked_fill(mask, float("-inf"))  # (..., t, s)
    empty = torch.isneginf(masked).all(dim=-1, keepdim=True)  # (..., t, 1)
    weights = torch.softmax(masked.masked_fill(empty, 0.0), dim=-1)  # (..., t, s)
    return weights.masked_fill(empty, 0.0)  # (..., t, s)


def _softmax_cases() -> list[tuple[str, Tensor, Tensor]]:
    """(onde, pontuações, máscara bool): linhas parciais, vazias, -inf e casos sorteados."""
    g = torch.Generator().manual_seed(6)
    cases = []
    scores = torch.randn(2, 4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 4, 5, generator=g) < 0.4
    mask[0, 1] = True  # uma linha inteira bloqueada
    mask[1, 3] = False  # uma linha inteira livre
    cases.append(("Para pontuações (2, 4, 5) com uma linha toda bloqueada", scores, mask))
    scores = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64)
    cases.append(("Para pontuações (1, 2, 4, 4) e a máscara causal (4, 4)", scores, causal_mask(4)))
    scores = torch.randn(3, 4, generator=g, dtype=torch.float64)
    scores[0, 2:] = float("-inf")  # -inf já nas pontuações (de uma máscara aditiva)
    scores[1, 1:] = float("-inf")
    mask = torch.tensor(
        [[True, True, False, False], [False, False, False, False], [True, False, True, False]]
    )
    cases.append(
        (
            "Para pontuações (3, 4) que já trazem -inf (linha 0: as chaves livres são todas -inf)",
            scores,
            mask,
        )
    )
    scores = torch.randn(2, 3, generator=g, dtype=torch.float64)
    cases.append(("Para pontuações (2, 3) com tudo bloqueado", scores, torch.ones(2, 3).bool()))
    scores = torch.randn(2, 3, 6, generator=g)  # float32, como num modelo
    mask = torch.rand(3, 6, generator=g) < 0.5
    mask[1] = True
    cases.append(("Para pontuações float32 (2, 3, 6) e máscara (3, 6)", scores, mask))
    g, seed = case_generator()
    for _ in range(2):
        b, t, s = (int(v) for v in torch.randint(1, 7, (3,), generator=g))
        scores = torch.randn(b, t, s, generator=g, dtype=torch.float64)
        scores[torch.rand(b, t, s, generator=g) < 0.15] = float("-inf")
        mask = torch.rand(b, 1, s, generator=g) < 0.4  # (b, 1, s): uma máscara de chaves
        cases.append(
            (
                f"No caso sorteado com pontuações {(b, t, s)} e máscara {(b, 1, s)} "
                f"(semente {seed})",
                scores,
                mask,
            )
        )
    return cases


def _softmax_variants(scores: Tensor, mask: Tensor) -> list[tuple[str, Tensor]]:
    return [
        (
            "as chaves bloqueadas receberam pontuação 0, e 0 não bloqueia nada (exp(0) = 1): elas "
            "precisam virar -inf antes do softmax.",
            torch.softmax(scores.masked_fill(mask, 0.0), -1),
        ),
        (
            "é o que sai de masked_fill(mask, -1e9): as linhas sem chave visível dão pesos "
            "uniformes sobre justamente as chaves bloqueadas. Essas linhas devem dar pesos 0.",
            torch.softmax(scores.masked_fill(mask, -1e9), -1),
        ),
        (
            "a máscara foi usada com a convenção invertida: no tpt, True = bloqueado.",
            _reference_masked_softmax(scores, ~mask),
        ),
    ]


@exercise("Exercício 3 (softmax com máscara, sem NaN)")
def check_masked_softmax(masked_softmax: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``masked_softmax(scores (..., t, s), mask) -> pesos (..., t, s)``, sem NaN."""
    attention_file = tpt.attention.__file__
    for where, scores, mask in _softmax_cases():
        args = {"scores": scores, "mask": mask}
        with record_python_calls() as calls, record_ops() as ops:
            received = call_answer(masked_softmax, args, where, _SOFTMAX_HINT)
        used = {code.co_name for code in calls if code.co_filename == attention_file}
        expect(
            not used and not ops.used(ATTENTION_KERNEL_OPS),
            f"{where}, sua função chamou a atenção pronta "
            f"({', '.join(sorted(used | ops.used(ATTENTION_KERNEL_OPS)))}): o exercício pede o "
            "softmax com máscara escrito por você, sem tpt.scaled_dot_product_attention, "
            "tpt.MultiHeadAttention nem F.scaled_dot_product_attention.",
        )
        expected = _reference_masked_softmax(scores, mask)
        if isinstance(received, Tensor) and received.shape == expected.shape:
            nan_rows = received.detach().isnan().any(-1)  # (..., t)
            empty = expected.sum(-1) == 0  # (..., t): as linhas sem chave visível
            expect(
                not bool(nan_rows.any()),
                f"{where}, há NaN nos pesos (na ida)"
                + (
                    ", exatamente nas linhas sem nenhuma chave visível: ali o softmax de só -inf "
                    "é 0/0. Essas linhas precisam dar pesos 0."
                    if torch.equal(nan_rows, empty)
                    else "."
                ),
            )
        tol = 1e-6
        expect_close(
            received,
            expected,
            where,
            atol=tol,
            name="o resultado",
            variants=unambiguous(_softmax_variants(scores, mask), tol),
        )
        _expect_finite_gradient(masked_softmax, scores, mask, where)
        check_gradients(
            masked_softmax,
            _reference_masked_softmax,
            args,
            where,
            wrt=("scores",),
            atol=1e-5 if scores.dtype == torch.float32 else 1e-8,
        )


def _expect_finite_gradient(
    masked_softmax: Callable[[Tensor, Tensor], Tensor], scores: Tensor, mask: Tensor, where: str
) -> None:
    """O gradiente em relação às pontuações não tem NaN (diz em quais linhas, se tiver)."""
    leaf = scores.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = masked_softmax(leaf, mask)
    if not (isinstance(out, Tensor) and out.requires_grad):
        return  # check_gradients explica
    upstream = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view_as(out)
    (grad,) = torch.autograd.grad(out, leaf, upstream, allow_unused=True)
    if grad is None:
        return
    nan_rows = grad.isnan().any(-1)  # (..., t)
    empty = _reference_masked_softmax(scores, mask).sum(-1) == 0  # (..., t)
    expect(
        not bool(nan_rows.any()),
        f"{where}, a ida está limpa, mas o gradiente em relação às pontuações tem NaN (na "
        "volta)"
        + (
            ", exatamente nas linhas sem chave visível. O NaN do softmax de só -inf continua no "
            "grafo e volta multiplicado por 0 (0 × NaN = NaN): consertar depois do softmax "
            "(nan_to_num, torch.where) só limpa a ida. Faça com que o softmax nunca veja uma "
            "linha só de -inf."
            if torch.equal(nan_rows, empty.expand_as(nan_rows))
            else "."
        ),
    )
