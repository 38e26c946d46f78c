"""Conferências dos exercícios do notebook 04_atencao_multicabeca (tpt.exercises.multihead).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as roda
pelas conferências). Aqui: respostas certas em outros estilos (aceitas) e as erradas de
cada classe da issue 22 (recusadas, com a mensagem certa): entrada modificada no lugar,
gradiente cortado, regra burlada por apelido, argumento padrão, ``partial``, nome
"interno" ou módulo do PyTorch, laço escondido num ``map`` ou numa função auxiliar,
tabela dos casos fixos, e os erros típicos de cada exercício.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import checks
from tpt.exercises import multihead as module

ex = checks("multihead")


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


def _run(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


def test_checks_show_only_the_checks():
    assert sorted(dir(ex)) == sorted(
        ["check_head_contributions", "check_gqa_forward", "check_attention_flops"]
    )
    for hidden in ("_gqa_reference", "_contributions", "_measured_flops", "_heads"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", [ex.check_head_contributions, ex.check_gqa_forward, ex.check_attention_flops]
)
def test_stub_is_pending(check, capsys):
    result, out = _run(check, stub, capsys)
    assert result is False and "⏳" in out and "ainda não resolvido" in out


def _split(x, heads, d_h):
    b, n = x.shape[:2]
    return x.view(b, n, heads, d_h).transpose(1, 2)


# ======================================================================================
# Exercício 1: a contribuição de cada cabeça
# ======================================================================================
def contributions_matmul(x, mha):
    b, t, d = x.shape
    h, d_h = mha.num_heads, mha.head_dim
    q, k, v = (_split(z, h, d_h) for z in mha.project_qkv(x))
    heads, _ = tpt.scaled_dot_product_attention(q, k, v)  # (b, h, t, d_h)
    return heads @ mha.out_proj.weight.view(d, h, d_h).permute(1, 2, 0)  # (b, h, t, d)


def contributions_from_weights(x, mha):
    """Outro estilo: pesos pedidos ao módulo, valores pelo qkv_proj e einsum."""
    b, t, d = x.shape
    h, d_h = mha.num_heads, mha.head_dim
    _, weights = mha(x, need_weights=True)  # (b, h, t, t)
    v = F.linear(
        x,
        mha.qkv_proj.weight[2 * d :],
        mha.qkv_proj.bias[2 * d :] if mha.qkv_proj.bias is not None else None,
    )
    heads = weights @ _split(v, h, d_h)  # (b, h, t, d_h)
    w_o = mha.out_proj.weight.unflatten(1, (h, d_h))  # (d, h, d_h)
    return torch.einsum("bhtk,ohk->bhto", heads, w_o)


@pytest.mark.parametrize("bias", [True, False])
def test_contributions_plus_bias_sum_to_the_module_output(bias):
    mha = module._module(12, 3, bias=bias)
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        total = module._contributions(x, mha).sum(dim=1)
        if bias:
            total = total + mha.out_proj.bias
        torch.testing.assert_close(total, mha(x)[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("answer", [contributions_matmul, contributions_from_weights])
def test_contributions_correct_styles_are_accepted(answer, capsys):
    result, out = _run(ex.check_head_contributions, answer, capsys)
    assert result is True, out


def test_contributions_in_place_change_of_x_is_named(capsys):
    def in_place(x, mha):
        out = contributions_matmul(x, mha)
        x.mul_(1.0)
        return out

    result, out = _run(ex.check_head_contributions, in_place, capsys)
    assert result is False and "modificou `x` no lugar" in out


def test_contributions_in_place_change_of_the_module_is_named(capsys):
    def in_place(x, mha):
        with torch.no_grad():
            mha.out_proj.bias.zero_()
        return contributions_matmul(x, mha)

    result, out = _run(ex.check_head_contributions, in_place, capsys)
    assert result is False and "modificou `mha` no lugar" in out


def _one_head(heads, w_o, i):
    return heads[:, i] @ w_o[i]


LOOPY_CONTRIBUTIONS = {
    "for": lambda heads, w_o: torch.stack([heads[:, i] @ w_o[i] for i in range(len(w_o))], 1),
    "map": lambda heads, w_o: torch.stack(
        list(map(lambda i: heads[:, i] @ w_o[i], range(len(w_o)))), 1
    ),
    "auxiliar": lambda heads, w_o: torch.stack(
        [_one_head(heads, w_o, i) for i in range(len(w_o))], 1
    ),
}


@pytest.mark.parametrize("name", sorted(LOOPY_CONTRIBUTIONS))
def test_contributions_loop_over_heads_is_seen_by_operation_counts(name, capsys):
    def loopy(x, mha):
        b, t, d = x.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = (_split(z, h, d_h) for z in mha.project_qkv(x))
        heads, _ = tpt.scaled_dot_product_attention(q, k, v)
        w_o = mha.out_proj.weight.view(d, h, d_h).permute(1, 2, 0)
        return LOOPY_CONTRIBUTIONS[name](heads, w_o)

    result, out = _run(ex.check_head_contributions, loopy, capsys)
    assert result is False and "cresce com h" in out


def test_contributions_table_of_the_fixed_cases_is_rejected(capsys):
    seen = []

    def remember(x, mha):
        seen.append(x.clone())
        return contributions_matmul(x, mha)

    ex.check_head_contributions(remember)
    table = {x.numpy().tobytes(): None for x in seen}
    capsys.readouterr()

    def lookup(x, mha):
        if x.numpy().tobytes() in table:
            return contributions_matmul(x, mha)
        b, t, d = x.shape
        return torch.zeros(b, mha.num_heads, t, d)

    result, out = _run(ex.check_head_contributions, lookup, capsys)
    assert result is False and "difere do esperado" in out


def test_contributions_rows_instead_of_columns_are_diagnosed(capsys):
    def rows(x, mha):
        b, t, d = x.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = (_split(z, h, d_h) for z in mha.project_qkv(x))
        heads, _ = tpt.scaled_dot_product_attention(q, k, v)
        return heads @ mha.out_proj.weight.view(h, d_h, d)

    result, out = _run(ex.check_head_contributions, rows, capsys)
    assert result is False and "usou as linhas" in out


def test_contributions_with_the_bias_in_each_head_are_diagnosed(capsys):
    result, out = _run(
        ex.check_head_contributions,
        lambda x, m: contributions_matmul(x, m) + m.out_proj.bias,
        capsys,
    )
    assert result is False and "viés de out_proj inteiro" in out


def test_contributions_with_the_bias_split_among_heads_are_diagnosed(capsys):
    def split_bias(x, mha):
        return contributions_matmul(x, mha) + mha.out_proj.bias / mha.num_heads

    result, out = _run(ex.check_head_contributions, split_bias, capsys)
    assert result is False and "repartido entre as cabeças" in out


def test_contributions_wrong_shape_is_explained(capsys):
    result, out = _run(
        ex.check_head_contributions, lambda x, m: contributions_matmul(x, m).sum(1), capsys
    )
    assert result is False and "(b, h, t, d)" in out


# ======================================================================================
# Exercício 2: GQA em lote
# ======================================================================================
def gqa_project_qkv(query, key_value, mha):
    b, t, d = query.shape
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    q, k, v = mha.project_qkv(query, key_value)
    q = _split(q, h, d_h)
    k = _split(k, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
    v = _split(v, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
    out, _ = tpt.scaled_dot_product_attention(q, k, v)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


def gqa_weight_slices(query, key_value, mha):
    """Outro estilo: fatias de qkv_proj, expand + reshape e o kernel do PyTorch."""
    b, t, d = query.shape
    s = key_value.shape[1]
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    kv = h_kv * d_h
    w, bias = mha.qkv_proj.weight, mha.qkv_proj.bias
    part = (lambda a, z: None) if bias is None else (lambda a, z: bias[a:z])
    q = _split(F.linear(query, w[:d], part(0, d)), h, d_h)
    k = _split(F.linear(key_value, w[d : d + kv], part(d, d + kv)), h_kv, d_h)
    v = _split(F.linear(key_value, w[d + kv :], part(d + kv, None)), h_kv, d_h)
    group = h // h_kv
    k = k[:, :, None].expand(b, h_kv, group, s, d_h).reshape(b, h, s, d_h)
    v = v[:, :, None].expand(b, h_kv, group, s, d_h).reshape(b, h, s, d_h)
    out = F.scaled_dot_product_attention(q, k, v)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


def gqa_enable_gqa(query, key_value, mha):
    b, t, d = query.shape
    q, k, v = mha.project_qkv(query, key_value)
    q = _split(q, mha.num_heads, mha.head_dim)
    k, v = _split(k, mha.num_kv_heads, mha.head_dim), _split(v, mha.num_kv_heads, mha.head_dim)
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("answer", [gqa_project_qkv, gqa_weight_slices, gqa_enable_gqa])
def test_gqa_correct_styles_are_accepted(answer, capsys):
    result, out = _run(ex.check_gqa_forward, answer, capsys)
    assert result is True, out


def gqa_attention_in_default(query, key_value, mha, _attend=tpt.scaled_dot_product_attention):
    """A atenção guardada num argumento padrão: a antiga contagem de chamadas via zero."""
    b, t, d = query.shape
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    q, k, v = mha.project_qkv(query, key_value)
    k = _split(k, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
    v = _split(v, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
    out = _attend(_split(q, h, d_h), k, v)[0]
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


def test_gqa_attention_through_a_default_argument_is_accepted(capsys):
    result, out = _run(ex.check_gqa_forward, gqa_attention_in_default, capsys)
    assert result is True, out


@pytest.mark.parametrize("name", ["query", "key_value"])
def test_gqa_in_place_change_of_each_input_is_named(name, capsys):
    def in_place(query, key_value, mha):
        out = gqa_project_qkv(query, key_value, mha)
        {"query": query, "key_value": key_value}[name].add_(0.0)
        return out

    result, out = _run(ex.check_gqa_forward, in_place, capsys)
    # No primeiro caso (autoatenção) key_value é o próprio query: o nome dado é `query`.
    assert result is False and "modificou `query` no lugar" in out
    only_key_value = _cross_attention_only(in_place)
    result, out = _run(ex.check_gqa_forward, only_key_value, capsys)
    assert result is False and f"modificou `{name}` no lugar" in out


def _cross_attention_only(answer):
    def wrapped(query, key_value, mha):
        if key_value is query:
            return gqa_project_qkv(query, key_value, mha)
        return answer(query, key_value, mha)

    return wrapped


def test_gqa_in_place_change_of_the_module_is_named(capsys):
    def in_place(query, key_value, mha):
        with torch.no_grad():
            mha.qkv_proj.weight.mul_(1.0)
        return gqa_project_qkv(query, key_value, mha)

    result, out = _run(ex.check_gqa_forward, in_place, capsys)
    assert result is False and "modificou `mha` no lugar" in out


def test_gqa_under_no_grad_is_rejected(capsys):
    def no_grad(query, key_value, mha):
        with torch.no_grad():
            return gqa_project_qkv(query, key_value, mha)

    result, out = _run(ex.check_gqa_forward, no_grad, capsys)
    assert result is False and "não tem gradiente" in out


def test_gqa_detached_weights_are_rejected_by_the_gradient(capsys):
    def detached_bias(query, key_value, mha):
        out = gqa_project_qkv(query, key_value, mha)
        return out - mha.out_proj.bias + mha.out_proj.bias.detach()

    result, out = _run(ex.check_gqa_forward, detached_bias, capsys)
    assert result is False and "`mha.out_proj.bias`" in out


mha_forward = tpt.MultiHeadAttention.forward


def forward_in_default(query, key_value, mha, _f=tpt.MultiHeadAttention.forward):
    return _f(mha, query, key_value)[0]


def torch_module(query, key_value, mha):
    d = mha.embed_dim
    reference = nn.MultiheadAttention(d, mha.num_heads, batch_first=True)
    return reference(query, key_value, key_value)[0]


READY_MADE = {
    "mha(...)": lambda q, kv, mha: mha(q, kv)[0],
    "apelido": lambda q, kv, mha: mha_forward(mha, q, kv)[0],
    "argumento-padrao": forward_in_default,
    "partial": lambda q, kv, mha: functools.partial(mha.forward, need_weights=False)(q, kv)[0],
    "etapa-interna": lambda q, kv, mha: mha.out_proj(
        mha._attend(
            *(_split(z, mha.num_heads, mha.head_dim) for z in mha.project_qkv(q, q)),
            None,
            None,
            False,
            False,
        )[0]
        .transpose(1, 2)
        .reshape(q.shape)
    ),
    "nn.MultiheadAttention": torch_module,
    "F.multi_head_attention_forward": lambda q, kv, mha: F.multi_head_attention_forward(
        q.transpose(0, 1),
        kv.transpose(0, 1),
        kv.transpose(0, 1),
        q.shape[-1],
        mha.num_heads,
        torch.randn(3 * q.shape[-1], q.shape[-1]),
        None,
        None,
        None,
        False,
        0.0,
        mha.out_proj.weight,
        mha.out_proj.bias,
    )[0].transpose(0, 1),
}


@pytest.mark.parametrize("name", sorted(READY_MADE))
def test_gqa_ready_made_module_is_seen_whatever_the_route(name, capsys):
    result, out = _run(ex.check_gqa_forward, READY_MADE[name], capsys)
    assert result is False and "etapas prontas do módulo" in out, out


def _loopy_gqa(loop):
    def answer(query, key_value, mha):
        b, t, d = query.shape
        h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
        q, k, v = mha.project_qkv(query, key_value)
        q, k, v = _split(q, h, d_h), _split(k, h_kv, d_h), _split(v, h_kv, d_h)
        out = torch.stack(loop(q, k, v, h // h_kv), dim=1)  # (b, h, t, d_h)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    return answer


def _head(q, k, v, i, group):
    return tpt.scaled_dot_product_attention(q[:, i], k[:, i // group], v[:, i // group])[0]


LOOPY_GQA = {
    "for": lambda q, k, v, g: [_head(q, k, v, i, g) for i in range(q.shape[1])],
    "map": lambda q, k, v, g: list(map(lambda i: _head(q, k, v, i, g), range(q.shape[1]))),
}


@pytest.mark.parametrize("name", sorted(LOOPY_GQA))
def test_gqa_loop_over_heads_is_seen_by_operation_counts(name, capsys):
    result, out = _run(ex.check_gqa_forward, _loopy_gqa(LOOPY_GQA[name]), capsys)
    assert result is False and "cresce com h" in out


def test_gqa_tiled_heads_are_diagnosed(capsys):
    def tiled(query, key_value, mha):
        b, t, d = query.shape
        h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
        q, k, v = mha.project_qkv(query, key_value)
        q = _split(q, h, d_h)
        k = _split(k, h_kv, d_h).repeat(1, h // h_kv, 1, 1)
        v = _split(v, h_kv, d_h).repeat(1, h // h_kv, 1, 1)
        out, _ = tpt.scaled_dot_product_attention(q, k, v)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    result, out = _run(ex.check_gqa_forward, tiled, capsys)
    assert result is False and "ordem errada" in out


def test_gqa_without_out_proj_is_diagnosed(capsys):
    def no_out(query, key_value, mha):
        out = gqa_project_qkv(query, key_value, mha)
        return (out - mha.out_proj.bias) @ torch.linalg.pinv(mha.out_proj.weight.T)

    result, out = _run(ex.check_gqa_forward, no_out, capsys)
    assert result is False and "falta a projeção final" in out


def test_gqa_wrong_scale_is_diagnosed(capsys):
    def wrong_scale(query, key_value, mha):
        b, t, d = query.shape
        h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
        q, k, v = mha.project_qkv(query, key_value)
        q = _split(q, h, d_h)
        k = _split(k, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
        v = _split(v, h_kv, d_h).repeat_interleave(h // h_kv, dim=1)
        out, _ = tpt.scaled_dot_product_attention(q, k, v, scale=d**-0.5)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    result, out = _run(ex.check_gqa_forward, wrong_scale, capsys)
    assert result is False and "1/√d, e não 1/√d_h" in out


def test_gqa_keys_from_the_query_are_diagnosed(capsys):
    result, out = _run(ex.check_gqa_forward, lambda q, kv, m: gqa_project_qkv(q, q, m), capsys)
    assert result is False and "K e V saíram de query" in out


def test_gqa_split_of_kv_into_num_heads_is_explained(capsys):
    def num_heads_for_kv(query, key_value, mha):
        b, t, d = query.shape
        h, d_h = mha.num_heads, mha.head_dim
        q, k, v = (_split(z, h, d_h) for z in mha.project_qkv(query, key_value))
        out, _ = tpt.scaled_dot_product_attention(q, k, v)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    result, out = _run(ex.check_gqa_forward, num_heads_for_kv, capsys)
    assert result is False and "levantou RuntimeError" in out and "num_kv_heads=" in out


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


def test_gqa_values_change_every_run_so_a_table_cannot_pass(capsys):
    seen = []

    def remember(query, key_value, mha):
        seen.append(query.clone())
        return gqa_project_qkv(query, key_value, mha)

    ex.check_gqa_forward(remember)
    first_run = [q.detach().numpy().tobytes() for q in seen]
    seen.clear()
    capsys.readouterr()

    def lookup(query, key_value, mha):
        if query.detach().numpy().tobytes() in first_run:
            return gqa_project_qkv(query, key_value, mha)
        return torch.zeros_like(query)

    result, out = _run(ex.check_gqa_forward, lookup, capsys)
    assert result is False and "difere do esperado" in out
