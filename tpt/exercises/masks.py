"""Conferências dos exercícios de notebooks/06_mascaras.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_sliding_window_mask`: a máscara causal com janela deslizante (atenção
   local) ``(t, t)`` na convenção do tpt (``True`` = bloqueado), sem laços em Python e
   sem chamar ``tpt.sliding_window_mask``;
2. :func:`check_left_padded_decoder_mask`: a máscara do decoder ``(b, 1, t, t)`` para um
   lote preenchido à esquerda, a partir dos comprimentos, sem laços em Python;
3. :func:`check_masked_softmax`: um softmax com máscara sem NaN na ida e na volta, em
   que uma linha sem nenhuma chave visível dá pesos 0, sem chamar a atenção do tpt nem
   ``F.scaled_dot_product_attention``.

As regras ditas no enunciado são conferidas de verdade: laços pelo bytecode da função
(``for``, compreensões e ``while``), funções proibidas trocadas durante a conferência
por uma que levanta um erro explicado. Os erros mais comuns (convenção invertida,
janela com uma chave a mais, preenchimento do lado errado, NaN no gradiente) têm
mensagens próprias.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import tpt
import tpt.attention
import tpt.masks
from tpt.exercises import ExerciseError, exercise, expect, forbid, refers_to, uses_loops

__all__ = [
    "check_sliding_window_mask",
    "check_left_padded_decoder_mask",
    "check_masked_softmax",
]


# --------------------------------------------------------------------------------------
# Auxiliares comuns
# --------------------------------------------------------------------------------------


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _require_no_loops(func: Callable[..., Any], exercise_hint: str) -> None:
    expect(
        not uses_loops(func),
        "a regra é não usar laços em Python, mas a sua função tem um (for, while ou "
        f"compreensão de lista). {exercise_hint}",
    )


@contextlib.contextmanager
def _forbid(targets: list[tuple[Any, str]], message: str) -> Iterator[None]:
    """Proíbe várias funções de uma vez (``forbid`` de tpt.exercises em cada uma)."""
    with contextlib.ExitStack() as stack:
        for owner, name in targets:
            stack.enter_context(forbid(owner, name, message))
        yield


def _call(func: Callable[..., Any], args: tuple[Any, ...], where: str, hint: str) -> Any:
    """Chama a resposta; um erro do PyTorch vira uma explicação em português."""
    try:
        return func(*args)
    except (NotImplementedError, ExerciseError):
        raise
    except Exception as err:  # explicar, com uma dica do que costuma causar o erro
        raise ExerciseError(
            f"{where}: sua função levantou {type(err).__name__} ({err}). Dica: {hint}"
        ) from None


def _bool_mask_feedback(received: Any, expected_shape: tuple[int, ...], where: str) -> Tensor:
    """Confere tipo, forma e dtype de uma máscara booleana; devolve-a na CPU."""
    expect(
        isinstance(received, Tensor),
        f"{where}: esperava um tensor booleano; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == expected_shape,
        f"{where}: esperava a forma {expected_shape}; recebi {_shape(received)}.",
    )
    expect(
        received.dtype == torch.bool,
        f"{where}: a máscara tem dtype {received.dtype}, mas o tpt usa máscaras booleanas "
        "(torch.bool) com True = bloqueado. Uma máscara float seria somada às pontuações "
        "(0 = livre, -inf = bloqueado); uma 0/1 vira booleana com `.bool()` ou com uma "
        "comparação (`j > i` já é booleano).",
    )
    return received.detach().cpu()


def _first_mismatch(received: Tensor, expected: Tensor, names: tuple[str, ...]) -> str:
    index = (received != expected).nonzero()[0].tolist()
    where = ", ".join(f"{name} {i}" for name, i in zip(names, index, strict=True))
    want = "bloqueada (True)" if bool(expected[tuple(index)]) else "livre (False)"
    got = "bloqueada (True)" if bool(received[tuple(index)]) else "livre (False)"
    return f"na posição ({where}) a chave deveria estar {want}, mas veio {got}"


# --------------------------------------------------------------------------------------
# Exercício 1: máscara causal com janela deslizante
# --------------------------------------------------------------------------------------

# (t, window): inclui window = 1 (só a diagonal), window = t e window > t (= causal).
_WINDOW_CASES: list[tuple[int, int]] = [(6, 3), (5, 2), (6, 1), (4, 4), (7, 10), (1, 1), (8, 3)]

_WINDOW_HINT = (
    "Use `i = torch.arange(t)[:, None]` (consultas, forma (t, 1)) e "
    "`j = torch.arange(t)[None, :]` (chaves, forma (1, t)): comparações entre eles dão a "
    "máscara (t, t) inteira por broadcasting."
)


def _window_reference(t: int, window: int) -> Tensor:
    i = torch.arange(t)[:, None]  # (t, 1)
    j = torch.arange(t)[None, :]  # (1, t)
    return (j > i) | (j <= i - window)  # (t, t)


@exercise("Exercício 1 (máscara com janela deslizante)")
def check_sliding_window_mask(sliding_window: Callable[[int, int], Tensor]) -> None:
    """``sliding_window(t, window) -> (t, t)`` bool, True = bloqueado."""
    real = tpt.masks.sliding_window_mask
    expect(
        not refers_to(sliding_window, real),
        "a regra é não usar tpt.sliding_window_mask (é com ela que a conferência compara): "
        "escreva a máscara com torch.arange e comparações.",
    )
    forbidden = [(tpt, "sliding_window_mask"), (tpt.masks, "sliding_window_mask")]
    message = (
        "a regra é não usar tpt.sliding_window_mask (é com ela que a conferência compara): "
        "escreva a máscara com torch.arange e comparações."
    )
    with _forbid(forbidden, message):
        for t, window in _WINDOW_CASES:
            where = f"para t={t}, window={window}"
            received = _call(sliding_window, (t, window), where, _WINDOW_HINT)
            received = _bool_mask_feedback(received, (t, t), where)
            expected = real(t, window)
            assert torch.equal(expected, _window_reference(t, window))
            if torch.equal(received, expected):
                continue
            i = torch.arange(t)[:, None]  # (t, 1)
            j = torch.arange(t)[None, :]  # (1, t)
            expect(
                not torch.equal(received, ~expected),
                f"{where}: a máscara está com a convenção invertida (True onde a chave pode "
                "ser vista, como em F.scaled_dot_product_attention). No tpt, True = "
                "bloqueado.",
            )
            expect(
                not torch.equal(received, (i - j).abs() >= window),
                f"{where}: sua janela é simétrica: cada consulta também vê as window - 1 "
                "chaves seguintes. A atenção local do decoder continua causal: bloqueie "
                "também j > i.",
            )
            expect(
                not torch.equal(received, (j > i) | (j < i - window)),
                f"{where}: a janela tem uma chave a mais: a consulta i está vendo window + 1 "
                "chaves (de i - window até i). Com window chaves, ela mesma incluída, a "
                "mais antiga visível é i - window + 1.",
            )
            expect(
                not torch.equal(received, (j > i) | (j <= i - window + 1)),
                f"{where}: a janela tem uma chave a menos: a consulta i está vendo só "
                "window - 1 chaves. Ela mesma conta como uma das window (de "
                "i - window + 1 até i).",
            )
            expect(
                not torch.equal(received, j > i),
                f"{where}: isto é a máscara causal comum: faltou bloquear as chaves antigas "
                "demais (j <= i - window).",
            )
            expect(False, f"{where}: {_first_mismatch(received, expected, ('consulta', 'chave'))}.")
    _require_no_loops(sliding_window, _WINDOW_HINT)


# --------------------------------------------------------------------------------------
# Exercício 2: máscara do decoder com preenchimento à esquerda
# --------------------------------------------------------------------------------------

# (lengths, t): sem <pad>, t maior que todos os comprimentos, um exemplo de comprimento 1.
_LEFT_CASES: list[tuple[list[int], int]] = [
    ([3, 5, 1], 5),
    ([4, 4], 4),
    ([2, 6, 4, 1], 7),
    ([1], 1),
    ([3, 2], 3),
]

_LEFT_HINT = (
    "Com preenchimento à esquerda, o exemplo de comprimento n tem t - n <pad> no começo: "
    "a chave j é <pad> quando j < t - n. Compare torch.arange(t) com (t - lengths)[:, None] "
    "e junte com a máscara causal usando | e broadcasting: (b, 1, 1, t) | (1, 1, t, t)."
)


def _left_reference(lengths: Tensor, t: int) -> Tensor:
    j = torch.arange(t)  # (t,)
    key_pad = j[None, :] < (t - lengths)[:, None]  # (b, t)
    causal = j[None, :] > j[:, None]  # (t, t)
    return key_pad[:, None, None, :] | causal[None, None]  # (b, 1, t, t)


@exercise("Exercício 2 (máscara do decoder com <pad> à esquerda)")
def check_left_padded_decoder_mask(decoder_mask: Callable[[Tensor, int], Tensor]) -> None:
    """``decoder_mask(lengths (b,), t) -> (b, 1, t, t)`` bool, True = bloqueado."""
    for lengths_list, t in _LEFT_CASES:
        lengths = torch.tensor(lengths_list)
        original = lengths.clone()
        b = len(lengths_list)
        where = f"para lengths={lengths_list}, t={t}"
        received = _call(decoder_mask, (lengths, t), where, _LEFT_HINT)
        expect(
            torch.equal(lengths, original),
            f"{where}: sua função modificou lengths no lugar; não altere a entrada.",
        )
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor booleano (b, 1, t, t); recebi {type(received).__name__}.",
        )
        shape = tuple(received.shape)
        expect(
            shape != (b, t, t),
            f"{where}: recebi a forma {shape} = (b, t, t); falta o eixo das cabeças. Com "
            f"(b, 1, t, t) = {(b, 1, t, t)} a mesma máscara serve a todas as h cabeças das "
            "pontuações (b, h, t, t) por broadcasting.",
        )
        expect(
            shape != (b, 1, 1, t) or t == 1,
            f"{where}: recebi a forma {shape} = (b, 1, 1, t): é só a máscara de "
            "preenchimento das chaves. O decoder precisa dela combinada (|) com a máscara "
            "causal (1, 1, t, t), o que dá (b, 1, t, t).",
        )
        received = _bool_mask_feedback(received, (b, 1, t, t), where)
        expected = _left_reference(lengths, t)
        if torch.equal(received, expected):
            continue
        j = torch.arange(t)
        causal = (j[None, :] > j[:, None])[None, None]  # (1, 1, t, t)
        right_pad = (j[None, :] >= lengths[:, None])[:, None, None, :]  # (b, 1, 1, t)
        left_pad = (j[None, :] < (t - lengths)[:, None])[:, None, None, :]  # (b, 1, 1, t)
        expect(
            not torch.equal(received, ~expected),
            f"{where}: a máscara está com a convenção invertida (True onde a chave pode ser "
            "vista). No tpt, True = bloqueado.",
        )
        expect(
            not torch.equal(received, right_pad | causal),
            f"{where}: você bloqueou o fim de cada linha, como num lote preenchido à direita "
            "(é o que tpt.padding_mask faz). Aqui os <pad> estão no começo: a chave j é "
            "<pad> quando j < t - lengths[b].",
        )
        expect(
            not torch.equal(received, causal.expand(b, 1, t, t)),
            f"{where}: isto é só a máscara causal: faltou bloquear as chaves <pad> do "
            "começo de cada linha.",
        )
        expect(
            not torch.equal(received, left_pad.expand(b, 1, t, t)),
            f"{where}: isto é só a máscara de preenchimento: faltou a parte causal (o "
            "decoder não pode ver o futuro, j > i).",
        )
        expect(
            False,
            f"{where}: "
            f"{_first_mismatch(received, expected, ('exemplo', 'cabeça', 'consulta', 'chave'))}.",
        )
    _require_no_loops(decoder_mask, _LEFT_HINT)


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
    """(descrição, pontuações float64, máscara bool): linhas parciais, vazias e -inf."""
    g = torch.Generator().manual_seed(6)
    cases = []
    scores = torch.randn(2, 4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 4, 5, generator=g) < 0.4
    mask[0, 1] = True  # uma linha inteira bloqueada
    mask[1, 3] = False  # uma linha inteira livre
    cases.append(("pontuações (2, 4, 5) com uma linha toda bloqueada", scores, mask))
    scores = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64)
    cases.append(("pontuações (1, 2, 4, 4) e a máscara causal (4, 4)", scores, tpt.causal_mask(4)))
    scores = torch.randn(3, 4, generator=g, dtype=torch.float64)
    scores[0, 2:] = float("-inf")  # -inf já nas pontuações (de uma máscara aditiva)
    scores[1, 1:] = float("-inf")
    mask = torch.tensor(
        [[True, True, False, False], [False, False, False, False], [True, False, True, False]]
    )
    cases.append(
        (
            "pontuações (3, 4) que já trazem -inf (linha 0: as chaves visíveis são todas -inf)",
            scores,
            mask,
        )
    )
    scores = torch.randn(2, 3, generator=g, dtype=torch.float64)
    everything = torch.ones(2, 3, dtype=torch.bool)
    cases.append(("pontuações (2, 3) com tudo bloqueado", scores, everything))
    return cases


@exercise("Exercício 3 (softmax com máscara, sem NaN)")
def check_masked_softmax(masked_softmax: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``masked_softmax(scores (..., t, s), mask) -> pesos (..., t, s)``, sem NaN."""
    message = (
        "a regra é escrever o softmax com máscara você mesmo, sem chamar "
        "tpt.scaled_dot_product_attention nem F.scaled_dot_product_attention."
    )
    real = [tpt.attention.scaled_dot_product_attention, F.scaled_dot_product_attention]
    expect(not refers_to(masked_softmax, *real), message)
    forbidden = [
        (tpt, "scaled_dot_product_attention"),
        (tpt.attention, "scaled_dot_product_attention"),
        (F, "scaled_dot_product_attention"),
    ]
    with _forbid(forbidden, message):
        for where, scores, mask in _softmax_cases():
            _check_softmax_case(masked_softmax, scores, mask, f"para {where}")
        # Diferenças finitas (gradcheck) numa entrada sem -inf, com uma linha vazia.
        where, scores, mask = _softmax_cases()[0]
        leaf = scores.clone().requires_grad_(True)
        ok = torch.autograd.gradcheck(
            lambda x: masked_softmax(x, mask), (leaf,), eps=1e-6, atol=1e-5, raise_exception=False
        )
        expect(
            ok,
            f"para {where}: o gradiente da sua função não bate com o gradiente numérico "
            "(diferenças finitas, torch.autograd.gradcheck). Alguma operação está fora do "
            "grafo (.detach(), .data, torch.no_grad()) ou foi feita no lugar?",
        )


