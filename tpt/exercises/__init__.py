"""Conferências automáticas dos exercícios dos notebooks, com retorno em português.

Cada notebook tem um módulo aqui (``tpt.exercises.tokens`` para o 01, e assim por
diante). Um exercício é uma função que o aluno escreve no notebook; a conferência
chama essa função com casos de teste e diz o que está certo ou errado.

Enquanto o aluno não resolve, a célula do exercício levanta ``NotImplementedError``
e a conferência só avisa que ele está pendente, sem erro: por isso o notebook inteiro
roda sem intervenção (papermill, nbval) e continua sendo um exercício de verdade.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "ExerciseError",
    "expect",
    "exercise",
    "uses_loops",
    "references",
    "refers_to",
    "forbid",
    "count_calls",
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


# --------------------------------------------------------------------------------------
# Regras dos enunciados ("sem laços", "não use X", "uma chamada de Y"): as conferências
# as verificam com estas ferramentas, em vez de só confiar no aluno.
# --------------------------------------------------------------------------------------
_LOOP_OPS = {"FOR_ITER", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"}


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _function_code(fn: Callable[..., Any]) -> types.CodeType:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        raise TypeError(f"esperava uma função escrita em Python; recebi {type(fn).__name__}")
    return code


def uses_loops(fn: Callable[..., Any]) -> bool:
    """A função tem laço ``for``/``while`` (ou compreensão de lista) no próprio código?

    Lê o bytecode (funciona para funções definidas num notebook). Funções chamadas por
    ela não contam: ``torch.arange`` não é um laço do aluno.
    """
    for code in _code_objects(_function_code(fn)):
        for ins in dis.get_instructions(code):
            if ins.opname in _LOOP_OPS:
                return True
            # Todo laço termina num salto para trás (o nome do salto muda entre versões
            # do Python: JUMP_ABSOLUTE, POP_JUMP_BACKWARD_IF_TRUE, JUMP_BACKWARD...).
            backward = isinstance(ins.argval, int) and ins.argval < ins.offset
            if "JUMP" in ins.opname and backward:
                return True
    return False


def references(fn: Callable[..., Any], name: str) -> bool:
    """O código da função menciona o nome ``name`` (global, atributo ou método)?

    Ex.: ``references(answer, "pe_rotation")`` pega ``tpt.pe_rotation(...)`` e também
    ``from tpt import pe_rotation`` feito antes no notebook.
    """
    return any(name in code.co_names for code in _code_objects(_function_code(fn)))


def refers_to(fn: Callable[..., Any], *objects: Any) -> bool:
    """A função guardou uma referência direta a algum de ``objects`` (``from x import f``)?

    Compara identidades nos globais que o código da função usa: pega
    ``from tpt import sliding_window_mask`` feito antes no notebook, mesmo com outro nome.
    """
    names: set[str] = set()
    for code in _code_objects(_function_code(fn)):
        names.update(code.co_names)
    namespace = getattr(inspect.unwrap(fn), "__globals__", {})
    return any(namespace.get(name) is obj for name in names for obj in objects)


@contextlib.contextmanager
def forbid(owner: Any, name: str, reason: str) -> Iterator[None]:
    """Dentro do bloco, chamar ``owner.name`` levanta ``ExerciseError(reason)``.

    Ex.: ``with forbid(torch, "softmax", "o exercício pede o softmax escrito à mão")``.
    """
    original = getattr(owner, name)

    @functools.wraps(original)
    def blocked(*args: Any, **kwargs: Any) -> Any:
        raise ExerciseError(reason)

    setattr(owner, name, blocked)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def count_calls(owner: Any, name: str) -> Iterator[list[int]]:
    """Conta as chamadas de ``owner.name`` dentro do bloco; o contador é ``calls[0]``."""
    original = getattr(owner, name)
    calls = [0]

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield calls
    finally:
        setattr(owner, name, original)
