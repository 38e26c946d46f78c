"""Conferências dos exercícios do notebook 12_ajuste_fino (tpt.exercises.finetuning).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from exercise_answers import accepted, rejected, stub

import tpt
from tpt.exercises import checks

ex = checks("finetuning")


def test_stubs_are_pending(capsys):
    for check in (
        ex.check_instruction_labels,
        ex.check_last_token_pool,
        ex.check_lora_forward,
        ex.check_sequence_loss,
    ):
        assert check(stub) is False
        assert "⏳" in capsys.readouterr().out


def test_checks_show_only_the_checkers():
    assert sorted(dir(ex)) == [
        "check_instruction_labels",
        "check_last_token_pool",
        "check_lora_forward",
        "check_sequence_loss",
    ]


def test_random_case_messages_have_single_parentheses(capsys):
    """A semente vai entre parênteses uma vez só ("lote sorteado 1, pad_id = 2 (caso...)")."""
    outs = [
        rejected(ex.check_instruction_labels, lambda ids, n, pad: ids[:, :-1], capsys),
        rejected(ex.check_last_token_pool, lambda h, i, p: h[:, :-1], capsys),
        rejected(ex.check_lora_forward, lambda x, w, b, a, bb, al: x, capsys),
        rejected(ex.check_sequence_loss, lambda lg, i, p: lg[..., 0], capsys),
    ]
    for out in outs:
        assert "( (" not in out and "((" not in out, out


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
    return torch.where(keep, target, torch.tensor(-100))


def labels_reference(ids, prompt_lengths, pad_id):  # a solução do notebook
    b, t = ids.shape
    target = torch.cat([ids[:, 1:], torch.full((b, 1), pad_id, dtype=ids.dtype)], dim=1)
    target_position = torch.arange(1, t + 1).expand(b, t)
    ignore = (target_position < prompt_lengths[:, None]) | (target == pad_id)
    ignore[:, -1] = True
    return target.masked_fill(ignore, -100)


def labels_new_full(ids, prompt_lengths, pad_id):  # outro estilo: cópia e atribuições
    labels = ids.new_full(ids.shape, -100)
    labels[:, :-1] = ids[:, 1:]
    for row, n in enumerate(prompt_lengths.tolist()):
        labels[row, : n - 1] = -100
    labels[labels == pad_id] = -100
    return labels


def labels_f_pad(ids, prompt_lengths, pad_id):  # outro estilo: F.pad com -100 no fim
    labels = F.pad(ids[:, 1:], (0, 1), value=-100)
    positions = torch.arange(1, ids.shape[1] + 1)
    labels = labels.masked_fill(positions < prompt_lengths[:, None], -100)
    return labels.masked_fill(labels == pad_id, -100)


def labels_int32_cast(ids, prompt_lengths, pad_id):  # conta em int32, devolvida em long
    return labels_vectorized(ids.int(), prompt_lengths.int(), pad_id).long()


@pytest.mark.parametrize(
    "answer",
    [
        labels_vectorized,
        labels_loop,
        labels_roll,
        labels_reference,
        labels_new_full,
        labels_f_pad,
        labels_int32_cast,
    ],
)
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


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_labels_must_be_long(dtype, capsys):
    """O formato do tpt.lm_loss: a F.cross_entropy recusa os outros inteiros (e o uint8 não
    guarda o -100)."""
    rejected(
        ex.check_instruction_labels,
        lambda ids, n, pad: labels_vectorized(ids, n, pad).to(dtype),
        capsys,
        "torch.long (int64)",
        str(dtype),
    )
    if dtype != torch.uint8:
        with pytest.raises(RuntimeError):
            F.cross_entropy(torch.randn(2, 5), torch.tensor([1, -100], dtype=dtype))


def test_labels_hard_coded_pad_zero(capsys):
    rejected(
        ex.check_instruction_labels,
        lambda ids, n, pad: labels_vectorized(ids, n, 0),
        capsys,
        "pad_id = 3",
        "o id 0 foi tratado como <pad>",
    )


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


def pool_last_index(hidden, ids, pad_id):  # outro estilo: o índice com where e max
    t = ids.shape[1]
    positions = torch.where(ids != pad_id, torch.arange(t), -1)
    return hidden[torch.arange(len(hidden)), positions.max(dim=1).values]


@pytest.mark.parametrize("answer", [pool_argmax, pool_flip, pool_loop, pool_last_index])
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


def test_pool_hard_coded_pad_zero(capsys):
    def pad_zero(hidden, ids, pad_id):
        return pool_argmax(hidden, ids, 0)

    def greater_than_pad(hidden, ids, pad_id):  # "ids > pad_id" como token de verdade
        positions = torch.arange(ids.shape[1])
        return hidden[torch.arange(hidden.shape[0]), ((ids > pad_id) * positions).argmax(dim=1)]

    rejected(ex.check_last_token_pool, pad_zero, capsys, "pad_id = 2", "o id 0 como <pad>")
    rejected(ex.check_last_token_pool, greater_than_pad, capsys, "pad_id = 2", "maiores que pad_id")


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


def lora_bmm(x, weight, bias, A, B, alpha):  # outro estilo: bmm sobre as linhas achatadas
    s = alpha / A.shape[0]
    rows = x.reshape(1, -1, x.shape[-1])
    out = torch.bmm(rows, weight.T.unsqueeze(0)) + s * torch.bmm(
        torch.bmm(rows, A.T.unsqueeze(0)), B.T.unsqueeze(0)
    )
    out = out.reshape(*x.shape[:-1], -1)
    return out if bias is None else out + bias


def lora_addmm(x, weight, bias, A, B, alpha):  # outro estilo: addmm com alpha=
    rows = x.reshape(-1, x.shape[-1])
    base = torch.mm(rows, weight.T) if bias is None else torch.addmm(bias, rows, weight.T)
    out = torch.addmm(base, torch.mm(rows, A.T), B.T, alpha=alpha / A.shape[0])
    return out.view(*x.shape[:-1], -1)


def lora_tensordot(x, weight, bias, A, B, alpha):  # outro estilo: tensordot
    low = torch.tensordot(x, A, dims=([-1], [1]))
    out = torch.tensordot(x, weight, dims=([-1], [1])) + (alpha / A.shape[0]) * torch.tensordot(
        low, B, dims=([-1], [1])
    )
    return out if bias is None else out + bias


def lora_verbose(x, weight, bias, A, B, alpha):  # prolixa: cópias e um tensor de escala
    scaling = torch.tensor(alpha, dtype=x.dtype) / A.shape[0]
    base = torch.matmul(x, weight.transpose(0, 1))
    if bias is not None:
        base = base + bias.unsqueeze(0).unsqueeze(0)
    delta = torch.matmul(torch.matmul(x, A.transpose(0, 1)), B.transpose(0, 1)) * scaling
    return (base.clone() + delta.clone()).contiguous()


def lora_scaled_A(x, weight, bias, A, B, alpha):  # a escala aplicada em A
    return F.linear(x, weight, bias) + F.linear(F.linear(x, (alpha / A.shape[0]) * A), B)


def lora_in_place_sum(x, weight, bias, A, B, alpha):  # += num tensor novo (não na entrada)
    out = F.linear(x, weight, bias)
    out += (alpha / A.shape[0]) * F.linear(F.linear(x, A), B)
    return out


def lora_scale_last(x, weight, bias, A, B, alpha):  # (x Aᵀ Bᵀ) · α / r, nessa ordem
    out = x @ weight.t() + (x @ A.t() @ B.t()) * alpha / A.shape[0]
    return out if bias is None else out + bias


def lora_column_loop(x, weight, bias, A, B, alpha):  # lenta, mas certa: uma saída por vez
    s = alpha / A.shape[0]
    low = x @ A.T
    out = torch.stack([x @ weight[o] + s * (low @ B[o]) for o in range(weight.shape[0])], -1)
    return out if bias is None else out + bias


LORA_RIGHT = [
    lora_two_products,
    lora_functional,
    lora_einsum,
    lora_bmm,
    lora_addmm,
    lora_tensordot,
    lora_verbose,
    lora_scaled_A,
    lora_in_place_sum,
    lora_column_loop,
    lora_scale_last,
]


@pytest.mark.parametrize("answer", LORA_RIGHT)
def test_lora_accepts_styles(answer, capsys):
    accepted(ex.check_lora_forward, answer, capsys)


@pytest.mark.parametrize("answer", LORA_RIGHT)
def test_lora_right_answers_stay_far_below_the_size_of_W(answer):
    """O limite é o tamanho de W; as respostas certas criam menos da metade dele nos casos
    da conferência (os fixos e os extremos dos sorteados): folga de 2× contra recusas falsas."""
    from tpt.exercises.finetuning import _Allocations

    g = torch.Generator().manual_seed(0)
    for lead, d_in, d_out, r in [
        ((2, 3), 96, 80, 2),  # o caso fixo 1
        ((1, 2), 64, 72, 4),  # o caso fixo 2
        ((2, 2), 64, 128, 4),  # sorteados: b·t e r no máximo, d_in e d_out nos extremos
        ((2, 2), 128, 64, 4),
        ((2, 2), 64, 64, 4),
    ]:
        x = torch.randn(*lead, d_in, generator=g, dtype=torch.float64)
        weight = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
        A = torch.randn(r, d_in, generator=g, dtype=torch.float64)
        B = torch.randn(d_out, r, generator=g, dtype=torch.float64)
        for bias in (torch.randn(d_out, generator=g, dtype=torch.float64), None):
            record = _Allocations()
            with record:
                answer(x, weight, bias, A, B, 7.5)
            total = sum(math.prod(shape) for _, shape in record.created)
            assert total < 0.5 * d_out * d_in, (answer.__name__, lead, d_in, d_out, total)


def test_lora_wrong_answers(capsys):
    def merged(x, weight, bias, A, B, alpha):  # certo nos números, mas monta W + BA
        return F.linear(x, weight + (alpha / A.shape[0]) * B @ A, bias)

    def no_scale(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A, B, float(A.shape[0]))

    def alpha_only(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A, B, alpha * A.shape[0])

    def no_base(x, weight, bias, A, B, alpha):  # só a correção da LoRA (e o viés)
        out = (alpha / A.shape[0]) * (x @ A.T) @ B.T
        return out if bias is None else out + bias

    def no_bias(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, None, A, B, alpha)

    def detached(x, weight, bias, A, B, alpha):
        return lora_two_products(x, weight, bias, A.detach(), B, alpha)

    rejected(ex.check_lora_forward, merged, capsys, "tamanho de W")
    rejected(ex.check_lora_forward, no_scale, capsys, "faltou a escala")
    rejected(ex.check_lora_forward, alpha_only, capsys, "sem dividir por r")
    rejected(ex.check_lora_forward, no_base, capsys, "faltou a saída da camada original")
    rejected(ex.check_lora_forward, no_bias, capsys, "viés")
    rejected(ex.check_lora_forward, detached, capsys, "`A`")


def test_lora_scale_must_allow_a_fractional_alpha(capsys):
    """α = 7,5 com r = 2 (o caso fixo 1): α // r e int(α) / r dão outra escala."""

    def floor_division(x, weight, bias, A, B, alpha):
        return F.linear(x, weight, bias) + (alpha // A.shape[0]) * F.linear(F.linear(x, A), B)

    def integer_alpha(x, weight, bias, A, B, alpha):
        return F.linear(x, weight, bias) + (int(alpha) / A.shape[0]) * F.linear(F.linear(x, A), B)

    rejected(ex.check_lora_forward, floor_division, capsys, "α = 7,5", "α // r", "3,75")
    rejected(ex.check_lora_forward, integer_alpha, capsys, "α = 7,5", "int(α) = 7", "3,75")


def test_lora_refuses_w_plus_ba_in_any_shape(capsys):
    """W + (α/r)·BA achatada, junto de A num torch.cat, em blocos de linhas, linha a linha, e
    o produto com x por broadcasting (um tensor maior que W)."""

    def flat(x, weight, bias, A, B, alpha):
        d_out, d_in = weight.shape
        delta = (B.repeat_interleave(d_in, 0) * A.T.repeat(d_out, 1)).sum(1)  # (d_out·d_in,)
        merged = (weight.reshape(-1) + (alpha / A.shape[0]) * delta).view(d_out, d_in)
        return F.linear(x, merged, bias)

    def flat_mm(x, weight, bias, A, B, alpha):
        merged = weight.flatten() + (alpha / A.shape[0]) * (B @ A).flatten()
        return F.linear(x, merged.view_as(weight), bias)

    def concatenated(x, weight, bias, A, B, alpha):
        d_out = weight.shape[0]
        both = F.linear(x, torch.cat([weight, A]))
        out = both[..., :d_out] + (alpha / A.shape[0]) * F.linear(both[..., d_out:], B)
        return out if bias is None else out + bias

    def row_blocks(x, weight, bias, A, B, alpha):
        s, k = alpha / A.shape[0], 8
        blocks = [
            F.linear(x, weight[i : i + k] + s * B[i : i + k] @ A)
            for i in range(0, weight.shape[0], k)
        ]
        out = torch.cat(blocks, -1)
        return out if bias is None else out + bias

    def row_by_row(x, weight, bias, A, B, alpha):
        s = alpha / A.shape[0]
        out = torch.stack([x @ (weight[o] + s * B[o] @ A) for o in range(weight.shape[0])], -1)
        return out if bias is None else out + bias

    def broadcast(x, weight, bias, A, B, alpha):
        base = (x.unsqueeze(-2) * weight).sum(-1)  # (..., d_out, d_in) antes da soma
        out = base + (alpha / A.shape[0]) * F.linear(F.linear(x, A), B)
        return out if bias is None else out + bias

    def associated(x, weight, bias, A, B, alpha):  # x (Aᵀ Bᵀ): o produto dos fatores antes
        return F.linear(x, weight, bias) + x @ (A.T @ B.T) * (alpha / A.shape[0])

    for answer in (flat, flat_mm, concatenated, broadcast, associated):
        rejected(ex.check_lora_forward, answer, capsys, "criou um tensor de", "tamanho de W")
    out = rejected(ex.check_lora_forward, concatenated, capsys, "pela operação cat")
    assert "(82, 96)" in out
    out = rejected(ex.check_lora_forward, associated, capsys, "pela operação mm")
    assert "(96, 80)" in out and "um fator de cada vez" in out
    for answer in (row_blocks, row_by_row):
        rejected(
            ex.check_lora_forward,
            answer,
            capsys,
            "os tensores que sua função criou somam",
            "pedaços",
        )


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


def test_labels_refuse_the_library(capsys):
    def library(ids, prompt_lengths, pad_id):  # os rótulos do lote de instruções do tpt
        from tpt.data.number_text import _lm_batch

        rows = [([tok for tok in row if tok != pad_id], n)
                for row, n in zip(ids.tolist(), prompt_lengths.tolist(), strict=True)]
        targets = _lm_batch(rows, pad_id)["targets"]
        out = torch.full(ids.shape, -100, dtype=torch.long)
        out[:, : targets.shape[1]] = targets
        return out

    # Sem a guarda, a resposta estaria certa: os rótulos são os mesmos da referência.
    ids = torch.tensor([[5, 6, 7, 8, 9, 2, 0, 0], [5, 7, 4, 4, 2, 0, 0, 0]])
    lengths = torch.tensor([3, 2])
    assert torch.equal(library(ids, lengths, 0), labels_vectorized(ids, lengths, 0))
    rejected(ex.check_instruction_labels, library, capsys, "código pronto do tpt", "_lm_batch")


def test_pool_refuses_the_library(capsys):
    rejected(
        ex.check_last_token_pool,
        lambda h, i, p: tpt.pool_last_token(h, i, p),
        capsys,
        "código pronto do tpt",
        "pool_last_token",
    )


# --------------------------------------------------------------------------------------
# Exercício 4: sequence_loss
# --------------------------------------------------------------------------------------
def seq_reference(logits, ids, pad_id):  # a solução do notebook
    real = ids != pad_id
    counted = real[:, :-1] & real[:, 1:]
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return (losses * counted).sum(dim=1) / counted.sum(dim=1)


def seq_gather(logits, ids, pad_id):  # outro estilo: log_softmax e gather
    picked = logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    keep = (ids[:, :-1] != pad_id) & (ids[:, 1:] != pad_id)
    return -(picked * keep).sum(1) / keep.sum(1)


def seq_loop(logits, ids, pad_id):  # outro estilo: o trecho sem <pad> de cada sequência
    out = []
    for lg, row in zip(logits, ids, strict=True):
        real = (row != pad_id).nonzero().flatten()
        start, end = int(real[0]), int(real[-1]) + 1
        out.append(F.cross_entropy(lg[start : end - 1], row[start + 1 : end]))
    return torch.stack(out)


def seq_ignore_index(logits, ids, pad_id):  # ignore_index no alvo, e o <pad> da entrada também
    targets = ids[:, 1:].masked_fill(ids[:, :-1] == pad_id, pad_id)
    losses = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=pad_id, reduction="none"
    ).view(targets.shape)
    return losses.sum(1) / (targets != pad_id).sum(1)


