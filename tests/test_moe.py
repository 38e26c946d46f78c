"""Testes de tpt/moe.py: roteamento top-k, despacho só dos tokens escolhidos e perda auxiliar.

Tolerâncias: as comparações com a referência densa usam float64 com atol=1e-12, rtol=0
(as duas contas somam os mesmos termos, em ordens diferentes).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tpt.feedforward import FeedForward
from tpt.model import GPT, GPTConfig
from tpt.moe import MoEFeedForward, load_balancing_loss
from tpt.train import evaluate_loss, lm_batches, lm_loss, load_checkpoint, save_checkpoint, train

ATOL64 = 1e-12


def _dense_reference(moe: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """Roda todos os especialistas em todos os tokens e mistura com os pesos top-k."""
    tokens = x.reshape(-1, moe.embed_dim)  # (n, d)
    probs = torch.softmax(tokens @ moe.router.weight.T, dim=-1)  # (n, N)
    top, idx = probs.topk(moe.top_k, dim=-1)  # (n, k)
    weights = top / top.sum(-1, keepdim=True) if moe.renormalize else top  # (n, k)
    mixing = torch.zeros_like(probs).scatter(1, idx, weights)  # (n, N): zero fora do top-k
    all_outputs = torch.stack([expert(tokens) for expert in moe.experts], dim=1)  # (n, N, d)
    return (mixing.unsqueeze(-1) * all_outputs).sum(dim=1).reshape(x.shape)


def _moe(d=8, n_exp=4, k=2, ff=16, seed=0, dtype=torch.float64, **kwargs) -> MoEFeedForward:
    torch.manual_seed(seed)
    return MoEFeedForward(d, n_exp, k, ff, **kwargs).to(dtype)


@pytest.mark.parametrize(
    ("n_exp", "k", "activation", "bias"),
    [(4, 1, "swiglu", False), (4, 2, "swiglu", False), (8, 2, "relu", True), (3, 3, "gelu", True)],
)
def test_equals_dense_reference(n_exp, k, activation, bias):
    moe = _moe(n_exp=n_exp, k=k, activation=activation, bias=bias, seed=n_exp + k)
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    out = moe(x)
    assert out.shape == x.shape and out.dtype == torch.float64
    torch.testing.assert_close(out, _dense_reference(moe, x), atol=ATOL64, rtol=0)
    # Pesos renormalizados: somam 1 em cada token.
    torch.testing.assert_close(
        moe.expert_weights.sum(-1), torch.ones(3, 7, dtype=torch.float64), atol=ATOL64, rtol=0
    )
    assert moe.router_probs.shape == (3, 7, n_exp)
    assert moe.expert_indices.shape == moe.expert_weights.shape == (3, 7, k)


def test_without_renormalization_uses_raw_probabilities():
    moe = _moe(k=2, renormalize=False)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out = moe(x)
    torch.testing.assert_close(out, _dense_reference(moe, x), atol=ATOL64, rtol=0)
    top = moe.router_probs.topk(2, dim=-1).values
    torch.testing.assert_close(moe.expert_weights, top, atol=ATOL64, rtol=0)
    assert bool((moe.expert_weights.sum(-1) < 1).all())


def test_only_routed_tokens_reach_each_expert():
    moe = _moe(n_exp=4, k=2, seed=3)
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    seen: dict[int, torch.Tensor] = {}

    def hook(e):
        def record(module, inputs):
            seen[e] = inputs[0].detach().clone()

        return record

    handles = [expert.register_forward_pre_hook(hook(e)) for e, expert in enumerate(moe.experts)]
    moe(x)
    for h in handles:
        h.remove()
    tokens = x.reshape(-1, 8)
    indices = moe.expert_indices.reshape(-1, 2)
    total = 0
    for e in range(4):
        chosen = (indices == e).any(dim=-1).nonzero().squeeze(-1)  # tokens que escolheram e
        count = len(seen[e]) if e in seen else 0
        assert count == chosen.numel() == int(moe.tokens_per_expert[e])
        if count:
            # Exatamente esses tokens (nessa ordem), não o lote inteiro.
            torch.testing.assert_close(seen[e], tokens[chosen], atol=0, rtol=0)
        total += count
    assert total == tokens.shape[0] * 2  # n * k linhas processadas, não n * N
    assert total < tokens.shape[0] * 4


def test_unused_expert_is_not_called():
    moe = _moe(n_exp=3, k=1, seed=0)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = 10.0  # todo token com x[0] > 0 escolhe o especialista 0
    calls = [0, 0, 0]
    for e, expert in enumerate(moe.experts):
        expert.register_forward_pre_hook(lambda m, i, e=e: calls.__setitem__(e, calls[e] + 1))
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    x[..., 0] = x[..., 0].abs() + 1.0
    moe(x)
    assert calls == [1, 0, 0]
    assert moe.tokens_per_expert.tolist() == [6, 0, 0]


def test_top_k_equal_num_experts_with_equal_experts_is_one_ffn():
    moe = _moe(n_exp=4, k=4, seed=1)
    single = moe.experts[0]
    for expert in moe.experts[1:]:
        expert.load_state_dict(single.state_dict())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(moe(x), single(x), atol=ATOL64, rtol=0)


def test_aux_loss_on_hand_built_example():
    # 4 tokens, 2 especialistas, k = 1: três tokens vão para o 0, um para o 1.
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]], dtype=torch.float64)
    indices = torch.tensor([[0], [0], [0], [1]])
    # f = (3/4, 1/4), P = (0.65, 0.35): N * sum f P = 2 * (0.4875 + 0.0875) = 1.15
    loss = load_balancing_loss(probs, indices, 2, alpha=0.01)
    torch.testing.assert_close(loss, torch.tensor(0.0115, dtype=torch.float64), atol=1e-15, rtol=0)
    # k = 2 com 3 especialistas: f conta as n * k atribuições.
    probs3 = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3]], dtype=torch.float64)
    idx3 = torch.tensor([[0, 1], [1, 2]])
    f = torch.tensor([1, 2, 1], dtype=torch.float64) / 4
    p = probs3.mean(0)
    expected = 3 * (f * p).sum()
    torch.testing.assert_close(load_balancing_loss(probs3, idx3, 3), expected, atol=1e-15, rtol=0)


@pytest.mark.parametrize(("n_exp", "k"), [(2, 1), (4, 1), (4, 2), (3, 3)])
def test_aux_loss_equals_alpha_when_uniform(n_exp, k):
    n = n_exp * 6
    probs = torch.full((n, n_exp), 1.0 / n_exp, dtype=torch.float64)
    # Cada especialista recebe o mesmo número de atribuições.
    indices = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % n_exp  # (n, k)
    loss = load_balancing_loss(probs, indices, n_exp, alpha=0.05)
    torch.testing.assert_close(loss, torch.tensor(0.05, dtype=torch.float64), atol=1e-15, rtol=0)


def test_module_aux_loss_uniform_and_concentrated():
    moe = _moe(d=2, n_exp=2, k=1, ff=4, aux_loss_weight=0.1)
    with torch.no_grad():
        moe.router.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64))
    # Tokens simétricos: probabilidades médias (1/2, 1/2) e um token para cada lado.
    x = torch.tensor([[[2.0, 0.0], [-2.0, 0.0]]], dtype=torch.float64)
    moe(x)
    assert moe.tokens_per_expert.tolist() == [1, 1]
    torch.testing.assert_close(moe.aux_loss, torch.tensor(0.1, dtype=torch.float64))
    # Todos para o mesmo lado: perda maior que alpha.
    moe(torch.tensor([[[2.0, 0.0], [3.0, 0.0]]], dtype=torch.float64))
    assert moe.tokens_per_expert.tolist() == [2, 0]
    assert moe.aux_loss.item() > 0.1 + 0.05
    expected = load_balancing_loss(
        moe.router_probs.reshape(-1, 2), moe.expert_indices.reshape(-1, 1), 2, alpha=0.1
    )
    torch.testing.assert_close(moe.aux_loss, expected)


def test_gradients_reach_router_and_experts():
    moe = _moe(n_exp=4, k=2, seed=4)
    x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    out = moe(x)
    out.pow(2).sum().backward()  # só a saída: o roteador aprende pelos pesos renormalizados
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0
    assert x.grad is not None and x.grad.abs().sum() > 0
    for e, expert in enumerate(moe.experts):
        if moe.tokens_per_expert[e] > 0:
            assert expert.linear1.weight.grad.abs().sum() > 0
        else:
            assert expert.linear1.weight.grad is None
    # Só a perda auxiliar também chega ao roteador (por P_i).
    moe.zero_grad()
    moe(x)
    moe.aux_loss.backward()
    assert moe.router.weight.grad.abs().sum() > 0
    assert all(e.linear1.weight.grad is None for e in moe.experts)


def test_top1_renormalized_router_learns_only_from_aux_loss():
    moe = _moe(n_exp=4, k=1, seed=5)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    moe(x).pow(2).sum().backward()
    # Com k = 1 o peso renormalizado vale 1 (p / p): o gradiente da saída ao roteador
    # é zero a menos de arredondamento (~1e-17 em float64).
    assert moe.router.weight.grad is None or moe.router.weight.grad.abs().max() < 1e-12
    raw = _moe(n_exp=4, k=1, seed=5, renormalize=False)
    raw(x).pow(2).sum().backward()
    assert raw.router.weight.grad.abs().sum() > 0


def test_float32_and_other_shapes():
    torch.manual_seed(0)
    moe = MoEFeedForward(6, 3, 2)
    assert moe.ff_dim == 24
    for shape in [(5, 6), (2, 3, 6), (2, 2, 2, 6)]:
        x = torch.randn(*shape)
        out = moe(x)
        assert out.shape == x.shape
        torch.testing.assert_close(out, _dense_reference(moe, x), atol=1e-6, rtol=1e-5)
        assert moe.expert_indices.shape == (*shape[:-1], 2)


def test_parameter_counts():
    moe = MoEFeedForward(8, 4, 2, 16)
    expert = FeedForward(8, 16, activation="swiglu", bias=False)
    per_expert = sum(p.numel() for p in expert.parameters())
    assert sum(p.numel() for p in moe.parameters()) == 8 * 4 + 4 * per_expert
    assert moe.num_active_parameters() == 8 * 4 + 2 * per_expert


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(embed_dim=0, num_experts=4), "embed_dim=0"),
        (dict(embed_dim=8, num_experts=0), "num_experts=0"),
        (dict(embed_dim=8, num_experts=2.5), "num_experts=2.5"),
        (dict(embed_dim=8, num_experts=4, top_k=0), "top_k=0"),
        (dict(embed_dim=8, num_experts=4, top_k=5), "top_k=5 não pode passar de num_experts=4"),
        (dict(embed_dim=8, num_experts=4, activation="tanh"), "activation='tanh' desconhecida"),
        (dict(embed_dim=8, num_experts=4, aux_loss_weight=-1.0), "aux_loss_weight=-1.0"),
        (dict(embed_dim=8, num_experts=4, ff_dim=0), "ff_dim=0"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MoEFeedForward(**kwargs)


def test_bad_inputs():
    moe = MoEFeedForward(8, 4, 2)
    with pytest.raises(ValueError, match=r"forma \(b, t, 8\).*recebi forma \(2, 3, 5\)"):
        moe(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="recebi forma"):
        moe(torch.randn(8))
    with pytest.raises(TypeError, match="espera um torch.Tensor"):
        moe([[0.0] * 8])
    with pytest.raises(ValueError, match=r"router_probs deve ter forma \(n, 4\)"):
        load_balancing_loss(torch.rand(3, 5), torch.zeros(3, 1, dtype=torch.long), 4)
    with pytest.raises(ValueError, match=r"expert_indices deve ter forma \(n, k\) com n=3"):
        load_balancing_loss(torch.rand(3, 4), torch.zeros(2, 1, dtype=torch.long), 4)


# --------------------------------------------------------------------------------------
# A chave do GPTConfig
# --------------------------------------------------------------------------------------
def _gpt_config(**kwargs) -> GPTConfig:
    base = dict(vocab_size=13, max_len=16, embed_dim=16, num_heads=2, num_layers=2)
    base.update(kwargs)
    return GPTConfig(**base)


def test_gpt_with_experts_builds_moe_layers_and_aux_loss():
    torch.manual_seed(0)
    model = GPT(_gpt_config(num_experts=4, moe_top_k=2, ff_dim=24, activation="swiglu"))
    assert all(isinstance(layer.ffn, MoEFeedForward) for layer in model.layers)
    assert model.layers[0].ffn.num_experts == 4 and model.layers[0].ffn.ff_dim == 24
    idx = torch.randint(0, 13, (2, 10))
    targets = torch.randint(0, 13, (2, 10))
    logits = model(idx)
    assert logits.shape == (2, 10, 13)
    expected = sum(layer.ffn.aux_loss for layer in model.layers)
    torch.testing.assert_close(model.aux_loss, expected)
    ce = F.cross_entropy(logits.reshape(-1, 13), targets.reshape(-1))
    batch = {"input_ids": idx, "targets": targets}
    model.train()
    torch.testing.assert_close(lm_loss(model, batch), ce + model.aux_loss)  # treino: soma aux
    model.eval()
    torch.testing.assert_close(lm_loss(model, batch), ce)  # avaliação: cross-entropy pura
    # Sem MoE, nada muda.
    dense = GPT(_gpt_config())
    assert dense.aux_loss is None and isinstance(dense.layers[0].ffn, FeedForward)


def test_gpt_moe_parameters_and_training():
    torch.manual_seed(0)
    dense = GPT(_gpt_config(activation="swiglu", ff_dim=24))
    moe = GPT(_gpt_config(activation="swiglu", ff_dim=24, num_experts=4, moe_top_k=1))
    per_ffn = sum(p.numel() for p in dense.layers[0].ffn.parameters())
    router = 16 * 4
    assert moe.num_parameters() - dense.num_parameters() == 2 * (3 * per_ffn + router)
    ids = torch.randint(0, 13, (400,))
    history = train(
        moe, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_steps=30, lr=1e-2, warmup_steps=5,
        progress=False,
    )
    assert history["train_loss"][-1] < history["train_loss"][0]
    val = evaluate_loss(moe, lm_batches(ids, 8, 4, num_batches=2), lm_loss)
    assert val == val  # não é NaN


def test_gpt_moe_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    model = GPT(_gpt_config(num_experts=3, moe_top_k=2)).eval()
    path = save_checkpoint(tmp_path / "moe.pt", model)
    loaded, _, _ = load_checkpoint(path)
    assert dataclasses.asdict(loaded.config) == dataclasses.asdict(model.config)
    idx = torch.randint(0, 13, (1, 6))
    torch.testing.assert_close(loaded(idx), model(idx))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(num_experts=0), "num_experts=0"),
        (dict(num_experts=2, moe_top_k=3), "moe_top_k=3 não pode passar de num_experts=2"),
        (dict(num_experts=2, moe_top_k=0), "moe_top_k=0"),
        (dict(num_experts=2, moe_aux_weight=-0.1), "moe_aux_weight=-0.1"),
    ],
)
def test_gpt_config_moe_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _gpt_config(**kwargs)


def test_moe_is_a_module_in_state_dict():
    moe = MoEFeedForward(4, 2, 1, 8)
    keys = set(moe.state_dict())
    assert "router.weight" in keys and "experts.1.linear3.weight" in keys
    assert isinstance(moe.experts, nn.ModuleList)
