"""A célula de instalação do Colab funciona: simulamos o Colab com um módulo falso.

A primeira célula de código de cada notebook só instala o `tpt` quando
`google.colab` está em sys.modules. Aqui criamos esse módulo falso, trocamos o
endereço do GitHub por um repositório git local (sem rede) e executamos a célula
num IPython de verdade, instalando numa pasta temporária (PIP_TARGET).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tpt

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _setup_cell(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    return "".join(first["source"])


def test_every_notebook_starts_with_the_same_colab_cell():
    assert NOTEBOOKS
    cells = {_setup_cell(p) for p in NOTEBOOKS}
    assert len(cells) == 1, "as células de instalação divergem entre notebooks"
    cell = cells.pop()
    assert 'if "google.colab" in sys.modules:' in cell
    assert f'REPOSITORY = "{tpt.version.REPOSITORY}"' in cell


def _local_git_repo(dest: Path) -> str:
    dest.mkdir(parents=True)
    for rel in ["pyproject.toml", "README.md", "tpt"]:
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / rel)
    git = ["git", "-c", "user.name=teste", "-c", "user.email=teste@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "curso"], cwd=dest, check=True)
    return dest.as_uri()


@pytest.mark.skipif(shutil.which("git") is None, reason="precisa do git")
def test_colab_cell_installs_tpt_from_the_repository(tmp_path):
    cell = _setup_cell(NOTEBOOKS[0])
    url = _local_git_repo(tmp_path / "repo")
    cell = cell.replace(tpt.version.REPOSITORY, url)
    site = tmp_path / "site"
    driver = textwrap.dedent(
        f"""
        import sys, types
        sys.modules["google.colab"] = types.ModuleType("google.colab")  # Colab simulado
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        result = shell.run_cell({cell!r})
        result.raise_error()
        """
    )
    env = dict(os.environ, PIP_TARGET=str(site), PIP_NO_DEPS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    proc = subprocess.run(
        [sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = site / "tpt"
    assert (installed / "version.py").exists(), proc.stdout + proc.stderr
    # Os textos do corpus são dados do pacote: precisam ir junto na instalação.
    assert list((installed / "data" / "textos").glob("*.txt"))
    check = subprocess.run(
        [sys.executable, "-c", "import tpt.version as v; print(v.__version__)"],
        env=dict(os.environ, PYTHONPATH=str(site)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == tpt.__version__


def test_outside_colab_the_cell_installs_nothing(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell

    sys.modules.pop("google.colab", None)
    shell = InteractiveShell.instance()
    result = shell.run_cell(_setup_cell(NOTEBOOKS[0]))
    assert result.success
    assert "REPOSITORY" not in shell.user_ns