def seq_logsumexp(logits, ids, pad_id):  # outro estilo: logsumexp menos o logit do token
    x, y = logits[:, :-1], ids[:, 1:]
    nll = x.logsumexp(-1) - x.gather(-1, y[..., None])[..., 0]
    keep = ((ids[:, :-1] != pad_id) & (y != pad_id)).to(logits.dtype)
    return (nll * keep).sum(-1) / keep.sum(-1)


def seq_nanmean(logits, ids, pad_id):  # outro estilo: NaN nas posições ignoradas e nanmean
    nll = -logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    keep = (ids[:, :-1] != pad_id) & (ids[:, 1:] != pad_id)
    return torch.where(keep, nll, torch.nan).nanmean(dim=1)


def seq_categorical(logits, ids, pad_id):  # outro estilo: torch.distributions
    log_p = torch.distributions.Categorical(logits=logits[:, :-1]).log_prob(ids[:, 1:])
    keep = ((ids[:, :-1] != pad_id) & (ids[:, 1:] != pad_id)).float()
    return -(log_p * keep).sum(1) / keep.sum(1).clamp(min=1)


def seq_masked_rows(logits, ids, pad_id):  # softmax().log() e a média das linhas, uma a uma
    nll = -logits.softmax(-1).log()[:, :-1].gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
    keep = (ids[:, :-1] != pad_id) & (ids[:, 1:] != pad_id)
    return torch.stack([nll[k][keep[k]].mean() for k in range(len(ids))])


