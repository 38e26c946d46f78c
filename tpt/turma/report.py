"""Os arquivos da correção: notas.csv, resumo.csv, uma página HTML por aluno e correcao.json.

Nos CSV os números ficam como a máquina lê (``1``, ``0``; inteiros, sem separador), para
planilhas e scripts; na página do aluno, em pt-BR (``12 de 32``, ``37,5%``).
"""

from __future__ import annotations

import csv
import html
import json
import re
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from tpt.numfmt import fmt
from tpt.turma.grading import Row

COLUMNS = ("aluno", "notebook", "exercicio", "pontos", "maximo", "situacao", "mensagem")
# A marca de cada situação na página: texto em negrito numa faixa colorida (classe CSS),
# sem emoji: um Chromium sem fonte de emoji mostraria caixas vazias no lugar.
BAD = ("errado", "erro", "tempo esgotado", "memória esgotada", "conferência alterada")
# As marcas que as conferências imprimem no começo da linha (a situação já diz o mesmo).
_CHECK_MARK = re.compile(r"^[✅❌⏳]\s*")


def write_grades(rows: list[Row], path: Path) -> None:
    """notas.csv: uma linha por aluno × notebook × exercício, colunas de ``COLUMNS``."""
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def _totals(rows: list[Row]) -> dict[str, dict[str, list[int]]]:
    totals: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in rows:
        cell = totals[row.aluno][row.notebook]
        cell[0] += row.pontos
        cell[1] += row.maximo
    return totals


def write_summary(rows: list[Row], notebooks: list[str], path: Path) -> None:
    """resumo.csv: ``aluno,total,maximo`` e os pontos de cada notebook (uma coluna cada)."""
    totals = _totals(rows)
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["aluno", "total", "maximo", *notebooks])
        for student, per in totals.items():
            total = sum(v[0] for v in per.values())
            maximum = sum(v[1] for v in per.values())
            writer.writerow([student, total, maximum, *(per[nb][0] for nb in notebooks)])


PAGE = """<!DOCTYPE html>
<html lang="pt-BR">
<head>
<meta charset="utf-8">
<title>Correção: {student}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }}
table {{ border-collapse: collapse; width: 100%; margin-bottom: 1.5rem; }}
th, td {{ border: 1px solid #ccc; padding: .4rem .6rem; text-align: left; vertical-align: top; }}
td.msg {{ font-family: ui-monospace, monospace; font-size: .9em; white-space: pre-wrap; }}
tr.certo {{ background: #e8f5e9; }} tr.ruim {{ background: #ffebee; }}
tr.pendente {{ background: #fff8e1; }}
td.marca {{ font-weight: bold; white-space: nowrap; }}
</style>
</head>
<body>
<h1>Correção: {student}</h1>
<p><strong>{points}</strong> de {maximum} exercícios certos ({percent}) em {graded}.</p>
<p>Semente dos casos sorteados: {seed}. Cada notebook foi executado de novo, num processo
próprio, e conferido pelas conferências do curso; as saídas guardadas no arquivo entregue
não contam.</p>
{notes}
{sections}
</body>
</html>
"""


def student_page(student: str, rows: list[Row], notes: list[str], seed: int) -> str:
    """A página de retorno de um aluno (HTML, em português, tudo escapado)."""
    esc = html.escape
    by_notebook: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_notebook[row.notebook].append(row)
    sections = []
    for notebook, items in by_notebook.items():
        got = sum(r.pontos for r in items)
        total = sum(r.maximo for r in items)
        lines = [
            f"<h2>{esc(notebook)}: {fmt(got)} de {fmt(total)}</h2>",
            "<table><tr><th>Exercício</th><th>Situação</th><th>Pontos</th><th>Mensagem</th></tr>",
        ]
        for r in items:
            kind = "certo" if r.situacao == "certo" else "ruim" if r.situacao in BAD else "pendente"
            lines.append(
                f'<tr class="{kind}"><td>{fmt(r.exercicio)}</td>'
                f'<td class="marca">{esc(r.situacao)}</td>'
                f"<td>{fmt(r.pontos)} de {fmt(r.maximo)}</td>"
                f'<td class="msg">{esc(_CHECK_MARK.sub("", r.mensagem))}</td></tr>'
            )
        lines.append("</table>")
        sections.append("\n".join(lines))
    points = sum(r.pontos for r in rows)
    maximum = sum(r.maximo for r in rows)
    note_html = ""
    if notes:
        note_html = "<h2>Arquivos</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    return PAGE.format(
        student=esc(student),
        points=fmt(points),
        maximum=fmt(maximum),
        percent=fmt(points / maximum if maximum else 0.0, percent=True),
        graded=esc(", ".join(by_notebook)),
        # A semente é um identificador, não uma quantidade: sai como foi escrita (2026).
        seed=str(seed),
        notes=note_html,
        sections="\n".join(sections),
    )


def page_name(student: str) -> str:
    """O arquivo HTML de um aluno: o nome da pasta, sem barras nem pontos iniciais."""
    safe = student.replace("/", "_").replace("\\", "_").lstrip(".") or "aluno"
    return f"{safe}.html"


def write_all(
    out: Path, rows: list[Row], notebooks: list[str], notes: dict[str, list[str]], meta: dict
) -> list[Path]:
    """Grava tudo em ``out`` e devolve os caminhos."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_grades(rows, out / "notas.csv")
    write_summary(rows, notebooks, out / "resumo.csv")
    paths = [out / "notas.csv", out / "resumo.csv"]
    by_student: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_student[row.aluno].append(row)
    for student, items in by_student.items():
        path = out / page_name(student)
        path.write_text(
            student_page(student, items, notes.get(student, []), meta["semente"]), encoding="utf-8"
        )
        paths.append(path)
    (out / "correcao.json").write_text(
        json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    paths.append(out / "correcao.json")
    return paths
