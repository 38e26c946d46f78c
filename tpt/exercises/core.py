"""O veredito das conferências e o que o notebook enxerga.

- :func:`exercise` transforma uma função de conferência num verificador que imprime ✅,
  ❌ (com a explicação) ou ⏳ (pendente) e devolve ``True``/``False``; a conferência
  roda dentro da guarda (:func:`~tpt.exercises.guards.sandbox`);
- :func:`checks` devolve o que o notebook usa (``ex = checks("attention")``): só os
  verificadores e as constantes do enunciado; as referências ficam fora do alcance do
  ``ex.`` + Tab.

As mensagens e comparações (:func:`expect`, :func:`expect_close`...) moram em
:mod:`tpt.exercises.messages` e são reexportadas aqui. A dependência vai num sentido só:
``messages`` ← ``rules`` ← ``guards`` ← ``core`` (e ``integrity``, o retrato do que as
conferências usam, ← ``guards``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tpt.exercises.guards import sandbox
from tpt.exercises.messages import (
    ExerciseError,
    autograd_explanation,
    difference_text,
    expect,
    expect_close,
    first_line,
    max_abs_diff,
    same_values,
    unambiguous,
)

__all__ = [
    "ExerciseError",
    "expect",
    "exercise",
    "expect_close",
    "max_abs_diff",
    "difference_text",
    "autograd_explanation",
    "same_values",
    "unambiguous",
    "first_line",
    "checks",
    "Checks",
]


def exercise(title: str) -> Callable[[Callable[..., Any]], Callable[..., bool]]:
    """Decorador: transforma uma função de conferência em um verificador amigável.

    A função decorada recebe a resposta do aluno (em geral uma função) e usa
    ``expect``. O verificador devolve ``True`` (certo) ou ``False`` (errado ou
    pendente) e imprime uma linha de retorno.
    """

    def decorate(check: Callable[..., Any]) -> Callable[..., bool]:
        @functools.wraps(check)
        def run(*answers: Any, **kwargs: Any) -> bool:
            # A guarda cobre tudo o que a conferência roda: threads e processos novos,
            # código da conferência chamado pela resposta, trocas do perfil do Python e
            # peças da conferência ou do PyTorch trocadas pela resposta são recusados,
            # por qualquer caminho que a conferência chame a resposta.
            failure: str | None = None
            pending = False
            with sandbox(answers) as state:
                try:
                    check(*state.answers, **kwargs)
                except NotImplementedError:
                    pending = True
                except ExerciseError as err:
                    failure = str(err)
                except Exception as err:  # a função do aluno quebrou: explicar, não derrubar
                    explained = autograd_explanation(err)
                    failure = explained or f"sua resposta levantou {type(err).__name__}: {err}"
            if state.violation is not None:
                # O que a guarda viu vem primeiro; o que a conferência achou, se for outra
                # coisa, vem depois (as duas causas foram medidas).
                extra = ""
                if failure is not None and state.violation not in failure:
                    extra = f" Além disso: {failure}"
                print(f"❌ {title}: {state.violation}{extra}")
                return False
            if pending:
                print(f"⏳ {title}: ainda não resolvido. Complete a célula acima e rode de novo.")
                return False
            if failure is not None:
                print(f"❌ {title}: {failure}")
                return False
            print(f"✅ {title}: correto!")
            return True

        run.title = title  # type: ignore[attr-defined]
        return run

    return decorate


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
