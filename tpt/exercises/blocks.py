"""Exercícios de notebooks/07_blocos.ipynb, na ordem do notebook.

1. :func:`check_ffn_as_convolution`: a FFN por posição escrita como duas convoluções de
   núcleo 1, com os pesos de um ``tpt.FeedForward``. Regra (pelas operações ATen que
   rodam): exatamente duas ``convolution`` e nenhuma multiplicação de matrizes.
2. :func:`check_parallel_block`: o bloco **paralelo** (GPT-J, PaLM): as duas subcamadas
   leem a mesma entrada normalizada e as duas saídas somam no fluxo residual.
3. :func:`check_encoder_layer_flops`: os FLOPs das multiplicações de matrizes de uma
   ``tpt.EncoderLayer`` numa sequência de ``t`` tokens, como fórmula; a conferência mede
   com ``torch.utils.flop_counter.FlopCounterMode`` em tamanhos sorteados. Regra: a
   resposta é uma conta com números, sem rodar operações do PyTorch.

Todas chamam a resposta com as entradas de verdade (e conferem que nada mudou no lugar),
sorteiam casos novos a cada execução além dos fixos, e só dão um diagnóstico quando a
variante errada correspondente foi calculada e bateu com a resposta.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from tpt.attention import MultiHeadAttention
from tpt.exercises.core import ExerciseError, exercise, expect, expect_close
from tpt.exercises.guards import call_answer, case_generator, check_gradients, randint
from tpt.exercises.rules import record_ops
from tpt.feedforward import FeedForward
from tpt.layers import EncoderLayer
from tpt.norms import LayerNorm
from tpt.numfmt import fmt

__all__ = ["check_ffn_as_convolution", "check_parallel_block", "check_encoder_layer_flops"]

_ATOL = 1e-5
# Gradientes através da atenção: o caminho rápido (F.scaled_dot_product_attention) e o
# explícito diferem no arredondamento, e o backward da LayerNorm amplia a diferença.
_GRAD_ATOL = 1e-4

# Núcleos ATen de convolução (F.conv1d, torch.conv1d e nn.Conv1d chegam a um deles).
_CONV_OPS = frozenset({"convolution", "_convolution", "conv1d", "mkldnn_convolution"})
# Núcleos de multiplicação de matrizes (F.linear, @, matmul, einsum, nn.Linear...).
_MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv"})


def _randomize(module: torch.nn.Module, generator: torch.Generator) -> torch.nn.Module:
    """Pesos e vieses sorteados (normas com gamma e beta longe de 1 e 0), em modo de avaliação."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            center = 1.0 if name.endswith("weight") and param.dim() == 1 else 0.0
            scale = 0.5 if param.dim() == 1 else param.shape[-1] ** -0.5
            param.copy_(center + scale * torch.randn(param.shape, generator=generator))
    return module.eval()


# --------------------------------------------------------------------------------------
# Exercício 1: a FFN como duas convoluções de núcleo 1
# --------------------------------------------------------------------------------------
def _ffn_cases(generator: torch.Generator, seed: int) -> list[tuple[int, int, int, int, str]]:
    """(b, t, d, d_ff, descrição): t = d (a conv sem transpor roda) e dois casos sorteados."""
    cases = [(3, 8, 8, 16, "caso fixo com t = d"), (2, 5, 8, 32, "caso fixo")]
    for _ in range(2):
        d = randint(generator, 2, 12)
        cases.append(
            (
                randint(generator, 1, 3),
                randint(generator, 2, 9),
                d,
                randint(generator, d, 4 * d),
                f"caso sorteado (semente {seed})",
            )
        )
    return cases


