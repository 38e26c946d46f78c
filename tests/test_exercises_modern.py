"""Conferências do notebook 10 (``checks("modern")``).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui: respostas certas em outros estilos, e as erradas de cada
classe (entrada modificada no lugar, gradiente cortado, regra burlada por apelido,
argumento padrão, ``partial`` ou nome ATen, cópias de K/V de cinco jeitos, tabela dos
casos fixos, enganos típicos), cada uma recusada com a mensagem certa.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpt
from tpt.exercises import checks
from tpt.exercises import modern as module
from tpt.positional import apply_rope as renamed_apply_rope

ex = checks("modern")


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
    assert sorted(dir(ex)) == ["check_gqa_attention", "check_rolling_step", "check_rope_half"]
    for name in ("_rope_half", "_gqa", "_attend", "_window_reference", "_ROPE_VARIANTS"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, name)


@pytest.mark.parametrize(
    "check", [ex.check_rope_half, ex.check_gqa_attention, ex.check_rolling_step]
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: RoPE metade e metade
# --------------------------------------------------------------------------------------
def rope_half(x, theta=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    freqs = theta ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def test_rope_half_correct_styles_pass(capsys):
    def with_chunks_in_float32(x, theta=10000.0):
        d = x.shape[-1]
        x1, x2 = x.float().chunk(2, dim=-1)
        inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
        ang = torch.outer(torch.arange(x.shape[-2]).float(), inv)
        return torch.cat((x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()), -1)

    def with_complex(x, theta=10000.0):
        d = x.shape[-1]
        z = torch.complex(x[..., : d // 2], x[..., d // 2 :])
        ang = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta ** (
            -torch.arange(0, d, 2, dtype=torch.float64) / d
        )
        z = z * torch.polar(torch.ones_like(ang), ang)
        return torch.cat((z.real, z.imag), dim=-1)

    for answer in (rope_half, with_chunks_in_float32, with_complex):
        _accepted(ex.check_rope_half, answer, capsys)


def _through_tpt(x, theta, rope_class=tpt.RotaryEmbedding):
    d = x.shape[-1]
    perm = torch.stack((torch.arange(d // 2), torch.arange(d // 2) + d // 2), -1).flatten()
    rope = rope_class(d, max_len=x.shape[-2], theta=theta).to(x.dtype)
    return rope(x[..., perm])[..., perm.argsort()]


def test_rope_half_rule_is_what_runs(capsys):
    def direct(x, theta=10000.0):  # converte o arranjo e usa o tpt
        return _through_tpt(x, theta)

    def default_argument(x, theta=10000.0, _apply=tpt.apply_rope):
        t, d = x.shape[-2], x.shape[-1]
        return _apply(x, torch.ones(t, d, dtype=x.dtype), torch.zeros(t, d, dtype=x.dtype))

    partial = functools.partial(_through_tpt, rope_class=tpt.positional.RotaryEmbedding)

    def alias(x, theta=10000.0):  # from tpt.positional import apply_rope as girar
        t, d = x.shape[-2], x.shape[-1]
        return renamed_apply_rope(
            x, torch.ones(t, d, dtype=x.dtype), torch.zeros(t, d, dtype=x.dtype)
        )

    def reads_the_tables(x, theta=10000.0):  # monta o módulo e lê só as tabelas de cos e sin
        t, d = x.shape[-2], x.shape[-1]
        rope = tpt.RotaryEmbedding(d, max_len=t, theta=theta)
        cos, sin = rope.cos[:, 0::2].to(x.dtype), rope.sin[:, 0::2].to(x.dtype)  # (t, d/2)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def sinusoidal_tables(x, theta=10000.0):  # os ângulos da codificação senoidal do tpt
        t, d = x.shape[-2], x.shape[-1]
        pe = tpt.positional.sinusoidal_encoding(t, d, theta).to(x.dtype)  # (t, d)
        sin, cos = pe[:, 0::2], pe[:, 1::2]  # (t, d/2)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    x = torch.randn(2, 5, 6, dtype=torch.float64)
    for tables in (reads_the_tables, sinusoidal_tables):  # sem a regra, estariam certas
        assert torch.allclose(tables(x, 500.0), rope_half(x, 500.0))
    for answer in (direct, default_argument, partial, alias, reads_the_tables, sinusoidal_tables):
        _rejected(ex.check_rope_half, answer, capsys, "tpt/positional.py")


def test_rope_half_in_place_and_cut_gradient_are_rejected(capsys):
    def in_place(x, theta=10000.0):
        out = rope_half(x, theta)
        x.zero_()
        return out

    def under_no_grad(x, theta=10000.0):
        with torch.no_grad():
            return rope_half(x, theta)

    def detached(x, theta=10000.0):
        return rope_half(x.detach(), theta)

    _rejected(ex.check_rope_half, in_place, capsys, "modificou `x` no lugar")
    for answer in (under_no_grad, detached):
        _rejected(ex.check_rope_half, answer, capsys, "não tem gradiente")


def test_rope_half_table_of_fixed_cases_is_rejected(capsys):
    seen = {}

    def memorizes_shapes(x, theta=10000.0):  # "sabe" os casos fixos pela forma
        if x.shape in {(1, 6, 8), (2, 3, 5, 16), (7, 4)}:
            return rope_half(x, theta)
        seen[x.shape] = True
        return x.clone()

    _rejected(ex.check_rope_half, memorizes_shapes, capsys, "caso sorteado, semente")
    assert seen


def test_rope_half_typical_mistakes_are_diagnosed(capsys):
    def pairs(x, theta=10000.0):
        return module._rope_pairs(x, theta)

    def interleaved_angles(x, theta=10000.0):
        return module._rope_half(x, theta, angles="interleave")

    for answer, fragment in [
        (pairs, "pares de coordenadas vizinhas"),
        (interleaved_angles, "torch.cat((f, f))"),
        (lambda x, th: module._rope_half(x, th, sign=-1.0), "sentido contrário"),
        (lambda x, th: module._rope_half(x, th, scale=1.0), "expoente"),
        (lambda x, th: module._rope_half(x, th, start=1), "começam em 0"),
        (lambda x, th: 2 * rope_half(x, th), "a norma de algum vetor mudou"),
        (lambda x, th: rope_half(x, 10000.0), "theta=100"),
        (lambda x, th: rope_half(x, th)[..., :-1, :], "esperava o resultado com forma"),
    ]:
        _rejected(ex.check_rope_half, answer, capsys, fragment)


# --------------------------------------------------------------------------------------
# Exercício 2: GQA sem repetir K e V
# --------------------------------------------------------------------------------------
def gqa_view(q, k, v):
    b, h, t, d_h = q.shape
    g = h // k.shape[1]
    w = torch.softmax(q.reshape(b, -1, g * t, d_h) @ k.transpose(-2, -1) / math.sqrt(d_h), -1)
    return (w @ v).reshape(b, h, t, d_h)


def _attend(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v


def test_gqa_correct_styles_pass(capsys):
    def with_einsum(q, k, v):
        b, h, t, d = q.shape
        qg = q.unflatten(1, (k.shape[1], h // k.shape[1]))
        scores = torch.einsum("bngtd,bnsd->bngts", qg, k) / math.sqrt(d)
        return torch.einsum("bngts,bnsd->bngtd", scores.softmax(-1), v).flatten(1, 2)

    def loop_over_groups(q, k, v):  # devagar, mas não copia K nem V
        g = q.shape[1] // k.shape[1]
        outs = [
            _attend(q[:, j : j + 1], k[:, j // g : j // g + 1], v[:, j // g : j // g + 1])
            for j in range(q.shape[1])
        ]
        out = outs[0].new_empty(q.shape[:-1] + (v.shape[-1],))
        for j, o in enumerate(outs):
            out[:, j : j + 1] = o
        return out

    for answer in (gqa_view, with_einsum, loop_over_groups):
        _accepted(ex.check_gqa_attention, answer, capsys)


def _heads(q, k):
    return torch.arange(q.shape[1]) // (q.shape[1] // k.shape[1])


def test_gqa_five_ways_of_copying_k_and_v_are_rejected(capsys):
    def fancy_index(q, k, v):
        heads = _heads(q, k)
        return _attend(q, k[:, heads], v[:, heads])

    def index_select(q, k, v):
        heads = _heads(q, k)
        return _attend(q, k.index_select(1, heads), v.index_select(1, heads))

    def broadcast_then_reshape(q, k, v):
        b, h_kv, s, d = k.shape
        g = q.shape[1] // h_kv
        target = torch.empty(b, h_kv, g, s, d)
        kk, _ = torch.broadcast_tensors(k[:, :, None], target)
        vv, _ = torch.broadcast_tensors(v[:, :, None], target)
        return _attend(q, kk.reshape(b, -1, s, d), vv.reshape(b, -1, s, d))

    def times_ones(q, k, v):
        b, h_kv, s, d = k.shape
        ones = torch.ones(1, 1, q.shape[1] // h_kv, 1, 1, dtype=k.dtype)
        kk, vv = (k[:, :, None] * ones).flatten(1, 2), (v[:, :, None] * ones).flatten(1, 2)
        return _attend(q, kk, vv)

    def with_hstack(q, k, v):
        g = q.shape[1] // k.shape[1]
        kk = torch.hstack([k[:, i : i + 1] for i in range(k.shape[1]) for _ in range(g)])
        vv = torch.hstack([v[:, i : i + 1] for i in range(v.shape[1]) for _ in range(g)])
        return _attend(q, kk, vv)

    def repeat_interleave(q, k, v):
        g = q.shape[1] // k.shape[1]
        return _attend(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))

    def broadcasting_matmul(q, k, v):  # o PyTorch copia K expandido por baixo
        b, h, t, d = q.shape
        qg = q.view(b, k.shape[1], h // k.shape[1], t, d)
        scores = qg @ k.unsqueeze(2).transpose(-2, -1) / math.sqrt(d)
        return (scores.softmax(-1) @ v.unsqueeze(2)).flatten(1, 2)

    for answer in (
        fancy_index,
        index_select,
        broadcast_then_reshape,
        times_ones,
        with_hstack,
        repeat_interleave,
        broadcasting_matmul,
    ):
        _rejected(
            ex.check_gqa_attention,
            answer,
            capsys,
            "vezes os elementos de K",
            "K ou V foram repetidos",
        )


def test_gqa_fused_attention_is_rejected_by_any_name(capsys):
    def direct(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def default_argument(q, k, v, _sdpa=F.scaled_dot_product_attention):
        return _sdpa(q, k, v, enable_gqa=True)

    partial = functools.partial(F.scaled_dot_product_attention, enable_gqa=True)

    def aten_name(q, k, v):  # o núcleo pelo nome ATen, sem passar pelo F
        g = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, kk, vv)[0]

    for answer in (direct, default_argument, partial, aten_name):
        _rejected(ex.check_gqa_attention, answer, capsys, "atenção fundida")


def test_gqa_in_place_and_cut_gradient_are_rejected(capsys):
    def scales_q(q, k, v):
        q.mul_(1.0)
        return gqa_view(q, k, v)

    def sorts_k(q, k, v):
        out = gqa_view(q, k, v)
        k.copy_(k.flip(-2))
        return out

    def zeroes_v(q, k, v):
        out = gqa_view(q, k, v)
        v.zero_()
        return out

    def under_no_grad(q, k, v):
        with torch.no_grad():
            return gqa_view(q, k, v)

    def detaches_k(q, k, v):
        return gqa_view(q, k.detach(), v)

    _rejected(ex.check_gqa_attention, scales_q, capsys, "modificou `q` no lugar")
    _rejected(ex.check_gqa_attention, sorts_k, capsys, "modificou `k` no lugar")
    _rejected(ex.check_gqa_attention, zeroes_v, capsys, "modificou `v` no lugar")
    _rejected(ex.check_gqa_attention, under_no_grad, capsys, "não tem gradiente")
    _rejected(ex.check_gqa_attention, detaches_k, capsys, "gradiente em relação a `k`")


def test_gqa_table_of_fixed_cases_is_rejected(capsys):
    fixed = {shape for _, shape in module._gqa_cases(torch.Generator(), 0)[:4]}

    def memorizes(q, k, v):
        b, h, t, d_h = q.shape
        if (b, h, k.shape[1], t, k.shape[2], d_h) in fixed:
            return gqa_view(q, k, v)
        return torch.zeros_like(q)

    _rejected(ex.check_gqa_attention, memorizes, capsys, "caso sorteado, semente")


def test_gqa_typical_mistakes_are_diagnosed(capsys):
    def modulo_heads(q, k, v):
        b, h, t, d = q.shape
        h_kv = k.shape[1]
        qg = q.view(b, h // h_kv, h_kv, t, d).transpose(1, 2).reshape(b, h_kv, -1, d)
        out = _attend(qg, k, v).view(b, h_kv, h // h_kv, t, d)
        return out.transpose(1, 2).reshape(b, h, t, d)

    def no_scale(q, k, v):
        return gqa_view(q * math.sqrt(q.shape[-1]), k, v)

    def softmax_on_queries(q, k, v):
        b, h, t, d = q.shape
        w = torch.softmax(
            q.reshape(b, k.shape[1], -1, d) @ k.transpose(-2, -1) / math.sqrt(d), dim=-2
        )
        return (w @ v).reshape(b, h, t, d)

    def grouped_shape(q, k, v):
        b, h, t, d = q.shape
        return _attend(q.reshape(b, k.shape[1], -1, d), k, v)

    for answer, fragment in [
        (modulo_heads, "j % h_kv"),
        (no_scale, "sqrt(d_h)"),
        (softmax_on_queries, "dim=-1"),
        (grouped_shape, "desfazer o agrupamento"),
    ]:
        _rejected(ex.check_gqa_attention, answer, capsys, fragment)


# --------------------------------------------------------------------------------------
# Exercício 3: o cache circular da janela deslizante
# --------------------------------------------------------------------------------------
def rolling_step(cache_k, cache_v, q, k_new, v_new, pos):
    window = cache_k.shape[-2]
    slot = pos % window
    cache_k[:, :, slot] = k_new[:, :, 0]
    cache_v[:, :, slot] = v_new[:, :, 0]
    filled = min(pos + 1, window)
    k, v = cache_k[:, :, :filled], cache_v[:, :, :filled]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


def _write(cache_k, cache_v, k_new, v_new, slot):
    cache_k[:, :, slot] = k_new[:, :, 0]
    cache_v[:, :, slot] = v_new[:, :, 0]


def test_rolling_step_correct_styles_pass(capsys):
    def masked_scores(cache_k, cache_v, q, k_new, v_new, pos):  # máscara nas pontuações
        window = cache_k.shape[-2]
        cache_k.index_copy_(2, torch.tensor([pos % window]), k_new)
        cache_v.index_copy_(2, torch.tensor([pos % window]), v_new)
        empty = torch.arange(window) > pos  # (W,): vagas que ainda não receberam token
        scores = torch.einsum("bhqd,bhkd->bhqk", q, cache_k) / q.shape[-1] ** 0.5
        weights = scores.masked_fill(empty, float("-inf")).softmax(dim=-1)
        filled = min(pos + 1, window)  # o lixo dos valores fica fora da multiplicação
        return torch.einsum("bhqk,bhkd->bhqd", weights[..., :filled], cache_v[:, :, :filled])

    def fused(cache_k, cache_v, q, k_new, v_new, pos):  # a atenção do PyTorch vale aqui
        window = cache_k.shape[-2]
        cache_k[:, :, pos % window : pos % window + 1] = k_new
        cache_v[:, :, pos % window : pos % window + 1] = v_new
        filled = min(pos + 1, window)
        return F.scaled_dot_product_attention(q, cache_k[:, :, :filled], cache_v[:, :, :filled])

    for answer in (rolling_step, masked_scores, fused):
        _accepted(ex.check_rolling_step, answer, capsys)


def test_rolling_step_copies_of_the_cache_are_rejected(capsys):
    def shifts_with_cat(cache_k, cache_v, q, k_new, v_new, pos):  # janela em ordem, deslocada
        cache_k.copy_(torch.cat((cache_k[:, :, 1:], k_new), dim=2))
        cache_v.copy_(torch.cat((cache_v[:, :, 1:], v_new), dim=2))
        filled = min(pos + 1, cache_k.shape[-2])
        return F.scaled_dot_product_attention(q, cache_k[:, :, -filled:], cache_v[:, :, -filled:])

    def rolls(cache_k, cache_v, q, k_new, v_new, pos):
        cache_k.copy_(torch.roll(cache_k, -1, dims=2))
        cache_v.copy_(torch.roll(cache_v, -1, dims=2))
        cache_k[:, :, -1], cache_v[:, :, -1] = k_new[:, :, 0], v_new[:, :, 0]
        filled = min(pos + 1, cache_k.shape[-2])
        return F.scaled_dot_product_attention(q, cache_k[:, :, -filled:], cache_v[:, :, -filled:])

    def functional_update(cache_k, cache_v, q, k_new, v_new, pos):  # torch.where no cache todo
        window = cache_k.shape[-2]
        here = (torch.arange(window) == pos % window)[:, None]  # (W, 1)
        cache_k.copy_(torch.where(here, k_new, cache_k))
        cache_v.copy_(torch.where(here, v_new, cache_v))
        filled = min(pos + 1, window)
        return F.scaled_dot_product_attention(q, cache_k[:, :, :filled], cache_v[:, :, :filled])

    def in_float32(cache_k, cache_v, q, k_new, v_new, pos):  # converte o cache todo
        window = cache_k.shape[-2]
        _write(cache_k, cache_v, k_new, v_new, pos % window)
        filled = min(pos + 1, window)
        k, v = cache_k[:, :, :filled].float(), cache_v[:, :, :filled].float()
        scores = q.float() @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v

    def clones(cache_k, cache_v, q, k_new, v_new, pos):
        _write(cache_k, cache_v, k_new, v_new, pos % cache_k.shape[-2])
        return rolling_step(cache_k.clone(), cache_v.clone(), q, k_new, v_new, pos)

    for answer, op in [
        (shifts_with_cat, "cat"),
        (rolls, "roll"),
        (functional_update, "where"),
        (clones, "clone"),
        (in_float32, "_to_copy"),
    ]:
        _rejected(ex.check_rolling_step, answer, capsys, "o cache foi copiado", f"operação {op}")


def test_rolling_step_copies_in_pieces_resize_and_numpy_are_rejected(capsys):
    def halves(cache_k, cache_v, q, k_new, v_new, pos):  # duas metades: nenhuma do tamanho todo
        window = cache_k.shape[-2]
        first, second = cache_k[:, :, : window // 2].clone(), cache_k[:, :, window // 2 :].clone()
        assert first.numel() < cache_k.numel() and second.numel() < cache_k.numel()
        return rolling_step(cache_k, cache_v, q, k_new, v_new, pos)

    def resized_buffer(cache_k, cache_v, q, k_new, v_new, pos):  # só operações no lugar
        buffer = torch.empty(0, dtype=cache_v.dtype)
        buffer.resize_(cache_v.shape).copy_(cache_v)
        return rolling_step(cache_k, cache_v, q, k_new, v_new, pos)

    def grows_the_cache(cache_k, cache_v, q, k_new, v_new, pos):  # realoca a memória do cache
        shape = cache_k.shape
        cache_k.resize_(shape[0], shape[1], 2 * shape[2], shape[3])
        cache_k.resize_(shape)
        return rolling_step(cache_k, cache_v, q, k_new, v_new, pos)

    def through_numpy(cache_k, cache_v, q, k_new, v_new, pos):
        copy = np.array(cache_v.numpy())  # noqa: F841 (a cópia fica no numpy)
        return rolling_step(cache_k, cache_v, q, k_new, v_new, pos)

    for answer, name, source in [
        (halves, "cache_k", "clone"),
        (resized_buffer, "cache_v", "copy_"),
        (grows_the_cache, "cache_k", "resize_"),
        (through_numpy, "cache_v", "numpy"),
    ]:
        _rejected(
            ex.check_rolling_step,
            answer,
            capsys,
            "o cache foi copiado",
            f"todos os valores de `{name}`",
            f"pelas operações {source}",
        )


def test_rolling_step_garbage_has_nan_and_infinities(capsys):
    cache_k, cache_v = module._garbage(torch.Generator().manual_seed(0), 2, 3, 4, 5)
    for cache in (cache_k, cache_v):
        assert bool(cache.isnan().any()) and bool(cache.isposinf().any())
        assert bool(cache.isneginf().any()) and bool(cache[:, :, 0].isfinite().all())

    def masks_but_multiplies_the_whole_cache(cache_k, cache_v, q, k_new, v_new, pos):
        window = cache_k.shape[-2]
        _write(cache_k, cache_v, k_new, v_new, pos % window)
        empty = torch.arange(window) > pos  # (W,)
        scores = q @ cache_k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = scores.masked_fill(empty, float("-inf")).softmax(dim=-1)  # peso 0 no lixo
        return weights @ cache_v  # 0 · NaN = NaN

    def additive_mask(cache_k, cache_v, q, k_new, v_new, pos):  # NaN + (-inf) = NaN
        window = cache_k.shape[-2]
        _write(cache_k, cache_v, k_new, v_new, pos % window)
        filled = min(pos + 1, window)
        bias = torch.zeros(window, dtype=q.dtype).masked_fill(torch.arange(window) > pos, -math.inf)
        scores = q @ cache_k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
        return torch.softmax(scores, dim=-1)[..., :filled] @ cache_v[:, :, :filled]

    _rejected(
        ex.check_rolling_step,
        masks_but_multiplies_the_whole_cache,
        capsys,
        "no passo pos=0",
        "0 · NaN",
    )
    _rejected(ex.check_rolling_step, additive_mask, capsys, "no passo pos=0", "NaN + (-inf) dá NaN")


def test_rolling_step_cache_mistakes_are_diagnosed(capsys):
    def keeps_no_cache(cache_k, cache_v, q, k_new, v_new, pos):  # vê só o token novo
        return v_new.clone()

    def wrong_slot(cache_k, cache_v, q, k_new, v_new, pos):  # começa na vaga 1
        _write(cache_k, cache_v, k_new, v_new, (pos + 1) % cache_k.shape[-2])
        return v_new.clone()

    def shifts_in_place(cache_k, cache_v, q, k_new, v_new, pos):  # move as vagas uma a uma
        window = cache_k.shape[-2]
        for s in range(window - 1):
            cache_k[:, :, s] = cache_k[:, :, s + 1]
            cache_v[:, :, s] = cache_v[:, :, s + 1]
        _write(cache_k, cache_v, k_new, v_new, window - 1)
        filled = min(pos + 1, window)
        return _attend(q, cache_k[:, :, -filled:], cache_v[:, :, -filled:])

    def rebinds(cache_k, cache_v, q, k_new, v_new, pos):  # um cache novo, só no nome local
        cache_k = torch.cat((cache_k, k_new), dim=2)[:, :, 1:]
        return v_new.clone()

    _rejected(
        ex.check_rolling_step, keeps_no_cache, capsys, "o cache não mudou", "vaga pos % W = 0"
    )
    _rejected(ex.check_rolling_step, wrong_slot, capsys, "o token novo foi para a vaga 1")
    _rejected(ex.check_rolling_step, shifts_in_place, capsys, "nada se move")
    _rejected(ex.check_rolling_step, rebinds, capsys, "o cache foi copiado")


def _attend(q, k, v, scale=True):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    return torch.softmax(scores, dim=-1) @ v


def test_rolling_step_attention_mistakes_are_diagnosed(capsys):
    def attends_to_garbage(cache_k, cache_v, q, k_new, v_new, pos):  # todas as W vagas
        _write(cache_k, cache_v, k_new, v_new, pos % cache_k.shape[-2])
        return _attend(q, cache_k, cache_v)

    def attends_before_writing(cache_k, cache_v, q, k_new, v_new, pos):  # W + 1 chaves
        window = cache_k.shape[-2]
        old = min(pos, window)
        scale = math.sqrt(q.shape[-1])
        scores = (
            torch.cat(
                (q @ cache_k[:, :, :old].transpose(-2, -1), q @ k_new.transpose(-2, -1)), dim=-1
            )
            / scale
        )  # (b, h, 1, old + 1): pontuações, não o cache
        weights = torch.softmax(scores, dim=-1)
        out = weights[..., :old] @ cache_v[:, :, :old] + weights[..., old:] @ v_new
        _write(cache_k, cache_v, k_new, v_new, pos % window)
        return out

    def no_scale(cache_k, cache_v, q, k_new, v_new, pos):
        window = cache_k.shape[-2]
        _write(cache_k, cache_v, k_new, v_new, pos % window)
        filled = min(pos + 1, window)
        return _attend(q, cache_k[:, :, :filled], cache_v[:, :, :filled], scale=False)

    for answer, fragment in [
        (attends_to_garbage, "vagas que ainda não receberam nenhum token"),
        (attends_before_writing, "W + 1"),
        (no_scale, "sqrt(d_h)"),
        (lambda *args: rolling_step(*args)[..., :-1], "esperava o resultado com forma"),
    ]:
        _rejected(ex.check_rolling_step, answer, capsys, fragment)


@pytest.mark.parametrize("name", ["q", "k_new", "v_new"])
def test_rolling_step_in_place_on_the_token_is_rejected(name, capsys):
    def changes_one(cache_k, cache_v, q, k_new, v_new, pos):
        out = rolling_step(cache_k, cache_v, q, k_new, v_new, pos)
        {"q": q, "k_new": k_new, "v_new": v_new}[name].mul_(2.0)
        return out

    _rejected(ex.check_rolling_step, changes_one, capsys, f"modificou `{name}` no lugar")


def test_rolling_step_table_of_fixed_cases_is_rejected(capsys, monkeypatch):
    fixed = {(1, 2, 4, 8), (2, 3, 3, 4), (1, 1, 2, 5), (1, 2, 8, 4)}

    def memorizes(cache_k, cache_v, q, k_new, v_new, pos):  # só acerta os casos fixos
        if tuple(cache_k.shape) in fixed:
            return rolling_step(cache_k, cache_v, q, k_new, v_new, pos)
        return v_new.clone()

    monkeypatch.setenv("TPT_EXERCISE_SEED", "1")
    gen, seed = torch.Generator().manual_seed(1), 1
    drawn = module._rolling_cases(gen, seed)[-1][1]
    assert drawn[:4] not in fixed
    _rejected(ex.check_rolling_step, memorizes, capsys, "caso sorteado, semente 1")


def test_rolling_step_reference_is_the_sliding_window_mask():
    # A referência da conferência é a linha pos da atenção com tpt.sliding_window_mask.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    window = 3
    full, _ = tpt.scaled_dot_product_attention(
        q, k, v, attn_mask=tpt.sliding_window_mask(9, window)
    )
    for pos in range(9):
        row = module._window_reference(q[:, :, pos : pos + 1], k, v, pos, window)
        assert torch.allclose(row, full[:, :, pos : pos + 1])
