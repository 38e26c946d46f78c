"""Ferramentas que as conferências usam para fazer valer as regras dos enunciados."""

from __future__ import annotations

import math

import pytest
import torch

import tpt
from tpt import pe_rotation as rotation_alias
from tpt.exercises import (
    ExerciseError,
    count_calls,
    exercise,
    forbid,
    references,
    refers_to,
    uses_loops,
)


def vectorized(x):
    return torch.arange(x) * 2


def with_for(x):
    total = 0
    for i in range(x):
        total += i
    return total


def with_while(x):
    while x > 0:
        x -= 1
    return x


def with_comprehension(x):
    return [i for i in range(x)]


def with_nested_loop(x):
    def inner():
        return sum(i for i in range(x))

    return inner()


def test_uses_loops():
    assert not uses_loops(vectorized)
    for fn in (with_for, with_while, with_comprehension, with_nested_loop):
        assert uses_loops(fn), fn.__name__


def test_uses_loops_rejects_builtins():
    with pytest.raises(TypeError, match="função escrita em Python"):
        uses_loops(math.sqrt)


def test_references():
    def uses_rotation(k, d):
        return tpt.pe_rotation(k, d)

    assert references(uses_rotation, "pe_rotation")
    assert not references(vectorized, "pe_rotation")


def test_forbid_and_restore():
    original = torch.softmax

    @exercise("Regra")
    def check(fn):
        with forbid(torch, "softmax", "sem torch.softmax, por favor"):
            fn()

    assert check(lambda: torch.softmax(torch.zeros(2), 0)) is False
    assert torch.softmax is original
    assert check(lambda: torch.exp(torch.zeros(2))) is True


def test_forbid_raises_exercise_error():
    with pytest.raises(ExerciseError, match="proibido"):
        with forbid(torch, "softmax", "proibido"):
            torch.softmax(torch.zeros(2), 0)


def test_count_calls():
    original = torch.matmul
    with count_calls(torch, "matmul") as calls:
        torch.matmul(torch.ones(2, 2), torch.ones(2, 2))
        torch.matmul(torch.ones(2, 2), torch.ones(2, 2))
    assert calls[0] == 2
    assert torch.matmul is original


def uses_alias(k, d):
    return rotation_alias(k, d)


def test_refers_to_catches_imported_aliases():
    assert refers_to(uses_alias, tpt.pe_rotation)
    assert not refers_to(vectorized, tpt.pe_rotation)
