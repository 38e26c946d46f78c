"""O esqueleto comum das conferências: o veredito, as mensagens e o que o notebook enxerga.

- :func:`exercise` transforma uma função de conferência num verificador que imprime ✅,
  ❌ (com a explicação) ou ⏳ (pendente) e devolve ``True``/``False``;
- :func:`expect` levanta :class:`ExerciseError` com a explicação para o aluno;
- :func:`expect_close` compara a resposta com o esperado e, quando erra, diz o caso, a
  forma ou a maior diferença; um diagnóstico ("parece que você dividiu por d em vez de
  √d") só aparece quando a variante errada correspondente foi **calculada** e bateu com
  a resposta (``variants``);
- :func:`checks` devolve o que o notebook usa (``ex = checks("attention")``): só os
  verificadores e as constantes do enunciado; as referências ficam fora do alcance do
  ``ex.`` + Tab.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from tpt.numfmt import fmt

__all__ = [
    "ExerciseError",
    "expect",
    "exercise",
    "expect_close",
    "max_abs_diff",
    "same_values",
    "unambiguous",
    "first_line",
    "checks",
    "Checks",
]


class ExerciseError(AssertionError):
    """Uma resposta errada, com a explicação para o aluno."""


def expect(condition: bool, message: str) -> None:
    """Levanta ``ExerciseError(message)`` quando ``condition`` é falsa."""
    if not condition:
        raise ExerciseError(message)


def exercise(title: str) -> Callable[[Callable[..., Any]], Callable[..., bool]]:
    """Decorador: transforma uma função de conferência em um verificador amigável.

    A função decorada recebe a resposta do aluno (em geral uma função) e usa
    ``expect``. O verificador devolve ``True`` (certo) ou ``False`` (errado ou
    pendente) e imprime uma linha de retorno.
    """

    def decorate(check: Callable[..., Any]) -> Callable[..., bool]:
        @functools.wraps(check)
        def run(*answers: Any, **kwargs: Any) -> bool:
            try:
                check(*answers, **kwargs)
            except NotImplementedError:
                print(f"⏳ {title}: ainda não resolvido. Complete a célula acima e rode de novo.")
                return False
            except ExerciseError as err:
                print(f"❌ {title}: {err}")
                return False
            except Exception as err:  # a função do aluno quebrou: explicar, não derrubar
                print(f"❌ {title}: sua resposta levantou {type(err).__name__}: {err}")
                return False
            print(f"✅ {title}: correto!")
            return True

        run.title = title  # type: ignore[attr-defined]
        return run

    return decorate


def first_line(err: BaseException) -> str:
    """A primeira linha da mensagem de um erro (ou ``""``)."""
    text = str(err).strip().splitlines()
    return text[0] if text else ""


def max_abs_diff(a: Any, b: Any) -> float:
    """Maior diferença absoluta entre dois tensores (ou números) de mesma forma."""
    a = torch.as_tensor(a).detach().double().cpu()
    b = torch.as_tensor(b).detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    diff = (a - b).abs()
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    diff = diff.masked_fill(both_inf, 0.0)
    return float(diff.nan_to_num(float("inf")).max())


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
    tol = atol + rtol * float(expected.detach().abs().max()) if expected.numel() else atol
    diff = max_abs_diff(received, expected)
    if diff <= tol:
        return
    for diagnosis, wrong in unambiguous(list(variants), tol):
        if same_values(received, wrong, tol):
            raise ExerciseError(f"{where}, {name} está errado: {diagnosis}")
    raise ExerciseError(
        f"{where}, {name} difere do esperado: maior diferença {fmt(diff, 2, sci=True)} "
        f"(tolerância {fmt(tol, 0, sci=True)})."
    )


class Checks:
    """Os verificadores de um notebook, e só eles (``ex.`` + Tab mostra só estes nomes)."""

    def __init__(self, module: ModuleType) -> None:
        names = getattr(module, "__all__", None)
        if names is None:
            raise AttributeError(f"{module.__name__} precisa declarar __all__.")
        object.__setattr__(self, "_module_name", module.__name__)
        object.__setattr__(self, "_names", tuple(names))
        for name in names:
            object.__setattr__(self, name, getattr(module, name))

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"{name!r} não é um dos exercícios deste notebook; os verificadores são: "
            f"{', '.join(self._names)}."
        )

    def __dir__(self) -> list[str]:
        return list(self._names)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("os verificadores não podem ser trocados.")

    def __repr__(self) -> str:
        return f"Exercícios de {self._module_name}: {', '.join(self._names)}"


def checks(name: str) -> Checks:
    """Os verificadores do módulo ``tpt.exercises.<name>`` (``ex = checks("attention")``)."""
    try:
        module = importlib.import_module(f"tpt.exercises.{name}")
    except ModuleNotFoundError:
        raise ValueError(
            f"não há exercícios chamados {name!r}; os módulos ficam em tpt/exercises/ "
            "(por exemplo 'tokens', 'attention')."
        ) from None
    return Checks(module)
