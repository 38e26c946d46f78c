"""Testes de tpt.positional: tabela senoidal, módulos, RoPE e ALiBi."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from tpt.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    pe_rotation,
    sinusoidal_encoding,
)


def test_sinusoidal_table_matches_errata_16():
    pe = sinusoidal_encoding(5, 4, dtype=torch.float64)
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [0.8415, 0.5403, 0.0100, 1.0000],
            [0.9093, -0.4161, 0.0200, 0.9998],
            [0.1411, -0.9900, 0.0300, 0.9996],
            [-0.7568, -0.6536, 0.0400, 0.9992],
        ],
        dtype=torch.float64,
    )
    # Igual com 4 casas decimais: arredondamos e comparamos com folga de 1e-12.
    assert_close(torch.round(pe, decimals=4), expected, atol=1e-12, rtol=0)


def test_sinusoidal_formula_interleaved():
    d, theta = 12, 10000.0
    pe = sinusoidal_encoding(30, d, theta, dtype=torch.float64)
    for p in (0, 1, 7, 29):
        for i in range(d // 2):
            angle = p / theta ** (2 * i / d)
            # float64 contra math: tolerância 1e-12.
            assert abs(pe[p, 2 * i].item() - math.sin(angle)) < 1e-12
            assert abs(pe[p, 2 * i + 1].item() - math.cos(angle)) < 1e-12


def test_sinusoidal_odd_dim_raises():
    with pytest.raises(ValueError, match=r"embed_dim=5 precisa ser par"):
        sinusoidal_encoding(10, 5)


@pytest.mark.parametrize("k", [1, 3, 17])
def test_pe_shift_is_fixed_rotation(k):
    d = 16
    pe = sinusoidal_encoding(60, d, dtype=torch.float64)
    rotation = pe_rotation(k, d, dtype=torch.float64)
    for p in (0, 5, 40):
        # float64: tolerância 1e-10.
        assert_close(rotation @ pe[p], pe[p + k], atol=1e-10, rtol=1e-10)
    # R(k) é ortogonal (uma rotação): R R^T = I.
    assert_close(rotation @ rotation.T, torch.eye(d, dtype=torch.float64), atol=1e-12, rtol=0)


def test_sinusoidal_module_adds_along_sequence_axis_batch_first():
    torch.manual_seed(0)
    b, t, d = 3, 7, 8
    module = SinusoidalPositionalEncoding(d, max_len=50)
    x = torch.randn(b, t, d)
    added = module(x) - x  # (b, t, d)
    # Mesmo vetor para todos os exemplos do lote (float32: tolerância 1e-6)...
    for bi in range(1, b):
        assert_close(added[bi], added[0], atol=1e-6, rtol=0)
    # ... e vetores diferentes ao longo da sequência (o erro clássico do seq-first).
    for p in range(1, t):
        assert (added[0, p] - added[0, 0]).abs().max() > 0.1
    assert_close(added[0], module.pe[:t], atol=1e-6, rtol=0)


def test_sinusoidal_module_offset_buffer_and_gradient():
    module = SinusoidalPositionalEncoding(8, max_len=20)
    assert "pe" not in module.state_dict()  # buffer não persistente
    x = torch.zeros(2, 4, 8, requires_grad=True)
    out = module(x, offset=3)
    assert_close(out[1], module.pe[3:7], atol=0, rtol=0)
    (out * torch.arange(8.0)).sum().backward()
    # O gradiente chega à entrada inteiro (dPE/dx = identidade).
    assert_close(x.grad, torch.arange(8.0).expand(2, 4, 8), atol=0, rtol=0)
    module_64 = module.to(torch.float64)
    assert module_64.pe.dtype == torch.float64


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_positional_modules_reject_sequence_beyond_max_len(cls):
    module = cls(8, max_len=10)
    module(torch.zeros(1, 10, 8))  # cabe exatamente
    with pytest.raises(ValueError, match=r"offset \+ t = 4 \+ 7 = 11.*max_len=10"):
        module(torch.zeros(1, 7, 8), offset=4)
    with pytest.raises(ValueError, match=r"forma \(b, t, 8\).*\(7, 8\)"):
        module(torch.zeros(7, 8))


def test_learned_positional_embedding_adds_rows_and_trains():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(6, max_len=12)
    x = torch.randn(2, 5, 6)
    out = module(x, offset=2)
    assert_close(out - x, module.embedding.weight[2:7].expand(2, 5, 6), atol=1e-6, rtol=0)
    out.sum().backward()
    grad = module.embedding.weight.grad
    assert grad[2:7].abs().sum() > 0 and grad[:2].abs().sum() == 0 and grad[7:].abs().sum() == 0


def _rope_complex(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Referência independente: cada par (2i, 2i+1) como número complexo vezes e^{i p w}."""
    d = x.shape[-1]
    freqs = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions.double()[:, None] * freqs[None, :]  # (t, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def test_rope_matches_complex_rotation_and_offset():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, max_len=32)
    x = torch.randn(2, 3, 10, 8)
    out = rope(x, offset=5)
    # float32 contra referência float64: tolerância 1e-5.
    assert_close(out.double(), _rope_complex(x, torch.arange(5, 15)), atol=1e-5, rtol=1e-5)
    # A rotação preserva a norma de cada vetor.
    assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)
    # Girar o trecho final com offset = girar a sequência inteira e cortar.
    full = rope(x)
    assert_close(rope(x[:, :, 4:], offset=4), full[:, :, 4:], atol=1e-6, rtol=0)
    # apply_rope com as tabelas da posição 0 é a identidade.
    assert_close(apply_rope(x, rope.cos[:1], rope.sin[:1]), x, atol=0, rtol=0)


