"""Conferências automáticas dos exercícios dos notebooks, com retorno em português.

Cada notebook tem um módulo aqui (``tpt.exercises.tokens`` para o 01, e assim por
diante). Um exercício é uma função que o aluno escreve no notebook; a conferência
chama essa função com casos de teste e diz o que está certo ou errado.

Enquanto o aluno não resolve, a célula do exercício levanta ``NotImplementedError``
e a conferência só avisa que ele está pendente, sem erro: por isso o notebook inteiro
roda sem intervenção (papermill, nbval) e continua sendo um exercício de verdade.

O notebook usa ``ex = checks("attention")``: só os verificadores, sem as referências.
A máquina comum mora em três arquivos:

- ``core``: o veredito (:func:`exercise`), as mensagens (:func:`expect`,
  :func:`expect_close` com diagnósticos só de variantes calculadas) e :func:`checks`;
- ``rules``: regras verificadas pelas operações que rodaram (:func:`record_ops`), não
  pelos nomes no código;
- ``guards``: entradas intactas (:func:`call_answer`), gradientes
  (:func:`check_gradients`) e casos sorteados (:func:`case_generator`).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from tpt.exercises.core import (
    Checks,
    ExerciseError,
    checks,
    exercise,
    expect,
    expect_close,
    first_line,
    max_abs_diff,
    same_values,
    unambiguous,
)
from tpt.exercises.guards import (
    Snapshot,
    call_answer,
    case_generator,
    check_gradients,
    expect_finite_gradient,
    randint,
    seed_note,
)
from tpt.exercises.rules import (
    ATTENTION_KERNEL_OPS,
    REPEAT_OPS,
    SOFTMAX_OPS,
    OpRecord,
    functions_from_file,
    op_counts_by_size,
    record_modules,
    record_ops,
    record_python_calls,
    record_torch_calls,
    watch_autograd,
)

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
    "call_answer",
    "check_gradients",
    "case_generator",
    "expect_finite_gradient",
    "randint",
    "seed_note",
    "Snapshot",
    "record_ops",
    "OpRecord",
    "op_counts_by_size",
    "record_python_calls",
    "functions_from_file",
    "record_torch_calls",
    "record_modules",
    "watch_autograd",
    "SOFTMAX_OPS",
    "ATTENTION_KERNEL_OPS",
    "REPEAT_OPS",
    "uses_loops",
    "references",
    "refers_to",
    "forbid",
    "count_calls",
]


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
