"""Publicar uma versão do curso: conferir tudo e criar a tag (make release).

    python scripts/release.py [_site] [--check]

Confere que tpt/version.py e pyproject.toml concordam, que cada notebook instala e fixa a
mesma tag (`course_repo.check`) e, se `_site` for um site construído (make site), que os
links "Abrir no Colab" de cada página abrem o notebook nessa tag (`site_check`). Sem
`--check`, cria a tag anotada v<versão> no HEAD.

Fica à parte de `course_repo.py` e de `site_check.py` para que a dependência tenha uma
direção só: release → site_check → course_repo.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_repo  # noqa: E402
import site_check  # noqa: E402


def release_problems(site: Path | None = None) -> list[str]:
    """Tudo o que precisa concordar antes de criar a tag da versão.

    `tpt.__version__` (tpt/version.py) e o `version` do pyproject.toml; em cada notebook,
    a tag da célula de instalação, o `check_version` e o selo do Colab; e, se `site`
    for a pasta de um site construído (make site), os links "Abrir no Colab" de cada
    página.
    """
    ver = course_repo.version()
    problems = []
    if course_repo.pyproject_version() != ver:
        problems.append(
            f"pyproject.toml diz version = {course_repo.pyproject_version()!r}, mas "
            f"tpt/version.py diz {ver!r}: suba os dois juntos"
        )
    problems += course_repo.check()
    if site is not None:
        problems += [f"site: {p}" for p in site_check.colab_problems(site)]
    return problems


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=course_repo.ROOT, capture_output=True, text=True)


def release(site: Path | None, create: bool) -> int:
    """Confere a versão e, com `create`, cria a tag anotada v<versão> no HEAD."""
    ver = course_repo.version()
    tag = course_repo.release_tag(ver)
    problems = release_problems(site)
    if site is None:
        print("aviso: site não conferido (construa com `make site`; `make release` já faz isso)")
    if problems:
        print("\n".join(problems))
        print(f"\nA versão {tag} NÃO foi criada: corrija os problemas acima.")
        return 1
    print(f"ok: tpt {ver}, pyproject, notebooks (instalação, check_version, selos) "
          f"{'e site ' if site is not None else ''}apontam para {tag}")
    if not create:
        return 0
    if _git("status", "--porcelain", "--untracked-files=no").stdout.strip():
        print("Há mudanças não registradas (git status): faça o commit antes de criar a tag.")
        return 1
    head = _git("rev-parse", "HEAD").stdout.strip()
    existing = _git("rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}")
    if existing.returncode == 0:
        if existing.stdout.strip() == head:
            print(f"A tag {tag} já existe e aponta para o HEAD: nada a fazer.")
            return 0
        print(f"A tag {tag} já existe em outro commit ({existing.stdout.strip()[:10]}): "
              f"suba a versão em tpt/version.py e pyproject.toml.")
        return 1
    made = _git("tag", "-a", tag, "-m", f"tpt {ver}")
    if made.returncode != 0:
        print(made.stderr)
        return 1
    print(f"Tag {tag} criada. Publique: git push origin main {tag}")
    return 0


def main(argv: list[str]) -> int:
    create = "--check" not in argv
    args = [a for a in argv if a != "--check"]
    if len(args) > 1:
        print(__doc__)
        return 2
    site = Path(args[0]) if args else None
    if site is not None and not (site / "index.html").exists():
        print(f"{site}/index.html não existe: rode `make site` antes")
        return 1
    return release(site, create)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
