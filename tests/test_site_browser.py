"""O site num navegador de verdade (Chromium sem janela): o que uma pessoa veria.

Abre a página inicial, uma página de notebook por parte do curso, o glossário e uma
busca (scripts/site_browser.py), grava as capturas de tela numa pasta temporária (ou
em $TPT_SITE_SCREENSHOTS) e confere: o título, as fórmulas desenhadas pelo MathJax, as
figuras (mapas de calor) carregadas com tamanho, a caixa de busca, o link do Colab na
tag da versão. Roda com `make test-site` (que constrói o site e passa a pasta em
$TPT_SITE) e precisa do Chromium do Debian; na CI (CI definido), a falta do Chromium é
uma falha, não um teste pulado.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_site  # noqa: E402
import course_repo  # noqa: E402
import site_browser  # noqa: E402

SITE = Path(os.environ.get("TPT_SITE", ROOT / "_site"))
NOTEBOOKS = build_site.course_notebooks()

pytestmark = pytest.mark.skipif(
    "TPT_SITE" not in os.environ or not (SITE / "index.html").exists(),
    reason="confere o site construído: make test-site",
)


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    if site_browser.chromium() is None:
        message = "sem Chromium: apt-get install chromium (ou defina $CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out = Path(os.environ.get("TPT_SITE_SCREENSHOTS") or tmp_path_factory.mktemp("capturas"))
    pages = site_browser.capture(SITE, out)
    return out, {page["name"]: page for page in pages}


def _notebook_pages(seen):
    return {name: page for name, page in seen[1].items() if name.startswith("parte")}


def test_one_page_per_part_was_visited(seen):
    parts = build_site.parts(NOTEBOOKS)
    assert len(_notebook_pages(seen)) == len(parts) >= 4
    out, pages = seen
    for name in pages:
        shot = out / f"{name}.png"
        assert shot.exists() and shot.stat().st_size > 10_000, f"captura vazia: {shot}"


def test_home_page_shows_the_course_and_every_notebook_in_the_sidebar(seen):
    home = seen[1]["inicio"]
    assert home["h1"].strip().startswith("Transformers do zero")
    assert "Transformers do zero" in home["title"]
    assert home["search_box"]
    titles = " ".join(home["sidebar"])
    for nb in NOTEBOOKS:
        assert nb.name[:2] + " ·" in titles, f"{nb.name} não aparece na barra lateral"
    assert "Glossário" in titles


def test_notebook_pages_show_title_math_figures_and_colab(seen):
    for name, page in _notebook_pages(seen).items():
        stem = name.split("_", 1)[1]
        assert page["h1"].strip()[:2] == stem[:2], f"{name}: título {page['h1']!r}"
        assert page["h1"].strip() in page["title"]
        # Fórmulas desenhadas pelo MathJax (e nenhuma com erro ou como TeX cru).
        assert page["equations"] > 0, f"{name}: nenhuma fórmula desenhada"
        assert page["equation_errors"] == 0
        assert not page["raw_tex"], f"{name}: TeX cru (\\frac) visível na página"
        # As figuras das saídas (mapas de calor, curvas) carregadas e com tamanho na tela.
        figures = [i for i in page["images"] if i["output"]]
        assert figures, f"{name}: sem figuras nas saídas"
        for image in figures:
            assert image["complete"] and image["width"] > 0 and image["shown"] > 0, (
                f"{name}: figura não carregou: {image['src']}"
            )
        assert page["search_box"]
        assert page["colab"] == course_repo.colab_url(f"{stem}.ipynb")
        assert page["download"].endswith(f"/notebooks/{stem}.ipynb")
        assert page["next"] or page["prev"]


def test_glossary_and_portuguese_search(seen):
    assert seen[1]["glossario"]["h1"].strip().startswith("Glossário")
    search = seen[1]["busca"]
    assert search["search_results"] > 0, "a busca por 'atenção' não achou nada"
