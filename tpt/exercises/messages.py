"""As mensagens das conferências: o erro para o aluno e as comparações de tensores.

- :func:`expect` levanta :class:`ExerciseError` com a explicação para o aluno;
- :func:`expect_close` compara a resposta com o esperado e, quando erra, diz o caso, a
  forma ou a maior diferença; um diagnóstico ("parece que você dividiu por d em vez de
  √d") só aparece quando a variante errada correspondente foi **calculada** e bateu com
  a resposta (``variants``);
- :func:`difference_text` descreve a diferença entre dois tensores: a maior diferença, ou
  onde aparecem ``NaN`` e infinitos que o esperado não tem (nunca "diferença ∞");
- :func:`autograd_explanation` traduz os erros do autograd que vêm de uma operação no
  lugar (``div_``, ``+=``) sobre um tensor que ele guardou.

É a base da máquina das conferências: não importa nenhum outro módulo de
``tpt.exercises`` (``rules``, ``integrity``, ``guards`` e ``core`` importam este).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from tpt.numfmt import fmt

__all__ = [
    "ExerciseError",
    "expect",
    "expect_close",
    "max_abs_diff",
    "difference_text",
    "autograd_explanation",
    "same_values",
    "unambiguous",
    "first_line",
]


class ExerciseError(AssertionError):
    """Uma resposta errada, com a explicação para o aluno."""


def expect(condition: bool, message: str) -> None:
    """Levanta ``ExerciseError(message)`` quando ``condition`` é falsa."""
    if not condition:
        raise ExerciseError(message)


def first_line(err: BaseException) -> str:
    """A primeira linha da mensagem de um erro (ou ``""``)."""
    text = str(err).strip().splitlines()
    return text[0] if text else ""


def max_abs_diff(a: Any, b: Any) -> float:
    """Maior diferença absoluta entre dois tensores (ou números) de mesma forma.

    ``NaN`` nos dois no mesmo lugar, ou o mesmo infinito, contam como iguais; ``NaN`` ou
    infinito só de um lado dão ``inf`` (para a mensagem, use :func:`difference_text`).
    """
    a = torch.as_tensor(a).detach().double().cpu()
    b = torch.as_tensor(b).detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    diff = (a - b).abs()
    same = (torch.isinf(a) & (a == b)) | (torch.isnan(a) & torch.isnan(b))
    diff = diff.masked_fill(same, 0.0)
    inf = float("inf")
    return float(diff.nan_to_num(nan=inf, posinf=inf).max())


def difference_text(received: Any, expected: Any) -> str:
    """Como ``received`` difere de ``expected`` (mesma forma), em palavras.

    Com ``NaN`` ou infinito onde o esperado não tem (ou o contrário), diz quantos, de que
    lado e a primeira posição; senão, "maior diferença 1,2e-03".
    """
    a = torch.as_tensor(received).detach().double().cpu()
    b = torch.as_tensor(expected).detach().double().cpu()
    for values, other, side, other_side in (
        (a, b, "sua resposta", "o esperado"),
        (b, a, "o esperado", "sua resposta"),
    ):
        for kind, mask in (("NaN", values.isnan()), ("infinito", values.isinf())):
            wrong = mask & ~(other.isnan() if kind == "NaN" else other == values)
            if bool(wrong.any()):
                where = tuple(wrong.nonzero()[0].tolist())
                count = int(wrong.sum())
                return (
                    f"{side} tem {kind} em {count} posição(ões) onde {other_side} não tem "
                    f"(a primeira em {where}: {_number(values[where])} contra "
                    f"{_number(other[where])})"
                )
    return f"maior diferença {fmt(max_abs_diff(a, b), 2, sci=True)}"


def _number(value: Tensor) -> str:
    x = float(value)
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "+∞" if x > 0 else "-∞"
    return fmt(x, 4)


# Erros do autograd que vêm de uma operação no lugar (texto original do PyTorch).
_SAVED_CHANGED = "modified by an inplace operation"
_LEAF_IN_PLACE = "leaf Variable that requires grad is being used in an in-place operation"


def autograd_explanation(err: BaseException) -> str | None:
    """A causa, em português, de um erro do autograd por operação no lugar (ou ``None``).

    O PyTorch numera as versões de cada tensor; o erro só sai quando ele **mediu** que um
    tensor guardado para o ``backward`` mudou depois de guardado, ou que uma entrada que
    pede gradiente foi modificada no lugar: é essa a causa que a mensagem dá.
    """
    if not isinstance(err, RuntimeError):
        return None
    text = str(err)
    if _SAVED_CHANGED in text:
        match = re.search(r"which is output (\d+) of (\w+)", text)
        source = f" (a saída de {match.group(2)})" if match else ""
        return (
            "o autograd não consegue calcular o gradiente: um tensor que ele guardou para o "
            f"backward{source} foi modificado depois, por uma operação no lugar (um método "
            "terminado em _, como div_ ou exp_, ou x /= y, x += y, x[...] = y). Use a versão "
            "que devolve um tensor novo (e / s em vez de e.div_(s))."
        )
    if _LEAF_IN_PLACE in text or "view of a leaf Variable" in text:
        return (
            "sua função modificou no lugar uma entrada que pede gradiente (um método "
            "terminado em _, ou x /= y, x += y, x[...] = y sobre o argumento): o autograd "
            "não permite. Use operações que devolvem um tensor novo."
        )
    return None


def same_values(received: Tensor, other: Tensor, atol: float) -> bool:
    """Mesma forma, ``NaN`` nos mesmos lugares e o resto a ``atol`` um do outro."""
    if tuple(received.shape) != tuple(other.shape):
        return False
    a, b = received.detach().double().cpu(), other.detach().double().cpu()
    if not torch.equal(a.isnan(), b.isnan()):
        return False
    return max_abs_diff(a.nan_to_num(0.0), b.nan_to_num(0.0)) <= atol


def unambiguous(variants: list[tuple[str, Tensor]], atol: float) -> list[tuple[str, Tensor]]:
    """As variantes erradas que não coincidem, neste caso, com nenhuma outra.

    Se duas variantes dão o mesmo valor, uma resposta igual a elas não diz qual foi o
    erro: nenhum dos dois diagnósticos vale.
    """
    return [
        (diagnosis, value)
        for n, (diagnosis, value) in enumerate(variants)
        if not any(
            same_values(value, other, atol) for m, (_, other) in enumerate(variants) if m != n
        )
    ]


def expect_close(
    received: Any,
    expected: Tensor,
    where: str,
    *,
    atol: float = 1e-5,
    rtol: float = 0.0,
    name: str = "o resultado",
    variants: Iterable[tuple[str, Tensor]] = (),
) -> None:
    """Confere tipo, forma e valores; a mensagem diz o que foi testado e o que veio.

    ``variants``: pares ``(diagnóstico, valor da variante errada)``. Se a resposta bate com
    uma variante (e não com o esperado, nem com outra variante), o diagnóstico dela vai na
    mensagem; senão, só o caso, a forma e a maior diferença. ``NaN`` contam lugar a lugar.
    """
    expect(
        isinstance(received, Tensor),
        f"{where}, esperava que {name} fosse um tensor; recebi {type(received).__name__}.",
    )
    expect(
        tuple(received.shape) == tuple(expected.shape),
        f"{where}, esperava {name} com forma {tuple(expected.shape)}; recebi "
        f"{tuple(received.shape)}.",
    )
    finite = expected.detach()[torch.isfinite(expected.detach())]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    tol = atol + rtol * scale
    diff = max_abs_diff(received, expected)
    if diff <= tol:
        return
    for diagnosis, wrong in unambiguous(list(variants), tol):
        if same_values(received, wrong, tol):
            raise ExerciseError(f"{where}, {name} não confere: {diagnosis}")
    raise ExerciseError(
        f"{where}, {name} difere do esperado: {difference_text(received, expected)} "
        f"(tolerância {fmt(tol, 0, sci=True)})."
    )