def seq_roll(logits, ids, pad_id):  # outro estilo: roll, nll_loss e a última posição fora
    following = ids.roll(-1, 1)
    keep = (ids != pad_id) & (following != pad_id)
    keep[:, -1] = False
    nll = F.nll_loss(logits.log_softmax(-1).transpose(1, 2), following, reduction="none")
    return (nll * keep).sum(1) / keep.sum(1)


def seq_double(logits, ids, pad_id):  # a conta em float64 (devolve float64 também em float32)
    return seq_reference(logits.double(), ids, pad_id)


SEQ_RIGHT = [
    seq_reference,
    seq_gather,
    seq_loop,
    seq_ignore_index,
    seq_logsumexp,
    seq_nanmean,
    seq_categorical,
    seq_masked_rows,
    seq_roll,
    seq_double,
]


@pytest.mark.parametrize("answer", SEQ_RIGHT)
def test_sequence_loss_accepts_styles(answer, capsys):
    accepted(ex.check_sequence_loss, answer, capsys)


def seq_wrong(logits, ids, pad_id, *, shift=1, mask="both", divide="count", dim=-1, raw=False):
    """Os erros típicos, escritos como um aluno os escreveria."""
    logp = logits if raw else logits.log_softmax(dim=dim)
    if shift == 1:
        scores, targets, inputs = logp[:, :-1], ids[:, 1:], ids[:, :-1]
    elif shift == 0:
        scores, targets, inputs = logp[:, :-1], ids[:, :-1], ids[:, :-1]
    else:
        scores, targets, inputs = logp[:, 1:], ids[:, :-1], ids[:, 1:]
    nll = -scores.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = {
        "both": (inputs != pad_id) & (targets != pad_id),
        "target": targets != pad_id,
        "input": inputs != pad_id,
        "none": torch.ones_like(targets, dtype=torch.bool),
    }[mask]
    total = (nll * keep).sum(1)
    return {"count": total / keep.sum(1), "all": total / keep.shape[1], "sum": total}[divide]


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        (dict(shift=0), ["o próprio token i"]),
        (dict(shift=-1), ["lado errado"]),
        (dict(mask="target"), ["<pad> à esquerda", "o primeiro token nunca é previsto"]),
        (dict(mask="input"), ["prevê um <pad>"]),
        (dict(mask="none"), ["nenhuma posição foi ignorada"]),
        (dict(divide="all"), ["dividida por t - 1"]),
        (dict(divide="sum"), ["você somou"]),
        (dict(dim=1), ["eixo das posições"]),
        (dict(raw=True), ["sem o log-softmax"]),
    ],
)
def test_sequence_loss_wrong_answers(kwargs, fragments, capsys):
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: seq_wrong(lg, i, p, **kwargs),
        capsys,
        *fragments,
    )


