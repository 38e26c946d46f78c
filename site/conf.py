"""Configuração do Sphinx para o site do curso (make site; ver scripts/build_site.py).

A fonte que o Sphinx lê é a cópia preparada em .cache/site/fonte/; esta pasta (site/)
guarda só a configuração, a página inicial e os arquivos estáticos.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "scripts"))
import course_repo  # noqa: E402
import jupyter_server_mathjax  # noqa: E402  (MathJax local: o site não baixa nada)

VERSION = course_repo.version()
TAG = course_repo.release_tag(VERSION)
REPOSITORY = course_repo.current()

project = "Transformers do zero"
author = "Equipe do curso Transformers do zero"
copyright = "Equipe do curso Transformers do zero (licença MIT)"
release = VERSION
language = "pt_BR"
html_search_language = "pt"
# Traduções dos textos dos temas que faltam em pt_BR: os .po de site/locale/, compilados
# aqui em .mo (em .cache/site/locale) antes que os temas carreguem os catálogos.
LOCALE = ROOT / ".cache" / "site" / "locale"


def _compile_catalogs() -> None:
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    for po in (HERE / "locale").rglob("*.po"):
        mo = LOCALE / po.relative_to(HERE / "locale").with_suffix(".mo")
        mo.parent.mkdir(parents=True, exist_ok=True)
        with po.open("rb") as src, mo.open("wb") as dst:
            write_mo(dst, read_po(src))


_compile_catalogs()
locale_dirs = [str(LOCALE)]

extensions = ["myst_nb"]
# As saídas são as que `make notebooks` gravou: nada é executado aqui.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
# Âncoras dos títulos iguais às do JupyterLab ("2.-Um-GPT-de-caracteres"): os links
# internos dos notebooks funcionam também no site.
myst_heading_anchors = 6
myst_heading_slug_func = "build_site.jupyter_slug"
# Os notebooks guardam barras de progresso como widgets; no site vale o texto.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_merge_streams = True

exclude_patterns = []
suppress_warnings = []

html_theme = "sphinx_book_theme"
html_title = "Transformers do zero"
MATHJAX = Path(jupyter_server_mathjax.__file__).parent / "static"
html_static_path = [str(HERE / "_static"), str(MATHJAX)]
html_css_files = ["site.css"]
html_extra_path = [str(ROOT / ".cache" / "site" / "extra")]
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False

# MathJax 2 que vem no pacote jupyter-server-mathjax, servido de _static/. O pacote traz
# uma configuração (TeX-AMS-MML_HTMLorMML-full) e as fontes STIX-Web, como no Jupyter.
mathjax_path = "MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
mathjax2_config = {
    # O myst-nb marca o artigo com tex2jax_ignore; as fórmulas vêm em elementos "math".
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processClass": "tex2jax_process|mathjax_process|math|output_area",
    },
    "HTML-CSS": {
        "availableFonts": [],
        "preferredFont": None,
        "webFont": "STIX-Web",
        "imageFont": None,
        # Escala fixa: sem isso o MathJax aumenta cada fórmula (até 130 %) para igualar a
        # altura do x do texto em volta, e as fórmulas em linha ficam grandes demais.
        "matchFontHeight": False,
        "scale": 115,
        "linebreaks": {"automatic": True},
    },
    "messageStyle": "none",
}

html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": TAG,
    "path_to_docs": "",
    "use_repository_button": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "navigation_with_keys": False,
}


def setup(app):
    # Os botões do sphinx-book-theme usam o catálogo "booktheme": o nosso completa o dele.
    app.add_message_catalog("booktheme", str(LOCALE))
