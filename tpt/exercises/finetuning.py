"""Exercícios do notebook 12 (ajuste fino): ``ex = checks("finetuning")``.

1. :func:`check_instruction_labels`: os rótulos de um lote de instruções (prompt →
   resposta numa sequência só, preenchida à direita), em ``torch.long``: o rótulo da
   posição ``i`` é o token ``i + 1`` (o deslocamento), e vira ``-100`` (o ``ignore_index``
   da ``F.cross_entropy``) quando esse token é do prompt ou ``<pad>``; a última posição
   não tem próximo token.
2. :func:`check_last_token_pool`: o estado oculto do último token que não é ``<pad>`` de
   cada sequência, com preenchimento à direita, à esquerda ou sem preenchimento (a regra
   do ``LlamaForSequenceClassification``).
3. :func:`check_lora_forward`: a saída de uma camada linear com LoRA,
   ``x Wᵀ + b + (α/r)·(x Aᵀ) Bᵀ``, sem nunca montar a matriz ``W + (α/r)·B A``, nem
   inteira nem em pedaços (os tensores criados na chamada somam menos elementos que
   ``W``), com os gradientes certos para ``x``, ``A`` e ``B``.
4. :func:`check_sequence_loss`: a perda de cada sequência pelo próprio modelo de
   linguagem, ``(b,)`` em nats: a média de ``-log p(token i + 1)`` sobre as posições
   ``i`` em que o token ``i`` e o ``i + 1`` não são ``<pad>`` (a mesma perda com o
   ``<pad>`` à direita, à esquerda ou sem preenchimento), com o gradiente certo em
   relação aos logits.

As conferências rodam a resposta com casos fixos (entre eles um ``pad_id`` diferente de
0, com o id 0 como token de verdade, e um α fracionário) e casos sorteados a cada
execução. Nenhum código pronto do ``tpt`` pode rodar dentro da resposta (o classificador,
a LoRA, as perdas, ou uma função que a biblioteca venha a ganhar): a conferência vê pelo
que executa, qualquer que seja o nome. Um diagnóstico só aparece quando a variante errada
correspondente foi calculada e bateu com a resposta.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tpt.exercises.core import exercise, expect, expect_close, max_abs_diff
from tpt.exercises.guards import call_answer, case_generator, check_gradients, randint, seed_note
from tpt.exercises.messages import ExerciseError, difference_text
from tpt.exercises.rules import record_python_calls
from tpt.numfmt import fmt

__all__ = [
    "check_instruction_labels",
    "check_last_token_pool",
    "check_lora_forward",
    "check_sequence_loss",
]

IGNORE_INDEX = -100


# O pacote tpt; as conferências (tpt/exercises) e a correção de turmas (tpt/turma) não
# são "código pronto": quem cuida delas é a guarda (tpt.exercises.guards.sandbox).
_TPT_DIR = Path(__file__).resolve().parent.parent
_NOT_LIBRARY = (_TPT_DIR / "exercises", _TPT_DIR / "turma")


@functools.cache
def _tpt_library_file(filename: str) -> str | None:
    """``tpt/arquivo.py`` se ``filename`` é um módulo da biblioteca ``tpt``; senão ``None``."""
    if filename.startswith("<"):
        return None
    path = Path(os.path.realpath(filename))
    if _TPT_DIR not in path.parents or any(d in path.parents for d in _NOT_LIBRARY):
        return None
    return path.relative_to(_TPT_DIR.parent).as_posix()


def _refuse_library(codes: set, where: str, what: str) -> None:
    """Recusa a resposta se alguma função da biblioteca ``tpt`` rodou durante a chamada.

    Vale para qualquer função do pacote (as de hoje e as que ele venha a ganhar, como uma
    perda por sequência): a função é reconhecida pelo arquivo do seu código, não pelo nome
    com que foi chamada.
    """
    found: dict[str, set[str]] = {}
    for code in tuple(codes):
        path = _tpt_library_file(code.co_filename)
        if path is not None:
            found.setdefault(path, set()).add(getattr(code, "co_qualname", code.co_name))
    if not found:
        return
    shown = []
    for path, names in sorted(found.items()):
        # Os nomes públicos (os auxiliares internos só quando não há outro).
        public = sorted(n for n in names if not any(p[:1] in "_<" for p in n.split(".")))
        shown.append(f"{', '.join(public or sorted(names))}, de {path}")
    raise ExerciseError(
        f"{where}, sua função rodou código pronto do tpt ({'; '.join(shown)}): o exercício "
        f"pede {what}, com o PyTorch."
    )


def _tokens(gen: torch.Generator, shape: tuple[int, ...], vocab: int, pad_id: int) -> Tensor:
    """Ids sorteados em ``[0, vocab)`` menos ``pad_id``: ids abaixo do ``<pad>`` também."""
    ids = torch.randint(0, vocab - 1, shape, generator=gen)
    return ids + (ids >= pad_id).long()  # pula o pad_id


# --------------------------------------------------------------------------------------
# Exercício 1: rótulos de instrução
# --------------------------------------------------------------------------------------
_LABELS_HINT = (
    "Confira a assinatura, instruction_labels(ids, prompt_lengths, pad_id): ids é (b, t), "
    "prompt_lengths é (b,) e a saída é um tensor de inteiros (b, t)."
)


def _labels(
    ids: Tensor,
    prompt_lengths: Tensor,
    pad_id: int,
    *,
    shift: bool = True,
    mask_prompt: bool = True,
    mask_pad: bool = True,
    prompt_offset: int = 0,
    fill: int = IGNORE_INDEX,
) -> Tensor:
    """A referência (padrão) e, com os argumentos, os erros típicos."""
    b, t = ids.shape
    positions = torch.arange(t).expand(b, t)  # (b, t)
    if shift:
        target = torch.cat([ids[:, 1:], torch.full((b, 1), pad_id, dtype=ids.dtype)], dim=1)
        target_pos = positions + 1  # a posição do token que cada posição prevê
    else:
        target, target_pos = ids.clone(), positions
    ignore = torch.zeros(b, t, dtype=torch.bool)
    if mask_prompt:
        ignore |= target_pos < (prompt_lengths[:, None] + prompt_offset)
    if mask_pad:
        ignore |= target == pad_id
    if shift:
        ignore[:, -1] = True  # a última posição não tem próximo token
    return target.masked_fill(ignore, fill)


_LABELS_VARIANTS = (
    (
        "os rótulos não estão deslocados: o rótulo da posição i é o token i + 1 (o que o "
        "modelo deve prever depois de ler até i), não o próprio token i.",
        dict(shift=False),
    ),
    (
        "o prompt não foi mascarado: os tokens do prompt também ficaram como rótulos; eles "
        "viram -100, e só a resposta (com o <eos>) é cobrada.",
        dict(mask_prompt=False),
    ),
    (
        "o <pad> não foi mascarado: as posições cujo próximo token é <pad> também viram -100.",
        dict(mask_pad=False),
    ),
    (
        "o primeiro token da resposta foi mascarado junto com o prompt: ele é o rótulo da "
        "última posição do prompt (prompt_lengths - 1), que tem de ficar.",
        dict(prompt_offset=1),
    ),
    (
        "a última posição do prompt ficou com um token do prompt como rótulo: mascare as "
        "posições cujo próximo token (não o próprio) é do prompt.",
        dict(prompt_offset=-1),
    ),
    (
        "o valor das posições ignoradas está errado: use -100, o ignore_index padrão da "
        "F.cross_entropy (e dos modelos do transformers).",
        dict(fill=0),
    ),
)


_LABELS_PAD_ZERO = (
    "o id 0 foi tratado como <pad>: use o pad_id recebido (aqui o <pad> é outro id, e 0 é "
    "um token de verdade)."
)


def _instruction_batch(gen: torch.Generator, b: int, vocab: int, pad_id: int) -> tuple:
    """Um lote preenchido à direita: prompt + resposta (terminada por um <eos>) + <pad>."""
    prompts = [randint(gen, 1, 5) for _ in range(b)]
    answers = [randint(gen, 1, 5) for _ in range(b)]
    t = max(p + a for p, a in zip(prompts, answers, strict=True)) + randint(gen, 0, 2)
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        ids[row, : p + a] = _tokens(gen, (p + a,), vocab, pad_id)
    return ids, torch.tensor(prompts)


def _expect_long(got: Any, where: str) -> None:
    """Os rótulos são um tensor ``torch.long``, o formato de alvo do ``tpt.lm_loss``."""
    expect(
        isinstance(got, Tensor),
        f"{where}, esperava que labels fosse um tensor; recebi {type(got).__name__}.",
    )
    expect(
        not (got.is_floating_point() or got.is_complex() or got.dtype == torch.bool),
        f"{where}, esperava um tensor de inteiros (os ids dos rótulos, em torch.long); recebi "
        f"{got.dtype}.",
    )
    expect(
        got.dtype == torch.long,
        f"{where}, esperava os rótulos em torch.long (int64), o formato do tpt.lm_loss; recebi "
        f"{got.dtype}. A F.cross_entropy, que o tpt.lm_loss chama, recusa alvos em int8, int16 "
        "e int32, e o uint8 não guarda o -100. Crie os tensores com dtype=ids.dtype ou "
        "converta com .long().",
    )


@exercise("Exercício 1 (rótulos de instrução)")
def check_instruction_labels(instruction_labels: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``instruction_labels(ids (b, t), prompt_lengths (b,), pad_id) -> labels (b, t)``."""
    gen, seed = case_generator()
    fixed = torch.tensor(
        [[5, 6, 7, 8, 9, 2, 0, 0], [5, 7, 4, 4, 2, 0, 0, 0], [6, 6, 6, 9, 8, 7, 9, 2]]
    )
    # pad_id = 3, com os ids 0, 1 e 2 como tokens de verdade (no prompt e na resposta).
    other_pad = torch.tensor([[4, 0, 5, 1, 0, 2, 3, 3], [0, 1, 6, 0, 2, 3, 3, 3]])
    cases = [
        ("o lote fixo de 3 sequências (pad_id = 0)", fixed, torch.tensor([3, 2, 4]), 0),
        ("um lote sem preenchimento (pad_id = 0)", fixed[2:], torch.tensor([5]), 0),
        ("o lote fixo com pad_id = 3 (0, 1 e 2 são tokens)", other_pad, torch.tensor([2, 3]), 3),
    ]
    for k in range(2):
        b = randint(gen, 1, 5)
        pad_id = randint(gen, 0, 3)
        ids, lengths = _instruction_batch(gen, b, 20, pad_id)
        cases.append(
            (f"o lote sorteado {k + 1}, pad_id = {pad_id}{seed_note(seed)}", ids, lengths, pad_id)
        )
    for description, ids, lengths, pad_id in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            got = call_answer(
                instruction_labels,
                {"ids": ids, "prompt_lengths": lengths, "pad_id": pad_id},
                where,
                _LABELS_HINT,
            )
        _refuse_library(codes, where, "os rótulos escritos por você")
        _expect_long(got, where)
        variants = [(why, _labels(ids, lengths, pad_id, **kw)) for why, kw in _LABELS_VARIANTS]
        if pad_id != 0:
            variants.append((_LABELS_PAD_ZERO, _labels(ids, lengths, 0)))
        expect_close(
            got, _labels(ids, lengths, pad_id), where, atol=0.0, name="labels", variants=variants
        )


