"""Testes de tpt/model.py: pilhas e modelos iguais aos do PyTorch, cache, máscaras."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from tpt.model import GPT, Decoder, Encoder, GPTConfig, Transformer, TransformerConfig

# Tolerâncias: float32 atol=1e-5, rtol=1e-5; float64 atol=1e-10, rtol=1e-10.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def _close(actual, expected, dtype=torch.float32):
    torch.testing.assert_close(actual, expected, atol=TOL[dtype], rtol=TOL[dtype])


def _padding(b: int, s: int, seed: int) -> torch.Tensor:
    """Máscara (b, s), True = <pad>; a primeira sequência não tem preenchimento."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, s + 1, (b,), generator=gen)
    lengths[0] = s
    return torch.arange(s)[None, :] >= lengths[:, None]  # (b, s)


def _causal(t: int) -> torch.Tensor:
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def _torch_encoder(norm_first, activation, final_norm, dtype, nested=False):
    layer = nn.TransformerEncoderLayer(
        16,
        4,
        24,
        dropout=0.1,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    )
    norm = nn.LayerNorm(16, eps=1e-6, dtype=dtype) if final_norm else None
    with torch.no_grad():
        if norm is not None:  # ganho/viés não triviais para a norma final contar
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return nn.TransformerEncoder(layer, 3, norm=norm, enable_nested_tensor=nested).eval()


# --------------------------------------------------------------------------------------
# Pilhas contra nn.TransformerEncoder / nn.TransformerDecoder
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
def test_encoder_equals_torch(dtype, activation, norm_first, final_norm):
    torch.manual_seed(10)
    # enable_nested_tensor=False: com ele, o PyTorch em avaliação devolve 0 nas posições
    # de <pad> (tensores aninhados) e só as linhas reais seriam comparáveis.
    ref = _torch_encoder(norm_first, activation, final_norm, dtype)
    ours = Encoder.from_torch(ref)
    assert len(ours.layers) == 3 and (ours.norm is not None) == final_norm
    if final_norm:
        assert ours.norm.eps == 1e-6
    x = torch.randn(3, 6, 16, dtype=dtype)
    kpm = _padding(3, 6, seed=2)
    _close(ours(x, key_padding_mask=kpm), ref(x, src_key_padding_mask=kpm), dtype)
    _close(ours(x, attn_mask=_causal(6)), ref(x, mask=_causal(6)), dtype)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_encoder_equals_torch_nested_tensor_fast_path():
    # Com enable_nested_tensor=True (padrão), em avaliação e sem gradiente, o PyTorch
    # pula as posições de <pad> e devolve 0 nelas. Só as linhas REAIS são comparáveis,
    # e são justamente as que o decoder usa (as de <pad> são mascaradas como chaves).
    torch.manual_seed(11)
    ref = _torch_encoder(False, "relu", False, torch.float32, nested=True)
    ours = Encoder.from_torch(ref)
    x = torch.randn(3, 6, 16)
    kpm = _padding(3, 6, seed=3)
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=kpm)
        got = ours(x, key_padding_mask=kpm)
    real = ~kpm
    _close(got[real], expected[real])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
def test_decoder_equals_torch(dtype, activation, norm_first, final_norm):
    torch.manual_seed(12)
    layer = nn.TransformerDecoderLayer(
        16,
        4,
        24,
        dropout=0.1,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    )
    norm = nn.LayerNorm(16, dtype=dtype) if final_norm else None
    ref = nn.TransformerDecoder(layer, 2, norm=norm).eval()
    ours = Decoder.from_torch(ref)
    assert (ours.norm is not None) == final_norm
    x, memory = torch.randn(3, 5, 16, dtype=dtype), torch.randn(3, 7, 16, dtype=dtype)
    tgt_kpm, mem_kpm = _padding(3, 5, seed=4), _padding(3, 7, seed=5)
    expected = ref(
        x,
        memory,
        tgt_mask=_causal(5),
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=mem_kpm,
    )
    got = ours(x, memory, is_causal=True, key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm)
    _close(got, expected, dtype)