def _ffn_variants(x: Tensor, ffn: FeedForward) -> list[tuple[str, Tensor]]:
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    with torch.no_grad():
        variants = [
            (
                "faltou o ReLU entre as duas convoluções: FFN(x) = max(0, x W1 + b1) W2 + b2.",
                (x @ w1.T + b1) @ w2.T + b2,
            ),
            (
                "faltaram os vieses: passe ffn.linear1.bias e ffn.linear2.bias como terceiro "
                "argumento de F.conv1d.",
                torch.relu(x @ w1.T) @ w2.T,
            ),
        ]
        if x.shape[1] == x.shape[2]:  # t = d: sem transpor, a conv roda sobre as posições
            mixed = F.conv1d(torch.relu(F.conv1d(x, w1[..., None], b1)), w2[..., None], b2)
            variants.append(
                (
                    "a saída ficou no formato da conv1d, (b, d, t) (com t = d, a forma não "
                    "acusa). Transponha de volta para (b, t, d) no fim.",
                    ffn(x).transpose(1, 2),
                )
            )
            variants.append(
                (
                    "com t = d a conv rodou sem erro, mas sobre o eixo errado: você não "
                    "transpôs x para (b, d, t), e a convolução misturou posições em vez de "
                    "características.",
                    mixed,
                )
            )
    return variants


@exercise("Exercício 1 (FFN como convolução de núcleo 1)")
def check_ffn_as_convolution(ffn_conv: Callable[[Tensor, FeedForward], Tensor]) -> None:
    """``ffn_conv(x (b, t, d), ffn) -> (b, t, d)`` igual a ``ffn(x)``, com duas convoluções."""
    generator, seed = case_generator()
    with torch.random.fork_rng(devices=[]):
        for b, t, d, d_ff, label in _ffn_cases(generator, seed):
            where = f"No {label}, x de forma {(b, t, d)} e d_ff = {d_ff}"
            ffn = _randomize(FeedForward(d, d_ff), generator)
            x = torch.randn(b, t, d, generator=generator)
            with torch.no_grad():
                expected = ffn(x)  # (b, t, d)
            with record_ops() as ops:
                received = call_answer(
                    ffn_conv,
                    {"x": x, "ffn": ffn},
                    where,
                    hint="F.conv1d espera a entrada (b, canais, t) = (b, d, t) e o peso "
                    "(canais_saída, canais_entrada, 1): ffn.linear1.weight.unsqueeze(-1).",
                )
            matmuls = sorted(ops.used(_MATMUL_OPS))
            expect(
                not matmuls,
                f"{where}, sua resposta multiplicou matrizes (rodou {', '.join(matmuls)}: é o "
                "que ffn(x), ffn.linear1(x), F.linear e @ fazem). O exercício pede as duas "
                "camadas como convoluções de núcleo 1.",
            )
            convs = ops.count(_CONV_OPS)
            expect(
                convs == 2,
                f"{where}, contei {convs} convolução(ões) rodando; o exercício pede exatamente "
                "duas, uma para cada camada linear da FFN (d -> d_ff e d_ff -> d).",
            )
            expect(
                not (
                    isinstance(received, Tensor) and tuple(received.shape) == (b, d, t) != (b, t, d)
                ),
                f"{where}, a saída saiu com forma {(b, d, t)} = (b, d, t), o formato da conv1d. "
                "Transponha de volta para (b, t, d) no fim.",
            )
            expect_close(received, expected, where, atol=_ATOL, variants=_ffn_variants(x, ffn))
            check_gradients(ffn_conv, lambda x, m: m(x), {"x": x, "ffn": ffn}, where, atol=_ATOL)


# --------------------------------------------------------------------------------------
# Exercício 2: o bloco paralelo (GPT-J)
# --------------------------------------------------------------------------------------
def _parallel_reference(x: Tensor, self_attn, ffn, norm) -> Tensor:
    h = norm(x)  # (b, t, d): a mesma entrada normalizada para as duas subcamadas
    return x + self_attn(h)[0] + ffn(h)


