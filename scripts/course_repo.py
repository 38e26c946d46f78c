"""Endereço do repositório do curso: mostrar, conferir e trocar (para forks).

    python scripts/course_repo.py show
    python scripts/course_repo.py check
    python scripts/course_repo.py set https://github.com/voce/seu-fork   # = make fork REPO=...

O endereço é escrito em UM lugar, `REPOSITORY` em tpt/version.py. O comando `set`
troca esse valor e reescreve tudo o que deriva dele: os selos "Abrir no Colab" e a
célula de instalação de cada notebook, o README e o pyproject.toml.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = ROOT / "tpt" / "version.py"
URL_RE = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def current() -> str:
    text = VERSION_FILE.read_text(encoding="utf-8")
    match = re.search(r'^REPOSITORY = "([^"]+)"', text, re.M)
    if match is None:
        raise SystemExit("REPOSITORY não encontrado em tpt/version.py")
    return match.group(1)


def derived_files() -> list[Path]:
    """Arquivos que contêm o endereço (além de tpt/version.py)."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    return [ROOT / "README.md", ROOT / "pyproject.toml", *notebooks]


def _forms(url: str) -> list[str]:
    """O endereço completo e a forma usada pelo Colab (github/dono/repo)."""
    path = url.split("github.com/", 1)[1]
    return [url, f"colab.research.google.com/github/{path}/"]


def set_repository(new: str) -> list[Path]:
    new = new.rstrip("/").removesuffix(".git")
    if not URL_RE.match(new):
        raise SystemExit(
            f"Endereço inválido: {new!r}. Esperava algo como https://github.com/dono/repositorio"
        )
    old = current()
    changed = []
    for path in [VERSION_FILE, *derived_files()]:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        updated = text
        for old_form, new_form in zip(_forms(old), _forms(new), strict=True):
            updated = updated.replace(old_form, new_form)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            changed.append(path)
    return changed


def check() -> list[str]:
    """Lista os problemas: notebooks sem selo/instalação apontando para o endereço atual."""
    url = current()
    (colab,) = _forms(url)[1:]
    problems = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text(encoding="utf-8")
        if f"{colab}blob/main/notebooks/{path.name}" not in text:
            problems.append(f"{path.name}: selo do Colab não aponta para {url}")
        if f'REPOSITORY = \\"{url}\\"' not in text:
            problems.append(f"{path.name}: célula de instalação não usa {url}")
    return problems


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        print(current())
        return 0
    if argv[:1] == ["check"]:
        problems = check()
        print("\n".join(problems) or "ok")
        return 1 if problems else 0
    if argv[:1] == ["set"] and len(argv) == 2:
        for path in set_repository(argv[1]):
            print("reescrito:", path.relative_to(ROOT))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
