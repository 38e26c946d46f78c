"""tpt.hf: tpt.GPT <-> GPT2LMHeadModel / LlamaForCausalLM, com as mesmas saídas.

Tudo offline (HF_HUB_OFFLINE=1): os modelos são criados aqui, com configurações
sorteadas, e as idas e voltas passam por pastas temporárias (save_pretrained).

Tolerâncias (logits em float64):
- GPT-2: 1e-10 nas duas direções (a diferença medida fica em ~1e-15);
- Llama, como o transformers é distribuído: 1e-5. Mesmo num modelo em float64, a
  LlamaRMSNorm calcula em float32 (``hidden_states.to(torch.float32)``), e os ângulos
  do RoPE (``inv_freq`` e ``position_ids.float()``) também: medimos ~6e-7 nos logits,
  quase tudo da RMSNorm (~1e-8 do RoPE nas posições curtas daqui);
- Llama com essas duas funções trocadas por versões em float64 (fixture ``llama64``):
  1e-10.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nenhum teste baixa nada

import dataclasses
import re
import subprocess
import sys

import pytest
import torch

import tpt

transformers = pytest.importorskip("transformers")
from tpt import hf  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

GPT2_CASES = [
    dict(vocab_size=37, embed_dim=32, num_heads=4, num_layers=2),
    dict(vocab_size=61, embed_dim=48, num_heads=3, num_layers=1, tie_weights=False),
    dict(vocab_size=23, embed_dim=24, num_heads=6, num_layers=3, activation="gelu_tanh"),
    dict(vocab_size=50, embed_dim=16, num_heads=2, num_layers=2, activation="relu", ff_dim=40),
    dict(vocab_size=29, embed_dim=32, num_heads=4, num_layers=2, bias=False, head_scale=True),
    dict(vocab_size=31, embed_dim=20, num_heads=5, num_layers=2, tie_weights=False,
         head_scale=True, eps=1e-6),
]
LLAMA = dict(positional="rope", norm="rmsnorm", activation="swiglu")
LLAMA_CASES = [
    dict(vocab_size=37, embed_dim=32, num_heads=4, num_layers=2, bias=False, **LLAMA),
    dict(vocab_size=41, embed_dim=64, num_heads=8, num_kv_heads=2, num_layers=2,
         tie_weights=False, bias=False, **LLAMA),
    dict(vocab_size=19, embed_dim=48, num_heads=4, num_kv_heads=1, num_layers=1, ff_dim=72,
         rope_theta=500000.0, eps=1e-6, **LLAMA),
    dict(vocab_size=53, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3,
         head_scale=True, bias=True, **LLAMA),
]


def _model(seed: int, **kwargs) -> tpt.GPT:
    """Um tpt.GPT em float64 com pesos sorteados longe do padrão (ganhos e vieses != 1 e 0)."""
    torch.manual_seed(seed)
    model = tpt.GPT(tpt.GPTConfig(max_len=32, **kwargs)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(model: tpt.GPT, seed: int, b: int = 3, t: int = 20) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (b, t), generator=g)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# A fixture llama64 (RMSNorm e RoPE do Llama em float64) fica em tests/conftest.py.


# --------------------------------------------------------------------------------------
# Igualdade nas duas direções, e depois de save_pretrained / from_pretrained
# --------------------------------------------------------------------------------------
def _round_trips(model, tmp_path, atol):
    ids = _ids(model, 1)
    with torch.no_grad():
        expected = model(ids)
        hf_model = hf.to_hf(model)
        assert _max_diff(hf_model(ids).logits, expected) <= atol
        back = hf.from_hf(hf_model)
        c = model.config
        kv = None if c.num_kv_heads in (None, c.num_heads) else c.num_kv_heads  # h_kv = h: None
        same = dataclasses.replace(
            c, head_scale=False, bias=back.config.bias, ff_dim=model.layers[0].ffn.ff_dim,
            num_kv_heads=kv,
        )
        assert back.config == same
        assert _max_diff(back(ids), expected) <= atol
        hf_model.save_pretrained(tmp_path)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64)
        assert type(loaded) is type(hf_model)
        assert _max_diff(loaded(ids).logits, expected) <= atol
        from_dir = hf.from_hf(tmp_path, dtype=torch.float64)
        assert _max_diff(from_dir(ids), expected) <= atol
    return hf_model


@pytest.mark.parametrize("case", range(len(GPT2_CASES)))
def test_gpt2_family_equal_both_ways(case, tmp_path):
    model = _model(case, **GPT2_CASES[case])
    hf_model = _round_trips(model, tmp_path, atol=1e-10)
    assert type(hf_model).__name__ == "GPT2LMHeadModel"
    tied = hf_model.lm_head.weight is hf_model.transformer.wte.weight
    assert tied == model.config.tie_weights  # amarrado continua amarrado (√d dobrado)


@pytest.mark.parametrize("case", range(len(LLAMA_CASES)))
def test_llama_family_equal_as_shipped(case, tmp_path):
    model = _model(10 + case, **LLAMA_CASES[case])
    hf_model = _round_trips(model, tmp_path / "a", atol=1e-5)
    assert type(hf_model).__name__ == "LlamaForCausalLM"
    assert (hf_model.lm_head.weight is hf_model.model.embed_tokens.weight) == (
        model.config.tie_weights
    )
    # from_hf não passa pelas funções em float32 do HF: a volta é exata.
    ids = _ids(model, 2)
    with torch.no_grad():
        assert _max_diff(hf.from_hf(hf_model)(ids), model(ids)) <= 1e-10


@pytest.mark.parametrize("case", range(len(LLAMA_CASES)))
def test_llama_family_equal_with_float64_norm_and_rope(case, tmp_path, llama64):
    model = _model(20 + case, **LLAMA_CASES[case])
    _round_trips(model, tmp_path, atol=1e-10)


def _drawn_config(seed: int, family: str) -> dict:
    """Uma configuração sorteada (semente fixa): tamanhos, GQA, amarração, viés, vocabulário."""
    g = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    heads = pick([1, 2, 4, 6, 8])
    head_dim = pick([2, 4, 6, 8])
    kwargs = dict(
        vocab_size=pick([7, 13, 29, 61, 97]),
        embed_dim=heads * head_dim,
        num_heads=heads,
        num_layers=pick([1, 2, 3]),
        tie_weights=pick([True, False]),
        bias=pick([True, False]),
        head_scale=pick([True, False]),
        ff_dim=pick([None, 3 * heads * head_dim + 1]),
    )
    if family == "gpt2":
        return {**kwargs, "activation": pick(["gelu", "gelu_tanh", "relu"])}
    kv = pick([k for k in range(1, heads + 1) if heads % k == 0])
    return {**kwargs, **LLAMA, "num_kv_heads": kv, "rope_theta": pick([10000.0, 500000.0])}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_drawn_configs_equal_both_ways(family, seed, tmp_path, llama64):
    model = _model(70 + seed, **_drawn_config(seed, family))
    hf_model = _round_trips(model, tmp_path, atol=1e-10)
    assert type(hf_model).__name__ == hf.FAMILIES[family]


def test_llama_float32_functions_are_the_whole_difference(llama64):
    # Sem a fixture a diferença passa de 1e-8; com ela, some (1e-10): é só o float32 do HF.
    model = _model(30, **LLAMA_CASES[1])
    ids = _ids(model, 3)
    with torch.no_grad():
        assert _max_diff(hf.to_hf(model)(ids).logits, model(ids)) <= 1e-10


def test_float32_model_stays_float32_and_close():
    model = _model(31, **GPT2_CASES[0]).float()
    hf_model = hf.to_hf(model)
    assert next(hf_model.parameters()).dtype == torch.float32
    ids = _ids(model, 4)
    with torch.no_grad():
        assert _max_diff(hf_model(ids).logits, model(ids)) <= 1e-4


def test_training_mode_is_kept():
    model = _model(32, **GPT2_CASES[0]).train()
    assert hf.to_hf(model).training
    assert not hf.to_hf(model.eval()).training


# --------------------------------------------------------------------------------------
# Geração gulosa com cache: os mesmos tokens
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [GPT2_CASES[0], GPT2_CASES[3], LLAMA_CASES[1], LLAMA_CASES[3]])
def test_greedy_generation_with_cache_same_tokens(kwargs):
    model = _model(40, **kwargs)
    hf_model = hf.to_hf(model)
    prompt = _ids(model, 5, b=1, t=5)
    ours = tpt.generate(model, prompt, 25, greedy=True, use_cache=True)
    theirs = hf_model.generate(
        prompt, max_new_tokens=25, do_sample=False, use_cache=True, eos_token_id=None
    )
    assert ours.tolist() == theirs.tolist()
    back = hf.from_hf(hf_model)
    assert tpt.generate(back, prompt, 25, greedy=True).tolist() == ours.tolist()


# --------------------------------------------------------------------------------------
# O que não tem equivalente: erro claro, nunca um modelo diferente
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(norm_first=False), "norm_first=False"),
        (dict(positional="sinusoidal"), "positional='sinusoidal'"),
        (dict(positional="alibi"), "positional='alibi'"),
        (dict(num_experts=2), "num_experts=2"),
        (dict(positional="rope"), "norm='layernorm'"),
        (dict(positional="rope", norm="rmsnorm"), "activation='gelu'"),
        (dict(norm="rmsnorm"), "norm='rmsnorm'"),
        (dict(activation="swiglu"), "activation='swiglu'"),
        (dict(num_kv_heads=2), "num_kv_heads=2"),
    ],
)
def test_refused_configs_name_the_field(kwargs, field):
    model = tpt.GPT(tpt.GPTConfig(vocab_size=11, max_len=8, embed_dim=16, num_heads=4, **kwargs))
    with pytest.raises(ValueError, match=f"^{re.escape(field)}: .*Sem equivalente"):
        hf.to_hf(model)
    with pytest.raises(ValueError, match=f"^{re.escape(field)}"):
        hf.parameter_map(model)


def _tiny_llama_config(**kwargs):
    base = dict(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                num_attention_heads=4, max_position_embeddings=16)
    return transformers.LlamaConfig(**{**base, **kwargs})


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8}), "rope_scaling="),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(head_dim=8), "head_dim=8"),
    ],
)
def test_from_hf_refuses_llama_settings_without_equivalent(config, match):
    hf_model = transformers.LlamaForCausalLM(_tiny_llama_config(**config))
    with pytest.raises(ValueError, match=match):
        hf.from_hf(hf_model)


def test_from_hf_refuses_other_models_and_inputs(tmp_path):
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=13, n_embd=16, n_layer=1, n_head=4, n_positions=8,
                                activation_function="quick_gelu")
    )
    with pytest.raises(ValueError, match="activation_function='quick_gelu'"):
        hf.from_hf(gpt2)
    neox = transformers.GPTNeoXForCausalLM(
        transformers.GPTNeoXConfig(vocab_size=13, hidden_size=16, num_hidden_layers=1,
                                   num_attention_heads=4, intermediate_size=32)
    )
    with pytest.raises(ValueError, match="model_type='gpt_neox'"):
        hf.from_hf(neox)
    with pytest.raises(TypeError, match="from_hf espera"):
        hf.from_hf(42)
    with pytest.raises(FileNotFoundError, match="não existe"):
        hf.from_hf(tmp_path / "nada")


def test_from_hf_reads_published_defaults():
    # Padrões de checkpoints publicados: GPT-2 (gelu_new, eps 1e-5) e Llama 3 (rope_theta
    # 500.000, GQA, cabeça desamarrada, rms_norm_eps 1e-5).
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=13, n_embd=16, n_layer=1, n_head=4, n_positions=8)
    ).double().eval()
    ours = hf.from_hf(gpt2)
    assert ours.config.activation == "gelu_tanh" and ours.config.eps == 1e-5
    llama = transformers.LlamaForCausalLM(
        _tiny_llama_config(num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5)
    ).double().eval()
    ours_llama = hf.from_hf(llama, max_len=12)
    c = ours_llama.config
    assert (c.rope_theta, c.num_kv_heads, c.tie_weights, c.eps, c.max_len) == (
        500000.0, 2, False, 1e-5, 12
    )
    ids = torch.randint(0, 13, (2, 8))
    with torch.no_grad():
        assert _max_diff(ours(ids), gpt2(ids).logits) <= 1e-10
        assert _max_diff(ours_llama(ids), llama(ids).logits) <= 1e-5


# --------------------------------------------------------------------------------------
# O mapa de nomes, a permutação do RoPE e Q, K, V
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [GPT2_CASES[1], LLAMA_CASES[3]])
def test_parameter_map_covers_every_parameter(kwargs):
    model = _model(50, **kwargs)
    rows = hf.parameter_map(model)
    assert [row[0] for row in rows] == [name for name, _ in model.named_parameters()]
    hf_names = set(hf.to_hf(model).state_dict())
    for _, hf_name, how in rows:
        names = [hf_name.replace("{q,k,v}", x) for x in "qkv"] if "{q,k,v}" in hf_name else [
            hf_name
        ]
        assert all(name in hf_names for name in names), hf_name
        assert how


@pytest.mark.parametrize("kwargs", [GPT2_CASES[0], GPT2_CASES[1]])
def test_parameter_map_says_what_to_hf_does(kwargs):
    """"transposta" e "igual" na tabela são o que o to_hf faz (um viés nunca é transposto)."""
    model = _model(50, **kwargs)
    state = hf.to_hf(model).state_dict()
    params = dict(model.named_parameters())
    checked = 0
    for name, hf_name, how in hf.parameter_map(model):
        if name.endswith(".bias"):
            assert "transposta" not in how, (name, how)
        if how.startswith("transposta"):
            assert torch.equal(state[hf_name], params[name].T), name
            checked += 1
        elif how.startswith("igual") and not name.startswith("norm."):
            assert torch.equal(state[hf_name], params[name]), name
            checked += 1
    assert checked >= 8 * model.config.num_layers


def test_rope_permutation():
    assert hf.rope_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    for bad in (3, 0, 2.0, True):
        with pytest.raises(ValueError, match="head_dim="):
            hf.rope_permutation(bad)


def test_rope_permutation_turns_pairs_into_halves():
    # Girar pares vizinhos e depois permutar = permutar e girar metades (rotate_half).
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    d_h, t = 8, 5
    x = torch.randn(1, 1, t, d_h, dtype=torch.float64)
    rope = tpt.RotaryEmbedding(d_h, max_len=t).double()
    angles = torch.arange(t, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, d_h, 2, dtype=torch.float64) / d_h
    )
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    perm = hf.rope_permutation(d_h)
    theirs, _ = apply_rotary_pos_emb(x[..., perm], x[..., perm], cos[None], sin[None])
    assert torch.allclose(rope(x)[..., perm], theirs, atol=1e-14, rtol=0)


def test_get_and_set_qkv_round_trip():
    attn = tpt.MultiHeadAttention(16, 4, 2)
    weights, biases = hf.get_qkv(attn)
    assert [w.shape for w in weights] == [(16, 16), (8, 16), (8, 16)]
    new_w = [torch.randn_like(w) for w in weights]
    new_b = [torch.randn_like(b) for b in biases]
    hf.set_qkv(attn, new_w, new_b)
    got_w, got_b = hf.get_qkv(attn)
    assert all(torch.equal(a, b) for a, b in zip(got_w + got_b, new_w + new_b, strict=True))
    hf.set_qkv(attn, new_w, [None, None, None])  # sem viés na origem: viés zero aqui
    assert all(not b.any() for b in hf.get_qkv(attn)[1])


# --------------------------------------------------------------------------------------
# Tokenizador e pipeline
# --------------------------------------------------------------------------------------
TEXT = "Olá, João!\nA ação e o pão. Ñ e € são desconhecidos."


def test_tokenizer_same_ids_and_text(tmp_path):
    tokenizer = tpt.CharTokenizer.fit("Olá, João!\nA ação e o pão. são desconhecidos")
    hf_tok = hf.to_hf_tokenizer(tokenizer)
    assert hf_tok.encode(TEXT) == tokenizer.encode(TEXT)
    assert hf_tok("Ação")["input_ids"] == tokenizer.encode("Ação")
    nfd = "ação".encode().decode()  # NFC; a forma NFD abaixo vira NFC nos dois
    import unicodedata

    assert hf_tok.encode(unicodedata.normalize("NFD", nfd)) == tokenizer.encode(nfd)
    ids = tokenizer.encode(TEXT)
    assert hf_tok.decode(ids) == tokenizer.decode(ids)
    assert (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id) == (
        tpt.PAD_ID, tpt.BOS_ID, tpt.EOS_ID, tpt.UNK_ID
    )
    hf_tok.save_pretrained(tmp_path)
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT)
    with pytest.raises(TypeError, match="CharTokenizer"):
        hf.to_hf_tokenizer(tpt.BPETokenizer.train("aa bb aa", 2))


def test_pipeline_generates_the_same_text(tmp_path):
    tokenizer = tpt.CharTokenizer.fit("o gato comeu o pão e a ação")
    model = _model(60, **{**GPT2_CASES[0], "vocab_size": tokenizer.vocab_size}).float()
    hf.to_hf(model).save_pretrained(tmp_path)
    hf.to_hf_tokenizer(tokenizer).save_pretrained(tmp_path)
    pipe = transformers.pipeline("text-generation", model=str(tmp_path))
    text = pipe("o gato", max_new_tokens=12, do_sample=False)[0]["generated_text"]
    prompt = torch.tensor([tokenizer.encode("o gato")])
    ours = tpt.generate(model, prompt, 12, greedy=True)
    assert text == tokenizer.decode(ours[0])


# --------------------------------------------------------------------------------------
# O que mudou no resto do tpt: GELU com tanh, rope_theta, import leve
# --------------------------------------------------------------------------------------
def test_gelu_tanh_equals_torch():
    ffn = tpt.FeedForward(8, 16, activation="gelu_tanh").double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    act = torch.nn.GELU(approximate="tanh")
    expected = ffn.linear2(act(ffn.linear1(x)))
    assert torch.allclose(ffn(x), expected, atol=1e-15, rtol=0)


def test_rope_theta_reaches_the_attention():
    config = tpt.GPTConfig(vocab_size=11, embed_dim=16, num_heads=2, rope_theta=500000.0,
                           positional="rope")
    model = tpt.GPT(config)
    assert all(layer.self_attn.rope.theta == 500000.0 for layer in model.layers)
    for bad in (0, -1.0, "10000", True):
        with pytest.raises(ValueError, match="rope_theta="):
            tpt.GPTConfig(vocab_size=11, rope_theta=bad)


def test_import_tpt_does_not_import_transformers():
    code = "import sys, tpt, tpt.hf; assert 'transformers' not in sys.modules, 'importou'"
    subprocess.run([sys.executable, "-c", code], check=True)
