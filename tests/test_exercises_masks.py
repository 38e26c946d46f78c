"""Conferências dos exercícios do notebook 06_mascaras (tpt.exercises.masks).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui, para cada exercício: o pendente, respostas certas em outros
estilos, e respostas erradas de cada classe (entrada modificada no lugar, gradiente
cortado, função proibida por apelido, argumento padrão, partial ou nome ATen, laço
escondido num map ou numa função auxiliar, tabela dos casos fixos, erros típicos).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from exercise_answers import accepted as _accepted
from exercise_answers import rejected as _rejected
from exercise_answers import stub  # noqa: E402

import tpt
import tpt.exercises.masks as module
from tpt.exercises import checks
from tpt.masks import sliding_window_mask as renamed_window

ex = checks("masks")


def test_checks_show_only_the_checks():
    assert dir(ex) == sorted(
        ["check_sliding_window_mask", "check_left_padded_decoder_mask", "check_masked_softmax"]
    )
    for hidden in ("_window_reference", "_left_reference", "_reference_masked_softmax"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check",
    [ex.check_sliding_window_mask, ex.check_left_padded_decoder_mask, ex.check_masked_softmax],
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    assert "⏳" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 1: máscara com janela deslizante
# --------------------------------------------------------------------------------------
def window_compare(t, window):
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (j > i) | (j <= i - window)


def window_triangles(t, window):
    ones = torch.ones(t, t, dtype=torch.bool)
    return ones.triu(1) | ones.tril(-window)


def window_distance(t, window):
    distance = torch.arange(t)[:, None] - torch.arange(t)[None, :]  # i - j
    return (distance < 0) | (distance >= window)


@pytest.mark.parametrize("answer", [window_compare, window_triangles, window_distance])
def test_window_correct_styles_pass(answer, capsys):
    _accepted(ex.check_sliding_window_mask, answer, capsys)


def _window_default(t, window, _mask=tpt.sliding_window_mask):
    return _mask(t, window)


@pytest.mark.parametrize(
    "answer",
    [
        lambda t, w: tpt.sliding_window_mask(t, w),
        lambda t, w: renamed_window(t, w),
        _window_default,
        functools.partial(tpt.masks.sliding_window_mask),
    ],
    ids=["direto", "apelido", "argumento-padrao", "partial"],
)
def test_window_tpt_function_is_seen_whatever_the_name(answer, capsys):
    _rejected(ex.check_sliding_window_mask, answer, capsys, "chamou tpt.sliding_window_mask")


def _window_row(t, window, i):
    j = torch.arange(t)
    return (j > i) | (j <= i - window)


@pytest.mark.parametrize(
    "answer",
    [
        lambda t, w: torch.stack([_window_row(t, w, i) for i in range(t)]),
        lambda t, w: torch.stack(list(map(functools.partial(_window_row, t, w), range(t)))),
        lambda t, w: functools.reduce(
            torch.logical_or,
            [torch.ones(t, t, dtype=torch.bool).triu(1)]
            + [torch.eye(t, dtype=torch.bool).roll(-k, 1).tril(-k) for k in range(w, t)],
        ),
    ],
    ids=["compreensao-com-auxiliar", "map-partial", "diagonais-por-laco"],
)
def test_window_hidden_loops_are_rejected(answer, capsys):
    _rejected(ex.check_sliding_window_mask, answer, capsys, "Sem laços")


def test_window_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {(t, w): window_compare(t, w) for _, t, w in module._window_cases()[:7]}
    _rejected(
        ex.check_sliding_window_mask,
        lambda t, w: fixed.get((t, w), torch.ones(t, t, dtype=torch.bool).triu(1)),
        capsys,
        "No caso sorteado",
        "semente",
    )


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda t, w: ~window_compare(t, w), "convenção invertida"),
        (
            lambda t, w: (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs() >= w,
            "simétrica",
        ),
        (lambda t, w: window_compare(t, w + 1), "uma chave a mais"),
        (lambda t, w: window_compare(t, w - 1), "uma chave a menos"),
        (lambda t, w: torch.ones(t, t, dtype=torch.bool).triu(1), "máscara causal comum"),
    ],
    ids=["invertida", "simetrica", "mais-uma", "menos-uma", "so-causal"],
)
def test_window_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_sliding_window_mask, answer, capsys, fragment)


def test_window_unknown_mistake_names_the_first_wrong_cell(capsys):
    def wrong(t, w):
        mask = window_compare(t, w).clone()
        mask[-1, 0] = ~mask[-1, 0]
        return mask

    out = _rejected(ex.check_sliding_window_mask, wrong, capsys, "na posição (consulta 5, chave 0)")
    assert "janela" not in out.split("window=3,")[1]


def test_window_int_mask_is_explained(capsys):
    _rejected(
        ex.check_sliding_window_mask, lambda t, w: window_compare(t, w).int(), capsys, "torch.bool"
    )


# --------------------------------------------------------------------------------------
# Exercício 2: máscara do decoder com <pad> à esquerda
# --------------------------------------------------------------------------------------
def left_with_causal(lengths, t):
    key_is_pad = torch.arange(t)[None, :] < (t - lengths)[:, None]
    return key_is_pad[:, None, None, :] | tpt.causal_mask(t)[None, None]


def left_flipped(lengths, t):  # a máscara da direita, espelhada
    right = torch.arange(t)[None, :] >= lengths[:, None]  # (b, t): <pad> no fim
    return right.flip(-1)[:, None, None, :] | torch.ones(t, t, dtype=torch.bool).triu(1)


@pytest.mark.parametrize("answer", [left_with_causal, left_flipped])
def test_left_correct_styles_pass(answer, capsys):
    _accepted(ex.check_left_padded_decoder_mask, answer, capsys)


@pytest.mark.parametrize(
    "answer",
    [
        lambda lengths, t: left_with_causal(lengths.sub_(0), t),
        lambda lengths, t: left_with_causal(lengths.clamp_(max=t), t),
    ],
    ids=["sub_", "clamp_"],
)
def test_left_in_place_change_of_lengths_is_named(answer, capsys):
    _rejected(ex.check_left_padded_decoder_mask, answer, capsys, "modificou `lengths` no lugar")


@pytest.mark.parametrize(
    "answer",
    [
        lambda lengths, t: torch.stack([left_with_causal(n[None], t)[0] for n in lengths]),
        lambda lengths, t: torch.cat(list(map(lambda n: left_with_causal(n[None], t), lengths))),
    ],
    ids=["compreensao", "map"],
)
def test_left_hidden_loops_are_rejected(answer, capsys):
    _rejected(ex.check_left_padded_decoder_mask, answer, capsys, "Sem laços")


def test_left_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {
        (tuple(lengths), t): left_with_causal(torch.tensor(lengths), t)
        for _, lengths, t in module._left_cases()[:5]
    }
    _rejected(
        ex.check_left_padded_decoder_mask,
        lambda lengths, t: fixed.get(
            (tuple(lengths.tolist()), t), torch.zeros(len(lengths), 1, t, t, dtype=torch.bool)
        ),
        capsys,
        "No caso sorteado",
        "semente",
    )


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda lengths, t: ~left_with_causal(lengths, t), "convenção invertida"),
        (
            lambda lengths, t: tpt.padding_mask(lengths, t)[:, None, None, :] | tpt.causal_mask(t),
            "preenchido à direita",
        ),
        (
            lambda lengths, t: tpt.causal_mask(t).expand(len(lengths), 1, t, t),
            "só a máscara causal",
        ),
        (
            lambda lengths, t: (torch.arange(t)[None, :] < (t - lengths)[:, None])[
                :, None, None, :
            ].expand(-1, 1, t, t),
            "só a máscara de preenchimento",
        ),
        (lambda lengths, t: left_with_causal(lengths, t)[:, 0], "falta o eixo das cabeças"),
    ],
    ids=["invertida", "direita", "so-causal", "so-preenchimento", "sem-eixo-das-cabecas"],
)
def test_left_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_left_padded_decoder_mask, answer, capsys, fragment)


def test_left_errors_are_explained(capsys):
    _rejected(
        ex.check_left_padded_decoder_mask,
        lambda lengths, t: lengths.view(t, t),
        capsys,
        "levantou RuntimeError",
        "t - lengths",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: softmax com máscara, sem NaN
# --------------------------------------------------------------------------------------
def softmax_fill(scores, mask):
    masked = scores.masked_fill(mask, float("-inf"))
    empty = torch.isneginf(masked).all(-1, keepdim=True)
    return torch.softmax(masked.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)


def softmax_by_hand(scores, mask):  # exp à mão, com o máximo de cada linha
    masked = scores.masked_fill(mask, float("-inf"))
    top = masked.amax(-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    e = torch.exp(masked - top)
    total = e.sum(-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def softmax_with_where(scores, mask):
    visible = ~mask & ~torch.isneginf(scores)
    any_visible = visible.any(-1, keepdim=True)
    safe = torch.where(visible, scores, torch.zeros_like(scores))
    safe = torch.where(visible, safe, torch.full_like(scores, float("-inf")))
    safe = torch.where(any_visible, safe, torch.zeros_like(safe))
    return torch.where(any_visible, torch.softmax(safe, -1), torch.zeros_like(safe))


@pytest.mark.parametrize("answer", [softmax_fill, softmax_by_hand, softmax_with_where])
def test_softmax_correct_styles_pass(answer, capsys):
    _accepted(ex.check_masked_softmax, answer, capsys)


def test_softmax_naive_gives_nan_in_the_forward(capsys):
    _rejected(
        ex.check_masked_softmax,
        lambda s, m: torch.softmax(s.masked_fill(m, float("-inf")), -1),
        capsys,
        "há NaN nos pesos (na ida), exatamente nas linhas sem nenhuma chave visível",
    )


def test_softmax_fixing_only_the_forward_is_rejected_in_the_backward(capsys):
    _rejected(
        ex.check_masked_softmax,
        lambda s, m: torch.softmax(s.masked_fill(m, float("-inf")), -1).nan_to_num(0.0),
        capsys,
        "o gradiente em relação às pontuações tem NaN (na volta)",
    )


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda s, m: torch.softmax(s.masked_fill(m, -1e9), -1), "masked_fill(mask, -1e9)"),
        (lambda s, m: torch.softmax(s.masked_fill(m, 0.0), -1), "0 não bloqueia nada"),
        (lambda s, m: softmax_fill(s, ~m), "convenção invertida"),
    ],
    ids=["-1e9", "zero", "invertida"],
)
def test_softmax_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_masked_softmax, answer, capsys, fragment)


def test_softmax_in_place_change_of_scores_is_named(capsys):
    def in_place(scores, mask):
        scores.masked_fill_(mask, float("-inf"))
        return softmax_fill(scores, mask)

    _rejected(ex.check_masked_softmax, in_place, capsys, "modificou `scores` no lugar")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda s, m: softmax_fill(s.detach(), m), "não tem gradiente"),
        (torch.no_grad()(softmax_fill), "não tem gradiente"),
        (
            lambda s, m: (lambda e: e / e.sum(-1, keepdim=True).detach().clamp(min=1e-30))(
                torch.exp(s.masked_fill(m, float("-inf")) - 3.0)
            ),
            "o gradiente em relação a `scores` difere",
        ),
    ],
    ids=["detach", "no_grad", "normalizador-sem-gradiente"],
)
def test_softmax_wrong_gradients_are_rejected(answer, fragment, capsys):
    _rejected(ex.check_masked_softmax, answer, capsys, fragment)


def _sdpa_default(s, m, _attend=F.scaled_dot_product_attention):
    _attend(s[..., None], s[..., None], s[..., None])
    return softmax_fill(s, m)


def _tpt_default(s, m, _attend=tpt.scaled_dot_product_attention):
    _attend(s[..., None], s[..., None], s[..., None])
    return softmax_fill(s, m)


HIDDEN_SDPA = functools.partial(F.scaled_dot_product_attention, dropout_p=0.0)


@pytest.mark.parametrize(
    "answer",
    [
        _sdpa_default,
        lambda s, m: (
            HIDDEN_SDPA(s[..., None], s[..., None], s[..., None])[..., 0] * 0 + softmax_fill(s, m)
        ),
        lambda s, m: (
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                *(torch.zeros(1, 1, 2, 4),) * 3
            )[0].sum()
            * 0
            + softmax_fill(s, m)
        ),
        _tpt_default,
        lambda s, m: (
            tpt.MultiHeadAttention(1, 1)(torch.zeros(1, 2, 1))[0].sum() * 0 + softmax_fill(s, m)
        ),
    ],
    ids=["F.sdpa-argumento-padrao", "F.sdpa-partial", "aten", "tpt-argumento-padrao", "tpt-MHA"],
)
def test_softmax_ready_attention_is_seen_whatever_the_name(answer, capsys):
    _rejected(ex.check_masked_softmax, answer, capsys, "chamou a atenção pronta")


def test_softmax_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = [(s, m) for _, s, m in module._softmax_cases()[:5]]

    def lookup(scores, mask):
        for s, m in fixed:
            if s.shape == scores.shape and m.shape == mask.shape and torch.equal(s, scores):
                return softmax_fill(scores, mask)
        return torch.softmax(scores, -1)

    _rejected(ex.check_masked_softmax, lookup, capsys, "No caso sorteado", "semente")
