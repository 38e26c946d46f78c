"""Testes de tpt.attention: igualdade com o PyTorch, propriedades e entradas ruins."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from tpt.attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from tpt.masks import causal_mask, padding_mask

# Tolerâncias para comparar com o PyTorch: float32 1e-5, float64 1e-10.
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}
DTYPES = [torch.float32, torch.float64]
SHAPES = [(2, 3, 4, 4, 8), (1, 2, 5, 7, 4), (3, 1, 1, 6, 16), (2, 4, 6, 3, 8)]  # (b, h, t, s, d)


def _qkv(b, h, t, s, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, s, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, s, d + 1, generator=g, dtype=dtype)  # d_v != d_k de propósito
    return q, k, v


def _random_mask(b, h, t, s, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, h, t, s, generator=g) < 0.4
    mask[..., 0] = False  # toda linha vê pelo menos uma chave
    return mask


# --------------------------------------------------------------------------------------
# scaled_dot_product_attention explícita vs F.scaled_dot_product_attention
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_sdpa_matches_torch(shape, dtype):
    b, h, t, s, d = shape
    q, k, v = _qkv(*shape, dtype)
    tol = TOL[dtype]

    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (b, h, t, d + 1) and weights.shape == (b, h, t, s)
    assert_close(out, F.scaled_dot_product_attention(q, k, v), **tol)
    assert_close(weights.sum(-1), torch.ones(b, h, t, dtype=dtype), **tol)

    mask = _random_mask(b, h, t, s)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # F.sdpa usa True = pode atender: passamos ~mask.
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=~mask), **tol)
    assert torch.all(weights[mask] == 0)
    assert_close(weights.sum(-1), torch.ones(b, h, t, dtype=dtype), **tol)

    out, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_causal_matches_torch(dtype):
    q, k, v = _qkv(2, 3, 6, 6, 8, dtype)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL[dtype])
    assert torch.all(weights[..., causal_mask(6)] == 0)
    # t != s: o tpt alinha as consultas ao FINAL (como num cache); comparamos com a
    # máscara explícita, já que o is_causal de F.sdpa alinha ao início.
    q, k, v = _qkv(2, 3, 3, 7, 8, dtype, seed=1)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(3, 7))
    assert_close(out, expected, **TOL[dtype])


@pytest.mark.parametrize("fused", [True, False])
def test_fully_masked_row_gives_zeros_without_nan(fused):
    torch.manual_seed(0)
    q, k, v = _qkv(2, 2, 4, 4, 8, torch.float32)
    q.requires_grad_(True)
    mask = _random_mask(2, 2, 4, 4)
    mask[0, 1, 2] = True  # linha inteiramente bloqueada
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(out[0, 1, 2] == 0) and torch.all(weights[0, 1, 2] == 0)
    assert not torch.isnan(out).any()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()

    # O mesmo no módulo: causal + padding à ESQUERDA deixa a consulta 0 sem chaves.
    mha = MultiHeadAttention(8, 2, fused=fused).eval()
    x = torch.randn(2, 4, 8, requires_grad=True)
    kpm = torch.tensor([[True, False, False, False], [False, False, False, False]])
    out, _ = mha(x, key_padding_mask=kpm, is_causal=True)
    _, weights = mha(x, key_padding_mask=kpm, is_causal=True, need_weights=True)
    assert not torch.isnan(out).any()
    assert torch.all(weights[0, :, 0] == 0)
    # Saída da atenção = 0 nessa linha, logo a saída do módulo é só o viés de out_proj.
    assert_close(out[0, 0], mha.out_proj.bias, atol=1e-6, rtol=0)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


# --------------------------------------------------------------------------------------
# MultiHeadAttention vs nn.MultiheadAttention (batch_first=True) depois de from_torch
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_matches_torch(dtype, fused, bias, seed):
    torch.manual_seed(seed)
    d, h = 12, 3
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=dtype).eval()
    mha = MultiHeadAttention.from_torch(ref)
    mha.fused = fused
    assert mha.training is False and mha.qkv_proj.weight.dtype == dtype
    tol = TOL[dtype]
    x = torch.randn(2, 5, d, dtype=dtype)

    # Autoatenção, sem máscara.
    out, _ = mha(x)
    assert_close(out, ref(x, x, x, need_weights=False)[0], **tol)

    # Autoatenção com máscara causal booleana (t, s).
    mask = causal_mask(5)
    out, _ = mha(x, attn_mask=mask)
    assert_close(out, ref(x, x, x, attn_mask=mask, need_weights=False)[0], **tol)
    out_c, _ = mha(x, is_causal=True)
    assert_close(out_c, out, **tol)

    # Atenção cruzada (t=5, s=7) com key_padding_mask e attn_mask.
    memory = torch.randn(2, 7, d, dtype=dtype)
    kpm = padding_mask([7, 4])
    attn = torch.rand(5, 7) < 0.3
    attn[:, 0] = False
    out, weights = mha(
        memory[:, :5] + x, memory, attn_mask=attn, key_padding_mask=kpm, need_weights=True
    )
    ref_out, ref_w = ref(
        memory[:, :5] + x,
        memory,
        memory,
        attn_mask=attn,
        key_padding_mask=kpm,
        average_attn_weights=False,
    )
    assert_close(out, ref_out, **tol)
    assert weights.shape == (2, h, 5, 7)
    assert_close(weights, ref_w, **tol)  # pesos por cabeça, sem média
    out, _ = mha(memory[:, :5] + x, memory, attn_mask=attn, key_padding_mask=kpm)
    assert_close(out, ref_out, **tol)

    # Máscara por cabeça: (b, h, t, s) no tpt = (b * h, t, s) no PyTorch.
    head_mask = _random_mask(2, h, 5, 7, seed=seed)
    out, _ = mha(x, memory, attn_mask=head_mask)
    torch_mask = head_mask.reshape(2 * h, 5, 7)  # (b * h, t, s)
    ref_out = ref(x, memory, memory, attn_mask=torch_mask, need_weights=False)[0]
    assert_close(out, ref_out, **tol)


def test_from_torch_copies_settings_and_rejects_unsupported():
    ref = nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True)
    mha = MultiHeadAttention.from_torch(ref)
    assert (mha.embed_dim, mha.num_heads, mha.num_kv_heads, mha.head_dim) == (8, 2, 2, 4)
    assert mha.dropout == 0.25 and mha.training
    with pytest.raises(ValueError, match=r"kdim=5 e vdim=6.*embed_dim=8"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=5, vdim=6))
    with pytest.raises(ValueError, match=r"add_bias_kv=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match=r"add_zero_attn=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))


def test_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5, fused=False)
    x = torch.randn(2, 6, 8)
    _, w_train = mha(x, need_weights=True)
    assert (w_train == 0).any()  # alguns pesos zerados pelo dropout
    mha.eval()
    _, w_eval = mha(x, need_weights=True)
    assert_close(w_eval.sum(-1), torch.ones(2, 2, 6), atol=1e-6, rtol=0)
    assert_close(mha(x)[0], mha(x)[0], atol=0, rtol=0)  # determinística em avaliação


# --------------------------------------------------------------------------------------
# GQA / MQA
# --------------------------------------------------------------------------------------
def test_gqa_with_all_kv_heads_is_standard_mha():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    gqa = MultiHeadAttention(16, 4, num_kv_heads=4).eval()
    gqa.load_state_dict(mha.state_dict())
    x = torch.randn(2, 5, 16)
    assert_close(gqa(x, is_causal=True)[0], mha(x, is_causal=True)[0], atol=0, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_gqa_equals_mha_with_shared_kv_heads(fused):
    """GQA com h_kv = 2 = MHA cujas cabeças de K/V vizinhas têm pesos iguais."""
    torch.manual_seed(0)
    d, h, h_kv = 16, 4, 2
    d_h, group = d // h, h // h_kv
    gqa = MultiHeadAttention(d, h, num_kv_heads=h_kv, fused=fused).eval()
    mha = MultiHeadAttention(d, h, fused=fused).eval()
    with torch.no_grad():
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        # Linhas de qkv_proj: [Q (d) | K (d_kv) | V (d_kv)]; cada bloco de K/V se repete.
        w_q, w_k, w_v = gqa.qkv_proj.weight.split([d, h_kv * d_h, h_kv * d_h])
        b_q, b_k, b_v = gqa.qkv_proj.bias.split([d, h_kv * d_h, h_kv * d_h])
        w_k, w_v = (w.view(h_kv, d_h, d).repeat_interleave(group, 0).view(d, d) for w in (w_k, w_v))
        b_k, b_v = (b.view(h_kv, d_h).repeat_interleave(group, 0).view(d) for b in (b_k, b_v))
        mha.qkv_proj.weight.copy_(torch.cat([w_q, w_k, w_v]))
        mha.qkv_proj.bias.copy_(torch.cat([b_q, b_k, b_v]))
    x = torch.randn(3, 6, d)
    # float32: tolerância 1e-5.
    assert_close(gqa(x, is_causal=True)[0], mha(x, is_causal=True)[0], atol=1e-5, rtol=1e-5)


def test_mqa_shapes_and_cache_size():
    mqa = MultiHeadAttention(16, 4, num_kv_heads=1).eval()
    assert mqa.qkv_proj.weight.shape == (16 + 2 * 4, 16)  # [Q (d) | K (d_h) | V (d_h)]
    cache = KVCache()
    out, weights = mqa(torch.randn(2, 5, 16), is_causal=True, cache=cache, need_weights=True)
    assert out.shape == (2, 5, 16) and weights.shape == (2, 4, 5, 5)
    assert cache.k.shape == (2, 1, 5, 4) and len(cache) == 5


# --------------------------------------------------------------------------------------
# KV cache: passo a passo = passagem completa
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_kv_cache_matches_full_causal_pass(positional, num_kv_heads, fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads, positional=positional, fused=fused).eval()
    x = torch.randn(2, 8, 16)
    full, full_w = mha(x, is_causal=True, need_weights=True)
    for chunk in (1, 2, 3):
        cache = KVCache()
        pieces, start = [], 0
        while start < 8:
            stop = min(start + chunk, 8)
            out, w = mha(x[:, start:stop], is_causal=True, cache=cache, need_weights=not fused)
            if not fused:
                # Os pesos do trecho são as linhas correspondentes da matriz completa.
                assert_close(w, full_w[:, :, start:stop, :stop], atol=1e-5, rtol=1e-5)
            pieces.append(out)
            start = stop
        assert len(cache) == 8
        # float32: tolerância 1e-5.
        assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    cache.reset()
    assert len(cache) == 0 and cache.k is None


def test_kv_cache_with_padding_mask_over_all_positions():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    kpm = padding_mask([5, 3])
    full, _ = mha(x, key_padding_mask=kpm, is_causal=True)
    cache = KVCache()
    first, _ = mha(x[:, :3], key_padding_mask=kpm[:, :3], is_causal=True, cache=cache)
    second, _ = mha(x[:, 3:], key_padding_mask=kpm, is_causal=True, cache=cache)
    # float32: tolerância 1e-5.
    assert_close(torch.cat([first, second], 1), full, atol=1e-5, rtol=1e-5)


def test_static_cache_reuses_memory_for_cross_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    expected, _ = mha(x, memory)
    cache = KVCache(static=True)
    first, _ = mha(x[:, :2], memory, cache=cache)
    # Já preenchido: a memória passada é ignorada e K/V vêm do cache.
    second, _ = mha(x[:, 2:], torch.zeros(2, 6, 8), cache=cache)
    assert len(cache) == 6
    assert_close(torch.cat([first, second], 1), expected, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------------------
# Propriedades
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_future_token_does_not_change_past_outputs(positional, fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, positional=positional, fused=fused).eval()
    x = torch.randn(2, 6, 16)
    y = x.clone()
    y[:, 4] = torch.randn(2, 16)
    out_x, _ = mha(x, is_causal=True)
    out_y, _ = mha(y, is_causal=True)
    assert_close(out_y[:, :4], out_x[:, :4], atol=1e-6, rtol=0)  # float32: 1e-6
    assert (out_y[:, 4:] - out_x[:, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize("fused", [True, False])
def test_masked_padding_keys_do_not_change_outputs(fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, fused=fused).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    garbage = torch.randn(2, 4, 16) * 100
    padded = torch.cat([memory, garbage], dim=1)  # (2, 9, 16)
    kpm = padding_mask([5, 5], t=9)
    out, _ = mha(x, memory)
    out_padded, _ = mha(x, padded, key_padding_mask=kpm)
    assert_close(out_padded, out, atol=1e-5, rtol=1e-5)  # float32: 1e-5


@pytest.mark.parametrize("fused", [True, False])
def test_permutation_equivariance_and_causal_breaks_it(fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, fused=fused).eval()
    x = torch.randn(2, 6, 16)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out, _ = mha(x)
    out_perm, _ = mha(x[:, perm])
    # Equivariante (não invariante): a saída permuta junto. float32: 1e-5.
    assert_close(out_perm, out[:, perm], atol=1e-5, rtol=1e-5)
    assert (out_perm - out).abs().max() > 1e-3
    causal, _ = mha(x, is_causal=True)
    causal_perm, _ = mha(x[:, perm], is_causal=True)
    assert (causal_perm - causal[:, perm]).abs().max() > 1e-3


def test_rope_breaks_permutation_equivariance():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, positional="rope").eval()
    x = torch.randn(1, 6, 16)
    perm = torch.tensor([5, 4, 3, 2, 1, 0])
    assert (mha(x[:, perm])[0] - mha(x)[0][:, perm]).abs().max() > 1e-3


# --------------------------------------------------------------------------------------
# Entradas ruins: mensagens em português que nomeiam os valores
# --------------------------------------------------------------------------------------
def test_embed_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"embed_dim=10 não é divisível por num_heads=3"):
        MultiHeadAttention(10, 3)


def test_num_heads_not_divisible_by_num_kv_heads():
    with pytest.raises(ValueError, match=r"num_heads=6 não é divisível por num_kv_heads=4"):
        MultiHeadAttention(12, 6, num_kv_heads=4)


def test_bad_constructor_options():
    with pytest.raises(ValueError, match=r"dropout=1.0 deve estar no intervalo \[0, 1\)"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match=r"positional='sinusoidal' inválido"):
        MultiHeadAttention(8, 2, positional="sinusoidal")


def test_input_of_wrong_rank():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query deve ter 3 dimensões.*\(5, 8\).*unsqueeze\(0\)"):
        mha(torch.randn(5, 8))


def test_input_of_wrong_width():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"key tem largura 6.*embed_dim=8"):
        mha(torch.randn(2, 5, 8), torch.randn(2, 5, 6))


def test_batch_and_length_mismatch():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"mesmo tamanho de lote b.*\(2, 5, 8\), \(3, 5, 8\)"):
        mha(torch.randn(2, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"key e value devem ter o mesmo comprimento s"):
        mha(torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 8))


def test_mask_of_wrong_shape():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"attn_mask tem forma \(5, 4\).*\(5, 5\)"):
        mha(x, attn_mask=torch.zeros(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask tem forma \(2, 4\).*\(2, 5\)"):
        mha(x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))


def test_mask_of_wrong_dtype():
    mha = MultiHeadAttention(8, 2)
    additive = torch.zeros(5, 5).masked_fill(causal_mask(5), float("-inf"))
    with pytest.raises(TypeError, match=r"torch.float32.*True = bloqueado"):
        mha(torch.randn(2, 5, 8), attn_mask=additive)


def test_inverted_mask_convention():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"convenção invertida"):
        mha(x, attn_mask=~causal_mask(5))  # True = pode atender (estilo F.sdpa)
    with pytest.raises(ValueError, match=r"convenção invertida"):
        mha(x, key_padding_mask=~padding_mask([5, 3]))


def test_cache_with_rope_beyond_max_len():
    mha = MultiHeadAttention(8, 2, positional="rope", max_len=8).eval()
    cache = KVCache()
    mha(torch.randn(1, 6, 8), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match=r"len\(cache\) \+ t = 6 \+ 3 = 9.*max_len=8"):
        mha(torch.randn(1, 3, 8), is_causal=True, cache=cache)


def test_cache_batch_mismatch_and_static_with_rope():
    mha = MultiHeadAttention(8, 2).eval()
    cache = KVCache()
    mha(torch.randn(2, 3, 8), cache=cache)
    with pytest.raises(ValueError, match=r"lote de tamanho 2.*b=3"):
        mha(torch.randn(3, 1, 8), cache=cache)
    rope = MultiHeadAttention(8, 2, positional="rope")
    with pytest.raises(ValueError, match=r"cache estático"):
        rope(torch.randn(1, 2, 8), torch.randn(1, 4, 8), cache=KVCache(static=True))


# --------------------------------------------------------------------------------------
# Passo 1: Q, K e V numa só projeção (qkv_proj) = três projeções separadas
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_project_qkv_equals_three_separate_projections(num_kv_heads, bias):
    torch.manual_seed(3)
    d, h = 16, 4
    mha = MultiHeadAttention(d, h, num_kv_heads, bias=bias).eval()
    kv = mha.kv_dim
    assert kv == num_kv_heads * (d // h)
    assert mha.qkv_proj.weight.shape == (d + 2 * kv, d)
    w_q, w_k, w_v = mha.qkv_proj.weight.split([d, kv, kv])  # linhas [Q | K | V]
    b_q, b_k, b_v = mha.qkv_proj.bias.split([d, kv, kv]) if bias else (None, None, None)
    x, memory, other = torch.randn(2, 5, d), torch.randn(2, 7, d), torch.randn(2, 7, d)
    # float32: tolerância 1e-6 (a matriz empilhada soma na mesma ordem, coluna a coluna).
    tol = dict(atol=1e-6, rtol=1e-6)
    cases = [(x, None, None, x, x), (x, x, None, x, x), (x, memory, None, memory, memory),
             (x, memory, memory, memory, memory), (x, memory, other, memory, other)]
    for query, key, value, k_src, v_src in cases:
        q, k, v = mha.project_qkv(query, key, value)
        assert_close(q, F.linear(query, w_q, b_q), **tol)
        assert_close(k, F.linear(k_src, w_k, b_k), **tol)
        assert_close(v, F.linear(v_src, w_v, b_v), **tol)
        assert q.shape == (2, 5, d) and k.shape == v.shape == (2, k_src.shape[1], kv)


def test_from_torch_copies_in_proj_into_qkv_proj():
    ref = nn.MultiheadAttention(8, 2, batch_first=True)
    mha = MultiHeadAttention.from_torch(ref)
    assert torch.equal(mha.qkv_proj.weight, ref.in_proj_weight)
    assert torch.equal(mha.qkv_proj.bias, ref.in_proj_bias)
    assert set(mha.state_dict()) == {
        "qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"
    }


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_validate_false_gives_the_same_output_with_cache(positional):
    """``validate=False`` (o passo da geração) só pula as conferências: a conta é a mesma."""
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 4, 2, positional=positional).eval()
    x = torch.randn(2, 6, 16)
    checked, fast = KVCache(), KVCache()
    with torch.no_grad():
        mha(x[:, :5], is_causal=True, cache=checked)
        mha(x[:, :5], is_causal=True, cache=fast)
        expected = mha(x[:, 5:], is_causal=True, cache=checked)[0]
        received = mha(x[:, 5:], is_causal=True, cache=fast, validate=False)[0]
    assert torch.equal(received, expected) and len(fast) == 6


# --------------------------------------------------------------------------------------
# A função passo a passo do notebook 03 e a do tpt: os mesmos bits, com qualquer d_k
# --------------------------------------------------------------------------------------
NOTEBOOK_03 = Path(__file__).resolve().parents[1] / "notebooks" / "03_atencao_produto_escalar.ipynb"


def _notebook_function(path: Path, name: str):
    """A definição de ``name`` numa célula de código do notebook, executada sozinha."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = [
            line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))
        ]
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                namespace = {"math": math, "torch": torch}
                exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), namespace)
                return namespace[name]
    raise AssertionError(f"{name} não está em {path.name}")


@pytest.mark.parametrize("d_k", [3, 4, 8])
def test_notebook_03_step_by_step_matches_tpt_bit_for_bit(d_k):
    """O notebook 03 compara a sua função com a do tpt com tolerância zero: vale com todo d_k."""
    step_by_step = _notebook_function(NOTEBOOK_03, "attention_step_by_step")
    for seed, (b, t, s) in enumerate([(2, 3, 5), (1, 32, 32), (3, 7, 4)]):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(b, t, d_k, generator=g)
        k = torch.randn(b, s, d_k, generator=g)
        v = torch.randn(b, s, 6, generator=g)
        ours, ours_weights = step_by_step(q, k, v)
        out, weights = scaled_dot_product_attention(q, k, v)
        assert torch.equal(ours, out) and torch.equal(ours_weights, weights)


@pytest.mark.parametrize("d_k", [3, 8])
def test_dividing_by_sqrt_dk_changes_bits(d_k):
    """Por que o notebook multiplica por 1/√d_k: dividir por √d_k (não exato) muda o último bit."""
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(x / math.sqrt(d_k), x * (1 / math.sqrt(d_k)))
