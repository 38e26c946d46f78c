"""Testes de tpt.generation: filtros de amostragem, cache de K/V, guloso e beam search."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from tpt.generation import (
    Hypothesis,
    apply_temperature,
    beam_search,
    generate,
    generate_text,
    greedy_decode,
    greedy_next_token,
    length_penalty_gnmt,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)
from tpt.model import GPT, GPTConfig, Transformer, TransformerConfig
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, CharTokenizer

VOCAB = 16


def make_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=VOCAB, max_len=40, embed_dim=32, num_heads=4, num_layers=2)
    config.update(overrides)
    model = GPT(GPTConfig(**config)).eval()
    with torch.no_grad():  # logits mais espalhados que na inicialização: saídas variadas
        model.embedding.embedding.weight.mul_(4.0)
    return model


def make_seq2seq(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = dict(
        vocab_size=VOCAB, embed_dim=32, num_heads=4, max_len=32, dropout=0.0, tie_weights=False
    )
    config.update(overrides)
    model = Transformer(TransformerConfig(**config)).eval()
    with torch.no_grad():  # sem pesos amarrados (que só copiariam a entrada) e um <eos>
        model.lm_head.weight[EOS_ID].mul_(2.0)  # mais provável: hipóteses de comprimentos variados
    return model


def sequence_log_prob(model: Transformer, src: torch.Tensor, tokens: list[int], max_len: int):
    """log P(tokens [+ <eos>] | src) pelo próprio modelo, com teacher forcing."""
    finished = len(tokens) < max_len  # menos de max_len tokens: a hipótese terminou em <eos>
    target = tokens + [EOS_ID] if finished else tokens
    tgt_in = torch.tensor([[BOS_ID] + target[:-1]])  # (1, t)
    logits = model(src.reshape(1, -1), tgt_in)  # (1, t, V)
    log_probs = F.log_softmax(logits.double(), dim=-1)[0]  # (t, V)
    return log_probs[torch.arange(len(target)), torch.tensor(target)].sum().item()


# ---------------------------------------------------------------------------------------
# Filtros de logits
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_keeps_exactly_k_finite_logits(dtype, k):
    torch.manual_seed(k)
    logits = torch.randn(4, 10, dtype=dtype)
    filtered = top_k_filter(logits, k)
    finite = torch.isfinite(filtered)
    assert finite.sum(dim=-1).tolist() == [k] * 4
    # os mantidos são os k maiores, com o valor original intacto
    expected = torch.zeros_like(finite).scatter(-1, logits.topk(k, dim=-1).indices, True)
    assert torch.equal(finite, expected)
    torch.testing.assert_close(filtered[finite], logits[finite], atol=0, rtol=0)  # cópia exata


def test_top_k_larger_than_vocab_keeps_everything():
    logits = torch.randn(2, 5)
    assert torch.equal(top_k_filter(logits, 50), logits)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_p_keeps_smallest_set_reaching_p(p, seed):
    torch.manual_seed(seed)
    logits = torch.randn(3, 12, dtype=torch.float64) * 2
    probs = F.softmax(logits, dim=-1)
    kept = torch.isfinite(top_p_filter(logits, p))
    for row in range(3):
        mass = probs[row][kept[row]]
        assert mass.sum() >= p  # o conjunto mantido alcança p...
        # ...é formado pelos mais prováveis (nenhum descartado supera um mantido)...
        if (~kept[row]).any():
            assert probs[row][~kept[row]].max() <= mass.min()
        # ...e é o menor: sem o menos provável dele, não alcança mais p
        assert mass.sum() - mass.min() < p


def test_top_p_one_keeps_all_and_tiny_p_keeps_argmax():
    logits = torch.randn(3, 9)
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()
    kept = torch.isfinite(top_p_filter(logits, 1e-6))
    assert kept.sum(dim=-1).tolist() == [1, 1, 1]
    assert torch.equal(kept.float().argmax(dim=-1), logits.argmax(dim=-1))


def entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def test_temperature_moves_entropy_in_the_right_direction():
    torch.manual_seed(0)
    logits = torch.randn(5, 20, dtype=torch.float64)
    base = entropy(logits)
    assert (entropy(apply_temperature(logits, 0.5)) < base).all()  # mais concentrada
    assert (entropy(apply_temperature(logits, 2.0)) > base).all()  # mais espalhada
    torch.testing.assert_close(apply_temperature(logits, 1.0), logits, atol=0, rtol=0)
    # T muito alta tende à uniforme: entropia -> log(V)
    assert entropy(apply_temperature(logits, 1e4)).min() > math.log(20) - 1e-3


def test_sampling_is_reproducible_with_a_seeded_generator():
    logits = torch.randn(8, 30)
    kwargs = dict(temperature=0.8, top_k=10, top_p=0.9)
    a = sample_next_token(logits, generator=torch.Generator().manual_seed(3), **kwargs)
    b = sample_next_token(logits, generator=torch.Generator().manual_seed(3), **kwargs)
    assert torch.equal(a, b)
    assert a.shape == (8,) and a.dtype == torch.long


def test_sampling_frequencies_follow_the_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -3.0]])
    n = 20000
    draws = sample_next_token(logits.expand(n, -1), generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / n
    # erro padrão <= sqrt(0.25 / 20000) ~ 0.0035: tolerância de ~4 desvios
    torch.testing.assert_close(freq, F.softmax(logits[0].double(), dim=-1), atol=0.015, rtol=0)


def test_sampling_respects_the_filters():
    torch.manual_seed(1)
    logits = torch.randn(1, 25).expand(500, -1)
    draws = sample_next_token(logits, top_k=3, generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) <= set(logits[0].topk(3).indices.tolist())
    top1 = sample_next_token(logits, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(top1, greedy_next_token(logits))


# ---------------------------------------------------------------------------------------
# GPT: com cache == sem cache
# ---------------------------------------------------------------------------------------

GPT_VARIANTS = {
    "learned": {},
    "sinusoidal": {"positional": "sinusoidal"},
    "gqa": {"num_kv_heads": 2},
    "mqa_rmsnorm_swiglu": {"num_kv_heads": 1, "norm": "rmsnorm", "activation": "swiglu"},
    "rope": {"positional": "rope", "num_kv_heads": 2},
    "alibi": {"positional": "alibi"},
    "post_norm_unfused": {"norm_first": False, "fused": False},
}


@pytest.mark.parametrize("variant", list(GPT_VARIANTS))
def test_gpt_cached_generation_equals_uncached(variant):
    model = make_gpt(**GPT_VARIANTS[variant])
    prompt = torch.randint(0, VOCAB, (3, 5), generator=torch.Generator().manual_seed(1))
    greedy_cached = generate(model, prompt, 20, greedy=True)
    greedy_plain = generate(model, prompt, 20, greedy=True, use_cache=False)
    assert greedy_cached.shape == (3, 25)
    assert torch.equal(greedy_cached, greedy_plain)
    assert torch.equal(greedy_cached[:, :5], prompt)
    assert len(set(greedy_cached[:, 5:].flatten().tolist())) > 1  # o teste não é trivial

    kwargs = dict(temperature=0.9, top_k=8, top_p=0.95)
    sampled_cached = generate(
        model, prompt, 20, generator=torch.Generator().manual_seed(7), **kwargs
    )
    sampled_plain = generate(
        model, prompt, 20, generator=torch.Generator().manual_seed(7), use_cache=False, **kwargs
    )
    assert torch.equal(sampled_cached, sampled_plain)


@pytest.mark.parametrize("variant", ["learned", "sinusoidal", "rope", "alibi", "gqa"])
@pytest.mark.parametrize("keep", [None, 1, 7, 12])
def test_generation_beyond_max_len_slides_the_window(variant, keep):
    """Além de max_len a janela desliza pela mesma regra com e sem cache."""
    model = make_gpt(max_len=12, **GPT_VARIANTS[variant])
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompt, 40, greedy=True, window_keep=keep)
    plain = generate(model, prompt, 40, greedy=True, use_cache=False, window_keep=keep)
    assert cached.shape == (2, 45)
    assert torch.equal(cached, plain)
    sampled = [
        generate(model, prompt, 30, window_keep=keep, use_cache=use_cache,
                 generator=torch.Generator().manual_seed(5), temperature=0.8)
        for use_cache in (True, False)
    ]
    assert torch.equal(sampled[0], sampled[1])


def test_sliding_window_follows_the_documented_rule():
    """Um laço escrito à mão com a regra do docstring dá os mesmos tokens."""
    max_len, keep = 10, 4
    model = make_gpt(max_len=max_len)
    out = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(9))
    expected, start = out, 0
    with torch.no_grad():
        for _ in range(25):
            if expected.size(1) - start > max_len:
                start = expected.size(1) - keep
            nxt = model(expected[:, start:])[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            expected = torch.cat([expected, nxt], dim=1)
    got = generate(model, out, 25, greedy=True, window_keep=keep)
    assert torch.equal(got, expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="precisa de GPU")
def test_gpu_generation_with_cpu_generator_matches_cache_and_cpu():
    model = make_gpt().cuda()
    prompt = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(1))
    out = [
        generate(model, prompt.cuda(), 10, generator=torch.Generator().manual_seed(0),
                 use_cache=use_cache)
        for use_cache in (True, False)
    ]
    assert out[0].device.type == "cuda" and torch.equal(out[0], out[1])


def test_gpt_cache_prefills_prompt_once_then_one_token_per_step():
    model = make_gpt()
    lengths, cache_sizes = [], []
    original = model.forward

    def spy(idx, *, cache=None, **kwargs):
        lengths.append(idx.size(1))
        cache_sizes.append(None if cache is None else len(cache[0]))
        return original(idx, cache=cache, **kwargs)

    model.forward = spy
    generate(model, torch.zeros(2, 6, dtype=torch.long), 4, greedy=True)
    assert lengths == [6, 1, 1, 1]  # prefill do prompt inteiro, depois 1 token por passo
    assert cache_sizes == [0, 6, 7, 8]  # o prefill encheu o cache; posições deslocadas
    lengths.clear()
    generate(model, torch.zeros(2, 6, dtype=torch.long), 4, greedy=True, use_cache=False)
    assert lengths == [6, 7, 8, 9]


def test_generate_stops_rows_at_eos_and_pads_after():
    model = make_gpt()
    prompt = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(5))
    free = generate(model, prompt, 10, greedy=True)
    eos = int(free[0, 6])  # o 3º token gerado na linha 0 passa a ser o "<eos>"
    stopped = generate(model, prompt, 10, greedy=True, eos_id=eos)
    first = (free[0, 4:] == eos).nonzero()[0].item() + 4
    assert torch.equal(stopped[0, : first + 1], free[0, : first + 1])
    assert (stopped[0, first + 1 :] == PAD_ID).all()
    for row in range(2):  # cada linha segue igual até o seu primeiro <eos>
        hits = (free[row, 4:] == eos).nonzero()
        end = hits[0].item() + 5 if len(hits) else free.size(1)
        assert torch.equal(stopped[row, :end], free[row, :end])


def test_generate_stops_early_when_every_row_finished():
    model = make_gpt()
    prompt = torch.randint(0, VOCAB, (1, 4), generator=torch.Generator().manual_seed(2))
    free = generate(model, prompt, 10, greedy=True)
    out = generate(model, prompt, 10, greedy=True, eos_id=int(free[0, 4]))
    assert out.shape == (1, 5)


def test_generate_zero_tokens_and_restores_training_mode():
    model = make_gpt(dropout=0.1).train()
    prompt = torch.randint(0, VOCAB, (2, 3))
    assert torch.equal(generate(model, prompt, 0), prompt)
    a = generate(model, prompt, 8, greedy=True)
    b = generate(model, prompt, 8, greedy=True, use_cache=False)
    assert torch.equal(a, b)  # gerou em modo eval (sem dropout)...
    assert model.training  # ...e devolveu o modelo ao modo de treino


def test_generate_fills_the_context_exactly():
    model = make_gpt(max_len=12)
    out = generate(model, torch.zeros(1, 4, dtype=torch.long), 8, greedy=True)
    assert out.shape == (1, 12)


def test_generate_text_round_trip_with_char_tokenizer():
    tokenizer = CharTokenizer.fit("olá, mundo! ação e pão.")
    model = make_gpt(vocab_size=tokenizer.vocab_size)
    text = generate_text(model, tokenizer, "pão", 10, generator=torch.Generator().manual_seed(0))
    assert isinstance(text, str) and text.startswith("pão")
    greedy = generate_text(model, tokenizer, "pão", 10, greedy=True)
    ids = generate(model, torch.tensor([tokenizer.encode("pão")]), 10, greedy=True)
    assert greedy == tokenizer.decode(ids[0].tolist())


def test_generate_text_unknown_character_raises_tokenizer_error():
    tokenizer = CharTokenizer.fit("abc", unknown="error")
    model = make_gpt(vocab_size=tokenizer.vocab_size)
    with pytest.raises(ValueError, match="não está no vocabulário"):
        generate_text(model, tokenizer, "abz", 5)


# ---------------------------------------------------------------------------------------
# Transformer: guloso com/sem cache, beam search
# ---------------------------------------------------------------------------------------


def padded_sources(seed: int, b: int = 4, s: int = 7) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (b, s), generator=g)
    src[1, 4:] = PAD_ID  # fontes de comprimentos diferentes no mesmo lote
    src[2, 2:] = PAD_ID
    return src


@pytest.mark.parametrize(("seed", "norm_first"), [(7, False), (4, False), (1, True)])
def test_seq2seq_greedy_cached_equals_uncached(seed, norm_first):
    model = make_seq2seq(seed, norm_first=norm_first)
    src = padded_sources(seed)
    cached = greedy_decode(model, src, max_len=12)
    plain = greedy_decode(model, src, max_len=12, use_cache=False)
    assert cached == plain
    assert len(cached) == 4 and all(isinstance(t, int) for row in cached for t in row)
    assert any(len(row) < 12 for row in cached)  # alguma parou no <eos>...
    assert any(len(row) > 0 for row in cached)  # ...e alguma gerou tokens
    assert all(EOS_ID not in row and BOS_ID not in row for row in cached)
    # o lote não mistura as fontes: decodificar uma a uma dá o mesmo
    for i in range(4):
        length = int((src[i] != PAD_ID).sum())
        assert greedy_decode(model, src[i : i + 1, :length], max_len=12) == [cached[i]]


def test_seq2seq_greedy_runs_the_encoder_once():
    model = make_seq2seq()
    calls = []
    original = model.encode

    def spy(src, **kwargs):
        calls.append(tuple(src.shape))
        return original(src, **kwargs)

    model.encode = spy
    greedy_decode(model, padded_sources(1), max_len=10)
    beam_search(model, padded_sources(1)[0], max_len=10, beam_size=3)
    assert calls == [(4, 7), (1, 7)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_size_one_equals_greedy(seed):
    model = make_seq2seq(seed)
    for src in padded_sources(seed + 10):
        src = src[src != PAD_ID]
        greedy = greedy_decode(model, src[None], max_len=12)[0]
        for lp in (0.0, 0.6):
            assert beam_search(model, src, beam_size=1, max_len=12, length_penalty=lp) == greedy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_is_at_least_as_likely_as_greedy(seed):
    model = make_seq2seq(seed)
    max_len = 12
    for src in padded_sources(seed + 20):
        src = src[src != PAD_ID]
        greedy = greedy_decode(model, src[None], max_len=max_len)[0]
        hyps = beam_search(
            model, src, beam_size=4, max_len=max_len, length_penalty=0.0, return_all=True
        )
        best = hyps[0]
        # a log-prob que o beam search informa é a do modelo (teacher forcing, float64)
        reference = sequence_log_prob(model, src, best.tokens, max_len)
        assert best.log_prob == pytest.approx(reference, abs=1e-4)  # soma de ~12 log-probs float32
        assert best.score == pytest.approx(best.log_prob)  # sem penalidade: nota = log-prob
        assert reference >= sequence_log_prob(model, src, greedy, max_len) - 1e-6


def test_wide_beam_is_an_exact_search():
    """Com o feixe maior que o número de prefixos, o beam search vira busca exaustiva:
    acha a sequência de maior log-prob, conferida por força bruta em todas as saídas."""
    import itertools

    model = make_seq2seq(5, vocab_size=8)
    src = torch.tensor([4, 6, 5, 7])
    max_len = 3
    words = [t for t in range(8) if t not in (PAD_ID, BOS_ID, EOS_ID)]  # 5 tokens
    candidates = [list(c) for n in range(max_len + 1) for c in itertools.product(words, repeat=n)]
    best = max(candidates, key=lambda c: sequence_log_prob(model, src, c, max_len))
    found = beam_search(model, src, beam_size=300, max_len=max_len, length_penalty=0.0)
    assert found == best


def test_beam_search_cached_equals_uncached_and_ranks_hypotheses():
    model = make_seq2seq(4)
    src = padded_sources(4)[0]
    cached = beam_search(model, src, beam_size=4, max_len=12, return_all=True)
    plain = beam_search(model, src, beam_size=4, max_len=12, return_all=True, use_cache=False)
    assert [h.tokens for h in cached] == [h.tokens for h in plain]
    for a, b in zip(cached, plain, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-5)  # float32, ordem de soma igual
    assert all(isinstance(h, Hypothesis) for h in cached)
    scores = [h.score for h in cached]
    assert scores == sorted(scores, reverse=True) and len(cached) >= 4
    for h in cached:  # nota = log-prob / penalidade GNMT com alpha = 0.6
        length = len(h.tokens) + (1 if len(h.tokens) < 12 else 0)
        assert h.score == pytest.approx(h.log_prob / length_penalty_gnmt(length, 0.6))
    assert beam_search(model, src[None], beam_size=4, max_len=12) == cached[0].tokens


def test_length_penalty_formula():
    assert length_penalty_gnmt(1, 0.6) == pytest.approx(1.0)  # ((5 + 1) / 6) ** a = 1
    assert length_penalty_gnmt(7, 1.0) == pytest.approx(2.0)
    assert length_penalty_gnmt(30, 0.0) == 1.0


# ---------------------------------------------------------------------------------------
# Argumentos inválidos: erros em português que dizem o valor recebido
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": 0}, "temperature=0 deve ser"),
        ({"temperature": -1.5}, r"temperature=-1\.5 deve ser"),
        ({"top_p": 0.0}, r"top_p=0\.0 deve estar no intervalo \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p=1\.5 deve estar"),
        ({"top_k": 0}, "top_k=0 deve ser >= 1"),
        ({"greedy": True, "temperature": 0.5}, "greedy=True .* temperature=0.5"),
    ],
)
def test_generate_rejects_bad_sampling_arguments(kwargs, match):
    model = make_gpt()
    with pytest.raises(ValueError, match=match):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 5, **kwargs)


def test_generate_rejects_bad_lengths_and_shapes():
    model = make_gpt(max_len=10)
    prompt = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="max_new_tokens=-1 deve ser >= 0"):
        generate(model, prompt, -1)
    for keep in (0, 11, 2.5, True):
        with pytest.raises(ValueError, match=rf"window_keep={keep!r} deve ser um inteiro entre 1"):
            generate(model, prompt, 7, window_keep=keep)
    with pytest.raises(ValueError, match="o prompt tem 12 tokens, mais que o contexto"):
        generate(model, torch.zeros(1, 12, dtype=torch.long), 0)
    with pytest.raises(ValueError, match=r"forma \(b, t\); recebi \(4,\)"):
        generate(model, prompt[0], 2)
    with pytest.raises(TypeError, match="ids inteiros"):
        generate(model, prompt.float(), 2)


def test_filters_reject_bad_values():
    logits = torch.randn(2, 5)
    with pytest.raises(ValueError, match="temperature=0.0 deve ser"):
        sample_next_token(logits, temperature=0.0)
    with pytest.raises(ValueError, match="top_k=-2 deve ser >= 1"):
        top_k_filter(logits, -2)
    with pytest.raises(ValueError, match=r"top_p=-0\.1 deve estar"):
        top_p_filter(logits, -0.1)
    with pytest.raises(TypeError, match="logits deve ser um tensor float"):
        greedy_next_token(torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"logits deve ter forma \(b, V\)"):
        sample_next_token(torch.randn(5))


def test_generate_text_rejects_bad_prompts():
    tokenizer = CharTokenizer.fit("abc")
    model = make_gpt(vocab_size=tokenizer.vocab_size, max_len=8)
    with pytest.raises(TypeError, match="prompt deve ser uma str"):
        generate_text(model, tokenizer, 42, 3)
    with pytest.raises(ValueError, match="prompt vazio"):
        generate_text(model, tokenizer, "", 3)
    with pytest.raises(ValueError, match="mais que o contexto"):
        generate_text(model, tokenizer, "abcabcabc", 0)


def test_seq2seq_decoders_reject_bad_arguments():
    model = make_seq2seq()
    src = padded_sources(0)
    with pytest.raises(ValueError, match="beam_size=0 deve ser >= 1"):
        beam_search(model, src[0], beam_size=0, max_len=5)
    with pytest.raises(ValueError, match=r"UMA fonte por vez.*\(4, 7\)"):
        beam_search(model, src, max_len=5)
    with pytest.raises(ValueError, match="length_penalty=-1 deve ser >= 0"):
        beam_search(model, src[0], max_len=5, length_penalty=-1)
    with pytest.raises(ValueError, match=r"max_len=0 deve ser >= 1"):
        greedy_decode(model, src, max_len=0)
    with pytest.raises(ValueError, match=r"max_len=99 passa do contexto .*max_len=32"):
        greedy_decode(model, src, max_len=99)


class _ScriptedSeq2Seq(torch.nn.Module):
    """Um "Transformer" de mentira: P(próximo token) depende só do último token gerado.

    Tokens 4 (a), 5 (b), 6 (c). De <bos>: a 0,55, <eos> 0,25, b 0,20. Depois de a, quase
    certamente c e depois <eos> (a c <eos>: log P ≈ -0,62). Depois de b, <eos> 0,9. Com
    feixe 2, duas hipóteses ruins ("" e "b") terminam antes da melhor, que ainda está viva.
    """

    table = {
        BOS_ID: {4: 0.55, EOS_ID: 0.25, 5: 0.20},
        4: {6: 0.99, EOS_ID: 0.01},
        6: {EOS_ID: 0.99, 6: 0.01},
        5: {EOS_ID: 0.9, 6: 0.1},
    }

    def __init__(self) -> None:
        super().__init__()
        self.config = TransformerConfig(vocab_size=8, embed_dim=8, num_heads=2, max_len=12)
        logits = torch.full((8, 8), -30.0)
        for last, probs in self.table.items():
            for token, p in probs.items():
                logits[last, token] = math.log(p)
        self.register_buffer("logits", logits)

    def encode(self, src, *, src_key_padding_mask=None):
        return torch.zeros(src.shape[0], src.shape[1], 8)  # (b, s, d): não importa aqui

    def decode(self, tgt, memory, *, memory_key_padding_mask=None, cache=None):
        return self.logits[tgt]  # (n, t, V): a linha do último token de cada posição


@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
def test_beam_search_does_not_stop_before_the_best_hypothesis_finishes(length_penalty):
    model = _ScriptedSeq2Seq()
    src = torch.tensor([4, 5])
    greedy = greedy_decode(model, src[None], max_len=12, use_cache=False)[0]
    assert greedy == [4, 6]
    hyps = beam_search(
        model, src, beam_size=2, max_len=12, length_penalty=length_penalty, use_cache=False,
        return_all=True,
    )
    assert hyps[0].tokens == [4, 6]  # e não "" nem "b", que terminaram antes
    assert hyps[0].log_prob == pytest.approx(math.log(0.55 * 0.99 * 0.99), abs=1e-4)
    assert beam_search(model, src, beam_size=1, max_len=12, use_cache=False) == greedy


def test_generate_returns_an_ordinary_tensor_usable_in_training():
    """generate roda em inference_mode, mas devolve um tensor comum (não de inferência)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, max_len=16, embed_dim=16, num_heads=2, num_layers=1))
    out = generate(model, torch.tensor([[1, 2, 3]]), 5, greedy=True)
    assert not out.is_inference()
    loss = model(out).logsumexp(-1).mean()  # os ids gerados entram num passo com gradiente
    loss.backward()
    assert model.lm_head.weight.grad is not None


