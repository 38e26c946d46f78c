"""O site do curso (make site): a preparação dos notebooks e o site construído.

A preparação (scripts/build_site.py) roda em qualquer `make test`. As conferências do
site construído rodam com `make test-site` (a CI também), que constrói o site e passa a
pasta em $TPT_SITE; sem essa variável elas são puladas (um _site/ velho não conta).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_site  # noqa: E402
import course_repo  # noqa: E402
import site_check  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SITE = Path(os.environ.get("TPT_SITE", ROOT / "_site"))
needs_site = pytest.mark.skipif(
    "TPT_SITE" not in os.environ or not (SITE / "index.html").exists(),
    reason="confere o site construído: make test-site",
)


def _markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_staged_notebook_gets_the_pinned_links_bar(path, tmp_path):
    dest = tmp_path / path.name
    build_site.stage_notebook(path, dest)
    text = _markdown(dest)
    # A barra com o Colab na tag (o mesmo endereço do selo) e o download, logo após o título.
    assert build_site.links_bar(path.name) in text
    assert course_repo.colab_url(path.name) in text
    assert text.index(build_site.links_bar(path.name)) < text.index("\n## ")
    # O selo externo (imagem baixada do Colab) sai; links para fora de notebooks/ vão ao GitHub.
    assert "colab-badge.svg)" not in text
    assert "](../" not in text
    # Código e saídas não mudam.
    original = json.loads(path.read_text(encoding="utf-8"))["cells"]
    staged = json.loads(dest.read_text(encoding="utf-8"))["cells"]
    assert [c for c in original if c["cell_type"] == "code"] == [
        c for c in staged if c["cell_type"] == "code"
    ]


def test_every_notebook_is_in_exactly_one_part():
    grouped = [nb for _, nbs in build_site.parts(NOTEBOOKS) for nb in nbs]
    assert grouped == NOTEBOOKS
    # Um notebook novo (11, 12...) entra sozinho na última parte.
    extra = [*NOTEBOOKS, ROOT / "notebooks" / "11_novo.ipynb"]
    assert build_site.parts(extra)[-1][1][-1].name == "11_novo.ipynb"


def test_home_and_glossary_pages_come_from_the_sources():
    home = build_site.home_page()
    for nb in NOTEBOOKS:
        assert f"notebooks/{nb.stem}\n" in home
    assert "{{" not in home and course_repo.current() in home
    glossary = build_site.glossary_page()
    assert glossary.startswith("# Glossário\n")
    assert "| autoatenção | self-attention |" in glossary and "<!--" not in glossary


def test_checks_catch_a_broken_site(tmp_path):
    # Um site mínimo com os defeitos que a conferência deve achar.
    (tmp_path / "notebooks").mkdir()
    nb = NOTEBOOKS[0]
    (tmp_path / "index.html").write_text(
        '<a href="sumiu.html">x</a><img src="_static/nada.png">'
        '<a href="glossario.html#nao-existe">g</a>'
        '<script src="https://cdn.example.com/x.js"></script>', encoding="utf-8")
    (tmp_path / "glossario.html").write_text('<h1 id="glossario">G</h1>', encoding="utf-8")
    (tmp_path / "notebooks" / f"{nb.stem}.html").write_text(
        '<a class="tpt-colab" href="https://colab.research.google.com/github/'
        f'x/y/blob/main/notebooks/{nb.name}">Colab</a>', encoding="utf-8")
    problems = "\n".join(site_check.check_site(tmp_path))
    assert "sumiu.html" in problems and "nada.png" in problems
    assert "#nao-existe" in problems
    assert "carrega de fora" in problems
    assert "blob/main" in problems
    assert "search.html" in problems
    assert f"{NOTEBOOKS[1].name} não tem página" in problems


@needs_site
def test_site_has_home_glossary_and_a_page_per_notebook():
    assert site_check.page_problems(SITE) == []
    assert len(site_check.notebook_pages(SITE)) == len(NOTEBOOKS)


@needs_site
def test_site_internal_links_and_images_resolve_and_nothing_loads_from_outside():
    assert site_check.link_problems(SITE) == []


@needs_site
def test_site_colab_links_point_at_the_pinned_release():
    assert site_check.colab_problems(SITE) == []


@needs_site
def test_site_is_in_portuguese_with_search_and_math():
    home = (SITE / "index.html").read_text(encoding="utf-8")
    assert '<html lang="pt-BR"' in home or 'lang="pt_BR"' in home or 'lang="pt-br"' in home
    assert "Buscar" in home
    # A busca usa o radical português ("atenção" acha "atenções"): o stemmer do Sphinx.
    assert (SITE / "_static" / "portuguese-stemmer.js").exists()
    page = (SITE / "notebooks" / f"{NOTEBOOKS[2].stem}.html").read_text(encoding="utf-8")
    assert 'class="math notranslate' in page and "_static/MathJax.js" in page
    assert "Próximo" in page or "próximo" in page
    # A interface dos temas também em português (site/locale/ completa o que falta neles).
    for text in ("Voltar ao topo", "Pular para o conteúdo", "Buscar...", "Abrir no Colab"):
        assert text in page, f"falta {text!r} na página"
    for text in ("Back to top", "Skip to main content", "Launch on", "Search..."):
        assert text not in page, f"{text!r} em inglês na página"


def test_heading_anchors_are_the_jupyterlab_ones():
    # Um notebook que linka as próprias seções como no JupyterLab funciona no site.
    assert build_site.jupyter_slug("2. Um GPT de caracteres") == "2.-Um-GPT-de-caracteres"
    assert build_site.jupyter_slug(" Começar no chute compensa? ") == "Começar-no-chute-compensa?"
