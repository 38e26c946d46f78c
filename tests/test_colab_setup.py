"""A célula de instalação do Colab funciona: simulamos o Colab com um módulo falso.

A primeira célula de código de cada notebook só instala o `tpt` quando
`google.colab` está em sys.modules, e o instala na tag da versão para a qual o notebook
foi escrito (v + tpt.__version__), não no topo do ramo main. Aqui criamos esse módulo
falso, trocamos o endereço do GitHub por um repositório git local (sem rede) com a tag,
e executamos a célula num IPython de verdade. Como no Colab, o `%pip` instala no
ambiente do próprio interpretador: um ambiente virtual descartável que usa o MESMO pip
do ambiente que roda os testes (o pip do Colab, de um aluno ou de `make test-compat`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tpt

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(ROOT / "scripts"))
import course_repo  # noqa: E402

PIN_HINT = "rode `python scripts/course_repo.py pin` (veja 'Publicar uma versão' no README)"


def _setup_cell(path: Path) -> str:
    return course_repo.notebook_pins(path)["setup"]


def test_every_notebook_starts_with_the_same_colab_cell():
    assert NOTEBOOKS
    # A mesma célula em todos, a menos do extra do pacote (o 11 instala tpt[hf]).
    cells = {re.sub(r"tpt\[[a-z,]+\] @", "tpt @", _setup_cell(p)) for p in NOTEBOOKS}
    assert len(cells) == 1, f"as células de instalação divergem entre notebooks: {PIN_HINT}"
    cell = cells.pop()
    assert 'if "google.colab" in sys.modules:' in cell
    assert f'REPOSITORY = "{tpt.version.REPOSITORY}"' in cell
    assert cell == course_repo.setup_cell(), f"célula diferente da padrão: {PIN_HINT}"
    for path in NOTEBOOKS:
        assert _setup_cell(path) == course_repo.setup_cell(name=path.name), (
            f"{path.name}: célula diferente da padrão: {PIN_HINT}"
        )


def test_notebook_11_installs_the_hf_extra():
    """O 11 usa o transformers >= 5.0: a célula instala tpt[hf], que o declara."""
    cell = _setup_cell(ROOT / "notebooks" / "11_do_tpt_ao_hugging_face.ipynb")
    assert '%pip install -q "tpt[hf] @ git+{REPOSITORY}@' in cell
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^hf = \["transformers>=5', pyproject, flags=re.M)
    assert course_repo.notebook_pins(
        ROOT / "notebooks" / "11_do_tpt_ao_hugging_face.ipynb"
    )["tag"] == course_repo.release_tag(tpt.__version__)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_pin_version_guard_and_tpt_version_agree(path):
    pins = course_repo.notebook_pins(path)
    version = tpt.__version__
    assert pins["tag"] == f"v{version}", (
        f"{path.name} instala o tpt em {pins['tag']!r}, mas o tpt é {version}: {PIN_HINT}"
    )
    major_minor = ".".join(version.split(".")[:2])
    assert pins["guards"] == [major_minor], (
        f"{path.name} chama check_version com {pins['guards']}, esperava [{major_minor!r}]: "
        f"{PIN_HINT}"
    )
    assert tpt.check_version(pins["guards"][0]) == ""


def _local_git_repo(dest: Path, tag: str) -> str:
    """Um clone mínimo do curso com a tag `tag`, e um commit DEPOIS dela no main.

    O commit posterior muda a versão para 99.0.0: se a célula instalasse o topo do main
    em vez da tag, o teste veria 99.0.0.
    """
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
    subprocess.run([*git, "tag", tag], cwd=dest, check=True)
    version_py = dest / "tpt" / "version.py"
    text = re.sub(r'^__version__ = "[^"]+"', '__version__ = "99.0.0"', version_py.read_text(),
                  flags=re.M)
    version_py.write_text(text)
    subprocess.run([*git, "commit", "-q", "-am", "depois da tag"], cwd=dest, check=True)
    # file://localhost/...: o pip anterior ao 23.3 recusa 'tpt @ git+file:///...'
    # ("Invalid requirement"), porque o endereço não tem máquina; o git aceita os dois.
    return "file://localhost" + dest.resolve().as_posix()


def _scratch_environment(dest: Path) -> tuple[Path, Path]:
    """Ambiente virtual vazio com uma cópia do pip deste ambiente: (python, site-packages).

    Instalar nele, e não com PIP_TARGET, evita o erro do pip 24.x "Cannot set --home and
    --prefix together" (PIP_TARGET vaza para o ambiente isolado de build).
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    site = Path(site)
    pip_dir = Path(importlib.util.find_spec("pip").submodule_search_locations[0])
    shutil.copytree(pip_dir, site / "pip", ignore=shutil.ignore_patterns("__pycache__"))
    dist = importlib.metadata.distribution("pip")
    dist_info = Path(dist.locate_file(f"pip-{dist.version}.dist-info"))
    if dist_info.is_dir():
        shutil.copytree(dist_info, site / dist_info.name)
    return python, site


