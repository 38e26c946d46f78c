"""Constrói o site do curso (make site): os notebooks, com as saídas guardadas, viram um livro.

    python scripts/build_site.py [PASTA]        # padrão: _site/

Nada é executado: o site mostra as saídas que `make notebooks` gravou. O Sphinx (com
myst-nb e sphinx-book-theme, de requirements-site.txt) lê uma cópia preparada em
.cache/site/fonte/:

- a página inicial (site/index.md), com os notebooks de notebooks/ agrupados nas partes
  de PARTS (um notebook novo entra sozinho, na parte do seu número);
- o glossário, copiado da seção "Glossário" do README (escrito num lugar só);
- cada notebook, com uma mudança só na cópia: o selo do Colab do título vira a barra
  "Abrir no Colab" (na tag da versão, o mesmo endereço de `course_repo.colab_url`) e
  "Baixar o notebook (.ipynb)", e links para arquivos do repositório fora de
  notebooks/ (o README, o tpt) apontam para o GitHub na mesma tag.

O .ipynb baixado é o original, copiado ao lado da página. Qualquer aviso do Sphinx
interrompe a construção (-W): link quebrado, imagem ausente, página fora do sumário.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_repo  # noqa: E402

ROOT = course_repo.ROOT
NOTEBOOKS = ROOT / "notebooks"
SITE_SOURCES = ROOT / "site"
STAGE = ROOT / ".cache" / "site"

# As partes do curso: (título, primeiro número, último número). Um notebook cujo número
# não cabe em nenhuma vai para a última parte.
PARTS = [
    ("Parte 1 · Do texto aos vetores", 1, 2),
    ("Parte 2 · Atenção", 3, 6),
    ("Parte 3 · O modelo completo", 7, 9),
    ("Parte 4 · Além do Transformer de 2017", 10, 10),
    ("Parte 5 · Do curso ao ecossistema", 11, 99),
]

BADGE_MD_RE = re.compile(r"\[!\[[^\]]*\]\([^)]*colab-badge[^)]*\)\]\([^)]*\)\s*")
# Links Markdown para arquivos do repositório fora de notebooks/: ](../README.md#...)
REPO_LINK_RE = re.compile(r"\]\(\.\./([^)\s#]+)(#[^)\s]*)?\)")


def jupyter_slug(title: str) -> str:
    """A âncora que o JupyterLab dá a um título: o texto com espaços trocados por '-'.

    Os notebooks linkam as próprias seções assim (`[...](#2.-Um-GPT-de-caracteres)`);
    o site usa as mesmas âncoras (myst_heading_slug_func em site/conf.py), e esses
    links funcionam nos dois lugares.
    """
    return title.strip().replace(" ", "-")


def course_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def parts(notebooks: list[Path]) -> list[tuple[str, list[Path]]]:
    """Os notebooks agrupados nas partes de PARTS, em ordem; partes vazias somem."""
    groups: dict[str, list[Path]] = {title: [] for title, _, _ in PARTS}
    for nb in notebooks:
        number = int(nb.name[:2])
        title = next((t for t, lo, hi in PARTS if lo <= number <= hi), PARTS[-1][0])
        groups[title].append(nb)
    return [(title, nbs) for title, nbs in groups.items() if nbs]


def links_bar(name: str) -> str:
    """A barra do topo de cada página de notebook: Colab (na tag) e download."""
    return (
        '<p class="tpt-links">'
        f'<a class="tpt-colab" href="{course_repo.colab_url(name)}">'
        '<img src="../_static/colab-badge.svg" alt="Abrir no Colab" width="117" '
        'height="20"></a> '
        f'<a class="tpt-download" href="{name}" download>'
        "Baixar o notebook (.ipynb)</a></p>"
    )


def _repo_link(match: re.Match) -> str:
    target, anchor = match.group(1), match.group(2) or ""
    if target == "README.md" and anchor.lower() in ("#glossário", "#glossario"):
        return "](../glossario.md)"
    tag = course_repo.release_tag(course_repo.version())
    return f"]({course_repo.current()}/blob/{tag}/{target}{anchor})"


def stage_notebook(path: Path, dest: Path) -> None:
    """A cópia de um notebook para o site: a barra de links no lugar do selo."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    markdown = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
    for cell in markdown:
        src = "".join(cell["source"])
        src = BADGE_MD_RE.sub("", src)
        src = REPO_LINK_RE.sub(_repo_link, src)
        cell["source"] = src
    # A barra vai logo depois do título (primeira linha "# ..." da primeira célula).
    first = markdown[0]
    lines = first["source"].split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
    lines[at:at] = ["", links_bar(path.name), ""]
    first["source"] = "\n".join(lines)
    dest.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def glossary_page() -> str:
    """A seção "Glossário" do README como página (o README continua o único original)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Glossário\n(.*?)(?=^## )", readme, re.M | re.S)
    if match is None:
        raise SystemExit("README.md sem a seção '## Glossário'")
    body = re.sub(r"<!--.*?-->\n?", "", match.group(1), flags=re.S)
    return "# Glossário\n" + body


def home_page() -> str:
    """site/index.md com o sumário (as partes e seus notebooks) no lugar do marcador."""
    text = (SITE_SOURCES / "index.md").read_text(encoding="utf-8")
    blocks = []
    for title, nbs in parts(course_notebooks()):
        entries = "\n".join(f"notebooks/{nb.stem}" for nb in nbs)
        blocks.append(f"```{{toctree}}\n:caption: {title}\n:maxdepth: 1\n\n{entries}\n```")
    blocks.append("```{toctree}\n:caption: Referência\n:maxdepth: 1\n\nglossario\n```")
    marker = "<!-- sumário -->"
    if marker not in text:
        raise SystemExit(f"site/index.md sem o marcador {marker}")
    text = text.replace("{{ repositorio }}", course_repo.current())
    return text.replace(marker, "\n\n".join(blocks))


def stage() -> Path:
    """Prepara .cache/site/fonte/ (a entrada do Sphinx) e .cache/site/extra/ (os .ipynb)."""
    source, extra = STAGE / "fonte", STAGE / "extra"
    for folder in (source, extra):
        shutil.rmtree(folder, ignore_errors=True)
    (source / "notebooks").mkdir(parents=True)
    (extra / "notebooks").mkdir(parents=True)
    notebooks = course_notebooks()
    if not notebooks:
        raise SystemExit("nenhum notebook em notebooks/")
    for nb in notebooks:
        stage_notebook(nb, source / "notebooks" / nb.name)
        shutil.copy2(nb, extra / "notebooks" / nb.name)  # o original, para baixar
    (source / "index.md").write_text(home_page(), encoding="utf-8")
    (source / "glossario.md").write_text(glossary_page(), encoding="utf-8")
    return source


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "_site"
    start = time.perf_counter()
    if out.exists():
        if not (out / ".buildinfo").exists():
            raise SystemExit(f"{out} existe e não é um site do Sphinx: escolha outra pasta")
        shutil.rmtree(out)  # sem páginas velhas de notebooks que saíram do curso
    source = stage()
    log = STAGE / "sphinx.log"
    # O myst-nb grava as figuras em <pasta de saída>/../jupyter_execute: a saída fica em
    # .cache/site/html e só no fim vai para `out`.
    html = STAGE / "html"
    shutil.rmtree(html, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
        "-c", str(SITE_SOURCES), "-d", str(STAGE / "doctrees"), "-j", "1",
        str(source), str(html),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        print(f"A construção do site falhou (avisos acima; registro em {log}).",
              file=sys.stderr)
        return proc.returncode
    shutil.move(html, out)
    seconds = time.perf_counter() - start
    pages = len(list(out.rglob("*.html")))
    print(f"site pronto em {out}/ ({pages} páginas HTML, {seconds:.0f} s). "
          f"Abra {out}/index.html ou sirva com: python -m http.server -d {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
