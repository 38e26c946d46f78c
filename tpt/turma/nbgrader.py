"""Exporta o curso como árvore *source* do nbgrader (``DESTINO/source/<tarefa>/<nb>.ipynb``).

Cada notebook vira uma tarefa com o nome do arquivo (``06_mascaras``). Em cada exercício:

- a célula de resposta vira célula de solução do nbgrader (``solution: true``) com a
  solução de referência entre ``### BEGIN SOLUTION`` e ``### END SOLUTION`` (a assinatura
  da função fica de fora: a cópia do aluno a mantém e troca só o corpo pelo stub);
- a célula de conferência vira célula de nota travada (``grade: true``, ``locked``,
  ``points``). Ela não confia no namespace do aluno: busca o verificador no módulo dele
  (``from tpt.exercises.masks import check_... as _conferencia``, não ``ex.check_...``),
  confere antes o retrato de :mod:`tpt.exercises.integrity` (o mesmo da correção de uma
  turma), que a célula travada de importação tirou antes de qualquer célula do aluno, e
  falha com ``assert`` quando o verificador não aprova;
- a célula ``<details>`` com a solução sai.

A célula de instalação, a de importação (que cria ``ex`` e tira o retrato) e a de
parâmetros ficam travadas (``locked``): o ``nbgrader autograde`` as restaura antes de
rodar. O
``nbgrader_config.py`` gravado em ``DESTINO`` põe o stub do curso no lugar da solução e
dá tempo às células de treino.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import nbformat

from tpt.turma.copies import BELOW_RE, STUB
from tpt.turma.course import CourseNotebook, load_course

CONFIG = """\
# Gerado por `python -m tpt.turma nbgrader`: configuração do nbgrader para o curso.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "transformers-do-zero"
# A cópia do aluno recebe o mesmo stub dos notebooks do curso.
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
c.ClearSolutions.enforce_metadata = True
# Os notebooks treinam modelos pequenos: uma célula pode levar minutos numa CPU lenta.
c.ExecutePreprocessor.timeout = 1800
# Os casos sorteados das conferências usam a semente de TPT_EXERCISE_SEED, quando definida.
"""
POINTS = 1


def _meta(kind: str, grade_id: str, points: int | None = None) -> dict:
    meta = {
        "grade": kind == "grade",
        "solution": kind == "solution",
        "locked": kind in ("grade", "readonly"),
        "grade_id": grade_id,
        "schema_version": 3,
    }
    if points is not None:
        meta["points"] = points
    return meta


def solution_cell_source(solution: str, function_name: str) -> str:
    """A solução com o corpo da função entre os marcadores do nbgrader."""
    solution = solution.rstrip("\n")
    lines = solution.splitlines()
    tree = ast.parse(solution)
    if (
        len(tree.body) == 1
        and isinstance(tree.body[0], ast.FunctionDef)
        and tree.body[0].name == function_name
        and tree.body[0].body[0].lineno > tree.body[0].lineno
    ):
        first = tree.body[0].body[0]
        start = first.lineno - 1
        decorators = getattr(first, "decorator_list", None)
        if decorators:
            start = decorators[0].lineno - 1
        # Comentários logo antes do primeiro comando do corpo ficam com o corpo.
        while start - 1 > tree.body[0].lineno - 1 and lines[start - 1].strip().startswith("#"):
            start -= 1
        head, body = lines[:start], lines[start:]
        indent = " " * first.col_offset
        return "\n".join([*head, f"{indent}### BEGIN SOLUTION", *body, f"{indent}### END SOLUTION"])
    return "\n".join(["### BEGIN SOLUTION", *lines, "### END SOLUTION"])


SNAPSHOT_LINES = (
    "\n# Retrato das conferências antes de qualquer célula do aluno (o nbgrader restaura esta\n"
    "# célula travada); as células de nota o conferem.\n"
    "import tpt.exercises.integrity as _integridade\n\n"
    "_integridade.take(ex)"
)


def imports_cell_source(source: str) -> str:
    """A célula de importação do curso, mais o retrato das conferências."""
    return source.rstrip() + "\n" + SNAPSHOT_LINES


def grade_cell_source(module: str, check_name: str, function_name: str, number: int) -> str:
    """A célula de nota: retrato conferido, verificador tirado do módulo, ``assert``."""
    return (
        "# Célula de nota (travada): o verificador vem do módulo dele, não do `ex` do notebook,\n"
        "# e nada do que ele usa pode ter sido trocado desde a célula de importação.\n"
        "import tpt.exercises.integrity as _integridade\n"
        f"from tpt.exercises.{module} import {check_name} as _conferencia\n\n"
        "_integridade.verify(globals())\n"
        f"solved_{number} = _conferencia({function_name})\n"
        f"assert solved_{number} is True, "
        f'"a conferência do exercício {number} não aprovou a resposta"'
    )


def nbgrader_notebook(course: CourseNotebook):
    """O notebook *source* do nbgrader (um objeto novo; o do curso não muda)."""
    nb = copy.deepcopy(course.nb)
    drop = set()
    for e in course.exercises:
        answer = nb.cells[e.answer_index]
        answer.source = solution_cell_source(e.solution, e.function_name)
        answer.outputs, answer.execution_count = [], None
        answer.metadata["nbgrader"] = _meta("solution", f"resposta_{e.number}")
        check = nb.cells[e.check_index]
        check.source = grade_cell_source(course.module, e.check_name, e.function_name, e.number)
        check.outputs, check.execution_count = [], None
        check.metadata["nbgrader"] = _meta("grade", f"conferencia_{e.number}", POINTS)
        drop.add(e.solution_index)
    imports = nb.cells[course.imports_index]
    imports.source = imports_cell_source(imports.source)
    for i, cell in enumerate(nb.cells[: course.section_index]):
        trusted = (
            i == course.imports_index
            or "parameters" in cell.metadata.get("tags", [])
            or "google.colab" in cell.source
        )
        if cell.cell_type == "code" and trusted:
            cell.metadata["nbgrader"] = _meta("readonly", f"curso_{cell.get('id', i)}")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and i >= course.section_index:
            cell.source = BELOW_RE.sub("", cell.source)
    nb.cells = [c for i, c in enumerate(nb.cells) if i not in drop]
    nb.metadata["tpt"] = {"notebook": course.stem}
    return nb


def write_source_tree(
    dest: Path, notebooks_dir: Path | None = None, only: list[str] | None = None
) -> list[Path]:
    """Grava ``dest/source/<tarefa>/<notebook>.ipynb`` e ``dest/nbgrader_config.py``."""
    course = load_course() if notebooks_dir is None else load_course(notebooks_dir)
    dest = Path(dest)
    written = []
    for stem, notebook in course.items():
        if only and stem not in only:
            continue
        folder = dest / "source" / stem
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / notebook.path.name
        nbformat.write(nbgrader_notebook(notebook), target)
        written.append(target)
    config = dest / "nbgrader_config.py"
    config.write_text(CONFIG.format(stub=STUB), encoding="utf-8")
    written.append(config)
    return written
