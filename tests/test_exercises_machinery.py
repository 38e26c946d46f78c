"""A máquina comum das conferências (tpt/exercises/core, rules e guards).

Cada classe de resposta errada que a issue de exercícios listou tem aqui o teste que a
barra no nível da máquina; os testes de cada notebook repetem a prova exercício a exercício.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

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