# --------------------------------------------------------------------------------------
# Exercício 2: o último token que não é <pad>
# --------------------------------------------------------------------------------------
_POOL_HINT = (
    "Confira a assinatura, last_token_pool(hidden, ids, pad_id): hidden é (b, t, d), ids é "
    "(b, t) e a saída é (b, d)."
)


def _pool(hidden: Tensor, ids: Tensor, pad_id: int, how: str = "last_real") -> Tensor:
    """A referência (``last_real``) e as escolhas erradas típicas."""
    b, t, _ = hidden.shape
    real = ids != pad_id  # (b, t)
    positions = torch.arange(t).expand(b, t)
    if how == "last_real":
        index = (positions * real).argmax(dim=1)  # a maior posição com token de verdade
    elif how == "last":
        index = torch.full((b,), t - 1)
    elif how == "count":
        index = (real.sum(dim=1) - 1).clamp(min=0)  # só vale com preenchimento à direita
    elif how == "first":
        index = torch.zeros(b, dtype=torch.long)
    elif how == "first_pad":
        has_pad = (~real).any(dim=1)
        index = torch.where(has_pad, (~real).long().argmax(dim=1), torch.full((b,), t - 1))
    elif how == "greater":
        index = (positions * (ids > pad_id)).argmax(dim=1)
    elif how == "mean":
        weights = real.to(hidden.dtype)[..., None]
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    else:
        raise ValueError(how)
    return hidden[torch.arange(b), index]


