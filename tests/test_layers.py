"""Testes de tpt/layers.py: EncoderLayer e DecoderLayer iguais às do PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tpt.attention import KVCache
from tpt.layers import DecoderLayer, EncoderLayer
from tpt.norms import LayerNorm, RMSNorm

# Tolerâncias: float32 atol=1e-5, rtol=1e-5; float64 atol=1e-10, rtol=1e-10.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
# (b, t, s, d, h, d_ff): t != s para a atenção cruzada.
SHAPES = [(3, 5, 7, 16, 4, 32), (2, 6, 3, 12, 3, 20)]


def _close(actual, expected, dtype):
    torch.testing.assert_close(actual, expected, atol=TOL[dtype], rtol=TOL[dtype])


def _padding(b: int, s: int, seed: int) -> torch.Tensor:
    """Máscara (b, s) com comprimentos variados (True = <pad>), nunca uma linha toda True."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, s + 1, (b,), generator=gen)
    lengths[0] = s  # uma sequência sem preenchimento
    return torch.arange(s)[None, :] >= lengths[:, None]  # (b, s)


def _causal(t: int) -> torch.Tensor:
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)  # True = futuro


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_encoder_layer_equals_torch(dtype, activation, norm_first, shape):
    b, t, _, d, h, ff = shape
    torch.manual_seed(d + t)
    ref = nn.TransformerEncoderLayer(
        d,
        h,
        ff,
        dropout=0.1,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    ).eval()
    ours = EncoderLayer.from_torch(ref)
    assert not ours.training and ours.norm_first == norm_first
    assert ours.ffn.activation == activation and ours.self_attn.embed_dim == d
    x = torch.randn(b, t, d, dtype=dtype)
    kpm = _padding(b, t, seed=t)
    # Sem máscara, com preenchimento e com preenchimento + máscara causal (todas True = bloqueado).
    _close(ours(x), ref(x), dtype)
    _close(ours(x, key_padding_mask=kpm), ref(x, src_key_padding_mask=kpm), dtype)
    expected = ref(x, src_mask=_causal(t), src_key_padding_mask=kpm)
    _close(ours(x, attn_mask=_causal(t), key_padding_mask=kpm), expected, dtype)
    _close(ours(x, is_causal=True, key_padding_mask=kpm), expected, dtype)
    # Também o caminho explícito (need_weights=True) dá o mesmo resultado.
    _close(
        ours(x, key_padding_mask=kpm, need_weights=True), ref(x, src_key_padding_mask=kpm), dtype
    )


