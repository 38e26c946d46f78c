"""Conferências dos exercícios do notebook 06_mascaras (tpt.exercises.masks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tpt
import tpt.attention
import tpt.masks
from tpt.exercises import masks as ex

# --------------------------------------------------------------------------------------
# Auxiliares
# --------------------------------------------------------------------------------------


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


def _rejected(check, answer, capsys, *fragments: str) -> str:
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, f"esperava {fragment!r} em:\n{out}"
    return out


def _accepted(check, answer, capsys) -> None:
    assert check(answer) is True
    out = capsys.readouterr().out
    assert "✅" in out, out


# --------------------------------------------------------------------------------------
# Exercício 1: janela deslizante
# --------------------------------------------------------------------------------------


def sliding_window(t, window):
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    return (j > i) | (j <= i - window)


def test_window_stub_is_pending(capsys):
    assert ex.check_sliding_window_mask(stub) is False
    assert _pending(capsys.readouterr().out)


def test_window_reference_passes(capsys):
    _accepted(ex.check_sliding_window_mask, sliding_window, capsys)


def test_window_alternative_styles_pass(capsys):
    def with_triu_tril(t, window):
        ones = torch.ones(t, t, dtype=torch.bool)
        return ones.triu(1) | ones.tril(-window)

    def with_distance(t, window):
        distance = torch.arange(t)[:, None] - torch.arange(t)[None, :]  # i - j
        return (distance < 0) | (distance >= window)

    _accepted(ex.check_sliding_window_mask, with_triu_tril, capsys)
    _accepted(ex.check_sliding_window_mask, with_distance, capsys)


def test_window_loops_are_rejected(capsys):
    def with_for(t, window):
        mask = torch.zeros(t, t, dtype=torch.bool)
        for i in range(t):
            mask[i] = (torch.arange(t) > i) | (torch.arange(t) <= i - window)
        return mask

    def with_comprehension(t, window):
        rows = [(torch.arange(t) > i) | (torch.arange(t) <= i - window) for i in range(t)]
        return torch.stack(rows)

    def with_while(t, window):
        mask = torch.zeros(t, t, dtype=torch.bool)
        i = 0
        while i < t:
            mask[i] = (torch.arange(t) > i) | (torch.arange(t) <= i - window)
            i += 1
        return mask

    for answer in (with_for, with_comprehension, with_while):
        _rejected(ex.check_sliding_window_mask, answer, capsys, "não usar laços")


def test_window_using_tpt_is_rejected(capsys):
    def via_attribute(t, window):
        return tpt.sliding_window_mask(t, window)

    def via_module(t, window):
        return tpt.masks.sliding_window_mask(t, window)

    namespace = {"swm": tpt.masks.sliding_window_mask}
    exec("def imported(t, window):\n    return swm(t, window)\n", namespace)

    for answer in (via_attribute, via_module, namespace["imported"]):
        _rejected(ex.check_sliding_window_mask, answer, capsys, "não usar tpt.sliding_window_mask")
    # A conferência devolve a função original ao terminar.
    assert tpt.sliding_window_mask is tpt.masks.sliding_window_mask
    assert torch.equal(tpt.sliding_window_mask(4, 2), sliding_window(4, 2))


def test_window_typical_mistakes_have_their_own_messages(capsys):
    def float_mask(t, window):
        return sliding_window(t, window).float()

    def inverted(t, window):
        return ~sliding_window(t, window)

    def symmetric(t, window):
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (i - j).abs() >= window

    def one_too_many(t, window):
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (j > i) | (j < i - window)

    def one_too_few(t, window):
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (j > i) | (j <= i - window + 1)

    def only_causal(t, window):
        return tpt.causal_mask(t)

    def wrong_shape(t, window):
        return sliding_window(t, window)[None]

    _rejected(ex.check_sliding_window_mask, float_mask, capsys, "dtype torch.float32", "booleanas")
    _rejected(ex.check_sliding_window_mask, inverted, capsys, "convenção invertida")
    _rejected(ex.check_sliding_window_mask, symmetric, capsys, "simétrica", "j > i")
    _rejected(ex.check_sliding_window_mask, one_too_many, capsys, "uma chave a mais")
    _rejected(ex.check_sliding_window_mask, one_too_few, capsys, "uma chave a menos")
    _rejected(ex.check_sliding_window_mask, only_causal, capsys, "máscara causal comum")
    _rejected(ex.check_sliding_window_mask, wrong_shape, capsys, "esperava a forma (6, 6)")


def test_window_other_mistakes_name_the_first_wrong_cell(capsys):
    def diagonal_blocked(t, window):
        return sliding_window(t, window) | torch.eye(t, dtype=torch.bool)

    _rejected(
        ex.check_sliding_window_mask, diagonal_blocked, capsys, "(consulta 0, chave 0)", "livre"
    )


def test_window_pytorch_errors_get_a_portuguese_hint(capsys):
    def broken(t, window):
        return torch.arange(t)[:, None] > torch.arange(t + 1)[:, None].T.view(t, -1)

    _rejected(ex.check_sliding_window_mask, broken, capsys, "sua função levantou", "Dica:")


# --------------------------------------------------------------------------------------
# Exercício 2: máscara do decoder com <pad> à esquerda
# --------------------------------------------------------------------------------------


def decoder_mask(lengths, t):
    positions = torch.arange(t, device=lengths.device)
    key_is_pad = positions[None, :] < (t - lengths)[:, None]
    future = tpt.causal_mask(t, device=lengths.device)
    return key_is_pad[:, None, None, :] | future[None, None]


def test_left_stub_is_pending(capsys):
    assert ex.check_left_padded_decoder_mask(stub) is False
    assert _pending(capsys.readouterr().out)


def test_left_reference_passes(capsys):
    _accepted(ex.check_left_padded_decoder_mask, decoder_mask, capsys)


def test_left_alternative_styles_pass(capsys):
    def with_flip(lengths, t):
        key_is_pad = tpt.padding_mask(lengths, t).flip(-1)  # à direita, espelhada
        return tpt.merge_masks(key_padding_mask=key_is_pad, is_causal=True, t=t)

    def with_arithmetic(lengths, t):
        j = torch.arange(t)
        start = (t - lengths).view(-1, 1, 1, 1)  # (b, 1, 1, 1): primeira posição real
        return (j.view(1, 1, 1, t) < start) | (j.view(1, 1, 1, t) > j.view(1, 1, t, 1))

    _accepted(ex.check_left_padded_decoder_mask, with_flip, capsys)
    _accepted(ex.check_left_padded_decoder_mask, with_arithmetic, capsys)


def test_left_loops_are_rejected(capsys):
    def with_for(lengths, t):
        mask = torch.zeros(len(lengths), 1, t, t, dtype=torch.bool)
        for row, n in enumerate(lengths.tolist()):
            mask[row, 0, :, : t - n] = True
        return mask | tpt.causal_mask(t)

    _rejected(ex.check_left_padded_decoder_mask, with_for, capsys, "não usar laços")


def test_left_typical_mistakes_have_their_own_messages(capsys):
    def right_padding(lengths, t):
        return tpt.merge_masks(key_padding_mask=tpt.padding_mask(lengths, t), is_causal=True, t=t)

    def no_head_axis(lengths, t):
        return decoder_mask(lengths, t)[:, 0]

    def only_padding_4d(lengths, t):
        return (torch.arange(t)[None, :] < (t - lengths)[:, None])[:, None, None, :]

    def only_causal(lengths, t):
        return tpt.causal_mask(t)[None, None].expand(len(lengths), 1, t, t)

    def only_padding(lengths, t):
        return only_padding_4d(lengths, t).expand(len(lengths), 1, t, t)

    def inverted(lengths, t):
        return ~decoder_mask(lengths, t)

    def as_int(lengths, t):
        return decoder_mask(lengths, t).long()

    def mutates(lengths, t):
        lengths -= 0  # no lugar: o tensor original é o mesmo objeto
        lengths.add_(1)
        return decoder_mask(lengths - 1, t)

    _rejected(ex.check_left_padded_decoder_mask, right_padding, capsys, "fim de cada linha")
    _rejected(ex.check_left_padded_decoder_mask, no_head_axis, capsys, "eixo das cabeças")
    _rejected(ex.check_left_padded_decoder_mask, only_padding_4d, capsys, "(b, 1, 1, t)")
    _rejected(ex.check_left_padded_decoder_mask, only_causal, capsys, "só a máscara causal")
    _rejected(
        ex.check_left_padded_decoder_mask, only_padding, capsys, "só a máscara de preenchimento"
    )
    _rejected(ex.check_left_padded_decoder_mask, inverted, capsys, "convenção invertida")
    _rejected(ex.check_left_padded_decoder_mask, as_int, capsys, "dtype torch.int64")
    _rejected(ex.check_left_padded_decoder_mask, mutates, capsys, "modificou lengths")


def test_left_other_mistakes_name_the_first_wrong_cell(capsys):
    def off_by_one(lengths, t):
        j = torch.arange(t)
        key_is_pad = j[None, :] <= (t - lengths)[:, None]  # bloqueia também o primeiro real
        return key_is_pad[:, None, None, :] | tpt.causal_mask(t)[None, None]

    _rejected(ex.check_left_padded_decoder_mask, off_by_one, capsys, "exemplo 0", "livre (False)")


# --------------------------------------------------------------------------------------
# Exercício 3: softmax com máscara, sem NaN
# --------------------------------------------------------------------------------------


def masked_softmax(scores, mask):
    masked = scores.masked_fill(mask, float("-inf"))
    empty = torch.isneginf(masked).all(dim=-1, keepdim=True)
    weights = torch.softmax(masked.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0)


def test_softmax_stub_is_pending(capsys):
    assert ex.check_masked_softmax(stub) is False
    assert _pending(capsys.readouterr().out)


def test_softmax_reference_passes(capsys):
    _accepted(ex.check_masked_softmax, masked_softmax, capsys)


def test_softmax_alternative_style_passes(capsys):
    def safe_exp(scores, mask):
        masked = scores.masked_fill(mask, float("-inf"))
        top = masked.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        e = torch.exp(masked - top)
        return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)

    def with_where(scores, mask):
        blocked = mask | torch.isneginf(scores)
        empty = blocked.all(dim=-1, keepdim=True)
        safe = torch.where(blocked, torch.full_like(scores, float("-inf")), scores)
        safe = torch.where(empty, torch.zeros_like(scores), safe)
        return torch.where(empty, torch.zeros_like(scores), torch.softmax(safe, dim=-1))

    _accepted(ex.check_masked_softmax, safe_exp, capsys)
    _accepted(ex.check_masked_softmax, with_where, capsys)


def test_softmax_naive_gives_nan_in_forward(capsys):
    def naive(scores, mask):
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)

    _rejected(ex.check_masked_softmax, naive, capsys, "NaN nos pesos (na ida)")


def test_softmax_fixing_only_the_forward_is_rejected(capsys):
    def nan_to_num(scores, mask):
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).nan_to_num(0.0)

    def additive(scores, mask):
        bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(mask, float("-inf"))
        return torch.softmax(scores + bias, dim=-1).nan_to_num(0.0)

    def where_after(scores, mask):
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return torch.where(weights.isnan(), torch.zeros_like(weights), weights)

    for answer in (nan_to_num, additive, where_after):
        _rejected(ex.check_masked_softmax, answer, capsys, "gradiente tem NaN (na volta)")


def test_softmax_typical_mistakes_have_their_own_messages(capsys):
    def finite_fill(scores, mask):
        return torch.softmax(scores.masked_fill(mask, -1e9), dim=-1)

    def zero_fill(scores, mask):
        return torch.softmax(scores.masked_fill(mask, 0.0), dim=-1)

    def detached(scores, mask):
        return masked_softmax(scores.detach(), mask)

    def in_place(scores, mask):
        with torch.no_grad():
            scores.masked_fill_(mask, -1.0)
        return masked_softmax(scores, mask)

    def wrong_axis(scores, mask):
        return masked_softmax(scores.transpose(-2, -1), mask.transpose(-2, -1)).transpose(-2, -1)

    def unnormalized(scores, mask):
        return masked_softmax(scores, mask) * 0.5

    _rejected(ex.check_masked_softmax, finite_fill, capsys, "uniformes 1/s", "-1e9")
    _rejected(ex.check_masked_softmax, zero_fill, capsys, "chave bloqueada recebeu peso")
    _rejected(ex.check_masked_softmax, detached, capsys, "não têm gradiente")
    _rejected(ex.check_masked_softmax, in_place, capsys, "modificou as pontuações no lugar")
    _rejected(ex.check_masked_softmax, wrong_axis, capsys, "diferem do softmax com máscara")
    _rejected(ex.check_masked_softmax, unnormalized, capsys, "somar 1")


def test_softmax_forbidden_functions_are_enforced(capsys):
    def via_tpt(scores, mask):
        x = scores[..., None]
        return tpt.scaled_dot_product_attention(x, x, x, mask)[1]

    def via_module(scores, mask):
        x = scores[..., None]
        return tpt.attention.scaled_dot_product_attention(x, x, x, mask)[1]

    def via_sdpa(scores, mask):
        # F.sdpa não devolve os pesos: a saída com V = identidade são os pesos.
        eye = torch.eye(scores.shape[-1], dtype=scores.dtype)
        q = scores[..., None] * 0 + 1
        return F.scaled_dot_product_attention(q, q, eye, attn_mask=~mask)

    for answer in (via_tpt, via_module, via_sdpa):
        _rejected(ex.check_masked_softmax, answer, capsys, "sem chamar")
    assert tpt.scaled_dot_product_attention is tpt.attention.scaled_dot_product_attention
    assert F.scaled_dot_product_attention.__module__ != "tpt.exercises.masks"


def test_softmax_pytorch_errors_get_a_portuguese_hint(capsys):
    def broken(scores, mask):
        return torch.softmax(scores.masked_fill(mask[..., :1, :1, :], float("-inf")), -1) @ mask

    _rejected(ex.check_masked_softmax, broken, capsys, "sua função levantou", "Dica:")


def test_softmax_wrong_gradient_is_rejected(capsys):
    def detached_normalizer(scores, mask):
        masked = scores.masked_fill(mask, float("-inf"))
        empty = torch.isneginf(masked).all(dim=-1, keepdim=True)
        e = torch.exp(masked.masked_fill(empty, 0.0))
        weights = e / e.sum(dim=-1, keepdim=True).detach()  # a soma fora do grafo
        return weights.masked_fill(empty, 0.0)

    _rejected(ex.check_masked_softmax, detached_normalizer, capsys, "gradiente em relação")
