"""Cópias para a turma: os notebooks do curso sem as soluções.

Sai a célula ``<details><summary>Solução</summary>`` de cada exercício (e a frase que
diz que a solução está logo abaixo); a célula de resposta fica como o stub que levanta
``NotImplementedError``; a célula de conferência fica com a saída "pendente". Todo o
resto (texto, figuras, saídas da aula, selo do Colab, célula de instalação) fica igual
ao curso: ``make fork`` reescreve o curso e ``make turma`` refaz as cópias dele.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat

from tpt.turma.course import PENDING_MARK, CourseNotebook, load_course

STUB = 'raise NotImplementedError("Escreva sua solução aqui")'
# A frase do texto dos exercícios que promete a solução "logo abaixo": falsa na cópia.
BELOW_RE = re.compile(r"\s*A solução\s+fica\s+escondida\s+logo\s+abaixo\.", re.S)


def _stub_from_solution(solution: str, function_name: str) -> str:
    """A assinatura da solução com o corpo trocado pelo stub (quando o curso não traz um)."""
    lines = solution.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"def {function_name}("):
            end = i
            while not lines[end].rstrip().endswith(":"):
                end += 1
            return "\n".join([*lines[i : end + 1], f"    {STUB}"])
    raise ValueError(f"a solução não define `{function_name}`")


def student_notebook(course: CourseNotebook):
    """O notebook do aluno (um novo objeto nbformat; o do curso não muda)."""
    nb = copy.deepcopy(course.nb)
    solutions = {e.solution_index for e in course.exercises}
    for exercise in course.exercises:
        answer = nb.cells[exercise.answer_index]
        if "NotImplementedError" not in answer.source:
            answer.source = _stub_from_solution(exercise.solution, exercise.function_name)
            answer.outputs = []
            answer.execution_count = None
        check = nb.cells[exercise.check_index]
        text = "".join(o.get("text", "") for o in check.outputs)
        if PENDING_MARK not in text or any(m in text for m in ("✅", "❌")):
            raise ValueError(
                f"{course.stem}: a conferência do exercício {exercise.number} não guarda a "
                "saída pendente (⏳); regrave o notebook do curso (make notebooks)."
            )
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and i >= course.section_index:
            cell.source = BELOW_RE.sub("", cell.source)
    nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in solutions]
    nb.metadata["tpt"] = {"notebook": course.stem}
    return nb


def write_copies(dest: Path, notebooks_dir: Path | None = None) -> list[Path]:
    """Escreve em ``dest`` uma cópia de aluno de cada notebook do curso (mesmos nomes)."""
    course = load_course() if notebooks_dir is None else load_course(notebooks_dir)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for notebook in course.values():
        target = dest / notebook.path.name
        nbformat.write(student_notebook(notebook), target)
        written.append(target)
    return written
