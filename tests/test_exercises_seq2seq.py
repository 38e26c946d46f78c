"""Conferências dos exercícios do notebook 08_encoder_decoder (tpt.exercises.seq2seq)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import seq2seq as ex


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _run(check, answer, capsys) -> tuple[bool, str]:
    result = check(answer)
    return result, capsys.readouterr().out


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: atenção cruzada
# --------------------------------------------------------------------------------------
def _heads(x, h):
    b, n, d = x.shape
    return x.view(b, n, h, d // h).transpose(1, 2)  # (b, h, n, d_h)


def cross_attention(x, memory, q_proj, k_proj, v_proj, out_proj, num_heads, mask=None):
    b, t, d = x.shape
    q = _heads(q_proj(x), num_heads)  # (b, h, t, d_h)
    k = _heads(k_proj(memory), num_heads)  # (b, h, s, d_h)
    v = _heads(v_proj(memory), num_heads)  # (b, h, s, d_h)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // num_heads)  # (b, h, t, s)
    if mask is not None:
        scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
    weights = scores.softmax(dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, t, d)
    return out_proj(out), weights


def _variant(**changes):
    """Uma resposta com UM engano, para ver a mensagem sob medida."""

    def answer(x, memory, q_proj, k_proj, v_proj, out_proj, num_heads, mask=None):
        b, t, d = x.shape
        d_h = d // num_heads
        query_src, kv_src = (memory, x) if changes.get("swap") else (x, memory)
        if changes.get("self"):
            kv_src = x
        q = _heads(q_proj(query_src), num_heads)
        if changes.get("reshape_with_t"):
            k = k_proj(kv_src).view(b, t, num_heads, d_h).transpose(1, 2)
        else:
            k = _heads(k_proj(kv_src), num_heads)
        v = _heads(v_proj(kv_src), num_heads)
        scale = {"model": math.sqrt(d), "none": 1.0}.get(changes.get("scale"), math.sqrt(d_h))
        scores = q @ k.transpose(-2, -1) / scale
        if mask is not None and not changes.get("no_mask") and not changes.get("self"):
            blocked = ~mask if changes.get("invert_mask") else mask
            scores = scores.masked_fill(blocked[:, None, None, :], float("-inf"))
        weights = scores.softmax(dim=-2 if changes.get("softmax_queries") else -1)
        out = weights @ v
        n = out.shape[2]
        if changes.get("no_transpose"):
            out = out.reshape(b, n, d)
        else:
            out = out.transpose(1, 2).reshape(b, n, d)
        if not changes.get("no_out_proj"):
            out = out_proj(out)
        return out, weights

    return answer


def test_cross_attention_reference_passes(capsys):
    ok, out = _run(ex.check_cross_attention, cross_attention, capsys)
    assert ok is True and "✅" in out


def test_cross_attention_alternative_style_passes(capsys):
    # Com einsum e F.softmax, e -1e9 no lugar de -inf: também vale.
    def with_einsum(x, memory, q_proj, k_proj, v_proj, out_proj, num_heads, mask=None):
        b, t, d = x.shape
        s, h = memory.shape[1], num_heads
        q = q_proj(x).reshape(b, t, h, d // h)
        k = k_proj(memory).reshape(b, s, h, d // h)
        v = v_proj(memory).reshape(b, s, h, d // h)
        scores = torch.einsum("bthe,bshe->bhts", q, k) / (d // h) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask.view(b, 1, 1, s), -1e9)
        weights = F.softmax(scores, dim=-1)
        out = torch.einsum("bhts,bshe->bthe", weights, v).reshape(b, t, d)
        return out_proj(out), weights

    ok, out = _run(ex.check_cross_attention, with_einsum, capsys)
    assert ok is True, out


def test_cross_attention_stub_is_pending(capsys):
    ok, out = _run(ex.check_cross_attention, stub, capsys)
    assert ok is False and _pending(out)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"swap": True}, "as consultas vieram do encoder"),
        ({"self": True}, "Isso é autoatenção"),
        ({"reshape_with_t": True}, "use memory.shape[1]"),
        ({"scale": "model"}, "sqrt(d), a largura do modelo"),
        ({"scale": "none"}, "dividiu as pontuações por nada"),
        ({"no_mask": True}, "posições <pad> da memória receberam peso"),
        ({"invert_mask": True}, "a máscara está invertida"),
        ({"softmax_queries": True}, "não somam 1 sobre as chaves"),
        ({"no_out_proj": True}, "faltou a projeção de saída"),
        ({"no_transpose": True}, "sem transpose(1, 2)"),
    ],
)
def test_cross_attention_typical_mistakes(changes, message, capsys):
    ok, out = _run(ex.check_cross_attention, _variant(**changes), capsys)
    assert ok is False and "❌" in out
    assert message in out, out


def test_cross_attention_reshape_error_has_portuguese_hint(capsys):
    ok, out = _run(ex.check_cross_attention, _variant(reshape_with_t=True), capsys)
    assert "Dica: confira as formas" in out and "RuntimeError" in out


@pytest.mark.parametrize(
    "call",
    [
        "tpt_mha",
        "tpt_sdpa",
        "torch_sdpa",
        "torch_mha",
    ],
)
def test_cross_attention_ready_made_attention_is_blocked(call, capsys):
    def ready_made(x, memory, q_proj, k_proj, v_proj, out_proj, num_heads, mask=None):
        b, t, d = x.shape
        if call == "tpt_mha":
            mha = tpt.MultiHeadAttention(d, num_heads, dropout=0.0, fused=False)
            with torch.no_grad():  # linhas de qkv_proj: [Q | K | V]
                mha.qkv_proj.weight.copy_(torch.cat([q_proj.weight, k_proj.weight, v_proj.weight]))
                mha.qkv_proj.bias.copy_(torch.cat([q_proj.bias, k_proj.bias, v_proj.bias]))
            mha.out_proj = out_proj
            return mha(x, memory, memory, key_padding_mask=mask, need_weights=True)
        q = _heads(q_proj(x), num_heads)
        k = _heads(k_proj(memory), num_heads)
        v = _heads(v_proj(memory), num_heads)
        block = None if mask is None else mask[:, None, None, :]
        if call == "tpt_sdpa":
            out, weights = tpt.scaled_dot_product_attention(q, k, v, block)
            return out_proj(out.transpose(1, 2).reshape(b, t, d)), weights
        if call == "torch_sdpa":
            out = F.scaled_dot_product_attention(q, k, v, None if block is None else ~block)
            return out_proj(out.transpose(1, 2).reshape(b, t, d)), None
        mha = nn.MultiheadAttention(d, num_heads, batch_first=True)
        return mha(x, memory, memory, key_padding_mask=mask)

    ok, out = _run(ex.check_cross_attention, ready_made, capsys)
    assert ok is False and "escrita à mão" in out, out


def test_cross_attention_blocked_functions_are_restored():
    ex.check_cross_attention(stub)
    x = torch.randn(1, 2, 8)
    out, _ = tpt.MultiHeadAttention(8, 2)(x)
    assert out.shape == (1, 2, 8)
    q = torch.randn(1, 2, 3, 4)
    assert F.scaled_dot_product_attention(q, q, q).shape == (1, 2, 3, 4)


def test_cross_attention_mutating_inputs_is_rejected(capsys):
    def mutating(x, memory, *rest):
        out = cross_attention(x, memory, *rest)
        memory.zero_()
        return out

    ok, out = _run(ex.check_cross_attention, mutating, capsys)
    assert ok is False and "modificou x ou memory" in out


# --------------------------------------------------------------------------------------
# Exercício 2: deslocamento do teacher forcing
# --------------------------------------------------------------------------------------
def shift_targets(targets, bos_id, eos_id, pad_id):
    width = max(len(t) for t in targets) + 1
    tgt_in = torch.full((len(targets), width), pad_id, dtype=torch.long)
    tgt_out = torch.full((len(targets), width), pad_id, dtype=torch.long)
    for i, target in enumerate(targets):
        tgt_in[i, : len(target) + 1] = torch.tensor([bos_id, *target])
        tgt_out[i, : len(target) + 1] = torch.tensor([*target, eos_id])
    return tgt_in, tgt_out


def shift_with_pad_sequence(targets, bos_id, eos_id, pad_id):
    from torch.nn.utils.rnn import pad_sequence

    ins = [torch.tensor([bos_id, *t]) for t in targets]
    outs = [torch.tensor([*t, eos_id]) for t in targets]
    return (
        pad_sequence(ins, batch_first=True, padding_value=pad_id),
        pad_sequence(outs, batch_first=True, padding_value=pad_id),
    )


@pytest.mark.parametrize("answer", [shift_targets, shift_with_pad_sequence])
def test_shift_reference_and_alternative_pass(answer, capsys):
    ok, out = _run(ex.check_shift_targets, answer, capsys)
    assert ok is True and "✅" in out, out


def test_shift_stub_is_pending(capsys):
    ok, out = _run(ex.check_shift_targets, stub, capsys)
    assert ok is False and _pending(out)


def _shift_variant(kind):
    def answer(targets, bos_id, eos_id, pad_id):
        if kind == "fixed_ids":
            bos_id, eos_id, pad_id = 1, 2, 0
        if kind == "fixed_bos":
            bos_id = 1
        if kind == "fixed_eos":
            eos_id = 2
        tgt_in, tgt_out = shift_targets(targets, bos_id, eos_id, pad_id)
        if kind.startswith("fixed"):
            return tgt_in, tgt_out
        if kind == "swapped":
            return tgt_out, tgt_in
        if kind == "no_shift":
            return tgt_in, tgt_in.clone()
        if kind == "narrow":
            return tgt_in[:, :-1], tgt_out[:, :-1]
        if kind == "lists":
            return tgt_in.tolist(), tgt_out.tolist()
        if kind == "float":
            return tgt_in.float(), tgt_out.float()
        if kind == "eos_in_input":
            both = [[bos_id, *t, eos_id] for t in targets]
            width = max(len(r) for r in both)
            x = torch.tensor([r + [pad_id] * (width - len(r)) for r in both])
            return x[:, :-1], x[:, 1:]
        if kind == "left_pad":
            width = tgt_in.shape[1]
            rows = [[pad_id] * (width - 1 - len(t)) + [bos_id, *t] for t in targets]
            return torch.tensor(rows), tgt_out
        if kind == "eos_at_end":
            width = tgt_out.shape[1]
            rows = [[*t] + [pad_id] * (width - 1 - len(t)) + [eos_id] for t in targets]
            return tgt_in, torch.tensor(rows)
        if kind == "mutates":
            for t in targets:
                t.append(eos_id)
            return shift_targets([t[:-1] for t in targets], bos_id, eos_id, pad_id)
        raise AssertionError(kind)

    return answer


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("swapped", "estão trocados"),
        ("no_shift", "sem o deslocamento"),
        ("narrow", "a largura do lote é"),
        ("lists", "devolva tensores"),
        ("float", "devem ser torch.long"),
        ("eos_in_input", "tgt_in contém <eos>"),
        ("left_pad", "à direita, não à esquerda"),
        ("eos_at_end", "logo depois da última palavra"),
        ("fixed_ids", "não um id fixo"),
        ("fixed_bos", "Use o bos_id recebido"),
        ("fixed_eos", "Use o eos_id recebido"),
        ("mutates", "modificou as listas recebidas"),
    ],
)
def test_shift_typical_mistakes(kind, message, capsys):
    ok, out = _run(ex.check_shift_targets, _shift_variant(kind), capsys)
    assert ok is False and "❌" in out
    assert message in out, out


def test_shift_collate_numbers_is_blocked(capsys):
    def with_collate(targets, bos_id, eos_id, pad_id):
        pairs = [(torch.tensor([0]), torch.tensor(t)) for t in targets]
        batch = tpt.collate_numbers(pairs, pad_id=pad_id)
        return batch["tgt_in"], batch["tgt_out"]

    ok, out = _run(ex.check_shift_targets, with_collate, capsys)
    assert ok is False and "não use tpt.collate_numbers" in out
    assert tpt.collate_numbers.__name__ == "collate_numbers"  # restaurado


# --------------------------------------------------------------------------------------
# Exercício 3: acerto exato sem laços
# --------------------------------------------------------------------------------------
def exact_match(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    pred = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    target = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    is_eos = pred == eos_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    pred = pred.masked_fill(after_eos, pad_id)
    return (pred == target).all(dim=1).float().mean().item()


def exact_match_by_target_mask(pred, target, eos_id, pad_id):
    # Outro estilo certo: comparar só onde o rótulo não é <pad> (palavras e o <eos>).
    width = max(pred.shape[1], target.shape[1])
    pred = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    target = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    ok = (pred == target) | (target == pad_id)
    return ok.all(dim=1).double().mean()


@pytest.mark.parametrize("answer", [exact_match, exact_match_by_target_mask])
def test_exact_match_reference_and_alternative_pass(answer, capsys):
    ok, out = _run(ex.check_exact_match, answer, capsys)
    assert ok is True and "✅" in out, out


def test_exact_match_stub_is_pending(capsys):
    ok, out = _run(ex.check_exact_match, stub, capsys)
    assert ok is False and _pending(out)


def test_exact_match_with_loop_is_rejected(capsys):
    def with_loop(pred, target, eos_id, pad_id):
        hits = 0
        for p, g in zip(pred.tolist(), target.tolist(), strict=True):
            p = p[: p.index(eos_id) + 1] if eos_id in p else p
            g = g[: g.index(eos_id) + 1]
            hits += p == g
        return hits / len(pred)

    ok, out = _run(ex.check_exact_match, with_loop, capsys)
    assert ok is False and "usa laço em Python" in out


def test_exact_match_with_comprehension_is_rejected(capsys):
    def with_comprehension(pred, target, eos_id, pad_id):
        rows = [
            exact_match(p[None], g[None], eos_id, pad_id) for p, g in zip(pred, target, strict=True)
        ]
        return sum(rows) / len(rows)

    ok, out = _run(ex.check_exact_match, with_comprehension, capsys)
    assert ok is False and "usa laço em Python" in out


def _match_variant(kind):
    def answer(pred, target, eos_id, pad_id):
        if kind == "fixed_ids":
            eos_id, pad_id = 2, 0
        width = max(pred.shape[1], target.shape[1])
        p = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
        g = F.pad(target, (0, width - target.shape[1]), value=pad_id)
        if kind == "whole_row":
            return (p == g).all(dim=1).float().mean().item()
        if kind == "words_only":
            words = (g != pad_id) & (g != eos_id)
            return ((p == g) | ~words).all(dim=1).float().mean().item()
        if kind == "per_token":
            return (p == g)[g != pad_id].float().mean().item()
        if kind == "no_width_fix":
            return (pred == target).all(dim=1).float().mean().item()
        if kind == "per_row":
            return exact_match_by_target_mask(pred, target, eos_id, pad_id) * torch.ones(2)
        result = exact_match(pred, target, eos_id, pad_id)
        return 100 * result if kind == "percent" else result

    return answer


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("whole_row", "depois do primeiro <eos>"),
        ("words_only", "O <eos> também tem de estar no lugar"),
        ("per_token", "acerto por token"),
        ("percent", "porcentagem"),
        ("no_width_fix", "larguras diferentes"),
        ("per_row", "devolva um número"),
        ("fixed_ids", "use os valores recebidos"),
    ],
)
def test_exact_match_typical_mistakes(kind, message, capsys):
    ok, out = _run(ex.check_exact_match, _match_variant(kind), capsys)
    assert ok is False and "❌" in out
    assert message in out, out
