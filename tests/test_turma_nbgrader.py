"""A volta completa com o nbgrader de verdade (``make test-nbgrader``).

Precisa do nbgrader 0.9.6 num ambiente à parte (``.cache/nbgrader-venv``, criado pelo
alvo do Makefile): a variável ``TPT_NBGRADER_BIN`` aponta a pasta ``bin/`` dele. Sem ela,
o teste é pulado (``make test`` não instala o nbgrader).

Em uma pasta de curso nova: ``python -m tpt.turma nbgrader`` grava a tarefa do
06_mascaras; ``nbgrader generate_assignment`` faz a cópia dos alunos (sem as soluções);
``nbgrader autograde`` corrige uma entrega certa, uma errada e três que adulteram a
correção com respostas erradas (um ``ex`` falso que aprova tudo, um auxiliar de
``tpt.exercises`` trocado, uma função do ``torch`` trocada); ``nbgrader export`` dá as
notas: só a certa pontua. O núcleo que executa os notebooks é o Python do .venv do curso
(onde o tpt está).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tpt.turma.course import load_course

NBGRADER_BIN = os.environ.get("TPT_NBGRADER_BIN", "")
TASK = "06_mascaras"

# Código que o aluno põe no começo da primeira célula de resposta (as respostas, erradas).
TAMPERING = {
    "ex_falso": (
        "class _Tudo:\n    __getattr__ = lambda s, n: (lambda *a, **k: True)\n\n\nex = _Tudo()\n"
    ),
    "troca_tpt": "import tpt.exercises.masks as _m\n\n_m._expect_mask = lambda *a, **k: None\n",
    "troca_torch": "import torch\n\ntorch.equal = lambda a, b: True\n",
}

pytestmark = pytest.mark.skipif(
    not (NBGRADER_BIN and (Path(NBGRADER_BIN) / "nbgrader").exists()),
    reason="nbgrader não instalado (make test-nbgrader)",
)


def _nbgrader(course_dir: Path, *args: str) -> str:
    env = dict(os.environ)
    env["PATH"] = f"{NBGRADER_BIN}{os.pathsep}{env.get('PATH', '')}"  # o alembic do nbgrader
    env["JUPYTER_PATH"] = str(course_dir / "jupyter")
    env["JUPYTER_CONFIG_DIR"] = str(course_dir / "jupyter-config")
    env["JUPYTER_DATA_DIR"] = str(course_dir / "jupyter-data")
    env["JUPYTER_RUNTIME_DIR"] = str(course_dir / "jupyter-runtime")
    done = subprocess.run(
        [str(Path(NBGRADER_BIN) / "nbgrader"), *args],
        cwd=course_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(f"$ nbgrader {' '.join(args)}\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_nbgrader_round_trip(tmp_path):
    course = load_course()[TASK]
    course_dir = tmp_path / "curso"
    subprocess.run(
        [sys.executable, "-m", "tpt.turma", "nbgrader", str(course_dir), "--notebook", TASK],
        check=True,
    )
    kernel = course_dir / "jupyter" / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (tpt)",
                "language": "python",
            }
        )
    )

    _nbgrader(course_dir, "generate_assignment", TASK, "--create")
    release = course_dir / "release" / TASK / f"{TASK}.ipynb"
    text = release.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "<summary>Solução" not in text
    released = nbformat.read(release, as_version=4)
    for exercise in course.exercises:
        body = [line.strip() for line in exercise.solution.splitlines()[1:] if line.strip()]
        assert not any(line in text for line in body if len(line) > 25), exercise.number
    assert text.count("Escreva sua solução aqui") >= len(course.exercises)

    first = min(e.number for e in course.exercises)
    students = {"certo": (True, ""), "errado": (False, "")}
    students |= {name: (False, code) for name, code in TAMPERING.items()}
    for student, (fill, prefix) in students.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in nb.cells:
            grade = cell.metadata.get("nbgrader", {})
            if grade.get("solution"):
                number = int(grade["grade_id"].split("_")[1])
                exercise = next(e for e in course.exercises if e.number == number)
                cell.source = (
                    exercise.solution
                    if fill
                    else cell.source.replace(
                        'raise NotImplementedError("Escreva sua solução aqui")', "return None"
                    )
                )
                if number == first:
                    cell.source = prefix + cell.source
            if grade.get("grade"):  # o aluno "edita" a conferência: o nbgrader a restaura
                cell.source = "solved = True"
        folder = course_dir / "submitted" / student / TASK
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{TASK}.ipynb")

    _nbgrader(course_dir, "autograde", TASK, "--create")
    _nbgrader(course_dir, "export")
    with open(course_dir / "grades.csv", encoding="utf-8") as file:
        scores = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(file)}
    print("notas do nbgrader:", scores)
    assert scores == {
        "certo": float(len(course.exercises)),
        "errado": 0.0,
        **{name: 0.0 for name in TAMPERING},
    }
    # A nota zero das adulterações vem do retrato, com a mensagem em português.
    for name in TAMPERING:
        graded = course_dir / "autograded" / name / TASK / f"{TASK}.ipynb"
        outputs = json.dumps(nbformat.read(graded, as_version=4).cells, ensure_ascii=False)
        assert "conferência alterada" in outputs, name
