"""Conferências dos exercícios do notebook 09_geracao (tpt.exercises.generation)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tpt
import tpt.generation
from tpt.exercises import generation as ex
from tpt.generation import top_p_filter as renamed_filter

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook) e estilos alternativos
# --------------------------------------------------------------------------------------


def top_p(logits, p):
    if p >= 1.0:
        return logits.clone()
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
    probs = sorted_logits.softmax(dim=-1)  # (..., V)
    before = probs.cumsum(dim=-1) - probs  # soma dos anteriores a cada token
    remove_sorted = before >= p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def repetition_penalty(logits, previous, penalty):
    seen = logits.gather(-1, previous)  # (b, t)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, seen)


def cached_attention(mha, x_new, cache):
    b, t, d = x_new.shape
    h, d_h = mha.num_heads, mha.head_dim
    q, k, v = mha.project_qkv(x_new)  # 3 x (b, t, d)
    q = q.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    k = k.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    v = v.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    k, v = cache.update(k, v)  # (b, h, s, d_h)
    out, _ = tpt.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, t, d_h)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))  # (b, t, d)


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


def _rejected(check, answer, capsys, *fragments):
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, f"esperava {fragment!r} em:\n{out}"
    return out


# --------------------------------------------------------------------------------------
# Exercício 1: top-p
# --------------------------------------------------------------------------------------


def test_top_p_reference_passes(capsys):
    assert ex.check_top_p(top_p) is True
    assert "✅" in capsys.readouterr().out


def test_top_p_stub_is_pending(capsys):
    assert ex.check_top_p(stub) is False
    assert _pending(capsys.readouterr().out)


def test_top_p_alternative_styles_pass(capsys):
    def with_loop_over_rows(logits, p):  # laços são permitidos aqui
        flat = logits.reshape(-1, logits.shape[-1])
        out = torch.full_like(flat, float("-inf"))
        for row in range(flat.shape[0]):
            if p >= 1:
                out[row] = flat[row]
                continue
            probs = F.softmax(flat[row].double(), dim=-1)
            order = probs.argsort(descending=True, stable=True)
            total = 0.0
            for i in order.tolist():
                out[row, i] = flat[row, i]
                total += probs[i].item()
                if total >= p:
                    break
        return out.reshape(logits.shape)

    def with_gather(logits, p):  # threshold no valor: mantém prob >= a do último do núcleo
        if p >= 1:
            return logits.clone()
        probs = logits.softmax(-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(-1)
        keep_sorted = (cumulative - sorted_probs) < p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        return torch.where(keep, logits, torch.full_like(logits, float("-inf")))

    for answer in (with_loop_over_rows, with_gather):
        assert ex.check_top_p(answer) is True, capsys.readouterr().out
    capsys.readouterr()


def test_top_p_rule_not_tpt(capsys):
    def via_tpt(logits, p):
        return tpt.generation.top_p_filter(logits, p)

    def via_alias(logits, p):  # from tpt.generation import top_p_filter as ...
        return renamed_filter(logits, p)

    def via_getattr(logits, p):  # escapa da leitura do código; a chamada é bloqueada
        return getattr(tpt.generation, "top_p_" + "filter")(logits, p)

    for answer in (via_tpt, via_alias, via_getattr):
        _rejected(ex.check_top_p, answer, capsys, "top_p_filter", "escrito por você")
    assert tpt.generation.top_p_filter is renamed_filter  # a proibição foi desfeita


def test_top_p_cumsum_including_current_is_reported(capsys):
    def drops_crossing_token(logits, p):
        if p >= 1:
            return logits.clone()
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cumulative > p
        remove_sorted[..., 0] = False
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))

    _rejected(ex.check_top_p, drops_crossing_token, capsys, "cruza o limiar", "p=0,65")


def test_top_p_probabilities_instead_of_logits_is_reported(capsys):
    def returns_probs(logits, p):
        return top_p(logits, p).softmax(-1).masked_fill(
            top_p(logits, p).isneginf(), float("-inf")
        )

    _rejected(ex.check_top_p, returns_probs, capsys, "probabilidades", "logits originais")


def test_top_p_sorted_order_is_reported(capsys):
    def stays_sorted(logits, p):
        if p >= 1:
            return logits.clone()
        sorted_logits, _ = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs
        return sorted_logits.masked_fill(before >= p, float("-inf"))

    _rejected(ex.check_top_p, stays_sorted, capsys, "ordem ordenada", "scatter")


def test_top_p_zero_instead_of_inf_is_reported(capsys):
    def zeros(logits, p):
        out = top_p(logits, p)
        return out.masked_fill(out.isneginf() & logits.isfinite(), 0.0)

    _rejected(ex.check_top_p, zeros, capsys, "viraram 0", "-inf")


def test_top_p_p_equal_one_rounding_is_reported(capsys):
    def no_special_case(logits, p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = (cumulative - sorted_logits.softmax(-1)) >= p
        remove_sorted = remove_sorted | (cumulative > p)  # o mesmo engano, com cumsum
        remove_sorted[..., 0] = False
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))

    out = _rejected(ex.check_top_p, no_special_case, capsys)
    assert "cruza o limiar" in out or "p=1" in out


def test_top_p_p_one_alone_is_reported(capsys):
    def float_sum(logits, p):  # só o p=1 errado: soma dos anteriores em float, sem caso à parte
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs
        remove_sorted = before >= p - 1e-7 if p >= 1 else before >= p
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))

    _rejected(ex.check_top_p, float_sum, capsys, "com p=1 nada deve ser filtrado")


def test_top_p_keeping_ties_together_is_reported(capsys):
    def keeps_all_ties(logits, p):
        if p >= 1:
            return logits.clone()
        kept = top_p(logits, p)
        threshold = kept.masked_fill(kept.isneginf(), float("inf")).min(-1, keepdim=True).values
        return logits.masked_fill(logits < threshold, float("-inf"))

    _rejected(ex.check_top_p, keeps_all_ties, capsys, "tokens demais", "empatados")


def test_top_p_empty_row_is_reported(capsys):
    def can_remove_everything(logits, p):
        if p >= 1:
            return logits.clone()
        probs = logits.softmax(-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs
        remove_sorted = (before >= p) | (sorted_probs > 10 * p)  # "cortar o que passa de p"
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))

    _rejected(ex.check_top_p, can_remove_everything, capsys, "só com -inf", "mais provável")


def test_top_p_unstable_softmax_is_reported(capsys):
    def manual_exp(logits, p):
        if p >= 1:
            return logits.clone()
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        e = sorted_logits.exp()
        probs = e / e.sum(-1, keepdim=True)
        before = probs.cumsum(-1) - probs
        remove_sorted = before >= p
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))

    out = _rejected(ex.check_top_p, manual_exp, capsys, "logits enormes")
    assert "máximo" in out or "F.softmax" in out


def test_top_p_in_place_is_reported(capsys):
    def in_place(logits, p):
        out = top_p(logits, p)
        logits.masked_fill_(out.isneginf(), float("-inf"))
        return logits

    _rejected(ex.check_top_p, in_place, capsys, "no lugar")


def test_top_p_pytorch_error_gets_portuguese_hint(capsys):
    def wrong_dim(logits, p):
        sorted_logits, order = logits.sort(dim=1, descending=True)
        return sorted_logits

    _rejected(ex.check_top_p, wrong_dim, capsys, "IndexError", "Confira as formas")


# --------------------------------------------------------------------------------------
# Exercício 2: penalidade de repetição
# --------------------------------------------------------------------------------------


def test_penalty_reference_passes(capsys):
    assert ex.check_repetition_penalty(repetition_penalty) is True
    assert "✅" in capsys.readouterr().out


def test_penalty_stub_is_pending(capsys):
    assert ex.check_repetition_penalty(stub) is False
    assert _pending(capsys.readouterr().out)


def test_penalty_alternative_style_passes(capsys):
    def with_mask(logits, previous, penalty):
        seen = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, previous, True)
        penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
        return torch.where(seen, penalized, logits)

    assert ex.check_repetition_penalty(with_mask) is True
    assert "✅" in capsys.readouterr().out


def test_penalty_loop_is_rejected(capsys):
    def with_loop(logits, previous, penalty):
        out = logits.clone()
        for row in range(logits.shape[0]):
            for token in set(previous[row].tolist()):
                value = out[row, token]
                out[row, token] = value / penalty if value > 0 else value * penalty
        return out

    _rejected(ex.check_repetition_penalty, with_loop, capsys, "laço", "gather")


def test_penalty_sign_mistake_is_reported(capsys):
    def divides_all(logits, previous, penalty):
        return logits.scatter(-1, previous, logits.gather(-1, previous) / penalty)

    _rejected(ex.check_repetition_penalty, divides_all, capsys, "NEGATIVO", "torch.where")


def test_penalty_per_occurrence_is_reported(capsys):
    def accumulates(logits, previous, penalty):
        counts = torch.zeros_like(logits).scatter_add(
            -1, previous, torch.ones_like(previous, dtype=logits.dtype)
        )
        factor = penalty**counts
        return torch.where(logits > 0, logits / factor, logits * factor)

    _rejected(ex.check_repetition_penalty, accumulates, capsys, "POR OCORRÊNCIA")


def test_penalty_first_row_history_is_reported(capsys):
    def first_row(logits, previous, penalty):
        return repetition_penalty(logits, previous[:1].expand_as(previous), penalty)

    _rejected(ex.check_repetition_penalty, first_row, capsys, "histórico da primeira")


def test_penalty_in_place_is_reported(capsys):
    def in_place(logits, previous, penalty):
        logits.copy_(repetition_penalty(logits, previous, penalty))
        return logits

    _rejected(ex.check_repetition_penalty, in_place, capsys, "no lugar")


def test_penalty_other_mistake_gets_generic_message(capsys):
    def penalizes_everything(logits, previous, penalty):
        return torch.where(logits > 0, logits / penalty, logits * penalty)

    _rejected(ex.check_repetition_penalty, penalizes_everything, capsys, "diferença máxima",
              "histórico da linha")


# --------------------------------------------------------------------------------------
# Exercício 3: atenção com cache
# --------------------------------------------------------------------------------------


def test_cached_reference_passes(capsys):
    assert ex.check_cached_attention(cached_attention) is True
    assert "✅" in capsys.readouterr().out


def test_cached_stub_is_pending(capsys):
    assert ex.check_cached_attention(stub) is False
    assert _pending(capsys.readouterr().out)


def test_cached_alternative_with_pytorch_sdpa_passes(capsys):
    def with_f_sdpa(mha, x_new, cache):
        b, t, d = x_new.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = mha.project_qkv(x_new)
        q = q.view(b, t, h, d_h).transpose(1, 2)
        k = k.view(b, t, h, d_h).transpose(1, 2)
        v = v.view(b, t, h, d_h).transpose(1, 2)
        k, v = cache.update(k, v)
        allowed = ~tpt.causal_mask(t, k.shape[-2])  # True = pode atender (convenção do F)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    assert ex.check_cached_attention(with_f_sdpa) is True
    assert "✅" in capsys.readouterr().out


def test_cached_calling_the_module_is_rejected(capsys):
    def calls_module(mha, x_new, cache):
        out, _ = mha(x_new, cache=cache, is_causal=True)
        return out

    def calls_forward(mha, x_new, cache):
        return mha.forward(x_new, cache=cache, is_causal=True)[0]

    for answer in (calls_module, calls_forward):
        _rejected(ex.check_cached_attention, answer, capsys, "MultiHeadAttention", "não vale")


def _variant(mask: str = "bottom", scale: bool = True, out_proj: bool = True, update=True):
    def answer(mha, x_new, cache):
        b, t, d = x_new.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = mha.project_qkv(x_new)
        q = q.view(b, t, h, d_h).transpose(1, 2)
        k = k.view(b, t, h, d_h).transpose(1, 2)
        v = v.view(b, t, h, d_h).transpose(1, 2)
        if update:
            k, v = cache.update(k, v)
        s = k.shape[-2]
        scores = q @ k.transpose(-2, -1)
        if scale:
            scores = scores / math.sqrt(d_h)
        if mask == "bottom":
            scores = scores.masked_fill(tpt.causal_mask(t, s), float("-inf"))
        elif mask == "top":
            scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return mha.out_proj(out) if out_proj else out

    return answer


def test_cached_variant_helper_is_correct(capsys):
    assert ex.check_cached_attention(_variant()) is True
    capsys.readouterr()


def test_cached_missing_causal_mask_in_prefill_is_reported(capsys):
    _rejected(ex.check_cached_attention, _variant(mask="none"), capsys, "futuro", "prefill")


def test_cached_top_left_mask_is_reported(capsys):
    def f_is_causal(mha, x_new, cache):
        b, t, d = x_new.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = mha.project_qkv(x_new)
        q = q.view(b, t, h, d_h).transpose(1, 2)
        k = k.view(b, t, h, d_h).transpose(1, 2)
        v = v.view(b, t, h, d_h).transpose(1, 2)
        k, v = cache.update(k, v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # alinhada pelo começo
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    for answer in (_variant(mask="top"), f_is_causal):
        _rejected(ex.check_cached_attention, answer, capsys, "alinhada pelo COMEÇO",
                  "pedaço 2")


def test_cached_missing_scale_is_reported(capsys):
    _rejected(ex.check_cached_attention, _variant(scale=False), capsys, "sqrt(d_h)")


def test_cached_missing_out_proj_is_reported(capsys):
    _rejected(ex.check_cached_attention, _variant(out_proj=False), capsys, "out_proj")


def test_cached_cache_not_updated_is_reported(capsys):
    _rejected(ex.check_cached_attention, _variant(update=False), capsys, "cache.update",
              "pedaço 1")


def test_cached_wrong_head_split_is_reported(capsys):
    def no_transpose(mha, x_new, cache):
        b, t, d = x_new.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = mha.project_qkv(x_new)
        q = q.reshape(b, h, t, d_h)  # sem transpose: mistura posições
        k = k.reshape(b, h, t, d_h)
        v = v.reshape(b, h, t, d_h)
        k, v = cache.update(k, v)
        out, _ = tpt.scaled_dot_product_attention(q, k, v, is_causal=True)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    _rejected(ex.check_cached_attention, no_transpose, capsys, "diferença máxima",
              "transpose(1, 2)")


def test_cached_wrong_shape_is_reported(capsys):
    def only_last(mha, x_new, cache):
        return cached_attention(mha, x_new, cache)[:, -1]

    _rejected(ex.check_cached_attention, only_last, capsys, "(b, t, d)", "(2, 4, 16)")


@pytest.mark.parametrize("check", [ex.check_top_p, ex.check_repetition_penalty,
                                   ex.check_cached_attention])
def test_wrong_signature_is_explained(check, capsys):
    def no_args():
        return None

    _rejected(check, no_args, capsys, "assinatura")
