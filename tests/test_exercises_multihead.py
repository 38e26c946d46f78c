"""Conferências dos exercícios do notebook 04_atencao_multicabeca (tpt.exercises.multihead).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as roda
pelas conferências). Aqui: respostas certas em outros estilos (aceitas) e as erradas
(recusadas, com a mensagem certa): entrada modificada no lugar, o próprio módulo
devolvido, memória dividida com o original, parâmetros congelados, um ``forward`` trocado
que esconde parâmetros errados, tabela dos casos fixos e os erros típicos de cada
exercício.
"""

from __future__ import annotations

import copy

import pytest
import torch
from exercise_answers import accepted, rejected, stub
from torch import nn

import tpt
from tpt.exercises import checks
from tpt.exercises import multihead as module

ex = checks("multihead")


def _run(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


def test_checks_show_only_the_checks():
    assert sorted(dir(ex)) == sorted(
        ["check_permute_heads", "check_gqa_to_mha", "check_attention_flops"]
    )
    for hidden in ("_permuted", "_expanded", "_measured_flops", "_module"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", [ex.check_permute_heads, ex.check_gqa_to_mha, ex.check_attention_flops]
)
def test_stub_is_pending(check, capsys):
    result, out = _run(check, stub, capsys)
    assert result is False and "⏳" in out and "ainda não resolvido" in out


# ======================================================================================
# Exercício 1: as cabeças em outra ordem
# ======================================================================================
def permute_views(mha, order):
    """A resposta com view: blocos (3, h, d_h, d) e colunas (d, h, d_h)."""
    d, h, d_h = mha.embed_dim, mha.num_heads, mha.head_dim
    new = copy.deepcopy(mha)
    with torch.no_grad():
        new.qkv_proj.weight.copy_(
            mha.qkv_proj.weight.view(3, h, d_h, d)[:, order].reshape(3 * d, d)
        )
        new.out_proj.weight.copy_(mha.out_proj.weight.view(d, h, d_h)[:, order].reshape(d, d))
        if mha.qkv_proj.bias is not None:
            new.qkv_proj.bias.copy_(mha.qkv_proj.bias.view(3, h, d_h)[:, order].reshape(3 * d))
    return new


def permute_indices(mha, order):
    """Outro estilo: índices de linhas e colunas, parâmetros novos num módulo recém-criado."""
    d, d_h = mha.embed_dim, mha.head_dim
    heads = (torch.tensor(order)[:, None] * d_h + torch.arange(d_h)).flatten()  # (d,)
    rows = torch.cat([heads, d + heads, 2 * d + heads])  # (3d,)
    bias = mha.qkv_proj.bias is not None
    new = tpt.MultiHeadAttention(d, mha.num_heads, bias=bias)
    new.qkv_proj.weight = nn.Parameter(mha.qkv_proj.weight.detach()[rows])
    new.out_proj.weight = nn.Parameter(mha.out_proj.weight.detach()[:, heads])
    if bias:
        new.qkv_proj.bias = nn.Parameter(mha.qkv_proj.bias.detach()[rows])
        new.out_proj.bias = nn.Parameter(mha.out_proj.bias.detach().clone())
    return new


def permute_loop(mha, order):
    """Outro estilo: um laço sobre as cabeças, fatia a fatia (permitido: o enunciado não proíbe)."""
    d, d_h = mha.embed_dim, mha.head_dim
    new = copy.deepcopy(mha)
    with torch.no_grad():
        for i, j in enumerate(order):
            new_rows, old_rows = slice(i * d_h, (i + 1) * d_h), slice(j * d_h, (j + 1) * d_h)
            for block in range(3):
                start = block * d
                new.qkv_proj.weight[start:][new_rows] = mha.qkv_proj.weight[start:][old_rows]
                if mha.qkv_proj.bias is not None:
                    new.qkv_proj.bias[start:][new_rows] = mha.qkv_proj.bias[start:][old_rows]
            new.out_proj.weight[:, new_rows] = mha.out_proj.weight[:, old_rows]
    return new


@pytest.mark.parametrize("answer", [permute_views, permute_indices, permute_loop])
def test_permute_correct_styles_are_accepted(answer, capsys):
    accepted(ex.check_permute_heads, answer, capsys)


def test_permute_in_place_change_of_the_module_is_named(capsys):
    def in_place(mha, order):
        new = permute_views(mha, order)
        with torch.no_grad():
            mha.out_proj.weight.copy_(new.out_proj.weight)
        return new

    rejected(ex.check_permute_heads, in_place, capsys, "modificou `mha` no lugar")


def test_permute_in_place_change_of_order_is_named(capsys):
    def sorts(mha, order):
        new = permute_views(mha, order)
        order.sort()
        return new

    rejected(ex.check_permute_heads, sorts, capsys, "modificou `order` no lugar")


def test_permute_returning_the_same_module_is_rejected(capsys):
    def same(mha, order):
        return mha

    rejected(ex.check_permute_heads, same, capsys, "devolveu o próprio módulo")


@pytest.mark.parametrize(
    ("share", "name"),
    [
        (lambda new, mha: setattr(new.out_proj, "bias", mha.out_proj.bias), "out_proj.bias"),
        (
            lambda new, mha: setattr(new.out_proj, "bias", nn.Parameter(mha.out_proj.bias.data)),
            "out_proj.bias",
        ),
    ],
    ids=["mesmo-parametro", "parameter-sobre-os-mesmos-dados"],
)
def test_permute_shared_memory_is_rejected(share, name, capsys):
    def sharing(mha, order):
        new = permute_views(mha, order)
        share(new, mha)
        return new

    rejected(ex.check_permute_heads, sharing, capsys, "mesma memória do original", name)


def test_permute_frozen_parameters_are_rejected(capsys):
    def frozen(mha, order):
        return permute_views(mha, order).requires_grad_(False)

    rejected(ex.check_permute_heads, frozen, capsys, "requires_grad=False")


def test_permute_forward_swapped_for_the_original_does_not_pass(capsys):
    """Só os parâmetros contam: um forward que chama o original não esconde o erro."""

    def hijack(mha, order):
        new = copy.deepcopy(mha)  # os parâmetros ficam na ordem antiga

        def forward(query, key=None, value=None, need_weights=False, **kwargs):
            out, weights = mha(query, key, value, need_weights=True, **kwargs)
            return out, weights[:, order]

        new.forward = forward
        return new

    rejected(ex.check_permute_heads, hijack, capsys, "mapa de pesos de cada cabeça")


def test_permute_wrong_kind_of_result_is_explained(capsys):
    rejected(
        ex.check_permute_heads,
        lambda mha, order: nn.MultiheadAttention(mha.embed_dim, mha.num_heads),
        capsys,
        "esperava um tpt.MultiHeadAttention",
    )
    rejected(
        ex.check_permute_heads,
        lambda mha, order: tpt.MultiHeadAttention(mha.embed_dim, 1),
        capsys,
        "num_heads=1",
    )


def _permute_wrong(
    blocks="qkv", out_columns=True, out_rows=False, interleaved=False, inverse=False
):
    def answer(mha, order):
        if inverse:
            order = torch.tensor(order).argsort().tolist()
        d, h, d_h = mha.embed_dim, mha.num_heads, mha.head_dim
        new = copy.deepcopy(mha)
        with torch.no_grad():
            w = mha.qkv_proj.weight
            if interleaved:
                new.qkv_proj.weight.copy_(w.view(h, 3 * d_h, d)[order].reshape(3 * d, d))
            else:
                parts = w.view(3, h, d_h, d).clone()
                for n, block in enumerate("qkv"):
                    if block in blocks:
                        parts[n] = parts[n][order]
                new.qkv_proj.weight.copy_(parts.reshape(3 * d, d))
            if mha.qkv_proj.bias is not None:
                bias = mha.qkv_proj.bias.view(3, h, d_h).clone()
                for n, block in enumerate("qkv"):
                    if block in blocks or interleaved:
                        bias[n] = bias[n][order]
                new.qkv_proj.bias.copy_(bias.reshape(3 * d))
            if out_columns:
                new.out_proj.weight.copy_(
                    mha.out_proj.weight.view(d, h, d_h)[:, order].reshape(d, d)
                )
            if out_rows:
                new.out_proj.weight.copy_(mha.out_proj.weight.view(h, d_h, d)[order].reshape(d, d))
        return new

    return answer


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_permute_wrong(inverse=True), "permutação inversa"),
        (_permute_wrong(blocks="q"), "só as linhas de W^Q"),
        (_permute_wrong(blocks="qk"), "as linhas de W^V ficaram no lugar"),
        (_permute_wrong(out_columns=False), "W^O ficou como estava"),
        (_permute_wrong(out_columns=False, out_rows=True), "moveu as linhas"),
    ],
    ids=["inversa", "so-q", "sem-v", "sem-wo", "linhas-de-wo"],
)
def test_permute_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    rejected(ex.check_permute_heads, answer, capsys, fragment)


