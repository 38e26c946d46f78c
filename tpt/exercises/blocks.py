"""Conferências dos exercícios de notebooks/07_blocos.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_ffn_as_convolution`: a FFN por posição escrita como duas
   convoluções de núcleo 1 (``F.conv1d``), com os pesos de um ``tpt.FeedForward``;
   a conferência conta as chamadas de ``F.conv1d`` e proíbe ``F.linear`` (logo, também
   chamar ``ffn(x)`` ou ``ffn.linear1(x)``);
2. :func:`check_pre_norm_layer`: o ``forward`` de uma camada do encoder com
   pré-normalização, a partir das subcamadas prontas; comparado com
   ``nn.TransformerEncoderLayer(norm_first=True)`` com os mesmos pesos. Chamar a camada
   pronta (do tpt ou do PyTorch) é proibido, e cada subcamada deve ser chamada uma vez;
3. :func:`check_encoder_layer_params`: o número de parâmetros de uma camada do encoder
   como fórmula em ``d`` e ``d_ff``, comparado com a contagem dos módulos em vários
   tamanhos; criar módulos durante a conta é proibido.

Cada conferência diz, em português, qual entrada falhou e qual é o erro provável.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.exercises import ExerciseError, count_calls, exercise, expect, forbid
from tpt.feedforward import FeedForward
from tpt.layers import EncoderLayer
from tpt.numfmt import fmt

__all__ = ["check_ffn_as_convolution", "check_pre_norm_layer", "check_encoder_layer_params"]

_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _max_diff(a: Tensor, b: Tensor) -> str:
    return fmt((a.double() - b.double()).abs().max().item(), sci=True)


def _close(received: Tensor, expected: Tensor) -> bool:
    return received.shape == expected.shape and torch.allclose(
        received.double(), expected.double(), atol=_ATOL, rtol=0
    )


# --------------------------------------------------------------------------------------
# Exercício 1: a FFN como duas convoluções de núcleo 1
# --------------------------------------------------------------------------------------

# (b, t, d, d_ff): o primeiro tem t == d (sem transpor, a conv roda, mas mistura posições).
_CONV_CASES: list[tuple[int, int, int, int]] = [
    (3, 8, 8, 16),
    (2, 5, 8, 32),
    (1, 7, 6, 24),
    (2, 3, 4, 12),
]


def _run_conv_answer(
    ffn_conv: Callable[[Tensor, FeedForward], Tensor], x: Tensor, ffn: FeedForward, where: str
) -> tuple[Any, int]:
    """Roda a resposta contando as chamadas de ``F.conv1d`` e recusando ``F.linear``."""
    no_linear = (
        f"{where}: sua resposta chamou F.linear (direto, ou por meio de ffn(x) / "
        "ffn.linear1(x), que usam F.linear por dentro). O exercício pede as contas com "
        "F.conv1d: use só os pesos de ffn.linear1 e ffn.linear2."
    )
    try:
        # F.conv1d e torch.conv1d são a mesma função, com dois nomes: contamos os dois.
        with (
            count_calls(F, "conv1d") as f_calls,
            count_calls(torch, "conv1d") as torch_calls,
            forbid(F, "linear", no_linear),
        ):
            received = ffn_conv(x, ffn)
    except NotImplementedError:
        raise  # o esboço ainda não resolvido (NotImplementedError é um RuntimeError)
    except RuntimeError as err:
        raise ExerciseError(
            f"{where}: o PyTorch reclamou: «{err}». Dica: F.conv1d espera a entrada como "
            "(b, canais, t) = (b, d, t), então transponha x com x.transpose(1, 2); o peso "
            "de uma conv de núcleo 1 tem forma (canais_saída, canais_entrada, 1): "
            "ffn.linear1.weight (d_ff, d) vira ffn.linear1.weight.unsqueeze(-1)."
        ) from None
    return received, f_calls[0] + torch_calls[0]


def _check_ffn_as_convolution(ffn_conv: Callable[[Tensor, FeedForward], Tensor]) -> None:
    """``ffn_conv(x (b, t, d), ffn) -> (b, t, d)`` igual a ``ffn(x)``, com duas ``F.conv1d``."""
    generator = torch.Generator().manual_seed(7)
    for b, t, d, d_ff in _CONV_CASES:
        where = f"para x de forma {(b, t, d)} (b, t, d) e d_ff = {d_ff}"
        torch.manual_seed(100 + d + t)
        ffn = FeedForward(d, d_ff).eval()  # ReLU, sem dropout
        with torch.no_grad():
            for param in ffn.parameters():
                param.normal_(0.0, 0.5, generator=generator)  # vieses diferentes de zero
        x = torch.randn(b, t, d, generator=generator)
        with torch.no_grad():
            expected = ffn(x)  # (b, t, d)

        received, calls = _run_conv_answer(ffn_conv, x, ffn, where)
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            calls == 2,
            f"{where}: contei {calls} chamada(s) de F.conv1d; o exercício pede "
            "exatamente duas, uma para cada camada linear da FFN (d -> d_ff e d_ff -> d).",
        )
        received = received.detach()
        expect(
            not (tuple(received.shape) == (b, d, t) and t != d),
            f"{where}: a saída saiu com forma {_shape(received)} = (b, d, t), o formato da "
            "conv1d. Transponha de volta para (b, t, d) no fim.",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where}: esperava a forma {(b, t, d)}; recebi {_shape(received)}.",
        )
        if _close(received, expected):
            continue
        with torch.no_grad():
            w1, b1 = ffn.linear1.weight, ffn.linear1.bias
            w2, b2 = ffn.linear2.weight, ffn.linear2.bias
            no_relu = (x @ w1.T + b1) @ w2.T + b2
            no_bias = torch.relu(x @ w1.T) @ w2.T
            mixed = None  # sem transpor: com t == d, a conv roda sobre as posições
            if t == d:
                hidden = torch.relu(F.conv1d(x, w1.unsqueeze(-1), b1))  # (b, d_ff, d)
                mixed = F.conv1d(hidden, w2.unsqueeze(-1), b2)  # (b, t, d) por acaso
        expect(
            not _close(received.transpose(1, 2), expected),
            f"{where}: a saída está transposta: ela ainda está no formato da conv1d, "
            "(b, d, t). Transponha de volta para (b, t, d) no fim.",
        )
        expect(
            not _close(received, no_relu),
            f"{where}: faltou o ReLU entre as duas convoluções: FFN(x) = "
            "max(0, x W1 + b1) W2 + b2.",
        )
        expect(
            not _close(received, no_bias),
            f"{where}: faltaram os vieses: passe ffn.linear1.bias e ffn.linear2.bias como "
            "terceiro argumento de F.conv1d.",
        )
        expect(
            mixed is None or not _close(received, mixed),
            f"{where}: com t = d a conv rodou sem erro, mas sobre o eixo errado: você não "
            "transpôs x para (b, d, t), e a convolução misturou posições em vez de "
            "características.",
        )
        expect(
            False,
            f"{where}: a saída difere de ffn(x) (diferença máxima {_max_diff(received, expected)}, "
            f"tolerância {fmt(_ATOL, sci=True)}). Confira as transposições: (b, t, d) -> "
            "(b, d, t) antes e (b, d, t) -> (b, t, d) depois.",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: a camada do encoder com pré-normalização
# --------------------------------------------------------------------------------------

# (b, t, d, h, d_ff)
_LAYER_CASES: list[tuple[int, int, int, int, int]] = [
    (2, 5, 8, 2, 32),
    (1, 7, 12, 3, 24),
    (3, 4, 16, 4, 64),
]


def _random_layer(d: int, h: int, d_ff: int, generator: torch.Generator):
    """``nn.TransformerEncoderLayer(norm_first=True)`` com normas aleatórias e a cópia do tpt."""
    torch.manual_seed(int(torch.randint(0, 10**6, (1,), generator=generator)))
    ref = nn.TransformerEncoderLayer(
        d, h, d_ff, dropout=0.0, batch_first=True, norm_first=True
    ).eval()
    with torch.no_grad():
        for norm in (ref.norm1, ref.norm2):  # gamma e beta diferentes: norm1 != norm2
            norm.weight.normal_(1.0, 0.5, generator=generator)
            norm.bias.normal_(0.0, 0.5, generator=generator)
    ours = EncoderLayer.from_torch(ref).eval()
    return ref, ours


def _run_layer_answer(
    pre_norm_layer: Callable[..., Tensor], x: Tensor, ours: EncoderLayer, where: str
) -> tuple[Any, int, int]:
    """Roda a resposta contando as chamadas das subcamadas e recusando a camada pronta."""
    no_layer = (
        f"{where}: sua resposta chamou uma camada pronta (tpt.EncoderLayer ou "
        "nn.TransformerEncoderLayer). Escreva as duas subcamadas com as peças recebidas: "
        "self_attn, ffn, norm1 e norm2."
    )
    try:
        with (
            count_calls(ours.self_attn, "forward") as attn_calls,
            count_calls(ours.ffn, "forward") as ffn_calls,
            forbid(EncoderLayer, "forward", no_layer),
            forbid(nn.TransformerEncoderLayer, "forward", no_layer),
            forbid(torch, "_transformer_encoder_layer_fwd", no_layer),
        ):
            received = pre_norm_layer(x, ours.self_attn, ours.ffn, ours.norm1, ours.norm2)
    except TypeError as err:
        raise ExerciseError(
            f"{where}: o Python reclamou: «{err}». Dica: self_attn(h) devolve um par "
            "(saída, pesos); use out, _ = self_attn(h) antes de somar."
        ) from None
    return received, attn_calls[0], ffn_calls[0]


def _check_pre_norm_layer(pre_norm_layer: Callable[..., Tensor]) -> None:
    """``pre_norm_layer(x, self_attn, ffn, norm1, norm2) -> (b, t, d)`` pré-normalizada."""
    generator = torch.Generator().manual_seed(11)
    for b, t, d, h, d_ff in _LAYER_CASES:
        where = f"para x de forma {(b, t, d)} (b, t, d), {h} cabeças e d_ff = {d_ff}"
        ref, ours = _random_layer(d, h, d_ff, generator)
        x = torch.randn(b, t, d, generator=generator)
        with torch.no_grad():
            expected = ref(x)  # (b, t, d): o PyTorch, norm_first=True
        received, attn_calls, ffn_calls = _run_layer_answer(pre_norm_layer, x, ours, where)
        expect(
            isinstance(received, Tensor),
            f"{where}: esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            attn_calls == 1 and ffn_calls == 1,
            f"{where}: chame cada subcamada uma vez só (contei self_attn: {attn_calls}, "
            f"ffn: {ffn_calls}). Guarde o resultado numa variável se precisar dele duas "
            "vezes.",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where}: esperava a forma {(b, t, d)}; recebi {_shape(received)}.",
        )
        received = received.detach()
        if _close(received, expected):
            continue

        _diagnose_pre_norm(received, expected, x, ours, where)


def _diagnose_pre_norm(
    received: Tensor, expected: Tensor, x: Tensor, ours: EncoderLayer, where: str
) -> None:
    """Compara a resposta errada com os erros típicos da pré-normalização."""

    def attn(z: Tensor) -> Tensor:
        return ours.self_attn.__class__.forward(ours.self_attn, z)[0]

    def ffn(z: Tensor) -> Tensor:
        return ours.ffn.__class__.forward(ours.ffn, z)

    n1, n2 = ours.norm1, ours.norm2
    with torch.no_grad():
        post = n2(n1(x + attn(x)) + ffn(n1(x + attn(x))))
        y = n1(x) + attn(n1(x))  # residual do fluxo normalizado
        normalized_stream = n2(y) + ffn(n2(y))
        y = x + attn(n2(x))
        swapped = y + ffn(n1(y))
        y = x + attn(n1(x))
        no_ffn_residual = ffn(n2(y))
        no_attn_residual = attn(n1(x))
        no_attn_residual = no_attn_residual + ffn(n2(no_attn_residual))
        extra_norm = n2(expected)
    expect(
        not _close(received, post),
        f"{where}: você escreveu a pós-normalização (x = norm(x + subcamada(x))). Na "
        "pré-normalização a norma vem antes da subcamada, e a soma fica fora dela: "
        "x = x + subcamada(norm(x)).",
    )
    expect(
        not _close(received, normalized_stream),
        f"{where}: a residual somou o fluxo normalizado (norm(x) + subcamada(norm(x))). Ela "
        "deve somar a entrada original da subcamada: x + subcamada(norm(x)); o fluxo "
        "residual nunca passa pela norma.",
    )
    expect(
        not _close(received, swapped),
        f"{where}: as normas estão trocadas: norm1 vai antes da autoatenção e norm2 antes "
        "da FFN (cada norma tem o seu gamma e beta).",
    )
    expect(
        not _close(received, no_ffn_residual),
        f"{where}: faltou a conexão residual da FFN: x = x + ffn(norm2(x)).",
    )
    expect(
        not _close(received, no_attn_residual),
        f"{where}: faltou a conexão residual da autoatenção: x = x + self_attn(norm1(x)).",
    )
    expect(
        not _close(received, extra_norm),
        f"{where}: você normalizou a saída no fim. Na pré-normalização a camada termina "
        "na soma; a norma final fica uma vez só, depois da pilha inteira, não em cada camada.",
    )
    expect(
        False,
        f"{where}: a saída difere de nn.TransformerEncoderLayer(norm_first=True) "
        f"(diferença máxima {_max_diff(received, expected)}, tolerância "
        f"{fmt(_ATOL, sci=True)}).",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: quantos parâmetros tem uma camada do encoder
# --------------------------------------------------------------------------------------

# (d, h, d_ff): inclui d_ff != 4d e o mesmo d com números de cabeças diferentes.
_PARAM_CASES: list[tuple[int, int, int]] = [
    (8, 2, 32),
    (8, 4, 32),
    (12, 3, 20),
    (16, 1, 64),
    (32, 8, 48),
]


def _layer_params(d: int, d_ff: int) -> int:
    """Atenção (4d² + 4d) + FFN (2 d d_ff + d_ff + d) + duas LayerNorm (4d)."""
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d


def _wrong_counts(d: int, d_ff: int) -> list[tuple[int, str]]:
    """Diferenças (certo - recebido) dos erros mais comuns, com a explicação de cada um."""
    return [
        (
            4 * d,
            "faltam 4d parâmetros: ou as duas LayerNorm (gamma e beta, d + d em cada uma), ou "
            "os vieses das quatro projeções da atenção (W_Q, W_K, W_V e W_O têm d cada)",
        ),
        (8 * d, "faltam as duas LayerNorm (4d) E os vieses da atenção (4d)"),
        (2 * d, "falta uma LayerNorm (2d): a camada tem duas, uma por subcamada"),
        (-2 * d, "há 2d a mais: uma terceira LayerNorm? A camada tem duas normas"),
        (d_ff + d, "faltam os vieses da FFN: b1 tem d_ff números e b2 tem d"),
        (
            4 * d + d_ff + d,
            "faltam todos os vieses (4d na atenção, d_ff + d na FFN): nn.Linear tem viés "
            "por padrão",
        ),
        (d * d + d, "falta a projeção de saída W_O da atenção (d² + d)"),
        (d * d_ff, "falta uma das duas matrizes da FFN: são W1 (d x d_ff) e W2 (d_ff x d)"),
        (d * d_ff + d_ff, "falta a primeira camada da FFN (W1 e b1: d d_ff + d_ff)"),
        (d * d_ff + d, "falta a segunda camada da FFN (W2 e b2: d_ff d + d)"),
    ]


def _explain_wrong_count(
    results: list[tuple[int, int, int, int]], d: int, d_ff: int, expected: int, received: int
) -> None:
    """Diz qual erro típico explica todos os casos (um caso só pode coincidir por acaso)."""
    where = f"para d = {d}, d_ff = {d_ff}: esperava {fmt(expected)}; recebi {fmt(received)}"
    expect(
        not all(r[3] == _layer_params(r[0], 4 * r[0]) for r in results),
        f"{where}. Sua fórmula usa d_ff = 4d fixo: use o argumento d_ff (4d é só a escolha "
        "do artigo).",
    )
    for index, (_, explanation) in enumerate(_wrong_counts(1, 1)):
        explains_all = all(r[2] - r[3] == _wrong_counts(r[0], r[1])[index][0] for r in results)
        expect(not explains_all, f"{where}. {explanation[0].upper()}{explanation[1:]}.")
    expect(
        False,
        f"{where} (diferença de {fmt(expected - received)}). Some as partes: atenção (quatro "
        "projeções d x d com viés), FFN (duas camadas lineares com viés) e as duas LayerNorm "
        "(gamma e beta). O número de cabeças h não muda a conta.",
    )


def _check_encoder_layer_params(encoder_layer_params: Callable[[int, int], Any]) -> None:
    """``encoder_layer_params(d, d_ff) -> int`` igual à contagem do ``tpt.EncoderLayer``."""
    results = []  # (d, d_ff, esperado, recebido) de cada caso
    for d, h, d_ff in _PARAM_CASES:
        torch.manual_seed(0)
        expected = sum(p.numel() for p in EncoderLayer(d, h, d_ff).parameters())
        reference = sum(
            p.numel() for p in nn.TransformerEncoderLayer(d, h, d_ff, batch_first=True).parameters()
        )
        assert expected == reference == _layer_params(d, d_ff)  # a própria referência
        where = f"para d = {d}, d_ff = {d_ff}"
        no_modules = (
            f"{where}: sua resposta criou um módulo do PyTorch para contar. O exercício pede a "
            "fórmula em d e d_ff (serve para tamanhos que nem caberiam na memória)."
        )
        with forbid(nn.Module, "__init__", no_modules):
            received = encoder_layer_params(d, d_ff)
        expect(
            isinstance(received, numbers.Integral) and not isinstance(received, bool),
            f"{where}: esperava um número inteiro (int); recebi {received!r} do tipo "
            f"{type(received).__name__}. Contagens são inteiras: use só +, * e ** com d e d_ff.",
        )
        results.append((d, d_ff, expected, int(received)))
    wrong = [r for r in results if r[2] != r[3]]
    if wrong:
        _explain_wrong_count(results, *wrong[0])
    d, d_ff = 512, 2048  # só chega aqui quando todos os casos estão certos
    total = _layer_params(d, d_ff)
    print(
        f"Com d = {d} e d_ff = {fmt(d_ff)} (o modelo base do artigo), uma camada do encoder "
        f"tem {fmt(total)} parâmetros, {fmt(2 * d * d_ff / total, percent=True)} deles nas duas "
        "matrizes da FFN."
    )


# --------------------------------------------------------------------------------------
# As conferências públicas: rodam com o gerador global do torch isolado, para não mudar
# os números aleatórios do resto do notebook.
# --------------------------------------------------------------------------------------


@exercise("Exercício 1 (FFN como convolução de núcleo 1)")
def check_ffn_as_convolution(ffn_conv: Callable[[Tensor, FeedForward], Tensor]) -> None:
    """``ffn_conv(x (b, t, d), ffn) -> (b, t, d)`` igual a ``ffn(x)``, com duas ``F.conv1d``."""
    with torch.random.fork_rng(devices=[]):
        _check_ffn_as_convolution(ffn_conv)


@exercise("Exercício 2 (camada com pré-normalização)")
def check_pre_norm_layer(pre_norm_layer: Callable[..., Tensor]) -> None:
    """``pre_norm_layer(x, self_attn, ffn, norm1, norm2) -> (b, t, d)`` pré-normalizada."""
    with torch.random.fork_rng(devices=[]):
        _check_pre_norm_layer(pre_norm_layer)


@exercise("Exercício 3 (parâmetros de uma camada do encoder)")
def check_encoder_layer_params(encoder_layer_params: Callable[[int, int], Any]) -> None:
    """``encoder_layer_params(d, d_ff) -> int`` igual à contagem do ``tpt.EncoderLayer``."""
    with torch.random.fork_rng(devices=[]):
        _check_encoder_layer_params(encoder_layer_params)
