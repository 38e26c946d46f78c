"""Conferências dos exercícios do notebook 06_mascaras (tpt.exercises.masks).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui, para cada exercício: o pendente, respostas certas em outros
estilos, e respostas erradas de cada classe (entrada modificada no lugar, função proibida
por apelido, argumento padrão ou partial, laço escondido num map ou numa função auxiliar,
tabela dos casos fixos ou das máscaras pequenas montada fora da função, erros típicos).
"""

from __future__ import annotations

import functools

import pytest
import torch
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
        ["check_document_mask", "check_left_padded_decoder_mask", "check_sliding_window_mask"]
    )
    for hidden in ("_window_variants", "_left_reference", "_doc_reference"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check",
    [ex.check_sliding_window_mask, ex.check_left_padded_decoder_mask, ex.check_document_mask],
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


def test_window_table_built_outside_for_the_small_sizes_fails_on_drawn_cases(capsys):
    """Uma tabela de tpt.sliding_window_mask montada fora da função (t ≤ 12, window ≤ 10)."""
    table = {(t, w): renamed_window(t, w) for t in range(1, 13) for w in range(1, 11)}
    _rejected(
        ex.check_sliding_window_mask,
        lambda t, w: table[(t, w)].clone(),
        capsys,
        "No caso sorteado",
        "semente",
    )


def test_window_drawn_sizes_come_from_a_wide_range_and_stay_cheap():
    sizes = [(t, w) for _ in range(30) for _, t, w in module._window_cases()[7:]]
    assert max(t for t, _ in sizes) > 100 and min(t for t, _ in sizes) >= 13
    assert all(1 <= w < t <= 256 for t, w in sizes)


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
# Exercício 3: sequências empacotadas
# --------------------------------------------------------------------------------------
def document_compare(doc_ids, pad_id):
    t = doc_ids.shape[1]
    other = doc_ids[:, :, None] != doc_ids[:, None, :]  # (b, t, t)
    pad = (doc_ids == pad_id)[:, None, :]  # (b, 1, t)
    return (other | tpt.causal_mask(t) | pad)[:, None]


def document_merge_masks(doc_ids, pad_id):
    """Outro estilo: tpt.merge_masks para a causal e os <pad>, e a parte dos documentos."""
    b, t = doc_ids.shape
    base = tpt.merge_masks(key_padding_mask=doc_ids == pad_id, is_causal=True, t=t)  # (b, 1, t, t)
    return base | (doc_ids.unsqueeze(-1) != doc_ids.unsqueeze(-2)).unsqueeze(1)


def document_visible(doc_ids, pad_id):
    """Outro estilo: o que é visível, invertido no fim."""
    t = doc_ids.shape[1]
    same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    past = torch.ones(t, t, dtype=torch.bool).tril()
    real_key = (doc_ids != pad_id)[:, None, None, :]
    return ~(same & past & real_key)


def document_unique(doc_ids, pad_id):
    """Outro estilo: os ids viram 0, 1, 2... (torch.unique) e a comparação usa one_hot."""
    t = doc_ids.shape[1]
    _, index = torch.unique(doc_ids, return_inverse=True)  # (b, t): ids pequenos
    onehot = torch.nn.functional.one_hot(index).float()  # (b, t, k)
    same = (onehot @ onehot.transpose(1, 2)).bool()  # (b, t, t)
    return (~same | tpt.causal_mask(t) | (doc_ids == pad_id)[:, None, :])[:, None]


@pytest.mark.parametrize(
    "answer", [document_compare, document_merge_masks, document_visible, document_unique]
)
def test_document_correct_styles_pass(answer, capsys):
    _accepted(ex.check_document_mask, answer, capsys)


def test_document_in_place_change_of_doc_ids_is_named(capsys):
    def in_place(doc_ids, pad_id):
        doc_ids[doc_ids == pad_id] = -7
        return document_compare(doc_ids, -7)

    _rejected(ex.check_document_mask, in_place, capsys, "modificou `doc_ids` no lugar")


def _document_row(doc_ids, pad_id, n):
    return document_compare(doc_ids[n : n + 1], pad_id)[0]


@pytest.mark.parametrize(
    "answer",
    [
        lambda d, p: torch.stack([_document_row(d, p, n) for n in range(d.shape[0])]),
        lambda d, p: torch.stack(list(map(functools.partial(_document_row, d, p), range(len(d))))),
    ],
    ids=["compreensao", "map-partial"],
)
def test_document_hidden_loops_are_rejected(answer, capsys):
    _rejected(ex.check_document_mask, answer, capsys, "Sem laços")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda d, p: ~document_compare(d, p), "convenção invertida"),
        (
            lambda d, p: ((d[:, :, None] != d[:, None, :]) | (d == p)[:, None, :])[:, None],
            "falta a parte causal",
        ),
        (
            lambda d, p: (tpt.causal_mask(d.shape[1])[None] | (d == p)[:, None, :])[:, None],
            "os documentos se enxergam",
        ),
        (
            lambda d, p: ((d[:, :, None] != d[:, None, :]) | tpt.causal_mask(d.shape[1]))[:, None],
            "as consultas <pad> veem os <pad> anteriores",
        ),
        (
            lambda d, p: (
                (d[:, :, None] == d[:, None, :])
                | tpt.causal_mask(d.shape[1])
                | (d == p)[:, None, :]
            )[:, None],
            "bloqueou as chaves do mesmo documento",
        ),
    ],
    ids=["invertida", "sem-causal", "sem-documentos", "pad-ve-pad", "documentos-trocados"],
)
def test_document_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_document_mask, answer, capsys, fragment)


