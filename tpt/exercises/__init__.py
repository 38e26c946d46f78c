"""Conferências automáticas dos exercícios dos notebooks, com retorno em português.

Cada notebook tem um módulo aqui (``tpt.exercises.tokens`` para o 01, e assim por
diante). Um exercício é uma função que o aluno escreve no notebook; a conferência
chama essa função com casos de teste e diz o que está certo ou errado.

Enquanto o aluno não resolve, a célula do exercício levanta ``NotImplementedError``
e a conferência só avisa que ele está pendente, sem erro: por isso o notebook inteiro
roda sem intervenção (papermill, nbval) e continua sendo um exercício de verdade.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["ExerciseError", "expect", "exercise"]


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
