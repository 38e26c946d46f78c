"""A máquina comum das conferências (tpt/exercises/messages, rules, integrity, guards e core).

Cada classe de resposta errada que a issue de exercícios listou tem aqui o teste que a
barra no nível da máquina; os testes de cada notebook repetem a prova exercício a exercício.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from exercise_answers import accepted, rejected
from torch import nn

import tpt
from tpt.exercises import (
    SOFTMAX_OPS,
    ExerciseError,
    call_answer,
    case_generator,
    check_gradients,
    checks,
    expect_close,
    op_counts_by_size,
    record_ops,
)


# --------------------------------------------------------------------------------------
# Regras pelo que roda: apelidos, argumentos padrão, partial e nomes ATen dão no mesmo núcleo
# --------------------------------------------------------------------------------------
def softmax_in_default(x, _sm=torch.softmax):
    return _sm(x, dim=-1)


HIDDEN = functools.partial(F.softmax, dim=-1)


@pytest.mark.parametrize(
    "answer",
    [
        lambda x: torch.softmax(x, -1),
        softmax_in_default,
        HIDDEN,
        lambda x: torch._softmax(x, -1, False),
        lambda x: torch.ops.aten._softmax(x, -1, False),
        lambda x: x.log_softmax(-1).exp(),
        lambda x: torch.nn.Softmax(dim=-1)(x),
    ],
    ids=[
        "direto",
        "argumento-padrao",
        "partial",
        "torch._softmax",
        "aten",
        "log_softmax",
        "modulo",
    ],
)
def test_softmax_is_seen_whatever_the_name(answer):
    with record_ops() as ops:
        answer(torch.randn(2, 5))
    assert ops.used(SOFTMAX_OPS)


def test_hand_written_softmax_uses_no_softmax_kernel():
    def by_hand(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    with record_ops() as ops:
        by_hand(torch.randn(2, 5))
    assert not ops.used(SOFTMAX_OPS) and ops.count("exp") == 1


def test_attention_kernel_is_counted():
    q = torch.randn(1, 2, 4, 8)
    with record_ops() as ops:
        F.scaled_dot_product_attention(q, q, q)
    assert ops.count("_scaled_dot_product_flash_attention_for_cpu") == 1


# --------------------------------------------------------------------------------------
# "Sem laços": o número de operações não cresce com o tamanho
# --------------------------------------------------------------------------------------
def _helper(row):
    return row * 2


LOOPY = {
    "for": lambda x: torch.stack([r * 2 for r in x]),
    "map": lambda x: torch.stack(list(map(lambda r: r * 2, x))),
    "auxiliar": lambda x: torch.stack([_helper(r) for r in x.unbind(0)]),
}


@pytest.mark.parametrize("name", sorted(LOOPY))
def test_hidden_loops_grow_with_size(name):
    small, large = op_counts_by_size(LOOPY[name], lambda n: (torch.randn(n, 3),), (4, 9))
    assert large > small


def test_vectorized_answer_does_not_grow():
    small, large = op_counts_by_size(lambda x: x * 2, lambda n: (torch.randn(n, 3),), (4, 9))
    assert small == large


# --------------------------------------------------------------------------------------
# Entradas intactas
# --------------------------------------------------------------------------------------
def test_in_place_tensor_change_is_named():
    scores = torch.randn(3, 4)

    def sneaky(s):
        s.sub_(s.amax(-1, keepdim=True))
        return s

    with pytest.raises(ExerciseError, match="modificou `scores` no lugar"):
        call_answer(sneaky, {"scores": scores}, "Para o caso 1")


def test_in_place_change_that_restores_values_is_still_seen():
    x = torch.randn(3)

    def add_and_undo(v):
        v += 1
        v -= 1
        return v * 2

    with pytest.raises(ExerciseError, match="`x`"):
        call_answer(add_and_undo, {"x": x}, "No caso")


def test_list_and_dict_changes_are_named():
    tokens = ["a", "b"]
    with pytest.raises(ExerciseError, match="`tokens`"):
        call_answer(lambda t: t.insert(0, "<bos>") or t, {"tokens": tokens}, "No caso")
    vocab = {"a": 0}
    with pytest.raises(ExerciseError, match="`vocab`"):
        call_answer(lambda v: v.setdefault("<unk>", 1), {"vocab": vocab}, "No caso")


def test_tensors_inside_a_list_are_guarded():
    batch = [torch.zeros(2), torch.ones(3)]
    with pytest.raises(ExerciseError, match="`batch`"):
        call_answer(lambda b: b[0].fill_(7), {"batch": batch}, "No caso")


def test_clean_answer_passes_and_returns():
    x = torch.randn(3)
    assert torch.equal(call_answer(lambda v: v * 2, {"x": x}, "No caso"), x * 2)


def test_student_error_is_explained_and_pending_passes_through():
    with pytest.raises(ExerciseError, match="levantou ZeroDivisionError.*dica"):
        call_answer(lambda v: 1 / 0, {"x": 1}, "No caso", hint="dica")

    def pending(x):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        call_answer(pending, {"x": 1}, "No caso")


# --------------------------------------------------------------------------------------
# Gradientes
# --------------------------------------------------------------------------------------
def reference_scale(x, w):
    return torch.tanh(x @ w)


def test_gradients_of_a_correct_answer_match():
    inputs = {"x": torch.randn(3, 4), "w": torch.randn(4, 2)}
    check_gradients(lambda x, w: torch.tanh(torch.matmul(x, w)), reference_scale, inputs, "No caso")


@pytest.mark.parametrize(
    "wrong",
    [
        lambda x, w: torch.tanh(x @ w).detach(),
        lambda x, w: torch.tensor(torch.tanh(x @ w).tolist()),
    ],
    ids=["detach", "tolist"],
)
def test_answers_cut_from_the_graph_are_rejected(wrong):
    inputs = {"x": torch.randn(3, 4), "w": torch.randn(4, 2)}
    with pytest.raises(ExerciseError, match="não tem gradiente"):
        check_gradients(wrong, reference_scale, inputs, "No caso")


def test_no_grad_inside_the_answer_is_rejected():
    def under_no_grad(x, w):
        with torch.no_grad():
            return torch.tanh(x @ w)

    with pytest.raises(ExerciseError, match="não tem gradiente"):
        check_gradients(
            under_no_grad,
            reference_scale,
            {"x": torch.randn(2, 4), "w": torch.randn(4, 2)},
            "No caso",
        )


def test_partly_detached_answer_is_rejected_by_gradient():
    def half(x, w):
        return torch.tanh(x @ w.detach())

    with pytest.raises(ExerciseError, match="`w`"):
        check_gradients(
            half, reference_scale, {"x": torch.randn(2, 4), "w": torch.randn(4, 2)}, "No caso"
        )


def test_module_parameters_are_compared():
    lin = torch.nn.Linear(4, 2)

    def ref(x, m):
        return m(x).relu()

    def wrong(x, m):
        return F.linear(x, m.weight.detach(), m.bias).relu() + 0 * m.weight.sum()

    check_gradients(ref, ref, {"x": torch.randn(3, 4), "m": lin}, "No caso")
    with pytest.raises(ExerciseError, match="m.weight"):
        check_gradients(wrong, ref, {"x": torch.randn(3, 4), "m": lin}, "No caso")


# --------------------------------------------------------------------------------------
# Mensagens verdadeiras e casos sorteados
# --------------------------------------------------------------------------------------
def test_diagnosis_only_when_the_variant_matches():
    expected = torch.tensor([1.0, 2.0])
    variants = [("dividiu por d em vez de √d.", torch.tensor([0.5, 1.0]))]
    with pytest.raises(ExerciseError, match="dividiu por d"):
        expect_close(torch.tensor([0.5, 1.0]), expected, "No caso", variants=variants)
    with pytest.raises(ExerciseError) as err:
        expect_close(torch.tensor([3.0, 1.0]), expected, "No caso", variants=variants)
    assert "dividiu" not in str(err.value) and "maior diferença 2,00e+00" in str(err.value)
    with pytest.raises(ExerciseError, match=r"forma \(2,\)"):
        expect_close(torch.zeros(3), expected, "No caso")
    expect_close(expected + 1e-7, expected, "No caso")


def test_case_generator_draws_a_new_seed_each_run():
    seeds = {case_generator()[1] for _ in range(5)}
    assert len(seeds) == 5
    g, seed = case_generator(7)
    assert seed == 7 and torch.equal(
        torch.randn(3, generator=g), torch.randn(3, generator=torch.Generator().manual_seed(7))
    )


def test_shared_memory_sees_views_and_wrapped_parameters():
    from tpt.exercises.guards import shared_memory

    w, b = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(3))
    originals = {"linear.weight": w, "linear.bias": b}
    received = {
        "a": w.detach(),  # o mesmo armazenamento
        "b": nn.Parameter(w.detach()[1:]),  # uma vista, embrulhada em Parameter
        "c": w.detach().clone(),  # cópia: memória própria
        "d": b.view(3, 1),
        "e": torch.empty(0),  # vazio: não conta
    }
    assert shared_memory(received, originals) == [
        ("a", "linear.weight"),
        ("b", "linear.weight"),
        ("d", "linear.bias"),
    ]


def test_checks_show_only_the_checks():
    ex = checks("attention")
    names = dir(ex)
    assert names and all(not n.startswith("_") for n in names)
    assert all(callable(getattr(ex, n)) or n.isupper() for n in names)
    with pytest.raises(AttributeError, match="não é um dos exercícios"):
        ex._reference_softmax  # noqa: B018
    with pytest.raises(ValueError, match="não há exercícios chamados 'nada'"):
        checks("nada")


# --------------------------------------------------------------------------------------
# Auxiliares que vieram dos módulos dos notebooks
# --------------------------------------------------------------------------------------
def test_python_calls_see_a_function_under_any_name():
    import tpt.masks as masks
    from tpt.exercises import functions_from_file, record_python_calls

    hidden = functools.partial(masks.causal_mask, 3)

    def with_default(t, _f=masks.causal_mask):
        return _f(t)

    for answer in (lambda: masks.causal_mask(3), lambda: hidden(), lambda: with_default(3)):
        with record_python_calls() as ran:
            answer()
        assert "causal_mask" in functions_from_file(ran, masks.__file__)
    with record_python_calls() as ran:
        torch.ones(3, 3, dtype=torch.bool).triu(1)
    assert not functions_from_file(ran, masks.__file__)


def test_modules_that_ran_are_recorded_whatever_the_name():
    from tpt.exercises import record_modules

    class Renamed(torch.nn.Linear):
        pass

    with record_modules() as seen:
        Renamed(2, 2)(torch.randn(1, 2))
    assert Renamed in seen and issubclass(next(iter(seen)), torch.nn.Linear)


def test_torch_calls_see_leaving_pytorch():
    from tpt.exercises import record_torch_calls

    with record_torch_calls() as names:
        torch.randn(3).tolist()
    assert "tolist" in names


def test_watch_autograd_counts_saved_tensors():
    from tpt.exercises import watch_autograd

    x = torch.randn(3, requires_grad=True)
    with watch_autograd() as saved:
        (x * x).sum()
    assert saved[0] > 0
    with watch_autograd() as saved:
        (x.detach() * 2).sum()
    assert saved[0] == 0


def test_twin_variants_give_no_diagnosis_and_nan_places_count():
    from tpt.exercises import same_values, unambiguous

    a = torch.tensor([1.0, float("nan")])
    assert same_values(a, a.clone(), 0.0) and not same_values(a, torch.tensor([1.0, 2.0]), 0.0)
    twins = [("erro A.", torch.zeros(2)), ("erro B.", torch.zeros(2)), ("erro C.", torch.ones(2))]
    assert [d for d, _ in unambiguous(twins, 1e-9)] == ["erro C."]
    with pytest.raises(ExerciseError) as err:
        expect_close(torch.zeros(2), torch.full((2,), 5.0), "No caso", variants=twins)
    assert "erro" not in str(err.value)


def test_seed_note_randint_and_finite_gradient():
    from tpt.exercises import expect_finite_gradient, randint, seed_note

    assert seed_note(None) == "" and seed_note(12) == " (caso sorteado, semente 12)"
    g = torch.Generator().manual_seed(0)
    assert {randint(g, 2, 3) for _ in range(50)} == {2, 3}

    def hidden_division(x):
        return (x / x.sum()).nan_to_num(0.0)

    with pytest.raises(ExerciseError, match="NaN ou infinito.*dica"):
        expect_finite_gradient(hidden_division, {"x": torch.zeros(2, 3)}, "x", "No caso", "dica")
    expect_finite_gradient(lambda x: x * 2, {"x": torch.zeros(2, 3)}, "x", "No caso", "dica")


def test_exercise_seed_variable_fixes_the_drawn_cases(monkeypatch):
    from tpt.exercises.guards import SEED_VARIABLE, case_generator

    monkeypatch.setenv(SEED_VARIABLE, "1234")
    (g1, s1), (g2, s2) = case_generator(), case_generator()
    assert s1 == s2 == 1234
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))
    monkeypatch.setenv(SEED_VARIABLE, "abc")
    with pytest.raises(ValueError, match="TPT_EXERCISE_SEED='abc' não é um inteiro"):
        case_generator()
    monkeypatch.delenv(SEED_VARIABLE)
    assert case_generator()[1] != case_generator()[1]


# --------------------------------------------------------------------------------------
# Classes que passavam pela máquina (issue 26), cada uma por uma conferência de verdade
# --------------------------------------------------------------------------------------
attention_ex = checks("attention")
masks_ex = checks("masks")
generation_ex = checks("generation")
seq2seq_ex = checks("seq2seq")
blocks_ex = checks("blocks")
modern_ex = checks("modern")


def stable_softmax(scores):
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _in_thread_pool(scores):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(torch.softmax, scores, -1).result()


def _in_thread(scores):
    import threading

    out = {}
    worker = threading.Thread(target=lambda: out.update(r=torch.softmax(scores, -1)))
    worker.start()
    worker.join()
    return out["r"]


def _in_low_level_thread(scores):
    import _thread

    done, out = _thread.allocate_lock(), {}
    done.acquire()

    def work():
        out["r"] = torch.softmax(scores, -1)
        done.release()

    _thread.start_new_thread(work, ())
    done.acquire()
    return out["r"]


def _thread_error_swallowed(scores):  # o aluno engole a recusa: ainda é recusado
    try:
        return _in_thread(scores)
    except Exception:
        return stable_softmax(scores)


def _in_subprocess(scores):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return stable_softmax(scores)


def _in_process(scores):
    import multiprocessing

    worker = multiprocessing.get_context("fork").Process(target=print)
    worker.start()
    worker.join()
    return stable_softmax(scores)


def _in_fork(scores):
    import os

    pid = os.fork()
    if pid == 0:  # pragma: no cover - o filho nunca deveria existir
        os._exit(0)
    os.waitpid(pid, 0)
    return stable_softmax(scores)


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (_in_thread_pool, "uma thread nova"),
        (_in_thread, "uma thread nova"),
        (_in_low_level_thread, "uma thread nova"),
        (_thread_error_swallowed, "uma thread nova"),
        (_in_subprocess, "um processo novo"),
        (_in_process, "um processo novo"),
        (_in_fork, "um processo novo"),
    ],
    ids=["ThreadPoolExecutor", "Thread", "_thread", "engolida", "subprocess", "Process", "fork"],
)
def test_work_in_another_thread_or_process_is_refused(answer, what, capsys):
    import threading

    rejected(attention_ex.check_stable_softmax, answer, capsys, what, "outra thread ou processo")
    # tudo volta ao que era: threads funcionam depois da conferência
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    accepted(attention_ex.check_stable_softmax, stable_softmax, capsys)


def test_autograd_in_a_thread_is_refused_in_the_backward_exercise(capsys):
    import concurrent.futures

    def threaded_autograd(query, key, value, grad_output):
        def work():
            leaves = [x.detach().clone().requires_grad_(True) for x in (query, key, value)]
            z = leaves[0] @ leaves[1].transpose(-2, -1) / query.shape[-1] ** 0.5
            return torch.autograd.grad(torch.softmax(z, -1) @ leaves[2], leaves, grad_output)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(work).result()

    rejected(attention_ex.check_attention_backward, threaded_autograd, capsys, "thread nova")


def test_flop_counter_in_a_thread_is_refused(capsys):
    import concurrent.futures

    def measured_in_a_thread(d, d_ff, t):
        def work():
            from torch.utils.flop_counter import FlopCounterMode

            layer = torch.nn.TransformerEncoderLayer(d, 1, d_ff, dropout=0.0, batch_first=True)
            with FlopCounterMode(display=False) as counter, torch.no_grad():
                layer(torch.zeros(1, t, d))
            return counter.get_total_flops()

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(work).result()

    rejected(blocks_ex.check_encoder_layer_flops, measured_in_a_thread, capsys, "thread nova")


def test_guards_are_restored_after_a_check(capsys):
    import _thread
    import os
    import sys
    import threading

    def state():
        # threading._start_new_thread virou _start_joinable_thread no Python 3.13
        names = ("_start_new_thread", "_start_joinable_thread")
        starters = [getattr(threading, n, None) for n in names]
        return (sys.getprofile(), _thread.start_new_thread, *starters, os.fork)

    before = state()
    rejected(attention_ex.check_stable_softmax, _in_thread, capsys)
    accepted(attention_ex.check_stable_softmax, stable_softmax, capsys)
    assert state() == before


# O código da conferência, por qualquer caminho -------------------------------------------
def _reference_by_import(scores):
    import tpt.exercises.attention as hidden

    return hidden._softmax_reference(scores)


def _reference_by_getattr(scores):
    import importlib

    name = "_softmax_reference"
    return getattr(importlib.import_module("tpt.exercises.attention"), name)(scores)


def _reference_by_wrapped_globals(scores):
    check = attention_ex.check_stable_softmax.__wrapped__
    return check.__globals__["_softmax_reference"](scores)


def _reference_in_a_partial(scores):
    import tpt.exercises.attention as hidden

    return functools.partial(hidden._softmax_reference)(scores)


def _reference_by_vmap(scores):
    import tpt.exercises.attention as hidden

    return torch.func.vmap(hidden._softmax_reference)(scores)


@pytest.mark.parametrize(
    "answer",
    [
        _reference_by_import,
        _reference_by_getattr,
        _reference_by_wrapped_globals,
        _reference_in_a_partial,
        _reference_by_vmap,
    ],
    ids=["import", "getattr", "__wrapped__", "partial", "vmap"],
)
def test_check_code_run_by_the_answer_is_refused(answer, capsys):
    rejected(
        attention_ex.check_stable_softmax,
        answer,
        capsys,
        "código da própria conferência",
        "_softmax_reference",
    )


def test_check_helpers_of_other_notebooks_are_refused_too(capsys):
    def penalized_by_the_check(logits, previous, penalty):
        import tpt.exercises.generation as hidden

        return hidden._penalized(logits, previous, penalty)

    def window_by_a_private_helper(t, window):
        import tpt.exercises.masks as hidden

        return next(v for _, v in hidden._window_variants(t, window)) | True

    rejected(generation_ex.check_repetition_penalty, penalized_by_the_check, capsys, "_penalized")
    rejected(masks_ex.check_sliding_window_mask, window_by_a_private_helper, capsys, "conferência")


def test_removing_the_profile_is_refused(capsys):
    import sys

    def unprofiled(scores):
        sys.setprofile(None)
        return stable_softmax(scores)

    def traced(scores):
        sys.settrace(lambda *args: None)
        return stable_softmax(scores)

    rejected(attention_ex.check_stable_softmax, unprofiled, capsys, "sys.setprofile")
    rejected(attention_ex.check_stable_softmax, traced, capsys, "sys.settrace")
    accepted(attention_ex.check_stable_softmax, stable_softmax, capsys)


# Camadas prontas sem __call__ -----------------------------------------------------------
def _pieces_layer(x, sa, ca, ffn, n1, n2, n3):
    layer = tpt.DecoderLayer(x.shape[-1], sa.num_heads, ffn.ff_dim, dropout=0.0, norm_first=True)
    layer.self_attn, layer.cross_attn, layer.ffn = sa, ca, ffn
    layer.norm1, layer.norm2, layer.norm3 = n1, n2, n3
    return layer.eval()


def _forward_unbound(x, memory, pad, sa, ca, ffn, n1, n2, n3):
    layer = _pieces_layer(x, sa, ca, ffn, n1, n2, n3)
    return tpt.DecoderLayer.forward(layer, x, memory, is_causal=True, memory_key_padding_mask=pad)


def _blocks_unbound(x, memory, pad, sa, ca, ffn, n1, n2, n3):
    layer = _pieces_layer(x, sa, ca, ffn, n1, n2, n3)
    x = x + layer._sa_block(n1(x), None, None, True, False, None)
    x = x + layer._ca_block(n2(x), memory, None, pad, False, None)
    return x + ffn(n3(x))


def _torch_forward_unbound(x, memory, pad, sa, ca, ffn, n1, n2, n3):
    d, t = x.shape[-1], x.shape[1]
    layer = nn.TransformerDecoderLayer(d, sa.num_heads, ffn.ff_dim, 0.0, batch_first=True)
    return nn.TransformerDecoderLayer.forward(
        layer.eval(), x, memory, tgt_mask=tpt.causal_mask(t), memory_key_padding_mask=pad
    )


@pytest.mark.parametrize(
    ("answer", "name"),
    [
        (_forward_unbound, "DecoderLayer"),
        (_blocks_unbound, "DecoderLayer"),
        (_torch_forward_unbound, "TransformerDecoderLayer"),
    ],
    ids=["DecoderLayer.forward", "_sa_block-_ca_block", "torch-forward"],
)
def test_ready_layer_methods_run_without_call_are_seen(answer, name, capsys):
    rejected(
        seq2seq_ex.check_pre_norm_decoder_layer, answer, capsys, "camada de decoder pronta", name
    )


def test_pieces_called_by_the_answer_are_not_ready_layers(capsys):
    def pre_norm(x, memory, pad, self_attn, cross_attn, ffn, norm1, norm2, norm3):
        x = x + self_attn(norm1(x), is_causal=True)[0]
        x = x + cross_attn.forward(norm2(x), memory, memory, key_padding_mask=pad)[0]
        return x + ffn.forward(norm3(x))

    accepted(seq2seq_ex.check_pre_norm_decoder_layer, pre_norm, capsys)


# Laços em Python puro ou em numpy ------------------------------------------------------
def window_compare(t, window):
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (j > i) | (j <= i - window)


def window_numpy_vectorized(t, window):
    import numpy as np

    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    return torch.from_numpy((j > i) | (j <= i - window))


def window_by_list(t, window):
    return torch.tensor([[j > i or j <= i - window for j in range(t)] for i in range(t)])


def window_by_numpy_loop(t, window):
    import numpy as np

    mask = np.zeros((t, t), dtype=bool)
    for i in range(t):
        mask[i, i + 1 :] = True
        mask[i, : max(0, i - window + 1)] = True
    return torch.from_numpy(mask)


def left_mask(lengths, t):
    key_is_pad = torch.arange(t)[None, :] < (t - lengths)[:, None]
    return key_is_pad[:, None, None, :] | tpt.causal_mask(t)[None, None]


def left_mask_broadcast(lengths, t):
    pos = torch.arange(t)
    pad = pos.view(1, 1, 1, t) < (t - lengths).view(-1, 1, 1, 1)
    return pad | (pos.view(1, 1, t, 1) < pos.view(1, 1, 1, t))


def left_by_tolist(lengths, t):
    rows = [[[[k < t - n or k > q for k in range(t)] for q in range(t)]] for n in lengths.tolist()]
    return torch.tensor(rows)


def left_by_numpy(lengths, t):
    import numpy as np

    out = np.triu(np.ones((len(lengths), 1, t, t), dtype=bool), 1)
    for row, n in enumerate(lengths.numpy()):
        out[row, :, :, : t - n] = True
    return torch.from_numpy(out)


def penalty(logits, previous, factor):
    seen = logits.gather(-1, previous)
    seen = torch.where(seen > 0, seen / factor, seen * factor)
    return logits.scatter(-1, previous, seen)


def penalty_by_tolist(logits, previous, factor):
    values = logits.tolist()
    for row, tokens in enumerate(previous.tolist()):
        for token in set(tokens):
            v = values[row][token]
            values[row][token] = v / factor if v > 0 else v * factor
    return torch.tensor(values, dtype=logits.dtype)


def penalty_by_numpy(logits, previous, factor):
    import numpy as np

    values, history = logits.numpy().copy(), previous.numpy()
    for row in range(values.shape[0]):
        tokens = np.unique(history[row])
        chosen = values[row, tokens]
        values[row, tokens] = np.where(chosen > 0, chosen / factor, chosen * factor)
    return torch.from_numpy(values)


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (masks_ex.check_sliding_window_mask, window_by_list),
        (masks_ex.check_sliding_window_mask, window_by_numpy_loop),
        (masks_ex.check_left_padded_decoder_mask, left_by_tolist),
        (masks_ex.check_left_padded_decoder_mask, left_by_numpy),
        (generation_ex.check_repetition_penalty, penalty_by_tolist),
        (generation_ex.check_repetition_penalty, penalty_by_numpy),
    ],
    ids=[
        "06ex1-lista",
        "06ex1-numpy",
        "06ex2-tolist",
        "06ex2-numpy",
        "09ex2-tolist",
        "09ex2-numpy",
    ],
)
def test_loops_in_python_or_numpy_are_refused(check, answer, capsys):
    rejected(check, answer, capsys, "Sem laços")


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (masks_ex.check_sliding_window_mask, window_compare),
        (masks_ex.check_sliding_window_mask, window_numpy_vectorized),
        (masks_ex.check_left_padded_decoder_mask, left_mask),
        (masks_ex.check_left_padded_decoder_mask, left_mask_broadcast),
        (generation_ex.check_repetition_penalty, penalty),
    ],
    ids=["06ex1", "06ex1-numpy-vetorizado", "06ex2", "06ex2-broadcasting", "09ex2"],
)
def test_vectorized_answers_still_pass(check, answer, capsys):
    accepted(check, answer, capsys)


def test_python_work_is_measured_only_in_the_answer():
    # Mesmo número de operações do PyTorch; o trabalho em Python cresce só no laço.
    def loop(x):
        return torch.tensor([v * 2 for v in x.tolist()])

    with pytest.raises(ExerciseError, match="Sem laços"):
        op_counts_by_size(loop, lambda n: (torch.arange(n),), (3, 9))
    assert op_counts_by_size(lambda x: x * 2, lambda n: (torch.arange(n),), (3, 9)) == (1, 1)


def test_randsize_covers_a_wide_range():
    from tpt.exercises import randsize

    g = torch.Generator().manual_seed(0)
    drawn = [randsize(g, 1, 1000) for _ in range(300)]
    assert min(drawn) >= 1 and max(drawn) <= 1000
    assert sum(n <= 10 for n in drawn) > 50 and sum(n > 100 for n in drawn) > 50
    with pytest.raises(ValueError, match="low=0"):
        randsize(g, 0, 3)


# Mensagens que enganavam ----------------------------------------------------------------
def test_nan_and_infinity_are_named_not_reported_as_a_huge_difference(capsys):
    with pytest.raises(ExerciseError) as err:
        expect_close(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), "No caso")
    text = str(err.value)
    assert "NaN em 1 posição(ões)" in text and "(1,)" in text and "∞" not in text
    with pytest.raises(ExerciseError) as err:
        expect_close(torch.tensor([float("inf"), 0.0]), torch.tensor([3.0, 0.0]), "No caso")
    assert "infinito" in str(err.value) and "e+308" not in str(err.value)
    with pytest.raises(ExerciseError) as err:
        expect_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("-inf")]), "No caso")
    assert "o esperado tem infinito" in str(err.value)
    # NaN e infinitos iguais dos dois lados não contam como diferença
    expect_close(
        torch.tensor([float("nan"), float("-inf")]),
        torch.tensor([float("nan"), float("-inf")]),
        "ok",
    )

    def overflowing(scores):  # sem subtrair o máximo: exp estoura e dá NaN
        e = torch.exp(scores)
        return e / e.sum(-1, keepdim=True)

    out = rejected(attention_ex.check_stable_softmax, overflowing, capsys, "NaN")
    assert "maior diferença ∞" not in out and "e+308" not in out


def test_in_place_on_a_tensor_saved_by_autograd_is_explained(capsys):
    def divides_in_place(scores):
        e = torch.exp(scores - scores.amax(-1, keepdim=True))
        e.div_(e.sum(-1, keepdim=True))
        return e

    out = rejected(
        attention_ex.check_stable_softmax,
        divides_in_place,
        capsys,
        "guardou para o backward",
        "operação no lugar",
    )
    assert "sua resposta levantou RuntimeError" not in out


def test_float32_arithmetic_on_float64_inputs_is_named_as_precision():
    x = torch.randn(4, 6, dtype=torch.float64)

    def in_float32(x):
        return torch.softmax(x.float(), -1).double()

    with pytest.raises(ExerciseError, match="float32") as err:
        check_gradients(in_float32, lambda x: torch.softmax(x, -1), {"x": x}, "No caso", atol=1e-12)
    assert "passa ao lado do autograd" not in str(err.value)

    def cut(x):  # erro de verdade: uma parte sem gradiente, em float64
        return torch.softmax(x, -1) + 0.1 * x.detach() ** 2

    with pytest.raises(ExerciseError, match="passa ao lado do autograd") as err:
        check_gradients(cut, lambda x: torch.softmax(x, -1) + 0.1 * x**2, {"x": x}, "No caso")
    assert "float32" not in str(err.value)


def test_a_check_function_handed_in_as_the_answer_is_refused(capsys):
    import tpt.exercises.attention as hidden

    for answer in (hidden._softmax_reference, functools.partial(hidden._softmax_reference)):
        rejected(attention_ex.check_stable_softmax, answer, capsys, "código da própria conferência")


def test_the_checks_own_diagnosis_still_comes_with_the_refusal(capsys):
    import tpt.exercises.masks as hidden

    def off_by_one(t, window):  # uma variante errada tirada da conferência
        return hidden._window_variants(t, window)[0][1]

    out = rejected(masks_ex.check_sliding_window_mask, off_by_one, capsys, "_window_variants")
    assert "Além disso" in out


def test_a_callback_the_check_hands_over_may_be_called():
    import tpt.exercises.masks as hidden
    from tpt.exercises import allow_callback, sandbox

    # Uma conferência que entrega uma função sua à resposta marca-a com allow_callback;
    # a resposta pode chamá-la, e só ela.
    def uses_the_callback(describe):
        return describe(True)

    def uses_a_private_helper(t):
        return hidden._window_variants(t, 2)

    allow_callback(hidden._describe)
    with sandbox((uses_the_callback,)) as state:
        call_answer(state.answers[0], {"describe": hidden._describe}, "No caso")
    assert state.violation is None
    with sandbox((uses_a_private_helper,)) as state:
        call_answer(state.answers[0], {"t": 3}, "No caso")
    assert "_window_variants" in state.violation


# --------------------------------------------------------------------------------------
# Peças da conferência ou do PyTorch trocadas pela resposta (e restauradas depois)
# --------------------------------------------------------------------------------------
def _window(t, window):
    i = torch.arange(t)
    return (i[None, :] > i[:, None]) | (i[:, None] - i[None, :] >= window)


def _swapping_answer(owner, name, fake, restore_at=3):
    """Uma resposta errada que troca ``owner.name`` por ``fake`` na primeira chamada e
    desfaz a troca na chamada ``restore_at``: no fim da conferência, tudo parece intacto."""
    original = getattr(owner, name)
    calls = []

    def answer(t, window):
        calls.append(1)
        if len(calls) == 1:
            setattr(owner, name, fake)
        elif len(calls) == restore_at:
            setattr(owner, name, original)
        return torch.zeros(t, t, dtype=torch.bool)  # nada bloqueado: errado

    return answer, original


class _CallableAnswer:
    """Uma resposta que não é função (um objeto chamável): a guarda a acompanha pelo perfil."""

    def __init__(self, answer):
        self.answer = answer

    def __call__(self, t, window):
        return self.answer(t, window)


@pytest.mark.parametrize("as_object", [False, True], ids=["funcao", "objeto"])
@pytest.mark.parametrize(
    "target",
    ["_expect_mask", "expect", "torch.equal", "torch.Tensor.__ne__", "F.layer_norm"],
    ids=["auxiliar", "expect", "torch.equal", "Tensor.__ne__", "F.layer_norm"],
)
def test_check_pieces_swapped_by_the_answer_are_refused(target, as_object, capsys):
    import tpt.exercises.masks as hidden

    owners = {
        "_expect_mask": (hidden, "_expect_mask"),
        "expect": (hidden, "expect"),
        "torch.equal": (torch, "equal"),
        "torch.Tensor.__ne__": (torch.Tensor, "__ne__"),
        "F.layer_norm": (F, "layer_norm"),
    }
    owner, name = owners[target]
    inherited = name not in vars(owner)
    answer, original = _swapping_answer(owner, name, lambda *args, **kwargs: True)
    try:
        out = rejected(
            masks_ex.check_sliding_window_mask,
            _CallableAnswer(answer) if as_object else answer,
            capsys,
            "trocou peças de que a conferência depende",
            f".{name}` foi ",
        )
    finally:
        if inherited:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    assert "correto" not in out
    accepted(masks_ex.check_sliding_window_mask, _window, capsys)
    accepted(masks_ex.check_sliding_window_mask, _CallableAnswer(_window), capsys)


def test_code_of_a_check_helper_swapped_by_the_answer_is_refused(capsys):
    import tpt.exercises.masks as hidden

    original = hidden._expect_mask.__code__

    def answer(t, window):
        hidden._expect_mask.__code__ = (lambda *args, **kwargs: None).__code__
        return torch.zeros(t, t, dtype=torch.bool)

    try:
        rejected(masks_ex.check_sliding_window_mask, answer, capsys, "o código de `tpt.exercises")
    finally:
        hidden._expect_mask.__code__ = original
    accepted(masks_ex.check_sliding_window_mask, _window, capsys)


def test_names_added_that_shadow_something_are_refused(capsys):
    """Um método novo em torch.Tensor esconde o de TensorBase; um global novo no módulo da
    conferência esconde o de builtins."""
    import tpt.exercises.masks as hidden

    def answer(t, window):
        hidden.isinstance = lambda *args: True
        return torch.zeros(t, t, dtype=torch.bool)

    try:
        rejected(
            masks_ex.check_sliding_window_mask,
            answer,
            capsys,
            "`tpt.exercises.masks.isinstance` foi acrescentado",
        )
    finally:
        vars(hidden).pop("isinstance", None)
    accepted(masks_ex.check_sliding_window_mask, _window, capsys)


def test_one_integrity_snapshot_is_shared():
    """A correção, o nbgrader e a guarda usam o mesmo retrato (tpt.exercises.integrity)."""
    import tpt.exercises.guards as guards
    import tpt.exercises.integrity as integrity
    import tpt.turma.integrity as turma_integrity

    assert turma_integrity.Snapshot is integrity.Snapshot
    assert guards.integrity is integrity
    ex = checks("masks")
    snapshot = integrity.Snapshot(ex)
    assert snapshot.changes({"ex": ex}) == []
    assert snapshot.changes({"ex": object()}) == ["`ex` foi trocado por outro objeto"]
    original = F.layer_norm
    F.layer_norm = lambda *args, **kwargs: None
    try:
        assert "`torch.nn.functional.layer_norm` foi trocado" in snapshot.changes()
    finally:
        F.layer_norm = original
    assert snapshot.changes() == []


# --------------------------------------------------------------------------------------
# Sem círculo: a máquina importa num sentido só (messages ← rules ← guards ← core)
# --------------------------------------------------------------------------------------
def _exercise_imports() -> dict[str, set[str]]:
    """Os módulos de tpt/exercises/ que cada um importa (também dentro de funções)."""
    import ast
    from pathlib import Path

    folder = Path(tpt.__file__).parent / "exercises"
    names = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        edges = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                if parts[:2] != ["tpt", "exercises"]:
                    continue
                if len(parts) == 2:
                    edges.add("__init__")
                elif parts[2] in names:
                    edges.add(parts[2])
        edges.discard(path.stem)
    # "from tpt.exercises import integrity" conta como integrity, não como o pacote.
    for stem, edges in graph.items():
        if stem != "__init__" and edges & (names - {"__init__"}) and "__init__" in edges:
            source = (folder / f"{stem}.py").read_text(encoding="utf-8")
            if "from tpt.exercises import (" not in source and not any(
                line.startswith("from tpt.exercises import ") and "," in line
                for line in source.splitlines()
            ):
                edges.discard("__init__")
    return graph


def test_no_import_circle_in_the_exercises_package():
    graph = _exercise_imports()
    machinery = ("messages", "rules", "integrity", "guards", "core")
    assert graph["messages"] == set()
    assert graph["rules"] == {"messages"}
    assert graph["integrity"] == {"messages"}
    assert graph["guards"] == {"messages", "rules", "integrity"}
    assert graph["core"] == {"messages", "guards"}
    assert not graph["__init__"] - set(machinery)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, f"círculo de importação: {' -> '.join([*path, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
