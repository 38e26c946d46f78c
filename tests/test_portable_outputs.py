"""As saídas guardadas dos notebooks não imprimem arredondamento cru (issue 16).

O nbval compara, célula por célula, o texto guardado com o de uma nova execução. Uma
diferença de arredondamento (``0,0e+00`` numa CPU, ``6,0e-08`` em outra) impressa como
número faria o teste depender da CPU que gravou as saídas. Por isso toda igualdade é
impressa como veredito contra a tolerância (``tpt.compare``) e estes testes, que só leem
os arquivos, pegam as formas cruas antes mesmo de rodar um kernel. A prova dinâmica é
``make test-kernels``: o nbval com outro conjunto de instruções da CPU.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_tools import course_notebooks, is_volatile  # noqa: E402

# "True (diferença máxima: 2,4e-07)" era a forma antiga: o número muda de CPU para CPU.
RAW_TRUE = re.compile(r"True \(diferença máxima: (?!0, exata\))")
# Um zero exato em notação científica só aparece quando o arredondamento "deu zero".
RAW_ZERO = re.compile(r"(?<![\d,])0,0e[+-]00")


def _checked_lines(path: Path) -> list[tuple[int, str]]:
    nb = nbformat.read(path, as_version=4)
    lines = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_volatile(cell):
            continue
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            lines += [(index, line) for line in text.splitlines()]
    return lines


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: p.stem)
def test_equalities_are_printed_as_verdicts(path):
    raw = [
        f"célula {i}: {line.strip()}" for i, line in _checked_lines(path) if RAW_TRUE.search(line)
    ]
    assert not raw, (
        "igualdades impressas com o arredondamento cru (use tpt.compare, que imprime o "
        "veredito):\n" + "\n".join(raw)
    )


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: p.stem)
def test_no_exact_zero_in_scientific_notation(path):
    raw = [
        f"célula {i}: {line.strip()}" for i, line in _checked_lines(path) if RAW_ZERO.search(line)
    ]
    assert not raw, "zeros de arredondamento impressos crus:\n" + "\n".join(raw)


def test_the_checks_catch_the_old_forms():
    assert RAW_TRUE.search("igual: True (diferença máxima: 2,4e-07)")
    assert RAW_TRUE.search("igual: True (diferença máxima: 0,0e+00)")
    assert not RAW_TRUE.search("igual: True (diferença máxima ≤ 1e-06)")
    assert not RAW_TRUE.search("igual: True (diferença máxima: 0, exata)")
    assert not RAW_TRUE.search("igual: False (diferença máxima: 2,8e+00)")
    assert RAW_ZERO.search("maior |média|: 0,0e+00")
    assert not RAW_ZERO.search("razão: 10,0e+00")
