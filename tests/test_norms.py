"""Testes de tpt/norms.py: LayerNorm e RMSNorm iguais às do PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tpt.norms import LayerNorm, RMSNorm, make_norm, norm_from_torch

# Tolerâncias: float32 atol=1e-5, rtol=1e-5; float64 atol=1e-10, rtol=1e-10.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
SHAPES = [(2, 5, 8), (3, 1, 16), (4, 32), (1, 2, 3, 7)]


def _randomize(module: nn.Module, seed: int) -> None:
    """Pesos aleatórios (ganho e viés longe de 1 e 0) para o teste não ser trivial."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_equals_torch(dtype, shape, bias):
    torch.manual_seed(sum(shape))
    ref = nn.LayerNorm(shape[-1], eps=1e-5, bias=bias, dtype=dtype)
    _randomize(ref, seed=len(shape))
    ours = LayerNorm.from_torch(ref)
    assert ours.weight.dtype == dtype and ours.eps == ref.eps
    assert (ours.bias is None) == (not bias)
    x = torch.randn(shape, dtype=dtype) * 3 + 1.5
    torch.testing.assert_close(ours(x), ref(x), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_explicit_path_equals_fused_path_and_torch(dtype, shape, bias):
    """A fórmula passo a passo (fused=False, a da aula) dá os números do kernel fundido."""
    torch.manual_seed(11 + sum(shape))
    ref = nn.LayerNorm(shape[-1], bias=bias, dtype=dtype)
    _randomize(ref, seed=5)
    fused = LayerNorm.from_torch(ref)
    explicit = LayerNorm.from_torch(ref)
    explicit.fused = False
    assert fused.fused and "fused=True" in repr(fused)
    x = (torch.randn(shape, dtype=dtype) * 3 + 1.5).requires_grad_()
    y_fused, y_explicit = fused(x), explicit(x)
    torch.testing.assert_close(y_explicit, y_fused, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(y_explicit, ref(x), atol=TOL[dtype], rtol=TOL[dtype])
    (g_fused,) = torch.autograd.grad(y_fused.pow(2).sum(), x)
    (g_explicit,) = torch.autograd.grad(y_explicit.pow(2).sum(), x)
    torch.testing.assert_close(g_explicit, g_fused, atol=10 * TOL[dtype], rtol=10 * TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-6, None])
def test_rmsnorm_explicit_path_equals_fused_path(dtype, eps):
    torch.manual_seed(3)
    fused, explicit = RMSNorm(8, eps=eps).to(dtype), RMSNorm(8, eps=eps, fused=False).to(dtype)
    _randomize(fused, seed=2)
    explicit.load_state_dict(fused.state_dict())
    x = torch.randn(3, 5, 8, dtype=dtype)
    torch.testing.assert_close(explicit(x), fused(x), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", [1e-6, None])
def test_rmsnorm_equals_torch(dtype, shape, eps):
    torch.manual_seed(7 + sum(shape))
    ref = nn.RMSNorm(shape[-1], eps=eps, dtype=dtype)
    _randomize(ref, seed=3)
    ours = RMSNorm.from_torch(ref)
    assert ours.eps == eps  # eps=None (finfo do dtype) copiado fielmente
    x = torch.randn(shape, dtype=dtype) * 2 - 0.5
    torch.testing.assert_close(ours(x), ref(x), atol=TOL[dtype], rtol=TOL[dtype])


def test_rmsnorm_eps_none_uses_finfo_of_input():
    # Um token nulo: a saída é 0 * rsqrt(finfo.eps), finita; com eps explícito também.
    norm = RMSNorm(4, eps=None)
    x = torch.zeros(1, 2, 4)
    assert torch.isfinite(norm(x)).all()
    # Para um token pequeno, o eps domina e o valor bate com a conta feita à mão.
    x = torch.full((1, 4), 1e-4, dtype=torch.float64)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float64).eps)
    torch.testing.assert_close(norm.double()(x), expected, atol=1e-12, rtol=1e-12)


def test_layernorm_standardizes_each_token():
    # Com gamma=1 e beta=0: média 0 e variância (enviesada) 1 em cada token.
    torch.manual_seed(0)
    x = torch.randn(3, 6, 10, dtype=torch.float64) * 5 + 2
    y = LayerNorm(10, eps=0.0).double()(x)
    torch.testing.assert_close(
        y.mean(-1), torch.zeros(3, 6, dtype=torch.float64), atol=1e-12, rtol=0
    )  # atol=1e-12
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(3, 6, dtype=torch.float64), atol=1e-12, rtol=0
    )  # atol=1e-12


@pytest.mark.parametrize("fused", [True, False])
def test_layernorm_variance_is_var_over_var_plus_eps(fused):
    # A variância 1 só vale com var >> eps: em geral, a saída tem var / (var + eps).
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(-5, 1, 7, dtype=torch.float64)  # var de 1e-10 a 100
    x = scales[:, None, None] * torch.randn(7, 4, 16, generator=gen, dtype=torch.float64)
    eps = 1e-5
    y = LayerNorm(16, eps=eps, fused=fused).double()(x)
    var_in = x.var(-1, unbiased=False)
    torch.testing.assert_close(
        y.var(-1, unbiased=False), var_in / (var_in + eps), atol=1e-12, rtol=0
    )  # atol=1e-12
    assert (y.var(-1, unbiased=False)[0] < 0.01).all()  # var ~1e-10: a saída quase some


def test_rmsnorm_unit_rms():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 12, dtype=torch.float64) * 4
    y = RMSNorm(12, eps=0.0).double()(x)
    rms = y.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-12, rtol=0)  # atol=1e-12


def test_gradients_match_torch():
    torch.manual_seed(2)
    ref = nn.LayerNorm(8)
    _randomize(ref, seed=5)
    ours = LayerNorm.from_torch(ref)
    x1 = torch.randn(4, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    ref(x1).pow(2).sum().backward()
    ours(x2).pow(2).sum().backward()
    # float32: atol=1e-4, rtol=1e-4 (gradientes acumulam mais arredondamento)
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-4)


def test_make_norm_and_norm_from_torch():
    assert isinstance(make_norm("layernorm", 8, 1e-5), LayerNorm)
    rms = make_norm("rmsnorm", 8, 1e-6)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-6
    assert isinstance(norm_from_torch(nn.LayerNorm(4)), LayerNorm)
    assert isinstance(norm_from_torch(nn.RMSNorm(4)), RMSNorm)
    with pytest.raises(ValueError, match=r"norm='batchnorm' desconhecida.*layernorm, rmsnorm"):
        make_norm("batchnorm", 8, 1e-5)
    with pytest.raises(TypeError, match="BatchNorm1d"):
        norm_from_torch(nn.BatchNorm1d(4))


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"último eixo com tamanho 8.*\(2, 3, 5\)"):
        LayerNorm(8)(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"último eixo com tamanho 4"):
        RMSNorm(4)(torch.randn(3))
    with pytest.raises(TypeError, match="normalized_shape deve ser um inteiro"):
        LayerNorm((4, 4))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dim=0 deve ser positivo"):
        RMSNorm(0)
    with pytest.raises(ValueError, match=r"normalized_shape=\(3, 4\)"):
        LayerNorm.from_torch(nn.LayerNorm((3, 4)))
    with pytest.raises(ValueError, match="elementwise_affine=False"):
        RMSNorm.from_torch(nn.RMSNorm(4, elementwise_affine=False))
    with pytest.raises(TypeError, match="esperava um nn.LayerNorm"):
        LayerNorm.from_torch(nn.RMSNorm(4))  # type: ignore[arg-type]
