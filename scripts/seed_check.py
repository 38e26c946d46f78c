"""Roda notebooks com outras sementes e lista os vereditos que mudaram.

    python scripts/seed_check.py                                  # todos, sementes 1 e 2
    python scripts/seed_check.py 05_codificacao_posicional.ipynb --seeds 1 2 3
    python scripts/seed_check.py 10_transformers_modernos.ipynb -p ablation_seeds 5

(`make seeds` e `make seeds NB=... SEEDS="1 2 3"` chamam este script.)

Um **veredito** é uma linha impressa que contém `True` ou `False` (a saída de uma conferência:
"acerto acima de 80%: True"). Cada notebook promete que os vereditos e a prosa valem em qualquer
semente do parâmetro `seed`. O script executa o notebook com o papermill (`-p seed N`, sem tocar
no arquivo do curso), lê os vereditos de cada célula, na ordem, e os compara com os da execução
guardada: a mesma célula (pelo id) e a mesma posição dentro dela. Os números da linha podem mudar
com a semente; o que conta é a sequência de `True`/`False`. Uma linha a mais, a menos ou um
veredito trocado aparecem na lista, com a célula (índice no JSON, como nas revisões) e as duas
versões da linha.

As execuções ficam em `.cache/sementes/` (abra-as para ler a prosa ao lado das saídas novas) e o
resumo em `.cache/sementes/resumo.md`. O script termina com código 1 se algum veredito mudou ou
algum notebook falhou. Leva o tempo de executar cada notebook uma vez por semente (a tabela
mostra o tempo de CPU e o de relógio de cada execução); não roda na CI.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import papermill

from tpt import fmt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_tools import NOTEBOOKS, ROOT, children_cpu, course_notebooks, read  # noqa: E402
from run_notebooks import _value, kernel_config  # noqa: E402

VERDICT = re.compile(r"\b(True|False)\b")
OUTPUT_DIR = ROOT / ".cache" / "sementes"


def output_text(cell) -> str:
    """O texto que uma célula de código mostra: fluxos (stdout/stderr) e `text/plain`."""
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        data = out.get("data", {})
        if "text/plain" in data and not any(k.startswith("image/") for k in data):
            parts.append("".join(data["text/plain"]))
    return "\n".join(parts)


def verdict_lines(nb) -> dict[str, tuple[int, list[str]]]:
    """Por id de célula: (índice da célula, linhas com True/False, na ordem)."""
    result = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "injected-parameters" in cell.metadata.get("tags", []):
            continue
        lines = [ln.strip() for ln in output_text(cell).splitlines() if VERDICT.search(ln)]
        if lines:
            result[cell.get("id")] = (index, lines)
    return result


@dataclass
class Change:
    cell: int
    stored: str | None
    new: str | None


@dataclass
class Run:
    notebook: str
    seed: int
    verdicts: int = 0
    changes: list[Change] = field(default_factory=list)
    error: str | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0


def compare(stored, new) -> tuple[int, list[Change]]:
    """Quantos vereditos a execução guardada tem, e os que mudaram na nova."""
    old, fresh = verdict_lines(stored), verdict_lines(new)
    # Índices do arquivo do curso (o notebook novo tem a célula injetada a mais).
    index_of = {c.get("id"): i for i, c in enumerate(stored.cells)}
    changes = []
    for cell_id in sorted(set(old) | set(fresh), key=lambda k: index_of.get(k, 10**6)):
        a = old.get(cell_id, (index_of.get(cell_id, -1), []))[1]
        b = fresh.get(cell_id, (-1, []))[1]
        for k in range(max(len(a), len(b))):
            line_a = a[k] if k < len(a) else None
            line_b = b[k] if k < len(b) else None
            values_a = VERDICT.findall(line_a) if line_a else None
            values_b = VERDICT.findall(line_b) if line_b else None
            if values_a != values_b:
                changes.append(Change(index_of.get(cell_id, -1), line_a, line_b))
    return sum(len(lines) for _, lines in old.values()), changes


def run_one(path: Path, seed: int, params: dict) -> Run:
    run = Run(path.name, seed)
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUTPUT_DIR / f"{path.stem}_semente{seed}.ipynb"
    cpu0, wall0 = children_cpu(), time.perf_counter()
    try:
        papermill.execute_notebook(
            str(path),
            str(out),
            parameters={**params, "seed": seed},
            kernel_name="python3",
            cwd=str(NOTEBOOKS),
            progress_bar=False,
            config=kernel_config(),
        )
    except Exception as exc:  # o papermill grava o notebook com o erro
        run.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
    run.cpu_s, run.wall_s = children_cpu() - cpu0, time.perf_counter() - wall0
    if run.error is None:
        run.verdicts, run.changes = compare(read(path), read(out))
    return run


def report(runs: list[Run]) -> str:
    lines = ["| notebook | semente | vereditos | mudaram | CPU (s) | relógio (s) |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        changed = "falhou" if r.error else str(len(r.changes))
        lines.append(f"| {r.notebook} | {r.seed} | {r.verdicts} | {changed} | "
                     f"{fmt(r.cpu_s, 1)} | {fmt(r.wall_s, 1)} |")
    details = []
    for r in runs:
        if r.error:
            details.append(f"- {r.notebook}, semente {r.seed}: **falhou** ({r.error}); veja "
                           f"{OUTPUT_DIR / (Path(r.notebook).stem + f'_semente{r.seed}.ipynb')}")
        for c in r.changes:
            details.append(f"- {r.notebook}, semente {r.seed}, célula {c.cell}:\n"
                           f"    guardado: {c.stored!r}\n    semente {r.seed}: {c.new!r}")
    total = sum(len(r.changes) for r in runs)
    failed = sum(r.error is not None for r in runs)
    summary = f"\n{total} veredito(s) mudaram; {failed} execução(ões) falharam."
    return "\n".join(lines + ([""] + details if details else []) + [summary])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="nomes em notebooks/ (padrão: todos)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="padrão: 1 2")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NOME", "VALOR"),
                        help="outro parâmetro para todas as execuções")
    args = parser.parse_args(argv)
    paths = [NOTEBOOKS / Path(n).name for n in args.notebooks] or course_notebooks()
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        print(f"Notebook não encontrado: {', '.join(missing)}", file=sys.stderr)
        return 2
    params = {name: _value(value) for name, value in args.p}
    if "seed" in params:
        print("Use --seeds para escolher as sementes, não -p seed.", file=sys.stderr)
        return 2
    runs = []
    for path in paths:
        for seed in args.seeds:
            run = run_one(path, seed, params)
            status = "falhou" if run.error else f"{len(run.changes)} de {run.verdicts} mudaram"
            print(f"{path.name}, semente {seed}: {status} "
                  f"({fmt(run.cpu_s, 1)} s de CPU, {fmt(run.wall_s, 1)} s de relógio)", flush=True)
            runs.append(run)
    text = report(runs)
    print("\n" + text)
    (OUTPUT_DIR / "resumo.md").write_text(text + "\n", encoding="utf-8")
    return 1 if any(r.error or r.changes for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