def test_final_norm_defaults_to_norm_first():
    # Errata 32: a norma final depois da pilha pertence aos modelos com pré-normalização.
    assert Encoder(8, 2, num_layers=2, norm_first=True).norm is not None
    assert Encoder(8, 2, num_layers=2, norm_first=False).norm is None
    assert Decoder(8, 2, num_layers=2, norm_first=False, final_norm=True).norm is not None
    assert len(Decoder(8, 2, num_layers=3).layers) == 3


def test_encoder_masks_reach_every_layer():
    # Se a máscara chegasse só à 1ª camada, a 2ª veria o conteúdo das posições <pad>.
    torch.manual_seed(13)
    enc = Encoder(8, 2, num_layers=3, dropout=0.0).eval()
    x = torch.randn(2, 5, 8)
    kpm = torch.tensor([[False] * 5, [False, False, False, True, True]])
    y1 = enc(x, key_padding_mask=kpm)
    x2 = x.clone()
    x2[1, 3:] = torch.randn(2, 8) * 10  # muda só o conteúdo dos <pad>
    y2 = enc(x2, key_padding_mask=kpm)
    _close(y2[1, :3], y1[1, :3])
    _close(y2[0], y1[0])


def test_stack_attention_weights_per_layer():
    torch.manual_seed(14)
    dec = Decoder(8, 2, num_layers=2, dropout=0.0).eval()
    dec(torch.randn(1, 3, 8), torch.randn(1, 4, 8), is_causal=True, need_weights=True)
    assert [w.shape for w in dec.self_attn_weights] == [(1, 2, 3, 3)] * 2
    assert [w.shape for w in dec.cross_attn_weights] == [(1, 2, 3, 4)] * 2
    enc = Encoder(8, 2, num_layers=2).eval()
    enc(torch.randn(1, 3, 8), need_weights=True)
    assert len(enc.attn_weights) == 2 and enc.attn_weights[1].shape == (1, 2, 3, 3)


