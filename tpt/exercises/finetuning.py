"""Exercícios do notebook 12 (ajuste fino): ``ex = checks("finetuning")``.

1. :func:`check_instruction_labels`: os rótulos de um lote de instruções (prompt →
   resposta numa sequência só, preenchida à direita): o rótulo da posição ``i`` é o token
   ``i + 1`` (o deslocamento), e vira ``-100`` (o ``ignore_index`` da
   ``F.cross_entropy``) quando esse token é do prompt ou ``<pad>``; a última posição não
   tem próximo token.
2. :func:`check_last_token_pool`: o estado oculto do último token que não é ``<pad>`` de
   cada sequência, com preenchimento à direita, à esquerda ou sem preenchimento (a regra
   do ``LlamaForSequenceClassification``).
3. :func:`check_lora_forward`: a saída de uma camada linear com LoRA,
   ``x Wᵀ + b + (α/r)·(x Aᵀ) Bᵀ``, sem nunca montar a matriz ``W + (α/r)·B A`` (nenhum
   tensor do tamanho de ``W`` pode ser criado), com os gradientes certos para ``x``, ``A``
   e ``B``.

As conferências rodam a resposta com casos fixos e sorteados a cada execução. O código
pronto do ``tpt`` que resolve cada exercício (o ``forward`` do ``LoRALinear`` de
``tpt/lora.py``, a escolha do último token do classificador de ``tpt/model.py`` e
``tpt/classifier.py``, se existir) é recusado pelo que roda. Um diagnóstico só aparece
quando a variante errada correspondente foi calculada e bateu com a resposta.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from tpt.exercises.core import exercise, expect, expect_close
from tpt.exercises.guards import call_answer, case_generator, check_gradients, randint, seed_note
from tpt.exercises.rules import functions_from_file, record_ops, record_python_calls

__all__ = ["check_instruction_labels", "check_last_token_pool", "check_lora_forward"]

IGNORE_INDEX = -100


def _library_files(*modules: str) -> list[str]:
    """Os arquivos dos módulos do ``tpt`` que existem nesta instalação."""
    files = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "__file__", None):
            files.append(str(Path(module.__file__).resolve()))
    return files


def _refuse_library(codes: set, files: list[str], where: str, what: str) -> None:
    used = sorted({name for path in files for name in functions_from_file(codes, path)})
    expect(
        not used,
        f"{where}, sua função rodou código pronto do tpt ({', '.join(used)}): o exercício "
        f"pede {what} escrito por você.",
    )


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
        "ÚLTIMA posição do prompt (prompt_lengths - 1), que tem de ficar.",
        dict(prompt_offset=1),
    ),
    (
        "a última posição do prompt ficou com um token do prompt como rótulo: mascare as "
        "posições cujo PRÓXIMO token é do prompt.",
        dict(prompt_offset=-1),
    ),
    (
        "o valor das posições ignoradas está errado: use -100, o ignore_index padrão da "
        "F.cross_entropy (e dos modelos do transformers).",
        dict(fill=0),
    ),
)


def _instruction_batch(gen: torch.Generator, b: int, vocab: int, pad_id: int) -> tuple:
    """Um lote preenchido à direita: prompt + resposta (terminada por um <eos>) + <pad>."""
    prompts = [randint(gen, 1, 5) for _ in range(b)]
    answers = [randint(gen, 1, 5) for _ in range(b)]
    t = max(p + a for p, a in zip(prompts, answers, strict=True)) + randint(gen, 0, 2)
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        ids[row, : p + a] = torch.randint(pad_id + 1, vocab, (p + a,), generator=gen)
    return ids, torch.tensor(prompts)


@exercise("Exercício 1 (rótulos de instrução)")
def check_instruction_labels(instruction_labels: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``instruction_labels(ids (b, t), prompt_lengths (b,), pad_id) -> labels (b, t)``."""
    gen, seed = case_generator()
    fixed = torch.tensor(
        [[5, 6, 7, 8, 9, 2, 0, 0], [5, 7, 4, 4, 2, 0, 0, 0], [6, 6, 6, 9, 8, 7, 9, 2]]
    )
    cases = [
        ("o lote fixo de 3 sequências (pad_id = 0)", fixed, torch.tensor([3, 2, 4]), 0),
        ("um lote sem preenchimento (pad_id = 0)", fixed[2:], torch.tensor([5]), 0),
    ]
    for k in range(2):
        b = randint(gen, 1, 5)
        pad_id = randint(gen, 0, 3)
        ids, lengths = _instruction_batch(gen, b, 20, pad_id)
        cases.append(
            (
                f"o lote sorteado {k + 1} ({seed_note(seed)}, pad_id = {pad_id})",
                ids,
                lengths,
                pad_id,
            )
        )
    files = _library_files("tpt.lora", "tpt.classifier")
    for description, ids, lengths, pad_id in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            got = call_answer(
                instruction_labels,
                {"ids": ids, "prompt_lengths": lengths, "pad_id": pad_id},
                where,
                _LABELS_HINT,
            )
        _refuse_library(codes, files, where, "o rótulo")
        expect(
            isinstance(got, Tensor)
            and not got.is_floating_point()
            and not got.is_complex()
            and got.dtype != torch.bool,
            f"{where}, esperava um tensor de inteiros (os ids dos rótulos, como torch.long); "
            f"recebi {type(got).__name__ if not isinstance(got, Tensor) else got.dtype}.",
        )
        variants = [(why, _labels(ids, lengths, pad_id, **kw)) for why, kw in _LABELS_VARIANTS]
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
        "Procure a MAIOR posição cujo token não é <pad>.",
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


