"""Conferências do notebook 09 (``checks("generation")``).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui: respostas certas em outros estilos, e as erradas de cada
classe (entrada modificada no lugar, regra burlada por apelido, argumento padrão,
``partial`` ou outro caminho, laço escondido, tabela dos casos fixos, enganos típicos),
cada uma recusada com a mensagem certa.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

import tpt
import tpt.generation
from tpt.exercises import checks
from tpt.exercises import generation as module
from tpt.generation import top_p_filter as renamed_filter  # um filtro pronto, outro nome

ex = checks("generation")


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _accepted(check, answer, capsys):
    assert check(answer) is True, capsys.readouterr().out
    assert "✅" in capsys.readouterr().out


def _rejected(check, answer, capsys, *fragments):
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, (fragment, out)
    return out


def test_checks_expose_only_the_checkers():
    assert sorted(dir(ex)) == ["check_cached_attention", "check_min_p", "check_repetition_penalty"]
    for name in ("_min_p_keep", "_penalized", "_cached_variant", "_min_p_fixed_cases"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, name)


@pytest.mark.parametrize(
    "check", [ex.check_min_p, ex.check_repetition_penalty, ex.check_cached_attention]
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


@pytest.mark.parametrize(
    "check", [ex.check_min_p, ex.check_repetition_penalty, ex.check_cached_attention]
)
def test_wrong_signature_is_explained(check, capsys):
    _rejected(check, lambda: None, capsys, "levantou TypeError")


# --------------------------------------------------------------------------------------
# Exercício 1: min-p
# --------------------------------------------------------------------------------------
def min_p(logits, p_min):
    probs = logits.softmax(dim=-1)
    threshold = p_min * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < threshold, float("-inf"))


def test_min_p_correct_styles_pass(capsys):
    def in_log_space(logits, p_min):  # p_i >= p_min p_max  <=>  z_i >= z_max + ln p_min
        top = logits.amax(dim=-1, keepdim=True)
        limit = top + math.log(p_min) if p_min > 0 else torch.full_like(top, float("-inf"))
        return torch.where(logits >= limit, logits, torch.full_like(logits, float("-inf")))

    def in_float64(logits, p_min):
        probs = F.softmax(logits.double(), dim=-1)
        keep = probs >= p_min * probs.max(dim=-1, keepdim=True).values
        return torch.where(keep, logits, float("-inf"))

    def relative_to_top_logit(logits, p_min):  # exp(z - z_max) = p_i / p_max
        ratio = (logits - logits.amax(dim=-1, keepdim=True)).exp()
        return logits.masked_fill(ratio < p_min, float("-inf"))

    for answer in (min_p, in_log_space, in_float64, relative_to_top_logit):
        _accepted(ex.check_min_p, answer, capsys)


def test_min_p_tie_and_strict_inequality(capsys):
    # Empates com o mais provável (p_min = 1): com >=, ficam os três 2 da primeira linha.
    logits = torch.tensor([[2.0, 2, 1, 2, 0], [3.0, 1, 1, 0, -1]])
    kept = torch.isfinite(min_p(logits, 1.0))
    assert kept.sum(-1).tolist() == [3, 1]

    def strict(logits, p_min):  # > no lugar de >=: o caso de empate denuncia
        probs = logits.softmax(dim=-1)
        return logits.masked_fill(~(probs > p_min * probs.amax(dim=-1, keepdim=True)), -math.inf)

    def strict_in_log_space(logits, p_min):  # o mesmo engano, pelo outro caminho
        limit = logits.amax(dim=-1, keepdim=True) + (math.log(p_min) if p_min > 0 else -math.inf)
        return logits.masked_fill(~(logits > limit), -math.inf)

    for answer in (strict, strict_in_log_space):
        _rejected(ex.check_min_p, answer, capsys, "p_min=1", "só com -inf", "não >")


def test_min_p_ready_made_filters_are_refused_whatever_the_name(capsys):
    def through_top_p(logits, p_min):  # um filtro do tpt, mesmo que o resultado venha de min_p
        tpt.generation.top_p_filter(logits, 0.5)
        return min_p(logits, p_min)

    def default_argument(logits, p_min, _f=renamed_filter):
        _f(logits, 1.0)
        return min_p(logits, p_min)

    def by_getattr(logits, p_min):
        getattr(tpt.generation, "top_k_" + "filter")(logits, 1)
        return min_p(logits, p_min)

    partial = functools.partial(
        lambda f, logits, p_min: (f(logits, 1.0), min_p(logits, p_min))[1],
        tpt.generation.apply_temperature,
    )
    for answer in (through_top_p, default_argument, by_getattr, partial):
        _rejected(ex.check_min_p, answer, capsys, "filtro pronto", "tpt.generation")


def test_min_p_in_place_is_rejected(capsys):
    def in_place(logits, p_min):
        out = min_p(logits, p_min)
        return logits.masked_fill_(out.isneginf(), float("-inf"))

    _rejected(ex.check_min_p, in_place, capsys, "modificou `logits` no lugar")


def test_min_p_loops_are_rejected(capsys):
    def for_rows(logits, p_min):
        return torch.stack([min_p(row[None], p_min)[0] for row in logits])

    def _one_row(row, p_min):
        return min_p(row[None], p_min)[0]

    def with_map(logits, p_min):
        return torch.stack(list(map(lambda row: _one_row(row, p_min), logits)))

    for answer in (for_rows, with_map):
        _rejected(ex.check_min_p, answer, capsys, "sem laços", "não cresce")


def test_min_p_table_of_fixed_cases_is_rejected(capsys):
    table = [(logits, p, min_p(logits, p)) for _, logits, p in module._min_p_fixed_cases()]

    def lookup(logits, p_min):
        for known, known_p, answer in table:
            if known.shape == logits.shape and torch.equal(known, logits) and known_p == p_min:
                return answer.clone()
        return logits.clone()

    _rejected(ex.check_min_p, lookup, capsys, "caso sorteado, semente", "devia sair")


def test_min_p_typical_mistakes_are_diagnosed(capsys):
    def absolute(logits, p_min):
        return logits.masked_fill(logits.softmax(-1) < p_min, float("-inf"))

    def on_logits(logits, p_min):
        return logits.masked_fill(logits < p_min * logits.amax(-1, keepdim=True), float("-inf"))

    def batch_max(logits, p_min):
        probs = logits.softmax(-1)
        return logits.masked_fill(probs < p_min * probs.max(), float("-inf"))

    def inverted(logits, p_min):
        probs = logits.softmax(-1)
        return logits.masked_fill(probs >= p_min * probs.amax(-1, keepdim=True), float("-inf"))

    def probabilities(logits, p_min):
        probs = logits.softmax(-1)
        return probs.masked_fill(min_p(logits, p_min).isneginf(), float("-inf"))

    def zeros(logits, p_min):
        out = min_p(logits, p_min)
        return out.masked_fill(out.isneginf() & logits.isfinite(), 0.0)

    def manual_exp(logits, p_min):
        e = logits.exp()
        probs = e / e.sum(-1, keepdim=True)
        return logits.masked_fill(probs < p_min * probs.amax(-1, keepdim=True), float("-inf"))

    def manual_exp_ge(logits, p_min):  # o mesmo estouro, com a comparação ao contrário
        e = logits.exp()
        probs = e / e.sum(-1, keepdim=True)
        return torch.where(probs >= p_min * probs.amax(-1, keepdim=True), logits, -math.inf)

    for answer, fragment in [
        (manual_exp_ge, "estoura com logits"),
        (absolute, "absoluto"),
        (on_logits, "aplicado aos logits"),
        (batch_max, "lote inteiro"),
        (inverted, "invertida"),
        (probabilities, "devolveu probabilidades"),
        (zeros, "viraram 0"),
        (manual_exp, "estoura com logits"),
    ]:
        _rejected(ex.check_min_p, answer, capsys, fragment)


def test_min_p_other_mistakes_get_the_facts(capsys):
    def keeps_one_too_many(logits, p_min):  # nenhuma variante conhecida: só os fatos
        out = min_p(logits, p_min)
        second = logits.masked_fill(torch.isfinite(out), float("-inf")).argmax(-1, keepdim=True)
        return out.scatter(-1, second, logits.gather(-1, second))

    def nan_inside(logits, p_min):
        out = min_p(logits, p_min)
        return out.masked_fill(logits == logits.amax(-1, keepdim=True), float("nan"))

    def scaled(logits, p_min):
        out = min_p(logits, p_min)
        return out * 0.5

    _rejected(ex.check_min_p, keeps_one_too_many, capsys, "devia sair", "-inf")
    _rejected(ex.check_min_p, nan_inside, capsys, "NaN ali")
    out = _rejected(ex.check_min_p, scaled, capsys, "os logits deles mudaram")
    assert "inf" not in out.split("mudaram")[1].split("(")[0]


# --------------------------------------------------------------------------------------
# Exercício 2: penalidade de repetição
# --------------------------------------------------------------------------------------
def repetition_penalty(logits, previous, penalty):
    seen = logits.gather(-1, previous)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, seen)


def test_penalty_correct_styles_pass(capsys):
    def with_mask(logits, previous, penalty):
        seen = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, previous, True)
        penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
        return torch.where(seen, penalized, logits)

    def with_one_hot(logits, previous, penalty):
        seen = F.one_hot(previous, logits.shape[-1]).any(dim=1)  # (b, V)
        factor = torch.where(logits > 0, 1 / penalty, penalty)
        return torch.where(seen, logits * factor, logits)

    for answer in (repetition_penalty, with_mask, with_one_hot):
        _accepted(ex.check_repetition_penalty, answer, capsys)


def test_penalty_in_place_is_rejected(capsys):
    def changes_logits(logits, previous, penalty):
        return logits.copy_(repetition_penalty(logits, previous, penalty))

    def sorts_previous(logits, previous, penalty):
        previous.copy_(previous.sort(dim=-1).values)  # o histórico é do chamador
        return repetition_penalty(logits, previous, penalty)

    _rejected(ex.check_repetition_penalty, changes_logits, capsys, "modificou `logits` no lugar")
    _rejected(ex.check_repetition_penalty, sorts_previous, capsys, "modificou `previous` no lugar")


def test_penalty_loops_are_rejected_wherever_they_hide(capsys):
    def for_rows(logits, previous, penalty):
        out = logits.clone()
        for row in range(logits.shape[0]):
            for token in set(previous[row].tolist()):
                value = out[row, token]
                out[row, token] = value / penalty if value > 0 else value * penalty
        return out

    def with_map(logits, previous, penalty):
        rows = map(
            lambda lp: repetition_penalty(lp[0][None], lp[1][None], penalty)[0],
            zip(logits, previous, strict=True),
        )
        return torch.stack(list(rows))

    def _one_row(logits, previous, penalty):
        return repetition_penalty(logits[None], previous[None], penalty)[0]

    def with_helper(logits, previous, penalty):
        return torch.stack([_one_row(x, p, penalty) for x, p in zip(logits, previous, strict=True)])

    def over_tokens(logits, previous, penalty):
        out = logits
        for j in range(previous.shape[1]):
            seen = torch.zeros_like(logits, dtype=torch.bool).scatter(
                -1, previous[:, j : j + 1], True
            )
            out = torch.where(
                seen & (out == logits),
                torch.where(logits > 0, logits / penalty, logits * penalty),
                out,
            )
        return out

    for answer in (for_rows, with_map, with_helper, over_tokens):
        _rejected(ex.check_repetition_penalty, answer, capsys, "sem laços", "não cresce")


def test_penalty_table_of_fixed_cases_is_rejected(capsys):
    ((_, fixed_logits, fixed_previous, fixed_penalty),) = module._penalty_fixed_cases()
    answer_table = repetition_penalty(fixed_logits, fixed_previous, fixed_penalty)

    def lookup(logits, previous, penalty):
        if logits.shape == fixed_logits.shape and torch.equal(logits, fixed_logits):
            return answer_table.clone()
        return logits.clone()

    _rejected(
        ex.check_repetition_penalty, lookup, capsys, "caso sorteado, semente", "difere do esperado"
    )


def test_penalty_typical_mistakes_are_diagnosed(capsys):
    def divides_all(logits, previous, penalty):
        return logits.scatter(-1, previous, logits.gather(-1, previous) / penalty)

    def inverted(logits, previous, penalty):
        seen = logits.gather(-1, previous)
        return logits.scatter(-1, previous, torch.where(seen > 0, seen * penalty, seen / penalty))

    def per_occurrence(logits, previous, penalty):
        counts = torch.zeros_like(logits).scatter_add(
            -1, previous, torch.ones_like(previous, dtype=logits.dtype)
        )
        factor = penalty**counts
        return torch.where(logits > 0, logits / factor, logits * factor)

    def first_row(logits, previous, penalty):
        return repetition_penalty(logits, previous[:1].expand_as(previous), penalty)

    def everything(logits, previous, penalty):
        return torch.where(logits > 0, logits / penalty, logits * penalty)

    for answer, fragment in [
        (divides_all, "AUMENTA a chance"),
        (inverted, "sinal está trocado"),
        (per_occurrence, "POR OCORRÊNCIA"),
        (first_row, "histórico da primeira"),
        (everything, "todos os tokens foram penalizados"),
    ]:
        _rejected(ex.check_repetition_penalty, answer, capsys, fragment)


# --------------------------------------------------------------------------------------
# Exercício 3: atenção com cache
# --------------------------------------------------------------------------------------
def _split(x, h):
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)


def cached_attention(mha, x_new, cache):
    b, t, d = x_new.shape
    q, k, v = (_split(z, mha.num_heads) for z in mha.project_qkv(x_new))
    k, v = cache.update(k, v)
    out, _ = tpt.scaled_dot_product_attention(q, k, v, is_causal=True)
    return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))


def test_cached_correct_styles_pass(capsys):
    def with_f_sdpa_and_weights(mha, x_new, cache):  # F.linear com os pesos empilhados
        b, t, d = x_new.shape
        qkv = F.linear(x_new, mha.qkv_proj.weight, mha.qkv_proj.bias)
        q, k, v = (_split(z, mha.num_heads) for z in qkv.split(d, dim=-1))
        k, v = cache.update(k, v)
        allowed = ~tpt.causal_mask(t, k.shape[-2])  # True = pode atender (convenção do F)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    def by_hand(mha, x_new, cache):
        b, t, d = x_new.shape
        q, k, v = (_split(z, mha.num_heads) for z in mha.project_qkv(x_new))
        k, v = cache.update(k, v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(mha.head_dim)
        scores = scores.masked_fill(tpt.causal_mask(t, k.shape[-2]), float("-inf"))
        return mha.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    for answer in (cached_attention, with_f_sdpa_and_weights, by_hand):
        _accepted(ex.check_cached_attention, answer, capsys)


def test_cached_calling_the_module_is_rejected_whatever_the_name(capsys):
    def calls_module(mha, x_new, cache):
        return mha(x_new, cache=cache, is_causal=True)[0]

    def calls_forward(mha, x_new, cache):
        return mha.forward(x_new, cache=cache, is_causal=True)[0]

    def from_the_class(mha, x_new, cache, _f=tpt.MultiHeadAttention.forward):
        return _f(mha, x_new, cache=cache, is_causal=True)[0]

    through_partial = functools.partial(
        lambda call, mha, x_new, cache: call(mha, x_new, cache=cache, is_causal=True)[0],
        type(tpt.MultiHeadAttention(4, 2)).__call__,
    )

    for answer in (calls_module, calls_forward, from_the_class, through_partial):
        _rejected(ex.check_cached_attention, answer, capsys, "própria MultiHeadAttention")


def test_cached_in_place_is_rejected(capsys):
    def scales_x_new(mha, x_new, cache):
        out = cached_attention(mha, x_new, cache)
        x_new.mul_(2.0)
        return out

    def touches_weights(mha, x_new, cache):
        mha.out_proj.weight.mul_(1.0)  # mesmo valor, mas um passo no lugar nos pesos
        return cached_attention(mha, x_new, cache)

    _rejected(ex.check_cached_attention, scales_x_new, capsys, "modificou `x_new` no lugar")
    _rejected(ex.check_cached_attention, touches_weights, capsys, "modificou `mha` no lugar")


def _variant(mask="bottom", scale="d_h", out_proj=True, update=True, transpose=True):
    def answer(mha, x_new, cache):
        b, t, d = x_new.shape
        h, d_h = mha.num_heads, mha.head_dim
        if transpose:
            q, k, v = (_split(z, h) for z in mha.project_qkv(x_new))
        else:
            q, k, v = (z.reshape(b, h, t, d_h) for z in mha.project_qkv(x_new))
        if update:
            k, v = cache.update(k, v)
        elif update is None:
            cache.update(k, v)  # guarda, mas atende só aos novos
        s = k.shape[-2]
        divisor = {"d_h": math.sqrt(d_h), "none": 1.0, "d": math.sqrt(d), "d_h_raw": d_h}[scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if mask == "bottom":
            scores = scores.masked_fill(tpt.causal_mask(t, s), float("-inf"))
        elif mask == "top":
            scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return mha.out_proj(out) if out_proj else out

    return answer


def test_cached_typical_mistakes_are_diagnosed(capsys):
    def f_is_causal(mha, x_new, cache):  # is_causal do F alinha pelo começo
        b, t, d = x_new.shape
        q, k, v = (_split(z, mha.num_heads) for z in mha.project_qkv(x_new))
        k, v = cache.update(k, v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    _accepted(ex.check_cached_attention, _variant(), capsys)
    for answer, fragment in [
        (_variant(mask="none"), "máscara causal ficou de fora"),
        (_variant(mask="top"), "alinhada pelo COMEÇO"),
        (f_is_causal, "alinhada pelo COMEÇO"),
        (_variant(scale="none"), "faltou dividir"),
        (_variant(scale="d"), "sqrt(d), a largura do modelo"),
        (_variant(scale="d_h_raw"), "divididas por d_h"),
        (_variant(out_proj=False), "mha.out_proj"),
        (_variant(update=None), "olhou só para os tokens novos"),
        (_variant(transpose=False), "misturou posições"),
    ]:
        _rejected(ex.check_cached_attention, answer, capsys, fragment)


def test_cached_cache_not_updated_is_reported(capsys):
    _rejected(
        ex.check_cached_attention, _variant(update=False), capsys, "o cache tem 0", "cache.update"
    )


def test_cached_wrong_shape_is_reported(capsys):
    def only_last(mha, x_new, cache):
        return cached_attention(mha, x_new, cache)[:, -1]

    _rejected(ex.check_cached_attention, only_last, capsys, "(b, t, d) = (2, 4, 16)")


def test_checks_leave_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_cached_attention(cached_attention)
    assert torch.equal(torch.rand(3), expected)


def test_cached_reprojecting_the_stored_sequence_is_rejected(capsys):
    """Guardar as entradas e projetar a sequência inteira a cada passo dá a saída certa, mas
    refaz o trabalho que o cache existe para poupar."""

    def reprojects(mha, x_new, cache):
        b, t, d = x_new.shape
        history = cache.__dict__.setdefault("_inputs", [])  # as entradas de todos os pedaços
        history.append(x_new)
        q, k, v = (_split(z, mha.num_heads) for z in mha.project_qkv(torch.cat(history, dim=1)))
        cache.update(k[:, :, -t:], v[:, :, -t:])  # o cache fica com o tamanho certo
        out, _ = tpt.scaled_dot_product_attention(q[:, :, -t:], k, v, is_causal=True)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    def reprojects_a_copy(mha, x_new, cache):  # uma cópia da matriz continua sendo ela
        b, t, d = x_new.shape
        weight = mha.qkv_proj.weight.clone().double().float()
        history = cache.__dict__.setdefault("_inputs", [])
        history.append(x_new)
        q, k, v = (
            _split(z, mha.num_heads)
            for z in F.linear(torch.cat(history, dim=1), weight, mha.qkv_proj.bias).split(d, -1)
        )
        cache.update(k[:, :, -t:], v[:, :, -t:])
        out, _ = tpt.scaled_dot_product_attention(q[:, :, -t:], k, v, is_causal=True)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    def separate_blocks(mha, x_new, cache):  # certo: três multiplicações, uma por bloco
        b, t, d = x_new.shape
        w_q, w_k, w_v = mha.qkv_proj.weight.split(d, dim=0)
        b_q, b_k, b_v = mha.qkv_proj.bias.split(d, dim=0)
        q, k, v = (
            _split(x_new @ w.T + bias, mha.num_heads)
            for w, bias in ((w_q, b_q), (w_k, b_k), (w_v, b_v))
        )
        k, v = cache.update(k, v)
        out, _ = tpt.scaled_dot_product_attention(q, k, v, is_causal=True)
        return mha.out_proj(out.transpose(1, 2).reshape(b, t, d))

    _accepted(ex.check_cached_attention, separate_blocks, capsys)
    for answer in (reprojects, reprojects_a_copy):
        out = _rejected(ex.check_cached_attention, answer, capsys, "projetar 10 posições")
        assert "b × t = 2" in out and "pedaço 2" in out, out


def test_min_p_threshold_is_exact_and_float32_answers_still_pass(capsys):
    # Um token logo abaixo do limiar (e outro logo acima): uma tolerância o deixa ficar.
    def with_tolerance(logits, p_min):
        probs = logits.softmax(dim=-1)
        threshold = p_min * probs.amax(dim=-1, keepdim=True)
        return logits.masked_fill(probs < threshold - 1e-6, float("-inf"))

    def with_isclose(logits, p_min):
        probs = logits.softmax(dim=-1)
        threshold = p_min * probs.amax(dim=-1, keepdim=True)
        keep = (probs >= threshold) | torch.isclose(probs, threshold.expand_as(probs))
        return logits.masked_fill(~keep, float("-inf"))

    def log_softmax_style(logits, p_min):  # outro estilo certo, em float32
        logp = logits.log_softmax(dim=-1)
        limit = logp.amax(dim=-1, keepdim=True) + (math.log(p_min) if p_min > 0 else -math.inf)
        return logits.masked_fill(logp < limit, float("-inf"))

    for answer in (with_tolerance, with_isclose):
        _rejected(
            ex.check_min_p,
            answer,
            capsys,
            "logo abaixo do limiar",
            "o token 1 da linha 0 devia sair",
        )
    _accepted(ex.check_min_p, log_softmax_style, capsys)
    # Folga: em float32, as respostas certas erram a razão p_i / p_max bem menos que a
    # distância dos dois tokens ao limiar.
    _, logits, _ = module._threshold_case()
    probs = logits.softmax(dim=-1)
    exact = (logits.double() - logits.double().amax(dim=-1, keepdim=True)).exp()
    for ratio in (
        probs.double() / probs.amax(dim=-1, keepdim=True).double(),
        (logits - logits.amax(dim=-1, keepdim=True)).exp().double(),
    ):
        relative = (ratio / exact - 1)[0, [1, 3]].abs().max()
        assert float(relative) < module._NEAR / 10


def test_min_p_loop_over_the_vocabulary_is_rejected(capsys):
    def for_tokens(logits, p_min):  # o lote inteiro de uma vez, mas um token por vez
        probs = logits.softmax(dim=-1)
        threshold = p_min * probs.amax(dim=-1)  # (b,)
        columns = [
            torch.where(probs[:, j] >= threshold, logits[:, j], float("-inf"))
            for j in range(logits.shape[-1])
        ]
        return torch.stack(columns, dim=-1)

    _rejected(ex.check_min_p, for_tokens, capsys, "sem laços", "V=24", "V=72")
