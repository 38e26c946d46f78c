"""Conferências dos exercícios de notebooks/08_encoder_decoder.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_cross_attention`: a atenção cruzada multicabeça escrita à mão, a partir
   das projeções ``q_proj``, ``k_proj``, ``v_proj`` e ``out_proj``, com ``t != s``: as
   consultas vêm do decoder ``x`` ``(b, t, d)``, as chaves e os valores da memória do
   encoder ``(b, s, d)``, e as posições ``<pad>`` da memória ficam bloqueadas. Regra:
   nada de módulos ou funções de atenção prontos (``tpt.MultiHeadAttention``,
   ``tpt.scaled_dot_product_attention``, ``F.scaled_dot_product_attention``,
   ``nn.MultiheadAttention``): a conferência os bloqueia durante a chamada.
2. :func:`check_shift_targets`: o deslocamento do *teacher forcing* para um lote, a
   partir das listas de ids dos alvos: entrada do decoder ``<bos> + alvo`` e rótulos
   ``alvo + <eos>``, com ``<pad>`` à direita. Regra: sem ``tpt.collate_numbers``
   (bloqueado durante a chamada).
3. :func:`check_exact_match`: o acerto exato de um lote de saídas geradas, que podem ter
   qualquer coisa depois do primeiro ``<eos>``, contra os rótulos com ``<pad>``. Regra:
   sem laços em Python (a conferência lê o bytecode da função).

Cada conferência compara com uma referência calculada aqui e, quando a resposta erra,
procura o engano mais provável (consultas trocadas com as chaves, máscara esquecida,
rótulos sem deslocamento, comparação que inclui o lixo depois do ``<eos>``...) para
dizer, em português, o que corrigir.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tpt
import tpt.attention
import tpt.data
import tpt.data.numbers
from tpt.exercises import ExerciseError, exercise, expect, forbid, uses_loops

__all__ = ["check_cross_attention", "check_shift_targets", "check_exact_match"]

_ATOL = 1e-5


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _close(received: Tensor, expected: Tensor, atol: float = _ATOL) -> bool:
    return received.shape == expected.shape and torch.allclose(
        received.double(), expected.double(), atol=atol, rtol=0
    )


def _max_diff(a: Tensor, b: Tensor) -> str:
    return tpt.fmt((a.double() - b.double()).abs().max().item(), sci=True)


# --------------------------------------------------------------------------------------
# Exercício 1: atenção cruzada à mão
# --------------------------------------------------------------------------------------
_NO_ATTENTION = (
    "o exercício pede a atenção cruzada escrita à mão (projeções, cabeças, pontuações, "
    "softmax e média ponderada); não chame {name}"
)


@contextmanager
def _no_attention_modules() -> Iterator[None]:
    """Bloqueia os módulos e funções de atenção prontos durante a resposta do aluno."""
    targets = [
        (tpt.MultiHeadAttention, "forward", "tpt.MultiHeadAttention"),
        (tpt, "scaled_dot_product_attention", "tpt.scaled_dot_product_attention"),
        (tpt.attention, "scaled_dot_product_attention", "tpt.scaled_dot_product_attention"),
        (F, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
        (F, "multi_head_attention_forward", "F.multi_head_attention_forward"),
        (nn.MultiheadAttention, "forward", "nn.MultiheadAttention"),
        (tpt.DecoderLayer, "forward", "tpt.DecoderLayer"),
    ]
    with ExitStack() as stack:
        for owner, name, label in targets:
            stack.enter_context(forbid(owner, name, _NO_ATTENTION.format(name=label)))
        yield


def _projections(d: int, seed: int) -> dict[str, nn.Linear]:
    generator = torch.Generator().manual_seed(seed)
    layers = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        layer = nn.Linear(d, d)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(d, d, generator=generator) / math.sqrt(d))
            layer.bias.copy_(torch.randn(d, generator=generator) * 0.1)
        layers[name] = layer
    return layers


def _attention(
    x: Tensor,
    memory: Tensor,
    proj: dict[str, nn.Linear],
    num_heads: int,
    mask: Tensor | None,
    *,
    scale: str = "head",
    use_out_proj: bool = True,
    merge_without_transpose: bool = False,
    invert_mask: bool = False,
) -> tuple[Tensor, Tensor]:
    """Referência (e variantes erradas, para o diagnóstico): ``(b, t, d)``, ``(b, h, t, s)``."""
    b, t, d = x.shape
    s = memory.shape[1]
    d_h = d // num_heads
    with torch.no_grad():
        q = proj["q_proj"](x).view(b, t, num_heads, d_h).transpose(1, 2)  # (b, h, t, d_h)
        k = proj["k_proj"](memory).view(b, s, num_heads, d_h).transpose(1, 2)  # (b, h, s, d_h)
        v = proj["v_proj"](memory).view(b, s, num_heads, d_h).transpose(1, 2)  # (b, h, s, d_h)
        divisor = {"head": math.sqrt(d_h), "model": math.sqrt(d), "none": 1.0}[scale]
        scores = q @ k.transpose(-2, -1) / divisor  # (b, h, t, s)
        if mask is not None:
            blocked = ~mask if invert_mask else mask
            scores = scores.masked_fill(blocked[:, None, None, :], float("-inf"))  # (b, h, t, s)
        weights = torch.softmax(scores, dim=-1)  # (b, h, t, s)
        out = weights @ v  # (b, h, t, d_h)
        if merge_without_transpose:
            out = out.reshape(b, t, d)  # ERRADO: mistura cabeças e posições
        else:
            out = out.transpose(1, 2).reshape(b, t, d)  # (b, t, d)
        if use_out_proj:
            out = proj["out_proj"](out)  # (b, t, d)
    return out, weights


# (b, t, s, d, h, comprimentos reais da memória ou None): sempre t != s.
_CROSS_CASES: list[tuple[int, int, int, int, int, list[int] | None]] = [
    (2, 3, 5, 8, 2, None),
    (2, 4, 6, 12, 3, [4, 5]),
    (3, 2, 5, 8, 4, [4, 1, 3]),
]


def _call_cross(answer: Callable[..., Any], args: tuple, where: str, t: int, s: int) -> Any:
    try:
        with _no_attention_modules():
            return answer(*args)
    except NotImplementedError:
        raise  # o esboço ainda não resolvido: "pendente", não erro
    except (RuntimeError, IndexError) as err:
        raise ExerciseError(
            f"{where}: sua função levantou {type(err).__name__} ({err}). Dica: confira as "
            f"formas. x tem t={t} posições e memory tem s={s}: Q se separa em cabeças com o "
            f"t do decoder, K e V com o s da memória (use memory.shape[1], não x.shape[1]), "
            "e as pontuações ficam (b, h, t, s)."
        ) from None


@exercise("Exercício 1 (atenção cruzada à mão)")
def check_cross_attention(cross_attention: Callable[..., tuple[Tensor, Tensor]]) -> None:
    """``cross_attention(x, memory, q_proj, k_proj, v_proj, out_proj, num_heads, mask)``.

    Devolve ``(saída (b, t, d), pesos (b, h, t, s))``.
    """
    for case, (b, t, s, d, h, lengths) in enumerate(_CROSS_CASES):
        generator = torch.Generator().manual_seed(100 + case)
        x = torch.randn(b, t, d, generator=generator)  # (b, t, d): o fluxo do decoder
        memory = torch.randn(b, s, d, generator=generator)  # (b, s, d): saída do encoder
        mask = None
        if lengths is not None:
            mask = torch.arange(s)[None, :] >= torch.tensor(lengths)[:, None]  # (b, s)
        proj = _projections(d, seed=200 + case)
        where = f"com b={b}, t={t}, s={s}, d={d}, h={h}" + (
            f", memória com comprimentos reais {lengths}" if lengths else ", sem <pad>"
        )
        expected_out, expected_w = _attention(x, memory, proj, h, mask)
        x_in, memory_in = x.clone(), memory.clone()
        mask_in = None if mask is None else mask.clone()
        args = (x_in, memory_in, *copy.deepcopy(proj).values(), h, mask_in)
        result = _call_cross(cross_attention, args, where, t, s)

        expect(
            isinstance(result, tuple) and len(result) == 2,
            f"{where}: devolva um par (saída, pesos); recebi {type(result).__name__}.",
        )
        out, weights = result
        expect(
            isinstance(out, Tensor) and isinstance(weights, Tensor),
            f"{where}: a saída e os pesos devem ser tensores; recebi {type(out).__name__} e "
            f"{type(weights).__name__}.",
        )
        out, weights = out.detach(), weights.detach()
        expect(
            torch.equal(x_in, x) and torch.equal(memory_in, memory),
            f"{where}: sua função modificou x ou memory no lugar; calcule sem alterar as entradas.",
        )
        expect(
            tuple(out.shape) != (b, s, d) and tuple(weights.shape) != (b, h, s, t),
            f"{where}: a saída tem {s} posições (as da memória): as consultas vieram do "
            f"encoder. Na atenção cruzada as consultas vêm do decoder (x, t={t} posições) e "
            "as chaves e os valores da memória; a saída tem uma linha por posição do "
            "decoder, para somar no fluxo residual dele.",
        )
        expect(
            tuple(weights.shape) != (b, h, t, t),
            f"{where}: os pesos têm forma {_shape(weights)}, (b, h, t, t): as chaves vieram de "
            "x. Isso é autoatenção; na atenção cruzada as chaves e os valores vêm de memory.",
        )
        expect(
            tuple(out.shape) == (b, t, d),
            f"{where}: a saída deve ter forma {(b, t, d)} (b, t, d); recebi {_shape(out)}.",
        )
        expect(
            tuple(weights.shape) == (b, h, t, s),
            f"{where}: os pesos devem ter forma {(b, h, t, s)} (b, h, t, s), um por cabeça, "
            f"consulta e chave; recebi {_shape(weights)}.",
        )
        if _close(weights, expected_w) and _close(out, expected_out):
            continue
        if not _close(weights, expected_w):
            expect(
                not bool(torch.isnan(weights).any()),
                f"{where}: os pesos têm NaN: alguma linha ficou com todas as chaves em -inf "
                "antes do softmax. Confira a máscara (invertida?): True = <pad> = bloqueado, e "
                "toda linha tem pelo menos uma chave real.",
            )
            sums = weights.double().sum(dim=-1)  # (b, h, t)
            expect(
                torch.allclose(sums, torch.ones_like(sums), atol=1e-4),
                f"{where}: as linhas dos pesos não somam 1 sobre as chaves. O softmax é "
                "sobre as chaves (dim=-1 das pontuações (b, h, t, s)), não sobre as consultas.",
            )
            if mask is not None:
                inverted = _attention(x, memory, proj, h, mask, invert_mask=True)[1]
                expect(
                    not _close(weights, inverted),
                    f"{where}: a máscara está invertida: na convenção do tpt, True = <pad> = "
                    "bloqueado; as posições True da máscara devem receber -inf antes do "
                    "softmax (peso 0).",
                )
                leaked = weights[mask[:, None, None, :].expand_as(weights)].abs().max()
                expect(
                    float(leaked) < 1e-6,
                    f"{where}: posições <pad> da memória receberam peso (até "
                    f"{tpt.fmt(float(leaked), 3)}). Use memory_key_padding_mask (b, s): "
                    "pontuações das chaves bloqueadas viram -inf antes do softmax; ela "
                    "precisa de forma (b, 1, 1, s) para valer para toda cabeça e consulta.",
                )
            for scale, hint in (
                ("model", "sqrt(d), a largura do modelo"),
                ("none", "nada"),
            ):
                wrong = _attention(x, memory, proj, h, mask, scale=scale)[1]
                expect(
                    not _close(weights, wrong),
                    f"{where}: você dividiu as pontuações por {hint}; a escala é 1/sqrt(d_h), "
                    f"com d_h = d / h = {d // h} (a largura de uma cabeça).",
                )
            expect(
                False,
                f"{where}: os pesos diferem da referência (diferença máxima "
                f"{_max_diff(weights, expected_w)}). Confira que Q = q_proj(x), "
                "K = k_proj(memory) e V = v_proj(memory), e a separação em cabeças "
                "view(b, comprimento, h, d_h).transpose(1, 2).",
            )
        no_out_proj = _attention(x, memory, proj, h, mask, use_out_proj=False)[0]
        expect(
            not _close(out, no_out_proj),
            f"{where}: os pesos estão certos, mas faltou a projeção de saída: "
            "concatenadas as cabeças, aplique out_proj.",
        )
        scrambled = _attention(x, memory, proj, h, mask, merge_without_transpose=True)[0]
        expect(
            not _close(out, scrambled),
            f"{where}: os pesos estão certos, mas as cabeças foram juntadas sem "
            "transpose(1, 2): (b, h, t, d_h) -> (b, t, h, d_h) -> (b, t, d), e só então "
            "reshape.",
        )
        expect(
            False,
            f"{where}: os pesos estão certos, mas a saída difere da referência (diferença "
            f"máxima {_max_diff(out, expected_out)}). A saída de cada cabeça é pesos @ V, "
            "com V = v_proj(memory).",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: o deslocamento do teacher forcing
# --------------------------------------------------------------------------------------
_NO_COLLATE = (
    "o exercício pede o deslocamento escrito por você, a partir das listas; não use "
    "tpt.collate_numbers (a conferência compara com ele)"
)


@contextmanager
def _no_collate() -> Iterator[None]:
    with ExitStack() as stack:
        for owner in (tpt, tpt.data, tpt.data.numbers):
            if hasattr(owner, "collate_numbers"):
                stack.enter_context(forbid(owner, "collate_numbers", _NO_COLLATE))
        yield


def _reference_shift(
    targets: list[list[int]], bos: int, eos: int, pad: int
) -> tuple[Tensor, Tensor]:
    width = max(len(row) for row in targets) + 1
    tgt_in = torch.full((len(targets), width), pad, dtype=torch.long)  # (b, t)
    tgt_out = torch.full((len(targets), width), pad, dtype=torch.long)  # (b, t)
    for i, row in enumerate(targets):
        tgt_in[i, : len(row) + 1] = torch.tensor([bos, *row])
        tgt_out[i, : len(row) + 1] = torch.tensor([*row, eos])
    return tgt_in, tgt_out


def _shift_cases() -> list[tuple[list[list[int]], int, int, int]]:
    vocab = tpt.NumberVocab()
    numbers = [7, 1234, 100000]
    number_targets = [vocab.encode_target(n) for n in numbers]
    return [
        (number_targets, vocab.bos_id, vocab.eos_id, vocab.pad_id),
        # Outros ids: quem escreveu 0, 1 e 2 fixos no código é apanhado aqui.
        ([[15, 16], [17], [18, 19, 20, 21]], 61, 62, 60),
        ([[30, 31, 32]], 1, 2, 0),  # um exemplo só: nenhuma posição de <pad>
    ]


@exercise("Exercício 2 (deslocamento do teacher forcing)")
def check_shift_targets(shift_targets: Callable[..., tuple[Tensor, Tensor]]) -> None:
    """``shift_targets(targets, bos_id, eos_id, pad_id) -> (tgt_in (b, t), tgt_out (b, t))``."""
    for targets, bos, eos, pad in _shift_cases():
        where = f"para targets={targets} (bos_id={bos}, eos_id={eos}, pad_id={pad})"
        expected_in, expected_out = _reference_shift(targets, bos, eos, pad)
        given = [list(row) for row in targets]
        with _no_collate():
            result = shift_targets(given, bos, eos, pad)
        expect(
            given == targets,
            f"{where}: sua função modificou as listas recebidas (por exemplo com append); "
            "monte listas ou tensores novos.",
        )
        expect(
            isinstance(result, tuple) and len(result) == 2,
            f"{where}: devolva um par (tgt_in, tgt_out); recebi {type(result).__name__}.",
        )
        tgt_in, tgt_out = result
        expect(
            isinstance(tgt_in, Tensor) and isinstance(tgt_out, Tensor),
            f"{where}: devolva tensores (torch.long, forma (b, t)), prontos para o "
            f"nn.Embedding; recebi {type(tgt_in).__name__} e {type(tgt_out).__name__}.",
        )
        expect(
            tgt_in.dtype == torch.long and tgt_out.dtype == torch.long,
            f"{where}: os ids devem ser torch.long (o nn.Embedding e a entropia cruzada exigem "
            f"inteiros); recebi {tgt_in.dtype} e {tgt_out.dtype}.",
        )
        b, width = expected_in.shape
        longest = width - 1
        for name, got in (("tgt_in", tgt_in), ("tgt_out", tgt_out)):
            expect(
                tuple(got.shape) != (b, longest),
                f"{where}: {name} tem forma {_shape(got)}, mas o alvo mais longo tem "
                f"{longest} tokens e <bos> + alvo (ou alvo + <eos>) tem {width}: a largura "
                f"do lote é {width}.",
            )
            expect(
                tuple(got.shape) == (b, width),
                f"{where}: {name} deve ter forma {(b, width)} (b, maior alvo + 1); recebi "
                f"{_shape(got)}.",
            )
        if torch.equal(tgt_in, expected_in) and torch.equal(tgt_out, expected_out):
            continue
        expect(
            not (torch.equal(tgt_in, expected_out) and torch.equal(tgt_out, expected_in)),
            f"{where}: tgt_in e tgt_out estão trocados: o decoder lê <bos> + alvo e deve "
            "prever alvo + <eos>.",
        )
        expect(
            not torch.equal(tgt_in, tgt_out),
            f"{where}: tgt_in e tgt_out são iguais: sem o deslocamento, o rótulo da posição "
            "i é o próprio token que o decoder está lendo ali, e o modelo aprende a copiar.",
        )
        first = tgt_in[:, 0]  # (b,)
        expect(
            bool((first == bos).all()) or not bool((first == first[0]).all()),
            f"{where}: toda linha de tgt_in começa com <bos>, e aqui bos_id={bos}; recebi a "
            f"primeira coluna {first.tolist()}. Use o bos_id recebido, não um id fixo.",
        )
        expect(
            bool((first == bos).all()),
            f"{where}: toda linha de tgt_in começa com <bos> (id {bos}); recebi a primeira "
            f"coluna {first.tolist()}. O preenchimento vai à direita, não à esquerda.",
        )
        expect(
            not bool((tgt_in == eos).any()),
            f"{where}: tgt_in contém <eos> (id {eos}). A entrada do decoder é <bos> + alvo; "
            "o <eos> só aparece nos rótulos, como o último token a prever.",
        )
        expect(
            not bool((tgt_out == bos).any()),
            f"{where}: tgt_out contém <bos> (id {bos}). Os rótulos são alvo + <eos>: o "
            "<bos> nunca é previsto.",
        )
        ends = [tgt_out[row, len(target)].item() for row, target in enumerate(targets)]
        expect(
            eos in ends or len(set(ends)) > 1 or ends[0] in (pad, bos),
            f"{where}: depois da última palavra de cada linha veio o id {ends[0]}, mas aqui "
            f"eos_id={eos}. Use o eos_id recebido, não um id fixo.",
        )
        for row, target in enumerate(targets):
            k = len(target)
            expect(
                tgt_out[row, k].item() == eos,
                f"{where}: na linha {row}, o <eos> deveria vir logo depois da última palavra "
                f"(posição {k}); recebi {tgt_out[row].tolist()}. Ele marca onde a frase "
                "termina, antes do preenchimento.",
            )
        expect(
            torch.equal(tgt_in != pad, expected_in != pad),
            f"{where}: o preenchimento de tgt_in está errado: use pad_id={pad} (o valor "
            f"recebido) nas posições depois do alvo. Recebi {tgt_in.tolist()}, esperava "
            f"{expected_in.tolist()}.",
        )
        expect(
            torch.equal(tgt_out, expected_out),
            f"{where}: tgt_out deveria ser {expected_out.tolist()}; recebi {tgt_out.tolist()}.",
        )
        expect(
            False,
            f"{where}: tgt_in deveria ser {expected_in.tolist()}; recebi {tgt_in.tolist()}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: acerto exato, sem laços
# --------------------------------------------------------------------------------------
def _pad_to(x: Tensor, width: int, pad: int) -> Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=pad)  # (b, width)


def _clean(x: Tensor, eos: int, pad: int) -> Tensor:
    """Troca por ``<pad>`` tudo o que vem depois do primeiro ``<eos>`` de cada linha."""
    is_eos = x == eos  # (b, t)
    after = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0  # (b, t): depois do 1º <eos>
    return x.masked_fill(after, pad)


def _match_variants(pred: Tensor, target: Tensor, eos: int, pad: int) -> dict[str, float]:
    """A resposta certa e as de alguns enganos comuns, para o diagnóstico."""
    width = max(pred.shape[1], target.shape[1])
    p, g = _pad_to(pred, width, pad), _pad_to(target, width, pad)  # (b, width)
    right = (_clean(p, eos, pad) == _clean(g, eos, pad)).all(dim=1)  # (b,)
    words = (g != pad) & (g != eos)  # posições das palavras do alvo
    no_eos_check = ((p == g) | ~words).all(dim=1)
    return {
        "certo": right.double().mean().item(),
        "linha inteira": (p == g).all(dim=1).double().mean().item(),
        "sem exigir <eos>": no_eos_check.double().mean().item(),
        "por token": (p == g)[g != pad].double().mean().item(),
    }


def _match_cases() -> list[tuple[Tensor, Tensor, int, int, str]]:
    e, z = 2, 0  # <eos> e <pad> do tpt
    target_a = torch.tensor(
        [
            [10, 11, e, z, z],
            [12, e, z, z, z],
            [10, 12, 13, 14, e],
            [10, 11, 12, e, z],
            [11, 12, e, z, z],
        ]
    )  # (5, 5)
    pred_a = torch.tensor(
        [
            [10, 11, e, e, e, e],  # certo: depois do <eos> o gerador repete <eos>
            [12, e, 13, 14, e, e],  # certo: o que vem depois do <eos> não conta
            [10, 12, 13, 14, 15, e],  # errado: uma palavra a mais antes do <eos>
            [10, 11, 12, 13, 13, 13],  # errado: nunca gerou <eos>
            [11, e, e, e, e, e],  # errado: parou cedo demais
        ]
    )  # (5, 6)
    target_b = torch.tensor([[20, 21, 22, e, z, z], [23, 24, 25, 26, 27, e], [28, e, z, z, z, z]])
    pred_b = torch.tensor([[20, 21, 22, e], [23, 24, 25, 26], [28, e, e, e]])  # (3, 4)
    # Outros ids (<eos> = 5, <pad> = 9): quem escreveu 2 e 0 fixos é apanhado aqui.
    target_c = torch.tensor([[30, 31, 5, 9], [32, 5, 9, 9]])
    pred_c = torch.tensor([[30, 31, 5, 33, 34], [32, 5, 0, 2, 0]])
    return [
        (pred_a, target_a, e, z, "saídas mais largas que os rótulos"),
        (pred_b, target_b, e, z, "saídas mais estreitas que os rótulos (cortadas em max_len)"),
        (pred_c, target_c, 5, 9, "eos_id=5 e pad_id=9"),
    ]


@exercise("Exercício 3 (acerto exato sem laços)")
def check_exact_match(exact_match: Callable[..., Any]) -> None:
    """``exact_match(pred (b, t1), target (b, t2), eos_id, pad_id) -> float`` em [0, 1]."""
    for pred, target, eos, pad, label in _match_cases():
        where = f"no caso '{label}' (pred {_shape(pred)}, target {_shape(target)})"
        variants = _match_variants(pred, target, eos, pad)
        expected = variants["certo"]
        pred_in, target_in = pred.clone(), target.clone()
        try:
            result = exact_match(pred_in, target_in, eos, pad)
        except NotImplementedError:
            raise  # o esboço ainda não resolvido: "pendente", não erro
        except RuntimeError as err:
            raise ExerciseError(
                f"{where}: sua função levantou RuntimeError ({err}). Dica: pred e target podem "
                "ter larguras diferentes; complete a mais estreita com pad_id (F.pad) antes de "
                "comparar posição a posição."
            ) from None
        expect(
            torch.equal(pred_in, pred) and torch.equal(target_in, target),
            f"{where}: sua função modificou pred ou target no lugar; não altere as entradas.",
        )
        if isinstance(result, Tensor):
            expect(
                result.numel() == 1,
                f"{where}: devolva um número (a fração de linhas certas), não um tensor de "
                f"forma {_shape(result)}; termine com .float().mean().item().",
            )
            result = result.item()
        expect(
            isinstance(result, (int, float)) and not isinstance(result, bool),
            f"{where}: devolva um número entre 0 e 1; recebi {type(result).__name__}.",
        )
        result = float(result)
        if abs(result - expected) < _ATOL:
            continue
        expect(
            abs(result - 100 * expected) > _ATOL,
            f"{where}: você devolveu uma porcentagem ({tpt.fmt(result, 1)}); devolva a fração "
            f"em [0, 1] ({tpt.fmt(expected, 2)}).",
        )
        if (eos, pad) != (2, 0):
            fixed = _match_variants(pred, target, 2, 0)["certo"]
            expect(
                abs(result - fixed) > _ATOL,
                f"{where}: esperava {tpt.fmt(expected, 4)}, recebi {tpt.fmt(result, 4)}: parece "
                "que você usou os ids 2 e 0 do tpt; use os valores recebidos em eos_id e pad_id.",
            )
        for name, message in (
            (
                "linha inteira",
                "você comparou também o que vem depois do primeiro <eos>. Depois dele o "
                "gerador escreve qualquer coisa (ou repete <eos>); troque por pad_id tudo o "
                "que vem depois do primeiro <eos> (cumsum da máscara pred == eos_id ajuda).",
            ),
            (
                "sem exigir <eos>",
                "você conferiu só as palavras: uma saída que nunca gera <eos>, ou que "
                "continua depois da última palavra, não está certa. O <eos> também tem de "
                "estar no lugar.",
            ),
            (
                "por token",
                "isso é o acerto por token; o exercício pede o acerto exato: a linha só conta "
                "se a frase inteira (até o <eos>) estiver certa.",
            ),
        ):
            expect(
                abs(result - variants[name]) > _ATOL or abs(variants[name] - expected) < _ATOL,
                f"{where}: esperava {tpt.fmt(expected, 4)}, recebi {tpt.fmt(result, 4)}: "
                + message,
            )
        expect(
            False,
            f"{where}: esperava {tpt.fmt(expected, 4)} (a fração de linhas iguais ao rótulo até "
            f"o primeiro <eos>, inclusive); recebi {tpt.fmt(result, 4)}.",
        )
    expect(
        not uses_loops(exact_match),
        "os resultados estão certos, mas a função usa laço em Python (for, while ou "
        "compreensão de lista). O exercício pede operações em tensores: uma máscara "
        "(b, t) do que vem depois do <eos>, masked_fill e .all(dim=1).",
    )
