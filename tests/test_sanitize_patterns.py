"""Os padrões de tests/nbval_sanitize.cfg: escondem só tempos e razões entre tempos.

O nbval e `make notebooks` (scripts/notebook_tools.normalize) usam o mesmo arquivo; um
padrão largo demais esconderia do nbval um número que deveria ser comparado.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_tools import sanitize_patterns  # noqa: E402


def sanitize(text: str) -> str:
    for regex, replacement in sanitize_patterns():
        text = regex.sub(replacement, text)
    return text


def test_timing_ratios_of_notebook_04_are_sanitized():
    # A tabela de tempos da seção 4 do 04: duas execuções seguidas dão razões diferentes.
    first = "brinquedo |   3,961 ms |       1,568 ms |     0,911 ms | 2,53× | 1,72×"
    second = "brinquedo |   4,102 ms |       1,344 ms |     1,050 ms | 3,05× | 1,28×"
    assert sanitize(first) == sanitize(second)
    assert "×" not in sanitize(first)


@pytest.mark.parametrize(
    "text",
    [
        "15 × 16 = 240 números",  # formas (04)
        "parâmetros: 1024 = 16 × 64",  # contagem (05)
        "a frase, vocabulário de caracteres  9,3 KiB  33,9 KiB  3,6×",  # razão de memória (02)
        "circular de 4.096 vagas 512,0 MiB (8× menor)",  # razão de memória (10)
    ],
)
def test_other_products_and_ratios_stay_compared(text):
    assert sanitize(text) == text