def _parallel_variants(x: Tensor, attn, ffn, norm) -> list[tuple[str, Tensor]]:
    def a(z: Tensor) -> Tensor:
        return attn(z)[0]

    with torch.no_grad():
        y = x + a(norm(x))
        return [
            (
                "você escreveu o bloco sequencial da pré-normalização (a FFN lê "
                "norm(x + atenção)). No bloco paralelo as duas subcamadas leem o mesmo "
                "h = norm(x), e as duas saídas somam em x.",
                y + ffn(norm(y)),
            ),
            (
                "faltou a conexão residual: some o x original às duas saídas.",
                a(norm(x)) + ffn(norm(x)),
            ),
            (
                "a residual somou o fluxo normalizado norm(x); ela soma o x original, que "
                "nunca passa pela norma.",
                norm(x) + a(norm(x)) + ffn(norm(x)),
            ),
            (
                "as subcamadas leram x sem normalizar: a norma vem antes delas, h = norm(x).",
                x + a(x) + ffn(x),
            ),
            (
                "você normalizou a soma no fim (pós-normalização); no bloco paralelo a "
                "norma fica na entrada das subcamadas e a saída termina na soma.",
                norm(x + a(x) + ffn(x)),
            ),
            (
                "a FFN leu a saída da atenção: no bloco paralelo ela lê h = norm(x), "
                "ao lado da atenção, não depois dela.",
                x + a(norm(x)) + ffn(a(norm(x))),
            ),
        ]


