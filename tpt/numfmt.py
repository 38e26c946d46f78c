"""Números como um leitor brasileiro os lê: vírgula decimal e ponto de milhar.

Todo número que o curso mostra ao aluno (em ``print``, tabelas, rótulos de gráficos e
frases montadas por código) passa por aqui, para que "0,76" nunca apareça ao lado de
"0.63". Usado em todos os notebooks a partir do 06.

>>> fmt(1234567)
'1.234.567'
>>> fmt(0.7634, 2)
'0,76'
>>> fmt(0.974, percent=True)
'97,4%'
>>> fmt(2.5e-7, sci=True)
'2,5e-07'
>>> fmt_bytes(3 * 2**20)
'3,0 MiB'
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["fmt", "fmt_bytes", "compare", "Comparison", "to_brazilian"]

def _as_number(value: Any) -> int | float:
    """Aceita int, float, numpy e tensores de um elemento; recusa o resto com clareza."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"fmt recebeu um tensor de forma {tuple(value.shape)}; esperava um número "
                "(um tensor com um só elemento, ou use .item())"
            )
        value = value.item()
    if isinstance(value, bool):
        raise TypeError(f"fmt recebeu um bool ({value}); esperava um número")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"fmt recebeu {type(value).__name__} ({value!r}); esperava um número")


def to_brazilian(text: str) -> str:
    """Troca a notação inglesa de um número já escrito ("1234.5") pela brasileira ("1.234,5").

    Só mexe em números: vírgulas viram separador decimal e a parte inteira ganha ponto a
    cada três algarismos (a partir de 10.000, e também em 1.000 a 9.999).
    """

    def convert(match: re.Match[str]) -> str:
        number = match.group(0)
        integer, _, fraction = number.partition(".")
        groups = []
        while len(integer) > 3:
            groups.insert(0, integer[-3:])
            integer = integer[:-3]
        groups.insert(0, integer)
        result = ".".join(groups)
        return f"{result},{fraction}" if fraction else result

    # Um número = algarismos com um ponto decimal opcional; expoentes ("e-07") ficam
    # como estão, porque o ponto decimal está antes deles.
    return re.sub(r"(?<![\d.])\d+(?:\.\d+)?", convert, text)


def fmt(
    value: Any,
    decimals: int | None = None,
    *,
    percent: bool = False,
    sci: bool = False,
    sign: bool = False,
) -> str:
    """Formata ``value`` em pt-BR.

    - inteiros: ponto de milhar (``1.234.567``); com ``decimals``, também as casas;
    - reais: ``decimals`` casas (padrão 2), vírgula decimal (``0,76``);
    - ``percent=True``: multiplica por 100 e acrescenta ``%`` (padrão 1 casa: ``97,4%``);
    - ``sci=True``: notação científica (padrão 1 casa: ``2,5e-07``), boa para diferenças
      mínimas como as de uma conferência de igualdade;
    - ``sign=True``: sinal ``+`` também nos positivos.

    Aceita ``int``, ``float``, tipos do numpy e tensores com um só elemento.
    """
    number = _as_number(value)
    if decimals is not None and (
        isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0
    ):
        raise ValueError(f"decimals={decimals!r} deve ser um inteiro >= 0 (ou None)")
    if isinstance(number, float) and not math.isfinite(number):
        return "NaN" if math.isnan(number) else ("∞" if number > 0 else "-∞")
    plus = "+" if sign else ""
    if sci:
        places = 1 if decimals is None else decimals
        return f"{number:{plus}.{places}e}".replace(".", ",")
    suffix = ""
    if percent:
        number, suffix = number * 100, "%"
        places = 1 if decimals is None else decimals
    elif isinstance(number, int):
        places = 0 if decimals is None else decimals
    else:
        places = 2 if decimals is None else decimals
    text = f"{number:{plus},.{places}f}"  # notação inglesa: 1,234,567.89
    text = text.replace(",", "_").replace(".", ",").replace("_", ".")
    if not re.search(r"[1-9]", text):
        text = text.lstrip("-")  # nada de "-0,00"
    return text + suffix


_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(num_bytes: Any, decimals: int = 1) -> str:
    """Bytes em potências de 1024, em pt-BR: ``fmt_bytes(671088640) == '640,0 MiB'``."""
    n = _as_number(num_bytes)
    if n < 0:
        raise ValueError(f"fmt_bytes recebeu {n}; esperava um número de bytes >= 0")
    unit = 0
    value = float(n)
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{fmt(int(n))} bytes"
    return f"{fmt(value, decimals)} {_UNITS[unit]}"


@dataclass(frozen=True)
class Comparison:
    """Resultado de ``compare``: ``equal`` e a maior diferença absoluta ``max_diff``.

    ``print(comparison)`` mostra ``True (diferença máxima: 2,4e-07)``; em um ``if`` ou
    ``assert`` vale como ``equal``.
    """

    equal: bool
    max_diff: float

    def __bool__(self) -> bool:
        return self.equal

    def __str__(self) -> str:
        return f"{self.equal} (diferença máxima: {fmt(self.max_diff, sci=True)})"


def compare(actual: Any, expected: Any, *, atol: float = 1e-6, rtol: float = 0.0) -> Comparison:
    """Confere ``actual ≈ expected`` (``torch.allclose``) e mede a maior diferença absoluta.

    As formas precisam ser iguais (sem broadcasting: uma forma errada é um erro, não
    uma igualdade). Tensores em dispositivos ou tipos diferentes são comparados em
    float64 na CPU.
    """
    a = torch.as_tensor(actual).detach()
    b = torch.as_tensor(expected).detach()
    if a.shape != b.shape:
        raise ValueError(
            f"compare: formas diferentes, {tuple(a.shape)} e {tuple(b.shape)}; "
            "esperava tensores da mesma forma"
        )
    a = a.to("cpu", torch.float64)
    b = b.to("cpu", torch.float64)
    if a.numel() == 0:
        return Comparison(True, 0.0)
    both_nan = torch.isnan(a) & torch.isnan(b)
    diff = (a - b).abs().masked_fill(both_nan, 0.0)
    max_diff = float(diff.max())
    equal = bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))
    return Comparison(equal, max_diff)