def test_permute_interleaved_layout_is_rejected(capsys):
    """Ler qkv_proj como [q k v | q k v ...] erra; o diagnóstico só sai quando é o único."""
    out = rejected(ex.check_permute_heads, _permute_wrong(interleaved=True), capsys)
    assert "[W^Q | W^K | W^V]" in out or "difere do esperado" in out


def test_permute_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {(d, h, tuple(order)) for d, h, _, order in module._PERMUTE_CASES}

    def lookup(mha, order):
        if (mha.embed_dim, mha.num_heads, tuple(order)) in fixed:
            return permute_views(mha, order)
        return copy.deepcopy(mha)

    rejected(ex.check_permute_heads, lookup, capsys, "caso sorteado (semente")


# ======================================================================================
# Exercício 2: de GQA para MHA
# ======================================================================================
def gqa_unflatten(mha):
    d, h, h_kv, d_h = mha.embed_dim, mha.num_heads, mha.num_kv_heads, mha.head_dim
    kv, group = mha.kv_dim, h // h_kv
    bias = mha.qkv_proj.bias is not None
    new = tpt.MultiHeadAttention(d, h, bias=bias)

    def grow(p):
        q, k, v = p.split([d, kv, kv])
        k = k.unflatten(0, (h_kv, d_h)).repeat_interleave(group, 0).flatten(0, 1)
        v = v.unflatten(0, (h_kv, d_h)).repeat_interleave(group, 0).flatten(0, 1)
        return torch.cat([q, k, v])

    with torch.no_grad():
        new.qkv_proj.weight.copy_(grow(mha.qkv_proj.weight))
        new.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            new.qkv_proj.bias.copy_(grow(mha.qkv_proj.bias))
            new.out_proj.bias.copy_(mha.out_proj.bias)
    return new


