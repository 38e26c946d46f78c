"""Conferências dos exercícios do notebook 03_atencao_produto_escalar (tpt.exercises.attention).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as roda
pelas conferências). Aqui ficam as respostas erradas típicas (cada uma com a sua mensagem),
as regras dos enunciados e estilos alternativos de respostas certas.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import numpy as np
import torch
import torch.nn.functional as F

from tpt.exercises import attention as ex

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "03_atencao_produto_escalar.ipynb"


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


def _run(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: softmax estável
# --------------------------------------------------------------------------------------


def test_softmax_stub_is_pending(capsys):
    result, out = _run(ex.check_stable_softmax, stub, capsys)
    assert result is False and _pending(out)


def test_softmax_with_logsumexp_is_accepted(capsys):
    def with_logsumexp(scores):
        return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))

    result, out = _run(ex.check_stable_softmax, with_logsumexp, capsys)
    assert result is True, out


def test_softmax_with_amax_and_float64_is_accepted(capsys):
    def with_amax(scores):
        z = scores.double()
        e = (z - z.amax(dim=-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, with_amax, capsys)
    assert result is True, out


def test_softmax_naive_overflows(capsys):
    def naive(scores):
        e = torch.exp(scores)
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, naive, capsys)
    assert result is False
    assert "[1000, 1001, 999, 998]" in out and "NaN" in out and "máximo" in out


def test_softmax_subtracting_the_minimum_is_explained(capsys):
    def minimum(scores):
        e = torch.exp(scores - scores.min(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, minimum, capsys)
    assert result is False
    assert "[-500, 500, 0]" in out and "com o mínimo" in out


def test_softmax_global_maximum_is_explained(capsys):
    def global_max(scores):
        e = torch.exp(scores - scores.max())
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, global_max, capsys)
    assert result is False
    assert "escalas muito diferentes" in out and "keepdim=True" in out


def test_softmax_without_keepdim_gets_a_portuguese_hint(capsys):
    def no_keepdim(scores):
        e = torch.exp(scores - scores.max(dim=-1).values)
        return e / e.sum(dim=-1, keepdim=True)

    result, out = _run(ex.check_stable_softmax, no_keepdim, capsys)
    assert result is False
    assert "levantou RuntimeError" in out and "keepdim=True" in out and "linha a linha" in out


def test_softmax_over_the_wrong_axis_is_explained(capsys):
    def first_axis(scores):
        e = torch.exp(scores - scores.max(dim=0, keepdim=True).values)
        return e / e.sum(dim=0, keepdim=True)

    result, out = _run(ex.check_stable_softmax, first_axis, capsys)
    assert result is False
    assert "eixo errado" in out and "dim=-1" in out


def test_softmax_rule_forbids_the_builtins(capsys):
    for builtin in (
        lambda scores: torch.softmax(scores, dim=-1),
        lambda scores: F.softmax(scores, dim=-1),
        lambda scores: scores.softmax(-1),
        lambda scores: torch.log_softmax(scores, dim=-1).exp(),
        lambda scores: torch.nn.Softmax(dim=-1)(scores),
    ):
        result, out = _run(ex.check_stable_softmax, builtin, capsys)
        assert result is False
        assert "sem torch.softmax" in out


def test_softmax_rule_catches_an_alias(capsys):
    sm = F.softmax  # um apelido criado antes da função: o nome "softmax" não aparece nela

    def alias(scores):
        return sm(scores, dim=-1)

    result, out = _run(ex.check_stable_softmax, alias, capsys)
    assert result is False
    assert "sem torch.softmax" in out
    assert torch.softmax(torch.zeros(2), dim=-1).sum() == 1  # nada ficou bloqueado depois


# --------------------------------------------------------------------------------------
# Exercício 2: projeções à mão, artigo -> substantivo
# --------------------------------------------------------------------------------------

_ROW = ex.FEATURES.index


def _projections(c=3.0, penalty=True, gender=True, swap_gender=False):
    W_Q, W_K = torch.zeros(len(ex.FEATURES), 3), torch.zeros(len(ex.FEATURES), 3)
    if gender:
        masc, fem = ("feminino", "masculino") if swap_gender else ("masculino", "feminino")
        W_Q[_ROW(masc), 0] = W_K[_ROW("masculino"), 0] = c
        W_Q[_ROW(fem), 1] = W_K[_ROW("feminino"), 1] = c
    W_Q[_ROW("artigo"), 2] = W_K[_ROW("substantivo"), 2] = c
    if penalty:
        W_K[_ROW("pessoa"), 2] = -c
    return W_Q, W_K


def test_articles_stub_is_pending(capsys):
    result, out = _run(ex.check_article_projections, stub, capsys)
    assert result is False and _pending(out)


def test_articles_as_nested_lists_are_accepted(capsys):
    def as_lists():
        W_Q, W_K = _projections(c=4.0)
        return W_Q.tolist(), W_K.numpy()

    result, out = _run(ex.check_article_projections, as_lists, capsys)
    assert result is True, out


def test_articles_without_the_person_penalty_fail(capsys):
    result, out = _run(ex.check_article_projections, lambda: _projections(penalty=False), capsys)
    assert result is False
    assert "'João'" in out and "é uma pessoa" in out and "negativo" in out


def test_articles_with_small_scale_fail(capsys):
    result, out = _run(ex.check_article_projections, lambda: _projections(c=1.0), capsys)
    assert result is False
    assert "já olha mais para 'trem'" in out and "0,80" in out and "multiplique" in out


def test_articles_with_swapped_gender_fail(capsys):
    result, out = _run(
        ex.check_article_projections, lambda: _projections(swap_gender=True), capsys
    )
    assert result is False
    assert "outro gênero" in out


def test_articles_that_ignore_nouns_fail(capsys):
    def gender_only():
        W_Q, W_K = _projections(c=6.0)
        W_Q[:, 2] = 0  # o artigo não pede substantivo
        return W_Q, W_K

    result, out = _run(ex.check_article_projections, gender_only, capsys)
    assert result is False
    assert "artigo 'o'" in out


def test_articles_are_checked_on_an_unseen_sentence(capsys):
    def only_the_notebook_sentence():
        # Todo adjetivo também anuncia "feminino": a frase do notebook não tem adjetivo
        # feminino e passa; na frase nova, "a" empata entre "mesa" e "ocupada".
        W_Q, W_K = _projections()
        W_K[_ROW("adjetivo"), 1] = 3.0
        return W_Q, W_K

    result, out = _run(ex.check_article_projections, only_the_notebook_sentence, capsys)
    assert result is False
    assert "numa frase nova" in out and "Maria e Pedro" in out


def test_articles_wrong_shapes_are_explained(capsys):
    result, out = _run(
        ex.check_article_projections, lambda: (torch.zeros(4, 2), torch.zeros(4, 2)), capsys
    )
    assert result is False and "uma linha por característica" in out
    result, out = _run(
        ex.check_article_projections, lambda: (torch.zeros(10, 2), torch.zeros(10, 3)), capsys
    )
    assert result is False and "mesmo número de colunas" in out
    result, out = _run(ex.check_article_projections, lambda: torch.zeros(10, 2), capsys)
    assert result is False and "par (W_Q, W_K)" in out


def test_notebook_lexicon_agrees_with_the_check():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == "code-046b")
    source = source.split("\n\n\ndef feature_matrix")[0]  # só FEATURES e lexicon
    namespace = {"ex": ex}
    exec(source, namespace)
    assert tuple(namespace["FEATURES"]) == ex.FEATURES
    for word, features in namespace["lexicon"].items():
        if word in ex._LEXICON:
            assert tuple(features) == ex._LEXICON[word], word


# --------------------------------------------------------------------------------------
# Exercício 3: o maior t que cabe na memória
# --------------------------------------------------------------------------------------


def test_max_len_stub_is_pending(capsys):
    result, out = _run(ex.check_max_seq_len, stub, capsys)
    assert result is False and _pending(out)


def test_max_len_numpy_integer_is_accepted(capsys):
    # Um np.int64 correto é um inteiro: a versão anterior deste exercício o recusava.
    def with_numpy(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        elements = budget_bytes / (batch_size * num_heads * bytes_per_element)
        return np.int64(np.floor(np.sqrt(elements)))

    result, out = _run(ex.check_max_seq_len, with_numpy, capsys)
    assert result is True, out


def test_max_len_int_of_sqrt_and_loop_are_accepted(capsys):
    def int_sqrt(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return int(math.sqrt(budget_bytes / (batch_size * num_heads * bytes_per_element)))

    def search(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        t = 0
        while batch_size * num_heads * (t + 1) ** 2 * bytes_per_element <= budget_bytes:
            t += 1
        return t

    for answer in (int_sqrt, search):
        result, out = _run(ex.check_max_seq_len, answer, capsys)
        assert result is True, out


def test_max_len_integral_float_is_accepted(capsys):
    def as_float(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return float(math.isqrt(budget_bytes // (batch_size * num_heads * bytes_per_element)))

    result, out = _run(ex.check_max_seq_len, as_float, capsys)
    assert result is True, out


def test_max_len_rounding_up_fails(capsys):
    def rounded(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return round(math.sqrt(budget_bytes / (batch_size * num_heads * bytes_per_element)))

    result, out = _run(ex.check_max_seq_len, rounded, capsys)
    assert result is False
    assert "arredonde a raiz para baixo" in out and "12952" in out


def test_max_len_fractional_answer_fails(capsys):
    def fractional(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return math.sqrt(budget_bytes / (batch_size * num_heads * bytes_per_element))

    result, out = _run(ex.check_max_seq_len, fractional, capsys)
    assert result is False
    assert "casas decimais" in out


def test_max_len_without_heads_or_bytes_fails(capsys):
    def no_heads(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return math.isqrt(budget_bytes // (batch_size * bytes_per_element))

    def no_bytes(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return math.isqrt(budget_bytes // (batch_size * num_heads))

    result, out = _run(ex.check_max_seq_len, no_heads, capsys)
    assert result is False and "ignora as cabeças" in out
    result, out = _run(ex.check_max_seq_len, no_bytes, capsys)
    assert result is False and "bytes_per_element" in out


def test_max_len_too_small_fails(capsys):
    def one_less(budget_bytes, batch_size, num_heads, bytes_per_element=4):
        return max(math.isqrt(budget_bytes // (batch_size * num_heads * bytes_per_element)) - 1, 0)

    result, out = _run(ex.check_max_seq_len, one_less, capsys)
    assert result is False
    assert "ainda cabe" in out


def test_max_len_bool_and_string_are_rejected(capsys):
    result, out = _run(ex.check_max_seq_len, lambda *args: True, capsys)
    assert result is False and "inteiro" in out
    result, out = _run(ex.check_max_seq_len, lambda *args: "16384", capsys)
    assert result is False and "inteiro" in out