@exercise("Exercício 2 (bloco paralelo)")
def check_parallel_block(parallel_block: Callable[..., Tensor]) -> None:
    """``parallel_block(x (b, t, d), self_attn, ffn, norm) -> (b, t, d)``."""
    generator, seed = case_generator()
    cases = [(2, 5, 8, 2, 32, "caso fixo")]
    for _ in range(2):
        h = randint(generator, 1, 4)
        d = h * randint(generator, max(2, 4 // h), 6)  # d ≥ 4: LayerNorm de 2 números é degenerada
        cases.append(
            (
                randint(generator, 1, 3),
                randint(generator, 2, 7),
                d,
                h,
                randint(generator, d, 4 * d),
                f"caso sorteado (semente {seed})",
            )
        )
    with torch.random.fork_rng(devices=[]):
        for b, t, d, h, d_ff, label in cases:
            where = f"No {label}, x de forma {(b, t, d)}, {h} cabeça(s) e d_ff = {d_ff}"
            attn = _randomize(MultiHeadAttention(d, h), generator)
            ffn = _randomize(FeedForward(d, d_ff), generator)
            norm = _randomize(LayerNorm(d), generator)
            x = torch.randn(b, t, d, generator=generator)
            args = {"x": x, "self_attn": attn, "ffn": ffn, "norm": norm}
            with torch.no_grad():
                expected = _parallel_reference(x, attn, ffn, norm)
            received = call_answer(
                parallel_block,
                args,
                where,
                hint="Lembre que self_attn(h) devolve um par (saída, pesos).",
            )
            expect_close(
                received,
                expected,
                where,
                atol=_ATOL,
                variants=_parallel_variants(x, attn, ffn, norm),
            )
            check_gradients(parallel_block, _parallel_reference, args, where, atol=_GRAD_ATOL)


# --------------------------------------------------------------------------------------
# Exercício 3: os FLOPs de uma camada do encoder
# --------------------------------------------------------------------------------------
def _measured_flops(d: int, h: int, d_ff: int, t: int) -> int:
    """FLOPs das multiplicações de matrizes de uma ``EncoderLayer`` em ``(1, t, d)``, medidos."""
    layer = EncoderLayer(d, h, d_ff, dropout=0.0, fused=False).eval()  # caminho explícito
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(torch.zeros(1, t, d))
    return int(counter.get_total_flops())


# Enganos comuns, cada um como a fórmula errada que ele produz (calculada, não adivinhada).
_FLOP_MISTAKES: list[tuple[str, Callable[[int, int, int], float]]] = [
    (
        "sua conta dá a metade: você contou multiplicações-e-somas (MACs). Cada termo de "
        "um produto de matrizes custa 2 FLOPs, uma multiplicação e uma soma.",
        lambda d, f, t: (8 * t * d * d + 4 * t * t * d + 4 * t * d * f) / 2,
    ),
    (
        "faltam as duas multiplicações da própria atenção, Q Kᵀ e pesos · V (4 t² d no "
        "total): são elas que crescem com o quadrado de t.",
        lambda d, f, t: 8 * t * d * d + 4 * t * d * f,
    ),
    (
        "falta uma das duas multiplicações da atenção (Q Kᵀ, t x d por d x t, e pesos · V, "
        "t x t por t x d): cada uma custa 2 t² d.",
        lambda d, f, t: 8 * t * d * d + 2 * t * t * d + 4 * t * d * f,
    ),
    (
        "falta a projeção de saída W_O (2 t d²): são quatro projeções d x d, não três.",
        lambda d, f, t: 6 * t * d * d + 4 * t * t * d + 4 * t * d * f,
    ),
    (
        "sua conta usa d_ff = 4d fixo: use o argumento d_ff (4d é só a escolha do artigo).",
        lambda d, f, t: 8 * t * d * d + 4 * t * t * d + 16 * t * d * d,
    ),
    (
        "falta uma das duas matrizes da FFN: são W1 (d x d_ff) e W2 (d_ff x d), 2 t d d_ff cada.",
        lambda d, f, t: 8 * t * d * d + 4 * t * t * d + 2 * t * d * f,
    ),
    (
        "sua conta é por token (dividida por t); o exercício pede a sequência inteira de t tokens.",
        lambda d, f, t: 8 * d * d + 4 * t * d + 4 * d * f,
    ),
]


def _flop_cases(generator: torch.Generator, seed: int) -> list[tuple[int, int, int, int, str]]:
    """(d, h, d_ff, t, descrição): t = 1, d_ff != 4d, e três casos sorteados."""
    cases = [(8, 2, 32, 1, "caso fixo"), (12, 3, 20, 7, "caso fixo"), (16, 4, 64, 16, "caso fixo")]
    for _ in range(3):
        h = randint(generator, 1, 4)
        d = h * randint(generator, 2, 8)
        cases.append(
            (
                d,
                h,
                randint(generator, 1, 6 * d),
                randint(generator, 1, 24),
                f"sorteado, semente {seed}",
            )
        )
    return cases


def _as_count(value: Any, where: str) -> int:
    """Um número inteiro (int, inteiro do numpy, ou float sem parte fracionária)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and not isinstance(value, numbers.Integral):
        ok = float(value).is_integer()
    expect(
        ok,
        f"{where}, esperava um número inteiro de FLOPs; recebi {value!r} "
        f"({type(value).__name__}). Use só +, * e ** com d, d_ff e t.",
    )
    return int(value)


@exercise("Exercício 3 (FLOPs de uma camada do encoder)")
def check_encoder_layer_flops(encoder_layer_flops: Callable[[int, int, int], Any]) -> None:
    """``encoder_layer_flops(d, d_ff, t) -> int`` igual ao que ``FlopCounterMode`` mede."""
    generator, seed = case_generator()
    results = []  # (d, d_ff, t, medido, recebido)
    with torch.random.fork_rng(devices=[]):
        for d, h, d_ff, t, label in _flop_cases(generator, seed):
            where = f"Para d = {d}, d_ff = {d_ff}, t = {t} ({label})"
            with record_ops() as ops:
                received = call_answer(encoder_layer_flops, {"d": d, "d_ff": d_ff, "t": t}, where)
            expect(
                ops.total == 0,
                f"{where}, sua resposta rodou operações do PyTorch "
                f"({', '.join(sorted(ops.counts))}): criou tensores ou módulos para medir. "
                "O exercício pede a fórmula em d, d_ff e t, que vale também para tamanhos que "
                "nem caberiam na memória.",
            )
            results.append((d, d_ff, t, _measured_flops(d, h, d_ff, t), _as_count(received, where)))
    wrong = [r for r in results if r[3] != r[4]]
    if not wrong:
        return
    d, d_ff, t, measured, received = wrong[0]
    where = (
        f"Para d = {d}, d_ff = {d_ff}, t = {t}: o FlopCounterMode mediu {fmt(measured)} FLOPs; "
        f"sua fórmula deu {fmt(received)}"
    )
    for diagnosis, formula in _FLOP_MISTAKES:
        if all(r[4] == formula(r[0], r[1], r[2]) for r in results):
            raise ExerciseError(f"{where}. {diagnosis[0].upper()}{diagnosis[1:]}")
    raise ExerciseError(
        f"{where}. Some as multiplicações de matrizes: as quatro projeções, as duas da "
        "atenção (que dependem de t²) e as duas da FFN; (m x k) por (k x n) custa 2 m k n."
    )
