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

try:  # os scripts de manutenção usam fmt num Python sem torch (scripts/test_compat.py)
    import torch
except ImportError:  # pragma: no cover - o pacote tpt sempre tem torch
    torch = None

__all__ = [
    "fmt",
    "fmt_bytes",
    "fmt_count",
    "fmt_tolerance",
    "compare",
    "Comparison",
    "to_brazilian",
]


def _as_number(value: Any) -> int | float:
    """Aceita int, float, numpy e tensores de um elemento; recusa o resto com clareza."""
    if torch is not None and isinstance(value, torch.Tensor):
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


def fmt_count(count: Any, singular: str, plural: str) -> str:
    """Uma contagem com a palavra no número certo: ``1 aprovado``, ``1.534 aprovados``.

    Em português, só 1 (e -1) pede o singular; zero vai no plural (``0 reprovados``).
    """
    n = _as_number(count)
    if not isinstance(n, int):
        raise TypeError(f"fmt_count recebeu {count!r}; esperava um número inteiro")
    return f"{fmt(n)} {singular if abs(n) == 1 else plural}"


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


def fmt_tolerance(tol: float) -> str:
    """Uma tolerância como se escreve à mão: ``1e-06``, ``5e-04``, ``2,5e-05``.

    Sem o ",0" de ``fmt(..., sci=True)``: potências de dez ficam como no código.
    """
    value = float(_as_number(tol))
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"fmt_tolerance recebeu {tol!r}; esperava um número finito >= 0")
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.1e}".split("e")
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    return f"{mantissa.replace('.', ',')}e{exponent}"


@dataclass(frozen=True)
class Comparison:
    """Resultado de ``compare``: ``equal``, a maior diferença absoluta ``max_diff`` e as
    tolerâncias usadas.

    ``print(comparison)`` mostra um **veredito** que vale em qualquer CPU:

    - ``True (diferença máxima ≤ 1e-06)``: igual dentro da tolerância ``atol``. Não
      imprimimos o valor exato (``0,0e+00`` numa CPU, ``6,0e-08`` em outra): ele é
      arredondamento e muda com as instruções da CPU e a versão do PyTorch;
    - ``True (diferença máxima: 0, exata)``: com ``atol=0`` e ``rtol=0``, igualdade
      exata (índices, cópias, consultas a uma tabela);
    - ``False (diferença máxima: 2,8e+00)``: diferente; aí o tamanho do erro é a
      informação, e ele é grande demais para depender da CPU.

    O valor medido continua em ``max_diff``; num ``if`` ou ``assert`` o objeto vale
    como ``equal``.
    """

    equal: bool
    max_diff: float
    atol: float = 0.0
    rtol: float = 0.0

    def __bool__(self) -> bool:
        return self.equal

    def __str__(self) -> str:
        if not self.equal:
            return f"False (diferença máxima: {fmt(self.max_diff, sci=True)})"
        if self.atol == 0 and self.rtol == 0:
            return "True (diferença máxima: 0, exata)"
        if self.rtol == 0:
            return f"True (diferença máxima ≤ {fmt_tolerance(self.atol)})"
        return (
            f"True (diferença máxima ≤ {fmt_tolerance(self.atol)} + "
            f"{fmt_tolerance(self.rtol)}·|esperado|)"
        )


def compare(actual: Any, expected: Any, *, atol: float = 1e-6, rtol: float = 0.0) -> Comparison:
    """Confere ``actual ≈ expected`` (``torch.allclose``) e mede a maior diferença absoluta.

    As formas precisam ser iguais (sem broadcasting: uma forma errada é um erro, não
    uma igualdade). Tensores em dispositivos ou tipos diferentes são comparados em
    float64 na CPU. Impresso, o resultado é um veredito contra a tolerância (veja
    ``Comparison``), que não muda de uma CPU para outra.
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
        return Comparison(True, 0.0, atol, rtol)
    both_nan = torch.isnan(a) & torch.isnan(b)
    diff = (a - b).abs().masked_fill(both_nan, 0.0)
    max_diff = float(diff.max())
    equal = bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))
    return Comparison(equal, max_diff, atol, rtol)
