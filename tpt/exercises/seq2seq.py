"""Exercícios de notebooks/08_encoder_decoder.ipynb, na ordem do notebook.

1. :func:`check_pre_norm_decoder_layer`: a camada do decoder com **pré-normalização**
   (três subcamadas: autoatenção mascarada, atenção cruzada sobre a memória com
   ``<pad>``, FFN), a partir das peças de uma ``tpt.DecoderLayer``; comparada com
   ``nn.TransformerDecoderLayer(norm_first=True)`` com os mesmos pesos, e com os
   gradientes de todas as entradas e pesos.
2. :func:`check_smoothed_cross_entropy`: a entropia cruzada com suavização dos rótulos
   (seção 7.1) e ``<pad>`` ignorado. Regra (pelas operações ATen que rodam): sem
   ``F.cross_entropy`` nem ``F.nll_loss``.
3. :func:`check_exact_match`: o acerto exato de um lote gerado, com lixo depois do
   primeiro ``<eos>``. Regra: vetorizado, ou seja, o número de operações do PyTorch não
   cresce com o lote nem com o comprimento (medido em dois tamanhos), e sem passar por
   listas ou numpy (``tolist``, ``numpy``).

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

from tpt.exercises.core import ExerciseError, exercise, expect, expect_close
from tpt.exercises.guards import call_answer, case_generator, check_gradients, randint
from tpt.exercises.rules import op_counts_by_size, record_modules, record_ops, record_torch_calls
from tpt.layers import DecoderLayer
from tpt.masks import causal_mask
from tpt.numfmt import fmt

__all__ = ["check_pre_norm_decoder_layer", "check_smoothed_cross_entropy", "check_exact_match"]

_ATOL = 1e-5
# Gradientes através da atenção: o caminho rápido (F.scaled_dot_product_attention) e o
# explícito diferem no arredondamento, e o backward da LayerNorm amplia a diferença.
_GRAD_ATOL = 1e-4


def _padding(lengths: list[int], width: int) -> Tensor:
    """Máscara ``(b, width)`` com ``True`` nas posições depois de cada comprimento."""
    return torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]


# --------------------------------------------------------------------------------------
# Exercício 1: a camada do decoder com pré-normalização
# --------------------------------------------------------------------------------------
_READY_LAYERS = (DecoderLayer, nn.TransformerDecoderLayer, nn.TransformerDecoder, nn.Transformer)
_PIECES = ("self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3")


def _decoder_reference(x, memory, pad, self_attn, cross_attn, ffn, norm1, norm2, norm3) -> Tensor:
    x = x + self_attn(norm1(x), is_causal=True)[0]  # (b, t, d)
    h = norm2(x)  # consultas normalizadas; a memória entra como veio do encoder
    x = x + cross_attn(h, memory, memory, key_padding_mask=pad)[0]  # (b, t, d)
    return x + ffn(norm3(x))  # (b, t, d)


def _decoder_variants(x, memory, pad, sa, ca, ffn, n1, n2, n3) -> list[tuple[str, Tensor]]:
    with torch.no_grad():
        a = n1(x + sa(x, is_causal=True)[0])
        c = n2(a + ca(a, memory, memory, key_padding_mask=pad)[0])
        post = n3(c + ffn(c))
        y = x + sa(n1(x), is_causal=True)[0]
        norm_memory = n2(memory)
        z = y + ca(n2(y), norm_memory, norm_memory, key_padding_mask=pad)[0]
        memory_normalized = z + ffn(n3(z))
        z = y + ca(y, memory, memory, key_padding_mask=pad)[0]
        raw_query = z + ffn(n3(z))
        y_free = x + sa(n1(x))[0]
        z = y_free + ca(n2(y_free), memory, memory, key_padding_mask=pad)[0]
        not_causal = z + ffn(n3(z))
        z = y + ca(n2(y), memory, memory)[0]
        no_pad = z + ffn(n3(z))
        z = y + ca(n3(y), memory, memory, key_padding_mask=pad)[0]
        swapped = z + ffn(n2(z))
    return [
        (
            "você escreveu a pós-normalização (norma depois da soma). Na pré-normalização "
            "cada subcamada lê norm(x), e a soma x + subcamada(norm(x)) fica fora da norma.",
            post,
        ),
        (
            "você normalizou também a memória com norm2. A norma da atenção cruzada vale "
            "para as consultas (o fluxo do decoder); a memória entra como veio do encoder "
            "(numa pilha pré-normalizada, ela já passou pela norma final do encoder).",
            memory_normalized,
        ),
        (
            "as consultas da atenção cruzada vieram de x sem norm2: na pré-normalização a "
            "atenção cruzada lê norm2(x) como consulta.",
            raw_query,
        ),
        (
            "faltou a máscara causal na autoatenção: cada posição do decoder só pode ver "
            "as anteriores (is_causal=True).",
            not_causal,
        ),
        (
            "faltou bloquear o <pad> da memória: passe memory_padding_mask como "
            "key_padding_mask da atenção cruzada.",
            no_pad,
        ),
        (
            "norm2 e norm3 estão trocadas: norm2 vai antes da atenção cruzada e norm3 "
            "antes da FFN.",
            swapped,
        ),
    ]


def _decoder_case(b: int, t: int, s: int, d: int, h: int, d_ff: int, lengths, generator):
    """A camada do PyTorch (com normas sorteadas), as peças da cópia do tpt e as entradas."""
    torch.manual_seed(randint(generator, 0, 10**6))
    ref = nn.TransformerDecoderLayer(
        d, h, d_ff, dropout=0.0, batch_first=True, norm_first=True
    ).eval()
    with torch.no_grad():
        for norm in (ref.norm1, ref.norm2, ref.norm3):  # normas diferentes entre si
            norm.weight.copy_(1 + 0.5 * torch.randn(d, generator=generator))
            norm.bias.copy_(0.5 * torch.randn(d, generator=generator))
    ours = DecoderLayer.from_torch(ref).eval()
    x = torch.randn(b, t, d, generator=generator)  # (b, t, d)
    memory = torch.randn(b, s, d, generator=generator)  # (b, s, d)
    pad = _padding(lengths, s)  # (b, s)
    with torch.no_grad():
        expected = ref(x, memory, tgt_mask=causal_mask(t), tgt_is_causal=True,
                       memory_key_padding_mask=pad)  # fmt: skip
    args = {"x": x, "memory": memory, "memory_padding_mask": pad}
    args.update({name: getattr(ours, name) for name in _PIECES})
    return args, expected


@exercise("Exercício 1 (camada do decoder com pré-normalização)")
def check_pre_norm_decoder_layer(pre_norm_decoder_layer: Callable[..., Tensor]) -> None:
    """``pre_norm_decoder_layer(x, memory, memory_padding_mask, *peças) -> (b, t, d)``."""
    generator, seed = case_generator()
    cases = [(2, 3, 5, 8, 2, 32, [5, 3], "caso fixo")]
    for _ in range(2):
        h = randint(generator, 1, 4)
        d = h * randint(generator, max(2, 4 // h), 6)  # d ≥ 4: LayerNorm de 2 números é degenerada
        b, t = randint(generator, 1, 3), randint(generator, 2, 6)
        s = t + randint(generator, 1, 4)  # t != s: trocar consultas e chaves não passa
        lengths = [randint(generator, 1, s) for _ in range(b)]
        cases.append(
            (
                b,
                t,
                s,
                d,
                h,
                randint(generator, d, 4 * d),
                lengths,
                f"caso sorteado (semente {seed})",
            )
        )
    with torch.random.fork_rng(devices=[]):
        for b, t, s, d, h, d_ff, lengths, label in cases:
            where = (
                f"No {label}, x {(b, t, d)}, memory {(b, s, d)} com comprimentos reais "
                f"{lengths}, {h} cabeça(s)"
            )
            args, expected = _decoder_case(b, t, s, d, h, d_ff, lengths, generator)
            with record_modules() as modules:
                received = call_answer(
                    pre_norm_decoder_layer,
                    args,
                    where,
                    hint="self_attn(h, is_causal=True) e cross_attn(h, memory, memory, "
                    "key_padding_mask=...) devolvem pares (saída, pesos).",
                )
            ready = sorted(cls.__name__ for cls in modules if issubclass(cls, _READY_LAYERS))
            expect(
                not ready,
                f"{where}, sua resposta rodou uma camada de decoder pronta ({', '.join(ready)}). "
                "O exercício pede as três subcamadas arrumadas por você, com as peças recebidas.",
            )
            expect_close(
                received,
                expected,
                where,
                atol=_ATOL,
                variants=_decoder_variants(*args.values()),
            )
            check_gradients(
                pre_norm_decoder_layer, _decoder_reference, args, where, atol=_GRAD_ATOL
            )


# --------------------------------------------------------------------------------------
# Exercício 2: entropia cruzada com suavização dos rótulos
# --------------------------------------------------------------------------------------
_CROSS_ENTROPY_OPS = frozenset(
    {"cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward", "nll_loss2d_forward"}
)


def _smoothed_reference(logits: Tensor, targets: Tensor, epsilon: float, pad_id: int) -> Tensor:
    vocab_size = logits.shape[-1]
    return F.cross_entropy(
        logits.reshape(-1, vocab_size),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=epsilon,
    )


def _smoothed_variants(logits: Tensor, targets: Tensor, eps: float, pad: int):
    v = logits.shape[-1]
    with torch.no_grad():
        logp = logits.double().log_softmax(-1)  # (b, t, V)
        nll = -logp.gather(-1, targets[..., None]).squeeze(-1)  # (b, t)
        uniform = -logp.mean(-1)  # (b, t): -Σ log p / V
        real = targets != pad  # (b, t)
        n = real.sum().clamp(min=1)
        per_token = (1 - eps) * nll + eps * uniform  # a conta certa, posição a posição
        wrong_classes = -logp.sum(-1) - nll  # (b, t): -Σ log p nas V - 1 classes erradas
        over_others = (1 - eps) * nll + eps * wrong_classes / (v - 1)
        return [
            (
                "você espalhou ε só pelas V - 1 classes erradas. A convenção do "
                "F.cross_entropy (e do artigo) espalha ε/V por todas as V classes, a certa "
                "inclusive: q = (1 - ε)·one_hot + ε/V.",
                over_others[real].sum() / n,
            ),
            (
                "as posições de <pad> entraram na média: elas não são palavras; a média é "
                "só sobre as posições com targets != pad_id.",
                per_token.mean(),
            ),
            (
                "essa é a entropia cruzada sem suavização: use epsilon.",
                nll[real].sum() / n,
            ),
            (
                "faltou a parte uniforme: você multiplicou a entropia cruzada por (1 - ε), "
                "mas o alvo suavizado também dá ε/V a cada classe.",
                (1 - eps) * nll[real].sum() / n,
            ),
            (
                "você somou em vez de tirar a média sobre as posições reais.",
                per_token[real].sum(),
            ),
            (
                "a parte uniforme não foi dividida por V: ela é ε vezes a média de -log p "
                "sobre as V classes.",
                ((1 - eps) * nll + eps * uniform * v)[real].sum() / n,
            ),
        ]


def _smoothing_cases(generator: torch.Generator, seed: int):
    """(logits, targets, epsilon, pad_id, descrição)."""
    cases = []
    specs = [
        (2, 4, 7, 0.1, 0, [4, 2], "caso fixo"),
        (3, 3, 5, 0.0, 4, [3, 1, 2], "caso fixo com ε = 0"),
        (2, 5, 9, 0.25, 3, [5, 0], "caso fixo com uma linha só de <pad>"),
    ]
    for _ in range(2):
        b, t = randint(generator, 1, 4), randint(generator, 2, 7)
        specs.append(
            (
                b,
                t,
                randint(generator, 4, 40),
                float(torch.rand((), generator=generator)) * 0.4,
                -1,  # sorteado abaixo, conforme V
                [randint(generator, 1, t) for _ in range(b)],
                f"caso sorteado (semente {seed})",
            )
        )
    for b, t, v, eps, pad, lengths, label in specs:
        pad = randint(generator, 0, v - 1) if pad < 0 else pad
        logits = 2 * torch.randn(b, t, v, generator=generator)  # (b, t, V)
        words = torch.randint(0, v - 1, (b, t), generator=generator)
        words = words + (words >= pad).long()  # qualquer id menos o de <pad>
        targets = words.masked_fill(_padding(lengths, t), pad)  # (b, t)
        cases.append((logits, targets, eps, pad, label))
    return cases


@exercise("Exercício 2 (entropia cruzada com suavização)")
def check_smoothed_cross_entropy(smoothed_cross_entropy: Callable[..., Tensor]) -> None:
    """``smoothed_cross_entropy(logits (b, t, V), targets (b, t), epsilon, pad_id) -> ()``."""
    generator, seed = case_generator()
    for logits, targets, eps, pad, label in _smoothing_cases(generator, seed):
        b, t, v = logits.shape
        where = f"No {label}, logits {(b, t, v)}, epsilon = {fmt(eps, 3)}, pad_id = {pad}"
        args = {"logits": logits, "targets": targets, "epsilon": eps, "pad_id": pad}
        expected = _smoothed_reference(logits, targets, eps, pad)
        with record_ops() as ops:
            received = call_answer(smoothed_cross_entropy, args, where)
        used = sorted(ops.used(_CROSS_ENTROPY_OPS))
        expect(
            not used,
            f"{where}, sua resposta rodou {', '.join(used)}, o núcleo de F.cross_entropy / "
            "F.nll_loss (é com ele que a conferência compara). Escreva a conta com "
            "log_softmax, o alvo suavizado e a média sobre as posições reais.",
        )
        expect_close(
            received,
            expected.to(logits.dtype),
            where,
            atol=_ATOL,
            name="a perda",
            variants=[
                (m, w.to(logits.dtype)) for m, w in _smoothed_variants(logits, targets, eps, pad)
            ],
        )
        check_gradients(
            smoothed_cross_entropy, _smoothed_reference, args, where, wrt=("logits",), atol=_ATOL
        )


# --------------------------------------------------------------------------------------
# Exercício 3: acerto exato, vetorizado
# --------------------------------------------------------------------------------------
def _pad_to(x: Tensor, width: int, pad: int) -> Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=pad)  # (b, width)


def _after_first_eos(x: Tensor, eos: int) -> Tensor:
    is_eos = (x == eos).long()  # (b, t)
    return (is_eos.cumsum(dim=1) - is_eos) > 0  # (b, t): depois do primeiro <eos>


def _match_variants(pred: Tensor, target: Tensor, eos: int, pad: int) -> dict[str, float]:
    """A resposta certa e as de enganos comuns, calculadas (não adivinhadas)."""
    width = max(pred.shape[1], target.shape[1])
    p, g = _pad_to(pred, width, pad), _pad_to(target, width, pad)  # (b, width)
    clean = p.masked_fill(_after_first_eos(p, eos), pad)
    words = (g != pad) & (g != eos)  # posições das palavras do rótulo
    common = min(pred.shape[1], target.shape[1])  # só as colunas que os dois têm
    cut = pred[:, :common].masked_fill(_after_first_eos(pred[:, :common], eos), pad)
    with_eos = F.pad(pred, (0, width - pred.shape[1]), value=eos)  # completada com <eos>
    with_eos = with_eos.masked_fill(_after_first_eos(with_eos, eos), pad)
    return {
        "certo": (clean == g).all(dim=1).double().mean().item(),
        "linha inteira": (p == g).all(dim=1).double().mean().item(),
        "sem exigir <eos>": ((p == g) | ~words).all(dim=1).double().mean().item(),
        "por token": (p == g)[g != pad].double().mean().item(),
        "colunas em comum": (cut == target[:, :common]).all(dim=1).double().mean().item(),
        "completada com <eos>": (with_eos == g).all(dim=1).double().mean().item(),
    }


_MATCH_MISTAKES = {
    "linha inteira": "você comparou também o que vem depois do primeiro <eos> da saída. Depois "
    "dele o gerador escreve qualquer coisa; troque por pad_id tudo o que vem depois do "
    "primeiro <eos> (cumsum da máscara pred == eos_id ajuda).",
    "sem exigir <eos>": "você conferiu só as palavras: uma saída com as palavras certas e sem "
    "<eos> no lugar (cortada em max_len, ou que continua) não está certa.",
    "por token": "isso é o acerto por token; o exercício pede o acerto exato: a linha só conta "
    "se a frase inteira, até o <eos>, estiver certa.",
    "colunas em comum": "você comparou só as min(t1, t2) colunas que pred e target têm em comum: "
    "uma saída cortada logo depois das palavras, sem <eos>, passou como certa. Complete a "
    "mais estreita com pad_id até a largura da outra e compare todas as colunas.",
    "completada com <eos>": "você completou pred com eos_id: uma saída cortada em max_len, sem "
    "<eos>, ganhou um <eos> que o modelo não escreveu. Complete com pad_id.",
}


def _random_match_case(
    generator: torch.Generator, b: int, eos: int, pad: int, words: tuple[int, int]
) -> tuple[Tensor, Tensor]:
    """Rótulos sorteados e saídas que erram de vários jeitos (ou acertam com lixo depois)."""
    lengths = [randint(generator, 1, 6) for _ in range(b)]
    t2 = max(lengths) + 1 + randint(generator, 0, 2)
    t1 = randint(generator, 2, t2 + 3)
    target = torch.full((b, t2), pad)
    pred = torch.randint(*words, (b, t1), generator=generator)  # lixo de fundo
    for i, k in enumerate(lengths):
        sentence = torch.randint(*words, (k,), generator=generator)
        target[i, :k], target[i, k] = sentence, eos
        kind = randint(generator, 0, 4)
        row = torch.cat([sentence, torch.tensor([eos])])  # (k + 1,)
        if kind == 1:  # uma palavra trocada
            j = randint(generator, 0, k - 1)
            row[j] = words[0] + (int(row[j]) - words[0] + 1) % (words[1] - words[0])
        elif kind == 2:  # palavras certas e, no lugar do <eos>, outra palavra
            row[k] = words[0]
        elif kind == 3:  # para cedo
            row = torch.cat([sentence[: k - 1], torch.tensor([eos])])
        n = min(len(row), t1)
        pred[i, :n] = row[:n]  # kind 0 e 4: certa, com lixo depois (se couber)
    return pred, target


def _match_cases(generator: torch.Generator, seed: int):
    e, z = 2, 0  # <eos> e <pad> do tpt
    target_a = torch.tensor(
        [[10, 11, e, z, z], [12, e, z, z, z], [10, 12, 13, 14, e], [10, 11, 12, e, z],
         [11, 12, e, z, z], [13, 14, e, z, z]]
    )  # fmt: skip
    pred_a = torch.tensor(
        [
            [10, 11, e, e, e, e],  # certo: depois do <eos> o gerador repete <eos>
            [12, e, 13, 14, e, e],  # certo: o que vem depois do <eos> não conta
            [10, 12, 13, 14, 15, e],  # errado: uma palavra a mais antes do <eos>
            [10, 11, 12, 13, 13, 13],  # errado: nunca gerou <eos>
            [11, e, e, e, e, e],  # errado: parou cedo demais
            [13, 14, 11, e, e, e],  # errado: palavras certas, outra no lugar do <eos>
        ]
    )  # (6, 6)
    target_b = torch.tensor([[20, 21, 22, e, z, z], [23, 24, 25, e, z, z], [28, e, z, z, z, z]])
    pred_b = torch.tensor([[20, 21, 22, e], [23, 24, 25, 26], [28, e, e, e]])  # (3, 4)
    target_d = torch.tensor(
        [[20, 21, 22, e, z, z], [23, 24, e, z, z, z], [25, 26, 27, e, z, z],
         [30, 31, 32, 33, 34, e], [40, 41, e, z, z, z], [35, 36, 37, 38, e, z]]
    )  # fmt: skip
    pred_d = torch.tensor(
        [
            [20, 21, 22],  # errado: as palavras certas, cortada em max_len antes do <eos>
            [23, 24, e],  # certo
            [25, 26, 29],  # errado: uma palavra trocada
            [30, 31, 32],  # errado: cortada no meio das palavras
            [40, 41, 42],  # errado: outra palavra no lugar do <eos>
            [35, 36, 37],  # errado: cortada no meio das palavras
        ]
    )  # (6, 3)
    target_c = torch.tensor([[30, 31, 5, 9], [32, 5, 9, 9], [33, 5, 9, 9]])
    pred_c = torch.tensor([[30, 31, 5, 33, 34], [32, 5, 0, 2, 0], [33] + [0] * 4])
    cases = [
        (pred_a, target_a, e, z, "caso fixo com saídas mais largas que os rótulos"),
        (pred_b, target_b, e, z, "caso fixo com saídas cortadas em max_len, sem <eos>"),
        (pred_d, target_d, e, z, "caso fixo com saídas cortadas logo depois das palavras"),
        (pred_c, target_c, 5, 9, "caso fixo com eos_id = 5 e pad_id = 9"),
    ]
    eos, pad = randint(generator, 0, 9), randint(generator, 10, 19)
    pred, target = _random_match_case(generator, randint(generator, 4, 9), eos, pad, (20, 40))
    cases.append((pred, target, eos, pad, f"caso sorteado (semente {seed})"))
    return cases


def _as_fraction(value: Any, where: str) -> float:
    """Um número real: float, int, escalar do numpy ou tensor com um elemento."""
    if isinstance(value, Tensor) or hasattr(value, "dtype"):
        size = value.numel() if isinstance(value, Tensor) else getattr(value, "size", 1)
        expect(
            size == 1,
            f"{where}, devolva um número (a fração de linhas certas), não um tensor de forma "
            f"{tuple(value.shape)}.",
        )
        value = value.item()
    expect(
        isinstance(value, numbers.Real) and not isinstance(value, bool),
        f"{where}, devolva um número entre 0 e 1; recebi {type(value).__name__}.",
    )
    return float(value)


def _sized_match_args(n: int) -> tuple[Tensor, Tensor, int, int]:
    """Lote de n linhas e comprimento ~n, sempre com <eos>: para contar operações."""
    generator = torch.Generator().manual_seed(n)
    target = torch.randint(10, 20, (n, n + 2), generator=generator)
    target[:, n] = 2
    target[:, n + 1] = 0
    pred = torch.cat([target[:, : n + 1], torch.randint(10, 20, (n, 3), generator=generator)], 1)
    return pred, target, 2, 0


@exercise("Exercício 3 (acerto exato vetorizado)")
def check_exact_match(exact_match: Callable[..., Any]) -> None:
    """``exact_match(pred (b, t1), target (b, t2), eos_id, pad_id) -> float`` em [0, 1]."""
    generator, seed = case_generator()
    for pred, target, eos, pad, label in _match_cases(generator, seed):
        where = f"No {label} (pred {tuple(pred.shape)}, target {tuple(target.shape)})"
        args = {"pred": pred, "target": target, "eos_id": eos, "pad_id": pad}
        result = _as_fraction(
            call_answer(
                exact_match,
                args,
                where,
                hint="pred e target podem ter larguras diferentes; complete a mais estreita "
                "com pad_id (F.pad) antes de comparar posição a posição.",
            ),
            where,
        )
        variants = _match_variants(pred, target, eos, pad)
        expected = variants["certo"]
        if abs(result - expected) < _ATOL:
            continue
        found = f"{where}, esperava {fmt(expected, 4)} e recebi {fmt(result, 4)}"
        expect(
            abs(result - 100 * expected) > _ATOL,
            f"{found}: você devolveu uma porcentagem; devolva a fração em [0, 1].",
        )
        if (eos, pad) != (2, 0):
            fixed = _match_variants(pred, target, 2, 0)["certo"]
            expect(
                abs(result - fixed) > _ATOL,
                f"{found}: é o resultado com os ids 2 e 0 do tpt; use eos_id e pad_id recebidos.",
            )
        # Um diagnóstico só quando a resposta bate com um engano, e com um só, neste caso.
        matches = [
            name
            for name in _MATCH_MISTAKES
            if abs(result - variants[name]) < _ATOL and abs(variants[name] - expected) > _ATOL
        ]
        expect(len(matches) != 1, f"{found}: {_MATCH_MISTAKES[matches[0]] if matches else ''}")
        raise ExerciseError(
            f"{found} (a fração de linhas iguais ao rótulo até o primeiro <eos>, inclusive)."
        )
    with record_torch_calls() as calls:
        small, large = op_counts_by_size(exact_match, _sized_match_args, (3, 9))
    listed = sorted(calls & {"tolist", "numpy", "__array__"})
    expect(
        not listed,
        f"os resultados estão certos, mas a função passou os tensores para listas ou numpy "
        f"({', '.join(listed)}); o exercício pede a conta em tensores, sem laços.",
    )
    expect(
        small == large,
        "os resultados estão certos, mas o número de operações do PyTorch cresce com o "
        f"tamanho do lote ({small} operações com 3 linhas, {large} com 9): há um laço em "
        "Python (for, while, compreensão, map ou função auxiliar). Faça a conta em tensores: "
        "uma máscara (b, t) do que vem depois do primeiro <eos>, masked_fill e .all(dim=1).",
    )
