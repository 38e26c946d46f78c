"""A correção de uma turma: monta o trabalho de cada notebook, roda e lê os vereditos."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from tpt.turma.course import (
    EXERCISE_HEADING_RE,
    CourseNotebook,
    defined_names,
    is_check_cell,
    section_end,
    section_start,
)
from tpt.turma.sandbox import ChildRun, Limits, run_child
from tpt.turma.submissions import Student, Submission

SITUATIONS = (
    "certo",
    "errado",
    "pendente",
    "erro",
    "tempo esgotado",
    "memória esgotada",
    "conferência alterada",
    "não entregue",
)
MEMORY_HINTS = (
    "MemoryError",
    "can't allocate memory",
    "std::bad_alloc",
    "Cannot allocate memory",
    "DefaultCPUAllocator",
)


@dataclass
class Row:
    """Uma linha de notas.csv: um exercício de um notebook de um aluno."""

    aluno: str
    notebook: str
    exercicio: int
    pontos: int
    maximo: int
    situacao: str
    mensagem: str


def _head(source: str) -> str:
    line = next((s.strip() for s in source.splitlines() if s.strip()), "")
    return line if len(line) <= 60 else line[:57] + "..."


def build_job(course: CourseNotebook, nb: Any) -> dict[str, Any]:
    """O trabalho do processo filho: código confiável do curso + células do aluno."""
    functions = {e.function_name: e.number for e in course.exercises}
    start = section_start(nb)
    if start is None:  # o título sumiu: começa na primeira célula que define uma resposta
        start = next(
            (
                i
                for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and defined_names(c.source) & functions.keys()
            ),
            len(nb.cells),
        )
    end = section_end(nb, start)
    cells, current = [], None
    for i in range(start, end):
        cell = nb.cells[i]
        if cell.cell_type == "markdown":
            match = EXERCISE_HEADING_RE.search(cell.source)
            if match:
                current = int(match.group(1))
            continue
        if cell.cell_type != "code" or is_check_cell(cell) or not cell.source.strip():
            continue
        owners = [functions[n] for n in defined_names(cell.source) if n in functions]
        cells.append(
            {
                "index": i + 1,
                "source": cell.source,
                "exercise": owners[0] if len(owners) == 1 else current,
                "head": _head(cell.source),
            }
        )
    return {
        "prelude": course.trusted_prelude(),
        "cells": cells,
        "exercises": [
            {"number": e.number, "check_name": e.check_name, "function_name": e.function_name}
            for e in course.exercises
        ],
    }


def _where(job: dict, index: int) -> str:
    head = next((c["head"] for c in job["cells"] if c["index"] == index), "")
    return f"célula {index} (`{head}`)"


def interpret(course: CourseNotebook, job: dict, run: ChildRun) -> dict[int, tuple[str, str]]:
    """Os vereditos ``{exercício: (situação, mensagem)}`` a partir dos eventos do filho."""
    numbers = [e.number for e in course.exercises]
    verdicts: dict[int, tuple[str, str]] = {}
    events = run.events
    fatal = next((e for e in events if e.get("kind") == "fatal"), None)
    if fatal is not None:
        return {n: ("erro", str(fatal.get("message", ""))) for n in numbers}
    tampered = [e for e in events if e.get("kind") == "tampered"]
    if tampered:
        changes = sorted({c for e in tampered for c in e.get("changes", [])})
        shown = "; ".join(changes[:4]) + (
            f" (e mais {len(changes) - 4})" if len(changes) > 4 else ""
        )
        message = f"o notebook mexeu nas conferências: {shown}"
        return {n: ("conferência alterada", message) for n in numbers}
    for event in events:
        if event.get("kind") == "result" and event.get("exercise") in numbers:
            verdicts[event["exercise"]] = (str(event["situacao"]), str(event["mensagem"]))
    cell_errors = [e for e in events if e.get("kind") == "cell_error"]
    for error in cell_errors:
        message = str(error.get("message", ""))
        if re.search(r"os verificadores não podem ser trocados", message):
            text = f"a {_where(job, error['index'])} tentou trocar um verificador de `ex`"
            return {n: ("conferência alterada", text) for n in numbers}
    if not run.finished:
        situacao, cause = _death(run)
        phase = _phase(job, events)
        for n in numbers:
            if n not in verdicts:
                verdicts[n] = (situacao, f"{cause} {phase}; este exercício não foi conferido")
    for n in numbers:
        situacao, message = verdicts[n]
        mine = [e for e in cell_errors if e.get("exercise") in (n, None)]
        # Memória esgotada e sys.exit numa célula valem mesmo com a conferência aprovando:
        # o notebook não roda de cima a baixo. Outro erro de célula só explica o que falhou.
        grave = [e for e in mine if e.get("memory") or e.get("exit")]
        if situacao == "certo" and not grave:
            continue
        if not mine:
            continue
        error = (grave or mine)[0]
        where = f"a {_where(job, error['index'])} {error['message']}"
        if error.get("memory"):
            verdicts[n] = ("memória esgotada", where)
        elif error.get("exit") or situacao in ("pendente", "erro"):
            verdicts[n] = ("erro", where if situacao == "pendente" else f"{where}; {message}")
        else:
            verdicts[n] = (situacao, f"{message} (além disso, {where})")
    return verdicts


def _death(run: ChildRun) -> tuple[str, str]:
    if run.timed_out:
        return "tempo esgotado", "o notebook passou do limite de tempo"
    if any(h in run.stderr for h in MEMORY_HINTS):
        return "memória esgotada", "o notebook passou do limite de memória"
    code = run.returncode
    how = f"pelo sinal {-code}" if code is not None and code < 0 else f"com código {code}"
    return "erro", f"o processo terminou de repente ({how}; os._exit?)"


def _phase(job: dict, events: list[dict]) -> str:
    kinds = [e.get("kind") for e in events]
    if "ready" not in kinds:
        return "antes das células do aluno"
    starts = [e for e in events if e.get("kind") == "start"]
    if starts:
        return f"no exercício {starts[-1]['exercise']}"
    cells = [e for e in events if e.get("kind") == "cell"]
    if cells:
        return f"na {_where(job, cells[-1]['index'])}"
    return "antes das células do aluno"


def grade_submission(course: CourseNotebook, submission: Submission, limits: Limits) -> list[Row]:
    """Corrige um notebook entregue (um processo filho) e devolve uma linha por exercício."""
    job = build_job(course, submission.nb)
    run = run_child(job, limits)
    verdicts = interpret(course, job, run)
    return [
        Row(
            submission.student,
            course.stem,
            e.number,
            int(verdicts[e.number][0] == "certo"),
            1,
            verdicts[e.number][0],
            verdicts[e.number][1],
        )
        for e in course.exercises
    ]


def missing_rows(student: str, course: CourseNotebook, notes: list[str]) -> list[Row]:
    extra = f" ({'; '.join(notes)})" if notes else ""
    message = f"nenhum arquivo entregue é o notebook {course.stem}{extra}"
    return [
        Row(student, course.stem, e.number, 0, 1, "não entregue", message) for e in course.exercises
    ]


def graded_notebooks(students: list[Student], course: dict[str, CourseNotebook]) -> list[str]:
    """Os notebooks que algum aluno entregou, na ordem do curso (a tarefa desta correção)."""
    handed = {stem for s in students for stem in s.submissions}
    return [stem for stem in course if stem in handed]


def grade_class(
    students: list[Student],
    course: dict[str, CourseNotebook],
    limits: Limits,
    workers: int = 1,
    progress: bool = True,
    notebooks: list[str] | None = None,
) -> list[Row]:
    """Corrige os alunos nos ``notebooks`` dados (padrão: :func:`graded_notebooks`).

    As linhas saem em ordem de aluno, notebook (a do curso) e exercício; "não entregue"
    só aparece para os notebooks corrigidos.
    """
    from tqdm import tqdm

    selected = graded_notebooks(students, course) if notebooks is None else list(notebooks)
    tasks = [
        (s, course[stem], s.submissions[stem])
        for s in students
        for stem in course
        if stem in selected and stem in s.submissions
    ]
    results: dict[tuple[str, str], list[Row]] = {}
    bar = tqdm(total=len(tasks), desc="corrigindo", unit="notebook", disable=not progress)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {
            pool.submit(grade_submission, notebook, submission, limits): (s.name, notebook.stem)
            for s, notebook, submission in tasks
        }
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update(1)
    bar.close()
    rows: list[Row] = []
    for student in students:
        for stem, notebook in course.items():
            if stem not in selected:
                continue
            if (student.name, stem) in results:
                rows.extend(results[(student.name, stem)])
            else:
                rows.extend(missing_rows(student.name, notebook, student.notes))
    return rows