def test_rope_scores_depend_only_on_offset():
    torch.manual_seed(1)
    d_h = 16
    rope = RotaryEmbedding(d_h, max_len=128)
    q, k = torch.randn(d_h), torch.randn(d_h)
    for delta in (0, 1, 5, 13):
        scores = []
        for p in (delta, 20, 47, 100):  # posições absolutas diferentes, mesmo p - q = delta
            q_rot = rope(q.view(1, 1, 1, d_h), offset=p).flatten()
            k_rot = rope(k.view(1, 1, 1, d_h), offset=p - delta).flatten()
            scores.append(q_rot @ k_rot)
        scores = torch.stack(scores)
        # float32, |score| ~ 4: tolerância 1e-4.
        assert_close(scores, scores[0].expand_as(scores), atol=1e-4, rtol=1e-5)
    # E o score muda com o deslocamento (senão o teste seria trivial).
    s0 = rope(q.view(1, 1, 1, d_h)).flatten() @ rope(k.view(1, 1, 1, d_h)).flatten()
    s3 = rope(q.view(1, 1, 1, d_h), offset=3).flatten() @ rope(k.view(1, 1, 1, d_h)).flatten()
    assert (s0 - s3).abs() > 1e-3


def test_rope_rejects_odd_head_dim_and_long_sequence():
    with pytest.raises(ValueError, match=r"head_dim=7 precisa ser par"):
        RotaryEmbedding(7)
    rope = RotaryEmbedding(4, max_len=8)
    with pytest.raises(ValueError, match=r"6 \+ 3 = 9.*max_len=8"):
        rope(torch.zeros(1, 1, 3, 4), offset=6)


def test_alibi_slopes_power_of_two_and_paper_rule():
    expected_8 = torch.tensor([2.0**-k for k in range(1, 9)])
    assert_close(alibi_slopes(8), expected_8, atol=0, rtol=0)
    # H = 6: as 4 inclinações de H = 4 e depois as de índice ímpar de H = 8 (1ª e 3ª).
    expected_6 = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    assert_close(alibi_slopes(6), expected_6, atol=0, rtol=0)


def test_alibi_bias_formula_with_queries_last():
    bias = alibi_bias(2, 3, 5)
    assert bias.shape == (2, 3, 5)
    slopes = alibi_slopes(2)
    for h in range(2):
        for i in range(3):
            for j in range(5):
                want = -slopes[h].item() * abs((i + 2) - j)
                assert abs(bias[h, i, j].item() - want) < 1e-7  # float32, valores pequenos
    assert torch.all(bias[:, torch.arange(3), torch.arange(2, 5)] == 0)  # diagonal deslocada


def test_tables_are_rebuilt_in_the_model_dtype():
    """Em float64 as tabelas são exatas (refeitas em float64), não floats de 32 bits convertidos."""
    sin_module = SinusoidalPositionalEncoding(16, max_len=50).double()
    exact = sinusoidal_encoding(50, 16, dtype=torch.float64)
    assert_close(sin_module.pe, exact, atol=1e-15, rtol=0)
    rope = RotaryEmbedding(8, max_len=30).to(torch.float64)
    angles = torch.arange(30, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, 8, 2, dtype=torch.float64) / 8
    )
    assert_close(rope.cos[:, 0::2], torch.cos(angles), atol=1e-15, rtol=0)
    assert_close(rope.sin[:, 1::2], torch.sin(angles), atol=1e-15, rtol=0)
    back = rope.float()
    assert back.cos.dtype == torch.float32 and back.sin.dtype == torch.float32


def test_float64_gpt_uses_the_exact_table():
    import tpt

    torch.manual_seed(0)
    model = tpt.GPT(tpt.GPTConfig(vocab_size=11, max_len=16, embed_dim=8, num_heads=2,
                                  num_layers=1, positional="sinusoidal")).double()
    assert model.positional.pe.dtype == torch.float64
    assert_close(model.positional.pe, sinusoidal_encoding(16, 8, dtype=torch.float64),
                 atol=1e-15, rtol=0)
