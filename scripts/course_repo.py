"""Endereço do repositório do curso: mostrar, conferir e trocar (para forks).

    python scripts/course_repo.py show
    python scripts/course_repo.py check
    python scripts/course_repo.py pin            # fixa a instalação e os selos na versão do tpt
    python scripts/course_repo.py set https://github.com/voce/seu-fork   # = make fork REPO=...

O endereço é escrito em UM lugar, `REPOSITORY` em tpt/version.py. O comando `set`
troca esse valor e reescreve tudo o que deriva dele: os selos "Abrir no Colab" e a
célula de instalação de cada notebook, o README e o pyproject.toml.

A célula de instalação do Colab instala o `tpt` na tag da versão para a qual o notebook
foi escrito (`v` + `__version__` de tpt/version.py, por exemplo v0.2.0), não no topo do
ramo main; a checagem `tpt.check_version("0.2")` da célula de imports usa o mesmo
major.minor. O comando `pin` reescreve as duas coisas em todos os notebooks a partir de
tpt/version.py (e `set` também, para um fork). O selo "Abrir no Colab" de cada notebook
(e o link do site) abre o notebook nessa MESMA tag, não no main: o aluno vê o notebook
que a célula de instalação espera. Conferir tudo e criar a tag de uma versão é o
`scripts/release.py` (make release). Veja o README.
"""

from __future__ import annotations

import json
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


def version() -> str:
    """A versão do tpt declarada em tpt/version.py (sem importar o pacote)."""
    text = VERSION_FILE.read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if match is None:
        raise SystemExit("__version__ não encontrado em tpt/version.py")
    return match.group(1)


def release_tag(ver: str) -> str:
    """A tag git de uma versão: '0.2.0' -> 'v0.2.0'."""
    return f"v{ver}"


def guard_version(ver: str) -> str:
    """O argumento de `tpt.check_version` para uma versão: '0.2.0' -> '0.2'."""
    return ".".join(ver.split("+")[0].split(".")[:2])


# A primeira célula de código de todo notebook (id "colab-setup"). Escrita só aqui:
# `pin` e `set` a regravam em todos os notebooks.
SETUP_CELL = """\
# Configuração. No Google Colab, instala o pacote `tpt` do repositório do curso, na
# versão para a qual este notebook foi escrito (a tag no fim do endereço); no
# JupyterLab/VS Code local ele já vem do ambiente (`make lab`).
import sys

if "google.colab" in sys.modules:
    REPOSITORY = "{repository}"
    %pip install -q "{package} @ git+{{REPOSITORY}}@{tag}"\
"""
SETUP_CELL_ID = "colab-setup"
# Notebooks que precisam de um extra do pacote (pyproject.toml, [project.optional-dependencies]):
# o 11 e o 12 usam o transformers (o 12 também o peft), e o Colab pode ter uma versão
# anterior à 5.0 e não ter o peft.
EXTRAS = {"11_do_tpt_ao_hugging_face.ipynb": "hf", "12_ajuste_fino.ipynb": "hf"}
PIN_RE = re.compile(r'%pip install -q "tpt(?:\[[a-z,]+\])? @ git\+\{REPOSITORY\}@([^"]+)"')
REPOSITORY_RE = re.compile(r'REPOSITORY = "([^"]+)"')
GUARD_RE = re.compile(r'tpt\.check_version\("([^"]+)"\)')


def setup_cell(
    repository: str | None = None, ver: str | None = None, name: str | None = None
) -> str:
    """O texto da célula de instalação do Colab, fixada na tag da versão `ver`.

    `name` (o arquivo do notebook) escolhe o extra do pacote, se houver (`EXTRAS`):
    o notebook 11 instala `tpt[hf]`, que traz o transformers na versão certa.
    """
    repository = current() if repository is None else repository
    tag = release_tag(version() if ver is None else ver)
    extra = EXTRAS.get(name or "")
    package = f"tpt[{extra}]" if extra else "tpt"
    return SETUP_CELL.format(repository=repository, tag=tag, package=package)


