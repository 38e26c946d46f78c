"""Benchmark da correção de uma turma (parte do ``make bench``).

Gera 40 entregas sintéticas do notebook 01 e 40 do 09 (uma subpasta por aluno, só o
notebook do lote; as respostas variam: referência, stub, ``return None``) e corrige cada
lote com ``python -m tpt.turma corrigir -j 2``, medindo o relógio. Meta: no máximo 10
minutos por lote de 40 nesta máquina de 2 núcleos. Imprime os tempos, o tempo por
notebook e a razão contra a meta, e grava ``benchmarks/results/turma-<máquina>.md``.

    python benchmarks/turma.py                 # 40 + 40, -j 2
    python benchmarks/turma.py --alunos 4 --notebooks 01_tokens   # um ensaio curto
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import turma_entregas as fixtures  # noqa: E402

from tpt.numfmt import fmt  # noqa: E402
from tpt.turma.course import load_course  # noqa: E402

GOAL_S = 600.0
RESULTS = ROOT / "benchmarks" / "results"


def make_batch(dest: Path, stem: str, students: int) -> None:
    """``students`` alunos: um terço certo, um terço stub, um terço errado."""
    course = load_course()[stem]
    kinds = {
        0: fixtures.reference(course),
        1: {},
        2: {e.number: fixtures.returns_none(course, e.number) for e in course.exercises},
    }
    batch = {
        f"aluno{k:02d}": {"entrega.ipynb": fixtures.minimal(course, kinds[k % 3])}
        for k in range(students)
    }
    fixtures.write_class(dest, batch)


def grade(folder: Path, out: Path, jobs: int) -> tuple[float, Counter]:
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tpt.turma",
            "corrigir",
            str(folder),
            "-o",
            str(out),
            "-j",
            str(jobs),
            "--sem-barra",
        ],
        check=True,
    )
    seconds = time.monotonic() - start
    import csv

    with open(out / "notas.csv", encoding="utf-8") as file:
        situations = Counter(
            r["situacao"] for r in csv.DictReader(file) if r["situacao"] != "não entregue"
        )
    return seconds, situations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--alunos", type=int, default=40)
    parser.add_argument("--notebooks", nargs="+", default=["01_tokens", "09_geracao"])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    lines = []
    for stem in args.notebooks:
        with tempfile.TemporaryDirectory() as folder:
            entregas = Path(folder) / "entregas"
            make_batch(entregas, stem, args.alunos)
            seconds, situations = grade(entregas, Path(folder) / "saida", args.jobs)
        per = seconds / args.alunos
        counts = ", ".join(f"{n} {s}" for s, n in sorted(situations.items()))
        line = (
            f"| {stem} | {fmt(args.alunos)} | {fmt(seconds, 1)} s | {fmt(per, 1)} s | "
            f"{fmt(seconds / GOAL_S, 2)} | {counts} |"
        )
        print(line, flush=True)
        lines.append(line)
    load_after = os.getloadavg()[0]
    host = socket.gethostname().split(".")[0] or platform.node()
    table = "\n".join(
        [
            f"# Correção de uma turma ({datetime.now():%Y-%m-%d %H:%M}, {host})",
            "",
            f"`python benchmarks/turma.py`: `python -m tpt.turma corrigir -j {args.jobs}`, "
            f"um processo por notebook; {os.cpu_count()} núcleos; carga da máquina antes "
            f"{fmt(load_before, 1)}, depois {fmt(load_after, 1)}. "
            "Meta: ≤ 600 s por lote (razão ≤ 1).",
            "",
            "| Notebook | Entregas | Tempo total | Por entrega | Tempo / meta | Exercícios |",
            "|---|---|---|---|---|---|",
            *lines,
            "",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"turma-{host}.md"
    path.write_text(table, encoding="utf-8")
    print(f"\n{table}\ngravado em {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
