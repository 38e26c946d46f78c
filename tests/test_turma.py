"""Kit do instrutor (tpt.turma): cópias, exportação para o nbgrader e correção de uma turma.

A correção roda de verdade (um processo por notebook): uma turma sintética com todos os
casos hostis do notebook leve (tests/turma_entregas.py) e um aluno com as soluções de
referência de TODOS os notebooks, corrigidos juntos com ``-j 2``. Cada caso tem a
situação esperada, e os certos continuam certos ao lado dos hostis.
"""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tpt.turma.__main__ import main as turma_main
from tpt.turma.__main__ import parse_memory
from tpt.turma.copies import student_notebook
from tpt.turma.course import PENDING_MARK, is_check_cell, load_course
from tpt.turma.grading import SITUATIONS
from tpt.turma.nbgrader import nbgrader_notebook
from tpt.turma.report import COLUMNS

ROOT = Path(__file__).resolve().parent.parent
COURSE = load_course()
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
import course_repo  # noqa: E402
import turma_entregas as fixtures  # noqa: E402


def _solution_lines(exercise) -> list[str]:
    """Linhas do corpo da solução (sem a assinatura) que revelariam a resposta: as longas."""
    import ast

    start = ast.parse(exercise.solution).body[0].body[0].lineno - 1
    return [ln.strip() for ln in exercise.solution.splitlines()[start:] if len(ln.strip()) > 25]


def _reveals(exercise, text: str) -> bool:
    """O texto traz a solução? (metade ou mais das linhas longas do corpo dela)."""
    lines = _solution_lines(exercise)
    return bool(lines) and 2 * sum(ln in text for ln in lines) >= len(lines)


@pytest.mark.parametrize("stem", list(COURSE))
def test_student_copy_has_no_solution(stem, tmp_path):
    course = COURSE[stem]
    nb = student_notebook(course)
    path = tmp_path / course.path.name
    nbformat.write(nb, path)
    text = path.read_text(encoding="utf-8")
    assert "Solução" not in text  # o `grep -r "Solução" turma/` da issue
    assert "escondida logo abaixo" not in text
    sources = "\n".join(c.source for c in nb.cells)
    for exercise in course.exercises:
        assert not _reveals(exercise, sources), exercise.number
        assert exercise.solution.strip() not in sources
    checks = [c for c in nb.cells if is_check_cell(c)]
    assert len(checks) == len(course.exercises)
    for cell in checks:
        printed = "".join(o.get("text", "") for o in cell.outputs)
        assert PENDING_MARK in printed and "✅" not in printed
    assert nb.metadata["tpt"] == {"notebook": stem}
    # Só saem as células de solução; as saídas da aula ficam.
    assert len(nb.cells) == len(course.nb.cells) - len(course.exercises)
    outputs = sum(len(c.get("outputs", [])) for c in nb.cells)
    assert outputs == sum(len(c.get("outputs", [])) for c in course.nb.cells)
    # Selo do Colab e célula de instalação iguais aos do curso (make fork reescreve o curso).
    assert course_repo.notebook_pins(path) == course_repo.notebook_pins(course.path)


def test_copies_command_writes_every_notebook(tmp_path):
    assert turma_main(["copias", str(tmp_path / "turma")]) == 0
    names = sorted(p.name for p in (tmp_path / "turma").glob("*.ipynb"))
    assert names == sorted(c.path.name for c in COURSE.values())


