"""Conferências dos exercícios do notebook 03_atencao_produto_escalar (tpt.exercises.attention).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as roda
pelas conferências). Aqui: respostas certas em outros estilos (aceitas) e as erradas de
cada classe da issue 22 (recusadas, com a mensagem certa): entrada modificada no lugar,
gradiente cortado, regra burlada por apelido, argumento padrão, ``partial`` ou nome ATen,
tabela dos casos fixos, referência da conferência, e os erros típicos de cada exercício.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from tpt.exercises import attention as module
from tpt.exercises import checks

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "03_atencao_produto_escalar.ipynb"
ex = checks("attention")


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


def _run(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


def test_checks_show_only_the_checks_and_the_statement_constant():
    assert sorted(dir(ex)) == sorted(
        [
            "FEATURES",
            "check_stable_softmax",
            "check_article_projections",
            "check_attention_backward",
        ]
    )
    for hidden in ("_softmax_reference", "_reference_grads", "_LEXICON", "_attention_reference"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", [ex.check_stable_softmax, ex.check_article_projections, ex.check_attention_backward]
)
def test_stub_is_pending(check, capsys):
    result, out = _run(check, stub, capsys)
    assert result is False and "⏳" in out and "ainda não resolvido" in out


# ======================================================================================
# Exercício 1: softmax estável
# ======================================================================================
def by_max(scores):
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


ACCEPTED_SOFTMAX = {
    "máximo": by_max,
    "logsumexp": lambda s: torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True)),
    "amax em float64": lambda s: (lambda e: (e / e.sum(-1, keepdim=True)).float())(
        (s.double() - s.double().amax(-1, keepdim=True)).exp()
    ),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_SOFTMAX))
def test_softmax_correct_styles_are_accepted(name, capsys):
    result, out = _run(ex.check_stable_softmax, ACCEPTED_SOFTMAX[name], capsys)
    assert result is True, out


softmax_alias = torch.softmax


def softmax_in_default(scores, _sm=F.softmax):
    return _sm(scores, dim=-1)


FORBIDDEN_SOFTMAX = {
    "apelido": lambda s: softmax_alias(s, dim=-1),
    "argumento-padrao": softmax_in_default,
    "partial": functools.partial(torch.softmax, dim=-1),
    "torch._softmax": lambda s: torch._softmax(s, -1, False),
    "aten": lambda s: torch.ops.aten._softmax(s, -1, False),
    "log_softmax": lambda s: torch.log_softmax(s, dim=-1).exp(),
    "modulo": lambda s: torch.nn.Softmax(dim=-1)(s),
}


@pytest.mark.parametrize("name", sorted(FORBIDDEN_SOFTMAX))
def test_softmax_kernel_is_seen_whatever_the_route(name, capsys):
    result, out = _run(ex.check_stable_softmax, FORBIDDEN_SOFTMAX[name], capsys)
    assert result is False and "núcleo de softmax" in out, out


def test_softmax_in_place_change_of_scores_is_named(capsys):
    def in_place(scores):
        scores -= scores.max(dim=-1, keepdim=True).values
        e = scores.exp()
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, in_place, capsys)
    assert result is False and "modificou `scores` no lugar" in out


@pytest.mark.parametrize("cut", ["no_grad", "detach"])
def test_softmax_cut_from_the_graph_is_rejected(cut, capsys):
    def answer(scores):
        if cut == "detach":
            return by_max(scores).detach()
        with torch.no_grad():
            return by_max(scores)

    result, out = _run(ex.check_stable_softmax, answer, capsys)
    assert result is False and "não tem gradiente" in out


def test_softmax_table_of_the_fixed_cases_is_rejected_on_a_drawn_case(capsys):
    table = {
        scores.numpy().tobytes(): module._softmax_reference(scores).float()
        for _, scores in module._softmax_fixed_cases()
    }

    def lookup(scores):
        return table.get(scores.numpy().tobytes(), torch.full_like(scores, 0.5))

    result, out = _run(ex.check_stable_softmax, lookup, capsys)
    assert result is False and "caso sorteado (semente" in out


def test_softmax_naive_is_diagnosed(capsys):
    def naive(scores):
        e = torch.exp(scores)
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, naive, capsys)
    assert result is False and "[1000, 1001, 999, 998]" in out and "sem subtrair nada" in out


def test_softmax_global_maximum_is_diagnosed(capsys):
    def global_max(scores):
        e = torch.exp(scores - scores.max())
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, global_max, capsys)
    assert result is False and "máximo do tensor inteiro" in out


def test_softmax_minimum_is_diagnosed(capsys):
    def minimum(scores):
        e = torch.exp(scores - scores.min(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, minimum, capsys)
    assert result is False and "mínimo de cada linha" in out


def test_softmax_over_the_wrong_axis_is_diagnosed(capsys):
    def columns(scores):
        e = torch.exp(scores - scores.max(dim=-2, keepdim=True).values)
        return e / e.sum(dim=-2, keepdim=True)

    result, out = _run(ex.check_stable_softmax, columns, capsys)
    assert result is False and "cada coluna soma 1" in out


def test_softmax_without_keepdim_is_explained(capsys):
    def no_keepdim(scores):
        e = torch.exp(scores - scores.max(dim=-1).values)
        return e / e.sum(dim=-1)

    result, out = _run(ex.check_stable_softmax, no_keepdim, capsys)
    assert result is False and "keepdim=True" in out


def test_softmax_wrong_answer_without_a_tested_diagnosis_shows_the_numbers(capsys):
    result, out = _run(ex.check_stable_softmax, lambda s: torch.sigmoid(s), capsys)
    assert result is False and "maior diferença" in out
    assert "subtrair" not in out and "keepdim" not in out


# ======================================================================================
# Exercício 2: projeções à mão
# ======================================================================================
def reference_projections(c=3.0):
    row = module.FEATURES.index
    W_Q = torch.zeros(len(module.FEATURES), 3)
    W_K = torch.zeros(len(module.FEATURES), 3)
    W_Q[row("masculino"), 0] = W_K[row("masculino"), 0] = c
    W_Q[row("feminino"), 1] = W_K[row("feminino"), 1] = c
    W_Q[row("artigo"), 2] = c
    W_K[row("substantivo"), 2] = c
    W_K[row("pessoa"), 2] = -c
    return W_Q, W_K


def signed_gender_projections():
    """Outro estilo: gênero com sinal (+c masculino, -c feminino) e d_k = 2, em listas."""
    c = 3.0
    rows = {name: [0.0, 0.0] for name in module.FEATURES}
    keys = {name: [0.0, 0.0] for name in module.FEATURES}
    rows["masculino"][0] = keys["masculino"][0] = c
    rows["feminino"][0] = keys["feminino"][0] = -c
    rows["artigo"][1] = c
    keys["substantivo"][1] = c
    keys["pessoa"][1] = -c
    return [rows[n] for n in module.FEATURES], [keys[n] for n in module.FEATURES]


@pytest.mark.parametrize("answer", [reference_projections, signed_gender_projections])
def test_articles_correct_styles_are_accepted_on_many_drawn_lists(answer, capsys):
    for _ in range(10):  # cada chamada sorteia listas novas
        result, out = _run(ex.check_article_projections, answer, capsys)
        assert result is True, out


def test_articles_tie_is_not_told_to_scale_up(capsys):
    def no_person_penalty():
        W_Q, W_K = reference_projections()
        W_K[module.FEATURES.index("pessoa"), 2] = 0.0
        return W_Q, W_K

    result, out = _run(ex.check_article_projections, no_person_penalty, capsys)
    assert result is False and "empatam" in out and "'João'" in out
    assert "multiplicadas" not in out


def test_articles_small_scale_is_told_only_after_testing_it(capsys):
    result, out = _run(ex.check_article_projections, lambda: reference_projections(1.0), capsys)
    assert result is False and "multiplicadas por 3" in out


def test_articles_swapped_gender_names_the_rival(capsys):
    def swapped():
        W_Q, W_K = reference_projections()
        row = module.FEATURES.index
        W_Q[row("masculino"), 0], W_Q[row("feminino"), 1] = 0.0, 0.0
        W_Q[row("masculino"), 1], W_Q[row("feminino"), 0] = 3.0, 3.0
        return W_Q, W_K

    result, out = _run(ex.check_article_projections, swapped, capsys)
    assert result is False and "'cadeira'" in out and "multiplicadas" not in out


def test_articles_wrong_shapes_are_explained(capsys):
    result, out = _run(
        ex.check_article_projections, lambda: (torch.zeros(3, 10), torch.zeros(3, 10)), capsys
    )
    assert result is False and "(10, d_k)" in out
    result, out = _run(ex.check_article_projections, lambda: torch.zeros(10, 3), capsys)
    assert result is False and "par (W_Q, W_K)" in out


def test_drawn_lists_have_one_article_and_one_object_of_each_gender():
    g, seed = module.case_generator(11)
    for _ in range(50):
        _, tokens, targets = module._drawn_sentence(g, seed)
        assert len(tokens) <= 17 and len(targets) == 2
        for i, j in targets.items():
            article, noun = module._LEXICON[tokens[i]], module._LEXICON[tokens[j]]
            assert "artigo" in article and "substantivo" in noun and "pessoa" not in noun
            assert article[1] == noun[1]  # mesmo gênero


def test_notebook_lexicon_agrees_with_the_check():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    source = next(c.source for c in nb.cells if "lexicon = {" in c.source)
    for word, features in module._LEXICON.items():
        if f'"{word}": [' in source:
            listed = source.split(f'"{word}": [', 1)[1].split("]", 1)[0]
            assert sorted(f.strip().strip('"') for f in listed.split(",")) == sorted(features), word


# ======================================================================================
# Exercício 3: os gradientes da atenção à mão
# ======================================================================================
def by_formulas(query, key, value, grad_output):
    c = 1 / math.sqrt(query.shape[-1])
    p = torch.softmax(query @ key.transpose(-2, -1) * c, dim=-1)
    dp = grad_output @ value.transpose(-2, -1)
    dz = p * (dp - (dp * p).sum(-1, keepdim=True))
    return dz @ key * c, dz.transpose(-2, -1) @ query * c, p.transpose(-2, -1) @ grad_output


def with_einsum(query, key, value, grad_output):
    c = query.shape[-1] ** -0.5
    z = torch.einsum("...td,...sd->...ts", query, key) * c
    p = torch.exp(z - z.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    dp = torch.einsum("...tv,...sv->...ts", grad_output, value)
    dz = p * dp - p * torch.einsum("...ts,...ts->...t", p, dp)[..., None]
    return (
        torch.einsum("...ts,...sd->...td", dz, key) * c,
        torch.einsum("...ts,...td->...sd", dz, query) * c,
        torch.einsum("...ts,...tv->...sv", p, grad_output),
    )


@pytest.mark.parametrize("answer", [by_formulas, with_einsum], ids=["matmul", "einsum"])
def test_backward_correct_styles_are_accepted(answer, capsys):
    result, out = _run(ex.check_attention_backward, answer, capsys)
    assert result is True, out


@pytest.mark.parametrize("name", ["query", "key", "value", "grad_output"])
def test_backward_in_place_change_of_each_input_is_named(name, capsys):
    def in_place(query, key, value, grad_output):
        result = by_formulas(query, key, value, grad_output)
        {"query": query, "key": key, "value": value, "grad_output": grad_output}[name].mul_(1.0)
        return result

    result, out = _run(ex.check_attention_backward, in_place, capsys)
    assert result is False and f"modificou `{name}` no lugar" in out


def autograd_grad(query, key, value, grad_output):
    leaves = [x.detach().clone().requires_grad_(True) for x in (query, key, value)]
    out = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(query.shape[-1]), -1)
    return torch.autograd.grad(out @ leaves[2], leaves, grad_output)


def autograd_backward(query, key, value, grad_output, _enable=torch.enable_grad):
    leaves = [x.clone().requires_grad_() for x in (query, key, value)]
    with _enable():
        out = torch.softmax(
            leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(query.shape[-1]), -1
        )
        (out @ leaves[2]).backward(grad_output)
    return tuple(x.grad for x in leaves)


def func_vjp(query, key, value, grad_output):
    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    _, vjp = torch.func.vjp(attention, query, key, value)
    return vjp(grad_output)


@pytest.mark.parametrize(
    "answer", [autograd_grad, autograd_backward, func_vjp], ids=["grad", "backward", "func"]
)
def test_backward_autograd_is_seen_whatever_the_route(answer, capsys):
    result, out = _run(ex.check_attention_backward, answer, capsys)
    assert result is False and "sem autograd" in out, out


def test_backward_values_change_every_run_so_a_table_cannot_pass(capsys):
    seen = []

    def remember(query, key, value, grad_output):
        seen.append(query.clone())
        return by_formulas(query, key, value, grad_output)

    ex.check_attention_backward(remember)
    first_run = list(seen)
    seen.clear()
    ex.check_attention_backward(remember)
    capsys.readouterr()
    # Até os casos "fixos" (as formas) recebem valores novos a cada execução.
    assert len(first_run) == len(seen) == 5
    assert all(not torch.equal(a, b) for a, b in zip(first_run, seen, strict=True))

    table = {q.numpy().tobytes(): by_formulas(q, *_others(q)) for q in first_run}

    def lookup(query, key, value, grad_output):
        return table.get(query.numpy().tobytes(), (query * 0, key * 0, value * 0))

    result, out = _run(ex.check_attention_backward, lookup, capsys)
    assert result is False and "difere do gradiente do autograd" in out


def _others(q):
    k = torch.zeros(*q.shape[:-2], 2, q.shape[-1], dtype=q.dtype)
    return (
        k,
        torch.zeros(*q.shape[:-2], 2, 3, dtype=q.dtype),
        torch.zeros(*q.shape[:-1], 3, dtype=q.dtype),
    )


def test_backward_missing_scale_is_diagnosed(capsys):
    def no_scale(query, key, value, grad_output):
        gq, gk, gv = by_formulas(query, key, value, grad_output)
        return gq * math.sqrt(query.shape[-1]), gk, gv

    result, out = _run(ex.check_attention_backward, no_scale, capsys)
    assert result is False and "grad_query não confere: falta a escala" in out


def test_backward_missing_shift_term_is_diagnosed(capsys):
    def no_shift(query, key, value, grad_output):
        c = 1 / math.sqrt(query.shape[-1])
        p = torch.softmax(query @ key.transpose(-2, -1) * c, dim=-1)
        dz = p * (grad_output @ value.transpose(-2, -1))
        return dz @ key * c, dz.transpose(-2, -1) @ query * c, p.transpose(-2, -1) @ grad_output

    result, out = _run(ex.check_attention_backward, no_shift, capsys)
    assert result is False and "sem o termo - p · g" in out


def test_backward_missing_transposes_are_diagnosed_where_shapes_allow(capsys):
    def value_no_transpose(query, key, value, grad_output):
        gq, gk, _ = by_formulas(query, key, value, grad_output)
        c = 1 / math.sqrt(query.shape[-1])
        p = torch.softmax(query @ key.transpose(-2, -1) * c, dim=-1)
        if query.shape[-2] == key.shape[-2]:
            return gq, gk, p @ grad_output
        return gq, gk, p.transpose(-2, -1) @ grad_output

    # O primeiro caso fixo tem t != s e passa; o segundo (t = s) mostra o erro.
    result, out = _run(ex.check_attention_backward, value_no_transpose, capsys)
    assert result is False and "grad_value não confere: faltou transpor os pesos" in out


def test_backward_wrong_shape_is_explained(capsys):
    def swapped(query, key, value, grad_output):
        gq, gk, gv = by_formulas(query, key, value, grad_output)
        return gk, gq, gv

    result, out = _run(ex.check_attention_backward, swapped, capsys)
    assert result is False and "grad_query com a forma" in out


def test_backward_shape_error_in_grad_value_gets_no_hint_about_the_weights(capsys):
    """`dV = p @ grad_output` (sem a transposta) quebra com t ≠ s: a dica dá as formas do
    caso, sem falar de ∂L/∂pesos, que não foi o passo que quebrou."""

    def value_without_transpose(query, key, value, grad_output):
        gq, gk, _ = by_formulas(query, key, value, grad_output)
        c = 1 / math.sqrt(query.shape[-1])
        p = torch.softmax(query @ key.transpose(-2, -1) * c, dim=-1)
        return gq, gk, p @ grad_output  # (t, s) @ (t, d_v): erro de forma com t != s

    result, out = _run(ex.check_attention_backward, value_without_transpose, capsys)
    assert result is False and "sua função levantou RuntimeError" in out, out
    assert "∂L/∂pesos" not in out
    assert "t=3, s=5" in out and "pesos (..., t, s) = (..., 3, 5)" in out
    assert "∂L/∂V como value" in out


# ======================================================================================
# Exercício 1: a divisão no lugar sobre a saída do exp
# ======================================================================================
def softmax_dividing_in_place(scores):
    exps = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    exps.div_(exps.sum(dim=-1, keepdim=True))  # estraga a saída do exp, guardada pelo autograd
    return exps


def softmax_dividing_in_place_with_operator(scores):
    exps = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    exps /= exps.sum(dim=-1, keepdim=True)
    return exps


@pytest.mark.parametrize(
    "answer",
    [softmax_dividing_in_place, softmax_dividing_in_place_with_operator],
    ids=["div_", "/="],
)
def test_softmax_in_place_division_of_its_own_exp_is_explained_in_portuguese(answer, capsys):
    result, out = _run(ex.check_stable_softmax, answer, capsys)
    assert result is False and "❌" in out, out
    # a causa em português, não o RuntimeError cru do autograd
    assert "one of the variables needed" not in out and "modified by an inplace" not in out
    assert "no lugar" in out and "gradiente" in out


def test_softmax_nan_is_described_by_position_not_as_infinite_difference(capsys):
    def nan_softmax(scores):
        e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        out = e / e.sum(dim=-1, keepdim=True)
        first_column = torch.zeros_like(out, dtype=torch.bool)
        first_column[..., 0] = True
        return out.masked_fill(first_column, float("nan"))

    result, out = _run(ex.check_stable_softmax, nan_softmax, capsys)
    assert result is False and "NaN" in out and "∞" not in out and "e+308" not in out, out