def test_encoder_layer_equals_torch_fast_path():
    # Em avaliação e sem gradiente, o PyTorch usa um kernel fundido; a resposta é a mesma.
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    ours = EncoderLayer.from_torch(ref)
    x = torch.randn(3, 6, 16)
    kpm = _padding(3, 6, seed=1)
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=kpm)
        # float32: atol=1e-5, rtol=1e-5
        torch.testing.assert_close(ours(x, key_padding_mask=kpm), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_decoder_layer_equals_torch(dtype, activation, norm_first, shape):
    b, t, s, d, h, ff = shape
    torch.manual_seed(d + s)
    ref = nn.TransformerDecoderLayer(
        d,
        h,
        ff,
        dropout=0.1,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    ).eval()
    ours = DecoderLayer.from_torch(ref)
    assert ours.ffn.activation == activation and ours.norm_first == norm_first
    x = torch.randn(b, t, d, dtype=dtype)
    memory = torch.randn(b, s, d, dtype=dtype)
    tgt_kpm = _padding(b, t, seed=t)
    mem_kpm = _padding(b, s, seed=s + 1)
    expected = ref(
        x,
        memory,
        tgt_mask=_causal(t),
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=mem_kpm,
    )
    got = ours(
        x,
        memory,
        attn_mask=_causal(t),
        key_padding_mask=tgt_kpm,
        memory_key_padding_mask=mem_kpm,
    )
    _close(got, expected, dtype)
    got = ours(x, memory, is_causal=True, key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm)
    _close(got, expected, dtype)
    # memory_mask (t, s) também vai para a atenção cruzada.
    memory_mask = torch.zeros(t, s, dtype=torch.bool)
    memory_mask[:, -1] = True
    _close(
        ours(x, memory, memory_mask=memory_mask),
        ref(x, memory, memory_mask=memory_mask),
        dtype,
    )


def test_from_torch_reads_settings():
    ref = nn.TransformerDecoderLayer(
        8,
        2,
        24,
        dropout=0.25,
        activation="gelu",
        layer_norm_eps=1e-6,
        bias=False,
        norm_first=True,
        batch_first=True,
    )
    ours = DecoderLayer.from_torch(ref)
    assert ours.training  # mesmo modo da camada original
    assert ours.ffn.ff_dim == 24 and ours.ffn.linear1.bias is None
    assert ours.dropout1.p == ours.dropout2.p == ours.dropout3.p == 0.25
    assert ours.ffn.dropout.p == 0.25 and ours.self_attn.dropout == 0.25
    for norm in (ours.norm1, ours.norm2, ours.norm3):
        assert isinstance(norm, LayerNorm) and norm.eps == 1e-6 and norm.bias is None
    ref.eval()
    ours.eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    # float32: atol=1e-5, rtol=1e-5
    torch.testing.assert_close(ours(x, memory), ref(x, memory), atol=1e-5, rtol=1e-5)


def test_encoder_layer_bias_false_and_eps():
    ref = nn.TransformerEncoderLayer(8, 2, 16, layer_norm_eps=1e-3, bias=False, batch_first=True)
    ref.eval()
    ours = EncoderLayer.from_torch(ref)
    assert ours.norm1.eps == 1e-3 and ours.self_attn.qkv_proj.bias is None
    x = torch.randn(2, 3, 8)
    # float32: atol=1e-5, rtol=1e-5
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_wiring_modern_variant(norm_first):
    # RMSNorm + SwiGLU + GQA: confere a ordem residual/norma escrita à mão.
    torch.manual_seed(1)
    layer = EncoderLayer(
        16,
        4,
        24,
        dropout=0.0,
        activation="swiglu",
        norm="rmsnorm",
        num_kv_heads=2,
        norm_first=norm_first,
    ).double()
    assert isinstance(layer.norm1, RMSNorm) and layer.self_attn.num_kv_heads == 2
    x = torch.randn(2, 5, 16, dtype=torch.float64)

    def sa(z):
        return layer.self_attn(z, is_causal=True)[0]

    if norm_first:
        h = x + sa(layer.norm1(x))
        expected = h + layer.ffn(layer.norm2(h))
    else:
        h = layer.norm1(x + sa(x))
        expected = layer.norm2(h + layer.ffn(h))
    # float64: atol=1e-12, rtol=1e-12 (mesmas operações, mesma ordem)
    torch.testing.assert_close(layer(x, is_causal=True), expected, atol=1e-12, rtol=1e-12)


def test_cross_attention_queries_from_decoder():
    # Post-norm, decoder: a atenção cruzada recebe o fluxo do decoder como consulta e a
    # memória como chave/valor. Trocar a memória muda a saída; o comprimento da saída é t.
    torch.manual_seed(2)
    layer = DecoderLayer(8, 2, dropout=0.0).eval()
    x = torch.randn(2, 3, 8)
    m1, m2 = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    y1 = layer(x, m1, is_causal=True, need_weights=True)
    assert y1.shape == (2, 3, 8)
    assert layer.cross_attn_weights.shape == (2, 2, 3, 6)
    assert layer.self_attn_weights.shape == (2, 2, 3, 3)
    assert not torch.allclose(y1, layer(x, m2, is_causal=True))


def test_attention_weights_stored_and_masked():
    torch.manual_seed(3)
    layer = EncoderLayer(8, 2, dropout=0.0).eval()
    x = torch.randn(2, 4, 8)
    kpm = torch.tensor([[False, False, False, True], [False, False, False, False]])
    out = layer(x, key_padding_mask=kpm, is_causal=True, need_weights=True)
    w = layer.attn_weights
    assert w.shape == (2, 2, 4, 4)
    assert torch.all(w[0, :, :, 3] == 0)  # a chave <pad> nunca recebe peso
    assert torch.all(w.triu(diagonal=1) == 0)  # nem o futuro
    # float32: atol=1e-6 (cada linha de pesos soma 1)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 4), atol=1e-6, rtol=0)
    # float32: atol=1e-6, rtol=1e-6 (caminho fundido vs explícito)
    fused = layer(x, key_padding_mask=kpm, is_causal=True)
    torch.testing.assert_close(out, fused, atol=1e-6, rtol=1e-6)
    assert layer.attn_weights is None  # sem need_weights, nada guardado


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_decoder_layer_cache_equals_full(positional):
    torch.manual_seed(4)
    layer = DecoderLayer(
        16, 4, dropout=0.0, num_kv_heads=2, positional=positional, norm_first=True
    ).eval()
    assert layer.self_attn.positional == positional
    assert layer.cross_attn.positional is None  # posição só na autoatenção
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mem_kpm = _padding(2, 7, seed=9)
    full = layer(x, memory, is_causal=True, memory_key_padding_mask=mem_kpm)
    cache = (KVCache(), KVCache(static=True))
    steps = [
        layer(x[:, i : i + 1], memory, is_causal=True, memory_key_padding_mask=mem_kpm, cache=cache)
        for i in range(5)
    ]
    assert len(cache[0]) == 5 and len(cache[1]) == 7
    # float32: atol=1e-5, rtol=1e-5
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"activation='tanh' desconhecida.*relu, gelu, swiglu"):
        EncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match=r"norm='batchnorm' desconhecida.*layernorm, rmsnorm"):
        DecoderLayer(8, 2, norm="batchnorm")
    with pytest.raises(ValueError, match="embed_dim=10 não é divisível por num_heads=3"):
        EncoderLayer(10, 3)
    with pytest.raises(ValueError, match=r"positional='xpos'.*None, 'rope', 'alibi'"):
        EncoderLayer(8, 2, positional="xpos")
    with pytest.raises(ValueError, match=r"x deve ter forma \(b, t, 8\).*\(3, 8\)"):
        EncoderLayer(8, 2)(torch.randn(3, 8))
    with pytest.raises(ValueError, match=r"memory deve ter forma \(b, t, 8\).*\(2, 4, 6\)"):
        DecoderLayer(8, 2)(torch.randn(2, 3, 8), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="memory tem lote b=3, mas x tem b=2"):
        DecoderLayer(8, 2)(torch.randn(2, 3, 8), torch.randn(3, 4, 8))
    with pytest.raises(TypeError, match=r"par \(KVCache\(\), KVCache\(static=True\)\)"):
        DecoderLayer(8, 2)(torch.randn(2, 3, 8), torch.randn(2, 4, 8), cache=KVCache())
    with pytest.raises(TypeError, match="esperava um nn.TransformerEncoderLayer"):
        EncoderLayer.from_torch(nn.TransformerDecoderLayer(8, 2))
    with pytest.raises(TypeError, match="esperava um nn.TransformerDecoderLayer"):
        DecoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2))
    with pytest.raises(TypeError, match="float32"):  # máscara float: convenção explicada
        EncoderLayer(8, 2)(torch.randn(1, 3, 8), attn_mask=torch.zeros(3, 3))
