"""Nenhuma célula dos notebooks tem caracteres de controle (fora a quebra de linha).

Um `\\t`, `\\f` ou `\\b` escrito numa string comum do Python (em vez de `\\\\t` ou r"...")
vira TAB, form feed ou backspace no texto da célula: `"\\tfrac"` num markdown gerado por
código vira TAB + "frac", e o LaTeX mostra "frac23". Este teste lê o texto cru de cada
célula de markdown e de código e recusa qualquer caractere C0 (U+0000 a U+001F) que não
seja `\\n`, e também o DEL (U+007F).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ALLOWED = {"\n"}
NAMES = {"\t": "TAB (\\t)", "\x0c": "form feed (\\f)", "\x08": "backspace (\\b)", "\r": "\\r"}


def control_characters(text: str) -> list[tuple[int, int, str]]:
    """``(linha, coluna, nome)`` de cada caractere de controle de ``text`` (1-based)."""
    found = []
    for line_number, line in enumerate(text.split("\n"), start=1):
        for column, char in enumerate(line, start=1):
            if (ord(char) < 0x20 or ord(char) == 0x7F) and char not in ALLOWED:
                found.append((line_number, column, NAMES.get(char, f"U+{ord(char):04X}")))
    return found


def test_the_lint_sees_each_kind():
    assert control_characters("a\tb") == [(1, 2, "TAB (\\t)")]
    assert control_characters("x\n\\frac \x0crac\x08") == [
        (2, 7, "form feed (\\f)"),
        (2, 11, "backspace (\\b)"),
    ]
    assert control_characters("linha\noutra\r\n") == [(2, 6, "\\r")]
    assert control_characters("ok \\t \\f \\b\n") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_cells_have_no_control_characters(path):
    notebook = nbformat.read(path, as_version=4)
    problems = [
        f"cells[{index}] ({cell.cell_type}, id {cell.get('id')}) linha {line}, coluna {col}: {name}"
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type in {"markdown", "code"}
        for line, col, name in control_characters(cell.source)
    ]
    assert not problems, f"{path.name}: caracteres de controle:\n" + "\n".join(problems)