def test_student_copy_passes_nbval(tmp_path):
    """A cópia do notebook leve roda inteira e confere com as saídas guardadas (nbval)."""
    course = COURSE[fixtures.LIGHT]
    path = tmp_path / course.path.name
    nbformat.write(student_notebook(course), path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(path),
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            str(ROOT / "tests" / "nbval_sanitize.cfg"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize("stem", list(COURSE))
def test_nbgrader_source_notebook(stem):
    course = COURSE[stem]
    nb = nbgrader_notebook(course)
    text = json.dumps(nb, ensure_ascii=False)
    assert "<summary>Solução" not in text
    solutions = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    grades = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(solutions) == len(grades) == len(course.exercises)
    for cell, exercise in zip(solutions, course.exercises, strict=True):
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
        assert cell.source.startswith(f"def {exercise.function_name}(")
        compile(cell.source, "solucao", "exec")
    for cell, exercise in zip(grades, course.exercises, strict=True):
        meta = cell.metadata["nbgrader"]
        assert meta["locked"] and meta["points"] == 1
        assert "assert solved_" in cell.source and not cell.outputs
        # O verificador vem do módulo dele, e o retrato é conferido antes: nada de `ex.`.
        assert "ex." not in cell.source.replace("tpt.exercises.", "")
        assert f"import {exercise.check_name} as _conferencia" in cell.source
        assert cell.source.index("_integridade.verify(globals())") < cell.source.index(
            "_conferencia("
        )
    imports = nb.cells[course.imports_index]
    assert imports.metadata["nbgrader"]["locked"]
    assert imports.source.rstrip().endswith("_integridade.take(ex)")


def test_parse_memory():
    assert parse_memory("4G") == 4 * 2**30
    assert parse_memory("512M") == 512 * 2**20
    assert parse_memory("2,5") == int(2.5 * 2**30)
    with pytest.raises(Exception, match="--memoria"):
        parse_memory("muita")


def test_shipped_submissions_are_current(tmp_path):
    """tests/entregas/ é o que tests/turma_entregas.py gera hoje (regenere se mudar)."""
    fixtures.write_class(tmp_path, fixtures.light_class(COURSE))
    shipped = ROOT / "tests" / "entregas"
    made = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    have = {
        p.relative_to(shipped): p.read_bytes()
        for p in shipped.rglob("*")
        # .ruff.toml (o ruff não confere as entregas) e caches ficam na raiz, fora dos alunos
        if p.is_file() and not p.relative_to(shipped).parts[0].startswith(".")
    }
    assert made == have, "regenere: .venv/bin/python tests/turma_entregas.py tests/entregas"


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Corrige a turma sintética inteira uma vez (todos os casos, -j 2)."""
    entregas = tmp_path_factory.mktemp("entregas")
    students = fixtures.light_class(COURSE)
    students["referencia"] = {
        f"entrega_{k}.ipynb": fixtures.minimal(c, fixtures.reference(c))
        for k, c in enumerate(COURSE.values())
    }
    fixtures.write_class(entregas, students)
    before = _digest(entregas)
    out = tmp_path_factory.mktemp("saida") / "correcao"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpt.turma",
            "corrigir",
            str(entregas),
            "-o",
            str(out),
            "-j",
            "2",
            "--tempo",
            "60",
            "--memoria",
            "3G",
            "--semente",
            "7",
            "--sem-barra",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "notas.csv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    return {
        "rows": rows,
        "out": out,
        "before": before,
        "after": _digest(entregas),
        "stdout": done.stdout,
    }


def test_csv_columns_and_values(graded):
    rows = graded["rows"]
    assert list(rows[0]) == list(COLUMNS)
    assert {r["situacao"] for r in rows} <= set(SITUATIONS)
    for r in rows:
        assert r["pontos"] == ("1" if r["situacao"] == "certo" else "0") and r["maximo"] == "1"
    students = {r["aluno"] for r in rows}
    expected = len(students) * sum(len(c.exercises) for c in COURSE.values())
    assert len(rows) == expected  # cada aluno × notebook × exercício, entregue ou não


@pytest.mark.parametrize("student", list(fixtures.EXPECTED))
def test_each_case_gets_its_situation(graded, student):
    rows = [r for r in graded["rows"] if r["aluno"] == student and r["notebook"] == fixtures.LIGHT]
    got = {int(r["exercicio"]): r["situacao"] for r in rows}
    want = {
        e.number: fixtures.expected(student, e.number) for e in COURSE[fixtures.LIGHT].exercises
    }
    assert got == want, [r["mensagem"] for r in rows]


def test_reference_solutions_are_right_in_every_notebook(graded):
    rows = [r for r in graded["rows"] if r["aluno"] == "referencia"]
    wrong = [
        (r["notebook"], r["exercicio"], r["situacao"], r["mensagem"])
        for r in rows
        if r["situacao"] != "certo"
    ]
    assert not wrong


def test_outputs_and_submissions(graded):
    out = graded["out"]
    assert graded["before"] == graded["after"]  # nada mexeu nas entregas
    meta = json.loads((out / "correcao.json").read_text(encoding="utf-8"))
    assert meta["semente"] == 7
    with open(out / "resumo.csv", encoding="utf-8", newline="") as file:
        summary = {r["aluno"]: r for r in csv.DictReader(file)}
    total = sum(len(c.exercises) for c in COURSE.values())
    assert summary["referencia"]["total"] == str(total) == summary["referencia"]["maximo"]
    assert summary["certo"][fixtures.LIGHT] == str(len(COURSE[fixtures.LIGHT].exercises))
    page = (out / "errado.html").read_text(encoding="utf-8")
    assert '<html lang="pt-BR">' in page and '<td class="marca">errado</td>' in page
    assert "Semente dos casos sorteados: 7." in page
    assert "<eos>" not in page  # as mensagens saem escapadas (&lt;eos&gt;)
    assert (out / "vazio.html").exists()


def test_output_inside_submissions_is_refused(tmp_path, capsys):
    (tmp_path / "aluno").mkdir()
    assert turma_main(["corrigir", str(tmp_path), "-o", str(tmp_path / "c")]) == 2
    assert "dentro das entregas" in capsys.readouterr().err


def test_child_has_a_cpu_limit_that_outlives_the_parent():
    """Se o processo da correção morrer, o limite de CPU ainda derruba um filho em laço."""
    from tpt.turma.sandbox import _limit

    probe = "import resource; print(*resource.getrlimit(resource.RLIMIT_CPU))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=_limit(4 * 2**30, 30),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [int(x) for x in out] == [40, 45]


def _grade(entregas: Path, out: Path, *extra: str) -> int:
    """`python -m tpt.turma corrigir`, no mesmo processo (a correção em si é a do teste)."""
    return turma_main(
        ["corrigir", str(entregas), "-o", str(out), "--tempo", "120", "--memoria", "3G",
         "--sem-barra", *extra]
    )


@pytest.fixture
def shared_grading(graded, monkeypatch):
    """A correção de cada notebook vem da turma já corrigida (o aluno `referencia`).

    Os testes da seleção de notebooks (o que é corrigido, o que vira "não entregue", o que
    sai no CSV e nas páginas) não precisam corrigir de novo as mesmas soluções de referência:
    a correção de verdade (processo filho, limites, conferências) é a da fixture `graded`.
    Devolve os notebooks que a correção pediu, na ordem.
    """
    from tpt.turma import grading

    asked: list[str] = []

    def from_shared_class(course, submission, limits):
        asked.append(course.stem)
        rows = [r for r in graded["rows"]
                if r["aluno"] == "referencia" and r["notebook"] == course.stem]
        return [
            grading.Row(submission.student, course.stem, int(r["exercicio"]), int(r["pontos"]),
                        int(r["maximo"]), r["situacao"], r["mensagem"])
            for r in rows
        ]

    monkeypatch.setattr(grading, "grade_submission", from_shared_class)
    return asked


def test_one_assignment_at_a_time(tmp_path, shared_grading, capsys):
    """Só entregas do 06_mascaras: a correção fala só dele (CSV, resumo e páginas)."""
    stem = "06_mascaras"
    masks = COURSE[stem]
    entregas = tmp_path / "entregas"
    fixtures.write_class(
        entregas,
        {
            "ana": {"semana6.ipynb": fixtures.minimal(masks, fixtures.reference(masks))},
            "bia": {".gitkeep": b""},
        },
    )
    out = tmp_path / "correcao"
    assert _grade(entregas, out) == 0
    assert shared_grading == [stem]  # só a entrega da ana, só o 06
    with open(out / "notas.csv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    n = len(masks.exercises)
    assert {r["notebook"] for r in rows} == {stem} and len(rows) == 2 * n
    assert {r["situacao"] for r in rows if r["aluno"] == "ana"} == {"certo"}
    assert {r["situacao"] for r in rows if r["aluno"] == "bia"} == {"não entregue"}
    with open(out / "resumo.csv", encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        summary = {r["aluno"]: r for r in reader}
        assert reader.fieldnames == ["aluno", "total", "maximo", stem]
    assert summary["ana"]["total"] == summary["ana"]["maximo"] == str(n)
    assert summary["bia"]["maximo"] == str(n)
    page = (out / "ana.html").read_text(encoding="utf-8")
    assert f"<strong>{n}</strong> de {n} exercícios certos" in page
    assert page.count("<h2>") == 1 and f"<h2>{stem}:" in page
    assert "Semente dos casos sorteados: 2026." in page  # um identificador, sem ponto de milhar
    # Nenhum emoji (símbolos de U+2300 a U+2BFF e acima de U+1F000): marcas em texto.
    assert not [ch for ch in page if 0x2300 <= ord(ch) <= 0x2BFF or ord(ch) >= 0x1F000]
    assert "<h2>01_tokens" not in (out / "bia.html").read_text(encoding="utf-8")

    # --notebook: exatamente os nomeados (aqui um que ninguém entregou) e nome inválido.
    other = tmp_path / "outra"
    assert _grade(entregas, other, "--notebook", "01_tokens") == 0
    assert shared_grading == [stem]  # ninguém entregou o 01: nada a corrigir
    with open(other / "notas.csv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    assert {r["notebook"] for r in rows} == {"01_tokens"}
    assert {r["situacao"] for r in rows} == {"não entregue"}
    assert len(rows) == 2 * len(COURSE["01_tokens"].exercises)
    assert "06_mascaras: entregue, mas fora desta correção" in (other / "ana.html").read_text(
        encoding="utf-8"
    )
    assert _grade(entregas, tmp_path / "nada", "--notebook", "06_mascara") == 2
    assert "'06_mascara' não é um notebook do curso" in capsys.readouterr().err
