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
from exercise_answers import run, stub  # noqa: E402
from torch import nn

import tpt
from tpt.exercises import checks
from tpt.exercises import embeddings as module

ex = checks("embeddings")


def test_checks_expose_only_the_checks():
    assert sorted(dir(ex)) == [
        "check_cosine_matrix",
        "check_mean_embedding",
        "check_nearest_tokens",
    ]
    for hidden in ["_mean_embedding", "_cosine", "_nearest", "_mean_case", "_cosine_fixed"]:
        assert hasattr(module, hidden)
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", ["check_mean_embedding", "check_cosine_matrix", "check_nearest_tokens"]
)
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
    ] + [
        module._disagreeing_case(torch.Generator().manual_seed(10 + i), *shape)
        for i, shape in enumerate(module._MEAN_DISAGREEING)
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


# --------------------------------------------------------------------------------------
# Exercício 3: os vizinhos mais próximos
# --------------------------------------------------------------------------------------
def _cosines(weight, token_ids):
    unit = F.normalize(weight, dim=-1)
    return unit[token_ids] @ unit.T  # (n, |V|)


def nearest_by_argsort(weight, token_ids, k):
    norms = weight.norm(dim=-1)
    sims = (weight[token_ids] @ weight.T) / (norms[token_ids, None] * norms[None]).clamp_min(1e-12)
    banned = F.one_hot(token_ids, len(weight)).bool()
    banned[:, 0] = True
    return sims.masked_fill(banned, -2.0).argsort(dim=-1, descending=True)[:, :k]


def nearest_by_sort(weight, token_ids, k):
    sims = _cosines(weight, token_ids)
    own = torch.zeros_like(sims, dtype=torch.bool).scatter(1, token_ids[:, None], True)
    own[:, tpt.PAD_ID] = True
    return torch.where(own, float("-inf"), sims).sort(dim=-1, descending=True).indices[:, :k]


@pytest.mark.parametrize("answer", [nearest_by_argsort, nearest_by_sort])
def test_nearest_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_nearest_tokens, answer, capsys)
    assert ok is True, out


def _zero_pad_then(weight, token_ids, k):
    weight[tpt.PAD_ID] = 0.0
    return nearest_by_sort(weight, token_ids, k)


def _sort_ids_then(weight, token_ids, k):
    token_ids.copy_(token_ids.sort().values)
    return nearest_by_sort(weight, token_ids, k)


@pytest.mark.parametrize(
    ("answer", "name"), [(_zero_pad_then, "weight"), (_sort_ids_then, "token_ids")]
)
def test_nearest_in_place_change_of_each_input_is_named(answer, name, capsys):
    ok, out = run(ex.check_nearest_tokens, answer, capsys)
    assert ok is False and f"modificou `{name}` no lugar" in out


@pytest.mark.parametrize(
    "answer",
    [
        lambda w, t, k: torch.stack([nearest_by_sort(w, i[None], k)[0] for i in t]),
        lambda w, t, k: torch.stack(list(map(lambda i: nearest_by_sort(w, i[None], k)[0], t))),
    ],
    ids=["compreensao", "map"],
)
def test_nearest_loop_over_tokens_is_seen(answer, capsys):
    ok, out = run(ex.check_nearest_tokens, answer, capsys)
    assert ok is False and "o número cresce com n" in out


def _excluding(weight, token_ids, k, *, self_out=True, pad_out=True, value=float("-inf")):
    sims = _cosines(weight, token_ids)
    if self_out:
        sims[torch.arange(len(token_ids)), token_ids] = value
    if pad_out:
        sims[:, tpt.PAD_ID] = value
    return sims.topk(k, dim=-1).indices


def _by_dot(weight, token_ids, k):
    sims = weight[token_ids] @ weight.T
    sims[torch.arange(len(token_ids)), token_ids] = float("-inf")
    sims[:, tpt.PAD_ID] = float("-inf")
    return sims.topk(k, dim=-1).indices


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (functools.partial(_excluding, self_out=False), "vizinho de si mesmo"),
        (functools.partial(_excluding, pad_out=False), "o <pad> entrou na lista"),
        (functools.partial(_excluding, value=0.0), "0 ganha dos cossenos negativos"),
        (lambda w, t, k: _excluding(w, t, k).flip(-1), "ordem crescente"),
        (_by_dot, "produtos escalares, sem normalizar"),
    ],
    ids=["inclui-o-proprio", "inclui-o-pad", "zero-em-vez-de-inf", "crescente", "produto"],
)
def test_nearest_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_nearest_tokens, answer, capsys)
    assert ok is False and message in out


