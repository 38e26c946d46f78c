"""Conferências dos exercícios do notebook 12_ajuste_fino (tpt.exercises.finetuning).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from exercise_answers import accepted, rejected, stub

import tpt
from tpt.exercises import checks

ex = checks("finetuning")


def test_stubs_are_pending(capsys):
    for check in (ex.check_instruction_labels, ex.check_last_token_pool, ex.check_lora_forward):
        assert check(stub) is False
        assert "⏳" in capsys.readouterr().out


def test_checks_show_only_the_checkers():
    assert sorted(dir(ex)) == [
        "check_instruction_labels",
        "check_last_token_pool",
        "check_lora_forward",
    ]


# --------------------------------------------------------------------------------------
# Exercício 1: instruction_labels
# --------------------------------------------------------------------------------------
def labels_vectorized(ids, prompt_lengths, pad_id, *, offset=0, shift=True, pad=True, fill=-100):
    """Resposta certa (padrão) e, com os argumentos, os erros típicos."""
    b, t = ids.shape
    if shift:
        labels = torch.cat([ids[:, 1:], torch.full((b, 1), pad_id)], dim=1)
        pos = torch.arange(1, t + 1)
    else:
        labels, pos = ids.clone(), torch.arange(t)
    labels[pos[None, :] < prompt_lengths[:, None] + offset] = fill
    if pad:
        labels[labels == pad_id] = fill
    if shift:
        labels[:, -1] = fill
    return labels


def labels_loop(ids, prompt_lengths, pad_id):  # outro estilo: laço por exemplo, em listas
    rows = []
    for row, n in zip(ids.tolist(), prompt_lengths.tolist(), strict=True):
        targets = row[1:] + [pad_id]
        rows.append(
            [
                -100 if (i + 1 < n or tok == pad_id or i == len(row) - 1) else tok
                for i, tok in enumerate(targets)
            ]
        )
    return torch.tensor(rows)


def labels_roll(ids, prompt_lengths, pad_id):  # outro estilo: roll e where
    target = ids.roll(-1, dims=1)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    keep = (positions + 1 >= prompt_lengths.unsqueeze(1)) & (target != pad_id)
    keep[:, -1] = False
    return torch.where(keep, target, torch.tensor(-100)).to(torch.int32)


@pytest.mark.parametrize("answer", [labels_vectorized, labels_loop, labels_roll])
def test_labels_accept_styles(answer, capsys):
    accepted(ex.check_instruction_labels, answer, capsys)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (dict(shift=False), "não estão deslocados"),
        (dict(offset=-100), "o prompt não foi mascarado"),
        (dict(pad=False), "o <pad> não foi mascarado"),
        (dict(offset=1), "o primeiro token da resposta foi mascarado"),
        (dict(offset=-1), "a última posição do prompt"),
        (dict(fill=0), "use -100"),
    ],
)
def test_labels_wrong_answers(kwargs, fragment, capsys):
    rejected(
        ex.check_instruction_labels,
        lambda ids, n, pad: labels_vectorized(ids, n, pad, **kwargs),
        capsys,
        fragment,
    )


def test_labels_rules(capsys):
    def in_place(ids, prompt_lengths, pad_id):
        ids[:, 0] = pad_id
        return labels_vectorized(ids, prompt_lengths, pad_id)

    rejected(ex.check_instruction_labels, in_place, capsys, "modificou `ids` no lugar")
    rejected(
        ex.check_instruction_labels,
        lambda ids, n, pad: labels_vectorized(ids, n, pad).float(),
        capsys,
        "tensor de inteiros",
    )
    rejected(ex.check_instruction_labels, lambda ids, n, pad: ids[:, :-1], capsys, "forma")


# --------------------------------------------------------------------------------------
# Exercício 2: last_token_pool
# --------------------------------------------------------------------------------------
def pool_argmax(hidden, ids, pad_id):
    positions = torch.arange(ids.shape[1])
    last = ((ids != pad_id) * positions).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0]), last]


def pool_flip(hidden, ids, pad_id):  # outro estilo: o primeiro não-pad da sequência invertida
    t = ids.shape[1]
    last = t - 1 - (ids != pad_id).flip(1).int().argmax(dim=1)
    return torch.gather(hidden, 1, last.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])).squeeze(1)


def pool_loop(hidden, ids, pad_id):  # outro estilo: laço por exemplo
    rows = []
    for h, row in zip(hidden, ids, strict=True):
        real = (row != pad_id).nonzero().flatten()
        rows.append(h[real[-1]])
    return torch.stack(rows)


@pytest.mark.parametrize("answer", [pool_argmax, pool_flip, pool_loop])
def test_pool_accepts_styles(answer, capsys):
    accepted(ex.check_last_token_pool, answer, capsys)


def test_pool_wrong_answers(capsys):
    def count(hidden, ids, pad_id):
        n = (ids != pad_id).sum(dim=1) - 1
        return hidden[torch.arange(hidden.shape[0]), n]

    def masked_mean(hidden, ids, pad_id):
        w = (ids != pad_id).to(hidden.dtype).unsqueeze(-1)
        return (hidden * w).sum(1) / w.sum(1)

    rejected(ex.check_last_token_pool, lambda h, i, p: h[:, -1], capsys, "hidden[:, -1]")
    rejected(ex.check_last_token_pool, count, capsys, "com o <pad> à esquerda")
    rejected(ex.check_last_token_pool, lambda h, i, p: h[:, 0], capsys, "primeira posição")
    rejected(ex.check_last_token_pool, masked_mean, capsys, "média")
    rejected(ex.check_last_token_pool, lambda h, i, p: h[:, -1, None], capsys, "forma")


def test_pool_gradient_and_rules(capsys):
    def detached(hidden, ids, pad_id):
        return pool_argmax(hidden, ids, pad_id).detach()

    rejected(ex.check_last_token_pool, detached, capsys, "gradiente")


# --------------------------------------------------------------------------------------
# Exercício 3: lora_forward
# --------------------------------------------------------------------------------------
def lora_two_products(x, weight, bias, A, B, alpha):
    out = x @ weight.T + (alpha / A.shape[0]) * (x @ A.T) @ B.T
    return out if bias is None else out + bias


def lora_functional(x, weight, bias, A, B, alpha):  # outro estilo: F.linear três vezes
    return F.linear(x, weight, bias) + F.linear(F.linear(x, A), B) * (alpha / A.shape[0])


def lora_einsum(x, weight, bias, A, B, alpha):  # outro estilo: einsum
    low = torch.einsum("...i,ri->...r", x, A)
    out = torch.einsum("...i,oi->...o", x, weight) + alpha / len(A) * torch.einsum(
        "...r,or->...o", low, B
    )
    return out + bias if bias is not None else out


@pytest.mark.parametrize("answer", [lora_two_products, lora_functional, lora_einsum])
def test_lora_accepts_styles(answer, capsys):
    accepted(ex.check_lora_forward, answer, capsys)


def test_lora_wrong_answers(capsys):
    def merged(x, weight, bias, A, B, alpha):  # certo nos números, mas monta W + BA
        return F.linear(x, weight + (alpha / A.shape[0]) * B @ A, bias)

    def no_scale(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A, B, float(A.shape[0]))

    def alpha_only(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A, B, alpha * A.shape[0])

    def no_base(x, weight, bias, A, B, alpha):
        return lora_two_products(x, torch.zeros_like(weight), bias, A, B, alpha)

    def no_bias(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, None, A, B, alpha)

    def detached(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A.detach(), B, alpha)

    rejected(ex.check_lora_forward, merged, capsys, "tamanho de W")
    rejected(ex.check_lora_forward, no_scale, capsys, "faltou a escala")
    rejected(ex.check_lora_forward, alpha_only, capsys, "sem dividir por r")
    rejected(ex.check_lora_forward, no_base, capsys, "x Wᵀ")
    rejected(ex.check_lora_forward, no_bias, capsys, "viés")
    rejected(ex.check_lora_forward, detached, capsys, "`A`")


def test_lora_refuses_the_library(capsys):
    def library(x, weight, bias, A, B, alpha):
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        layer = layer.to(x.dtype)
        with torch.no_grad():
            layer.weight.copy_(weight)
            if bias is not None:
                layer.bias.copy_(bias)
            wrapped = tpt.LoRALinear.from_linear(layer, rank=A.shape[0], alpha=alpha)
            wrapped.lora_A["all"].copy_(A)
            wrapped.lora_B["all"].copy_(B)
        return wrapped(x)

    rejected(ex.check_lora_forward, library, capsys, "código pronto do tpt", "LoRALinear")


def test_pool_refuses_the_library(capsys):
    rejected(
        ex.check_last_token_pool,
        lambda h, i, p: tpt.pool_last_token(h, i, p),
        capsys,
        "código pronto do tpt",
        "pool_last_token",
    )
