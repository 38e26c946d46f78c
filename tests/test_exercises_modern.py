"""Conferências dos exercícios do notebook 10_transformers_modernos (tpt.exercises.modern).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import tpt
from tpt.exercises import modern as ex


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _rejected(check, answer, capsys, *fragments):
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, (fragment, out)
    return out


def _accepted(check, answer, capsys):
    assert check(answer) is True, capsys.readouterr().out
    assert "✅" in capsys.readouterr().out


def test_stubs_are_pending(capsys):
    for check in (ex.check_rope_half, ex.check_gqa_attention, ex.check_merge_partials):
        assert check(stub) is False
        out = capsys.readouterr().out
        assert "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: RoPE metade e metade
# --------------------------------------------------------------------------------------
def _rope_half(x, theta=10000.0, *, start=0, scale=2.0, sign=1.0, repeat="cat", layout="half"):
    t, d = x.shape[-2], x.shape[-1]
    freqs = theta ** (-scale * torch.arange(d // 2, dtype=torch.float64) / d)
    angles = torch.arange(start, start + t, dtype=torch.float64)[:, None] * freqs  # (t, d/2)
    if repeat == "cat":
        angles = torch.cat((angles, angles), dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    if layout == "half":
        rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    else:
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * angles.cos() + sign * rotated * angles.sin()


def test_rope_half_alternative_styles_pass(capsys):
    def with_chunks(x, theta=10000.0):  # float32 por dentro, chunk e complexos não
        d = x.shape[-1]
        x1, x2 = x.float().chunk(2, dim=-1)
        inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
        ang = torch.outer(torch.arange(x.shape[-2]).float(), inv)
        cos, sin = ang.cos(), ang.sin()
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def with_complex(x, theta=10000.0):
        d = x.shape[-1]
        z = torch.complex(x[..., : d // 2], x[..., d // 2 :])
        ang = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta ** (
            -torch.arange(0, d, 2, dtype=torch.float64) / d
        )
        z = z * torch.polar(torch.ones_like(ang), ang)
        return torch.cat((z.real, z.imag), dim=-1)

    _accepted(ex.check_rope_half, _rope_half, capsys)
    _accepted(ex.check_rope_half, with_chunks, capsys)
    _accepted(ex.check_rope_half, with_complex, capsys)


def test_rope_half_typical_mistakes(capsys):
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th, layout="pairs",
              repeat="interleave"), capsys, "pares de coordenadas vizinhas")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th, repeat="interleave"),
              capsys, "torch.cat((f, f))")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th, sign=-1.0), capsys,
              "sentido contrário")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th, scale=1.0), capsys,
              "expoente")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th, start=1), capsys,
              "começam em 0")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, 10000.0), capsys,
              "theta=100", "diferença máxima")
    _rejected(ex.check_rope_half, lambda x, th: 2 * _rope_half(x, th), capsys,
              "não é uma rotação")
    _rejected(ex.check_rope_half, lambda x, th: _rope_half(x, th)[..., :-1, :], capsys,
              "esperava a forma")


def test_rope_half_rules(capsys):
    def with_tpt(x, theta=10000.0):  # converte o arranjo e chama o tpt: proibido
        d = x.shape[-1]
        perm = torch.stack((torch.arange(d // 2), torch.arange(d // 2) + d // 2), -1).flatten()
        rope = tpt.RotaryEmbedding(d, max_len=x.shape[-2], theta=theta).double()
        return rope(x[..., perm])[..., perm.argsort()]

    def with_apply_rope(x, theta=10000.0):
        t, d = x.shape[-2], x.shape[-1]
        return tpt.apply_rope(x, torch.ones(t, d), torch.zeros(t, d))

    def in_place(x, theta=10000.0):
        x.mul_(1.0)
        x += 0.0
        out = _rope_half(x, theta)
        x.zero_()
        return out

    _rejected(ex.check_rope_half, with_tpt, capsys, "não use tpt.apply_rope")
    _rejected(ex.check_rope_half, with_apply_rope, capsys, "não use tpt.apply_rope")
    _rejected(ex.check_rope_half, in_place, capsys, "modificou x no lugar")
    # As funções proibidas voltam ao normal depois da conferência.
    x = torch.randn(1, 3, 4)
    assert tpt.RotaryEmbedding(4, max_len=3)(x).shape == x.shape
    assert tpt.apply_rope(x, torch.ones(3, 4), torch.zeros(3, 4)).shape == x.shape


# --------------------------------------------------------------------------------------
# Exercício 2: GQA sem repetir K e V
# --------------------------------------------------------------------------------------
def _gqa_view(q, k, v):
    b, h, t, d_h = q.shape
    h_kv = k.shape[1]
    g = h // h_kv
    qg = q.reshape(b, h_kv, g * t, d_h)  # (b, h_kv, g·t, d_h): o grupo vira linhas
    w = torch.softmax(qg @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-1)  # (b, h_kv, g·t, s)
    return (w @ v).reshape(b, h, t, d_h)


def test_gqa_alternative_styles_pass(capsys):
    def with_unsqueeze(q, k, v):  # (b, h_kv, g, t, d) contra (b, h_kv, 1, s, d)
        b, h, t, d = q.shape
        h_kv = k.shape[1]
        qg = q.view(b, h_kv, h // h_kv, t, d)
        scores = qg @ k.unsqueeze(2).transpose(-2, -1) / d**0.5
        return (F.softmax(scores, dim=-1) @ v.unsqueeze(2)).flatten(1, 2)

    def with_einsum(q, k, v):
        b, h, t, d = q.shape
        h_kv = k.shape[1]
        qg = q.unflatten(1, (h_kv, h // h_kv))
        scores = torch.einsum("bngtd,bnsd->bngts", qg, k) / math.sqrt(d)
        return torch.einsum("bngts,bnsd->bngtd", scores.softmax(-1), v).flatten(1, 2)

    _accepted(ex.check_gqa_attention, _gqa_view, capsys)
    _accepted(ex.check_gqa_attention, with_unsqueeze, capsys)
    _accepted(ex.check_gqa_attention, with_einsum, capsys)


def test_gqa_repeating_is_rejected(capsys):
    def repeat_interleave(q, k, v):
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    def with_sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def with_expand(q, k, v):
        b, h_kv, s, d = k.shape
        g = q.shape[1] // h_kv
        k = k[:, :, None].expand(b, h_kv, g, s, d).reshape(b, -1, s, d)
        v = v[:, :, None].expand(b, h_kv, g, s, d).reshape(b, -1, s, d)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), -1) @ v

    def with_cat(q, k, v):
        g = q.shape[1] // k.shape[1]
        heads = torch.arange(q.shape[1]) // g
        k = torch.cat([k[:, i : i + 1] for i in heads.tolist()], dim=1)
        v = torch.cat([v[:, i : i + 1] for i in heads.tolist()], dim=1)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    for answer, name in [
        (repeat_interleave, "Tensor.repeat_interleave"),
        (with_sdpa, "F.scaled_dot_product_attention"),
        (with_expand, "Tensor.expand"),
        (with_cat, "torch.cat"),
    ]:
        _rejected(ex.check_gqa_attention, answer, capsys, f"não use {name}")
    # Tudo volta ao normal depois.
    assert torch.cat([torch.ones(1), torch.ones(1)]).shape == (2,)
    assert torch.ones(1, 2).expand(3, 2).shape == (3, 2)


def test_gqa_typical_mistakes(capsys):
    def modulo_heads(q, k, v):  # a cabeça j usa j % h_kv (o que .repeat faria)
        b, h, t, d = q.shape
        h_kv = k.shape[1]
        qg = q.view(b, h // h_kv, h_kv, t, d).transpose(1, 2)  # (b, h_kv, g, t, d)
        w = torch.softmax(qg @ k.unsqueeze(2).transpose(-2, -1) / math.sqrt(d), -1)
        return (w @ v.unsqueeze(2)).transpose(1, 2).reshape(b, h, t, d)

    def no_scale(q, k, v):
        return _gqa_view(q * math.sqrt(q.shape[-1]), k, v)

    def grouped_shape(q, k, v):
        b, h, t, d = q.shape
        qg = q.reshape(b, k.shape[1], -1, d)
        return torch.softmax(qg @ k.transpose(-2, -1) / math.sqrt(d), -1) @ v

    def softmax_on_queries(q, k, v):
        b, h, t, d = q.shape
        qg = q.reshape(b, k.shape[1], -1, d)
        w = torch.softmax(qg @ k.transpose(-2, -1) / math.sqrt(d), dim=-2)
        return (w @ v).reshape(b, h, t, d)

    _rejected(ex.check_gqa_attention, modulo_heads, capsys, "j // g", "não j % h_kv")
    _rejected(ex.check_gqa_attention, no_scale, capsys, "sqrt(d_h)")
    _rejected(ex.check_gqa_attention, grouped_shape, capsys, "desfazer o agrupamento")
    _rejected(ex.check_gqa_attention, softmax_on_queries, capsys, "dim=-1")


# --------------------------------------------------------------------------------------
# Exercício 3: juntar resultados parciais
# --------------------------------------------------------------------------------------
def _merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return o1 * torch.exp(lse1 - lse) + o2 * torch.exp(lse2 - lse), lse


def test_merge_alternative_styles_pass(capsys):
    def with_max(o1, lse1, o2, lse2):  # subtrai o máximo à mão
        m = torch.maximum(lse1, lse2)
        w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)
        return (o1 * w1 + o2 * w2) / (w1 + w2), m + torch.log(w1 + w2)

    def with_sigmoid(o1, lse1, o2, lse2):  # peso do bloco 1 = sigmoid(lse1 - lse2)
        a = torch.sigmoid(lse1 - lse2)
        return a * o1 + (1 - a) * o2, torch.logaddexp(lse1, lse2)

    _accepted(ex.check_merge_partials, _merge, capsys)
    _accepted(ex.check_merge_partials, with_max, capsys)
    _accepted(ex.check_merge_partials, with_sigmoid, capsys)


def test_merge_typical_mistakes(capsys):
    def naive_exp(o1, lse1, o2, lse2):
        w1, w2 = torch.exp(lse1), torch.exp(lse2)
        return (o1 * w1 + o2 * w2) / (w1 + w2), torch.log(w1 + w2)

    def average(o1, lse1, o2, lse2):
        return (o1 + o2) / 2, torch.logaddexp(lse1, lse2)

    def lse_sum(o1, lse1, o2, lse2):
        return _merge(o1, lse1, o2, lse2)[0], lse1 + lse2

    def lse_max(o1, lse1, o2, lse2):
        return _merge(o1, lse1, o2, lse2)[0], torch.maximum(lse1, lse2)

    def swapped(o1, lse1, o2, lse2):
        lse = torch.logaddexp(lse1, lse2)
        return o1 * torch.exp(lse2 - lse) + o2 * torch.exp(lse1 - lse), lse

    def only_output(o1, lse1, o2, lse2):
        return _merge(o1, lse1, o2, lse2)[0]

    def lse_without_keepdim(o1, lse1, o2, lse2):
        out, lse = _merge(o1, lse1, o2, lse2)
        return out, lse.squeeze(-1)

    _rejected(ex.check_merge_partials, naive_exp, capsys, "inf ou NaN", "torch.logaddexp")
    _rejected(ex.check_merge_partials, average, capsys, "média simples")
    _rejected(ex.check_merge_partials, lse_sum, capsys, "não a soma nem o máximo")
    _rejected(ex.check_merge_partials, lse_max, capsys, "não a soma nem o máximo")
    _rejected(ex.check_merge_partials, swapped, capsys, "pesos estão trocados")
    _rejected(ex.check_merge_partials, only_output, capsys, "tupla (saída, lse)")
    _rejected(ex.check_merge_partials, lse_without_keepdim, capsys, "(..., t, 1)")


def test_merge_large_scores_really_overflow():
    # O caso de pontuações grandes precisa de fato estourar a conta ingênua em float64.
    generator = torch.Generator().manual_seed(21)
    for batch, t, s, scale in ex._MERGE_CASES:
        q = torch.randn(*batch, t, 4, generator=generator, dtype=torch.float64) * scale
        k = torch.randn(*batch, s, 4, generator=generator, dtype=torch.float64)
        torch.randn(*batch, s, 4, generator=generator, dtype=torch.float64)
        lse = ex._partial(q, k, k)[1]
        if scale > 1:
            assert not torch.isfinite(torch.exp(lse)).all()
