"""Conferências dos exercícios do notebook 02_embeddings (tpt.exercises.embeddings).

A solução de referência de cada exercício vive só no notebook (e passa pela conferência
em tests/test_notebook_solutions.py). Aqui ficam soluções corretas em **outros** estilos,
que precisam ser aceitas, e as respostas erradas de cada classe da issue (entrada
modificada no lugar, gradiente cortado, laço escondido, o tensor proibido criado por
qualquer caminho, tabela dos casos fixos, erros típicos), recusadas com a explicação certa.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tpt.exercises import checks
from tpt.exercises import embeddings as module

ex = checks("embeddings")


def run(check, answer, capsys) -> tuple[bool, str]:
    ok = check(answer)
    return ok, capsys.readouterr().out


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


def test_checks_expose_only_the_checks():
    assert sorted(dir(ex)) == ["check_cosine_matrix", "check_mean_embedding"]
    for hidden in ["_mean_embedding", "_cosine", "_mean_case", "_cosine_fixed"]:
        assert hasattr(module, hidden)
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize("check", ["check_mean_embedding", "check_cosine_matrix"])
def test_stub_is_pending(check, capsys):
    ok, out = run(getattr(ex, check), stub, capsys)
    assert ok is False and "⏳" in out


# --------------------------------------------------------------------------------------
# Exercício 1: o vetor médio de cada texto
# --------------------------------------------------------------------------------------
def mean_by_indexing(weight, input_ids, padding_mask):
    keep = (~padding_mask).unsqueeze(-1).to(weight.dtype)  # (b, t, 1)
    return (weight[input_ids] * keep).sum(1) / keep.sum(1).clamp_min(1)


def mean_by_einsum(weight, input_ids, padding_mask):
    keep = (~padding_mask).to(weight.dtype)
    share = keep / keep.sum(-1, keepdim=True).clamp_min(1)  # (b, t): pesos da média
    return torch.einsum("bt,btd->bd", share, F.embedding(input_ids, weight))


def mean_by_masked_fill(weight, input_ids, padding_mask):
    vectors = F.embedding(input_ids, weight).masked_fill(padding_mask[..., None], 0.0)
    count = (~padding_mask).sum(-1, keepdim=True).clamp_min(1)
    return vectors.sum(1) / count


def mean_by_bmm(weight, input_ids, padding_mask):
    keep = (~padding_mask).to(weight.dtype)
    share = keep / keep.sum(-1, keepdim=True).clamp_min(1)
    return (share[:, None, :] @ weight[input_ids]).squeeze(1)


@pytest.mark.parametrize(
    "answer", [mean_by_indexing, mean_by_einsum, mean_by_masked_fill, mean_by_bmm]
)
def test_mean_embedding_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_mean_embedding, answer, capsys)
    assert ok is True, out


def _zero_pad_row(weight, input_ids, padding_mask):
    weight[0] = 0.0  # "corrige" a tabela de quem chamou
    return mean_by_indexing(weight, input_ids, padding_mask)


def _fill_ids(weight, input_ids, padding_mask):
    input_ids.masked_fill_(padding_mask, 0)
    return mean_by_indexing(weight, input_ids, padding_mask)


def _flip_mask(weight, input_ids, padding_mask):
    padding_mask.logical_not_()
    keep = padding_mask.unsqueeze(-1).to(weight.dtype)
    out = (weight[input_ids] * keep).sum(1) / keep.sum(1).clamp_min(1)
    padding_mask.logical_not_()  # desfaz: os valores voltam, a versão do tensor não
    return out


@pytest.mark.parametrize(
    ("answer", "name"),
    [(_zero_pad_row, "weight"), (_fill_ids, "input_ids"), (_flip_mask, "padding_mask")],
)
def test_mean_embedding_in_place_change_of_each_input_is_named(answer, name, capsys):
    ok, out = run(ex.check_mean_embedding, answer, capsys)
    assert ok is False and f"modificou `{name}` no lugar" in out


def _no_grad(weight, input_ids, padding_mask):
    with torch.no_grad():
        return mean_by_indexing(weight, input_ids, padding_mask)


@pytest.mark.parametrize(
    "answer",
    [
        _no_grad,
        lambda w, i, m: mean_by_indexing(w.detach(), i, m),
        lambda w, i, m: torch.tensor(mean_by_indexing(w, i, m).tolist(), dtype=w.dtype),
    ],
    ids=["no_grad", "detach", "tolist"],
)
def test_mean_embedding_cut_gradient_is_rejected(answer, capsys):
    ok, out = run(ex.check_mean_embedding, answer, capsys)
    assert ok is False and "o resultado não tem gradiente" in out


def _one_text(weight, ids, mask):
    return mean_by_indexing(weight, ids[None], mask[None])[0]


@pytest.mark.parametrize(
    "answer",
    [
        lambda w, i, m: torch.stack([_one_text(w, a, b) for a, b in zip(i, m, strict=True)]),
        lambda w, i, m: torch.stack(list(map(lambda a, b: _one_text(w, a, b), i, m))),
        lambda w, i, m: torch.cat(
            [mean_by_indexing(w, i[k : k + 1], m[k : k + 1]) for k in range(len(i))]
        ),
    ],
    ids=["compreensao", "map", "fatias"],
)
def test_mean_embedding_loop_over_the_batch_is_seen(answer, capsys):
    ok, out = run(ex.check_mean_embedding, answer, capsys)
    assert ok is False and "o número cresce com o lote" in out


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda w, i, m: F.embedding(i, w).mean(1), "é a média sobre as t posições"),
        (
            lambda w, i, m: F.embedding(i, w).sum(1) / (~m).sum(1, keepdim=True).clamp_min(1),
            "a linha do <pad> desta tabela não é nula",
        ),
        (
            lambda w, i, m: mean_by_indexing(w, i, ~m),
            "a máscara foi usada ao contrário",
        ),
        (
            lambda w, i, m: (F.embedding(i, w) * (~m)[..., None]).sum(1),
            "sem dividir pelo número de tokens",
        ),
        (
            lambda w, i, m: (F.embedding(i, w) * (~m)[..., None]).sum(1) / (~m).sum(1, True),
            "a divisão por 0 dá NaN",
        ),
    ],
    ids=["inclui-pad", "linha-do-pad", "mascara-invertida", "soma", "nan"],
)
def test_mean_embedding_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_mean_embedding, answer, capsys)
    assert ok is False and message in out


def test_mean_embedding_lookup_table_of_fixed_cases_is_rejected(capsys):
    fixed = [
        module._mean_case(torch.Generator().manual_seed(i), *shape)
        for i, shape in enumerate(module._MEAN_FIXED)
    ]
    table = {(tuple(i.shape), i.sum().item()): module._mean_embedding(w, i, m) for w, i, m in fixed}

    def lookup(weight, input_ids, padding_mask):
        key = (tuple(input_ids.shape), input_ids.sum().item())
        if key in table:
            return table[key].clone().requires_grad_()
        return weight[input_ids].sum(1) * 0.0

    ok, out = run(ex.check_mean_embedding, lookup, capsys)
    # A tabela cai já nos casos fixos, pelo gradiente (ela não passa pela tabela de pesos);
    # e, mesmo com o gradiente imitado, cairia nos casos sorteados.
    assert ok is False and ("o gradiente em relação a `weight`" in out or "semente" in out)


# --------------------------------------------------------------------------------------
# Exercício 2: similaridade de cossenos sem o tensor (n, n, d)
# --------------------------------------------------------------------------------------
def cosine_by_outer_norms(vectors):
    norms = vectors.norm(dim=-1, keepdim=True)  # (n, 1)
    return (vectors @ vectors.T) / (norms @ norms.T).clamp_min(1e-12)


def cosine_by_einsum(vectors):
    unit = F.normalize(vectors, dim=-1)
    return torch.einsum("id,jd->ij", unit, unit)


def cosine_by_rsqrt(vectors):
    inverse = (vectors * vectors).sum(-1, keepdim=True).clamp_min(1e-24).rsqrt()
    unit = vectors * inverse
    return unit @ unit.transpose(0, 1)


@pytest.mark.parametrize("answer", [cosine_by_outer_norms, cosine_by_einsum, cosine_by_rsqrt])
def test_cosine_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_cosine_matrix, answer, capsys)
    assert ok is True, out


def _cos_in_default(vectors, _cos=F.cosine_similarity):
    return _cos(vectors[:, None, :], vectors[None, :, :], dim=-1)


@pytest.mark.parametrize(
    "answer",
    [
        lambda v: F.cosine_similarity(v[:, None, :], v[None, :, :], dim=-1),
        _cos_in_default,
        functools.partial(
            lambda v, fn: fn(v[:, None], v[None], dim=-1), fn=torch.cosine_similarity
        ),
        lambda v: nn.CosineSimilarity(dim=-1)(v[:, None], v[None]),
        lambda v: torch.ops.aten.cosine_similarity(v[:, None], v[None], -1),
        lambda v: (F.normalize(v, dim=-1)[:, None] * F.normalize(v, dim=-1)[None]).sum(-1),
    ],
    ids=["F", "argumento-padrao", "partial", "modulo", "aten", "broadcasting"],
)
def test_cosine_the_n_n_d_tensor_is_seen_whatever_the_path(answer, capsys):
    ok, out = run(ex.check_cosine_matrix, answer, capsys)
    assert ok is False and "sua função criou um tensor (n, n, d)" in out


def test_cosine_in_place_normalization_is_named(capsys):
    def divides_in_place(vectors):
        vectors /= vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return vectors @ vectors.T

    ok, out = run(ex.check_cosine_matrix, divides_in_place, capsys)
    assert ok is False and "modificou `vectors` no lugar" in out


def test_cosine_cut_gradient_is_rejected(capsys):
    def no_grad(vectors):
        with torch.no_grad():
            return cosine_by_einsum(vectors)

    ok, out = run(ex.check_cosine_matrix, no_grad, capsys)
    assert ok is False and "o resultado não tem gradiente" in out


def _plain_division(vectors):
    unit = vectors / vectors.norm(dim=-1, keepdim=True)
    return unit @ unit.T


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda v: v @ v.T, "sem normalizar"),
        (lambda v: F.normalize(v, dim=0) @ F.normalize(v, dim=0).T, "normalizar as colunas"),
        (_plain_division, "a divisão vira 0/0"),
        (lambda v: _plain_division(v).nan_to_num(nan=1.0), "similaridade 1 com todos"),
    ],
    ids=["sem-normalizar", "colunas", "nan", "nan-vira-1"],
)
def test_cosine_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_cosine_matrix, answer, capsys)
    assert ok is False and message in out


def test_cosine_nan_hidden_by_nan_to_num_is_seen_in_the_gradient(capsys):
    """Trocar o NaN por 0 acerta a saída, mas o gradiente do vetor nulo continua NaN."""
    ok, out = run(ex.check_cosine_matrix, lambda v: _plain_division(v).nan_to_num(0.0), capsys)
    assert ok is False and "o gradiente em relação a `vectors` tem NaN" in out


def test_mean_embedding_nan_hidden_by_nan_to_num_is_seen_in_the_gradient(capsys):
    def hides(weight, input_ids, padding_mask):
        keep = (~padding_mask).to(weight.dtype)[..., None]
        return ((weight[input_ids] * keep).sum(1) / keep.sum(1)).nan_to_num(0.0)

    ok, out = run(ex.check_mean_embedding, hides, capsys)
    assert ok is False and "o gradiente em relação a `weight` tem NaN" in out


def test_cosine_lookup_table_of_fixed_cases_is_rejected(capsys):
    table = {tuple(v.shape): module._cosine(v) for v in module._cosine_fixed()}

    def lookup(vectors):
        found = table.get(tuple(vectors.shape))
        if found is not None:
            return found.to(vectors.dtype) + 0 * vectors.sum()
        return torch.eye(len(vectors), dtype=vectors.dtype) + 0 * vectors.sum()

    ok, out = run(ex.check_cosine_matrix, lookup, capsys)
    assert ok is False and ("o gradiente em relação a `vectors`" in out or "semente" in out)