def _pool_batch(gen: torch.Generator, b: int, t: int, d: int, pad_id: int, side: str) -> tuple:
    ids = torch.randint(pad_id + 1, pad_id + 30, (b, t), generator=gen)
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
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    cases = [
        ("o lote fixo preenchido à direita (pad_id = 0)", hidden, ids, 0),
        ("o lote fixo preenchido à esquerda (pad_id = 0)", hidden, left, 0),
    ]
    for side in ("direita", "esquerda"):
        b, t, d = randint(gen, 2, 5), randint(gen, 2, 9), randint(gen, 1, 6)
        pad_id = randint(gen, 0, 3)
        h, i = _pool_batch(gen, b, t, d, pad_id, side)
        cases.append(
            (
                f"um lote sorteado preenchido à {side} ({seed_note(seed)}, pad_id = {pad_id})",
                h,
                i,
                pad_id,
            )
        )
    files = _library_files("tpt.model", "tpt.classifier")
    for description, h, i, pad_id in cases:
        where = f"Para {description}"
        with record_python_calls() as codes:
            got = call_answer(
                last_token_pool, {"hidden": h, "ids": i, "pad_id": pad_id}, where, _POOL_HINT
            )
        _refuse_library(codes, files, where, "a escolha do último token")
        variants = [(why, _pool(h, i, pad_id, how)) for why, how in _POOL_VARIANTS]
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
    factor = {"alpha/r": alpha / r, "alpha": alpha, "1": 1.0, "r/alpha": r / alpha}[scale]
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


def _recording(answer: Callable[..., Tensor], recorded: list) -> Callable[..., Tensor]:
    """A resposta, gravando só as operações dela: a cópia e a comparação das entradas que
    ``call_answer`` faz (para ver se algo mudou no lugar) ficam de fora."""

    def watched(*values: object) -> Tensor:
        with record_ops() as record:
            recorded.append(record)
            return answer(*values)

    return watched


@exercise("Exercício 3 (o forward da LoRA)")
def check_lora_forward(lora_forward: Callable[..., Tensor]) -> None:
    """``lora_forward(x, weight, bias, A, B, alpha) -> x Wᵀ + b + (α/r)·(x Aᵀ) Bᵀ``."""
    gen, seed = case_generator()
    shapes = [("o caso fixo", (2, 3), 12, 10, 2, 4.0, True)]
    for k in range(2):
        d_in, d_out = randint(gen, 8, 24), randint(gen, 8, 24)
        lead = (randint(gen, 1, 2), randint(gen, 1, 3))  # b·t < d_in: a saída é menor que W
        shapes.append(
            (
                f"o caso sorteado {k + 1} ({seed_note(seed)})",
                lead,
                d_in,
                d_out,
                randint(gen, 1, 4),
                float(randint(gen, 1, 16)),
                bool(k),
            )
        )
    files = _library_files("tpt.lora")
    for description, lead, d_in, d_out, r, alpha, with_bias in shapes:
        where = f"Para {description}, x {(*lead, d_in)}, W {(d_out, d_in)}, r = {r}, α = {alpha:g}"
        x = torch.randn(*lead, d_in, generator=gen, dtype=torch.float64)
        weight = torch.randn(d_out, d_in, generator=gen, dtype=torch.float64)
        bias = torch.randn(d_out, generator=gen, dtype=torch.float64) if with_bias else None
        A = torch.randn(r, d_in, generator=gen, dtype=torch.float64)
        B = torch.randn(d_out, r, generator=gen, dtype=torch.float64)
        args = {"x": x, "weight": weight, "bias": bias, "A": A, "B": B, "alpha": alpha}
        recorded: list = []
        with record_python_calls() as codes:
            got = call_answer(_recording(lora_forward, recorded), args, where, _LORA_HINT)
        ops = recorded[0]
        _refuse_library(codes, files, where, "o forward da LoRA")
        full = ops.materialized((d_out, d_in)) | ops.materialized((d_in, d_out))
        expect(
            not full,
            f"{where}, sua função criou um tensor do tamanho de W ({d_out} × {d_in}, pela "
            f"operação {', '.join(sorted(full))}): montar W + (α/r)·B A custa a memória de "
            "uma cópia de W a cada forward. Some as duas saídas: x Wᵀ e (x Aᵀ) Bᵀ.",
        )
        variants = [(why, _lora(**args, **kw)) for why, kw in _LORA_VARIANTS]
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
