"""As soluções dos exercícios, tiradas dos próprios notebooks, passam pelas conferências.

Cada exercício de um notebook tem, em ordem: a célula do aluno (que levanta
``NotImplementedError``), a célula de conferência (``solved_N = ex.check_...(função)``) e
uma célula de texto ``<details><summary>Solução</summary>`` com um bloco ```python.
A solução de referência vive só ali (um lugar), e este teste a executa num namespace
com as importações do notebook e confere que a conferência responde ✅. Assim o
caminho certo de cada conferência é testado, não só o "pendente" guardado no notebook.
"""

from __future__ import annotations

import ast
import linecache
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTION = re.compile(r"<summary>Solução</summary>.*?```python\n(.*?)```", re.S)


def _exercises(path: Path) -> list[tuple[str, str, str, str]]:
    """(id da conferência, código da conferência, código da solução, célula de importação)."""
    nb = nbformat.read(path, as_version=4)
    imports = next(
        c.source for c in nb.cells if c.cell_type == "code" and "from tpt.exercises" in c.source
    )
    found = []
    for i, cell in enumerate(nb.cells):
        match = SOLUTION.search(cell.source) if cell.cell_type == "markdown" else None
        if match is None:
            continue
        check = next(c for c in reversed(nb.cells[:i]) if c.cell_type == "code")
        found.append((check.get("id", str(i)), check.source, match.group(1), imports))
    return found


CASES = [
    pytest.param(path, *case, id=f"{path.stem}:{case[0]}")
    for path in NOTEBOOKS
    for case in _exercises(path)
]


# O aluno tem à mão tudo o que o notebook já importou; estes módulos cobrem as soluções.
PRELUDE = """
import collections
import math
import re
import unicodedata

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
"""


def _exec(code: str, namespace: dict, name: str) -> None:
    # Registra o código no linecache: conferências que leem o código-fonte da resposta
    # (inspect.getsource) funcionam aqui como funcionam no Jupyter.
    filename = f"<{name}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    exec(compile(code, filename, "exec"), namespace)


def test_every_notebook_from_06_has_solutions():
    for path in NOTEBOOKS:
        if path.name >= "06":
            assert len(_exercises(path)) >= 2, f"{path.name}: esperava de 2 a 4 exercícios"


@pytest.mark.parametrize(("path", "check_id", "check", "solution", "imports"), CASES)
def test_reference_solution_passes_its_check(path, check_id, check, solution, imports, capsys):
    namespace: dict = {"__name__": "__solucao__"}
    _exec(PRELUDE, namespace, "prelude")
    code_lines = [line for line in imports.splitlines() if not line.lstrip().startswith("%")]
    _exec("\n".join(code_lines), namespace, f"{path.stem}-imports")
    _exec(solution, namespace, f"{path.stem}-{check_id}-solucao")
    _exec(check, namespace, f"{path.stem}-{check_id}-conferencia")
    target = ast.parse(check).body[-1]
    assert isinstance(target, ast.Assign), "a conferência deve ser `solved_N = ex.check_...(...)`"
    name = target.targets[0].id
    out = capsys.readouterr().out
    assert namespace[name] is True, f"{path.name} {check_id}: a solução não passou:\n{out}"
    assert "✅" in out
