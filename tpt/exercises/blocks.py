"""Exercícios de notebooks/07_blocos.ipynb, na ordem do notebook.

1. :func:`check_ffn_as_convolution`: a FFN por posição escrita como duas convoluções de
   núcleo 1, com os pesos de um ``tpt.FeedForward``. Regra (pelas operações ATen que
   rodam): exatamente duas ``convolution`` e nenhuma multiplicação de matrizes.
2. :func:`check_fold_layernorm`: dobrar o ganho γ e o deslocamento β de uma LayerNorm
   na ``nn.Linear`` seguinte: um ``nn.Linear`` novo com ``new(x̂) = linear(norm(x))``,
   x̂ a padronização sem parâmetros. A conferência aplica ela mesma ``F.linear`` com o
   ``weight`` e o ``bias`` devolvidos; regras: mesmo dtype, sempre com viés, parâmetros
   próprios (pedem gradiente e não dividem memória com os originais, nem no caso
   γ = 1, β = 0 de uma LayerNorm recém-criada, em que a dobra tem os valores da linear).
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
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from tpt.exercises.core import ExerciseError, exercise, expect, expect_close
from tpt.exercises.guards import (
    call_answer,
    case_generator,
    check_gradients,
    randint,
    shared_memory,
)
from tpt.exercises.rules import record_ops
from tpt.feedforward import FeedForward
from tpt.layers import EncoderLayer
from tpt.norms import LayerNorm
from tpt.numfmt import fmt

__all__ = ["check_ffn_as_convolution", "check_fold_layernorm", "check_encoder_layer_flops"]

_ATOL = 1e-5

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
# Exercício 2: dobrar a LayerNorm na linear seguinte
# --------------------------------------------------------------------------------------
def _fold_cases(generator: torch.Generator, seed: int) -> list[tuple[Any, ...]]:
    """(d, n, classe da norma, norma com β, linear com viés, dtype, γ = 1 e β = 0, descrição)."""
    cases: list[tuple[Any, ...]] = [
        (8, 8, nn.LayerNorm, True, True, torch.float32, False, "caso fixo com n = d"),
        (6, 10, LayerNorm, True, False, torch.float32, False, "caso fixo com uma linear sem viés"),
        (
            5,
            7,
            nn.LayerNorm,
            False,
            True,
            torch.float32,
            False,
            "caso fixo com uma LayerNorm sem β",
        ),
        (4, 3, LayerNorm, True, True, torch.float64, False, "caso fixo em float64"),
        # A norma como sai do construtor: a dobra tem os valores da linear original, e um
        # atalho que devolve os tensores dela (em vez de cópias) dá o número certo.
        (6, 5, nn.LayerNorm, True, True, torch.float32, True, "caso fixo com γ = 1 e β = 0"),
    ]
    for _ in range(2):
        d = randint(generator, 2, 12)
        cases.append(
            (
                d,
                randint(generator, 1, 16),
                (nn.LayerNorm, LayerNorm)[randint(generator, 0, 1)],
                bool(randint(generator, 0, 3)),
                bool(randint(generator, 0, 3)),
                torch.float32,
                False,
                f"caso sorteado (semente {seed})",
            )
        )
    return cases


def _fold_modules(d, n, norm_cls, norm_bias, linear_bias, dtype, fresh, generator):
    """Uma LayerNorm e uma linear d -> n de pesos sorteados.

    γ e β longe de 1 e 0, ou, com ``fresh``, os do construtor: γ = 1 e β = 0.
    """
    norm = norm_cls(d, eps=1e-5, bias=norm_bias).to(dtype)
    linear = nn.Linear(d, n, bias=linear_bias, dtype=dtype)
    with torch.no_grad():
        if not fresh:
            norm.weight.copy_(1 + 0.5 * torch.randn(d, generator=generator, dtype=dtype))
            if norm.bias is not None:
                norm.bias.copy_(0.5 * torch.randn(d, generator=generator, dtype=dtype))
        linear.weight.copy_(torch.randn(n, d, generator=generator, dtype=dtype) / d**0.5)
        if linear.bias is not None:
            linear.bias.copy_(0.5 * torch.randn(n, generator=generator, dtype=dtype))
    return norm, linear


def _fold_variants(z: Tensor, norm, linear) -> list[tuple[str, Tensor]]:
    """Saídas, em ``z`` (já padronizado), das dobras erradas mais comuns."""
    w = linear.weight.detach()  # (n, d)
    gamma = norm.weight.detach()  # (d,)
    beta = norm.bias.detach() if norm.bias is not None else torch.zeros_like(gamma)
    b = linear.bias.detach() if linear.bias is not None else torch.zeros(w.shape[0], dtype=w.dtype)
    n, d = w.shape
    folds = [
        (
            "weight e bias são os da linear original: nada foi dobrado (a conferência aplica "
            "F.linear com weight e bias; um forward próprio não entra na conta).",
            w,
            b,
        ),
        ("faltou o γ: o peso novo é W com a coluna i multiplicada por γ_i.", w, w @ beta + b),
        (
            "faltou o β: ele passa pela linear e vira parte do viés novo, W β.",
            w * gamma,
            b,
        ),
        (
            "o viés novo usou o peso já dobrado, (W diag γ) β; o β é somado depois do γ, "
            "então passa só por W: b' = W β + b.",
            w * gamma,
            (w * gamma) @ beta + b,
        ),
        ("faltou o viés da linear original: b' = W β + b.", w * gamma, w @ beta),
        (
            "você dividiu por γ; a norma multiplica x̂ por γ, e o peso novo também.",
            w / gamma,
            w @ beta + b,
        ),
    ]
    if n == d:  # com n = d, a forma não acusa estes enganos
        folds += [
            (
                "você multiplicou as linhas de W por γ (W[j, :] · γ_j); γ multiplica as "
                "entradas da linear, que são as colunas de W: W' = W diag(γ), W[:, i] · γ_i.",
                w * gamma[:, None],
                w @ beta + b,
            ),
            (
                "você somou β direto no viés; ele entra na linear junto com x̂, e sai como W β.",
                w * gamma,
                b + beta,
            ),
            (
                "o viés novo usou Wᵀ β; a saída j recebe Σ_i W[j, i] β_i, ou seja W β.",
                w * gamma,
                w.T @ beta + b,
            ),
        ]
    return [(text, F.linear(z, wf, bf)) for text, wf, bf in folds]


def _type_name(value: Any) -> str:
    """O nome do tipo recebido, com o módulo quando não é do torch (``__main__.MyLinear``)."""
    kind = type(value)
    module = kind.__module__
    if module.startswith("torch") or module == "builtins":
        return kind.__name__
    return f"{module}.{kind.__qualname__}"


@exercise("Exercício 2 (dobrar a LayerNorm na linear)")
def check_fold_layernorm(fold_layernorm: Callable[..., Any]) -> None:
    """``fold_layernorm(norm, linear) -> nn.Linear`` com ``new(x̂) = linear(norm(x))``."""
    generator, seed = case_generator()
    with torch.random.fork_rng(devices=[]):
        for d, n, norm_cls, norm_bias, linear_bias, dtype, fresh, label in _fold_cases(
            generator, seed
        ):
            where = (
                f"No {label} ({'tpt' if norm_cls is LayerNorm else 'nn'}.LayerNorm({d}) "
                f"{'com' if norm_bias else 'sem'} β, nn.Linear({d}, {n}) "
                f"{'com' if linear_bias else 'sem'} viés, {str(dtype).replace('torch.', '')})"
            )
            norm, linear = _fold_modules(
                d, n, norm_cls, norm_bias, linear_bias, dtype, fresh, generator
            )
            new = call_answer(
                fold_layernorm,
                {"norm": norm, "linear": linear},
                where,
                hint="Monte um nn.Linear(d, n) novo e copie os valores com torch.no_grad().",
            )
            expect(
                isinstance(new, nn.Linear),
                f"{where}, esperava um nn.Linear novo; recebi {type(new).__name__}.",
            )
            for name in ("weight", "bias"):
                # Antes de ler qualquer atributo: numa subclasse, até .dtype passa por ela.
                param = getattr(new, name)
                expect(
                    type(param) in (nn.Parameter, Tensor) or not isinstance(param, Tensor),
                    f"{where}, o {name} novo é um {_type_name(param)}, subclasse de "
                    f"{'nn.Parameter' if isinstance(param, nn.Parameter) else 'torch.Tensor'}; "
                    "esperava um nn.Parameter (o tipo que o nn.Linear cria). Uma subclasse "
                    "decide o que F.linear faz com ela (__torch_function__): grave os valores "
                    "no nn.Parameter do nn.Linear novo (copy_ sob torch.no_grad()).",
                )
            expect(
                tuple(new.weight.shape) == (n, d),
                f"{where}, o weight novo tem forma {tuple(new.weight.shape)}; esperava {(n, d)} "
                "= (saídas, entradas), a mesma da linear original.",
            )
            expect(
                new.bias is not None,
                f"{where}, o nn.Linear novo não tem viés (bias=None). A dobra cria um viés "
                "W β + b mesmo quando a linear original não tem: use bias=True.",
            )
            expect(
                new.weight.dtype == dtype and new.bias.dtype == dtype,
                f"{where}, o nn.Linear novo é {str(new.weight.dtype).replace('torch.', '')}, e a "
                f"linear original é {str(dtype).replace('torch.', '')}: crie-o com "
                "dtype=linear.weight.dtype (uma conversão não muda a precisão do modelo).",
            )
            for name in ("weight", "bias"):
                param = getattr(new, name)
                expect(
                    type(param) is nn.Parameter and param.requires_grad,
                    f"{where}, o {name} novo não é um parâmetro que pede gradiente "
                    f"(requires_grad={param.requires_grad}); a camada dobrada continua "
                    "treinável, como qualquer nn.Linear.",
                )
            originals = {
                **{f"norm.{k}": v for k, v in norm.named_parameters()},
                **{f"linear.{k}": v for k, v in linear.named_parameters()},
            }
            shared = shared_memory({"weight": new.weight, "bias": new.bias}, originals)
            expect(
                not shared,
                f"{where}, "
                + " e ".join(f"o {name} novo usa a mesma memória de {old}" for name, old in shared)
                + ": treinar a camada nova mudaria a antiga. "
                + (
                    "Neste caso a dobra tem os valores da linear original (W diag(γ) = W e "
                    "W β + b = b), mas o nn.Linear novo precisa de tensores próprios. "
                    if fresh
                    else ""
                )
                + "Grave os valores no nn.Linear novo (copy_ sob torch.no_grad()) ou use "
                ".clone().",
            )
            x = 3 * torch.randn(2, 5, d, generator=generator, dtype=dtype) + 1  # (b, t, d)
            z = F.layer_norm(x, (d,), eps=norm.eps)  # (b, t, d): x̂, sem γ e β
            with torch.no_grad():
                expected = linear(norm(x))  # (b, t, n)
                received = F.linear(z, new.weight, new.bias)  # (b, t, n)
                variants = _fold_variants(z, norm, linear)
            atol = _ATOL if dtype == torch.float32 else 1e-10
            expect_close(received, expected, where, atol=atol, name="new(x̂)", variants=variants)


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
