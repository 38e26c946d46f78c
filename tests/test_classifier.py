"""tpt.classifier: a cabeça no último token real e o GPT.hidden_states.

Tolerâncias (float64): o mesmo texto com e sem preenchimento à direita dá os mesmos
logits a 1e-12 (a atenção causal não deixa o último token ver os <pad> de depois;
medido ~1e-15); à esquerda, com ``key_padding_mask`` e posições deslocadas, a diferença é
real e não é testada como igualdade.
"""

from __future__ import annotations

import pytest
import torch

import tpt

LLAMA = dict(positional="rope", norm="rmsnorm", activation="swiglu")
CASES = [
    dict(vocab_size=23, embed_dim=24, num_heads=4, num_layers=2),
    dict(vocab_size=29, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, **LLAMA),
    dict(vocab_size=17, embed_dim=16, num_heads=2, num_layers=1, head_scale=True,
         tie_weights=False),
]


def _gpt(case: int, seed: int = 0) -> tpt.GPT:
    torch.manual_seed(seed)
    return tpt.GPT(tpt.GPTConfig(max_len=16, **CASES[case])).double().eval()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_hidden_states_then_head_is_forward_bit_for_bit(case):
    model = _gpt(case)
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    with torch.no_grad():
        hidden = model.hidden_states(ids)
        assert hidden.shape == (2, 7, model.config.embed_dim)
        if model.config.head_scale:
            hidden = hidden * model.config.embed_dim**-0.5
        assert torch.equal(model.lm_head(hidden), model(ids))


def test_last_token_index_right_and_left_padding():
    pad = tpt.PAD_ID
    ids = torch.tensor(
        [
            [5, 6, 7, pad, pad],  # à direita: último real na posição 2
            [pad, pad, 5, 6, 7],  # à esquerda: sempre t - 1
            [5, 6, 7, 8, 9],  # sem preenchimento
            [5, pad, 7, pad, pad],  # <pad> no meio: vale o último real
        ]
    )
    assert tpt.last_token_index(ids).tolist() == [2, 4, 4, 2]
    assert tpt.last_token_index(ids, pad_id=7).tolist() == [4, 3, 4, 4]
    assert tpt.last_token_index(ids[:, :3], pad_id=7).tolist() == [1, 2, 1, 1]
    hidden = torch.arange(4 * 5 * 2.0).reshape(4, 5, 2)
    pooled = tpt.pool_last_token(hidden, ids)
    assert torch.equal(pooled, hidden[torch.arange(4), torch.tensor([2, 4, 4, 2])])


def test_last_token_index_agrees_with_the_transformers_rule():
    # A regra do LlamaForSequenceClassification: argmax de (posição · não-pad).
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4, (50, 9), generator=g)
    ids[:, 0] = 1  # nenhuma linha só de <pad>
    rule = (torch.arange(9) * (ids != tpt.PAD_ID).int()).argmax(-1)
    assert torch.equal(tpt.last_token_index(ids), rule)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_right_padding_does_not_change_the_logits(case):
    clf = tpt.GPTClassifier(_gpt(case), 4).double().eval()
    g = torch.Generator().manual_seed(3)
    texts = [torch.randint(1, clf.gpt.config.vocab_size, (n,), generator=g) for n in (3, 7, 5)]
    t = max(len(x) for x in texts)
    padded = torch.stack([torch.cat([x, x.new_full((t - len(x),), tpt.PAD_ID)]) for x in texts])
    with torch.no_grad():
        batch = clf(padded)
        masked = clf(padded, key_padding_mask=padded == tpt.PAD_ID)
        alone = torch.cat([clf(x[None]) for x in texts])
    assert batch.shape == (3, 4)
    assert _max_diff(batch, alone) <= 1e-12
    assert _max_diff(masked, alone) <= 1e-12


def test_left_padding_reads_the_last_column_and_the_mask_matters():
    clf = tpt.GPTClassifier(_gpt(1), 3).double().eval()
    text = torch.tensor([4, 9, 11, 3])
    left = torch.cat([text.new_full((3,), tpt.PAD_ID), text])[None]  # (1, 7)
    with torch.no_grad():
        hidden = clf.gpt.hidden_states(left, key_padding_mask=left == tpt.PAD_ID)
        expected = clf.score(hidden[:, -1])
        assert torch.equal(clf(left, key_padding_mask=left == tpt.PAD_ID), expected)
        # Sem a máscara, os tokens reais leem os <pad> à esquerda: outro resultado.
        assert _max_diff(clf(left), expected) > 1e-6


def test_score_shape_dtype_and_training_mode():
    gpt = _gpt(0).train()
    clf = tpt.GPTClassifier(gpt, 5, pad_id=2)
    assert clf.gpt is gpt and clf.training
    assert clf.score.weight.shape == (5, 24) and clf.score.bias is None
    assert clf.score.weight.dtype == torch.float64
    assert clf.num_parameters() == gpt.num_parameters() + 5 * 24
    assert "num_classes=5, pad_id=2" in repr(clf)


