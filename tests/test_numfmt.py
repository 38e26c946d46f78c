"""Números em pt-BR (tpt.numfmt) e a conferência de igualdade com a diferença máxima."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import tpt
from tpt.numfmt import compare, fmt, fmt_bytes, fmt_count, fmt_tolerance, to_brazilian


@pytest.mark.parametrize(
    ("value", "kwargs", "expected"),
    [
        (0, {}, "0"),
        (7, {}, "7"),
        (1234, {}, "1.234"),
        (1234567, {}, "1.234.567"),
        (-1234567, {}, "-1.234.567"),
        (0.7634, {"decimals": 2}, "0,76"),
        (0.7634, {}, "0,76"),
        (1234.5, {"decimals": 1}, "1.234,5"),
        (2.0, {"decimals": 0}, "2"),
        (12, {"decimals": 1}, "12,0"),
        (0.974, {"percent": True}, "97,4%"),
        (1.0, {"percent": True, "decimals": 0}, "100%"),
        (2.5e-7, {"sci": True}, "2,5e-07"),
        (0.0, {"sci": True}, "0,0e+00"),
        (0.05, {"sign": True}, "+0,05"),
        (-0.0001, {"decimals": 2}, "0,00"),
        (np.int64(1500), {}, "1.500"),
        (np.float32(0.5), {"decimals": 1}, "0,5"),
        (torch.tensor(3.25), {"decimals": 2}, "3,25"),
        (torch.tensor([42]), {}, "42"),
        (float("nan"), {}, "NaN"),
        (math.inf, {}, "∞"),
        (-math.inf, {}, "-∞"),
    ],
)
def test_fmt(value, kwargs, expected):
    assert fmt(value, **kwargs) == expected


@pytest.mark.parametrize("bad", [True, "1,5", None, [1, 2]])
def test_fmt_rejects_non_numbers_in_portuguese(bad):
    with pytest.raises(TypeError, match="esperava um número"):
        fmt(bad)


def test_fmt_rejects_tensor_with_many_elements():
    with pytest.raises(ValueError, match=r"forma \(3,\)"):
        fmt(torch.zeros(3))


@pytest.mark.parametrize("decimals", [-1, 1.5, True])
def test_fmt_rejects_bad_decimals(decimals):
    with pytest.raises(ValueError, match="decimals"):
        fmt(1.0, decimals)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 bytes"),
        (512, "512 bytes"),
        (2048, "2,0 KiB"),
        (3 * 2**20, "3,0 MiB"),
        (671088640, "640,0 MiB"),
        (int(1.5 * 2**30), "1,5 GiB"),
    ],
)
def test_fmt_bytes(n, expected):
    assert fmt_bytes(n) == expected


def test_fmt_bytes_rejects_negative():
    with pytest.raises(ValueError, match=">= 0"):
        fmt_bytes(-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5", "0,5"),
        ("12000", "12.000"),
        ("1234.25", "1.234,25"),
        ("−0.2", "−0,2"),
        ("1e-07", "1e-07"),
        ("passo 1500: 0.25", "passo 1.500: 0,25"),
        ("", ""),
    ],
)
def test_to_brazilian(text, expected):
    assert to_brazilian(text) == expected


def test_compare_reports_max_difference():
    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    b = a + torch.tensor([0.0, 1e-7, -3e-7], dtype=torch.float64)
    result = compare(a, b)
    assert result.equal and bool(result)
    assert result.max_diff == pytest.approx(3e-7, rel=1e-2)
    assert str(result) == "True (diferença máxima ≤ 1e-06)"


@pytest.mark.parametrize("diff", [0.0, 6e-8, 5.96e-7, 9.9e-7])
def test_compare_prints_the_same_verdict_for_any_rounding(diff):
    # Zero exato numa CPU e 6e-07 em outra: o mesmo veredito impresso (issue 16).
    a = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert str(compare(a + diff, a)) == "True (diferença máxima ≤ 1e-06)"
    assert str(compare(a + diff, a, atol=1e-5)) == "True (diferença máxima ≤ 1e-05)"


def test_compare_exact_and_relative_tolerances():
    ids = torch.tensor([3, 1, 4])
    assert str(compare(ids, ids.clone(), atol=0)) == "True (diferença máxima: 0, exata)"
    assert str(compare(ids, ids + 1, atol=0)) == "False (diferença máxima: 1,0e+00)"
    result = compare(torch.tensor([100.0]), torch.tensor([100.001]), atol=1e-6, rtol=1e-4)
    assert str(result) == "True (diferença máxima ≤ 1e-06 + 1e-04·|esperado|)"


@pytest.mark.parametrize(
    ("tol", "text"),
    [(1e-6, "1e-06"), (5e-4, "5e-04"), (2.5e-5, "2,5e-05"), (0, "0"), (1.0, "1e+00")],
)
def test_fmt_tolerance(tol, text):
    assert fmt_tolerance(tol) == text


def test_fmt_tolerance_refuses_negative():
    with pytest.raises(ValueError, match="fmt_tolerance"):
        fmt_tolerance(-1e-6)


def test_compare_false_and_tolerance():
    result = compare(torch.ones(2), torch.tensor([1.0, 1.1]), atol=1e-3)
    assert not result
    assert str(result).startswith("False (diferença máxima: 1,0e-01")


def test_compare_mixed_devices_and_dtypes_and_nan():
    a = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    b = torch.tensor([1.0, float("nan")], dtype=torch.float32)
    assert compare(a, b).equal
    assert compare(a, b).max_diff == 0.0


def test_compare_refuses_broadcasting():
    with pytest.raises(ValueError, match="formas diferentes"):
        compare(torch.ones(3), torch.ones(1, 3))


def test_exports():
    assert tpt.fmt is fmt and tpt.compare is compare and tpt.fmt_bytes is fmt_bytes


def test_brazilian_axes_formats_ticks():
    fig, ax = plt.subplots()
    ax.plot([0, 0.5, 1.0], [10000, 15000, 20000])
    tpt.plot.brazilian_axes(fig)
    fig.canvas.draw()
    xs = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    ys = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert any("," in x for x in xs) and not any("." in x for x in xs)
    assert any("." in y for y in ys) and not any("," in y for y in ys)
    plt.close(fig)


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 reprovados"), (1, "1 reprovado"), (2, "2 reprovados"), (1534, "1.534 reprovados")],
)
def test_fmt_count_agrees_in_number(n, text):
    assert fmt_count(n, "reprovado", "reprovados") == text


def test_fmt_count_refuses_fractions():
    with pytest.raises(TypeError, match="fmt_count"):
        fmt_count(1.5, "passo", "passos")