def gqa_index(mha):
    """Outro estilo: a linha r do bloco novo é a linha (r // d_h // grupo)·d_h + r % d_h."""
    d, h, h_kv, d_h = mha.embed_dim, mha.num_heads, mha.num_kv_heads, mha.head_dim
    r = torch.arange(d)
    source = (r // d_h // (h // h_kv)) * d_h + r % d_h  # (d,): de qual linha do bloco K/V
    rows = torch.cat([r, d + source, d + mha.kv_dim + source])
    new = copy.deepcopy(mha)
    new.num_kv_heads, new.kv_dim = h, d
    new.qkv_proj = nn.Linear(d, 3 * d, bias=mha.qkv_proj.bias is not None)
    with torch.no_grad():
        new.qkv_proj.weight.copy_(mha.qkv_proj.weight[rows])
        if mha.qkv_proj.bias is not None:
            new.qkv_proj.bias.copy_(mha.qkv_proj.bias[rows])
    return new


@pytest.mark.parametrize("answer", [gqa_unflatten, gqa_index])
def test_gqa_correct_styles_are_accepted(answer, capsys):
    accepted(ex.check_gqa_to_mha, answer, capsys)


def test_gqa_in_place_change_of_the_module_is_named(capsys):
    def in_place(mha):
        new = gqa_unflatten(mha)
        with torch.no_grad():
            mha.qkv_proj.bias.zero_()
        return new

    rejected(ex.check_gqa_to_mha, in_place, capsys, "modificou `mha` no lugar")


def test_gqa_shared_out_proj_is_rejected(capsys):
    def shared(mha):
        new = gqa_unflatten(mha)
        new.out_proj = mha.out_proj
        return new

    rejected(ex.check_gqa_to_mha, shared, capsys, "mesma memória do original", "out_proj.weight")


def test_gqa_module_still_with_gqa_is_rejected(capsys):
    rejected(ex.check_gqa_to_mha, copy.deepcopy, capsys, "num_kv_heads=")


def _gqa_wrong(how):
    def answer(mha):
        d, h, h_kv, d_h = mha.embed_dim, mha.num_heads, mha.num_kv_heads, mha.head_dim
        kv, group = mha.kv_dim, h // h_kv
        new = tpt.MultiHeadAttention(d, h, bias=mha.qkv_proj.bias is not None)

        def grow(p):
            q, k, v = p.split([d, kv, kv])
            if how == "swapped":
                k, v = v, k
            if how == "tiled":
                k = k.repeat(group, *[1] * (k.dim() - 1))
                v = v.repeat(group, *[1] * (v.dim() - 1))
            elif how == "rows":
                k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
            else:
                k = k.unflatten(0, (h_kv, d_h)).repeat_interleave(group, 0).flatten(0, 1)
                v = v.unflatten(0, (h_kv, d_h)).repeat_interleave(group, 0).flatten(0, 1)
            return torch.cat([q, k, v])

        with torch.no_grad():
            new.qkv_proj.weight.copy_(grow(mha.qkv_proj.weight))
            if how != "no-out-proj":
                new.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.qkv_proj.bias is not None:
                new.qkv_proj.bias.copy_(grow(mha.qkv_proj.bias))
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new

    return answer


@pytest.mark.parametrize(
    ("how", "fragment"),
    [
        ("tiled", "se intercalam"),
        ("rows", "cada linha de W^K e W^V foi repetida"),
        ("swapped", "blocos de K e V estão trocados"),
        ("no-out-proj", "difere do esperado"),
    ],
)
def test_gqa_typical_mistakes_are_diagnosed(how, fragment, capsys):
    rejected(ex.check_gqa_to_mha, _gqa_wrong(how), capsys, fragment)


def test_gqa_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    fixed = {(d, h, h_kv) for d, h, h_kv, _ in module._GQA_CASES}

    def lookup(mha):
        if (mha.embed_dim, mha.num_heads, mha.num_kv_heads) in fixed:
            return gqa_unflatten(mha)
        return tpt.MultiHeadAttention(
            mha.embed_dim, mha.num_heads, bias=mha.qkv_proj.bias is not None
        )

    rejected(ex.check_gqa_to_mha, lookup, capsys, "caso sorteado (semente")


# ======================================================================================
# Exercício 3: FLOPs como fórmula
# ======================================================================================
def flops(batch_size, t, s, embed_dim, num_heads, num_kv_heads):
    kv_dim = num_kv_heads * (embed_dim // num_heads)
    projections = 2 * batch_size * t * embed_dim * embed_dim  # Q
    projections += 2 * 2 * batch_size * s * embed_dim * kv_dim  # K e V
    projections += 2 * batch_size * t * embed_dim * embed_dim  # W^O
    return projections + 4 * batch_size * t * s * embed_dim


def flops_per_head(b, t, s, d, h, h_kv):
    """Outro estilo: por cabeça, com o resultado em numpy.int64."""
    import numpy as np

    d_h = d // h
    per_head = 2 * b * t * s * d_h * 2
    return np.int64(4 * b * t * d * d + 4 * b * s * d * h_kv * d_h + h * per_head)


@pytest.mark.parametrize("answer", [flops, flops_per_head])
def test_flops_correct_styles_are_accepted(answer, capsys):
    result, out = _run(ex.check_attention_flops, answer, capsys)
    assert result is True, out


def test_flops_measured_by_building_the_module_is_rejected(capsys):
    from torch.utils.flop_counter import FlopCounterMode

    def measured(b, t, s, d, h, h_kv):
        with torch.device("meta"):
            mha = tpt.MultiHeadAttention(d, h, h_kv)
            q, kv = torch.empty(b, t, d), torch.empty(b, s, d)
        with FlopCounterMode(display=False) as counter:
            mha(q, kv, need_weights=True)
        return counter.get_total_flops()

    result, out = _run(ex.check_attention_flops, measured, capsys)
    assert result is False and "fórmula com inteiros do Python" in out


def test_flops_with_a_tensor_is_rejected(capsys):
    def with_tensor(b, t, s, d, h, h_kv):
        return int(torch.tensor(flops(b, t, s, d, h, h_kv)))

    result, out = _run(ex.check_attention_flops, with_tensor, capsys)
    assert result is False and "operações do PyTorch" in out


def test_flops_table_of_the_fixed_cases_is_rejected_on_a_drawn_case(capsys):
    table = {case: flops(*case) for case in module._FLOPS_CASES}
    result, out = _run(ex.check_attention_flops, lambda *case: table.get(case, 0), capsys)
    assert result is False and "caso sorteado (semente" in out


def test_flops_float_is_explained(capsys):
    result, out = _run(ex.check_attention_flops, lambda *c: flops(*c) / 1, capsys)
    assert result is False and "use //" in out


@pytest.mark.parametrize(
    ("wrong", "diagnosis"),
    [
        (lambda b, t, s, d, h, k: 8 * b * t * d * d + 4 * b * t * s * d, "fórmula da seção 9"),
        (
            lambda b, t, s, d, h, k: (
                flops(b, t, t, d, h, k) - 4 * b * t * t * d + 4 * b * t * s * d
            ),
            "usaram t",
        ),
        (
            lambda b, t, s, d, h, k: (
                flops(b, t, s, d, h, k) - 4 * b * t * s * d + 4 * b * t * t * d
            ),
            "t²",
        ),
        (lambda b, t, s, d, h, k: flops(b, t, s, d, h, h), "GQA foi ignorado"),
        (lambda b, t, s, d, h, k: flops(b, t, s, d, h, k) // 2, "contou 1 FLOP"),
        (lambda b, t, s, d, h, k: flops(b, t, s, d, h, k) - 2 * b * t * d * d, "W^O"),
        (lambda b, t, s, d, h, k: flops(b, t, s, d, h, k) - 4 * b * t * s * d, "falta a atenção"),
    ],
    ids=["secao-9", "kv-com-t", "t-ao-quadrado", "sem-gqa", "meio", "sem-wo", "sem-atencao"],
)
def test_flops_typical_mistakes_are_diagnosed(wrong, diagnosis, capsys):
    result, out = _run(ex.check_attention_flops, wrong, capsys)
    assert result is False and diagnosis in out, out


def test_flops_other_mistakes_show_only_the_numbers(capsys):
    result, out = _run(ex.check_attention_flops, lambda *c: flops(*c) + 1, capsys)
    assert (
        result is False
        and "esperava" in out
        and "recebi" in out
        and ":" not in out.split("recebi")[-1]
    )
