"""Conferências dos exercícios do notebook 05_codificacao_posicional (tpt.exercises.positional).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import math

import torch

import tpt
from tpt.exercises import positional as ex
from tpt.positional import pe_rotation as renamed_rotation
from tpt.positional import sinusoidal_encoding as renamed_table


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


def _angles(max_len, embed_dim, theta, scale=2.0):
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(embed_dim // 2, dtype=torch.float64)
    return positions * theta ** (-scale * i / embed_dim)


def _rejected(check, answer, capsys, *fragments):
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, (fragment, out)
    return out


def _accepted(check, answer, capsys):
    assert check(answer) is True, capsys.readouterr().out
    assert "✅" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 1: a tabela em metades, sem laços
# --------------------------------------------------------------------------------------


def test_half_table_stub_is_pending(capsys):
    assert ex.check_sinusoidal_half(stub) is False
    assert _pending(capsys.readouterr().out)


def test_half_table_alternative_styles_pass(capsys):
    def with_exp_log(max_len, embed_dim, theta=10000.0):  # float32, exp(-log(theta) 2i/d)
        frequencies = torch.exp(-math.log(theta) * torch.arange(0, embed_dim, 2) / embed_dim)
        angles = torch.outer(torch.arange(max_len).float(), frequencies)
        return torch.cat([angles.sin(), angles.cos()], dim=1)

    def with_slices(max_len, embed_dim, theta=10000.0):
        half = embed_dim // 2
        angles = torch.arange(max_len)[:, None] / theta ** (2 * torch.arange(half) / embed_dim)
        pe = torch.empty(max_len, embed_dim)
        pe[:, :half], pe[:, half:] = torch.sin(angles), torch.cos(angles)
        return pe

    _accepted(ex.check_sinusoidal_half, with_exp_log, capsys)
    _accepted(ex.check_sinusoidal_half, with_slices, capsys)


def test_half_table_loop_is_rejected(capsys):
    def didactic_loop(max_len, embed_dim, theta=10000.0):  # o laço da célula do notebook
        pe = torch.zeros(max_len, embed_dim)
        for p in range(max_len):
            for i in range(embed_dim // 2):
                angle = p / theta ** (2 * i / embed_dim)
                pe[p, i], pe[p, embed_dim // 2 + i] = math.sin(angle), math.cos(angle)
        return pe

    _rejected(ex.check_sinusoidal_half, didactic_loop, capsys, "sem laços")


def test_half_table_list_comprehension_is_rejected(capsys):
    def comprehension(max_len, embed_dim, theta=10000.0):
        angles = _angles(max_len, embed_dim, theta)
        return torch.cat([f(angles) for f in (torch.sin, torch.cos)], dim=-1)

    _rejected(ex.check_sinusoidal_half, comprehension, capsys, "sem laços", "compreensão")


def test_half_table_from_tpt_is_rejected(capsys):
    def permuted_tpt(max_len, embed_dim, theta=10000.0):
        pe = tpt.sinusoidal_encoding(max_len, embed_dim, theta)
        return torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=-1)

    def renamed(max_len, embed_dim, theta=10000.0):  # from tpt.positional import ... as ...
        pe = renamed_table(max_len, embed_dim, theta)
        return torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=-1)

    def through_getattr(max_len, embed_dim, theta=10000.0):  # escapa da leitura do código
        pe = getattr(tpt, "sinusoidal_" + "encoding")(max_len, embed_dim, theta)
        return torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=-1)

    for answer in (permuted_tpt, renamed, through_getattr):
        _rejected(ex.check_sinusoidal_half, answer, capsys, "sinusoidal_encoding")
    assert tpt.sinusoidal_encoding is renamed_table  # a proibição foi desfeita


def test_half_table_interleaved_layout_is_reported(capsys):
    def interleaved(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta)
        return torch.stack((torch.sin(a), torch.cos(a)), dim=-1).flatten(-2)

    _rejected(ex.check_sinusoidal_half, interleaved, capsys, "intercalou", "max_len=5, embed_dim=4")


def test_half_table_swapped_halves_are_reported(capsys):
    def swapped(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta)
        return torch.cat((torch.cos(a), torch.sin(a)), dim=-1)

    _rejected(ex.check_sinusoidal_half, swapped, capsys, "metades estão trocadas")


def test_half_table_wrong_exponent_is_reported(capsys):
    def exponent_i(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta, scale=1.0)
        return torch.cat((torch.sin(a), torch.cos(a)), dim=-1)

    _rejected(
        ex.check_sinusoidal_half, exponent_i, capsys, "1 / theta^(2i/d)", "não 1 / theta^(i/d)"
    )


def test_half_table_fixed_theta_is_reported(capsys):
    def fixed_theta(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, 10000.0)
        return torch.cat((torch.sin(a), torch.cos(a)), dim=-1)

    _rejected(ex.check_sinusoidal_half, fixed_theta, capsys, "theta=100:", "valor fixo")


def test_half_table_transposed_is_reported(capsys):
    def transposed(max_len, embed_dim, theta=10000.0):
        a = _angles(max_len, embed_dim, theta)
        return torch.cat((torch.sin(a), torch.cos(a)), dim=-1).T

    _rejected(ex.check_sinusoidal_half, transposed, capsys, "transposta", "(4, 5)")


def test_half_table_generic_error_names_the_cell_in_ptbr(capsys):
    def off_by_one(max_len, embed_dim, theta=10000.0):  # posições começando em 1
        a = _angles(max_len + 1, embed_dim, theta)[1:]
        return torch.cat((torch.sin(a), torch.cos(a)), dim=-1)

    _rejected(
        ex.check_sinusoidal_half, off_by_one, capsys, "PE[0, 0] deveria ser 0,0000, mas veio 0,8415"
    )


def test_half_table_shape_error_gets_a_portuguese_hint(capsys):
    def broadcast_bug(max_len, embed_dim, theta=10000.0):
        positions = torch.arange(max_len)  # (max_len,), sem o eixo novo
        angles = positions / theta ** (torch.arange(0, embed_dim, 2) / embed_dim)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)

    _rejected(ex.check_sinusoidal_half, broadcast_bug, capsys, "RuntimeError", "Confira as formas")


def test_half_table_wrong_signature_is_explained(capsys):
    def two_arguments(max_len, embed_dim):
        return torch.zeros(max_len, embed_dim)

    _rejected(ex.check_sinusoidal_half, two_arguments, capsys, "assinatura")


# --------------------------------------------------------------------------------------
# Exercício 2: R(k) do layout em metades
# --------------------------------------------------------------------------------------


def test_rotation_half_stub_is_pending(capsys):
    assert ex.check_rotation_half(stub) is False
    assert _pending(capsys.readouterr().out)


def test_rotation_half_alternative_styles_pass(capsys):
    def with_loop(offset, embed_dim, theta=10000.0):  # laços são permitidos aqui
        half = embed_dim // 2
        r = torch.zeros(embed_dim, embed_dim, dtype=torch.float64)
        for i in range(half):
            b = offset / theta ** (2 * i / embed_dim)
            r[i, i], r[i, half + i] = math.cos(b), math.sin(b)
            r[half + i, i], r[half + i, half + i] = -math.sin(b), math.cos(b)
        return r

    def permuted_own_interleaved(offset, embed_dim, theta=10000.0):  # P R P^T
        b = offset / theta ** (torch.arange(0, embed_dim, 2) / embed_dim)
        r = torch.zeros(embed_dim, embed_dim)
        r[0::2, 0::2], r[0::2, 1::2] = torch.diag(b.cos()), torch.diag(b.sin())
        r[1::2, 0::2], r[1::2, 1::2] = torch.diag(-b.sin()), torch.diag(b.cos())
        order = torch.cat((torch.arange(0, embed_dim, 2), torch.arange(1, embed_dim, 2)))
        return r[order][:, order]

    _accepted(ex.check_rotation_half, with_loop, capsys)
    _accepted(ex.check_rotation_half, permuted_own_interleaved, capsys)


def test_rotation_half_with_pe_rotation_is_rejected(capsys):
    order = lambda d: torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # noqa: E731

    def from_tpt(offset, embed_dim, theta=10000.0):
        r = tpt.pe_rotation(offset, embed_dim, theta)
        return r[order(embed_dim)][:, order(embed_dim)]

    def renamed(offset, embed_dim, theta=10000.0):
        r = renamed_rotation(offset, embed_dim, theta)
        return r[order(embed_dim)][:, order(embed_dim)]

    def through_getattr(offset, embed_dim, theta=10000.0):
        r = getattr(tpt.positional, "pe_" + "rotation")(offset, embed_dim, theta)
        return r[order(embed_dim)][:, order(embed_dim)]

    for answer in (from_tpt, renamed, through_getattr):
        _rejected(ex.check_rotation_half, answer, capsys, "pe_rotation")
    assert tpt.pe_rotation is renamed_rotation


def test_rotation_half_interleaved_matrix_is_reported(capsys):
    def interleaved(offset, embed_dim, theta=10000.0):
        b = offset / theta ** (torch.arange(0, embed_dim, 2) / embed_dim)
        blocks = [torch.tensor([[a.cos(), a.sin()], [-a.sin(), a.cos()]]) for a in b]
        return torch.block_diag(*blocks)

    _rejected(ex.check_rotation_half, interleaved, capsys, "layout intercalado", "R[i, d/2 + i]")


def test_rotation_half_transposed_is_reported(capsys):
    def transposed(offset, embed_dim, theta=10000.0):
        return ex.half_rotation(offset, embed_dim, theta).T

    _rejected(ex.check_rotation_half, transposed, capsys, "PE(p - k)", "k=1, embed_dim=4")


def test_rotation_half_same_angle_everywhere_is_reported(capsys):
    def same_angle(offset, embed_dim, theta=10000.0):
        eye = torch.eye(embed_dim // 2)
        c, s = math.cos(offset) * eye, math.sin(offset) * eye
        return torch.cat((torch.cat((c, s), 1), torch.cat((-s, c), 1)), 0)

    _rejected(ex.check_rotation_half, same_angle, capsys, "mesmo ângulo k")


def test_rotation_half_generic_error_uses_the_property(capsys):
    def identity(offset, embed_dim, theta=10000.0):
        return torch.eye(embed_dim)

    _rejected(ex.check_rotation_half, identity, capsys, "deveria dar PE(p + k)", "R[0, 0]")


# --------------------------------------------------------------------------------------
# Exercício 3: posições com preenchimento à esquerda
# --------------------------------------------------------------------------------------


def test_left_padded_stub_is_pending(capsys):
    assert ex.check_add_positional_left_padded(stub) is False
    assert _pending(capsys.readouterr().out)


def test_left_padded_alternative_styles_pass(capsys):
    def subtract_pads(x, pe, is_pad):  # posições negativas nos <pad>: não importam
        t = x.shape[1]
        positions = torch.arange(t) - is_pad.sum(dim=1, keepdim=True)  # (b, t)
        return x + pe[positions]

    def with_where(x, pe, is_pad):
        b, t, d = x.shape
        positions = torch.where(is_pad, 0, (~is_pad).cumsum(1) - 1)
        return x + pe.index_select(0, positions.flatten()).view(b, t, d)

    _accepted(ex.check_add_positional_left_padded, subtract_pads, capsys)
    _accepted(ex.check_add_positional_left_padded, with_where, capsys)


def test_left_padded_loop_is_rejected(capsys):
    def per_row(x, pe, is_pad):
        rows = []
        for j in range(x.shape[0]):
            n = int(is_pad[j].sum())
            rows.append(torch.cat((x[j, :n], x[j, n:] + pe[: x.shape[1] - n])))
        return torch.stack(rows)

    _rejected(ex.check_add_positional_left_padded, per_row, capsys, "sem laços")


def test_left_padded_ignoring_padding_is_reported(capsys):
    def ignores_padding(x, pe, is_pad):
        return x + pe[: x.shape[1]]

    _rejected(
        ex.check_add_positional_left_padded,
        ignores_padding,
        capsys,
        "como se não houvesse preenchimento",
        "[0, 2, 3]",
    )


def test_left_padded_off_by_one_is_reported(capsys):
    def off_by_one(x, pe, is_pad):
        return x + pe[(~is_pad).long().cumsum(1)]

    _rejected(ex.check_add_positional_left_padded, off_by_one, capsys, "recebeu PE(1), não PE(0)")


def test_left_padded_batch_index_bug_is_reported(capsys):
    def seq_first(x, pe, is_pad):  # o erro clássico: x.size(0) é o lote, não t
        return x + pe[: x.size(0)].unsqueeze(1)

    _rejected(ex.check_add_positional_left_padded, seq_first, capsys, "índice do lote")


def test_left_padded_inverted_mask_lists_the_positions(capsys):
    def inverted(x, pe, is_pad):  # trata True como token real
        return x + pe[(is_pad.long().cumsum(1) - 1).clamp(min=0)]

    _rejected(
        ex.check_add_positional_left_padded,
        inverted,
        capsys,
        "deveriam receber as linhas [0, 1, 2, 3, 4] de pe",
        "is_pad é True onde há <pad>",
    )


def test_left_padded_in_place_add_is_reported_in_portuguese(capsys):
    def in_place(x, pe, is_pad):  # x += pe: o erro da issue, agora com a mensagem própria
        x += pe[((~is_pad).long().cumsum(1) - 1).clamp(min=0)]
        return x

    out = _rejected(ex.check_add_positional_left_padded, in_place, capsys, "modificou x no lugar")
    assert "in-place" not in out


def test_left_padded_refused_in_place_is_reported_in_portuguese(capsys):
    def leaf_in_place(x, pe, is_pad):  # o PyTorch recusa: folha que pede gradiente
        leaf = x.detach().requires_grad_()
        leaf += pe[((~is_pad).long().cumsum(1) - 1).clamp(min=0)]
        return leaf

    _rejected(
        ex.check_add_positional_left_padded,
        leaf_in_place,
        capsys,
        "modificar um tensor no lugar",
        "return x + pe[positions]",
    )


def test_left_padded_detached_is_reported(capsys):
    def detached(x, pe, is_pad):
        with torch.no_grad():
            return x + pe[((~is_pad).long().cumsum(1) - 1).clamp(min=0)]

    _rejected(ex.check_add_positional_left_padded, detached, capsys, "não tem gradiente")


def test_left_padded_float_positions_get_a_portuguese_hint(capsys):
    def float_positions(x, pe, is_pad):
        return x + pe[(~is_pad).float().cumsum(1) - 1]

    _rejected(
        ex.check_add_positional_left_padded,
        float_positions,
        capsys,
        "IndexError",
        "precisam ser inteiras",
    )
