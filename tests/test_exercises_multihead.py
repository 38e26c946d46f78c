"""Conferências dos exercícios do notebook 04_atencao_multicabeca (tpt.exercises.multihead).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as roda
pelas conferências). Aqui ficam as respostas erradas típicas (cada uma com a sua mensagem),
as regras dos enunciados (cada uma quebrada por uma resposta que, sem a regra, passaria) e
estilos alternativos de respostas certas.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import multihead as ex


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: repetir as cabeças de K/V
# --------------------------------------------------------------------------------------


def test_repeat_kv_stub_is_pending(capsys):
    assert ex.check_repeat_kv(stub) is False
    assert _pending(capsys.readouterr().out)


def test_repeat_kv_with_expand_is_accepted(capsys):
    def with_expand(kv, num_heads):
        b, h_kv, s, d_h = kv.shape
        group = num_heads // h_kv
        return kv[:, :, None].expand(b, h_kv, group, s, d_h).reshape(b, num_heads, s, d_h)

    assert ex.check_repeat_kv(with_expand) is True, capsys.readouterr().out


def test_repeat_kv_with_index_select_is_accepted(capsys):
    def with_index(kv, num_heads):
        group = num_heads // kv.shape[1]
        return kv[:, torch.arange(num_heads) // group]

    assert ex.check_repeat_kv(with_index) is True, capsys.readouterr().out


def test_repeat_kv_tiled_order_is_explained(capsys):
    def tiled(kv, num_heads):
        return kv.repeat(1, num_heads // kv.shape[1], 1, 1)

    assert ex.check_repeat_kv(tiled) is False
    out = capsys.readouterr().out
    assert "ordem" in out and "i % h_kv" in out and "repeat_interleave" in out


def test_repeat_kv_on_the_wrong_axis_is_explained(capsys):
    def positions(kv, num_heads):
        return kv.repeat_interleave(num_heads // kv.shape[1], dim=2)

    assert ex.check_repeat_kv(positions) is False
    out = capsys.readouterr().out
    assert "eixo das posições (dim=2)" in out


def test_repeat_kv_crash_gets_a_portuguese_hint(capsys):
    def crashes(kv, num_heads):
        return kv.view(kv.shape[0], num_heads, kv.shape[2], -1)  # muda d_h, ou falha

    assert ex.check_repeat_kv(crashes) is False
    out = capsys.readouterr().out
    assert "❌" in out


def test_repeat_kv_rule_forbids_loops(capsys):
    def with_loop(kv, num_heads):
        group = num_heads // kv.shape[1]
        return torch.stack([kv[:, i // group] for i in range(num_heads)], dim=1)

    assert ex.check_repeat_kv(with_loop) is False
    assert "sem laços" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 2: a atenção com GQA, em lote
# --------------------------------------------------------------------------------------


def _split(query, key_value, mha):
    b, t, d = query.shape
    s = key_value.shape[1]
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    q, k, v = mha.project_qkv(query, key_value)  # (b, t, d), (b, s, d_kv), (b, s, d_kv)
    q = q.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    k = k.view(b, s, h_kv, d_h).transpose(1, 2)  # (b, h_kv, s, d_h)
    v = v.view(b, s, h_kv, d_h).transpose(1, 2)  # (b, h_kv, s, d_h)
    return q, k, v


def _merge(out, mha):
    b, h, t, d_h = out.shape
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, h * d_h))


def test_gqa_stub_is_pending(capsys):
    assert ex.check_gqa_forward(stub) is False
    assert _pending(capsys.readouterr().out)


def test_gqa_with_torch_enable_gqa_is_accepted(capsys):
    def fused(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        return _merge(F.scaled_dot_product_attention(q, k, v, enable_gqa=True), mha)

    assert ex.check_gqa_forward(fused) is True, capsys.readouterr().out


def test_gqa_with_an_imported_alias_is_accepted_and_counted(capsys):
    from tpt import scaled_dot_product_attention as attention

    def aliased(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return _merge(attention(q, k, v)[0], mha)

    def twice(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        attention(q, k, v)
        return _merge(attention(q, k, v)[0], mha)

    assert ex.check_gqa_forward(aliased) is True, capsys.readouterr().out
    assert ex.check_gqa_forward(twice) is False
    assert "chamou a atenção 2 vezes" in capsys.readouterr().out
    assert attention is tpt.scaled_dot_product_attention  # o apelido foi restaurado


def test_gqa_rule_forbids_calling_the_module(capsys):
    def module(query, key_value, mha):
        return mha(query, key_value)[0]

    def forward(query, key_value, mha):
        return mha.forward(query, key_value)[0]

    assert ex.check_gqa_forward(module) is False
    assert "sem chamar o módulo pronto" in capsys.readouterr().out
    assert ex.check_gqa_forward(forward) is False
    assert "chama mha.forward" in capsys.readouterr().out
    # A proibição acaba com a conferência.
    mha = tpt.MultiHeadAttention(8, 2).eval()
    assert mha(torch.zeros(1, 3, 8))[0].shape == (1, 3, 8)


def test_gqa_rule_forbids_the_module_internal_steps(capsys):
    def internal_steps(query, key_value, mha):
        q, k, v = mha.project_qkv(query, key_value)
        q = mha._split_heads(q, mha.num_heads)
        k = mha._expand_kv_heads(mha._split_heads(k, mha.num_kv_heads))
        v = mha._expand_kv_heads(mha._split_heads(v, mha.num_kv_heads))
        return _merge(tpt.scaled_dot_product_attention(q, k, v)[0], mha)

    assert ex.check_gqa_forward(internal_steps) is False
    assert "mha._split_heads" in capsys.readouterr().out


def test_gqa_rule_forbids_a_loop_over_heads(capsys):
    def per_head(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        heads = [
            tpt.scaled_dot_product_attention(q[:, i], k[:, i // group], v[:, i // group])[0]
            for i in range(mha.num_heads)
        ]
        return _merge(torch.stack(heads, dim=1), mha)

    assert ex.check_gqa_forward(per_head) is False
    assert "laço" in capsys.readouterr().out


def test_gqa_rule_counts_unrolled_calls_per_head(capsys):
    def unrolled(query, key_value, mha):  # sem laço, mas uma chamada por cabeça
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        first = tpt.scaled_dot_product_attention(q[:, :1], k[:, :1], v[:, :1])[0]
        rest = tpt.scaled_dot_product_attention(q[:, 1:], k[:, 1:], v[:, 1:])[0]
        return _merge(torch.cat([first, rest], dim=1), mha)

    assert ex.check_gqa_forward(unrolled) is False
    assert "uma chamada de tpt.scaled_dot_product_attention" in capsys.readouterr().out


def test_gqa_without_any_attention_call_is_rejected(capsys):
    def by_hand(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / mha.head_dim**0.5, dim=-1)
        return _merge(weights @ v, mha)

    assert ex.check_gqa_forward(by_hand) is False
    assert "chamou a atenção 0 vezes" in capsys.readouterr().out


def test_gqa_tiled_heads_are_explained(capsys):
    def tiled(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        return _merge(tpt.scaled_dot_product_attention(q, k, v)[0], mha)

    assert ex.check_gqa_forward(tiled) is False
    assert "ordem errada" in capsys.readouterr().out


def test_gqa_splitting_kv_into_num_heads_is_explained(capsys):
    def num_heads_for_kv(query, key_value, mha):
        b, t, d = query.shape
        s = key_value.shape[1]
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = mha.project_qkv(query, key_value)
        q = q.view(b, t, h, d_h).transpose(1, 2)
        k = k.view(b, s, h, d_h).transpose(1, 2)
        v = v.view(b, s, h, d_h).transpose(1, 2)
        return _merge(tpt.scaled_dot_product_attention(q, k, v)[0], mha)

    assert ex.check_gqa_forward(num_heads_for_kv) is False
    out = capsys.readouterr().out
    assert "levantou RuntimeError" in out and "view(b, s, num_kv_heads, d_h)" in out


def test_gqa_reshaping_kv_with_t_is_explained(capsys):
    def kv_with_t(query, key_value, mha):
        b, t, d = query.shape
        h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
        q, k, v = mha.project_qkv(query, key_value)
        q = q.view(b, t, h, d_h).transpose(1, 2)
        k = k.view(b, t, h_kv, d_h).transpose(1, 2)  # erro: t em vez de s
        v = v.view(b, t, h_kv, d_h).transpose(1, 2)
        group = h // h_kv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return _merge(tpt.scaled_dot_product_attention(q, k, v)[0], mha)

    assert ex.check_gqa_forward(kv_with_t) is False
    out = capsys.readouterr().out
    assert "atenção cruzada" in out and "s=6" in out and "t=4" in out


def test_gqa_without_out_proj_is_explained(capsys):
    def no_out_proj(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = tpt.scaled_dot_product_attention(q, k, v)[0]
        b, h, t, d_h = out.shape
        return out.transpose(1, 2).reshape(b, t, h * d_h)

    assert ex.check_gqa_forward(no_out_proj) is False
    assert "falta a projeção final" in capsys.readouterr().out


def test_gqa_wrong_scale_is_reported(capsys):
    def no_scale(query, key_value, mha):
        q, k, v = _split(query, key_value, mha)
        group = mha.num_heads // mha.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return _merge(tpt.scaled_dot_product_attention(q, k, v, scale=1.0)[0], mha)

    assert ex.check_gqa_forward(no_scale) is False
    assert "difere de mha(query, key_value)[0]" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 3: contar parâmetros sem construir o módulo
# --------------------------------------------------------------------------------------


def _count(embed_dim, num_heads, num_kv_heads=None, bias=True):
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    kv_dim = num_kv_heads * (embed_dim // num_heads)
    return 2 * embed_dim * (embed_dim + kv_dim) + (2 * (embed_dim + kv_dim) if bias else 0)


def test_num_parameters_stub_is_pending(capsys):
    assert ex.check_num_parameters(stub) is False
    assert _pending(capsys.readouterr().out)


def test_num_parameters_numpy_integer_is_accepted(capsys):
    def with_numpy(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return np.int64(_count(embed_dim, num_heads, num_kv_heads, bias))

    assert ex.check_num_parameters(with_numpy) is True, capsys.readouterr().out


def test_num_parameters_rule_forbids_building_the_module(capsys):
    def builds(embed_dim, num_heads, num_kv_heads=None, bias=True):
        module = tpt.MultiHeadAttention(embed_dim, num_heads, num_kv_heads, bias=bias)
        return sum(p.numel() for p in module.parameters())

    MHA = tpt.MultiHeadAttention  # apelido: o nome não aparece na função

    def builds_alias(embed_dim, num_heads, num_kv_heads=None, bias=True):
        module = MHA(embed_dim, num_heads, num_kv_heads, bias=bias)
        return sum(p.numel() for p in module.parameters())

    make = nn.Linear

    def builds_layers(embed_dim, num_heads, num_kv_heads=None, bias=True):
        kv = (num_kv_heads or num_heads) * (embed_dim // num_heads)
        layers = [make(embed_dim, embed_dim, bias=bias), make(embed_dim, kv, bias=bias),
                  make(embed_dim, kv, bias=bias), make(embed_dim, embed_dim, bias=bias)]
        return sum(p.numel() for layer in layers for p in layer.parameters())

    for answer in (builds, builds_alias, builds_layers):
        assert ex.check_num_parameters(answer) is False
        assert "sem construir o módulo" in capsys.readouterr().out
    # A proibição acaba com a conferência.
    assert sum(p.numel() for p in tpt.MultiHeadAttention(16, 4).parameters()) == 1088


def test_num_parameters_per_head_matrices_is_reported(capsys):
    def per_head(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return num_heads * (4 * embed_dim**2 + (4 * embed_dim if bias else 0))

    assert ex.check_num_parameters(per_head) is False
    out = capsys.readouterr().out
    assert "não depende de num_heads" in out and "embed_dim=16" in out


def test_num_parameters_ignoring_kv_heads_is_reported(capsys):
    def ignores_gqa(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return 4 * embed_dim**2 + (4 * embed_dim if bias else 0)

    assert ex.check_num_parameters(ignores_gqa) is False
    out = capsys.readouterr().out
    assert "num_kv_heads=2" in out and "16 colunas, não 64" in out


def test_num_parameters_without_bias_is_reported(capsys):
    def no_bias(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return _count(embed_dim, num_heads, num_kv_heads, bias=False)

    assert ex.check_num_parameters(no_bias) is False
    assert "faltam os vieses" in capsys.readouterr().out


def test_num_parameters_with_bias_always_is_reported(capsys):
    def always_bias(embed_dim, num_heads, num_kv_heads=None, bias=True):
        return _count(embed_dim, num_heads, num_kv_heads, bias=True)

    assert ex.check_num_parameters(always_bias) is False
    assert "com bias=False não há vieses" in capsys.readouterr().out


def test_num_parameters_float_is_reported(capsys):
    def true_division(embed_dim, num_heads, num_kv_heads=None, bias=True):
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        kv_dim = num_kv_heads * (embed_dim / num_heads)
        return 2 * embed_dim * (embed_dim + kv_dim) + (2 * (embed_dim + kv_dim) if bias else 0)

    assert ex.check_num_parameters(true_division) is False
    assert "use // (divisão inteira)" in capsys.readouterr().out


def test_num_parameters_none_kv_heads_crash_is_explained(capsys):
    def ignores_none(embed_dim, num_heads, num_kv_heads=None, bias=True):
        kv_dim = num_kv_heads * (embed_dim // num_heads)  # TypeError com None
        return 2 * embed_dim * (embed_dim + kv_dim)

    assert ex.check_num_parameters(ignores_none) is False
    out = capsys.readouterr().out
    assert "levantou TypeError" in out and "num_kv_heads=None" in out
