"""O endereço do repositório vive em um lugar só, e um fork o troca com um comando."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import course_repo  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_point_to_the_configured_repository():
    assert NOTEBOOKS, "nenhum notebook encontrado"
    assert course_repo.check() == []


def test_fork_rewrites_every_copy_of_the_address(tmp_path):
    for rel in ["tpt/version.py", "README.md", "pyproject.toml", "scripts/course_repo.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "notebooks").mkdir()
    for nb in NOTEBOOKS:
        shutil.copy(nb, tmp_path / "notebooks" / nb.name)
    old = course_repo.current()
    new = "https://github.com/professora-exemplo/curso-turma-b"
    script = tmp_path / "scripts" / "course_repo.py"
    subprocess.run([sys.executable, script, "set", new], check=True, capture_output=True)
    for path in [
        tmp_path / "tpt/version.py",
        tmp_path / "README.md",
        *(tmp_path / "notebooks").glob("*.ipynb"),
    ]:
        text = path.read_text(encoding="utf-8")
        assert old not in text, f"{path.name} ainda cita {old}"
    assert f'REPOSITORY = "{new}"' in (tmp_path / "tpt/version.py").read_text(encoding="utf-8")
    check = subprocess.run([sys.executable, script, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_fork_rejects_an_invalid_address(tmp_path):
    with pytest.raises(SystemExit, match="Endereço inválido"):
        course_repo.set_repository("github.com/sem-esquema")
