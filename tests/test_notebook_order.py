"""A ordem do curso: cada notebook termina com o link para o próximo, e só o último diz que o
curso acabou (o programa pede o link; o 11 dizia "Fim do curso" com o 12 já no curso)."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_tools import course_notebooks  # noqa: E402

NOTEBOOKS = course_notebooks()
NEXT_LINK = re.compile(r"\*\*Próximo notebook:\*\*\s*\[([^\]]+)\]\(([^)\s]+)\)")


def _title(path: Path) -> str:
    first = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0]
    return first.removeprefix("# ").strip()


def _last_markdown(path: Path) -> str:
    cells = nbformat.read(path, as_version=4).cells
    return next(c.source for c in reversed(cells) if c.cell_type == "markdown")


def test_the_course_has_its_twelve_notebooks_in_order():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1))
    assert len(NOTEBOOKS) >= 12


@pytest.mark.parametrize(
    ("current", "following"), list(itertools.pairwise(NOTEBOOKS)), ids=lambda p: p.stem
)
def test_each_notebook_ends_with_a_link_to_the_next(current, following):
    last = _last_markdown(current)
    match = NEXT_LINK.search(last)
    assert match, f"{current.name}: a última célula não tem '**Próximo notebook:** [..](..)'"
    text, target = match.groups()
    assert target == following.name, f"{current.name} aponta para {target}, não {following.name}"
    title = _title(following)
    assert text in (title, title.split(":")[0]), (
        f"{current.name}: '{text}' não é o título '{title}'"
    )
    assert "Fim do curso" not in last


def test_only_the_last_notebook_says_the_course_is_over():
    last = _last_markdown(NOTEBOOKS[-1])
    assert "Fim do curso" in last and "(../README.md)" in last
    assert not NEXT_LINK.search(last)
    for path in NOTEBOOKS[:-1]:
        text = "".join(c.source for c in nbformat.read(path, as_version=4).cells)
        assert "Fim do curso" not in text, f"{path.name} diz 'Fim do curso' e não é o último"