def test_sequence_loss_ignore_index_alone_fails_on_the_left(capsys):
    """O ignore_index=pad_id da F.cross_entropy só olha o alvo: à direita dá certo, à
    esquerda a posição do último <pad> (que prevê o primeiro token) entra na média."""

    def ignore_index_only(logits, ids, pad_id):
        losses = F.cross_entropy(
            logits[:, :-1].transpose(1, 2), ids[:, 1:], ignore_index=pad_id, reduction="none"
        )
        return losses.sum(1) / (ids[:, 1:] != pad_id).sum(1)

    out = rejected(ex.check_sequence_loss, ignore_index_only, capsys, "<pad> à esquerda")
    assert "o mesmo lote preenchido à esquerda" in out


def test_sequence_loss_other_wrong_answers(capsys):
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: seq_reference(lg, i, p) / math.log(2),
        capsys,
        "bits",
    )
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: seq_reference(lg, i, 0),
        capsys,
        "pad_id = 2",
        "o id 0 foi tratado como <pad>",
    )

    def token_mean(logits, ids, pad_id):  # uma média só, de todas as posições (como lm_loss)
        real = ids != pad_id
        counted = real[:, :-1] & real[:, 1:]
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        return (losses * counted).sum() / counted.sum()

    rejected(ex.check_sequence_loss, token_mean, capsys, "média do lote inteiro", "forma (3,)")

    def greater_than_pad(logits, ids, pad_id):  # "ids > pad_id" como token de verdade
        real = ids > pad_id
        keep = real[:, :-1] & real[:, 1:]
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        return (losses * keep).sum(1) / keep.sum(1)

    rejected(ex.check_sequence_loss, greater_than_pad, capsys, "pad_id = 2", "maiores que pad_id")
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: seq_reference(lg, i, p).mean(),
        capsys,
        "média do lote inteiro",
    )
    rejected(
        ex.check_sequence_loss, lambda lg, i, p: seq_reference(lg, i, p)[:, None], capsys, "forma"
    )
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: seq_reference(lg.float(), i, p).double(),
        capsys,
        "float32",
    )


