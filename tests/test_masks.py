"""Testes de tpt.masks: construção, combinação e validação (True = bloqueado)."""

from __future__ import annotations

import pytest
import torch

from tpt.attention import MultiHeadAttention
from tpt.masks import (
    causal_mask,
    check_attn_mask,
    check_key_padding_mask,
    merge_masks,
    padding_mask,
    sliding_window_mask,
)


def test_causal_mask_square_blocks_strict_upper_triangle():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool
    expected = torch.tensor(
        [
            [False, True, True, True],
            [False, False, True, True],
            [False, False, False, True],
            [False, False, False, False],
        ]
    )
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("t, s", [(1, 1), (2, 5), (3, 3), (4, 9)])
def test_causal_mask_queries_are_last_positions(t, s):
    mask = causal_mask(t, s)
    assert mask.shape == (t, s)
    for i in range(t):
        for j in range(s):
            # A consulta i está na posição absoluta i + (s - t).
            assert bool(mask[i, j]) == (j > i + (s - t))
    # A última consulta vê todas as chaves.
    assert not bool(mask[-1].any())


def test_causal_mask_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match=r"s=2 é menor que t=3"):
        causal_mask(3, 2)


def test_padding_mask_marks_positions_beyond_length():
    mask = padding_mask(torch.tensor([3, 1, 4]))
    expected = torch.tensor(
        [
            [False, False, False, True],
            [False, True, True, True],
            [False, False, False, False],
        ]
    )
    assert torch.equal(mask, expected)
    assert padding_mask([2, 2], t=5).shape == (2, 5)
    assert torch.equal(padding_mask([2], t=3), torch.tensor([[False, False, True]]))


def test_padding_mask_rejects_length_above_t():
    with pytest.raises(ValueError, match=r"comprimento 6 maior que t=4"):
        padding_mask([2, 6], t=4)


def test_merge_masks_is_logical_or_with_broadcasting():
    torch.manual_seed(0)
    b, h, t, s = 2, 3, 4, 4
    attn = torch.rand(t, s) < 0.3
    kpm = padding_mask([4, 2])
    merged = merge_masks(attn, kpm, is_causal=True, t=t, s=s)
    assert merged.dtype == torch.bool
    full = merged.expand(b, h, t, s)
    for bi in range(b):
        for i in range(t):
            for j in range(s):
                want = bool(attn[i, j]) or bool(kpm[bi, j]) or j > i
                assert bool(full[bi, 0, i, j]) == want
    assert merge_masks(None, None) is None
    # (b, t, s) vira (b, 1, t, s).
    assert merge_masks(torch.zeros(b, t, s, dtype=torch.bool)).shape == (b, 1, t, s)


def test_merge_masks_causal_needs_t():
    with pytest.raises(ValueError, match=r"informe t"):
        merge_masks(None, None, is_causal=True)


def test_check_attn_mask_float_mask_raises_type_error_explaining_convention():
    additive = torch.zeros(3, 3).masked_fill(causal_mask(3), float("-inf"))
    with pytest.raises(TypeError, match=r"True = bloqueado.*mask == float\('-inf'\)"):
        check_attn_mask(additive, 3, 3)
    # A conversão sugerida na mensagem funciona e reproduz a máscara causal.
    converted = additive == float("-inf")
    check_attn_mask(converted, 3, 3)
    assert torch.equal(converted, causal_mask(3))


def test_check_attn_mask_wrong_shape_names_both_shapes():
    with pytest.raises(ValueError, match=r"forma \(4, 5\).*\(4, 6\)"):
        check_attn_mask(torch.zeros(4, 5, dtype=torch.bool), 4, 6)
    with pytest.raises(ValueError, match=r"forma \(2, 3, 4, 4\).*\(2, 2, 4, 4\)"):
        check_attn_mask(torch.zeros(2, 3, 4, 4, dtype=torch.bool), 4, 4, batch_size=2, num_heads=2)
    # Dimensões 1 são aceitas (broadcasting).
    check_attn_mask(torch.zeros(2, 1, 1, 4, dtype=torch.bool), 4, 4, batch_size=2, num_heads=2)