def test_document_missing_head_axis_and_dtype_are_explained(capsys):
    _rejected(
        ex.check_document_mask,
        lambda d, p: document_compare(d, p)[:, 0],
        capsys,
        "falta o eixo das cabeças",
    )
    _rejected(
        ex.check_document_mask, lambda d, p: document_compare(d, p).int(), capsys, "torch.bool"
    )


def test_document_unknown_mistake_names_the_first_wrong_cell(capsys):
    def wrong(doc_ids, pad_id):
        mask = document_compare(doc_ids, pad_id).clone()
        mask[0, 0, 4, 3] = ~mask[0, 0, 4, 3]
        return mask

    _rejected(
        ex.check_document_mask,
        wrong,
        capsys,
        "na posição (exemplo 0, cabeça 0, consulta 4, chave 3)",
    )


def test_document_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {
        (doc_ids.numpy().tobytes(), tuple(doc_ids.shape), pad): document_compare(doc_ids, pad)
        for _, doc_ids, pad, _hint in module._doc_cases()[:6]
    }

    def lookup(doc_ids, pad_id):
        key = (doc_ids.numpy().tobytes(), tuple(doc_ids.shape), pad_id)
        b, t = doc_ids.shape
        return fixed.get(key, torch.zeros(b, 1, t, t, dtype=torch.bool))

    _rejected(ex.check_document_mask, lookup, capsys, "No caso sorteado", "semente")


def test_document_drawn_cases_have_several_documents_and_pads():
    drawn = module._doc_cases()[6:]
    assert len(drawn) == 3
    for _, doc_ids, pad_id, _hint in drawn:
        assert pad_id not in set(doc_ids[doc_ids != pad_id].tolist())


def test_document_ids_below_pad_id_and_huge_ids_are_tested(capsys):
    # F.one_hot(doc_ids - pad_id) supõe que pad_id é o menor id; com ids enormes, uma
    # tabela pelo id não cabe na memória. O enunciado diz "ids quaisquer".
    def shifted_one_hot(doc_ids, pad_id):
        onehot = torch.nn.functional.one_hot(doc_ids - pad_id)  # (b, t, k): k = 0 é o <pad>
        same = (onehot[:, :, None] * onehot[:, None, :]).sum(-1) == 0  # (b, t, t): outro doc
        return (same | tpt.causal_mask(doc_ids.shape[1]) | onehot[:, None, :, 0].bool())[:, None]

    def shifted_min(doc_ids, pad_id):  # aceita ids abaixo de pad_id; quebra com ids enormes
        onehot = torch.nn.functional.one_hot(doc_ids - doc_ids.min())  # (b, t, k)
        other = (onehot[:, :, None] * onehot[:, None, :]).sum(-1) == 0  # (b, t, t)
        pad = (doc_ids == pad_id)[:, None, :]  # (b, 1, t)
        return (other | tpt.causal_mask(doc_ids.shape[1]) | pad)[:, None]

    cases = module._doc_cases()
    assert any(bool((doc_ids < pad).any()) for _, doc_ids, pad, _ in cases[:6])
    assert any(int(doc_ids.abs().max()) >= 2**50 for _, doc_ids, _, _ in cases[:6])
    _rejected(
        ex.check_document_mask,
        shifted_one_hot,
        capsys,
        "levantou RuntimeError",
        "ids de documento menores que pad_id",
    )
    _rejected(
        ex.check_document_mask,
        shifted_min,
        capsys,
        "levantou RuntimeError",
        "ids de documento são enormes",
    )


class _EqualLiar(torch.Tensor):
    """Uma subclasse de Tensor que responde True a torch.equal."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_tensor_subclasses_are_rejected_by_type(capsys):
    def window_liar(t, window):
        return torch.zeros(t, t, dtype=torch.bool).as_subclass(_EqualLiar)

    def document_liar(doc_ids, pad_id):
        b, t = doc_ids.shape
        return torch.zeros(b, 1, t, t, dtype=torch.bool).as_subclass(_EqualLiar)

    for check, answer in [
        (ex.check_sliding_window_mask, window_liar),
        (ex.check_document_mask, document_liar),
    ]:
        _rejected(check, answer, capsys, "esperava um torch.Tensor comum", "_EqualLiar")
    # A subclasse engana mesmo torch.equal: a recusa vem do tipo, não dos valores.
    liar = torch.zeros(2, 2, dtype=torch.bool).as_subclass(_EqualLiar)
    assert torch.equal(liar, torch.ones(2, 2, dtype=torch.bool))