def test_gradients_reach_the_body_and_the_head():
    clf = tpt.GPTClassifier(_gpt(1), 3).train()
    ids = torch.randint(1, 29, (4, 6))
    ids[0, 4:] = tpt.PAD_ID
    loss = torch.nn.functional.cross_entropy(clf(ids), torch.tensor([0, 1, 2, 1]))
    loss.backward()
    assert clf.score.weight.grad.abs().sum() > 0
    assert clf.gpt.layers[0].self_attn.qkv_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: tpt.GPTClassifier(torch.nn.Linear(2, 2), 3), TypeError, "espera um tpt.GPT"),
        (lambda: tpt.GPTClassifier(_gpt(0), 1), ValueError, r"num_classes=1 deve ser"),
        (lambda: tpt.GPTClassifier(_gpt(0), 2.0), ValueError, r"num_classes=2\.0"),
        (lambda: tpt.GPTClassifier(_gpt(0), 2, pad_id=99), ValueError, r"pad_id=99 fora do vocab"),
        (lambda: tpt.GPTClassifier(_gpt(0), 2, pad_id=-1), ValueError, r"pad_id=-1 deve ser"),
        (lambda: tpt.last_token_index(torch.tensor([[0, 0], [1, 0]])), ValueError,
         r"as linhas \[0\] de ids só têm <pad>"),
        (lambda: tpt.last_token_index(torch.tensor([1, 2])), ValueError, r"forma \(b, t\)"),
        (lambda: tpt.last_token_index(torch.ones(2, 3)), TypeError, "ids inteiros"),
        (lambda: tpt.last_token_index([[1, 2]]), TypeError, "torch.Tensor"),
        (lambda: tpt.pool_last_token(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)),
         ValueError, r"hidden deve ter forma \(b, t, d\)"),
        (lambda: tpt.pool_last_token(torch.ones(2, 4, 5), torch.ones(2, 3, dtype=torch.long)),
         ValueError, "mesmos"),
    ],
)
def test_bad_inputs_raise_in_portuguese(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_pool_mean_averages_only_the_real_tokens():
    pad = tpt.PAD_ID
    ids = torch.tensor([[5, 6, 7, pad], [pad, pad, 5, 6], [5, 6, 7, 8]])
    hidden = torch.arange(3 * 4 * 2.0).reshape(3, 4, 2)
    expected = torch.stack([hidden[0, :3].mean(0), hidden[1, 2:].mean(0), hidden[2].mean(0)])
    assert torch.equal(tpt.pool_mean(hidden, ids), expected)
    # Trocar os vetores das posições de <pad> não muda nada.
    noisy = hidden.clone()
    noisy[ids == pad] = 1e6
    assert torch.equal(tpt.pool_mean(noisy, ids), expected)
    assert tpt.pool_mean(hidden, ids, pad_id=7)[0].tolist() == hidden[0, [0, 1, 3]].mean(0).tolist()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_mean_pooling_classifier_ignores_right_and_masked_left_padding(case):
    clf = tpt.GPTClassifier(_gpt(case), 3, pooling="mean").double().eval()
    g = torch.Generator().manual_seed(5)
    texts = [torch.randint(1, clf.gpt.config.vocab_size, (n,), generator=g) for n in (3, 6, 4)]
    t = max(len(x) for x in texts)
    right = torch.stack([torch.cat([x, x.new_full((t - len(x),), tpt.PAD_ID)]) for x in texts])
    with torch.no_grad():
        alone = torch.cat([clf(x[None]) for x in texts])
        assert _max_diff(clf(right), alone) <= 1e-12
        hidden = clf.gpt.hidden_states(right)
        assert torch.equal(clf(right), clf.score(tpt.pool_mean(hidden, right)))
    assert "pooling='mean'" in repr(clf) and "pooling" not in repr(tpt.GPTClassifier(_gpt(0), 2))


def test_mean_pooling_gradient_reaches_every_real_position_and_no_pad():
    hidden = torch.randn(2, 5, 3, requires_grad=True)
    ids = torch.tensor([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]])
    tpt.pool_mean(hidden, ids).sum().backward()
    assert torch.allclose(hidden.grad[0, :3], torch.full((3, 3), 1 / 3))
    assert not hidden.grad[0, 3:].any()
    assert torch.allclose(hidden.grad[1], torch.full((5, 3), 1 / 5))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: tpt.GPTClassifier(_gpt(0), 2, pooling="max"), ValueError,
         r"pooling='max' deve ser 'last'"),
        (lambda: tpt.pool_mean(torch.ones(2, 3, 4), torch.tensor([[0, 0, 0], [1, 1, 1]])),
         ValueError, r"as linhas \[0\] de ids só têm <pad>"),
        (lambda: tpt.pool_mean(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)),
         ValueError, r"hidden deve ter forma \(b, t, d\)"),
        (lambda: tpt.pool_mean(torch.ones(2, 4, 5), torch.ones(2, 3, dtype=torch.long)),
         ValueError, "mesmos"),
    ],
)
def test_mean_pooling_bad_inputs_raise_in_portuguese(call, error, match):
    with pytest.raises(error, match=match):
        call()