def test_nearest_float_result_is_rejected(capsys):
    ok, out = run(ex.check_nearest_tokens, lambda w, t, k: _excluding(w, t, k).float(), capsys)
    assert ok is False and "esperava um tensor de ids inteiros" in out


def test_nearest_lookup_table_of_fixed_cases_is_rejected(capsys):
    fixed = [
        module._nearest_case(torch.Generator().manual_seed(i), *shape)
        for i, shape in enumerate(module._NEAREST_FIXED)
    ] + [module._twins_case()]
    table = {tuple(t.tolist()): module._nearest(w, t, k) for w, t, k in fixed}

    def lookup(weight, token_ids, k):
        return table.get(tuple(token_ids.tolist()), torch.zeros(len(token_ids), k).long())

    ok, out = run(ex.check_nearest_tokens, lookup, capsys)
    assert ok is False and "caso sorteado, semente" in out


# --------------------------------------------------------------------------------------
# Atalhos da issue 26: cada um recusado com a causa
# --------------------------------------------------------------------------------------
def mean_by_pad_id(weight, input_ids, padding_mask):
    """Decide o <pad> pelos ids, ignorando a máscara."""
    keep = (input_ids != tpt.PAD_ID).to(weight.dtype)  # (b, t)
    total = (weight[input_ids] * keep[..., None]).sum(dim=1)
    return total / keep.sum(dim=1, keepdim=True).clamp_min(1)


def test_mean_embedding_padding_decided_by_the_ids_is_rejected(capsys):
    ok, out = run(ex.check_mean_embedding, mean_by_pad_id, capsys)
    assert ok is False and "decidida pelos ids (input_ids == PAD_ID)" in out, out
    assert "o id e a máscara discordam" in out


def test_mean_embedding_disagreeing_cases_are_fixed():
    """Os casos em que ids e máscara discordam são fixos (não dependem do sorteio)."""
    for i, shape in enumerate(module._MEAN_DISAGREEING):
        _, input_ids, padding_mask = module._disagreeing_case(
            torch.Generator().manual_seed(10 + i), *shape
        )
        assert bool((padding_mask & (input_ids != tpt.PAD_ID)).any())  # <pad> com outro id
        assert bool((~padding_mask & (input_ids == tpt.PAD_ID)).any())  # id 0 como texto


def _clamped(eps):
    def cosine(vectors):
        unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(eps)
        return unit @ unit.T

    return cosine


def cosine_plus_eps(vectors):
    unit = vectors / (vectors.norm(dim=-1, keepdim=True) + 1e-8)
    return unit @ unit.T


def cosine_fill_diagonal(vectors):
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sims = unit @ unit.T
    return sims.fill_diagonal_(1.0)


@pytest.mark.parametrize(
    ("answer", "fragments"),
    [
        (_clamped(1e-2), ["vetores curtos", "encolheu vetores que não são nulos", "clamp_min"]),
        (_clamped(1e-3), ["encolheu vetores que não são nulos"]),
        (cosine_plus_eps, ["encolheu vetores que não são nulos", "norma + ε"]),
        (cosine_fill_diagonal, ["é o vetor nulo", "fill_diagonal_(1)"]),
    ],
    ids=["clamp-1e-2", "clamp-1e-3", "norma-mais-eps", "fill-diagonal"],
)
def test_cosine_protection_that_touches_non_zero_vectors_is_named(answer, fragments, capsys):
    ok, out = run(ex.check_cosine_matrix, answer, capsys)
    assert ok is False, out
    for fragment in fragments:
        assert fragment in out, (fragment, out)


@pytest.mark.parametrize("eps", [1e-12, 1e-8, 1e-5])
def test_cosine_clamp_below_the_shortest_vector_passes(eps, capsys):
    ok, out = run(ex.check_cosine_matrix, _clamped(eps), capsys)
    assert ok is True, out


def nearest_skipping_the_first(weight, token_ids, k):
    """Supõe que o próprio token é sempre o mais parecido: pega k + 1 e pula o primeiro."""
    unit = F.normalize(weight, dim=-1)
    sims = unit[token_ids] @ unit.T
    sims[:, tpt.PAD_ID] = float("-inf")
    return sims.topk(k + 1, dim=-1).indices[:, 1:]


def test_nearest_skipping_the_first_is_rejected(capsys):
    ok, out = run(ex.check_nearest_tokens, nearest_skipping_the_first, capsys)
    assert ok is False and "traz o próprio token" in out, out
    assert "topk(k + 1)[:, 1:]" in out and "tem a mesma linha da tabela" in out
