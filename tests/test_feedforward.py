"""Testes de tpt/feedforward.py: FFN igual à do nn.TransformerEncoderLayer; SwiGLU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tpt.feedforward import FeedForward, activation_from_torch

# Tolerâncias: float32 atol=1e-5, rtol=1e-5; float64 atol=1e-10, rtol=1e-10.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def _torch_ffn(layer: nn.TransformerEncoderLayer, x: torch.Tensor) -> torch.Tensor:
    """O caminho linear1 -> ativação -> dropout -> linear2 do próprio PyTorch."""
    return layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize(
    ("d", "ff", "shape"), [(8, 32, (2, 5)), (12, 20, (3, 1)), (16, 64, (1, 7))]
)
def test_feedforward_equals_torch_layer(dtype, activation, d, ff, shape):
    torch.manual_seed(d + ff)
    layer = nn.TransformerEncoderLayer(
        d,
        2,
        dim_feedforward=ff,
        activation=activation,
        dropout=0.0,
        batch_first=True,
        dtype=dtype,
    ).eval()
    ffn = FeedForward.from_torch(layer)
    assert ffn.activation == activation and ffn.ff_dim == ff
    assert ffn.linear1.weight.dtype == dtype
    x = torch.randn(*shape, d, dtype=dtype)
    torch.testing.assert_close(ffn(x), _torch_ffn(layer, x), atol=TOL[dtype], rtol=TOL[dtype])


def test_feedforward_from_decoder_layer_and_activation_objects():
    layer = nn.TransformerDecoderLayer(
        8, 2, dim_feedforward=16, activation=nn.GELU(), batch_first=True
    )
    assert activation_from_torch(layer) == "gelu"
    ffn = FeedForward.from_torch(layer).eval()
    layer.eval()
    x = torch.randn(2, 3, 8)
    # float32: atol=1e-5, rtol=1e-5
    torch.testing.assert_close(ffn(x), _torch_ffn(layer, x), atol=1e-5, rtol=1e-5)
    relu_layer = nn.TransformerEncoderLayer(8, 2, activation=nn.ReLU(), batch_first=True)
    assert activation_from_torch(relu_layer) == "relu"
    tanh_layer = nn.TransformerEncoderLayer(8, 2, activation=nn.GELU(approximate="tanh"))
    with pytest.raises(ValueError, match="não suportada"):
        FeedForward.from_torch(tanh_layer)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_formula(dtype, bias):
    torch.manual_seed(3)
    ffn = FeedForward(10, 24, activation="swiglu", bias=bias).to(dtype)
    assert ffn.linear3.weight.shape == (24, 10)
    x = torch.randn(2, 4, 10, dtype=dtype)
    w1, w2, w3 = ffn.linear1.weight, ffn.linear2.weight, ffn.linear3.weight
    h = F.silu(x @ w1.T + (ffn.linear1.bias if bias else 0)) * (
        x @ w3.T + (ffn.linear3.bias if bias else 0)
    )
    expected = h @ w2.T + (ffn.linear2.bias if bias else 0)
    torch.testing.assert_close(ffn(x), expected, atol=TOL[dtype], rtol=TOL[dtype])


def test_relu_formula_and_default_width():
    torch.manual_seed(4)
    ffn = FeedForward(6).double()
    assert ffn.ff_dim == 24 and not hasattr(ffn, "linear3")  # d_ff = 4d no artigo
    x = torch.randn(3, 6, dtype=torch.float64)
    expected = torch.clamp(x @ ffn.linear1.weight.T + ffn.linear1.bias, min=0)
    expected = expected @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(ffn(x), expected, atol=1e-12, rtol=1e-12)  # float64: 1e-12


def test_position_wise():
    # A FFN age em cada token separadamente: mudar um token não afeta os outros.
    torch.manual_seed(5)
    ffn = FeedForward(8, activation="gelu").eval()
    x = torch.randn(1, 5, 8)
    y = ffn(x)
    x2 = x.clone()
    x2[0, 2] = torch.randn(8)
    y2 = ffn(x2)
    torch.testing.assert_close(y2[0, [0, 1, 3, 4]], y[0, [0, 1, 3, 4]], atol=0, rtol=0)
    assert not torch.allclose(y2[0, 2], y[0, 2])


def test_dropout_after_activation_in_training():
    torch.manual_seed(6)
    ffn = FeedForward(8, dropout=0.5)
    ffn.train()
    x = torch.randn(4, 10, 8)
    assert not torch.equal(ffn(x), ffn(x))  # dropout ativo no treino
    ffn.eval()
    assert torch.equal(ffn(x), ffn(x))  # e desligado na avaliação


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"activation='tanh' desconhecida.*relu, gelu, swiglu"):
        FeedForward(8, activation="tanh")
    with pytest.raises(ValueError, match="ff_dim=0"):
        FeedForward(8, 0)
    with pytest.raises(ValueError, match="dropout=1.5"):
        FeedForward(8, dropout=1.5)
    with pytest.raises(ValueError, match=r"embed_dim=8.*\(2, 3, 5\)"):
        FeedForward(8)(torch.randn(2, 3, 5))
    with pytest.raises(TypeError, match="MultiheadAttention"):
        FeedForward.from_torch(nn.MultiheadAttention(8, 2))
