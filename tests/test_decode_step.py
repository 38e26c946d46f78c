"""O passo enxuto da geração (tpt.decode_step) dá os logits do GPT.forward, bit a bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tpt import generation
from tpt.attention import MultiHeadAttention
from tpt.decode_step import lean_decode_step, lean_step_supported
from tpt.generation import generate
from tpt.kv_cache import KVCache
from tpt.model import GPT, GPTConfig

VOCAB = 16

VARIANTS = {
    "learned": {},
    "learned_bias_free": {"bias": False},
    "sinusoidal": {"positional": "sinusoidal"},
    "gqa": {"num_kv_heads": 2},
    "mqa_rmsnorm_swiglu": {"num_kv_heads": 1, "norm": "rmsnorm", "activation": "swiglu"},
    "rope": {"positional": "rope", "num_kv_heads": 2, "rope_theta": 500000.0},
    "alibi": {"positional": "alibi"},
    "post_norm_relu": {"norm_first": False, "activation": "relu"},
    "gelu_tanh_head_scale": {"activation": "gelu_tanh", "head_scale": True},
    "untied": {"tie_weights": False},
}


def make_gpt(seed: int = 0, dtype: torch.dtype = torch.float32, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=VOCAB, max_len=24, embed_dim=32, num_heads=4, num_layers=2,
                  dropout=0.1)
    config.update(overrides)
    model = GPT(GPTConfig(**config)).to(dtype).eval()
    with torch.no_grad():  # logits mais espalhados que na inicialização: saídas variadas
        model.embedding.embedding.weight.mul_(4.0)
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lean_step_equals_forward_bit_for_bit(variant, dtype):
    model = make_gpt(dtype=dtype, **VARIANTS[variant])
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    ours, theirs = model.new_cache(), model.new_cache()
    step = lean_decode_step(model, ours)
    assert step is not None
    with torch.inference_mode():
        logits = model(prompt, cache=ours)[:, -1]  # (b, V)
        model(prompt, cache=theirs)
        for _ in range(10):
            token = logits.argmax(dim=-1, keepdim=True)  # (b, 1)
            logits = step(token, ours)  # (b, V)
            expected = model(token, cache=theirs, validate=False)[:, -1]  # (b, V)
            assert torch.equal(logits, expected)
        for mine, ref in zip(ours, theirs, strict=True):
            assert torch.equal(mine.k, ref.k) and torch.equal(mine.v, ref.v)


@pytest.mark.parametrize("variant", ["learned", "rope", "alibi", "mqa_rmsnorm_swiglu"])
def test_generate_gives_the_same_tokens_with_and_without_the_lean_step(variant, monkeypatch):
    """Amostragem, <eos> e janela deslizante (novo prefill no meio): os mesmos tokens."""
    model = make_gpt(**VARIANTS[variant])
    prompt = torch.randint(0, VOCAB, (3, 6), generator=torch.Generator().manual_seed(2))

    def run() -> torch.Tensor:
        return generate(model, prompt, 50, temperature=0.9, top_k=6, eos_id=3,
                        generator=torch.Generator().manual_seed(4))

    lean = run()
    monkeypatch.setattr(generation, "lean_decode_step", lambda model, cache: None)
    assert torch.equal(lean, run())


def test_lean_step_only_where_nothing_watches_the_modules():
    model = make_gpt()
    assert lean_step_supported(model, model.new_cache())

    handle = model.layers[1].ffn.linear2.register_forward_hook(lambda *args: None)
    assert not lean_step_supported(model, model.new_cache())
    handle.remove()
    handle = model.norm.register_forward_pre_hook(lambda *args: None)
    assert not lean_step_supported(model, model.new_cache())
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
    assert not lean_step_supported(model, model.new_cache())
    handle.remove()
    assert lean_step_supported(model, model.new_cache())

    assert not lean_step_supported(model.train(), model.new_cache())
    model.eval()
    assert not lean_step_supported(model, [KVCache(static=True) for _ in model.layers])
    assert not lean_step_supported(model, model.new_cache()[:1])

    class MyAttention(MultiHeadAttention):
        pass

    swapped = make_gpt()
    swapped.layers[0].self_attn.__class__ = MyAttention
    assert not lean_step_supported(swapped, swapped.new_cache())
    patched = make_gpt()
    patched.layers[0].ffn.forward = lambda x: x
    assert not lean_step_supported(patched, patched.new_cache())
    for overrides in ({"num_experts": 3}, {"fused": False}):
        other = make_gpt(**overrides)
        assert not lean_step_supported(other, other.new_cache())
        assert lean_decode_step(other, other.new_cache()) is None


def test_a_method_replaced_in_the_class_is_still_called(monkeypatch):
    model = make_gpt()
    calls = []
    original = MultiHeadAttention.forward

    def spy(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiHeadAttention, "forward", spy)
    assert not lean_step_supported(model, model.new_cache())
    generate(model, torch.zeros(1, 4, dtype=torch.long), 5, greedy=True)
    assert len(calls) == 2 * 5  # 2 camadas x (o prefill e 4 passos de um token)
    monkeypatch.undo()
    assert lean_step_supported(model, model.new_cache())


def test_a_registered_hook_still_sees_every_token():
    model = make_gpt()
    calls = []
    model.layers[0].self_attn.register_forward_hook(lambda mod, args, out: calls.append(1))
    generate(model, torch.zeros(1, 4, dtype=torch.long), 7, greedy=True)
    assert len(calls) == 7  # o prefill e 6 passos de um token: nenhum passou por fora
