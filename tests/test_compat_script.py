"""make test-compat: as combinações, a tabela de resultados e os pisos que ela prova.

Estes testes não criam ambientes (isso é o `make test-compat`): conferem a receita de
cada combinação, a tabela gravada e que os pisos do requirements.txt são os testados.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import test_compat  # noqa: E402


def test_the_floor_combination_pins_every_requirement_at_its_floor():
    floors = test_compat.requirement_floors()
    assert "torch" in floors and "numpy" in floors
    piso = test_compat.combos()["piso"]
    assert piso.pins == {name: f"=={v}" for name, v in floors.items()}
    requires = re.search(
        r'requires-python\s*=\s*">=\s*(\d+\.\d+)"',
        (ROOT / "pyproject.toml").read_text(encoding="utf-8"),
    ).group(1)
    assert piso.python == requires


def test_colab_combination_matches_colab():
    colab = test_compat.combos()["colab"]
    assert colab.python == "3.13"
    assert colab.pins["torch"] == "==2.11.0"


def test_requirement_floors_rejects_anything_but_open_floors(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# comentário\ntorch>=2.4  # piso\nnumpy>=1.24\n", encoding="utf-8")
    assert test_compat.requirement_floors(req) == {"torch": "2.4", "numpy": "1.24"}
    req.write_text("torch==2.4\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="pacote>=versão"):
        test_compat.requirement_floors(req)


def _row(name: str, torch: str, ok: bool = True) -> str:
    combo = test_compat.Combo(name, "3.13", "descrição")
    info = {
        "python": "3.13.0", "torch": torch, "build": "CUDA 12.8", "numpy": "2.3.1",
        "matplotlib": "3.10.1", "tqdm": "4.67.1", "pip": "24.2",
    }
    result = {"ok": ok, "passed": 10, "failed": 0 if ok else 2, "skipped": 1, "seconds": 75.4}
    return test_compat.table_row(combo, info, result)


def test_rows_are_merged_by_combination_and_copied_into_the_readme(tmp_path, monkeypatch):
    results = tmp_path / "compat.md"
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Curso\n\nantes\n{test_compat.BEGIN}\nvelha\n{test_compat.END}\ndepois\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(test_compat, "RESULTS", results)
    monkeypatch.setattr(test_compat, "README", readme)
    order = ["colab", "piso", "recente"]
    test_compat.write_results({"piso": _row("piso", "2.4.0")}, order, "hoje")
    rows = test_compat.read_rows(results)
    rows["colab"] = _row("colab", "2.11.0", ok=False)
    table = test_compat.write_results(rows, order, "hoje")
    assert [line.split(" ")[1] for line in table.splitlines()[2:]] == ["colab", "piso"]
    assert "❌ 10 aprovados, 2 reprovados, 1 pulado" in table
    assert "1 min 15 s" in table
    text = readme.read_text(encoding="utf-8")
    assert "velha" not in text and table in text
    assert text.startswith("# Curso\n\nantes\n") and text.endswith("depois\n")


def test_readme_table_is_the_recorded_run_and_proves_the_floors():
    if os.environ.get("TPT_COMPAT_RUN"):
        pytest.skip("dentro de make test-compat: a tabela está sendo refeita por esta execução")
    if not test_compat.RESULTS.exists():
        pytest.skip("benchmarks/results/compat.md ainda não foi gerado (make test-compat)")
    recorded = test_compat.RESULTS.read_text(encoding="utf-8")
    table = test_compat.HEADER + "".join(test_compat.read_rows().values())
    assert table in recorded
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{test_compat.BEGIN}\n" in readme, "o README perdeu os marcadores da tabela"
    section = readme.split(test_compat.BEGIN)[1].split(test_compat.END)[0]
    assert section.strip() == table.strip(), "README e compat.md divergem: make test-compat"
    # Os pisos declarados são os que a linha "piso" testou (e ela passou).
    rows = test_compat.read_rows()
    assert "piso" in rows and "colab" in rows
    cells = [c.strip() for c in rows["piso"].strip().strip("|").split("|")]
    header = [c.strip() for c in test_compat.HEADER.splitlines()[0].strip("|").split("|")]
    piso = dict(zip(header, cells, strict=True))
    floors = test_compat.requirement_floors()
    for name in ["torch", "numpy", "matplotlib", "tqdm"]:
        tested = tuple(int(x) for x in piso[name].split(".")[:2])
        declared = tuple(int(x) for x in floors[name].split(".")[:2])
        assert tested == declared, f"{name}: piso declarado {floors[name]}, testado {piso[name]}"
    assert piso["resultado"].startswith("✅"), piso["resultado"]
    assert piso["Python"].startswith(test_compat.python_floor() + ".")
