"""Confere um site construído por `make site` sem navegador (só a biblioteca padrão).

    python scripts/site_check.py [_site]

- cada notebook de notebooks/ tem a sua página e o seu .ipynb para baixar (idêntico ao
  original), e existem a página inicial, o glossário e a busca;
- todo link interno (href) e toda imagem, folha de estilo e script (src) de todas as
  páginas apontam para um arquivo que existe, e toda âncora (#...) para um id que existe;
- nada é carregado de fora (scripts, estilos, imagens, fontes): o site funciona offline;
- os links "Abrir no Colab" de cada página apontam para o notebook na tag da versão, o
  mesmo endereço do selo e da célula de instalação (`course_repo.colab_url`).

tests/test_site.py roda estas funções; `make release` confere os links do Colab.
"""

from __future__ import annotations

import html.parser
import sys
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_repo  # noqa: E402

COLAB = "https://colab.research.google.com/"
EXTERNAL = ("http://", "https://", "//", "mailto:", "data:", "javascript:")


class _Page(html.parser.HTMLParser):
    """Os ids e as referências (tag, atributo, valor, classes) de uma página."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if key in values and (key == "id" or tag == "a"):
                self.ids.add(values[key])
        for key in ("href", "src"):
            if key in values:
                self.refs.append((tag, key, values[key], values.get("class", "")))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _pages(site: Path) -> list[Path]:
    # Os .html de _static/ são modelos do tema, não páginas.
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def notebook_pages(site: Path) -> list[Path]:
    return [site / "notebooks" / f"{nb.stem}.html" for nb in _course_notebooks()]


def _course_notebooks() -> list[Path]:
    return sorted((course_repo.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def page_problems(site: Path) -> list[str]:
    """Páginas que faltam: inicial, glossário, busca e uma por notebook (com o .ipynb)."""
    problems = []
    for rel in ("index.html", "glossario.html", "search.html", "searchindex.js"):
        if not (site / rel).exists():
            problems.append(f"falta {rel}")
    for nb in _course_notebooks():
        if not (site / "notebooks" / f"{nb.stem}.html").exists():
            problems.append(f"o notebook {nb.name} não tem página (notebooks/{nb.stem}.html)")
        copy = site / "notebooks" / nb.name
        if not copy.exists() or copy.read_bytes() != nb.read_bytes():
            problems.append(f"notebooks/{nb.name} para baixar ausente ou diferente do original")
    return problems


def link_problems(site: Path) -> list[str]:
    """Links, imagens, estilos e scripts internos quebrados; recursos carregados de fora."""
    problems = []
    parsed = {p: _parse(p) for p in _pages(site)}
    for path, page in parsed.items():
        rel = path.relative_to(site)
        for tag, key, value, _ in page.refs:
            if value.startswith(EXTERNAL):
                # Um link para fora é normal; carregar algo de fora não é (site offline).
                if key == "src" or (tag == "link" and value.startswith(("http", "//"))):
                    problems.append(f"{rel}: <{tag} {key}> carrega de fora: {value}")
                continue
            parts = urllib.parse.urlsplit(value)
            if parts.scheme:
                continue
            target = path if not parts.path else (path.parent / urllib.parse.unquote(parts.path))
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{rel}: {key}={value!r} aponta para um arquivo que não existe")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                anchor = urllib.parse.unquote(parts.fragment)
                if anchor not in ids:
                    problems.append(f"{rel}: âncora {value!r} não existe na página de destino")
    return problems


def colab_problems(site: Path) -> list[str]:
    """Cada página de notebook abre, no Colab, o mesmo notebook na tag da versão."""
    problems = []
    for nb in _course_notebooks():
        path = site / "notebooks" / f"{nb.stem}.html"
        if not path.exists():
            problems.append(f"sem página para {nb.name}")
            continue
        expected = course_repo.colab_url(nb.name)
        colab = [
            (value, classes)
            for tag, _, value, classes in _parse(path).refs
            if tag == "a" and value.startswith(COLAB + "github/")
        ]
        if not any("tpt-colab" in classes for _, classes in colab):
            problems.append(f"notebooks/{path.name}: sem o link \"Abrir no Colab\"")
        for value, _ in colab:
            if value != expected:
                problems.append(
                    f"notebooks/{path.name}: o link do Colab abre {value}, esperava {expected} "
                    "(rode `make site` de novo depois de `course_repo.py pin`)"
                )
    return problems


def check_site(site: Path) -> list[str]:
    return page_problems(site) + link_problems(site) + colab_problems(site)


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else course_repo.ROOT / "_site"
    if not (site / "index.html").exists():
        print(f"{site}/index.html não existe: rode `make site` antes")
        return 1
    problems = check_site(site)
    print("\n".join(problems) or f"ok: {len(_pages(site))} páginas, links e Colab conferidos")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
