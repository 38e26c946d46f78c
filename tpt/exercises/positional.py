"""Conferências dos exercícios de notebooks/05_codificacao_posicional.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_shift_positions`: andar ``k`` posições, ``PE(p) -> PE(p + k) = R(k) PE(p)``,
   aplicando a rotação par a par, **sem montar** a matriz ``(d, d)`` e sem laços, com um
   deslocamento por linha (é assim que o RoPE gira consultas e chaves);
2. :func:`check_rotation_half`: a matriz ``R(k)`` ``(d, d)`` do layout em **metades** (os
   ``d/2`` senos nas primeiras colunas, os ``d/2`` cossenos nas últimas);
3. :func:`check_add_positional_left_padded`: somar a codificação a um lote ``(b, t, d)``
   preenchido **à esquerda**, com o primeiro token real de cada linha na posição 0.

As regras são conferidas pelo que roda (``tpt.exercises.rules``): operações gravadas
durante a chamada ("sem montar (d, d)"), o número de operações em dois tamanhos ("sem
laços"). As entradas de quem chama não podem mudar, o gradiente é comparado com o da
referência onde a conta fica num caminho treinável, e além dos casos fixos cada execução
sorteia casos novos (a semente vai na mensagem). Um diagnóstico ("girou para trás") só
aparece quando a variante errada foi calculada e bateu com a resposta.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tpt.exercises import (
    call_answer,
    case_generator,
    check_gradients,
    exercise,
    expect,
    expect_close,
    op_counts_by_size,
    record_ops,
)
from tpt.exercises.core import ExerciseError, unambiguous
from tpt.numfmt import fmt
from tpt.positional import pe_rotation, sinusoidal_encoding

__all__ = ["check_shift_positions", "check_rotation_half", "check_add_positional_left_padded"]

# Tolerância: a resposta pode fazer as contas em float32 (ângulos até ~50 rad: erro ~1e-6).
_ATOL = 1e-5


def _frequencies(embed_dim: int, theta: float, exponent_scale: float = 2.0) -> Tensor:
    """``1 / theta^(c i / d)`` para ``i = 0..d/2-1`` (``c = 2`` é o certo): ``(d/2,)``."""
    i = torch.arange(embed_dim // 2, dtype=torch.float64)  # (d/2,)
    return theta ** (-exponent_scale * i / embed_dim)  # (d/2,)


def _theta(theta: float) -> str:
    return fmt(theta, 0)


def _expect_finite(received: object, where: str, name: str, fact: str) -> None:
    """NaN ou infinito na resposta: diz onde e quantos, antes de comparar valores.

    Uma "maior diferença" infinita não diz nada ao aluno; a posição do primeiro número não
    finito e a contagem dizem. ``fact`` é o que se sabe dos valores certos (por exemplo,
    "cossenos e senos, entre -1 e 1").
    """
    if not isinstance(received, Tensor) or not received.is_floating_point():
        return  # tipo e forma: quem explica é o expect_close
    bad = ~torch.isfinite(received.detach())
    if not bool(bad.any()):
        return
    first = tuple(bad.nonzero()[0].tolist())
    value = received.detach()[first].item()
    kind = "NaN" if value != value else ("+∞" if value > 0 else "-∞")
    raise ExerciseError(
        f"{where}, {name} tem {fmt(int(bad.sum()))} número(s) não finito(s) (NaN ou ±∞); o "
        f"primeiro está na posição {list(first)} e vale {kind}. {fact}"
    )


# --------------------------------------------------------------------------------------
# Exercício 1: andar k posições sem montar R(k)
# --------------------------------------------------------------------------------------
def _shift(vectors: Tensor, angles: Tensor) -> Tensor:
    """Gira cada par ``(x_2i, x_2i+1)`` pelo ângulo ``angles[..., i]`` como ``R(k)``.

    ``vectors`` ``(n, d)`` e ``angles`` ``(n, d/2)``: ``(s, c) -> (s cos + c sin, c cos - s sin)``.
    """
    s, c = vectors[..., 0::2], vectors[..., 1::2]  # (n, d/2) cada
    cos, sin = torch.cos(angles), torch.sin(angles)  # (n, d/2)
    return torch.stack((s * cos + c * sin, c * cos - s * sin), dim=-1).flatten(-2)  # (n, d)


def _shift_reference(vectors: Tensor, offsets: Tensor, theta: float) -> Tensor:
    angles = offsets.double()[:, None] * _frequencies(vectors.shape[-1], theta)  # (n, d/2)
    return _shift(vectors, angles.to(vectors.dtype))  # (n, d)


def _shift_variants(vectors: Tensor, offsets: Tensor, theta: float) -> list[tuple[str, Tensor]]:
    d = vectors.shape[-1]
    k = offsets.double()[:, None]  # (n, 1)
    s, c = vectors[..., : d // 2], vectors[..., d // 2 :]  # pares (i, d/2 + i)
    angles = (k * _frequencies(d, theta)).to(vectors.dtype)  # (n, d/2)
    half = torch.cat((s * angles.cos() + c * angles.sin(), c * angles.cos() - s * angles.sin()), -1)
    return [
        (
            "girou para o lado errado: cada linha foi para PE(p - k), não PE(p + k) (é R(-k), "
            "a transposta). Refaça sin(a + b) e cos(a + b) da seção 5 e confira os sinais.",
            _shift(vectors, -angles),
        ),
        (
            "todos os pares giraram o mesmo ângulo k. O par i gira k·ω_i, com "
            "ω_i = 1/θ^(2i/d): cada par tem a sua frequência.",
            _shift(vectors, k.expand(-1, d // 2).to(vectors.dtype)),
        ),
        (
            "a frequência usa o expoente i/d; o certo é 2i/d (ω_i = 1/θ^(2i/d), com "
            "torch.arange(0, d, 2) / d).",
            _shift(vectors, (k * _frequencies(d, theta, 1.0)).to(vectors.dtype)),
        ),
        (
            "você girou os pares (i, d/2 + i) do layout em metades. Na tabela do tpt, seno e "
            "cosseno do par i estão nas colunas vizinhas 2i e 2i + 1.",
            half,
        ),
    ]


def _shift_cases() -> list[tuple[str, Tensor, Tensor, float]]:
    """(descrição, vetores (n, d) float64, deslocamentos (n,) long, theta)."""
    table = sinusoidal_encoding(60, 8, dtype=torch.float64)  # (60, 8)
    positions = torch.tensor([0, 3, 10, 25, 40])
    offsets = torch.tensor([1, 5, -4, 0, 17])
    cases = [
        (
            "Para linhas da tabela senoidal (d = 8), p = [0, 3, 10, 25, 40], k = [1, 5, -4, 0, 17]",
            table[positions],
            offsets,
            10000.0,
        ),
    ]
    g = torch.Generator().manual_seed(5)
    cases.append(
        (
            "Para vetores quaisquer (3, 6), θ = 100",
            torch.randn(3, 6, generator=g, dtype=torch.float64),
            torch.tensor([2, -7, 30]),
            100.0,
        )
    )
    g, seed = case_generator()
    for _ in range(3):
        d = 2 * int(torch.randint(4, 9, (), generator=g))  # 8..16
        n = int(torch.randint(2, 8, (), generator=g))  # 2..7: nunca igual a d
        theta = [10000.0, 100.0, 500.0][int(torch.randint(3, (), generator=g))]
        vectors = torch.randn(n, d, generator=g, dtype=torch.float64)
        offsets = torch.randint(-30, 31, (n,), generator=g)
        where = (
            f"No caso sorteado com vetores {(n, d)}, k = {offsets.tolist()}, "
            f"θ = {_theta(theta)} (semente {seed})"
        )
        cases.append((where, vectors, offsets, theta))
    return cases


@exercise("Exercício 1 (andar k posições sem montar R(k))")
def check_shift_positions(shift_positions: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """``shift_positions(vectors (n, d), offsets (n,), theta) -> (n, d)``: ``R(k_n) v_n``."""
    for where, vectors, offsets, theta in _shift_cases():
        d = vectors.shape[-1]
        args = {"vectors": vectors, "offsets": offsets, "theta": theta}
        with record_ops() as ops:
            received = call_answer(
                shift_positions,
                args,
                where,
                "Confira as formas: offsets (n,) vira (n, 1) para multiplicar as frequências "
                "(d/2,), e vectors[:, 0::2] e vectors[:, 1::2] são os senos e cossenos (n, d/2).",
            )
        built = {name for name, shape in ops.outputs if shape[-2:] == (d, d)}
        expect(
            not built,
            f"{where}, sua função montou uma matriz {(d, d)} (operações {sorted(built)}): o "
            "exercício pede a rotação aplicada par a par, com O(d) contas por vetor, sem a "
            "R(k) inteira (que tem d² números, quase todos zero).",
        )
        expected = _shift_reference(vectors, offsets, theta)
        _expect_finite(
            received,
            where,
            "o resultado",
            "Girar vetores finitos dá vetores finitos, com a mesma norma de cada linha.",
        )
        expect_close(
            received,
            expected,
            where,
            atol=_ATOL,
            name="o resultado",
            variants=unambiguous(_shift_variants(vectors, offsets, theta), _ATOL),
        )
        check_gradients(
            shift_positions, _shift_reference, args, where, wrt=("vectors",), atol=_ATOL
        )
    small, large = op_counts_by_size(
        shift_positions,
        lambda n: (torch.randn(n, 2 * n + 2, dtype=torch.float64), torch.arange(n) - 1, 10000.0),
        (3, 8),
    )
    expect(
        small == large,
        f"Sem laços: com 3 vetores de largura 8 a sua função executou {small} operações do "
        f"PyTorch, e com 8 vetores de largura 18, {large}. Um laço em Python (for, map, "
        "compreensão ou função auxiliar chamada por linha ou por par) faz o número crescer; "
        "trate todas as linhas e todos os pares de uma vez, com fatias e broadcasting.",
    )


# --------------------------------------------------------------------------------------
# Exercício 2: a rotação R(k) do layout em metades
# --------------------------------------------------------------------------------------
def _half_rotation(
    offset: int, embed_dim: int, theta: float, exponent_scale: float = 2.0
) -> Tensor:
    """``R(k)`` do layout em metades, ``(d, d)`` em float64."""
    angles = offset * _frequencies(embed_dim, theta, exponent_scale)  # (d/2,)
    return _blocks(torch.cos(angles), torch.sin(angles))


def _blocks(cos: Tensor, sin: Tensor) -> Tensor:
    cos, sin = torch.diag(cos), torch.diag(sin)  # (d/2, d/2) cada
    return torch.cat((torch.cat((cos, sin), 1), torch.cat((-sin, cos), 1)), 0)  # (d, d)


def _rotation_cases() -> list[tuple[str, int, int, float]]:
    cases = [(1, 4, 10000.0), (3, 8, 10000.0), (5, 6, 100.0), (0, 4, 10000.0), (-2, 8, 10000.0)]
    found = [(f"Para offset k={k}, embed_dim={d}, θ={_theta(th)}", k, d, th) for k, d, th in cases]
    g, seed = case_generator()
    for _ in range(3):
        k = int(torch.randint(-25, 26, (), generator=g))
        d = 2 * int(torch.randint(2, 9, (), generator=g))
        theta = [10000.0, 100.0, 1000.0][int(torch.randint(3, (), generator=g))]
        found.append(
            (
                f"No caso sorteado offset k={k}, embed_dim={d}, θ={_theta(theta)} (semente {seed})",
                k,
                d,
                theta,
            )
        )
    return found


@exercise("Exercício 2 (rotação R(k) do layout em metades)")
def check_rotation_half(rotation_half: Callable[[int, int, float], Tensor]) -> None:
    """``rotation_half(offset, embed_dim, theta) -> (d, d)`` com ``PE(p + k) = R(k) PE(p)``."""
    for where, k, d, theta in _rotation_cases():
        received = call_answer(
            rotation_half,
            {"offset": k, "embed_dim": d, "theta": theta},
            where,
            "Confira as formas: os cossenos e senos dos d/2 pares formam quatro blocos "
            "diagonais (d/2, d/2), e a matriz inteira é (d, d).",
        )
        variants = []
        if k != 0:
            variants.append(
                (
                    "essa é a R(k) do layout intercalado, com blocos 2 × 2 na diagonal. No layout "
                    "em metades, o seno do par i está na coluna i e o cosseno na coluna d/2 + i: "
                    "os quatro números do par i ficam em R[i, i], R[i, d/2 + i], R[d/2 + i, i] e "
                    "R[d/2 + i, d/2 + i].",
                    pe_rotation(k, d, theta, dtype=torch.float64),
                )
            )
            if k > 0:
                variants.append(
                    (
                        "sua matriz leva PE(p) a PE(p - k): é a transposta, R(-k). Refaça "
                        "sin(a + b) = sin a cos b + cos a sin b e cos(a + b) = cos a cos b - "
                        "sin a sin b; o -sin b fica na metade de baixo (linhas dos cossenos).",
                        _half_rotation(-k, d, theta),
                    )
                )
            else:
                variants.append(
                    (
                        f"com k = {k} negativo, sua matriz é a de k = {-k}: o sinal de offset se "
                        "perdeu (abs?). R(-k) anda para trás e é a transposta de R(k).",
                        _half_rotation(-k, d, theta),
                    )
                )
            variants.append(
                (
                    "todos os pares giram o mesmo ângulo k. O par i gira k·ω_i, com "
                    "ω_i = 1/θ^(2i/d): cada par tem a sua frequência.",
                    _blocks(
                        torch.full((d // 2,), float(k)).cos().double(),
                        torch.full((d // 2,), float(k)).sin().double(),
                    ),
                )
            )
            variants.append(
                (
                    "a frequência usa o expoente i/d; o certo é 2i/d (ω_i = 1/θ^(2i/d)).",
                    _half_rotation(k, d, theta, exponent_scale=1.0),
                )
            )
            if theta != 10000.0:
                variants.append(
                    (
                        f"essa é a matriz de θ = 10.000, não de θ = {_theta(theta)}: use o "
                        "argumento theta na frequência.",
                        _half_rotation(k, d, 10000.0),
                    )
                )
        _expect_finite(
            received,
            where,
            "a sua matriz",
            "Os números de R(k) são cossenos e senos (e zeros), todos entre -1 e 1.",
        )
        expect_close(
            received,
            _half_rotation(k, d, theta),
            where,
            atol=_ATOL,
            name="o resultado",
            variants=unambiguous(variants, _ATOL),
        )


# --------------------------------------------------------------------------------------
# Exercício 3: posições com preenchimento à esquerda
# --------------------------------------------------------------------------------------
_PAD_HINT = (
    "Confira os tipos e as formas: is_pad é booleano (b, t); as posições que indexam pe "
    "precisam ser inteiras (torch.long) e ter forma (b, t), e pe[positions] tem forma (b, t, d)."
)


def _left_pad_mask(pads: list[int], t: int) -> Tensor:
    """``(b, t)`` booleana, ``True`` nos ``pads[j]`` primeiros elementos da linha ``j``."""
    return torch.arange(t)[None, :] < torch.tensor(pads)[:, None]  # (b, t)


def _left_positions(is_pad: Tensor) -> Tensor:
    return ((~is_pad).long().cumsum(-1) - 1).clamp(min=0)  # (b, t)


def _left_reference(x: Tensor, pe: Tensor, is_pad: Tensor) -> Tensor:
    """Nos tokens reais ``x + pe[posição]``; nos ``<pad>``, 0 (o valor ali não importa)."""
    out = x + pe[_left_positions(is_pad)]  # (b, t, d)
    return out.masked_fill(is_pad[..., None], 0.0)


def _pad_cases() -> list[tuple[str, list[int], int, int]]:
    fixed = [([0, 2, 1], 5, 8), ([1, 0], 4, 6), ([0, 0, 0, 0, 0, 0], 3, 4), ([3, 0, 1, 5], 6, 8)]
    cases = [(f"Para x {(len(p), t, d)} com <pad>s por linha {p}", p, t, d) for p, t, d in fixed]
    g, seed = case_generator()
    for _ in range(3):
        b, t = (int(v) for v in torch.randint(2, 8, (2,), generator=g))
        d = 2 * int(torch.randint(2, 6, (), generator=g))
        pads = torch.randint(0, t, (b,), generator=g).tolist()  # ao menos 1 token real
        cases.append(
            (
                f"No caso sorteado x {(b, t, d)} com <pad>s por linha {pads} (semente {seed})",
                pads,
                t,
                d,
            )
        )
    return cases


def _real_only(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    """A saída só nos tokens reais (o valor nos ``<pad>`` é livre): ``(n_reais, d)``."""
    return lambda x, pe, is_pad: fn(x, pe, is_pad)[~is_pad]


@exercise("Exercício 3 (posições com preenchimento à esquerda)")
def check_add_positional_left_padded(
    add_positional_left_padded: Callable[[Tensor, Tensor, Tensor], Tensor],
) -> None:
    """``f(x (b, t, d), pe (max_len, d), is_pad (b, t)) -> (b, t, d)``.

    Nos tokens reais, ``x + pe[posição]``, com a posição contada a partir do primeiro
    token real da linha; nas posições de ``<pad>`` qualquer valor serve.
    """
    generator = torch.Generator().manual_seed(5)
    for where, pads, t, d in _pad_cases():
        b = len(pads)
        is_pad = _left_pad_mask(pads, t)  # (b, t)
        real = ~is_pad
        pe = sinusoidal_encoding(16, d, dtype=torch.float64)  # (max_len, d)
        x = torch.randn(b, t, d, generator=generator, dtype=torch.float64)
        args = {"x": x, "pe": pe, "is_pad": is_pad}
        received = call_answer(add_positional_left_padded, args, where, _PAD_HINT)
        got = tuple(received.shape) if isinstance(received, Tensor) else type(received).__name__
        expect(got == (b, t, d), f"{where}, esperava um tensor de forma {(b, t, d)}; recebi {got}.")
        positions = _left_positions(is_pad)
        _expect_finite(
            received[real],
            where,
            "o resultado nos tokens reais",
            "x e pe são finitos, e a soma x + pe[posição] também.",
        )
        variants = [
            (
                "cada token recebeu a PE do índice do lote (a linha j ganhou PE(j) em todas as "
                "posições). As posições estão no eixo 1 de x.",
                (x + pe[:b][:, None, :])[real],
            ),
            (
                "você somou pe[0:t] em toda linha, como se não houvesse preenchimento: o primeiro "
                "token real de uma linha com n <pad>s ficou na posição n. Ele deve receber PE(0).",
                (x + pe[:t][None])[real],
            ),
            (
                "o primeiro token real de cada linha recebeu PE(1), não PE(0): a soma cumulativa "
                "de ~is_pad vale 1 no primeiro token real; subtraia 1.",
                (x + pe[positions + 1])[real],
            ),
            (
                "as posições foram contadas a partir dos <pad> (True em is_pad), não dos tokens "
                "reais: is_pad é True onde há <pad>.",
                (x + pe[(is_pad.long().cumsum(-1) - 1).clamp(min=0)])[real],
            ),
        ]
        expect_close(
            received[real],
            (x + pe[positions])[real],
            where,
            atol=_ATOL,
            name="o resultado nos tokens reais",
            variants=unambiguous(variants, _ATOL),
        )
        check_gradients(
            _real_only(add_positional_left_padded),
            _real_only(_left_reference),
            args,
            where,
            wrt=("x", "pe"),
            atol=_ATOL,
        )

    def make_args(n: int) -> tuple[Tensor, Tensor, Tensor]:
        return torch.randn(n, n + 1, 4), torch.randn(16, 4), _left_pad_mask(list(range(n)), n + 1)

    small, large = op_counts_by_size(add_positional_left_padded, make_args, (3, 8))
    expect(
        small == large,
        f"Sem laços: com x (3, 4, 4) a sua função executou {small} operações do PyTorch, e "
        f"com x (8, 9, 4), {large}. Um laço em Python (for, map, compreensão ou função "
        "auxiliar chamada por linha ou por posição) faz o número crescer; calcule as "
        "posições de todas as linhas de uma vez (a soma cumulativa de ~is_pad).",
    )
