"""Conferências dos exercícios do notebook 05_codificacao_posicional (tpt.exercises.positional).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui, para cada exercício: o pendente, respostas certas em outros
estilos, e respostas erradas de cada classe (entrada modificada no lugar, gradiente
cortado, regra burlada por apelido, argumento padrão ou partial, laço escondido num map ou
numa função auxiliar, tabela dos casos fixos, erros típicos), cada uma com a sua mensagem.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from exercise_answers import accepted as _accepted
from exercise_answers import rejected as _rejected
from exercise_answers import stub  # noqa: E402

import tpt
import tpt.exercises.positional as module
from tpt.exercises import checks
from tpt.positional import pe_rotation as renamed_rotation

ex = checks("positional")


def test_checks_show_only_the_checks():
    assert dir(ex) == sorted(
        ["check_shift_positions", "check_rotation_half", "check_add_positional_left_padded"]
    )
    for hidden in ("_shift_reference", "_half_rotation", "_left_reference", "half_table"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check",
    [ex.check_shift_positions, ex.check_rotation_half, ex.check_add_positional_left_padded],
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    assert "⏳" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 1: andar k posições sem montar R(k)
# --------------------------------------------------------------------------------------
def _omega(d, theta, dtype=torch.float64):
    return theta ** (-torch.arange(0, d, 2, dtype=dtype) / d)


def shift_slices(vectors, offsets, theta=10000.0):
    b = offsets[:, None] * _omega(vectors.shape[-1], theta)
    s, c = vectors[:, 0::2], vectors[:, 1::2]
    return torch.stack((s * b.cos() + c * b.sin(), c * b.cos() - s * b.sin()), -1).flatten(1)


def shift_with_apply_rope(vectors, offsets, theta=10000.0):  # float32 e a rotação do RoPE
    d = vectors.shape[-1]
    angles = (offsets[:, None] * _omega(d, theta, torch.float32)).repeat_interleave(2, -1)
    return tpt.apply_rope(vectors, angles.cos(), -angles.sin())


def shift_with_2x2_blocks(vectors, offsets, theta=10000.0):
    n, d = vectors.shape
    b = offsets[:, None].double() * _omega(d, theta)  # (n, d/2)
    blocks = torch.stack(
        (torch.stack((b.cos(), b.sin()), -1), torch.stack((-b.sin(), b.cos()), -1)), -2
    )
    return (blocks @ vectors.view(n, d // 2, 2, 1)).view(n, d)  # (n, d/2, 2, 2) @ (n, d/2, 2, 1)


@pytest.mark.parametrize("answer", [shift_slices, shift_with_apply_rope, shift_with_2x2_blocks])
def test_shift_correct_styles_pass(answer, capsys):
    _accepted(ex.check_shift_positions, answer, capsys)


def _matrix_per_row(vectors, offsets, theta=10000.0, _rotation=tpt.pe_rotation):
    d = vectors.shape[-1]
    rotations = torch.stack([_rotation(int(k), d, theta, dtype=vectors.dtype) for k in offsets])
    return (rotations @ vectors[..., None])[..., 0]


@pytest.mark.parametrize(
    "answer",
    [
        lambda v, k, th=1e4: torch.stack(
            [
                renamed_rotation(int(o), v.shape[-1], th, dtype=v.dtype) @ x
                for x, o in zip(v, k, strict=True)
            ]
        ),
        _matrix_per_row,
        lambda v, k, th=1e4: torch.stack(
            list(
                map(
                    functools.partial(
                        lambda x, o: (
                            torch.block_diag(
                                *[
                                    torch.tensor(
                                        [
                                            [math.cos(o * w), math.sin(o * w)],
                                            [-math.sin(o * w), math.cos(o * w)],
                                        ],
                                        dtype=v.dtype,
                                    )
                                    for w in _omega(v.shape[-1], th).tolist()
                                ]
                            )
                            @ x
                        )
                    ),
                    v,
                    k.tolist(),
                )
            )
        ),
    ],
    ids=["apelido", "argumento-padrao", "partial-e-block_diag"],
)
def test_shift_building_the_matrix_is_rejected_whatever_the_name(answer, capsys):
    _rejected(ex.check_shift_positions, answer, capsys, "montou uma matriz (8, 8)")


def _pair(vectors, offsets, theta, i):
    d = vectors.shape[-1]
    b = offsets * theta ** (-2 * i / d)
    s, c = vectors[:, 2 * i], vectors[:, 2 * i + 1]
    return torch.stack((s * b.cos() + c * b.sin(), c * b.cos() - s * b.sin()), -1)


@pytest.mark.parametrize(
    "answer",
    [
        lambda v, k, th=1e4: torch.cat([_pair(v, k, th, i) for i in range(v.shape[-1] // 2)], -1),
        lambda v, k, th=1e4: torch.cat(
            list(map(lambda i: _pair(v, k, th, i), range(v.shape[-1] // 2))), -1
        ),
        lambda v, k, th=1e4: torch.stack(
            [shift_slices(x[None], o[None], th)[0] for x, o in zip(v, k, strict=True)]
        ),
    ],
    ids=["for-nos-pares", "map", "auxiliar-por-linha"],
)
def test_shift_hidden_loops_are_rejected(answer, capsys):
    _rejected(ex.check_shift_positions, answer, capsys, "Sem laços", "operações do PyTorch")


def test_shift_in_place_change_of_vectors_is_named(capsys):
    def in_place(vectors, offsets, theta=10000.0):
        out = shift_slices(vectors, offsets, theta)
        vectors.copy_(out)
        return vectors.clone()

    _rejected(ex.check_shift_positions, in_place, capsys, "modificou `vectors` no lugar")

    def offsets_in_place(vectors, offsets, theta=10000.0):
        offsets.neg_()
        offsets.neg_()
        return shift_slices(vectors, offsets, theta)

    _rejected(ex.check_shift_positions, offsets_in_place, capsys, "modificou `offsets` no lugar")


@pytest.mark.parametrize(
    "answer",
    [
        lambda v, k, th=1e4: shift_slices(v.detach(), k, th),
        lambda v, k, th=1e4: torch.tensor(shift_slices(v, k, th).tolist(), dtype=v.dtype),
        torch.no_grad()(shift_slices),
    ],
    ids=["detach", "tolist", "no_grad"],
)
def test_shift_cut_gradient_is_rejected(answer, capsys):
    _rejected(ex.check_shift_positions, answer, capsys, "não tem gradiente")


def _table_of_fixed_cases():
    found = {}
    for _, vectors, offsets, theta in module._shift_cases()[:2]:
        found[(tuple(vectors.shape), tuple(offsets.tolist()))] = module._shift_reference(
            vectors, offsets, theta
        )
    return found


def test_shift_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    table = _table_of_fixed_cases()

    def lookup(vectors, offsets, theta=10000.0):
        key = (tuple(vectors.shape), tuple(offsets.tolist()))
        if key in table:  # os casos fixos: a resposta certa, com o gradiente certo
            return shift_slices(vectors, offsets, theta)
        return vectors * 1.0

    _rejected(ex.check_shift_positions, lookup, capsys, "No caso sorteado", "semente")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda v, k, th=1e4: shift_slices(v, -k, th), "girou para o lado errado"),
        (
            lambda v, k, th=1e4: shift_slices(v, k, 1.0),  # todos os pares com ω = 1
            "todos os pares giraram o mesmo ângulo",
        ),
        (
            lambda v, k, th=1e4: shift_slices(v, k, th**0.5),  # θ^(i/d) = (√θ)^(2i/d)
            "expoente i/d",
        ),
    ],
    ids=["sentido", "mesmo-angulo", "expoente"],
)
def test_shift_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_shift_positions, answer, capsys, fragment)


def test_shift_half_layout_pairs_are_diagnosed(capsys):
    def half_pairs(vectors, offsets, theta=10000.0):
        d = vectors.shape[-1]
        b = offsets[:, None] * _omega(d, theta)
        s, c = vectors[:, : d // 2], vectors[:, d // 2 :]
        return torch.cat((s * b.cos() + c * b.sin(), c * b.cos() - s * b.sin()), -1)

    _rejected(ex.check_shift_positions, half_pairs, capsys, "layout em metades")


def test_shift_unknown_mistake_gets_facts_not_a_diagnosis(capsys):
    out = _rejected(
        ex.check_shift_positions,
        lambda v, k, th=1e4: shift_slices(v, k, th) * 1.01,
        capsys,
        "maior diferença",
    )
    assert "girou" not in out and "expoente" not in out


def test_shift_errors_are_explained(capsys):
    _rejected(
        ex.check_shift_positions,
        lambda v, k, th=1e4: v[:, 0::2] * k,
        capsys,
        "levantou RuntimeError",
        "Confira as formas",
    )


# --------------------------------------------------------------------------------------
# Exercício 2: a rotação R(k) do layout em metades
# --------------------------------------------------------------------------------------
def rotation_blocks(offset, embed_dim, theta=10000.0):
    b = offset * _omega(embed_dim, theta)
    cos, sin = torch.diag(b.cos()), torch.diag(b.sin())
    return torch.cat((torch.cat((cos, sin), 1), torch.cat((-sin, cos), 1)), 0)


def rotation_from_tpt(offset, embed_dim, theta=10000.0):  # reordena a R(k) intercalada
    order = torch.cat((torch.arange(0, embed_dim, 2), torch.arange(1, embed_dim, 2)))
    return renamed_rotation(offset, embed_dim, theta, dtype=torch.float64)[order][:, order]


def rotation_with_loops(offset, embed_dim, theta=10000.0):  # float32, elemento a elemento
    h = embed_dim // 2
    r = torch.zeros(embed_dim, embed_dim)
    for i in range(h):
        b = offset / theta ** (2 * i / embed_dim)
        r[i, i], r[i, h + i] = math.cos(b), math.sin(b)
        r[h + i, i], r[h + i, h + i] = -math.sin(b), math.cos(b)
    return r


@pytest.mark.parametrize("answer", [rotation_blocks, rotation_from_tpt, rotation_with_loops])
def test_rotation_correct_styles_pass(answer, capsys):
    _accepted(ex.check_rotation_half, answer, capsys)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (
            lambda k, d, th=1e4: renamed_rotation(k, d, th, dtype=torch.float64),
            "layout intercalado",
        ),
        (lambda k, d, th=1e4: rotation_blocks(k, d, th).T, "é a transposta, R(-k)"),
        (lambda k, d, th=1e4: rotation_blocks(k, d, 1.0), "mesmo ângulo k"),
        (lambda k, d, th=1e4: rotation_blocks(k, d, th**0.5), "expoente i/d"),
        (lambda k, d, th=1e4: rotation_blocks(k, d), "de θ = 10.000, não de θ = 100"),
    ],
    ids=["intercalada", "transposta", "mesmo-angulo", "expoente", "theta-fixo"],
)
def test_rotation_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_rotation_half, answer, capsys, fragment)


def test_rotation_abs_offset_is_told_the_sign_was_lost_not_to_check_signs(capsys):
    out = _rejected(
        ex.check_rotation_half,
        lambda k, d, th=1e4: rotation_blocks(abs(k), d, th),
        capsys,
        "com k = -2 negativo, sua matriz é a de k = 2",
    )
    assert "Refaça" not in out


def test_rotation_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {(k, d, th): rotation_blocks(k, d, th) for _, k, d, th in module._rotation_cases()[:5]}
    _rejected(
        ex.check_rotation_half,
        lambda k, d, th=1e4: fixed.get((k, d, th), torch.eye(d, dtype=torch.float64)),
        capsys,
        "No caso sorteado",
        "semente",
    )


def _with_value(matrix, value):
    matrix = matrix.clone()
    matrix[1, 2] = value
    return matrix


@pytest.mark.parametrize(
    ("value", "kind"),
    [(float("nan"), "NaN"), (float("inf"), "+∞"), (float("-inf"), "-∞")],
    ids=["nan", "mais-infinito", "menos-infinito"],
)
def test_rotation_nan_or_infinity_is_located_not_measured(value, kind, capsys):
    out = _rejected(
        ex.check_rotation_half,
        lambda k, d, th=1e4: _with_value(rotation_blocks(k, d, th), value),
        capsys,
        "1 número(s) não finito(s)",
        f"posição [1, 2] e vale {kind}",
        "entre -1 e 1",
    )
    assert "maior diferença" not in out and "e+308" not in out and "não confere:" not in out


def test_shift_and_left_padding_nan_are_located(capsys):
    _rejected(
        ex.check_shift_positions,
        lambda v, k, th=1e4: shift_slices(v, k, th) / 0 * 0,
        capsys,
        "não finito(s)",
        "vale NaN",
    )
    _rejected(
        ex.check_add_positional_left_padded,
        lambda x, pe, is_pad: left_cumsum(x, pe, is_pad) * float("inf"),
        capsys,
        "não finito(s)",
    )


def test_rotation_wrong_shape_is_reported(capsys):
    _rejected(
        ex.check_rotation_half,
        lambda k, d, th=1e4: rotation_blocks(k, d, th)[: d // 2],
        capsys,
        "esperava o resultado com forma (4, 4)",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: posições com preenchimento à esquerda
# --------------------------------------------------------------------------------------
def _positions(is_pad):
    return ((~is_pad).long().cumsum(1) - 1).clamp(min=0)


def left_cumsum(x, pe, is_pad):
    return x + pe[_positions(is_pad)]


def left_zeroing_pads(x, pe, is_pad):  # "o que vai nos <pad> não importa": zerar vale
    return torch.where(is_pad[..., None], torch.zeros_like(x), x + pe[_positions(is_pad)])


def left_with_argmax(x, pe, is_pad):  # posição = coluna - número de <pad> da linha
    t = x.shape[1]
    first_real = (~is_pad).long().argmax(dim=1, keepdim=True)  # (b, 1)
    positions = (torch.arange(t)[None, :] - first_real).clamp(min=0)
    return x + torch.nn.functional.embedding(positions, pe)


@pytest.mark.parametrize("answer", [left_cumsum, left_zeroing_pads, left_with_argmax])
def test_left_correct_styles_pass(answer, capsys):
    _accepted(ex.check_add_positional_left_padded, answer, capsys)


def _x_in_place(x, pe, is_pad):
    x += pe[_positions(is_pad)]
    return x


def _pe_in_place(x, pe, is_pad):
    pe.mul_(1.0)
    return x + pe[_positions(is_pad)]


def _mask_in_place(x, pe, is_pad):
    is_pad.logical_not_()
    positions = (is_pad.long().cumsum(1) - 1).clamp(min=0)
    is_pad.logical_not_()
    return x + pe[positions]


def _pads_zeroed_in_place(x, pe, is_pad):
    x[is_pad] = 0.0
    return x + pe[_positions(is_pad)]


@pytest.mark.parametrize(
    ("answer", "name"),
    [
        (_x_in_place, "x"),
        (_pe_in_place, "pe"),
        (_mask_in_place, "is_pad"),
        (_pads_zeroed_in_place, "x"),
    ],
    ids=["x+=", "pe.mul_", "is_pad.logical_not_", "x[is_pad]=0"],
)
def test_left_in_place_change_of_each_input_is_named(answer, name, capsys):
    _rejected(ex.check_add_positional_left_padded, answer, capsys, f"modificou `{name}` no lugar")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda x, pe, m: left_cumsum(x.detach(), pe, m), "gradiente em relação a `x`"),
        (torch.no_grad()(left_cumsum), "não tem gradiente"),
        (lambda x, pe, m: x + pe.detach()[_positions(m)], "`pe`"),
    ],
    ids=["detach-x", "no_grad", "detach-pe"],
)
def test_left_cut_gradient_is_rejected(answer, fragment, capsys):
    _rejected(ex.check_add_positional_left_padded, answer, capsys, fragment)


def _row(x, pe, is_pad, j):
    return left_cumsum(x[j : j + 1], pe, is_pad[j : j + 1])[0]


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, pe, m: torch.stack([_row(x, pe, m, j) for j in range(x.shape[0])]),
        lambda x, pe, m: torch.stack(list(map(lambda j: _row(x, pe, m, j), range(x.shape[0])))),
    ],
    ids=["compreensao-com-auxiliar", "map"],
)
def test_left_hidden_loops_are_rejected(answer, capsys):
    _rejected(ex.check_add_positional_left_padded, answer, capsys, "Sem laços")


def test_left_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {
        (len(pads), t, tuple(pads)): _positions(module._left_pad_mask(pads, t))
        for _, pads, t, _ in module._pad_cases()[:4]
    }

    def lookup(x, pe, is_pad):
        pads = tuple(is_pad.sum(1).tolist())
        positions = fixed.get((x.shape[0], x.shape[1], pads))
        return x + pe[positions if positions is not None else torch.zeros_like(is_pad).long()]

    _rejected(ex.check_add_positional_left_padded, lookup, capsys, "No caso sorteado", "semente")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda x, pe, m: x + pe[: x.shape[1]], "como se não houvesse preenchimento"),
        (lambda x, pe, m: x + pe[_positions(m) + 1], "recebeu PE(1), não PE(0)"),
        (lambda x, pe, m: x + pe[: x.shape[0]][:, None, :], "PE do índice do lote"),
        (lambda x, pe, m: x + pe[(m.long().cumsum(1) - 1).clamp(min=0)], "a partir dos <pad>"),
    ],
    ids=["ignora-preenchimento", "mais-um", "indice-do-lote", "mascara-invertida"],
)
def test_left_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_add_positional_left_padded, answer, capsys, fragment)


def test_left_float_positions_get_a_portuguese_hint(capsys):
    _rejected(
        ex.check_add_positional_left_padded,
        lambda x, pe, m: x + pe[(~m).float().cumsum(1) - 1],
        capsys,
        "levantou IndexError",
        "torch.long",
    )