_POOL_VARIANTS = (
    (
        "você pegou a última posição, hidden[:, -1]: com preenchimento à direita ela é um "
        "<pad>. Pegue a última posição cujo token não é <pad>.",
        "last",
    ),
    (
        "você contou os tokens de verdade e pegou a posição (contagem - 1): isso só vale com "
        "preenchimento à direita; com o <pad> à esquerda os tokens de verdade ficam no fim. "
        "Procure a maior posição cujo token não é <pad>.",
        "count",
    ),
    (
        "você pegou a primeira posição: com atenção causal ela só viu o primeiro token. O "
        "último token de verdade é o único que viu a sequência inteira.",
        "first",
    ),
    (
        "você pegou a posição do primeiro <pad>: o último token de verdade vem uma posição "
        "antes (e, com o <pad> à esquerda, em outro lugar).",
        "first_pad",
    ),
    (
        "você tirou a média dos estados dos tokens de verdade: o exercício pede o estado do "
        "último deles, a regra do LlamaForSequenceClassification.",
        "mean",
    ),
)


_POOL_GREATER = (
    "você tomou como tokens de verdade só os ids maiores que pad_id: todo id diferente de "
    "pad_id é um token (aqui os ids menores que ele também)."
)
_POOL_PAD_ZERO = (
    "você tratou o id 0 como <pad>: use o pad_id recebido (aqui o <pad> é outro id, e 0 é um "
    "token de verdade)."
)


