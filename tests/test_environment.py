"""O ambiente do curso: arquivos de dependências coerentes entre si e com a CI."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import tpt

# tomllib é da biblioteca padrão a partir do Python 3.11.
tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent


def _requirements() -> dict[str, str]:
    reqs = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", line).groups()
            reqs[name.lower()] = spec
    return reqs


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_requirements_are_open_floors():
    # Pisos abertos: o Colab e os alunos reaproveitam o torch que já têm.
    for name, spec in _requirements().items():
        assert spec.startswith(">="), f"{name} deveria ter um piso aberto (>=), tem {spec!r}"


def test_pyproject_dependencies_agree_with_requirements():
    reqs = _requirements()
    for dep in _pyproject()["project"]["dependencies"]:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", dep).groups()
        assert reqs.get(name.lower()) == spec, f"{name}: pyproject {spec!r} != requirements"


def test_environment_yml_uses_requirements_and_python_version():
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert "- -r requirements.txt" in text
    assert "- -e ." in text
    python = re.search(r"-\s*python=(\d+)\.(\d+)", text)
    assert python, "environment.yml deve fixar a versão do Python"
    floor = re.search(r">=\s*(\d+)\.(\d+)", _pyproject()["project"]["requires-python"])
    assert tuple(map(int, python.groups())) >= tuple(map(int, floor.groups()))


def test_ci_constraints_pin_cpu_torch_and_cover_requirements():
    pins = {}
    for line in (ROOT / "constraints-ci.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    assert pins["torch"].endswith("+cpu")
    missing = [n for n in _requirements() if n.replace("_", "-") not in pins]
    assert not missing, f"constraints-ci.txt não fixa: {missing}"


def test_versions_agree():
    assert _pyproject()["project"]["version"] == tpt.__version__
    assert _pyproject()["project"]["urls"]["Repository"] == tpt.version.REPOSITORY


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [
        ln
        for ln in ci.splitlines()
        if ln.strip() and not ln.startswith(("#", "set ", "cd ", "export "))
    ]
    # Primeiro o comando do README; depois, só o site (make test-site, com a instalação do
    # Chromium do Debian se faltar), outros núcleos de CPU (make test-kernels) e a
    # compatibilidade (make test-compat ...).
    assert commands[0] == "make test"
    chromium = [c for c in commands[1:] if "chromium" in c or "sudo" in c or c.strip() == "fi"]
    assert [c.strip() for c in chromium] == [
        "if ! command -v chromium >/dev/null; then",
        'sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"',
        "$sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/dev/null",
        "fi",
    ], chromium
    rest = [c for c in commands[1:] if c not in chromium]
    assert all(
        c.startswith(("make test-site", "make test-kernels", "make test-compat")) for c in rest
    ), commands
    assert "make test" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "set -euo pipefail" in ci, ".ci/run deve falhar quando um comando falha"


def test_python_is_supported():
    assert sys.version_info >= (3, 10)