@pytest.mark.parametrize("use_cache", [True, False])
def test_eos_check_every_few_steps_gives_the_same_output(monkeypatch, use_cache):
    """Na GPU, o fim de todas as linhas é lido a cada 16 passos: mesma saída que na CPU."""
    generation = sys.modules["tpt.generation"]
    model = make_gpt()
    for seed in range(4):
        prompt = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(seed))
        free = generate(model, prompt, 12, greedy=True, use_cache=use_cache)
        for eos in {int(free[0, 5]), int(free[1, 7]), int(free[0, 10])}:
            expected = generate(model, prompt, 12, greedy=True, eos_id=eos, use_cache=use_cache)
            with monkeypatch.context() as patch:
                patch.setattr(generation, "host_reads_are_free", lambda device: False)
                patch.setattr(generation, "_EOS_CHECK_EVERY", 3)
                got = generate(model, prompt, 12, greedy=True, eos_id=eos, use_cache=use_cache)
            assert torch.equal(got, expected), (seed, eos)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="precisa de GPU")
@pytest.mark.parametrize("use_cache", [True, False])
def test_gpu_per_token_path_never_waits_for_the_gpu(use_cache):
    """Na GPU, nenhum passo por token faz a CPU esperar (só o prompt é conferido, uma vez)."""
    import warnings

    model = make_gpt().cuda()
    prompt = torch.randint(0, VOCAB, (2, 4), device="cuda")

    def syncs(n: int) -> int:
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                generate(model, prompt, n, greedy=True, use_cache=use_cache)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    syncs(3)  # a primeira chamada inclui esperas de inicialização, uma vez só
    assert syncs(30) <= syncs(3)  # 27 tokens a mais, nenhuma espera a mais


@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_kv_cache_bytes_equals_the_real_cache_tensors(num_kv_heads):
    """A fórmula de tpt.kv_cache_bytes = soma dos nbytes dos tensores de um cache cheio."""
    from tpt import kv_cache_bytes

    config = GPTConfig(vocab_size=VOCAB, max_len=32, embed_dim=16, num_heads=4, num_layers=3,
                       num_kv_heads=num_kv_heads)
    model = GPT(config).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 7)), cache=cache)
    measured = sum(c.k.nbytes + c.v.nbytes for c in cache)
    formula = kv_cache_bytes(3, num_kv_heads or 4, 4, 7, batch=2, bytes_per_value=4)
    assert formula == measured
    with pytest.raises(ValueError, match="tokens=-1 deve ser um inteiro >= 0"):
        kv_cache_bytes(3, 4, 4, -1, bytes_per_value=4)