def _pool_batch(gen: torch.Generator, b: int, t: int, d: int, pad_id: int, side: str) -> tuple:
    ids = _tokens(gen, (b, t), 30, pad_id)
    lengths = [randint(gen, 1, t) for _ in range(b)]
    lengths[0] = t if b > 1 else lengths[0]  # uma sequência cheia, quando houver várias
    for row, n in enumerate(lengths):
        if side == "direita":
            ids[row, n:] = pad_id
        else:
            ids[row, : t - n] = pad_id
    hidden = torch.randn(b, t, d, generator=gen, dtype=torch.float64)
    return hidden, ids


@exercise("Exercício 2 (o último token que não é <pad>)")
def check_last_token_pool(last_token_pool: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``last_token_pool(hidden (b, t, d), ids (b, t), pad_id) -> (b, d)``."""
    gen, seed = case_generator()
    ids = torch.tensor([[7, 8, 9, 0, 0], [7, 8, 9, 9, 9], [7, 0, 0, 0, 0]])
    left = torch.tensor([[0, 0, 7, 8, 9], [7, 8, 9, 9, 9], [0, 0, 0, 0, 7]])
    # pad_id = 2, com os ids 0 e 1 como tokens de verdade (a linha do meio, cheia, termina
    # em 0: tratar o 0 como <pad> ali não é o mesmo que pegar a última posição).
    other_pad = torch.tensor([[0, 5, 0, 2, 2], [4, 1, 6, 0, 0], [1, 2, 2, 2, 2]])
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    cases = [
        ("o lote fixo preenchido à direita (pad_id = 0)", hidden, ids, 0),
        ("o lote fixo preenchido à esquerda (pad_id = 0)", hidden, left, 0),
        (
            "o lote fixo preenchido à direita com pad_id = 2 (0 e 1 são tokens)",
            hidden,
            other_pad,
            2,
        ),
    ]
    for side in ("direita", "esquerda"):
        b, t, d = randint(gen, 2, 5), randint(gen, 2, 9), randint(gen, 1, 6)
        pad_id = randint(gen, 0, 3)
        h, i = _pool_batch(gen, b, t, d, pad_id, side)
        cases.append(
            (
                f"um lote sorteado preenchido à {side}, pad_id = {pad_id}{seed_note(seed)}",
                h,
                i,
                pad_id,
            )
        )
    for description, h, i, pad_id in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            got = call_answer(
                last_token_pool, {"hidden": h, "ids": i, "pad_id": pad_id}, where, _POOL_HINT
            )
        _refuse_library(codes, where, "a escolha do último token escrita por você")
        variants = [(why, _pool(h, i, pad_id, how)) for why, how in _POOL_VARIANTS]
        if pad_id != 0:
            variants.append((_POOL_PAD_ZERO, _pool(h, i, 0)))
            variants.append((_POOL_GREATER, _pool(h, i, pad_id, "greater")))
        expect_close(got, _pool(h, i, pad_id), where, atol=1e-12, variants=variants)
    h, i = _pool_batch(gen, 3, 6, 4, 0, "esquerda")
    check_gradients(
        last_token_pool,
        _pool,
        {"hidden": h, "ids": i, "pad_id": 0},
        "No teste de gradiente (preenchimento à esquerda)",
        wrt=("hidden",),
    )


# --------------------------------------------------------------------------------------
# Exercício 3: o forward da LoRA, sem montar W + BA
# --------------------------------------------------------------------------------------
_LORA_HINT = (
    "Confira a assinatura, lora_forward(x, weight, bias, A, B, alpha): x é (..., d_in), "
    "weight é (d_out, d_in), bias é (d_out,) ou None, A é (r, d_in), B é (d_out, r) e a "
    "saída é (..., d_out)."
)


def _lora(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    A: Tensor,
    B: Tensor,
    alpha: float,
    *,
    scale: str = "alpha/r",
    use_base: bool = True,
    use_bias: bool = True,
) -> Tensor:
    r = A.shape[0]
    factor = {
        "alpha/r": alpha / r,
        "alpha": alpha,
        "1": 1.0,
        "r/alpha": r / alpha,
        "alpha//r": alpha // r,
        "int(alpha)/r": int(alpha) / r,
    }[scale]
    out = (x @ A.T) @ B.T * factor
    if use_base:
        out = out + x @ weight.T
    if use_bias and bias is not None:
        out = out + bias
    return out


_LORA_VARIANTS = (
    (
        "a parte da LoRA foi multiplicada por α, sem dividir por r: a escala é α/r.",
        dict(scale="alpha"),
    ),
    ("faltou a escala α/r na parte da LoRA.", dict(scale="1")),
    ("a escala está invertida: é α/r, não r/α.", dict(scale="r/alpha")),
    (
        "faltou a saída da camada original, x Wᵀ (+ b): a LoRA soma uma correção a ela.",
        dict(use_base=False),
    ),
    ("faltou o viés b da camada original.", dict(use_bias=False)),
)


def _lora_variants(alpha: float, r: int) -> list[tuple[str, dict]]:
    """As variantes erradas, com os números do caso nas mensagens que precisam deles."""
    a, scale = _number(alpha), _number(alpha / r)
    return [
        *_LORA_VARIANTS,
        (
            f"a escala foi arredondada: α // r é a divisão inteira (aqui {a} // {r} = "
            f"{_number(alpha // r)}, e α/r = {scale}). Use α / r.",
            dict(scale="alpha//r"),
        ),
        (
            f"α virou inteiro antes da divisão (int(α) = {_number(int(alpha))}, mas α = {a}): "
            f"α pode ser fracionário, e a escala é α/r = {scale}.",
            dict(scale="int(alpha)/r"),
        ),
    ]


def _number(value: float) -> str:
    """Um α ou uma escala em pt-BR, com as casas que o número tem (até 4)."""
    for places in range(5):
        if abs(value - round(value, places)) < 1e-12:
            return fmt(float(value), places) if places else fmt(int(round(value)))
    return fmt(float(value), 4)


class _Allocations(TorchDispatchMode):
    """Os tensores novos (memória nova) que cada operação do PyTorch cria no bloco.

    Vistas (``view``, ``reshape`` de um tensor contíguo, ``.T``) e operações no lugar
    devolvem a memória de uma das entradas: não contam. Um tensor criado e jogado fora a
    cada volta de um laço conta a cada vez (é a soma do que foi alocado, não o pico).
    """

    def __init__(self) -> None:
        super().__init__()
        self.created: list[tuple[str, tuple[int, ...]]] = []  # (operação, forma)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, Tensor)
        }
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.created.append((func.overloadpacket.__name__, tuple(t.shape)))
        return out


def _recording(answer: Callable[..., Tensor], recorded: list) -> Callable[..., Tensor]:
    """A resposta, gravando só as alocações dela: a cópia e a comparação das entradas que
    ``call_answer`` faz (para ver se algo mudou no lugar) ficam de fora."""

    def watched(*values: object) -> Tensor:
        record = _Allocations()
        recorded.append(record)
        with record:
            return answer(*values)

    return watched


def _expect_small(created: list, where: str, d_out: int, d_in: int, out_numel: int) -> None:
    """Nenhum tensor criado do tamanho de W, nem a soma deles (W montada em pedaços)."""
    size = d_out * d_in
    w = f"W ({d_out} × {d_in} = {fmt(size)} elementos)"
    big = [(op, shape) for op, shape in created if math.prod(shape) >= size]
    if big:
        op, shape = max(big, key=lambda item: math.prod(item[1]))
        raise ExerciseError(
            f"{where}, sua função criou um tensor de {fmt(math.prod(shape))} elementos (forma "
            f"{shape}, pela operação {op}), do tamanho de {w} ou maior. A regra é não criar "
            "nada desse tamanho: B A, W + (α/r)·B A (inteira, achatada ou junto de outra "
            "matriz, como num torch.cat) ou o produto de x por W com broadcasting custam, a "
            "cada forward, a memória de uma cópia de W. Multiplique x por um fator de cada "
            "vez e some as duas saídas, x Wᵀ e (x Aᵀ) Bᵀ."
        )
    total = sum(math.prod(shape) for _, shape in created)
    expect(
        total < size,
        f"{where}, os tensores que sua função criou somam {fmt(total)} elementos "
        f"({fmt(len(created))} tensores, nenhum sozinho do tamanho de W), tanto quanto {w} "
        f"ou mais. Neste caso a saída tem {fmt(out_numel)} elementos, e as contas x Wᵀ e "
        "(x Aᵀ) Bᵀ criam poucos tensores desse tamanho: a soma passa do tamanho de W quando "
        "W + (α/r)·B A é montada em pedaços (blocos de linhas ou de colunas, uma linha por "
        "vez). Some as duas saídas, sem formar nenhuma parte de uma matriz d_out × d_in.",
    )


@exercise("Exercício 3 (o forward da LoRA)")
def check_lora_forward(lora_forward: Callable[..., Tensor]) -> None:
    """``lora_forward(x, weight, bias, A, B, alpha) -> x Wᵀ + b + (α/r)·(x Aᵀ) Bᵀ``."""
    gen, seed = case_generator()
    # (descrição, forma de x sem o último eixo, d_in, d_out, r, α, com viés). As saídas
    # têm poucas linhas (b·t <= 6): uma resposta certa cria menos da metade do tamanho de
    # W (medido em tests/test_exercises_finetuning.py), e o limite é o tamanho de W.
    shapes = [
        ("o caso fixo 1", (2, 3), 96, 80, 2, 7.5, True),  # α fracionário, não divisível por r
        ("o caso fixo 2", (1, 2), 64, 72, 4, 16.0, False),
    ]
    for k in range(2):
        shapes.append(
            (
                f"o caso sorteado {k + 1}{seed_note(seed)}",
                (randint(gen, 1, 2), randint(gen, 1, 2)),
                randint(gen, 64, 128),
                randint(gen, 64, 128),
                randint(gen, 1, 4),
                randint(gen, 1, 64) / 4,  # α em quartos: inteiro ou fracionário
                bool(k),
            )
        )
    for description, lead, d_in, d_out, r, alpha, with_bias in shapes:
        where = (
            f"Para {description}, x {(*lead, d_in)}, W {(d_out, d_in)}, r = {r}, "
            f"α = {_number(alpha)}"
        )
        x = torch.randn(*lead, d_in, generator=gen, dtype=torch.float64)
        weight = torch.randn(d_out, d_in, generator=gen, dtype=torch.float64)
        bias = torch.randn(d_out, generator=gen, dtype=torch.float64) if with_bias else None
        A = torch.randn(r, d_in, generator=gen, dtype=torch.float64)
        B = torch.randn(d_out, r, generator=gen, dtype=torch.float64)
        args = {"x": x, "weight": weight, "bias": bias, "A": A, "B": B, "alpha": alpha}
        recorded: list = []
        with record_python_calls() as codes:
            got = call_answer(_recording(lora_forward, recorded), args, where, _LORA_HINT)
        _refuse_library(codes, where, "o forward da LoRA escrito por você")
        _expect_small(recorded[0].created, where, d_out, d_in, math.prod(lead) * d_out)
        variants = [(why, _lora(**args, **kw)) for why, kw in _lora_variants(alpha, r)]
        expect_close(got, _lora(**args), where, atol=1e-10, variants=variants)
    x = torch.randn(2, 3, 10, generator=gen)
    weight, A, B = (
        torch.randn(7, 10, generator=gen),
        torch.randn(2, 10, generator=gen),
        torch.randn(7, 2, generator=gen),
    )
    check_gradients(
        lora_forward,
        _lora,
        {
            "x": x,
            "weight": weight,
            "bias": torch.randn(7, generator=gen),
            "A": A,
            "B": B,
            "alpha": 8.0,
        },
        "No teste de gradiente (float32)",
        wrt=("x", "A", "B"),
        atol=1e-4,
    )


# --------------------------------------------------------------------------------------
# Exercício 4: a perda de cada sequência pelo próprio modelo de linguagem
# --------------------------------------------------------------------------------------
_SEQ_HINT = (
    "Confira a assinatura, sequence_loss(logits, ids, pad_id): logits é (b, t, V), ids é "
    "(b, t) e a saída é (b,), uma perda por sequência."
)


def _seq_loss(
    logits: Tensor,
    ids: Tensor,
    pad_id: int,
    *,
    shift: int = 1,
    mask: str = "both",
    divide: str = "count",
    log_dim: int = -1,
    raw: bool = False,
) -> Tensor:
    """A referência (padrão) e, com os argumentos, os erros típicos.

    ``shift``: 1 (a posição ``i`` prevê o token ``i + 1``), 0 (o próprio token) ou -1 (os
    logits da posição ``i + 1`` contra o token ``i``); ``mask``: quais posições contam
    (``both``: o token ``i`` e o ``i + 1`` não são ``<pad>``; ``target``: só o ``i + 1``;
    ``input``: só o ``i``; ``none``: todas; ``greater``: as dos ids maiores que
    ``pad_id``); ``divide``: ``count`` (a média), ``all`` (a
    soma dividida por ``t - 1``) ou ``sum`` (sem dividir).
    """
    real = ids != pad_id  # (b, t)
    logp = logits if raw else logits.log_softmax(dim=log_dim)  # (b, t, V)
    if shift == 1:
        scores, targets, inputs = logp[:, :-1], ids[:, 1:], real[:, :-1]
    elif shift == -1:
        scores, targets, inputs = logp[:, 1:], ids[:, :-1], real[:, 1:]
    else:
        scores, targets, inputs = logp[:, :-1], ids[:, :-1], real[:, :-1]
    losses = -scores.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (b, t - 1)
    target_real = targets != pad_id
    if mask == "greater":  # "token de verdade" = id maior que o pad_id
        real = ids > pad_id
        inputs, target_real = real[:, :-1], real[:, 1:]
        mask = "both"
    counted = {
        "both": inputs & target_real,
        "target": target_real,
        "input": inputs,
        "none": torch.ones_like(inputs),
    }[mask]
    total = (losses * counted).sum(dim=1)  # (b,)
    if divide == "sum":
        return total
    if divide == "all":
        return total / counted.shape[1]
    return total / counted.sum(dim=1)


_SEQ_VARIANTS = (
    (
        "a posição i foi comparada com o próprio token i: os logits da posição i preveem o "
        "token i + 1 (compare logits[:, :-1] com ids[:, 1:]).",
        dict(shift=0),
    ),
    (
        "o deslocamento está do lado errado: você comparou os logits da posição i + 1 com o "
        "token i. A posição i prevê o token seguinte: logits[:, :-1] contra ids[:, 1:].",
        dict(shift=-1),
    ),
    (
        "com o <pad> à esquerda, a posição do último <pad> prevê o primeiro token da "
        "sequência, e essa posição entrou na sua média; com o <pad> à direita a mesma "
        "sequência não tem essa posição (o primeiro token nunca é previsto). Conte a posição "
        "i só quando o token i e o token i + 1 não são <pad>.",
        dict(mask="target"),
    ),
    (
        "a posição do último token de verdade prevê um <pad> e entrou na sua média: ignore "
        "também as posições cujo próximo token é <pad>.",
        dict(mask="input"),
    ),
    (
        "nenhuma posição foi ignorada: as previsões que envolvem <pad> entraram na média. "
        "Conte a posição i só quando o token i e o token i + 1 não são <pad>.",
        dict(mask="none"),
    ),
    (
        "a soma foi dividida por t - 1, o número de posições do lote, e não pelo número de "
        "posições que contam em cada sequência: a média é só sobre as posições sem <pad>.",
        dict(divide="all"),
    ),
    (
        "você somou as perdas de cada sequência: o exercício pede a média por token previsto "
        "(com a soma, uma palavra mais longa teria perda maior só por ser mais longa).",
        dict(divide="sum"),
    ),
    (
        "o log-softmax foi tirado no eixo das posições (dim=1): ele é sobre o vocabulário, o "
        "último eixo de logits (dim=-1).",
        dict(log_dim=1),
    ),
    (
        "você usou o logit do token, sem o log-softmax: a perda é -log softmax(logits)[token], "
        "a conta da F.cross_entropy.",
        dict(raw=True),
    ),
)

_SEQ_BITS = (
    "a perda está em bits (dividida por ln 2): o exercício pede nats, a unidade da "
    "F.cross_entropy e do tpt.lm_loss."
)
_SEQ_GREATER = (
    "você tomou como tokens de verdade só os ids maiores que pad_id: todo id diferente de "
    "pad_id é um token (aqui os ids menores que ele também)."
)
_SEQ_PAD_ZERO = (
    "o id 0 foi tratado como <pad>: use o pad_id recebido (aqui o <pad> é outro id, e 0 é um "
    "token de verdade)."
)


def _seq_batch(
    gen: torch.Generator, b: int, t: int, vocab: int, pad_id: int, side: str
) -> tuple[Tensor, Tensor]:
    """Ids com pelo menos dois tokens de verdade por sequência, e logits sorteados."""
    ids = _tokens(gen, (b, t), vocab, pad_id)
    lengths = [randint(gen, 2, t) for _ in range(b)]
    lengths[0] = t  # uma sequência sem preenchimento
    for row, n in enumerate(lengths):
        if side == "direita":
            ids[row, n:] = pad_id
        else:
            ids[row, : t - n] = pad_id
    logits = 2 * torch.randn(b, t, vocab, generator=gen, dtype=torch.float64)
    return logits, ids


def _left_padded(logits: Tensor, ids: Tensor, pad_id: int, gen: torch.Generator) -> tuple:
    """O mesmo lote com o <pad> à esquerda: os logits de cada token vão junto com ele, e as
    posições de <pad> ganham logits novos (o que o modelo diria ali não conta)."""
    left_ids = torch.full_like(ids, pad_id)
    left_logits = 2 * torch.randn(logits.shape, generator=gen, dtype=logits.dtype)
    t = ids.shape[1]
    for row in range(ids.shape[0]):
        n = int((ids[row] != pad_id).sum())
        left_ids[row, t - n :] = ids[row, :n]
        left_logits[row, t - n :] = logits[row, :n]
    return left_logits, left_ids


def _expect_per_sequence(got: Any, logits: Tensor, ids: Tensor, pad_id: int, where: str) -> None:
    """Um número só para o lote, quando ele é a média do lote, recebe a explicação."""
    if not (isinstance(got, Tensor) and got.dim() == 0):
        return
    real = ids != pad_id
    counted = real[:, :-1] & real[:, 1:]
    losses = -logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    batch_means = (
        (losses * counted).sum() / counted.sum(),  # a média de todas as posições que contam
        _seq_loss(logits, ids, pad_id).mean(),  # a média das médias
    )
    if any(max_abs_diff(got, mean) <= 1e-6 for mean in batch_means):
        raise ExerciseError(
            f"{where}, você devolveu um número só, a média do lote inteiro (como o "
            f"tpt.lm_loss): o exercício pede uma perda por sequência, forma ({ids.shape[0]},), "
            "para comparar uma palavra com outra."
        )


def _expect_float32_explained(
    got: Tensor, logits: Tensor, ids: Tensor, pad_id: int, where: str, tol: float
) -> None:
    """Uma diferença do tamanho do arredondamento do float32, com logits float64, é explicada."""
    if logits.dtype != torch.float64 or not isinstance(got, Tensor) or got.shape != ids.shape[:1]:
        return
    expected = _seq_loss(logits, ids, pad_id)
    diff = max_abs_diff(got, expected)
    gap = max_abs_diff(_seq_loss(logits.float(), ids, pad_id).double(), expected)
    if tol < diff <= 10 * gap:
        raise ExerciseError(
            f"{where}, o resultado difere do esperado ({difference_text(got, expected)}, "
            f"tolerância {fmt(tol, 0, sci=True)}), uma diferença do tamanho do arredondamento "
            f"do float32 (a mesma conta em float32 difere em {fmt(gap, 1, sci=True)}): a conta "
            "foi feita em float32 em alguma parte, embora os logits sejam float64. Mantenha o "
            "dtype dos logits (cuidado com .float() e com tensores criados sem dtype)."
        )


@exercise("Exercício 4 (a perda de cada sequência)")
def check_sequence_loss(sequence_loss: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``sequence_loss(logits (b, t, V), ids (b, t), pad_id) -> (b,)``, em nats."""
    gen, seed = case_generator()
    fixed_gen = torch.Generator().manual_seed(12)
    right = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 7, 0, 0, 0, 0], [6, 6, 9, 8, 7, 9]])
    logits = 2 * torch.randn(3, 6, 10, generator=fixed_gen, dtype=torch.float64)
    left_logits, left = _left_padded(logits, right, 0, fixed_gen)
    # pad_id = 2, com os ids 0 e 1 como tokens de verdade; logits em float32, como os do
    # modelo.
    other_pad = torch.tensor([[0, 5, 0, 1, 2, 2, 2], [4, 1, 0, 0, 6, 3, 0], [1, 0, 2, 2, 2, 2, 2]])
    other_logits = 2 * torch.randn(3, 7, 8, generator=fixed_gen)
    cases = [
        ("o lote fixo preenchido à direita (pad_id = 0)", logits, right, 0),
        (
            "o mesmo lote preenchido à esquerda (pad_id = 0; os logits de cada token foram "
            "junto com ele, então a perda de cada sequência é a mesma)",
            left_logits,
            left,
            0,
        ),
        (
            "o lote fixo com pad_id = 2 (0 e 1 são tokens) e logits em float32",
            other_logits,
            other_pad,
            2,
        ),
    ]
    for side in ("direita", "esquerda"):
        b, t, vocab = randint(gen, 2, 5), randint(gen, 3, 9), randint(gen, 5, 40)
        pad_id = randint(gen, 0, 3)
        lg, i = _seq_batch(gen, b, t, vocab, pad_id, side)
        cases.append(
            (
                f"um lote sorteado preenchido à {side}, pad_id = {pad_id}{seed_note(seed)}",
                lg,
                i,
                pad_id,
            )
        )
    for description, lg, i, pad_id in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            got = call_answer(
                sequence_loss, {"logits": lg, "ids": i, "pad_id": pad_id}, where, _SEQ_HINT
            )
        _refuse_library(codes, where, "a perda de cada sequência escrita por você")
        _expect_per_sequence(got, lg, i, pad_id, where)
        atol = 1e-9 if lg.dtype == torch.float64 else 1e-5
        variants = [(why, _seq_loss(lg, i, pad_id, **kw)) for why, kw in _SEQ_VARIANTS]
        variants.append((_SEQ_BITS, _seq_loss(lg, i, pad_id) / math.log(2)))
        if pad_id != 0:
            variants.append((_SEQ_PAD_ZERO, _seq_loss(lg, i, 0)))
            variants.append((_SEQ_GREATER, _seq_loss(lg, i, pad_id, mask="greater")))
        _expect_float32_explained(got, lg, i, pad_id, where, atol)
        expect_close(got, _seq_loss(lg, i, pad_id), where, atol=atol, variants=variants)
    lg, i = _seq_batch(gen, 3, 6, 7, 1, "esquerda")
    check_gradients(
        sequence_loss,
        _seq_loss,
        {"logits": lg, "ids": i, "pad_id": 1},
        "No teste de gradiente (preenchimento à esquerda, pad_id = 1)",
        wrt=("logits",),
        atol=1e-9,
    )
