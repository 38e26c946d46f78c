"""Conferências dos exercícios de notebooks/05_codificacao_posicional.ipynb.

Três exercícios, na ordem do notebook. O notebook mostra a tabela senoidal com seno e
cosseno intercalados (colunas pares e ímpares, como no artigo e no tpt); os dois
primeiros exercícios pedem o outro layout comum, em **metades**: as ``d/2`` primeiras
colunas são os senos e as ``d/2`` últimas, os cossenos.

1. :func:`check_sinusoidal_half`: a tabela ``(max_len, d)`` em metades,
   ``PE[p, i] = sin(p w_i)`` e ``PE[p, d/2 + i] = cos(p w_i)``, ``w_i = 1 / theta^(2i/d)``,
   **sem laços** em Python e sem ``tpt.sinusoidal_encoding``;
2. :func:`check_rotation_half`: a rotação ``R(k)`` ``(d, d)`` desse layout, com
   ``PE(p + k) = R(k) PE(p)``, sem ``tpt.pe_rotation``;
3. :func:`check_add_positional_left_padded`: somar a codificação a um lote ``(b, t, d)``
   com preenchimento **à esquerda**, de modo que o primeiro token real de cada linha
   receba ``PE(0)``; sem laços, sem modificar ``x`` no lugar e sem cortar o gradiente.

Cada conferência compara a resposta do aluno com uma referência e diz, em português,
qual entrada falhou, o que era esperado e o que veio. As regras dos enunciados ("sem
laços", "não use tpt.X") são verificadas (bytecode da função e ``forbid``), e os erros
mais comuns (layout intercalado, expoente ``i/d``, rotação transposta, posições que
ignoram o preenchimento, PE do índice do lote, soma no lugar) têm mensagens próprias.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

import tpt
import tpt.positional
from tpt.exercises import (
    ExerciseError,
    _code_objects,
    _function_code,
    exercise,
    expect,
    forbid,
    references,
    uses_loops,
)
from tpt.numfmt import fmt
from tpt.positional import pe_rotation, sinusoidal_encoding

__all__ = ["check_sinusoidal_half", "check_rotation_half", "check_add_positional_left_padded"]

# Tolerância: a resposta pode vir em float32 (erro de arredondamento ~1e-7 nos senos).
_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _close(received: Tensor, expected: Tensor) -> bool:
    return received.shape == expected.shape and torch.allclose(
        received.double(), expected.double(), atol=_ATOL, rtol=0
    )


def _max_diff(a: Tensor, b: Tensor) -> str:
    return fmt((a.double() - b.double()).abs().max().item(), sci=True)


def _frequencies(embed_dim: int, theta: float, exponent_scale: float = 2.0) -> Tensor:
    """``1 / theta^(c i / d)`` para ``i = 0..d/2-1`` (``c = 2`` é o certo): ``(d/2,)``."""
    i = torch.arange(embed_dim // 2, dtype=torch.float64)  # (d/2,)
    return theta ** (-exponent_scale * i / embed_dim)  # (d/2,)


def _angles(max_len: int, embed_dim: int, theta: float, exponent_scale: float = 2.0) -> Tensor:
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    return positions * _frequencies(embed_dim, theta, exponent_scale)[None, :]  # (max_len, d/2)


def _half(first: Tensor, second: Tensor) -> Tensor:
    """``first`` nas primeiras ``d/2`` colunas e ``second`` nas últimas: ``(n, d)``."""
    return torch.cat((first, second), dim=-1)  # (n, d)


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    """Colunas pares de ``even`` e ímpares de ``odd``: ``(n, d/2)`` x 2 -> ``(n, d)``."""
    return torch.stack((even, odd), dim=-1).flatten(-2)  # (n, d)


def half_table(max_len: int, embed_dim: int, theta: float = 10000.0) -> Tensor:
    """A tabela de referência em metades, ``(max_len, d)`` em float64 (uso das conferências)."""
    angles = _angles(max_len, embed_dim, theta)  # (max_len, d/2)
    return _half(torch.sin(angles), torch.cos(angles))  # (max_len, d)


def _first_mismatch(received: Tensor, expected: Tensor, name: str) -> str:
    """Descreve a primeira célula ``[linha, coluna]`` que difere (para a mensagem)."""
    bad = ((received.double() - expected.double()).abs() > _ATOL).nonzero()[0].tolist()
    index = ", ".join(str(i) for i in bad)
    return (
        f"{name}[{index}] deveria ser {fmt(expected[tuple(bad)].item(), 4)}, "
        f"mas veio {fmt(received[tuple(bad)].item(), 4)}"
    )


def _call(fn: Callable[..., Any], *args: Any, call: str, hint: str) -> Any:
    """Chama a resposta; erros do PyTorch (em inglês) ganham uma dica em português."""
    try:
        return fn(*args)
    except (NotImplementedError, ExerciseError):
        raise
    except TypeError as err:
        if "argument" in str(err):
            raise ExerciseError(
                f"a conferência chama {call}, e a sua função recusou esses argumentos "
                f"({err}). Confira a assinatura da função."
            ) from err
        raise ExerciseError(f"sua função levantou TypeError ({err}). {hint}") from err
    except (RuntimeError, IndexError, ValueError) as err:
        raise ExerciseError(f"sua função levantou {type(err).__name__} ({err}). {hint}") from err


def _check_no_loops(fn: Callable[..., Any], what: str, tools: str) -> None:
    expect(
        not uses_loops(fn),
        f"o enunciado pede {what} sem laços em Python, e a sua função tem um laço (for, "
        "while ou compreensão de lista). Troque o laço por operações de tensor sobre "
        f"todas as posições de uma vez: {tools}.",
    )


def _mentions(fn: Callable[..., Any], name: str) -> bool:
    """A função cita ``name`` ou um apelido de ``tpt.<name>`` (``from tpt import X as Y``)?"""
    if references(fn, name):
        return True
    target = getattr(tpt, name, None)
    if target is None:
        return False
    fn = inspect.unwrap(fn)
    names = {n for code in _code_objects(_function_code(fn)) for n in code.co_names}
    scope = getattr(fn, "__globals__", {})
    cells = [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ())]
    return any(scope.get(n) is target for n in names) or any(c is target for c in cells)


def _check_not_used(fn: Callable[..., Any], names: tuple[str, ...], reason: str) -> None:
    for name in names:
        expect(not _mentions(fn, name), f"sua função usa {name}: {reason}")


@contextlib.contextmanager
def _forbid_all(name: str, reason: str) -> Iterator[None]:
    """Bloqueia ``tpt.<name>`` e ``tpt.positional.<name>`` durante o bloco."""
    message = f"sua função chamou tpt.{name}: {reason}"
    with forbid(tpt, name, message), forbid(tpt.positional, name, message):
        yield


# --------------------------------------------------------------------------------------
# Exercício 1: a tabela senoidal em metades, sem laços
# --------------------------------------------------------------------------------------

# (max_len, embed_dim, theta): o primeiro é a tabela pequena do notebook.
_TABLE_CASES: list[tuple[int, int, float]] = [
    (5, 4, 10000.0),
    (12, 8, 10000.0),
    (7, 6, 100.0),
    (40, 16, 10000.0),
]

_TABLE_REASON = (
    "o exercício pede a tabela construída por você, com torch.arange, broadcasting e "
    "torch.cat. A tabela do tpt serve para conferir no fim, não para a resposta."
)
_TABLE_HELPERS = ("sinusoidal_encoding", "SinusoidalPositionalEncoding", "sinusoidal_didactic")


@exercise("Exercício 1 (tabela senoidal em metades, sem laços)")
def check_sinusoidal_half(sinusoidal_half: Callable[[int, int, float], Tensor]) -> None:
    """``sinusoidal_half(max_len, embed_dim, theta) -> (max_len, embed_dim)``, sin | cos."""
    _check_no_loops(sinusoidal_half, "a tabela", "torch.arange, broadcasting e torch.cat")
    _check_not_used(sinusoidal_half, _TABLE_HELPERS, _TABLE_REASON)
    for max_len, d, theta in _TABLE_CASES:
        where = f"para max_len={max_len}, embed_dim={d}, theta={fmt(theta, 0)}"
        expected = half_table(max_len, d, theta)  # (max_len, d)
        with _forbid_all("sinusoidal_encoding", _TABLE_REASON):
            received = _call(
                sinusoidal_half,
                max_len,
                d,
                theta,
                call=f"sinusoidal_half({max_len}, {d}, {theta!r})",
                hint="Confira as formas: posições (max_len, 1) vezes frequências (d/2,) dão "
                "os ângulos (max_len, d/2); senos e cossenos se juntam com torch.cat(..., dim=-1).",
            )
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        received = received.detach().cpu()
        expect(
            tuple(received.shape) != (d, max_len) or d == max_len,
            f"{where}: esperava a forma {(max_len, d)} (posições x dimensões); recebi "
            f"{_shape(received)}: a tabela está transposta.",
        )
        expect(
            tuple(received.shape) == (max_len, d),
            f"{where}: esperava a forma {(max_len, d)} (max_len, embed_dim); "
            f"recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        angles = _angles(max_len, d, theta)  # (max_len, d/2)
        expect(
            not _close(received, _interleave(torch.sin(angles), torch.cos(angles))),
            f"{where}: você intercalou seno e cosseno (colunas pares e ímpares, como a "
            "tabela do tpt). Aqui o layout é em metades: as d/2 primeiras colunas são os "
            "senos e as d/2 últimas, os cossenos (torch.cat em vez de fatias 0::2 e 1::2).",
        )
        expect(
            not _close(received, _half(torch.cos(angles), torch.sin(angles))),
            f"{where}: as metades estão trocadas: os senos vêm primeiro (colunas 0 a d/2 - 1) "
            "e os cossenos depois. Confira a linha da posição 0: deve ser [0, ..., 0, 1, ..., 1].",
        )
        half_angles = _angles(max_len, d, theta, exponent_scale=1.0)
        expect(
            not _close(received, _half(torch.sin(half_angles), torch.cos(half_angles))),
            f"{where}: o expoente está errado: a frequência do par i é 1 / theta^(2i/d), "
            "com 2i no expoente (torch.arange(0, d, 2) / d), não 1 / theta^(i/d) "
            "(torch.arange(d // 2) / d).",
        )
        if theta != 10000.0:
            expect(
                not _close(received, half_table(max_len, d, 10000.0)),
                f"{where}: sua tabela é a de theta=10.000: use o argumento theta na "
                "frequência 1 / theta^(2i/d) em vez de um valor fixo.",
            )
        expect(False, f"{where}: {_first_mismatch(received, expected, 'PE')}.")


# --------------------------------------------------------------------------------------
# Exercício 2: a rotação R(k) do layout em metades
# --------------------------------------------------------------------------------------

# (offset, embed_dim, theta): inclui k = 0 (identidade) e um k negativo (R(-k) = R(k)^T).
_ROTATION_CASES: list[tuple[int, int, float]] = [
    (1, 4, 10000.0),
    (3, 8, 10000.0),
    (5, 6, 100.0),
    (0, 4, 10000.0),
    (-2, 8, 10000.0),
]

_ROTATION_REASON = (
    "o exercício pede a matriz do layout em metades construída por você; a "
    "tpt.pe_rotation é a do layout intercalado (e a conferência não deixa usá-la)."
)


def half_rotation(offset: int, embed_dim: int, theta: float = 10000.0) -> Tensor:
    """``R(k)`` de referência do layout em metades, ``(d, d)`` em float64."""
    angles = offset * _frequencies(embed_dim, theta)  # (d/2,)
    cos, sin = torch.diag(torch.cos(angles)), torch.diag(torch.sin(angles))  # (d/2, d/2)
    return torch.cat((torch.cat((cos, sin), 1), torch.cat((-sin, cos), 1)), 0)  # (d, d)


@exercise("Exercício 2 (rotação R(k) do layout em metades)")
def check_rotation_half(rotation_half: Callable[[int, int, float], Tensor]) -> None:
    """``rotation_half(offset, embed_dim, theta) -> (d, d)`` com ``PE(p + k) = R(k) PE(p)``."""
    _check_not_used(rotation_half, ("pe_rotation",), _ROTATION_REASON)
    for k, d, theta in _ROTATION_CASES:
        where = f"para offset k={k}, embed_dim={d}, theta={fmt(theta, 0)}"
        expected = half_rotation(k, d, theta)  # (d, d)
        with _forbid_all("pe_rotation", _ROTATION_REASON):
            received = _call(
                rotation_half,
                k,
                d,
                theta,
                call=f"rotation_half({k}, {d}, {theta!r})",
                hint="Confira as formas: os cossenos e senos dos d/2 pares formam quatro "
                "blocos diagonais (d/2, d/2), e a matriz inteira é (d, d).",
            )
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        received = received.detach().cpu()
        expect(
            tuple(received.shape) == (d, d),
            f"{where}: esperava uma matriz {(d, d)} (d, d); recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        expect(
            k == 0 or not _close(received, pe_rotation(k, d, theta, dtype=torch.float64)),
            f"{where}: essa é a R(k) do layout intercalado, com blocos 2 x 2 na diagonal. "
            "No layout em metades, o seno do par i está na coluna i e o cosseno na coluna "
            "d/2 + i: os quatro números do par i ficam em R[i, i], R[i, d/2 + i], "
            "R[d/2 + i, i] e R[d/2 + i, d/2 + i].",
        )
        expect(
            not _close(received, expected.T),
            f"{where}: sua matriz leva PE(p) a PE(p - k): é a transposta, R(-k). Confira os "
            "sinais: sin(a + b) = sin a cos b + cos a sin b e cos(a + b) = cos a cos b - "
            "sin a sin b; o -sin b fica na metade de baixo (linhas dos cossenos).",
        )
        eye = torch.eye(d // 2, dtype=torch.float64)  # (d/2, d/2)
        cos_k, sin_k = math.cos(k) * eye, math.sin(k) * eye  # o ângulo k em todos os pares
        same = torch.cat((torch.cat((cos_k, sin_k), 1), torch.cat((-sin_k, cos_k), 1)), 0)  # (d, d)
        expect(
            not _close(received, same),
            f"{where}: todos os pares giram o mesmo ângulo k. O par i gira k * w_i, com "
            "w_i = 1 / theta^(2i/d): cada par tem a sua frequência.",
        )
        # Diagnóstico pela propriedade: PE(p + k) contra R PE(p) nas posições da tabela.
        table = half_table(30, d, theta)  # (30, d)
        start = max(0, -k)
        before = table[start : start + 10]  # (10, d): PE(p)
        after = table[start + k : start + k + 10]  # (10, d): PE(p + k)
        predicted = before @ received.double().T  # (10, d): R PE(p), linha a linha
        expect(
            False,
            f"{where}: R(k) PE(p) deveria dar PE(p + k), mas a diferença máxima nas "
            f"posições p = {start}..{start + 9} é {_max_diff(predicted, after)} "
            f"(tolerância {fmt(_ATOL, sci=True)}). {_first_mismatch(received, expected, 'R')}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: posições com preenchimento à esquerda
# --------------------------------------------------------------------------------------

# Cada caso: quantos <pad> há no começo de cada linha, t e d. Inclui linhas sem <pad>,
# b != t e uma linha com um token real só.
_PAD_CASES: list[tuple[list[int], int, int]] = [
    ([0, 2, 3], 5, 8),
    ([1, 0], 4, 6),
    ([0, 0, 0, 0, 0, 0], 3, 4),
    ([3, 0, 1, 5], 6, 8),
]
_PAD_MAX_LEN = 16

_PAD_HINT = (
    "Confira os tipos e as formas: is_pad é booleano (b, t); as posições que indexam pe "
    "precisam ser inteiras (torch.long) e ter forma (b, t), e pe[positions] tem forma (b, t, d)."
)


def _left_pad_mask(pads: list[int], t: int) -> Tensor:
    """``(b, t)`` booleana, ``True`` nos ``pads[j]`` primeiros elementos da linha ``j``."""
    columns = torch.arange(t)[None, :]  # (1, t)
    return columns < torch.tensor(pads)[:, None]  # (b, t)


def _positions_used(delta: Tensor, pe: Tensor) -> str:
    """Para cada linha de ``delta`` ``(n, d)``, qual linha de ``pe`` foi somada (ou "?")."""
    distance = (delta.double()[:, None, :] - pe.double()[None, :, :]).abs().amax(-1)  # (n, L)
    values, indices = distance.min(-1)
    found = [
        str(i) if v <= _ATOL else "?"
        for v, i in zip(values.tolist(), indices.tolist(), strict=True)
    ]
    return "[" + ", ".join(found) + "]"


@exercise("Exercício 3 (posições com preenchimento à esquerda)")
def check_add_positional_left_padded(
    add_positional_left_padded: Callable[[Tensor, Tensor, Tensor], Tensor],
) -> None:
    """``f(x (b, t, d), pe (max_len, d), is_pad (b, t)) -> (b, t, d)``.

    Nos tokens reais, ``x + pe[posição]``, com a posição contada a partir do primeiro
    token real da linha; nas posições de ``<pad>`` qualquer valor serve.
    """
    _check_no_loops(
        add_positional_left_padded,
        "as posições",
        "a soma cumulativa (cumsum) de ~is_pad e um índice (b, t) em pe",
    )
    generator = torch.Generator().manual_seed(5)
    for pads, t, d in _PAD_CASES:
        b = len(pads)
        is_pad = _left_pad_mask(pads, t)  # (b, t)
        real = ~is_pad  # (b, t)
        where = f"para x de forma {(b, t, d)} (b, t, d) e <pad>s por linha {pads}"
        pe = sinusoidal_encoding(_PAD_MAX_LEN, d)  # (max_len, d)
        leaf = torch.randn(b, t, d, generator=generator, requires_grad=True)
        x = leaf * 1.0  # (b, t, d): como a saída de um nn.Embedding (não é folha do grafo)
        original = leaf.detach().clone()
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)  # (b, t)
        expected = original + pe[positions]  # (b, t, d)
        try:
            received = _call(
                add_positional_left_padded,
                x,
                pe,
                is_pad.clone(),
                call="add_positional_left_padded(x, pe, is_pad)",
                hint=_PAD_HINT,
            )
        except ExerciseError as err:
            if "in-place" in str(err) or "inplace" in str(err):
                raise ExerciseError(
                    f"{where}: sua função tentou modificar um tensor no lugar (x += ..., "
                    "x.add_(...) ou x[...] = ...), e o PyTorch recusou. Devolva um tensor "
                    "novo: return x + pe[positions]."
                ) from err
            raise
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            torch.equal(x.detach(), original),
            f"{where}: sua função modificou x no lugar (x += ... ou x[...] = ...). Quem "
            "chamou perde o x original (por exemplo, para uma conexão residual); devolva "
            "um tensor novo: return x + pe[positions].",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where}: esperava a forma {(b, t, d)}; recebi {_shape(received)}.",
        )
        got = received.detach()
        if not _close(got[real], expected[real]):
            batch_bug = original + pe[:b][:, None, :]  # (b, 1, d) espalhado sobre t
            expect(
                not _close(got, batch_bug),  # o tensor inteiro: o erro soma PE(j) também nos <pad>
                f"{where}: cada token recebeu a PE do índice do lote (a linha j do lote "
                "ganhou PE(j) em todas as posições). As posições estão no eixo 1 de x.",
            )
            ignored = original + pe[:t][None]  # (b, t, d): posições 0..t-1 em toda linha
            expect(
                not _close(got[real], ignored[real]),
                f"{where}: você somou pe[0:t] em toda linha, como se não houvesse "
                "preenchimento: o primeiro token real de uma linha com n <pad>s ficou na "
                "posição n. Ele deve receber PE(0): conte os tokens reais da linha "
                "(a soma cumulativa de ~is_pad) e subtraia 1.",
            )
            off_by_one = original + pe[positions + 1]
            expect(
                not _close(got[real], off_by_one[real]),
                f"{where}: o primeiro token real de cada linha recebeu PE(1), não PE(0): a "
                "soma cumulativa de ~is_pad vale 1 no primeiro token real; subtraia 1.",
            )
            row = next(j for j in range(b) if not _close(got[j][real[j]], expected[j][real[j]]))
            used = _positions_used(got[row][real[row]] - original[row][real[row]], pe)
            wanted = positions[row][real[row]].tolist()
            expect(
                False,
                f"{where}: na linha {row} (is_pad = {is_pad[row].int().tolist()}), os "
                f"tokens reais deveriam receber as linhas {wanted} de pe, mas receberam "
                f"{used} (? = nenhuma linha de pe). Lembre que is_pad é True onde há <pad>.",
            )
        expect(
            received.requires_grad,
            f"{where}: a saída não tem gradiente (requires_grad=False): não use "
            "torch.no_grad() nem .detach() no caminho de x; o gradiente precisa chegar "
            "aos embeddings.",
        )
        received.sum().backward()
        expect(
            leaf.grad is not None and torch.allclose(leaf.grad, torch.ones_like(leaf)),
            f"{where}: o gradiente de saída.sum() em relação a x deveria ser 1 em toda "
            "parte (somar uma constante não muda o gradiente); a sua função multiplica "
            "ou corta x em algum lugar.",
        )
