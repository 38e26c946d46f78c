"""Teste de fumaça dos benchmarks e do script de resultados (tamanhos minúsculos).

Nada aqui confere tempos (eles dependem da máquina): só que todo o código roda e que
a tabela sai com a estrutura certa.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, relative: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses precisam achar o módulo pelo nome
    spec.loader.exec_module(module)
    return module


bench = _load("tpt_bench_run", "benchmarks/run.py")
results = _load("tpt_resultados", "scripts/resultados.py")

HAS_HF = importlib.util.find_spec("transformers") is not None
EXPECTED_KEYS = ["a1", "a2", "b", "c", "c2", "c3", "c4", *(["c5"] if HAS_HF else []),
                 "d1", "d2", "e1", "e2"]


@pytest.fixture(scope="module")
def tiny_rows():
    return bench.run_benchmarks(
        bench.Sizes.tiny(), device=torch.device("cpu"), repeats=1, warmup=0, log=lambda _: None
    )


def test_every_row_is_produced_with_a_finite_ratio(tiny_rows):
    assert [r.key for r in tiny_rows] == EXPECTED_KEYS
    for row in tiny_rows:
        assert math.isfinite(row.ratio) and row.ratio > 0, row
        assert row.ratio_cpu is None or (math.isfinite(row.ratio_cpu) and row.ratio_cpu > 0)
        assert row.description and row.tpt and row.reference and row.target
    # Só as linhas com meta têm situação (atingida ou não); as outras são informativas.
    with_target = {r.key for r in tiny_rows if r.ok is not None}
    assert with_target == {"a1", "b", "c", "c2", "c3", "c4", "e1", "e2"}


@pytest.mark.parametrize("key", ["b", "e1", "e2"])
def test_gpt_rows_compare_models_of_equal_size(tiny_rows, key):
    row = next(r for r in tiny_rows if r.key == key)
    counts = [int(x.replace(".", "")) for x in row.note.split(";")[0].split() if x[0].isdigit()]
    assert len(counts) == 2 and counts[0] == counts[1] > 0


def test_generation_row_checks_same_tokens(tiny_rows):
    row = next(r for r in tiny_rows if r.key == "c")
    assert "tokens idênticos com e sem cache: sim" in row.note


def test_markdown_table_structure(tiny_rows):
    text = bench.render_markdown(tiny_rows, {"Máquina": "teste", "Threads do torch": "1"})
    table = [line for line in text.splitlines() if line.startswith("|")]
    header, separator, *body = table
    n_cells = header.count("|")
    assert "Razão (relógio)" in header and "Meta" in header
    assert set(separator.replace("|", "")) == {"-"}
    assert len(body) == len(EXPECTED_KEYS)
    assert all(line.count("|") == n_cells for line in body)
    assert [line.split("|")[1].strip() for line in body] == EXPECTED_KEYS


def test_main_writes_the_table(tmp_path, capsys):
    code = bench.main(
        ["--tiny", "--repeats", "1", "--warmup", "0", "--only", "a,d", "--out", str(tmp_path)]
    )
    assert code == 0
    files = list(tmp_path.glob("*.md"))
    assert len(files) == 1 and files[0].name.endswith("-cpu-1t.md")
    text = files[0].read_text(encoding="utf-8")
    assert "| a1 |" in text and "| d2 |" in text and "| b |" not in text
    assert not list(tmp_path.glob("*.tmp"))  # o arquivo temporário foi renomeado
    assert "Tabela gravada em" in capsys.readouterr().out


def test_cpu_peak_counts_a_known_allocation():
    n = 2**20  # 1 Mi floats = 4 MiB
    peak = bench.cpu_peak_bytes(lambda: torch.ones(n))
    assert peak >= 4 * n


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeats", "3"], "--repeats"),
        (["--only", "a,x"], "--only"),
        (["--threads", "0"], "--threads"),
    ],
)
def test_bad_options_are_rejected(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


def test_update_results_replaces_only_its_section(tmp_path):
    path = tmp_path / "resultados.md"
    results.update_results("numeros", "## Números\nprimeira\n", path)
    results.update_results("gpt", "## GPT\nbits\n", path)
    results.update_results("numeros", "## Números\nsegunda\n", path)
    text = path.read_text(encoding="utf-8")
    assert "segunda" in text and "primeira" not in text and "bits" in text
    assert text.count("<!-- numeros:inicio -->") == 1 and text.count("<!-- gpt:fim -->") == 1


def test_results_script_runs_both_experiments_tiny(capsys):
    code = results.main([
        "numeros", "--no-save", "--dim", "16", "--heads", "2", "--layers", "1",
        "--n-train", "200", "--batch-size", "8", "--max-steps", "2", "--warmup", "1",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "Acerto exato final:" in out and "| Segundos (relógio) |" in out
    code = results.main([
        "gpt", "--no-save", "--dim", "16", "--heads", "2", "--layers", "1", "--block", "16",
        "--batch-size", "2", "--max-steps", "2", "--warmup", "1", "--sample-chars", "5",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "bits/caractere" in out and "tokens/s" in out and out.count("```text") == 3
