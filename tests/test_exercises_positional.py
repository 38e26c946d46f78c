"""Conferências dos exercícios do notebook 05_codificacao_posicional (tpt.exercises.positional)."""

from __future__ import annotations

import math

import torch

from tpt.exercises import positional as ex

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook)
# --------------------------------------------------------------------------------------


def sinusoidal(max_len, embed_dim, theta=10000.0):
    pe = torch.zeros(max_len, embed_dim)
    for p in range(max_len):
        for i in range(embed_dim // 2):
            angle = p / theta ** (2 * i / embed_dim)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def rotation(offset, embed_dim, theta=10000.0):
    r = torch.zeros(embed_dim, embed_dim)
    for i in range(embed_dim // 2):
        b = offset / theta ** (2 * i / embed_dim)
        r[2 * i, 2 * i], r[2 * i, 2 * i + 1] = math.cos(b), math.sin(b)
        r[2 * i + 1, 2 * i], r[2 * i + 1, 2 * i + 1] = -math.sin(b), math.cos(b)
    return r


def add_positional(x, pe, offset=0):
    t = x.shape[1]
    return x + pe[offset : offset + t]


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


def _angles(max_len, embed_dim, theta, scale=2.0):
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(embed_dim // 2, dtype=torch.float64)
    return positions * theta ** (-scale * i / embed_dim)


# --------------------------------------------------------------------------------------
# Exercício 1
# --------------------------------------------------------------------------------------


def test_sinusoidal_reference_passes(capsys):
    assert ex.check_sinusoidal_encoding(sinusoidal) is True
    assert "✅" in capsys.readouterr().out


def test_sinusoidal_float64_answer_passes(capsys):
    def as_float64(max_len, embed_dim, theta=10000.0):
        return sinusoidal(max_len, embed_dim, theta).double()

    assert ex.check_sinusoidal_encoding(as_float64) is True
    assert "✅" in capsys.readouterr().out


def test_sinusoidal_stub_is_pending(capsys):
    assert ex.check_sinusoidal_encoding(stub) is False
    assert _pending(capsys.readouterr().out)


def test_sinusoidal_concatenated_layout_is_reported(capsys):
    def concatenated(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta)
        return torch.cat((torch.sin(a), torch.cos(a)), dim=-1).float()

    assert ex.check_sinusoidal_encoding(concatenated) is False
    out = capsys.readouterr().out
    assert "❌" in out and "INTERCALADOS" in out and "max_len=5, embed_dim=4" in out


def test_sinusoidal_swapped_sin_cos_is_reported(capsys):
    def swapped(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta)
        return torch.stack((torch.cos(a), torch.sin(a)), dim=-1).flatten(-2)

    assert ex.check_sinusoidal_encoding(swapped) is False
    out = capsys.readouterr().out
    assert "❌" in out and "seno e cosseno estão trocados" in out


def test_sinusoidal_wrong_exponent_is_reported(capsys):
    def exponent_i(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta, scale=1.0)
        return torch.stack((torch.sin(a), torch.cos(a)), dim=-1).flatten(-2)

    assert ex.check_sinusoidal_encoding(exponent_i) is False
    out = capsys.readouterr().out
    assert "❌" in out and "1 / theta^(2i/d)" in out and "não 1 / theta^(i/d)" in out


def test_sinusoidal_fixed_theta_is_reported(capsys):
    def fixed_theta(max_len, embed_dim, theta=10000.0):
        return sinusoidal(max_len, embed_dim, 10000.0)

    assert ex.check_sinusoidal_encoding(fixed_theta) is False
    out = capsys.readouterr().out
    assert "❌" in out and "theta=100:" in out and "valor fixo" in out


def test_sinusoidal_transposed_is_reported(capsys):
    def transposed(max_len, embed_dim, theta=10000.0):
        return sinusoidal(max_len, embed_dim, theta).T

    assert ex.check_sinusoidal_encoding(transposed) is False
    out = capsys.readouterr().out
    assert "❌" in out and "transposta" in out and "(4, 5)" in out


def test_sinusoidal_generic_error_names_the_cell(capsys):
    def off_by_one(max_len, embed_dim, theta=10000.0):  # posições começando em 1
        return sinusoidal(max_len + 1, embed_dim, theta)[1:]

    assert ex.check_sinusoidal_encoding(off_by_one) is False
    out = capsys.readouterr().out
    assert "❌" in out and "PE[0, 0] deveria ser 0.0000, mas veio 0.8415" in out


# --------------------------------------------------------------------------------------
# Exercício 2
# --------------------------------------------------------------------------------------


def test_rotation_reference_passes(capsys):
    assert ex.check_pe_rotation(rotation) is True
    assert "✅" in capsys.readouterr().out


def test_rotation_stub_is_pending(capsys):
    assert ex.check_pe_rotation(stub) is False
    assert _pending(capsys.readouterr().out)


def test_rotation_transposed_is_reported(capsys):
    def transposed(offset, embed_dim, theta=10000.0):
        return rotation(offset, embed_dim, theta).T

    assert ex.check_pe_rotation(transposed) is False
    out = capsys.readouterr().out
    assert "❌" in out and "PE(p - k)" in out and "k=1, embed_dim=4" in out


def test_rotation_same_angle_everywhere_is_reported(capsys):
    def same_angle(offset, embed_dim, theta=10000.0):
        c, s = math.cos(offset), math.sin(offset)
        block = torch.tensor([[c, s], [-s, c]])
        return torch.block_diag(*[block] * (embed_dim // 2))

    assert ex.check_pe_rotation(same_angle) is False
    out = capsys.readouterr().out
    assert "❌" in out and "mesmo ângulo k" in out


def test_rotation_generic_error_uses_the_property(capsys):
    def identity(offset, embed_dim, theta=10000.0):
        return torch.eye(embed_dim)

    assert ex.check_pe_rotation(identity) is False
    out = capsys.readouterr().out
    assert "❌" in out and "deveria dar PE(p + k)" in out and "R[0, 0]" in out


# --------------------------------------------------------------------------------------
# Exercício 3
# --------------------------------------------------------------------------------------


def test_add_positional_reference_passes(capsys):
    assert ex.check_add_positional(add_positional) is True
    assert "✅" in capsys.readouterr().out


def test_add_positional_stub_is_pending(capsys):
    assert ex.check_add_positional(stub) is False
    assert _pending(capsys.readouterr().out)


def test_add_positional_batch_index_bug_is_reported(capsys):
    def seq_first(x, pe, offset=0):  # o erro clássico: x.size(0) é o lote, não t
        return x + pe[offset : offset + x.size(0)].unsqueeze(1)

    assert ex.check_add_positional(seq_first) is False
    out = capsys.readouterr().out
    assert "❌" in out and "índice do LOTE" in out and "(2, 5, 8)" in out


def test_add_positional_ignoring_offset_is_reported(capsys):
    def no_offset(x, pe, offset=0):
        return x + pe[: x.shape[1]]

    assert ex.check_add_positional(no_offset) is False
    out = capsys.readouterr().out
    assert "❌" in out and "ignorando o offset" in out and "4..6" in out


def test_add_positional_detached_is_reported(capsys):
    def detached(x, pe, offset=0):
        with torch.no_grad():
            return x + pe[offset : offset + x.shape[1]]

    assert ex.check_add_positional(detached) is False
    out = capsys.readouterr().out
    assert "❌" in out and "não tem gradiente" in out


def test_add_positional_in_place_is_reported(capsys):
    def in_place(x, pe, offset=0):
        x = x.detach()
        x += pe[offset : offset + x.shape[1]]
        return x

    assert ex.check_add_positional(in_place) is False
    out = capsys.readouterr().out
    assert "❌" in out and "modificou x no lugar" in out
