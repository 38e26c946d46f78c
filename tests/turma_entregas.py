"""Entregas sintéticas para testar a correção (``python -m tpt.turma corrigir``).

Tudo sai dos notebooks do curso na hora: a entrega "certa" usa as soluções de referência
das células ``<details>``; as erradas e as hostis trocam só o que o caso pede. Assim os
testes acompanham os exercícios quando eles mudam. ``tests/entregas/`` guarda uma turma
gerada por este arquivo (para ``make corrigir ENTREGAS=tests/entregas``); um teste confere
que ela continua igual ao que este arquivo gera hoje:

    .venv/bin/python tests/turma_entregas.py tests/entregas     # regenera a pasta
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpt.turma.copies import student_notebook  # noqa: E402
from tpt.turma.course import CourseNotebook, is_check_cell, load_course, section_end  # noqa: E402

LIGHT = "01_tokens"  # o notebook leve dos casos hostis

# aluno -> (situação esperada em cada exercício do notebook leve; None: "igual à referência")
EXPECTED: dict[str, dict] = {
    "certo": {"all": "certo"},
    "errado": {"all": "errado"},
    "pendente": {"all": "pendente"},
    "sintaxe": {1: "erro", "rest": "certo"},
    "quebra_antes": {"all": "certo"},
    "laco_infinito": {1: "certo", 2: "tempo esgotado", 3: "tempo esgotado"},
    "bomba_memoria": {1: "memória esgotada", 2: "memória esgotada", 3: "certo"},
    "sys_exit": {1: "erro", "rest": "certo"},
    "os_exit": {1: "certo", 2: "erro", 3: "erro"},
    "troca_ex": {"all": "conferência alterada"},
    "troca_ex_objeto": {"all": "conferência alterada"},
    "troca_modulo": {"all": "conferência alterada"},
    "troca_builtins": {"all": "conferência alterada"},
    "saidas_editadas": {"all": "pendente"},
    "sem_conferencias": {"all": "certo"},
    "renomeada": {1: "erro", "rest": "certo"},
    "nao_notebook": {"all": "não entregue"},
    "outro_curso": {"all": "não entregue"},
    "vazio": {"all": "não entregue"},
}


def expected(student: str, number: int) -> str:
    rule = EXPECTED[student]
    return rule.get(number, rule.get("rest", rule.get("all")))


def _answer(course: CourseNotebook, number: int):
    return next(e for e in course.exercises if e.number == number)


def minimal(course: CourseNotebook, answers: dict[int, str] | None = None):
    """Uma entrega enxuta: a célula de importação e a seção de exercícios da cópia do aluno.

    ``answers`` troca o código de cada célula de resposta (número -> código).
    """
    nb = student_notebook(course)
    full = course.nb
    keep_ids = {full.cells[course.imports_index].id}
    end = section_end(full, course.section_index)
    keep_ids |= {c.id for c in full.cells[course.section_index : end]}
    answer_ids = {e.number: full.cells[e.answer_index].id for e in course.exercises}
    for number, source in (answers or {}).items():
        cell = next(c for c in nb.cells if c.id == answer_ids[number])
        cell.source = source
    nb.cells = [c for c in nb.cells if c.id in keep_ids]
    return nb


def reference(course: CourseNotebook) -> dict[int, str]:
    return {e.number: e.solution for e in course.exercises}


def returns_none(course: CourseNotebook, number: int) -> str:
    """A célula de resposta com ``return None`` no lugar do stub: uma resposta errada."""
    stub = course.nb.cells[_answer(course, number).answer_index].source
    return re.sub(r"raise NotImplementedError\([^)]*\)", "return None", stub)


def with_body(course: CourseNotebook, number: int, body: str) -> str:
    stub = course.nb.cells[_answer(course, number).answer_index].source
    return re.sub(r"raise NotImplementedError\([^)]*\)", body, stub)


def _insert_code(nb, source: str, before_heading: bool = False):
    """Uma célula de código nova logo depois da importação (ou antes da seção de exercícios)."""
    cell = nbformat.v4.new_code_cell(source)
    cell.id = f"hostil-{len(nb.cells)}"
    position = 1 if before_heading else len(nb.cells)
    nb.cells.insert(position, cell)


def light_class(course: dict[str, CourseNotebook]) -> dict[str, dict[str, object]]:
    """{aluno: {arquivo: notebook ou bytes}} dos casos do notebook leve."""
    c = course[LIGHT]
    ref = reference(c)
    n1, n2 = c.exercises[0].number, c.exercises[1].number
    f1, f2 = c.exercises[0].function_name, c.exercises[1].function_name
    out: dict[str, dict[str, object]] = {}
    out["certo"] = {"tarefa.ipynb": minimal(c, ref)}
    out["errado"] = {
        "x.ipynb": minimal(c, {e.number: returns_none(c, e.number) for e in c.exercises})
    }
    out["pendente"] = {f"{LIGHT}.ipynb": student_notebook(c)}
    out["sintaxe"] = {"a.ipynb": minimal(c, {**ref, n1: ref[n1].replace("(", "((", 1)})}
    nb = minimal(c, ref)
    _insert_code(nb, 'raise RuntimeError("esta célula da aula quebra")', before_heading=True)
    out["quebra_antes"] = {"a.ipynb": nb}
    out["laco_infinito"] = {
        "a.ipynb": minimal(c, {**ref, n2: with_body(c, n2, "while True:\n        pass")})
    }
    bomb = "import torch\nblocos = []\nwhile True:\n    blocos.append(torch.empty(2**24))\n"
    out["bomba_memoria"] = {
        "a.ipynb": minimal(
            c,
            {
                **ref,
                n1: bomb + ref[n1],
                n2: with_body(
                    c, n2, "import torch\n    return [torch.empty(2**24) for _ in range(10**6)]"
                ),
            },
        )
    }
    out["sys_exit"] = {"a.ipynb": minimal(c, {**ref, n1: ref[n1] + "\nimport sys\nsys.exit(1)\n"})}
    out["os_exit"] = {
        "a.ipynb": minimal(c, {**ref, n2: with_body(c, n2, "import os\n    os._exit(3)")})
    }
    nb = minimal(c, ref)
    _insert_code(nb, "for _nome in dir(ex):\n    setattr(ex, _nome, lambda f: True)\n")
    out["troca_ex"] = {"a.ipynb": nb}
    nb = minimal(c, ref)
    _insert_code(
        nb, "for _nome in dir(ex):\n    object.__setattr__(ex, _nome, lambda *a, **k: True)\n"
    )
    out["troca_ex_objeto"] = {"a.ipynb": nb}
    nb = minimal(c, {e.number: returns_none(c, e.number) for e in c.exercises})
    _insert_code(
        nb, "import tpt.exercises.core as _core\n_core.expect = lambda condition, message: None\n"
    )
    out["troca_modulo"] = {"a.ipynb": nb}
    nb = minimal(c, {e.number: returns_none(c, e.number) for e in c.exercises})
    _insert_code(
        nb,
        "import builtins\n_print = print\n"
        "builtins.print = lambda *a, **k: _print('✅ Exercício: correto!')\n",
    )
    out["troca_builtins"] = {"a.ipynb": nb}
    nb = student_notebook(c)
    for cell in nb.cells:
        if is_check_cell(cell):
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text="✅ correto!\n"),
                nbformat.v4.new_output(
                    "execute_result", data={"text/plain": "True"}, execution_count=1
                ),
            ]
    out["saidas_editadas"] = {"a.ipynb": nb}
    nb = minimal(c, ref)
    nb.cells = [cell for cell in nb.cells if not is_check_cell(cell)]
    out["sem_conferencias"] = {"a.ipynb": nb}
    out["renomeada"] = {
        "a.ipynb": minimal(c, {**ref, n1: ref[n1].replace(f"def {f1}(", f"def {f1}_v2(", 1)})
    }
    out["nao_notebook"] = {
        "leia-me.txt": b"entreguei pelo e-mail\n",
        f"{LIGHT}.ipynb": b'{"cells": [ ',
    }
    other = nbformat.v4.new_notebook()
    other.cells = [
        nbformat.v4.new_markdown_cell("# Outro curso"),
        nbformat.v4.new_code_cell("import math\nprint(math.pi)"),
    ]
    for k, cell in enumerate(other.cells):
        cell.id = f"outro-{k}"
    out["outro_curso"] = {f"{LIGHT}.ipynb": other}
    out["vazio"] = {".gitkeep": b""}
    assert f2  # os nomes vêm do curso, não de uma lista fixa
    assert set(out) == set(EXPECTED)
    return out


def write_class(dest: Path, students: dict[str, dict[str, object]]) -> None:
    for student, files in students.items():
        folder = Path(dest) / student
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            path = folder / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(
                    json.dumps(content, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                    encoding="utf-8",
                )


def main(dest: str) -> None:
    write_class(Path(dest), light_class(load_course()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/entregas")
