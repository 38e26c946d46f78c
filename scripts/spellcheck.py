"""Ortografia (pt-BR) das células de texto dos notebooks e do README, com hunspell.

    python scripts/spellcheck.py            # = make spellcheck

Precisa de `hunspell` e do dicionário pt_BR (Debian/Ubuntu:
`apt-get install hunspell hunspell-pt-br`). Termos técnicos aceitos ficam em
scripts/spell_allowlist.txt (uma palavra por linha). Código, fórmulas LaTeX,
endereços, tags HTML, trechos em itálico (termos estrangeiros) e a
lista de leituras (\"Para saber mais\") são ignorados.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = Path(__file__).with_name("spell_allowlist.txt")

STRIP = [
    re.compile(r"<!-- ortografia: desligada -->.*?<!-- ortografia: ligada -->", re.S),
    re.compile(r"```.*?```", re.S),  # blocos de código
    re.compile(r"`[^`]*`"),  # código em linha
    re.compile(r"\$\$.*?\$\$", re.S),  # LaTeX em bloco
    re.compile(r"\$[^$]*\$"),  # LaTeX em linha
    re.compile(r"\\\(.*?\\\)", re.S),
    re.compile(r"https?://\S+"),  # endereços
    re.compile(r"\]\([^)]*\)"),  # alvo de links markdown
    re.compile(r"<[^>]+>"),  # tags HTML
    re.compile(r"(?<![*\w])\*[^*]+?\*(?!\*)"),  # itálico: termos estrangeiros, por convenção
]


def clean(text: str) -> str:
    for regex in STRIP:
        text = regex.sub(" ", text)
    return text


def texts() -> dict[str, str]:
    found = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        found[path.name] = "\n".join(
            c.source
            for c in nb.cells
            # "Para saber mais" lista títulos de artigos, quase todos em inglês.
            if c.cell_type == "markdown" and not c.source.startswith("## Para saber mais")
        )
    return found


def unknown_words(text: str) -> list[str]:
    result = subprocess.run(
        ["hunspell", "-d", "pt_BR", "-p", str(ALLOWLIST), "-l"],
        input=clean(text),
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(set(result.stdout.split()))


def main() -> int:
    if shutil.which("hunspell") is None:
        print("hunspell não encontrado: apt-get install hunspell hunspell-pt-br")
        return 2
    total = 0
    for name, text in texts().items():
        words = unknown_words(text)
        total += len(words)
        listed = ": " + ", ".join(words) if words else ""
        print(f"{name}: {len(words)} palavra(s) desconhecida(s){listed}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
