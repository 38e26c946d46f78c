"""As entregas: uma subpasta por aluno, notebooks com qualquer nome, reconhecidos pelo conteúdo."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpt.turma.course import CourseNotebook, read_json_notebook, recognise


@dataclass
class Submission:
    """Um notebook entregue e reconhecido: de qual aluno, qual notebook do curso, qual arquivo."""

    student: str
    stem: str
    path: Path
    nb: Any


@dataclass
class Student:
    """Um aluno: os notebooks reconhecidos e as observações sobre os outros arquivos."""

    name: str
    submissions: dict[str, Submission] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_notebook(path: Path) -> tuple[Any | None, str]:
    """O notebook de um arquivo, ou (None, por que não é um notebook)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return None, f"não deu para ler como texto UTF-8 ({type(err).__name__})"
    try:
        nb = read_json_notebook(text)
        for cell in nb.cells:
            if cell.cell_type not in ("code", "markdown", "raw") or not isinstance(
                cell.source, str
            ):
                raise ValueError("célula sem tipo ou sem texto")
    except Exception as err:  # noqa: BLE001 — JSON inválido, formato desconhecido...
        return None, f"não é um notebook válido ({type(err).__name__}: {str(err)[:120]})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "não é um notebook válido (sem lista de células)"
    return nb, ""


def collect(folder: Path, course: dict[str, CourseNotebook]) -> list[Student]:
    """Os alunos de ``folder`` (uma subpasta cada), em ordem alfabética."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"a pasta de entregas {folder} não existe.")
    students = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = Student(sub.name)
        files = sorted(
            p
            for p in sub.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(sub).parts)
        )
        if not files:
            student.notes.append("a pasta do aluno está vazia")
        for path in files:
            relative = path.relative_to(sub).as_posix()
            nb, why = read_notebook(path)
            if nb is None:
                student.notes.append(f"{relative}: ignorado, {why}")
                continue
            stem = recognise(nb, course)
            if stem is None:
                student.notes.append(f"{relative}: ignorado, não é um notebook deste curso")
                continue
            previous = student.submissions.get(stem)
            if previous is not None:
                newer = path.stat().st_mtime > previous.path.stat().st_mtime
                kept, dropped = (path, previous.path) if newer else (previous.path, path)
                kept_name = kept.relative_to(sub).as_posix()
                dropped_name = dropped.relative_to(sub).as_posix()
                student.notes.append(
                    f"{stem}: dois arquivos; vale o mais recente, {kept_name} "
                    f"(ignorado: {dropped_name})"
                )
                if not newer:
                    continue
            student.submissions[stem] = Submission(sub.name, stem, path, nb)
        students.append(student)
    return students
