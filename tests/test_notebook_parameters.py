"""A célula de parâmetros de cada notebook, como o papermill a lê.

`papermill --help-notebook` (e o `-p` de quem só olha a ajuda) lista os parâmetros que o
papermill consegue ler. Ele descarta a linha inteira quando ela tem mais de um "=", mesmo
que o segundo esteja no comentário ("Unable to parse line …"): o parâmetro some da ajuda.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat
import pytest
from papermill.inspection import inspect_notebook

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_tools import course_notebooks  # noqa: E402


def _declared(path: Path) -> list[str]:
    """Os nomes atribuídos na célula de parâmetros, lidos pelo próprio Python."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    names = []
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.AnnAssign):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets)
    return names


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: p.name)
def test_papermill_lists_every_parameter(path):
    declared = _declared(path)
    assert declared, f"{path.name}: célula de parâmetros vazia"
    assert list(inspect_notebook(str(path))) == declared