def test_check_attn_mask_detects_inverted_convention():
    sdpa_style = ~causal_mask(4)  # True = pode atender (convenção de F.sdpa)
    with pytest.raises(ValueError, match=r"convenção invertida.*F.scaled_dot_product_attention"):
        check_attn_mask(sdpa_style, 4, 4)


def test_check_key_padding_mask_errors():
    with pytest.raises(TypeError, match=r"dtype torch.int64.*True = bloqueado"):
        check_key_padding_mask(torch.zeros(2, 3, dtype=torch.long), 2, 3)
    with pytest.raises(ValueError, match=r"forma \(2, 4\).*\(2, 3\)"):
        check_key_padding_mask(torch.zeros(2, 4, dtype=torch.bool), 2, 3)
    lengths_as_valid = torch.tensor([[True, True, False], [True, True, True]])  # invertida
    with pytest.raises(ValueError, match=r"linha\(s\) \[1\].*convenção invertida"):
        check_key_padding_mask(lengths_as_valid, 2, 3)
    check_key_padding_mask(padding_mask([3, 1]), 2, 3)  # válida: não levanta


def test_cross_attention_mask_may_block_its_diagonal():
    # Na atenção cruzada (t == s por acaso) bloquear a "diagonal" é legítimo.
    t = 3
    mask = torch.eye(t, dtype=torch.bool)
    check_attn_mask(mask, t, t, self_attention=False)
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(1, t, 8), torch.randn(1, t, 8)
    out, _ = mha(x, memory, attn_mask=mask)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="diagonal inteira"):
        mha(x, attn_mask=mask)  # na autoatenção continua suspeito


def test_all_pad_row_message_mentions_empty_sequence():
    mask = torch.tensor([[False, False], [True, True]])
    with pytest.raises(ValueError, match=r"linha\(s\) \[1\].*vazias"):
        check_key_padding_mask(mask, 2, 2)


@pytest.mark.parametrize(
    "t, window, s", [(1, 1, None), (5, 1, None), (5, 2, None), (6, 3, None), (3, 2, 7), (4, 9, 6)]
)
def test_sliding_window_mask_sees_the_last_window_keys(t, window, s):
    mask = sliding_window_mask(t, window, s)
    s = t if s is None else s
    assert mask.dtype == torch.bool
    assert mask.shape == (t, s)
    for i in range(t):
        p = i + (s - t)  # posição absoluta da consulta i
        for j in range(s):
            assert bool(mask[i, j]) == (j > p or j <= p - window)
    # Cada consulta vê no máximo `window` chaves, e sempre a si mesma.
    assert int((~mask).sum(-1).max()) <= window
    assert not bool(mask[torch.arange(t), torch.arange(t) + (s - t)].any())


def test_sliding_window_mask_wide_window_is_causal_and_works_in_attention():
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))
    assert torch.equal(sliding_window_mask(4, 100, 7), causal_mask(4, 7))
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    out, weights = mha(x, attn_mask=sliding_window_mask(5, 2), need_weights=True)
    assert torch.isfinite(out).all()
    assert torch.all(weights[..., 4, :3] == 0)  # a consulta 4 só vê as chaves 3 e 4
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))
    fast, _ = mha(x, attn_mask=sliding_window_mask(5, 2))
    torch.testing.assert_close(fast, out, atol=1e-6, rtol=1e-5)


def test_sliding_window_mask_errors_in_portuguese():
    with pytest.raises(ValueError, match=r"window=0, mas precisa ser >= 1"):
        sliding_window_mask(4, 0)
    with pytest.raises(TypeError, match=r"window deve ser um inteiro >= 1.*2.5"):
        sliding_window_mask(4, 2.5)
    with pytest.raises(TypeError, match=r"window deve ser um inteiro"):
        sliding_window_mask(4, True)
    with pytest.raises(ValueError, match=r"s=2 é menor que t=3"):
        sliding_window_mask(3, 2, 2)