# --------------------------------------------------------------------------------------
# Modelo inteiro contra nn.Transformer
# --------------------------------------------------------------------------------------
def _batch(vocab: int, b: int, s: int, t: int, seed: int, pad_id: int = 0):
    """Fonte e alvo com <pad> (id pad_id) à direita em algumas sequências."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, s), generator=gen)
    tgt = torch.randint(4, vocab, (b, t), generator=gen)
    src[1, s - 2 :] = pad_id
    tgt[1, t - 1 :] = pad_id
    if b > 2:
        src[2, 1:] = pad_id
    return src, tgt


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_equals_torch(dtype, activation, norm_first):
    torch.manual_seed(15)
    ref = nn.Transformer(
        d_model=16,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=24,
        dropout=0.1,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    ).eval()
    model = Transformer.from_torch(ref, vocab_size=13, max_len=32)
    assert model.config.final_norm is True  # nn.Transformer sempre tem as normas finais
    assert model.config.activation == activation and model.config.norm_first == norm_first
    assert model.lm_head.weight.dtype == dtype and not model.training
    src, tgt = _batch(13, 3, 7, 5, seed=1)
    src_kpm, tgt_kpm = src == 0, tgt == 0
    with torch.no_grad():
        # As mesmas entradas (embeddings * sqrt(d) + PE) nos dois modelos.
        hidden = ref(
            model.embed(src),
            model.embed(tgt),
            tgt_mask=_causal(5),
            src_key_padding_mask=src_kpm,
            tgt_key_padding_mask=tgt_kpm,
            memory_key_padding_mask=src_kpm,
        )
        expected = model.lm_head(hidden)
        logits = model(src, tgt)  # máscaras padrão: ids == pad_id
    assert logits.shape == (3, 5, 13)
    _close(logits, expected, dtype)


def test_transformer_from_torch_rejects_structural_overrides():
    ref = nn.Transformer(16, 4, 1, 1, 24, batch_first=True)
    with pytest.raises(ValueError, match=r"não aceita \['embed_dim'\]"):
        Transformer.from_torch(ref, vocab_size=10, embed_dim=32)
    with pytest.raises(TypeError, match="esperava um nn.Transformer"):
        Transformer.from_torch(nn.Linear(2, 2), vocab_size=10)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Propriedades do Transformer
# --------------------------------------------------------------------------------------
def _small_transformer(**kwargs) -> Transformer:
    torch.manual_seed(16)
    cfg = TransformerConfig(
        vocab_size=17, embed_dim=16, num_heads=4, ff_dim=32, dropout=0.0, max_len=24, **kwargs
    )
    return Transformer(cfg).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_target_token_does_not_change_past(norm_first):
    model = _small_transformer(norm_first=norm_first)
    src, tgt = _batch(17, 2, 6, 5, seed=2)
    logits = model(src, tgt)
    tgt2 = tgt.clone()
    tgt2[:, 3] = (tgt2[:, 3] + 1) % 13 + 4  # muda o token da posição 3
    logits2 = model(src, tgt2)
    _close(logits2[:, :3], logits[:, :3])
    assert not torch.allclose(logits2[0, 3:], logits[0, 3:])


def test_extra_source_padding_is_invisible():
    model = _small_transformer()
    src, tgt = _batch(17, 2, 6, 5, seed=3)
    padded = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], dim=1)  # +4 <pad>
    _close(model(padded, tgt), model(src, tgt))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decode_with_cache_equals_full(norm_first):
    model = _small_transformer(norm_first=norm_first)
    src, _ = _batch(17, 3, 6, 5, seed=4)
    tgt = torch.randint(4, 17, (3, 6))
    src_kpm = src == 0
    memory = model.encode(src)
    full = model.decode(tgt, memory, memory_key_padding_mask=src_kpm)
    _close(model(src, tgt), full)  # forward == encode + decode
    cache = model.new_cache()
    assert len(cache) == 2
    prefill = model.decode(tgt[:, :2], memory, memory_key_padding_mask=src_kpm, cache=cache)
    steps = [prefill] + [
        model.decode(tgt[:, i : i + 1], memory, memory_key_padding_mask=src_kpm, cache=cache)
        for i in range(2, 6)
    ]
    assert len(cache[0][0]) == 6 and len(cache[0][1]) == 6  # cache estático: memória
    _close(torch.cat(steps, dim=1), full)


def test_transformer_decode_need_weights():
    model = _small_transformer()
    src, tgt = _batch(17, 2, 6, 4, seed=5)
    model.decode(tgt, model.encode(src), memory_key_padding_mask=src == 0, need_weights=True)
    cross = model.decoder.cross_attn_weights[-1]  # (b, h, t, s)
    assert cross.shape == (2, 4, 4, 6)
    assert torch.all(cross[1, :, :, -2:] == 0)  # a fonte 1 termina com 2 <pad>


def test_transformer_weight_tying_and_gradients():
    model = _small_transformer()
    model.train()
    assert model.lm_head.weight is model.embedding.weight
    assert model.lm_head.weight.data_ptr() == model.embedding.embedding.weight.data_ptr()
    untied = Transformer(dataclasses.replace(model.config, tie_weights=False))
    assert untied.lm_head.weight.data_ptr() != untied.embedding.weight.data_ptr()
    # Amarrados, os pesos contam uma vez só.
    assert untied.num_parameters() - model.num_parameters() == 17 * 16
    src, tgt = _batch(17, 2, 6, 5, seed=6)
    logits = model(src, tgt)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=0)
    loss.backward()
    grad = model.embedding.weight.grad
    assert grad is not None and grad[4:].abs().sum() > 0  # o gradiente chega aos embeddings
    # Sem amarrar, a linha de <pad> (padding_idx) não recebe gradiente; amarrada, recebe
    # pelo lm_head (o logit da classe <pad> entra no softmax).
    untied(src, tgt).sum().backward()
    assert torch.all(untied.embedding.weight.grad[0] == 0)
    with torch.no_grad():
        model.embedding.weight.add_(1.0)
    assert torch.equal(model.lm_head.weight, model.embedding.weight)


def test_transformer_config_and_validation():
    model = _small_transformer()
    cfg = dataclasses.asdict(model.config)
    assert cfg["vocab_size"] == 17 and isinstance(cfg["activation"], str)
    assert model.embedding.padding_idx == 0 and model.embedding.scale
    with pytest.raises(ValueError, match=r"activation='tanh' desconhecida.*relu, gelu, swiglu"):
        TransformerConfig(vocab_size=10, activation="tanh")
    with pytest.raises(ValueError, match="embed_dim=10 não é divisível por num_heads=4"):
        TransformerConfig(vocab_size=10, embed_dim=10)
    with pytest.raises(ValueError, match=r"pad_id=12 .*\[0, 9\]"):
        TransformerConfig(vocab_size=10, pad_id=12)
    src = torch.randint(4, 17, (2, 25))
    with pytest.raises(ValueError, match=r"src é longo demais: t = 25.*max_len=24"):
        model(src, src[:, :3])
    with pytest.raises(ValueError, match=r"tgt é longo demais: t = 25.*max_len=24"):
        model(src[:, :3], src)
    with pytest.raises(TypeError, match=r"src deve conter ids inteiros.*float32"):
        model(torch.rand(2, 3), src[:, :3])
    with pytest.raises(ValueError, match=r"src deve ter forma \(b, t\).*unsqueeze"):
        model(src[0, :3], src[:, :3])
    with pytest.raises(ValueError, match=r"id 17, fora do vocabulário \[0, 16\]"):
        model(torch.full((1, 3), 17), src[:1, :3])
    cache = model.new_cache()
    memory = model.encode(src[:, :5])
    model.decode(src[:, :20], memory, cache=cache)
    with pytest.raises(ValueError, match=r"len\(cache\) \+ t = 20 \+ 5 = 25.*max_len=24"):
        model.decode(src[:, :5], memory, cache=cache)
    with pytest.raises(ValueError, match="um par .* por camada \\(2 camadas\\)"):
        model.decode(src[:, :1], memory, cache=cache[:1])


# --------------------------------------------------------------------------------------
# GPT
# --------------------------------------------------------------------------------------
def _gpt(**kwargs) -> GPT:
    torch.manual_seed(17)
    base = dict(vocab_size=19, max_len=16, embed_dim=16, num_heads=4, num_layers=2, ff_dim=32)
    base.update(kwargs)
    return GPT(GPTConfig(**base)).eval()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(positional="learned"),
        dict(positional="sinusoidal", norm_first=False, activation="relu"),
        dict(positional="rope", num_kv_heads=2, norm="rmsnorm", activation="swiglu"),
        dict(positional="alibi", num_kv_heads=1),
        dict(positional="rope", fused=False, bias=False),
    ],
    ids=["learned", "sinusoidal-postnorm", "rope-gqa-rmsnorm-swiglu", "alibi-mqa", "rope-explicit"],
)
def test_gpt_kv_cache_step_by_step_equals_full(kwargs):
    model = _gpt(**kwargs)
    idx = torch.randint(0, 19, (2, 10))
    full = model(idx)
    cache = model.new_cache()
    steps = [model(idx[:, :3], cache=cache)]  # prefill com máscara causal
    steps += [model(idx[:, i : i + 1], cache=cache) for i in range(3, 10)]
    assert len(cache[0]) == 10
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)  # float32


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_gpt_left_padding_with_cache(positional):
    # Lote com <pad> à esquerda: a key_padding_mask (b, len(cache) + t) cresce a cada passo.
    # As linhas de <pad> ficam sem nenhuma chave visível (causal + preenchimento): saem sem NaN.
    model = _gpt(positional=positional, num_kv_heads=2)
    idx = torch.randint(1, 19, (2, 8))
    idx[1, :3] = 0
    kpm = idx == 0
    full = model(idx, key_padding_mask=kpm)
    assert not torch.isnan(full).any()
    cache = model.new_cache()
    steps = [model(idx[:, :4], key_padding_mask=kpm[:, :4], cache=cache)]
    steps += [
        model(idx[:, i : i + 1], key_padding_mask=kpm[:, : i + 1], cache=cache) for i in range(4, 8)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)  # float32


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_gpt_is_causal(positional):
    model = _gpt(positional=positional)
    idx = torch.randint(0, 19, (2, 8))
    idx2 = idx.clone()
    idx2[:, 5] = (idx2[:, 5] + 1) % 19
    logits, logits2 = model(idx), model(idx2)
    _close(logits2[:, :5], logits[:, :5])
    assert not torch.allclose(logits2[:, 5:], logits[:, 5:])


def test_gpt_structure_and_weights():
    model = _gpt(positional="rope", num_kv_heads=2)
    assert model.positional is None  # RoPE age dentro da atenção
    assert all(layer.self_attn.positional == "rope" for layer in model.layers)
    assert model.layers[0].self_attn.kv_dim == 2 * 4  # h_kv * d_h
    assert model.layers[0].self_attn.qkv_proj.out_features == 16 + 2 * 2 * 4
    assert model.norm is not None  # pré-normalização: norma final
    assert _gpt(norm_first=False).norm is None
    assert model.lm_head.weight.data_ptr() == model.embedding.weight.data_ptr()
    untied = _gpt(tie_weights=False)
    assert untied.lm_head.weight.data_ptr() != untied.embedding.weight.data_ptr()
    assert dataclasses.asdict(model.config)["positional"] == "rope"
    n = sum(p.numel() for p in model.parameters())
    assert model.num_parameters() == n
    idx = torch.randint(0, 19, (1, 6))
    model(idx, need_weights=True)
    w = model.attn_weights[0]
    assert w.shape == (1, 4, 6, 6) and torch.all(w.triu(diagonal=1) == 0)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi"])
def test_gpt_gradient_reaches_embeddings(positional):
    model = _gpt(positional=positional, dropout=0.1).train()
    idx = torch.randint(0, 19, (2, 7))
    logits = model(idx[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    assert model.embedding.weight.grad.abs().sum() > 0
    if positional == "learned":
        assert model.positional.embedding.weight.grad[:6].abs().sum() > 0


def test_gpt_validation():
    model = _gpt()
    with pytest.raises(ValueError, match=r"idx é longo demais: t = 17.*max_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    cache = model.new_cache()
    model(torch.zeros(1, 12, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"len\(cache\) \+ t = 12 \+ 5 = 17.*max_len=16"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    with pytest.raises(TypeError, match="idx deve conter ids inteiros"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"activation='tanh' desconhecida.*relu, gelu, swiglu"):
        GPTConfig(vocab_size=10, activation="tanh")
    with pytest.raises(
        ValueError, match=r"positional='xpos' desconhecido.*learned, sinusoidal, rope, alibi"
    ):
        GPTConfig(vocab_size=10, positional="xpos")
    with pytest.raises(ValueError, match=r"norm='batchnorm' desconhecida.*layernorm, rmsnorm"):
        GPTConfig(vocab_size=10, norm="batchnorm")
    with pytest.raises(ValueError, match="num_heads=4 não é divisível por num_kv_heads=3"):
        GPTConfig(vocab_size=10, num_kv_heads=3)
    with pytest.raises(TypeError, match="esperava um GPTConfig"):
        GPT(TransformerConfig(vocab_size=10))  # type: ignore[arg-type]


def test_gpt_head_scale_starts_at_ln_v():
    """Sem treino, ``head_scale=True`` dá perda perto de ln V; o padrão começa muito acima.

    No padrão (pesos amarrados, embedding vezes sqrt(d)) o logit do próprio token fica perto
    de sqrt(d); com ``head_scale`` o vetor final é multiplicado por d^-1/2 antes da lm_head.
    """
    vocab, d = 90, 128
    idx = torch.randint(0, vocab, (8, 33), generator=torch.Generator().manual_seed(0))
    losses, own_logits = {}, {}
    for head_scale in (False, True):
        torch.manual_seed(0)
        config = GPTConfig(
            vocab_size=vocab, max_len=32, embed_dim=d, num_layers=2, head_scale=head_scale
        )
        model = GPT(config).eval()
        with torch.no_grad():
            logits = model(idx[:, :-1])  # (8, 32, V)
        losses[head_scale] = nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        own_logits[head_scale] = logits.gather(-1, idx[:, :-1, None]).mean()
    ln_v = torch.log(torch.tensor(float(vocab)))
    assert abs(losses[True] - ln_v) < 0.1
    assert losses[False] > ln_v + 3  # o padrão continua igual: confiante no token atual
    assert abs(own_logits[False] - d**0.5) < 0.2 * d**0.5
    assert abs(own_logits[True] - 1.0) < 0.2
    assert dataclasses.asdict(GPTConfig(vocab_size=10))["head_scale"] is False
    with pytest.raises(ValueError, match="head_scale=1 deve ser True ou False"):
        GPTConfig(vocab_size=10, head_scale=1)  # type: ignore[arg-type]
