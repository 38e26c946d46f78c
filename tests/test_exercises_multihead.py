"""Conferências dos exercícios do notebook 04_atencao_multicabeca (tpt.exercises.multihead)."""

from __future__ import annotations

import torch

from tpt.attention import scaled_dot_product_attention
from tpt.exercises import multihead as ex

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook)
# --------------------------------------------------------------------------------------


def split_heads(x, num_heads):
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)


def multihead_forward(query, key_value, mha):
    b, t, d = query.shape
    s = key_value.shape[1]
    h, d_h = mha.num_heads, mha.head_dim
    q = mha.q_proj(query).view(b, t, h, d_h).transpose(1, 2)
    k = mha.k_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
    v = mha.v_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
    out, _ = scaled_dot_product_attention(q, k, v)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


def num_parameters(embed_dim, num_heads, num_kv_heads=None, bias=True):
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    kv_dim = num_kv_heads * (embed_dim // num_heads)
    weights = 2 * embed_dim * embed_dim + 2 * embed_dim * kv_dim
    biases = 2 * embed_dim + 2 * kv_dim if bias else 0
    return weights + biases


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1
# --------------------------------------------------------------------------------------


def test_split_heads_reference_passes(capsys):
    assert ex.check_split_heads(split_heads) is True
    assert "✅" in capsys.readouterr().out


def test_split_heads_stub_is_pending(capsys):
    assert ex.check_split_heads(stub) is False
    assert _pending(capsys.readouterr().out)


def test_split_heads_without_transpose_is_reported(capsys):
    def no_transpose(x, num_heads):
        b, t, d = x.shape
        return x.view(b, t, num_heads, d // num_heads)

    assert ex.check_split_heads(no_transpose) is False
    out = capsys.readouterr().out
    assert "❌" in out and "transpose(1, 2)" in out and "(1, 3, 5, 4)" in out


def test_split_heads_direct_view_is_reported(capsys):
    def direct_view(x, num_heads):
        b, t, d = x.shape
        return x.view(b, num_heads, t, d // num_heads)

    assert ex.check_split_heads(direct_view) is False
    out = capsys.readouterr().out
    assert "❌" in out and "valores não" in out and "x.view(b, h, t, d_h)" in out


def test_split_heads_wrong_columns_is_reported(capsys):
    def strided(x, num_heads):  # cabeça i = colunas i, i+h, i+2h...: forma certa, colunas erradas
        b, t, d = x.shape
        return x.view(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2)

    assert ex.check_split_heads(strided) is False
    out = capsys.readouterr().out
    assert "❌" in out and "cabeça 0 deveria conter as colunas 0 a 3" in out


# --------------------------------------------------------------------------------------
# Exercício 2
# --------------------------------------------------------------------------------------


def test_multihead_forward_reference_passes(capsys):
    assert ex.check_multihead_forward(multihead_forward) is True
    assert "✅" in capsys.readouterr().out


def test_multihead_forward_stub_is_pending(capsys):
    assert ex.check_multihead_forward(stub) is False
    assert _pending(capsys.readouterr().out)


def test_multihead_forward_reshaping_kv_with_t_is_reported(capsys):
    def kv_with_t(query, key_value, mha):
        b, t, d = query.shape
        h, d_h = mha.num_heads, mha.head_dim
        q = mha.q_proj(query).view(b, t, h, d_h).transpose(1, 2)
        k = mha.k_proj(key_value).view(b, t, h, d_h).transpose(1, 2)  # erro: t em vez de s
        v = mha.v_proj(key_value).view(b, t, h, d_h).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    assert ex.check_multihead_forward(kv_with_t) is False
    out = capsys.readouterr().out
    assert "❌" in out and "atenção cruzada" in out and "s=4, não com t=6" in out


def test_multihead_forward_without_out_proj_is_reported(capsys):
    def no_out_proj(query, key_value, mha):
        b, t, d = query.shape
        s = key_value.shape[1]
        h, d_h = mha.num_heads, mha.head_dim
        q = mha.q_proj(query).view(b, t, h, d_h).transpose(1, 2)
        k = mha.k_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
        v = mha.v_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(b, t, d)  # esquece mha.out_proj

    assert ex.check_multihead_forward(no_out_proj) is False
    out = capsys.readouterr().out
    assert "❌" in out and "falta a projeção final" in out and "autoatenção" in out


def test_multihead_forward_wrong_values_are_reported(capsys):
    def no_scale(query, key_value, mha):  # esquece a divisão por sqrt(d_h)
        b, t, d = query.shape
        s = key_value.shape[1]
        h, d_h = mha.num_heads, mha.head_dim
        q = mha.q_proj(query).view(b, t, h, d_h).transpose(1, 2)
        k = mha.k_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
        v = mha.v_proj(key_value).view(b, s, h, d_h).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    assert ex.check_multihead_forward(no_scale) is False
    out = capsys.readouterr().out
    assert "❌" in out and "difere de mha(query, key_value)[0]" in out


# --------------------------------------------------------------------------------------
# Exercício 3
# --------------------------------------------------------------------------------------


def test_num_parameters_reference_passes(capsys):
    assert ex.check_num_parameters(num_parameters) is True
    assert "✅" in capsys.readouterr().out


def test_num_parameters_stub_is_pending(capsys):
    assert ex.check_num_parameters(stub) is False
    assert _pending(capsys.readouterr().out)


def test_num_parameters_per_head_matrices_is_reported(capsys):
    def per_head(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return num_heads * (4 * embed_dim**2 + (4 * embed_dim if bias else 0))

    assert ex.check_num_parameters(per_head) is False
    out = capsys.readouterr().out
    assert "❌" in out and "não depende de num_heads" in out and "embed_dim=16" in out


def test_num_parameters_ignoring_kv_heads_is_reported(capsys):
    def ignores_gqa(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return 4 * embed_dim**2 + (4 * embed_dim if bias else 0)

    assert ex.check_num_parameters(ignores_gqa) is False
    out = capsys.readouterr().out
    assert "❌" in out and "num_kv_heads=2" in out and "16 colunas, não 64" in out


def test_num_parameters_without_bias_is_reported(capsys):
    def no_bias(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return num_parameters(embed_dim, num_heads, num_kv_heads, bias=False)

    assert ex.check_num_parameters(no_bias) is False
    out = capsys.readouterr().out
    assert "❌" in out and "faltam os vieses" in out and "(64 com bias=True)" in out


def test_num_parameters_float_is_reported(capsys):
    def as_float(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return float(num_parameters(embed_dim, num_heads, num_kv_heads, bias))

    assert ex.check_num_parameters(as_float) is False
    out = capsys.readouterr().out
    assert "❌" in out and "esperava um int" in out and "float" in out


# --------------------------------------------------------------------------------------
# As conferências não alteram o gerador aleatório global do notebook
# --------------------------------------------------------------------------------------


def test_checks_leave_global_rng_untouched(capsys):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_split_heads(split_heads)
    ex.check_multihead_forward(multihead_forward)
    ex.check_num_parameters(num_parameters)
    torch.testing.assert_close(torch.rand(3), expected, atol=0, rtol=0)  # exatamente igual
    capsys.readouterr()
