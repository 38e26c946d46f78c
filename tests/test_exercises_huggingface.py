"""Conferências dos exercícios do notebook 11_do_tpt_ao_hugging_face (tpt.exercises.huggingface).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import functools
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

pytest.importorskip("transformers")

from exercise_answers import accepted as _accepted
from exercise_answers import rejected as _rejected
from exercise_answers import stub  # noqa: E402

import tpt.hf  # noqa: E402
from tpt.exercises import checks  # noqa: E402

ex = checks("huggingface")


def test_stubs_are_pending(capsys):
    for check in (ex.check_rope_rows, ex.check_fold_sqrt_d):
        assert check(stub) is False
        assert "⏳" in capsys.readouterr().out


def test_checks_show_only_the_checkers():
    assert sorted(dir(ex)) == ["check_fold_sqrt_d", "check_rope_rows"]


# --------------------------------------------------------------------------------------
# Exercício 1: rope_rows
# --------------------------------------------------------------------------------------
def _perm(head_dim):
    return list(range(0, head_dim, 2)) + list(range(1, head_dim, 2))


def rope_rows_loop(w, num_heads):  # outro estilo: uma cabeça de cada vez, com torch.cat
    head_dim = w.shape[0] // num_heads
    heads = [w[h * head_dim : (h + 1) * head_dim][_perm(head_dim)] for h in range(num_heads)]
    return torch.cat(heads)


def rope_rows_strided(w, num_heads):  # outro estilo: pares e ímpares por fatias
    rows = w.reshape(num_heads, -1, *w.shape[1:])
    return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1).reshape(w.shape)


@pytest.mark.parametrize("answer", [rope_rows_loop, rope_rows_strided])
def test_rope_rows_accepts_other_styles(answer, capsys):
    _accepted(ex.check_rope_rows, answer, capsys)


def test_rope_rows_wrong_answers(capsys):
    def inverse(w, num_heads):
        head_dim = w.shape[0] // num_heads
        inv = torch.argsort(torch.tensor(_perm(head_dim)))
        return w.reshape(num_heads, head_dim, -1)[:, inv].reshape(w.shape)

    def whole(w, num_heads):
        return w[_perm(w.shape[0])]

    _rejected(ex.check_rope_rows, inverse, capsys, "permutação inversa")
    _rejected(ex.check_rope_rows, whole, capsys, "matriz inteira")
    _rejected(ex.check_rope_rows, lambda w, h: w.clone(), capsys, "não mudaram de lugar")
    _rejected(ex.check_rope_rows, lambda w, h: w[:-1], capsys, "forma")


def test_rope_rows_rules(capsys):
    def in_place(w, num_heads):
        w.copy_(rope_rows_strided(w, num_heads))
        return w

    def uses_tpt(w, num_heads):
        perm = tpt.hf.rope_permutation(w.shape[0] // num_heads)
        return w.reshape(num_heads, perm.numel(), -1)[:, perm].reshape(w.shape)

    _rejected(ex.check_rope_rows, in_place, capsys, "modificou `w` no lugar")
    _rejected(ex.check_rope_rows, uses_tpt, capsys, "escrita por você")
    assert tpt.hf.rope_permutation(4).tolist() == [0, 2, 1, 3]  # religada depois


# --------------------------------------------------------------------------------------
# Exercício 2: fold_sqrt_d
# --------------------------------------------------------------------------------------
def fold_loop(state, embed_dim, tied):  # outro estilo: um laço sobre as chaves
    out = {}
    for name, value in state.items():
        if name == "transformer.wte.weight":
            value = value * embed_dim**0.5
        elif tied and name.startswith("transformer.ln_f."):
            value = value * embed_dim**-0.5
        out[name] = value
    return out


def test_fold_accepts_other_style(capsys):
    _accepted(ex.check_fold_sqrt_d, fold_loop, capsys)


def test_fold_wrong_answers(capsys):
    def only_table(state, d, tied):
        return {**state, "transformer.wte.weight": state["transformer.wte.weight"] * math.sqrt(d)}

    def always_norm(state, d, tied):
        return fold_loop(state, d, True)

    def gain_only(state, d, tied):
        out = only_table(state, d, tied)
        if tied:
            out["transformer.ln_f.weight"] = state["transformer.ln_f.weight"] / math.sqrt(d)
        return out

    def divided(state, d, tied):
        return {**state, "transformer.wte.weight": state["transformer.wte.weight"] / math.sqrt(d)}

    def in_place(state, d, tied):
        state["transformer.wte.weight"].mul_(math.sqrt(d))
        return dict(state)

    _rejected(ex.check_fold_sqrt_d, only_table, capsys, "Compense na norma final")
    _rejected(ex.check_fold_sqrt_d, always_norm, capsys, "sem pesos amarrados")
    _rejected(ex.check_fold_sqrt_d, gain_only, capsys, "mas não o viés")
    _rejected(ex.check_fold_sqrt_d, divided, capsys, "dividiu a tabela")
    _rejected(ex.check_fold_sqrt_d, lambda s, d, t: dict(s), capsys, "ficou como estava")
    _rejected(ex.check_fold_sqrt_d, lambda s, d, t: list(s), capsys, "mesmas chaves")
    _rejected(ex.check_fold_sqrt_d, in_place, capsys, "no lugar")


def test_fold_rule_and_wrong_scale(capsys):
    def uses_to_hf(state, d, tied):
        tpt.hf.to_hf(None)

    def wrong_factor(state, d, tied):  # muda as chaves certas, com um fator errado
        out = dict(state)
        out["transformer.wte.weight"] = state["transformer.wte.weight"] * 2.0
        if tied:
            out["transformer.ln_f.weight"] = state["transformer.ln_f.weight"] / 2.0
            out["transformer.ln_f.bias"] = state["transformer.ln_f.bias"] / 2.0
        return out

    _rejected(ex.check_fold_sqrt_d, uses_to_hf, capsys, "escrita por você")
    _rejected(ex.check_fold_sqrt_d, wrong_factor, capsys, "difere do esperado")


# --------------------------------------------------------------------------------------
# Regras pelo que roda: a função pronta do tpt.hf é vista por qualquer caminho
# --------------------------------------------------------------------------------------
def _with_ready_permutation(w, num_heads, _perm_fn=tpt.hf.rope_permutation):
    d_h = w.shape[0] // num_heads
    return w.reshape(num_heads, d_h, -1)[:, _perm_fn(d_h)].reshape(w.shape)


_PARTIAL_PERMUTATION = functools.partial(tpt.hf.rope_permutation)

_READY_ROPE = {
    "direto": lambda w, h: w.reshape(h, w.shape[0] // h, -1)[
        :, tpt.hf.rope_permutation(w.shape[0] // h)
    ].reshape(w.shape),
    "argumento-padrao": _with_ready_permutation,
    "partial": lambda w, h: w.reshape(h, w.shape[0] // h, -1)[
        :, _PARTIAL_PERMUTATION(w.shape[0] // h)
    ].reshape(w.shape),
}


@pytest.mark.parametrize("name", sorted(_READY_ROPE))
def test_rope_ready_permutation_is_seen_whatever_the_route(name, capsys):
    _rejected(ex.check_rope_rows, _READY_ROPE[name], capsys, "tpt.hf.rope_permutation")


def test_rope_in_place_change_of_w_is_named(capsys):
    def in_place(w, num_heads):
        d_h = w.shape[0] // num_heads
        perm = torch.cat([torch.arange(0, d_h, 2), torch.arange(1, d_h, 2)])
        w.copy_(w.reshape(num_heads, d_h, -1)[:, perm].reshape(w.shape))
        return w

    _rejected(ex.check_rope_rows, in_place, capsys, "modificou `w` no lugar")