def _read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _write_notebook(path: Path, nb: dict) -> None:
    # O mesmo formato do nbformat.write: reescrever sem mudanças não muda nenhum byte.
    path.write_text(
        json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


COLAB = "https://colab.research.google.com/github/"
# O selo "Abrir no Colab" de um notebook: .../blob/<ref>/notebooks/<nome>.ipynb
BADGE_RE = re.compile(
    r"https://colab\.research\.google\.com/github/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)"
    r"/blob/([^/\s)\"]+)/notebooks/([A-Za-z0-9_.-]+\.ipynb)"
)


def colab_url(name: str, repository: str | None = None, ver: str | None = None) -> str:
    """O endereço que abre o notebook `name` no Colab, na tag da versão `ver`.

    É o endereço do selo de cada notebook e do link "Abrir no Colab" de cada página do
    site: o mesmo notebook que a célula de instalação (fixada na mesma tag) espera.
    """
    repository = current() if repository is None else repository
    tag = release_tag(version() if ver is None else ver)
    path = repository.split("github.com/", 1)[1]
    return f"{COLAB}{path}/blob/{tag}/notebooks/{name}"


def badge_refs(path: Path) -> list[str]:
    """Os endereços do Colab que o notebook cita para si mesmo (normalmente, o selo)."""
    text = "".join(
        _source(c) for c in _read_notebook(path)["cells"] if c["cell_type"] == "markdown"
    )
    return [m.group(0) for m in BADGE_RE.finditer(text) if m.group(3) == path.name]


def _setup_cell_of(nb: dict) -> dict:
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    by_id = [c for c in code if c.get("id") == SETUP_CELL_ID]
    if by_id:
        return by_id[0]
    if not code:
        raise ValueError("notebook sem células de código")
    return code[0]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def notebook_pins(path: Path) -> dict[str, str | list[str] | None]:
    """O que um notebook declara: endereço e tag da instalação, e os check_version."""
    nb = _read_notebook(path)
    setup = _source(_setup_cell_of(nb))
    pin = PIN_RE.search(setup)
    repo = REPOSITORY_RE.search(setup)
    guards = [
        m.group(1)
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for m in GUARD_RE.finditer(_source(c))
    ]
    return {
        "setup": setup,
        "repository": repo.group(1) if repo else None,
        "tag": pin.group(1) if pin else None,
        "guards": guards,
    }


def pin_notebooks(paths: list[Path] | None = None, ver: str | None = None) -> list[Path]:
    """Fixa cada notebook na versão `ver` (padrão: a de tpt/version.py).

    Regrava a célula de instalação do Colab (endereço atual, tag v<versão>), o
    argumento de cada `tpt.check_version("...")` (major.minor) e o selo "Abrir no
    Colab" das células de texto (que passa a abrir a mesma tag). Devolve os alterados.
    """
    ver = version() if ver is None else ver
    guard = guard_version(ver)
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) if paths is None else paths
    changed = []
    for path in paths:
        nb = _read_notebook(path)
        before = json.dumps(nb, sort_keys=True)
        _setup_cell_of(nb)["source"] = setup_cell(ver=ver, name=path.name).splitlines(
            keepends=True
        )
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                src = _source(cell)
                new = GUARD_RE.sub(f'tpt.check_version("{guard}")', src)
                if new != src:
                    cell["source"] = new.splitlines(keepends=True)
            elif cell["cell_type"] == "markdown":
                src = _source(cell)
                new = BADGE_RE.sub(
                    lambda m, name=path.name: colab_url(name, ver=ver)
                    if m.group(3) == name else m.group(0),
                    src,
                )
                if new != src:
                    cell["source"] = new.splitlines(keepends=True)
        if json.dumps(nb, sort_keys=True) != before:
            _write_notebook(path, nb)
            changed.append(path)
    return changed


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
    # A célula de instalação com o novo endereço e a tag da versão atual.
    for path in pin_notebooks():
        if path not in changed:
            changed.append(path)
    return changed


def check() -> list[str]:
    """Lista os problemas: notebooks sem selo/instalação apontando para o endereço atual."""
    url = current()
    (colab,) = _forms(url)[1:]
    problems = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text(encoding="utf-8")
        if colab not in text:
            problems.append(f"{path.name}: selo do Colab não aponta para {url}")
        if f'REPOSITORY = \\"{url}\\"' not in text:
            problems.append(f"{path.name}: célula de instalação não usa {url}")
        problems += [f"{path.name}: {p}" for p in pin_problems(path)]
    return problems


def pin_problems(path: Path, ver: str | None = None) -> list[str]:
    """A fixação de um notebook: tag da instalação e check_version batem com `ver`?"""
    ver = version() if ver is None else ver
    pins = notebook_pins(path)
    problems = []
    fix = "rode `python scripts/course_repo.py pin`"
    if pins["tag"] != release_tag(ver):
        problems.append(
            f"a célula do Colab instala {pins['tag'] or 'o topo do ramo main (sem tag)'}, "
            f"mas o tpt é {ver} (tag {release_tag(ver)}): {fix}"
        )
    elif pins["setup"] != setup_cell(ver=ver, name=path.name):
        problems.append(f"a célula de instalação do Colab difere da padrão: {fix}")
    badges = badge_refs(path)
    if not badges:
        problems.append(f"sem o selo \"Abrir no Colab\" apontando para {path.name}")
    for badge in badges:
        if badge != colab_url(path.name, ver=ver):
            problems.append(
                f"o selo do Colab abre {badge}, mas a célula instala {release_tag(ver)}: "
                f"esperava {colab_url(path.name, ver=ver)}: {fix}"
            )
    if pins["guards"] != [guard_version(ver)]:
        problems.append(
            f"esperava um tpt.check_version(\"{guard_version(ver)}\"), "
            f"encontrei {pins['guards']}: {fix}"
        )
    return problems


def pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version = "([^"]+)"', text, re.M)
    return match.group(1) if match else "(sem version)"


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        print(current())
        return 0
    if argv[:1] == ["check"]:
        problems = check()
        print("\n".join(problems) or "ok")
        return 1 if problems else 0
    if argv[:1] == ["pin"] and len(argv) in (1, 2):
        ver = argv[1].removeprefix("v") if len(argv) == 2 else version()
        changed = pin_notebooks(ver=ver)
        for path in changed:
            print("reescrito:", path.relative_to(ROOT))
        print(f"notebooks fixados em {release_tag(ver)} (check_version {guard_version(ver)!r})")
        return 0
    if argv[:1] == ["set"] and len(argv) == 2:
        for path in set_repository(argv[1]):
            print("reescrito:", path.relative_to(ROOT))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