def _check_softmax_case(
    masked_softmax: Callable[[Tensor, Tensor], Tensor], scores: Tensor, mask: Tensor, where: str
) -> None:
    leaf = scores.clone().requires_grad_(True)
    expected = _reference_masked_softmax(scores, mask)
    received = _call(masked_softmax, (leaf, mask), where, _SOFTMAX_HINT)
    expect(
        isinstance(received, Tensor),
        f"{where}: esperava um tensor de pesos; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == tuple(expected.shape),
        f"{where}: esperava pesos de forma {tuple(expected.shape)} (a forma das pontuações "
        f"com broadcasting da máscara); recebi {_shape(received)}.",
    )
    expect(
        torch.equal(leaf.detach(), scores),
        f"{where}: sua função modificou as pontuações no lugar; devolva um tensor novo "
        "(masked_fill, não masked_fill_).",
    )
    values = received.detach().double()
    empty = torch.isneginf(scores.masked_fill(mask, float("-inf"))).all(-1)  # (..., t)
    expect(
        not bool(values.isnan().any()),
        f"{where}: há NaN nos pesos (na ida). Numa linha sem nenhuma chave visível, o "
        "softmax de só -inf é 0/0. Essas linhas precisam dar pesos 0.",
    )
    blocked = mask.expand_as(values) & ~empty[..., None].expand_as(values)
    expect(
        bool((values[blocked] == 0).all()),
        f"{where}: uma chave bloqueada recebeu peso diferente de 0. Pontuação bloqueada "
        "igual a 0 não bloqueia nada (exp(0) = 1): ela precisa virar -inf antes do softmax.",
    )
    if bool(empty.any()):
        s = scores.shape[-1]
        empty_rows = values[empty]  # (n, s): as linhas sem nenhuma chave visível
        expect(
            not bool((empty_rows - 1.0 / s).abs().max() < 1e-6),
            f"{where}: as linhas sem nenhuma chave visível deram pesos uniformes 1/s "
            f"(= 1/{s}): você usou um número finito (como -1e9) no lugar de -inf? O "
            "resultado não tem NaN, mas a consulta passa a olhar justamente as chaves "
            "bloqueadas. Essas linhas devem dar pesos 0.",
        )
        expect(
            bool((empty_rows == 0).all()),
            f"{where}: as linhas sem nenhuma chave visível deveriam dar pesos 0, mas a "
            f"maior soma entre elas é {empty_rows.sum(-1).max().item():.3g}.",
        )
    expect(
        torch.allclose(values, expected, atol=1e-6, rtol=0),
        f"{where}: os pesos diferem do softmax com máscara esperado (diferença máxima "
        f"{(values - expected).abs().max().item():.2g}). As linhas com alguma chave visível "
        "devem ser exatamente o softmax sobre as chaves visíveis (e somar 1).",
    )
    expect(
        received.requires_grad,
        f"{where}: os pesos não têm gradiente (requires_grad=False): não use .detach(), "
        ".data nem torch.no_grad() no caminho das pontuações.",
    )
    upstream = torch.linspace(-1.0, 1.0, values.numel(), dtype=torch.float64).view_as(values)
    (grad,) = torch.autograd.grad((received.double() * upstream).sum(), leaf, allow_unused=True)
    expect(
        grad is not None,
        f"{where}: o gradiente não chega às pontuações: a saída não depende delas pelo grafo.",
    )
    expect(
        not bool(grad.isnan().any()),
        f"{where}: a ida está limpa, mas o gradiente tem NaN (na volta). O NaN do softmax de "
        "só -inf continua no grafo e volta multiplicado por 0 (0 × NaN = NaN): consertar "
        "depois do softmax (nan_to_num, torch.where) só limpa a ida. Faça com que o "
        "softmax nunca veja uma linha só de -inf.",
    )
    ref_leaf = scores.clone().requires_grad_(True)
    (ref_grad,) = torch.autograd.grad(
        (_reference_masked_softmax(ref_leaf, mask) * upstream).sum(), ref_leaf
    )
    expect(
        torch.allclose(grad, ref_grad, atol=1e-8, rtol=0),
        f"{where}: o gradiente em relação às pontuações difere do esperado (diferença "
        f"máxima {(grad - ref_grad).abs().max().item():.2g}). As linhas sem chave visível "
        "devem ter gradiente 0, e as outras o gradiente do softmax comum.",
    )
