"""Testes de tpt.embedding.TokenEmbedding."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tpt.embedding import TokenEmbedding

CASES = [
    # (vocab_size, embed_dim, formato dos ids, semente)
    (11, 8, (2, 5), 0),
    (40, 16, (3, 7), 1),
    (7, 3, (1, 1), 2),
    (100, 32, (4, 9), 3),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vocab_size, embed_dim, shape, seed", CASES)
def test_equals_nn_embedding_times_sqrt_d(vocab_size, embed_dim, shape, seed, dtype):
    torch.manual_seed(seed)
    reference = nn.Embedding(vocab_size, embed_dim, padding_idx=0, dtype=dtype)
    module = TokenEmbedding.from_torch(reference)
    assert module.weight is not reference.weight  # from_torch copia os pesos
    assert torch.equal(module.weight, reference.weight)
    ids = torch.randint(0, vocab_size, shape)
    out = module(ids)
    assert out.shape == (*shape, embed_dim) and out.dtype == dtype
    # mesma operação, mesma ordem: atol=rtol=0 (igualdade exata)
    torch.testing.assert_close(out, reference(ids) * math.sqrt(embed_dim), atol=0, rtol=0)


@pytest.mark.parametrize("vocab_size, embed_dim, shape, seed", CASES)
def test_lookup_is_one_hot_times_matrix(vocab_size, embed_dim, shape, seed):
    torch.manual_seed(seed)
    module = TokenEmbedding(vocab_size, embed_dim, scale=False, dtype=torch.float64)
    ids = torch.randint(0, vocab_size, shape)
    one_hot = F.one_hot(ids, vocab_size).to(torch.float64)  # (b, t, V)
    product = one_hot @ module.weight  # (b, t, V) @ (V, d) -> (b, t, d)
    # cada soma tem um único termo não nulo (1.0 * w): exato em float64
    torch.testing.assert_close(module(ids), product, atol=0, rtol=0)
    # a linha usada é a do ID do token (E[x]), não a da posição
    assert torch.equal(module(ids)[0, 0], module.weight[ids[0, 0]])


def test_scale_flag():
    torch.manual_seed(0)
    module = TokenEmbedding(10, 16)
    ids = torch.tensor([[1, 2, 3]])
    assert module.scale is True and module.multiplier == 4.0
    unscaled = module.embedding(ids)
    torch.testing.assert_close(module(ids), 4.0 * unscaled, atol=0, rtol=0)  # exato
    module.scale = False
    torch.testing.assert_close(module(ids), unscaled, atol=0, rtol=0)


@pytest.mark.parametrize("scale", [True, False])
def test_initialisation_gives_unit_variance_output(scale):
    torch.manual_seed(0)
    module = TokenEmbedding(500, 64, padding_idx=0, scale=scale)
    expected_std = 64**-0.5 if scale else 1.0
    # 500 x 64 amostras: o desvio-padrão estimado erra bem menos que 5%
    assert abs(module.weight[1:].std().item() / expected_std - 1) < 0.05
    out = module(torch.arange(1, 500)[None])  # (1, 499, 64)
    assert abs(out.std().item() - 1) < 0.05
    assert torch.equal(module.weight[0], torch.zeros(64))


def test_int32_ids_are_accepted():
    module = TokenEmbedding(10, 4)
    ids = torch.tensor([[1, 9, 0]])
    assert torch.equal(module(ids.int()), module(ids))
    assert torch.equal(module(ids.to(torch.uint8)), module(ids))


def test_padding_row_is_zero_and_gets_no_gradient():
    torch.manual_seed(0)
    module = TokenEmbedding(12, 6, padding_idx=0)
    assert module.padding_idx == 0
    assert torch.equal(module.weight[0], torch.zeros(6))
    ids = torch.tensor([[5, 0, 3, 0], [0, 0, 7, 5]])
    out = module(ids)
    assert torch.equal(out[0, 1], torch.zeros(6))
    (out * torch.randn_like(out)).sum().backward()
    grad = module.weight.grad
    assert torch.equal(grad[0], torch.zeros(6))
    assert grad[5].abs().sum() > 0 and grad[7].abs().sum() > 0
    assert torch.equal(grad[1], torch.zeros(6))  # token que não apareceu


def test_float_ids_are_a_type_error():
    module = TokenEmbedding(10, 4)
    with pytest.raises(TypeError, match=r"esperava ids inteiros \(torch.long\), recebi float32"):
        module(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(TypeError, match="recebi bool"):
        module(torch.tensor([[True, False]]))
    with pytest.raises(TypeError, match="recebi int"):
        module(3)


def test_out_of_range_ids_are_a_value_error():
    module = TokenEmbedding(10, 4)
    with pytest.raises(ValueError, match=r"maior id=12.*vocab_size=10"):
        module(torch.tensor([[1, 12, 3]]))
    with pytest.raises(ValueError, match=r"menor id=-1.*vocab_size=10"):
        module(torch.tensor([[1, -1]]))


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"padding_idx=10 fora do vocabulário \(vocab_size=10"):
        TokenEmbedding(10, 4, padding_idx=10)
    with pytest.raises(ValueError, match="embed_dim=0 deve ser >= 1"):
        TokenEmbedding(10, 0)
    with pytest.raises(TypeError, match=r"vocab_size deve ser int; recebi float"):
        TokenEmbedding(10.0, 4)
    with pytest.raises(TypeError, match="from_torch espera um nn.Embedding"):
        TokenEmbedding.from_torch(nn.Linear(2, 2))


def test_weight_property_is_the_parameter():
    module = TokenEmbedding(10, 4)
    assert module.weight is module.embedding.weight
    assert module.weight.shape == (10, 4)
    assert [name for name, _ in module.named_parameters()] == ["embedding.weight"]
    assert "vocab_size=10, embed_dim=4" in repr(module)


def test_validate_false_skips_the_value_check_but_not_the_lookup():
    """Os modelos conferem os ids antes; a embedding pode pular a segunda leitura."""
    torch.manual_seed(0)
    module = TokenEmbedding(10, 4)
    ids = torch.tensor([[1, 2, 9]])
    assert torch.equal(module(ids, validate=False), module(ids))
    with pytest.raises(ValueError, match="fora do vocabulário"):
        module(torch.tensor([[10]]))