def test_sequence_loss_gradient_and_inputs(capsys):
    def detached(logits, ids, pad_id):
        return seq_reference(logits.detach(), ids, pad_id)

    def no_grad(logits, ids, pad_id):
        with torch.no_grad():
            return seq_reference(logits, ids, pad_id)

    def in_place(logits, ids, pad_id):
        logits -= logits.max(dim=-1, keepdim=True).values  # muda os logits de quem chamou
        return seq_reference(logits, ids, pad_id)

    rejected(ex.check_sequence_loss, detached, capsys, "gradiente")
    rejected(ex.check_sequence_loss, no_grad, capsys, "gradiente")
    rejected(ex.check_sequence_loss, in_place, capsys, "modificou `logits` no lugar")


def test_sequence_loss_refuses_the_library(capsys):
    """Qualquer código do tpt, pelo arquivo de onde vem: aqui o tpt.lm_loss, linha a linha
    (uma perda por sequência que o tpt venha a ganhar é recusada do mesmo jeito)."""

    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, ids):
            return self.logits

    def with_lm_loss(logits, ids, pad_id):
        out = []
        for row in range(ids.shape[0]):
            real = ids[row] != pad_id
            targets = torch.where(real[:-1] & real[1:], ids[row, 1:], -100)
            targets = torch.cat([targets, torch.tensor([-100])])
            model = Fixed(logits[row : row + 1]).eval()
            batch = {"input_ids": ids[row : row + 1], "targets": targets[None]}
            out.append(tpt.lm_loss(model, batch))
        return torch.stack(out)

    rejected(
        ex.check_sequence_loss,
        with_lm_loss,
        capsys,
        "código pronto do tpt",
        "lm_loss, de tpt/train.py",
    )


@pytest.mark.skipif(not hasattr(tpt, "sequence_loss"), reason="o tpt ainda não tem sequence_loss")
def test_sequence_loss_refuses_a_future_tpt_sequence_loss(capsys):
    """O nome combinado com o notebook 12 para uma perda por sequência na biblioteca
    (``tpt.sequence_loss(logits, ids, pad_id)``): se ela existir, é código pronto."""
    rejected(
        ex.check_sequence_loss,
        lambda lg, i, p: tpt.sequence_loss(lg, i, p),
        capsys,
        "código pronto do tpt",
        "sequence_loss, de tpt/",
    )
