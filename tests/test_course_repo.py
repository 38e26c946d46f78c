"""O endereço do repositório vive em um lugar só, e um fork o troca com um comando."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import course_repo  # noqa: E402
from course_repo import BADGE_RE, GUARD_RE  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_point_to_the_configured_repository():
    assert NOTEBOOKS, "nenhum notebook encontrado"
    assert course_repo.check() == []


def test_fork_rewrites_every_copy_of_the_address(tmp_path):
    for rel in ["tpt/version.py", "README.md", "pyproject.toml", "scripts/course_repo.py",
                "scripts/site_check.py", "scripts/release.py"]:
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


def _copy_course(tmp_path: Path) -> Path:
    for rel in ["tpt/version.py", "README.md", "pyproject.toml", "scripts/course_repo.py",
                "scripts/site_check.py", "scripts/release.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "notebooks").mkdir()
    for nb in NOTEBOOKS:
        shutil.copy(nb, tmp_path / "notebooks" / nb.name)
    return tmp_path / "scripts" / "course_repo.py"


def _set_version(root: Path, version: str) -> None:
    path = root / "tpt" / "version.py"
    text = path.read_text(encoding="utf-8")
    text = re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{version}"', text, flags=re.M)
    path.write_text(text, encoding="utf-8")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_pin_writes_the_version_tag_and_guard_into_every_notebook(tmp_path):
    # Cópias temporárias: os notebooks de verdade não são tocados.
    script = _copy_course(tmp_path)
    _set_version(tmp_path, "7.3.1")
    copies = sorted((tmp_path / "notebooks").glob("*.ipynb"))
    before = {p.name: _cells(p) for p in copies}
    run = subprocess.run([sys.executable, script, "pin"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "v7.3.1" in run.stdout
    for path in copies:
        text = path.read_text(encoding="utf-8")
        assert "git+{REPOSITORY}@v7.3.1" in text
        assert 'tpt.check_version(\\"7.3\\")' in text
        assert course_repo.pin_problems(path, "7.3.1") == []
        # Só mudam a célula de instalação e o argumento do check_version.
        old, new = before[path.name], _cells(path)
        assert len(old) == len(new)
        for a, b in zip(old, new, strict=True):
            if a.get("id") == "colab-setup":
                assert "".join(b["source"]) == course_repo.setup_cell(
                    ver="7.3.1", name=path.name
                )
            elif a["cell_type"] == "markdown":
                # O selo do Colab passa a abrir a tag nova; nada mais muda no texto.
                expected = BADGE_RE.sub(
                    lambda m: course_repo.colab_url(m.group(3), ver="7.3.1"),
                    "".join(a["source"]),
                )
                assert "".join(b["source"]) == expected
            else:
                expected = GUARD_RE.sub('tpt.check_version("7.3")', "".join(a["source"]))
                assert "".join(b["source"]) == expected
                assert {k: v for k, v in a.items() if k != "source"} == {
                    k: v for k, v in b.items() if k != "source"
                }
    check = subprocess.run([sys.executable, script, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    # Rodar de novo não muda nenhum byte.
    snapshot = {p.name: p.read_bytes() for p in copies}
    again = subprocess.run([sys.executable, script, "pin"], capture_output=True, text=True)
    assert "reescrito" not in again.stdout
    assert snapshot == {p.name: p.read_bytes() for p in copies}


def test_check_reports_a_notebook_pinned_to_another_version(tmp_path):
    script = _copy_course(tmp_path)
    subprocess.run([sys.executable, script, "pin"], check=True, capture_output=True)
    _set_version(tmp_path, "9.0.0")  # o tpt mudou e os notebooks não foram fixados de novo
    check = subprocess.run([sys.executable, script, "check"], capture_output=True, text=True)
    assert check.returncode == 1
    assert "v9.0.0" in check.stdout and "course_repo.py pin" in check.stdout


def test_fork_keeps_the_pin(tmp_path):
    script = _copy_course(tmp_path)
    _set_version(tmp_path, "0.4.2")
    new = "https://github.com/professora-exemplo/curso-turma-c"
    subprocess.run([sys.executable, script, "set", new], check=True, capture_output=True)
    for path in (tmp_path / "notebooks").glob("*.ipynb"):
        cell = "".join(next(c for c in _cells(path) if c.get("id") == "colab-setup")["source"])
        assert cell == course_repo.setup_cell(new, "0.4.2", path.name)
        assert 'tpt.check_version(\\"0.4\\")' in path.read_text(encoding="utf-8")


def test_setup_cell_tag_and_guard_follow_the_version():
    assert course_repo.release_tag("0.2.0") == "v0.2.0"
    assert course_repo.guard_version("0.2.0") == "0.2"
    assert course_repo.guard_version("1.10.3+local") == "1.10"
    cell = course_repo.setup_cell("https://github.com/a/b", "0.2.0")
    assert 'REPOSITORY = "https://github.com/a/b"' in cell
    assert '%pip install -q "tpt @ git+{REPOSITORY}@v0.2.0"' in cell
    hf_cell = course_repo.setup_cell(
        "https://github.com/a/b", "0.2.0", "11_do_tpt_ao_hugging_face.ipynb"
    )
    assert '%pip install -q "tpt[hf] @ git+{REPOSITORY}@v0.2.0"' in hf_cell
    assert course_repo.PIN_RE.search(hf_cell).group(1) == "v0.2.0"


def test_every_badge_opens_the_notebook_at_the_pinned_tag():
    # O selo abre no Colab o notebook da MESMA tag que a célula de instalação instala.
    for path in NOTEBOOKS:
        badges = course_repo.badge_refs(path)
        assert badges, f"{path.name} sem selo do Colab"
        assert set(badges) == {course_repo.colab_url(path.name)}, (
            f"{path.name}: rode `python scripts/course_repo.py pin`"
        )
    assert course_repo.colab_url("01_tokens.ipynb", "https://github.com/a/b", "0.2.0") == (
        "https://colab.research.google.com/github/a/b/blob/v0.2.0/notebooks/01_tokens.ipynb"
    )


def test_check_reports_a_badge_that_opens_main(tmp_path):
    script = _copy_course(tmp_path)
    path = sorted((tmp_path / "notebooks").glob("*.ipynb"))[0]
    text = path.read_text(encoding="utf-8")
    tag = course_repo.release_tag(course_repo.version())
    path.write_text(text.replace(f"/blob/{tag}/notebooks/", "/blob/main/notebooks/"),
                    encoding="utf-8")
    check = subprocess.run([sys.executable, script, "check"], capture_output=True, text=True)
    assert check.returncode == 1
    assert "blob/main" in check.stdout and path.name in check.stdout


def _git_course(tmp_path: Path) -> Path:
    script = _copy_course(tmp_path).with_name("release.py")
    git = ["git", "-c", "user.name=teste", "-c", "user.email=teste@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "curso"], cwd=tmp_path, check=True)
    return script


def _tags(root: Path) -> list[str]:
    return subprocess.run(["git", "tag"], cwd=root, capture_output=True, text=True).stdout.split()


@pytest.mark.skipif(shutil.which("git") is None, reason="precisa do git")
def test_release_checks_everything_then_tags(tmp_path):
    script = _git_course(tmp_path)
    tag = course_repo.release_tag(course_repo.version())
    env = dict(os.environ, GIT_COMMITTER_NAME="teste", GIT_COMMITTER_EMAIL="teste@example.com")
    run = subprocess.run([sys.executable, script, "--check"], capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stdout
    assert _tags(tmp_path) == []  # --check não cria nada
    run = subprocess.run([sys.executable, script], capture_output=True, text=True,
                         env=env)
    assert run.returncode == 0, run.stdout
    assert _tags(tmp_path) == [tag]
    again = subprocess.run([sys.executable, script], capture_output=True, text=True,
                           env=env)
    assert again.returncode == 0 and "já existe" in again.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="precisa do git")
def test_release_refuses_when_versions_disagree(tmp_path):
    script = _git_course(tmp_path)
    _set_version(tmp_path, "0.9.0")  # o tpt subiu; pyproject e notebooks não
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", "v"],
                   cwd=tmp_path, check=True)
    run = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert run.returncode == 1
    assert "pyproject.toml" in run.stdout and "v0.9.0" in run.stdout
    assert "NÃO foi criada" in run.stdout
    assert _tags(tmp_path) == []


def test_scripts_import_each_other_in_one_direction_only():
    # release → site_check → course_repo: nenhum círculo entre os scripts.
    import ast

    local = {p.stem for p in (ROOT / "scripts").glob("*.py")}
    graph = {}
    for path in (ROOT / "scripts").glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        graph[path.stem] = (names & local) - {path.stem}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in graph[start])

    circles = sorted(name for name in graph if reaches(name, name, set()))
    assert not circles, f"scripts que importam a si mesmos por um círculo: {circles}"