@pytest.mark.skipif(shutil.which("git") is None, reason="precisa do git")
@pytest.mark.parametrize("name", [None, "11_do_tpt_ao_hugging_face.ipynb"], ids=["tpt", "tpt[hf]"])
def test_colab_cell_installs_the_pinned_tpt_from_the_repository(tmp_path, name):
    # A célula padrão (os testes acima conferem que cada notebook tem exatamente ela) e a do
    # 11, com o extra hf (com PIP_NO_DEPS o pip aceita o extra e não baixa o transformers).
    cell = course_repo.setup_cell(name=name)
    tag = course_repo.release_tag(tpt.__version__)
    assert f"@{tag}" in cell
    url = _local_git_repo(tmp_path / "repo", tag)
    cell = cell.replace(tpt.version.REPOSITORY, url)
    python, site = _scratch_environment(tmp_path / "colab")
    driver = textwrap.dedent(
        f"""
        import sys, types
        sys.modules["google.colab"] = types.ModuleType("google.colab")  # Colab simulado
        sys.executable = {str(python)!r}  # o %pip instala no ambiente descartável
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        result = shell.run_cell({cell!r})
        result.raise_error()
        print("codigo de saida do pip:", shell.user_ns.get("_exit_code"))
        """
    )
    # Sem PYTHONPATH (make test-compat o usa para achar o tpt desta pasta): o pip veria o
    # tpt.egg-info da pasta do curso, diria "já instalado" e não instalaria nada.
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("PIP_TARGET", "PIP_PREFIX"))
    }
    # Mas o driver precisa do IPython: mantém as outras pastas do PYTHONPATH (onde ele
    # pode estar, ex.: pacotes instalados com --target), tirando só a pasta do curso.
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(PIP_NO_DEPS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    proc = subprocess.run(
        [sys.executable, "-c", driver],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    if "No matching distribution found for setuptools" in log:
        # O pip monta o pacote num ambiente isolado e baixa o setuptools do índice.
        pytest.skip("sem acesso ao índice de pacotes: o pip não baixa o setuptools")
    assert proc.returncode == 0, log
    assert "codigo de saida do pip: 0" in proc.stdout, log
    installed = site / "tpt"
    assert (installed / "version.py").exists(), log
    # Os textos do corpus são dados do pacote: precisam ir junto na instalação.
    assert list((installed / "data" / "textos").glob("*.txt"))
    # O notebook importa o tpt instalado (e é a versão da tag, não a do topo do main).
    check = subprocess.run(
        [sys.executable, "-c", "import tpt; print(tpt.__version__); print(tpt.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(site)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    version, location = check.stdout.split()
    assert version == tpt.__version__
    assert Path(location).resolve().is_relative_to(site.resolve())


def test_outside_colab_the_cell_installs_nothing(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell

    sys.modules.pop("google.colab", None)
    shell = InteractiveShell.instance()
    result = shell.run_cell(_setup_cell(NOTEBOOKS[0]))
    assert result.success
    assert "REPOSITORY" not in shell.user_ns
