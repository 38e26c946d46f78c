"""Conferências dos exercícios do notebook 08_encoder_decoder (tpt.exercises.seq2seq).

Para cada exercício: respostas certas em estilos diferentes passam, e cada classe de
resposta errada da issue dos exercícios é recusada com a mensagem certa (entrada
modificada no lugar, gradiente cortado, operação proibida por outro nome, laço escondido,
enganos típicos).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import checks

ex = checks("seq2seq")


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _accepted(check, answer, capsys) -> None:
    result = check(answer)
    out = capsys.readouterr().out
    assert result is True, out
    assert "✅" in out


def _rejected(check, answer, capsys, *fragments: str) -> str:
    result = check(answer)
    out = capsys.readouterr().out
    assert result is False, out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, f"esperava {fragment!r} em:\n{out}"
    return out


def test_only_checks_are_visible():
    assert dir(ex) == [
        "check_exact_match",
        "check_pre_norm_decoder_layer",
        "check_smoothed_cross_entropy",
    ]
    for hidden in ("_decoder_reference", "_smoothed_reference", "_match_variants", "F"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check",
    [ex.check_pre_norm_decoder_layer, ex.check_smoothed_cross_entropy, ex.check_exact_match],
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: a camada do decoder com pré-normalização
# --------------------------------------------------------------------------------------
def pre_norm_decoder_layer(x, memory, pad, self_attn, cross_attn, ffn, norm1, norm2, norm3):
    x = x + self_attn(norm1(x), is_causal=True)[0]
    x = x + cross_attn(norm2(x), memory, memory, key_padding_mask=pad)[0]
    return x + ffn(norm3(x))


def with_explicit_masks(x, memory, pad, self_attn, cross_attn, ffn, norm1, norm2, norm3):
    t = x.shape[1]
    h = norm1(x)
    x = x + self_attn(h, h, h, attn_mask=tpt.causal_mask(t), need_weights=True)[0]
    cross = cross_attn(norm2(x), memory, attn_mask=pad[:, None, :].expand(-1, t, -1))[0]
    return (x + cross) + ffn(norm3(x + cross))


@pytest.mark.parametrize(
    "answer", [pre_norm_decoder_layer, with_explicit_masks], ids=["is_causal", "mascaras"]
)
def test_decoder_correct_styles_pass(answer, capsys):
    _accepted(ex.check_pre_norm_decoder_layer, answer, capsys)


def test_decoder_reference_is_torch_decoder_layer():
    ref = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
    ref.eval()
    ours = tpt.DecoderLayer.from_torch(ref).eval()
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
    expected = ref(x, memory, tgt_mask=tpt.causal_mask(3), tgt_is_causal=True,
                   memory_key_padding_mask=pad)  # fmt: skip
    pieces = [
        getattr(ours, n) for n in ("self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3")
    ]
    assert torch.allclose(pre_norm_decoder_layer(x, memory, pad, *pieces), expected, atol=1e-5)


def _post_norm(x, m, pad, sa, ca, ffn, n1, n2, n3):
    a = n1(x + sa(x, is_causal=True)[0])
    c = n2(a + ca(a, m, m, key_padding_mask=pad)[0])
    return n3(c + ffn(c))


def _norm_memory(x, m, pad, sa, ca, ffn, n1, n2, n3):
    x = x + sa(n1(x), is_causal=True)[0]
    x = x + ca(n2(x), n2(m), n2(m), key_padding_mask=pad)[0]
    return x + ffn(n3(x))


def _raw_query(x, m, pad, sa, ca, ffn, n1, n2, n3):
    x = x + sa(n1(x), is_causal=True)[0]
    x = x + ca(x, m, m, key_padding_mask=pad)[0]
    return x + ffn(n3(x))


def _not_causal(x, m, pad, sa, ca, ffn, n1, n2, n3):
    x = x + sa(n1(x))[0]
    x = x + ca(n2(x), m, m, key_padding_mask=pad)[0]
    return x + ffn(n3(x))


def _no_pad(x, m, pad, sa, ca, ffn, n1, n2, n3):
    x = x + sa(n1(x), is_causal=True)[0]
    x = x + ca(n2(x), m, m)[0]
    return x + ffn(n3(x))


def _swapped(x, m, pad, sa, ca, ffn, n1, n2, n3):
    return pre_norm_decoder_layer(x, m, pad, sa, ca, ffn, n1, n3, n2)


def _queries_from_memory(x, m, pad, sa, ca, ffn, n1, n2, n3):
    x = x + sa(n1(x), is_causal=True)[0]
    x = x + ca(m, n2(x), n2(x))[0]  # papéis trocados: (b, s, d) não soma com (b, t, d)
    return x + ffn(n3(x))


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_post_norm, "pós-normalização"),
        (_norm_memory, "normalizou também a memória"),
        (_raw_query, "vieram de x sem norm2"),
        (_not_causal, "máscara causal"),
        (_no_pad, "bloquear o <pad>"),
        (_swapped, "norm2 e norm3 estão trocadas"),
        (_queries_from_memory, "levantou RuntimeError"),
    ],
    ids=[
        "pos-norma",
        "memoria-normalizada",
        "consulta-crua",
        "sem-causal",
        "sem-pad",
        "trocadas",
        "qk-trocados",
    ],
)
def test_decoder_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_pre_norm_decoder_layer, answer, capsys, fragment)


@pytest.mark.parametrize("name", ["x", "memory", "memory_padding_mask", "self_attn", "norm3"])
def test_decoder_in_place_change_of_each_input_is_named(name, capsys):
    def sneaky(x, memory, pad, sa, ca, ffn, n1, n2, n3):
        out = pre_norm_decoder_layer(x, memory, pad, sa, ca, ffn, n1, n2, n3)
        args = {"x": x, "memory": memory, "memory_padding_mask": pad, "self_attn": sa, "norm3": n3}
        with torch.no_grad():
            target = args[name]
            if isinstance(target, nn.Module):
                next(target.parameters()).add_(0.5)
            elif target.dtype == torch.bool:
                target.logical_not_()
            else:
                target.mul_(2)
        return out

    _rejected(ex.check_pre_norm_decoder_layer, sneaky, capsys, f"modificou `{name}` no lugar")


def _ready_tpt_layer(x, memory, pad, sa, ca, ffn, n1, n2, n3):
    d = x.shape[-1]
    layer = tpt.DecoderLayer(d, sa.num_heads, ffn.ff_dim, dropout=0.0, norm_first=True).eval()
    layer.self_attn, layer.cross_attn, layer.ffn = sa, ca, ffn
    layer.norm1, layer.norm2, layer.norm3 = n1, n2, n3
    return layer(x, memory, is_causal=True, memory_key_padding_mask=pad)


class _Renamed(nn.TransformerDecoderLayer):  # outra classe, outro nome: ainda é a camada pronta
    pass


def _ready_torch_layer(x, memory, pad, sa, ca, ffn, n1, n2, n3):
    d, t = x.shape[-1], x.shape[1]
    layer = _Renamed(d, sa.num_heads, ffn.ff_dim, dropout=0.0, batch_first=True, norm_first=True)
    return layer.eval()(x, memory, tgt_mask=tpt.causal_mask(t), memory_key_padding_mask=pad)


@pytest.mark.parametrize(
    ("answer", "name"),
    [(_ready_tpt_layer, "DecoderLayer"), (_ready_torch_layer, "_Renamed")],
    ids=["tpt", "torch-subclasse"],
)
def test_decoder_ready_made_layer_is_seen_whatever_the_name(answer, name, capsys):
    _rejected(ex.check_pre_norm_decoder_layer, answer, capsys, "camada de decoder pronta", name)


def test_decoder_no_grad_and_detached_memory_are_rejected(capsys):
    def under_no_grad(*args):
        with torch.no_grad():
            return pre_norm_decoder_layer(*args)

    def detached_memory(x, memory, *rest):
        return pre_norm_decoder_layer(x, memory.detach(), *rest)

    _rejected(ex.check_pre_norm_decoder_layer, under_no_grad, capsys, "não tem gradiente")
    _rejected(ex.check_pre_norm_decoder_layer, detached_memory, capsys, "`memory`")


# --------------------------------------------------------------------------------------
# Exercício 2: entropia cruzada com suavização
# --------------------------------------------------------------------------------------
def smoothed_cross_entropy(logits, targets, epsilon, pad_id):
    log_p = logits.log_softmax(dim=-1)
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    per_position = (1 - epsilon) * nll - epsilon * log_p.mean(dim=-1)
    real = targets != pad_id
    return per_position[real].mean()


def with_full_target(logits, targets, epsilon, pad_id):
    v = logits.shape[-1]
    q = F.one_hot(targets, v).to(logits.dtype) * (1 - epsilon) + epsilon / v  # (b, t, V)
    per_position = -(q * torch.log_softmax(logits, -1)).sum(-1)
    mask = (targets != pad_id).to(logits.dtype)
    return (per_position * mask).sum() / mask.sum()


@pytest.mark.parametrize(
    "answer", [smoothed_cross_entropy, with_full_target], ids=["gather", "alvo-inteiro"]
)
def test_smoothing_correct_styles_pass(answer, capsys):
    _accepted(ex.check_smoothed_cross_entropy, answer, capsys)


def _ce_default(logits, targets, epsilon, pad_id, _ce=F.cross_entropy):
    return _ce(
        logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id, label_smoothing=epsilon
    )


_CE_PARTIAL = functools.partial(F.cross_entropy)


def _nll_aten(logits, targets, epsilon, pad_id):
    log_p = logits.log_softmax(-1).flatten(0, 1)
    nll = torch.ops.aten.nll_loss_forward(log_p, targets.flatten(), None, 1, pad_id)[0]
    real = targets != pad_id
    return (1 - epsilon) * nll - epsilon * log_p.mean(-1)[real.flatten()].mean()


@pytest.mark.parametrize(
    "answer",
    [
        lambda lg, t, e, p: F.cross_entropy(lg.mT, t, ignore_index=p, label_smoothing=e),
        _ce_default,
        lambda lg, t, e, p: _CE_PARTIAL(lg.mT, t, ignore_index=p, label_smoothing=e),
        lambda lg, t, e, p: nn.CrossEntropyLoss(ignore_index=p, label_smoothing=e)(lg.mT, t),
        _nll_aten,
        lambda lg, t, e, p: (
            (1 - e) * F.nll_loss(lg.log_softmax(-1).mT, t, ignore_index=p)
            - e * lg.log_softmax(-1).mean(-1)[t != p].mean()
        ),
    ],
    ids=["direto", "argumento-padrao", "partial", "modulo", "aten", "nll_loss"],
)
def test_smoothing_forbidden_kernel_is_seen_whatever_the_name(answer, capsys):
    _rejected(
        ex.check_smoothed_cross_entropy, answer, capsys, "nll_loss", "o núcleo de F.cross_entropy"
    )


def _over_others(logits, targets, epsilon, pad_id):
    v = logits.shape[-1]
    one = F.one_hot(targets, v).to(logits.dtype)
    q = one * (1 - epsilon) + (1 - one) * epsilon / (v - 1)
    per_position = -(q * logits.log_softmax(-1)).sum(-1)
    return per_position[targets != pad_id].mean()


def _with_pads(logits, targets, epsilon, pad_id):
    log_p = logits.log_softmax(-1)
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return ((1 - epsilon) * nll - epsilon * log_p.mean(-1)).mean()


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_over_others, "V - 1 classes erradas"),
        (_with_pads, "posições de <pad> entraram na média"),
        (lambda lg, t, e, p: smoothed_cross_entropy(lg, t, 0.0, p), "sem suavização"),
        (
            lambda lg, t, e, p: (1 - e) * smoothed_cross_entropy(lg, t, 0.0, p),
            "faltou a parte uniforme",
        ),
        (
            lambda lg, t, e, p: smoothed_cross_entropy(lg, t, e, p) * (t != p).sum(),
            "somou em vez de tirar a média",
        ),
        (
            lambda lg, t, e, p: smoothed_cross_entropy(lg, t, e, p) + 0.1,
            "difere do esperado",
        ),
    ],
    ids=["V-1", "com-pad", "sem-eps", "sem-uniforme", "soma", "outro"],
)
def test_smoothing_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_smoothed_cross_entropy, answer, capsys, fragment)


@pytest.mark.parametrize("name", ["logits", "targets"])
def test_smoothing_in_place_change_of_each_input_is_named(name, capsys):
    def sneaky(logits, targets, epsilon, pad_id):
        out = smoothed_cross_entropy(logits, targets, epsilon, pad_id)
        with torch.no_grad():
            if name == "logits":
                logits.sub_(logits.amax(-1, keepdim=True))  # "estabilizar" no lugar
            else:
                targets.masked_fill_(targets == pad_id, 0)
        return out

    _rejected(ex.check_smoothed_cross_entropy, sneaky, capsys, f"modificou `{name}` no lugar")


def test_smoothing_no_grad_and_numpy_trip_are_rejected(capsys):
    def under_no_grad(*args):
        with torch.no_grad():
            return smoothed_cross_entropy(*args)

    def via_numpy(logits, targets, epsilon, pad_id):
        value = smoothed_cross_entropy(logits, targets, epsilon, pad_id)
        return torch.tensor(float(value.detach().numpy()))

    _rejected(ex.check_smoothed_cross_entropy, under_no_grad, capsys, "não tem gradiente")
    _rejected(ex.check_smoothed_cross_entropy, via_numpy, capsys, "não tem gradiente")


# --------------------------------------------------------------------------------------
# Exercício 3: acerto exato, vetorizado
# --------------------------------------------------------------------------------------
def exact_match(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    pred = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    target = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    is_eos = (pred == eos_id).long()
    after = (is_eos.cumsum(dim=1) - is_eos) > 0
    return (pred.masked_fill(after, pad_id) == target).all(dim=1).float().mean().item()


def exact_match_tensor(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    p = torch.cat([pred, pred.new_full((pred.shape[0], width - pred.shape[1]), pad_id)], 1)
    g = torch.cat([target, target.new_full((target.shape[0], width - target.shape[1]), pad_id)], 1)
    seen = (p == eos_id).cummax(dim=1).values  # até o primeiro <eos>, inclusive, é False antes
    before_or_at = ~seen | ((p == eos_id) & (seen.long().cumsum(1) == 1))
    return torch.where(before_or_at, p == g, g == pad_id).all(1).double().mean()


@pytest.mark.parametrize(
    "answer",
    [exact_match, exact_match_tensor, lambda *a: np.float32(exact_match(*a))],
    ids=["item", "tensor", "numpy-float32"],
)
def test_exact_correct_styles_pass(answer, capsys):
    _accepted(ex.check_exact_match, answer, capsys)


def _row(pred, target, eos_id, pad_id, i):
    return exact_match(pred[i : i + 1], target[i : i + 1], eos_id, pad_id)


def _per_row_helper(pred, target, eos_id, pad_id):
    total = 0.0
    for i in range(pred.shape[0]):
        total += _row(pred, target, eos_id, pad_id, i)
    return total / pred.shape[0]


def _via_lists(pred, target, eos_id, pad_id):
    def cut(row, keep_eos):
        return row[: row.index(eos_id) + 1] if eos_id in row else row

    pairs = zip(pred.tolist(), target.tolist(), strict=True)
    return sum(cut(p, True) == cut(t, True) for p, t in pairs) / len(pred)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (
            lambda p, t, e, z: sum(map(lambda i: _row(p, t, e, z, i), range(len(p)))) / len(p),
            "cresce com o tamanho do lote",
        ),
        (_per_row_helper, "cresce com o tamanho do lote"),
        (_via_lists, "tolist"),
    ],
    ids=["map", "auxiliar", "listas"],
)
def test_exact_hidden_loops_are_rejected(answer, fragment, capsys):
    _rejected(ex.check_exact_match, answer, capsys, fragment)


def _no_eos_check(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    p = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    g = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    words = (g != pad_id) & (g != eos_id)
    return ((p == g) | ~words).all(1).float().mean().item()


def _whole_row(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    p = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    g = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    return (p == g).all(1).float().mean().item()


def _per_token(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    p = F.pad(pred, (0, width - pred.shape[1]), value=pad_id)
    g = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    return (p == g)[g != pad_id].float().mean().item()


def _common_columns(pred, target, eos_id, pad_id):
    m = min(pred.shape[1], target.shape[1])  # só as colunas em comum
    p, g = pred[:, :m], target[:, :m]
    is_eos = (p == eos_id).long()
    p = p.masked_fill((is_eos.cumsum(dim=1) - is_eos) > 0, pad_id)
    return (p == g).all(1).float().mean().item()


def _padded_with_eos(pred, target, eos_id, pad_id):
    width = max(pred.shape[1], target.shape[1])
    p = F.pad(pred, (0, width - pred.shape[1]), value=eos_id)  # errado: completa com <eos>
    g = F.pad(target, (0, width - target.shape[1]), value=pad_id)
    is_eos = (p == eos_id).long()
    p = p.masked_fill((is_eos.cumsum(dim=1) - is_eos) > 0, pad_id)
    return (p == g).all(1).float().mean().item()


def test_exact_prediction_cut_right_after_the_words_is_always_a_fixed_case():
    # O caso fixo que recusa uma saída sem <eos> cortada logo depois das palavras
    # (as duas respostas erradas abaixo a aceitam) roda em toda execução.
    from tpt.exercises.seq2seq import _match_cases

    for seed in (0, 1, 2):
        cases = _match_cases(torch.Generator().manual_seed(seed), seed)
        fixed = [c for c in cases if "logo depois das palavras" in c[4]]
        assert len(fixed) == 1
        pred, target, eos, pad, _ = fixed[0]
        assert exact_match(pred[:1], target[:1], eos, pad) == 0.0  # palavras certas, sem <eos>
        assert _common_columns(pred[:1], target[:1], eos, pad) == 1.0
        assert _padded_with_eos(pred[:1], target[:1], eos, pad) == 1.0


@pytest.mark.parametrize("answer", [_common_columns, _padded_with_eos], ids=["min", "eos"])
def test_exact_cut_prediction_mistakes_are_rejected_in_every_run(answer, capsys):
    for _ in range(5):  # casos sorteados diferentes a cada chamada: o fixo recusa sempre
        _rejected(ex.check_exact_match, answer, capsys, "logo depois das palavras")


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_common_columns, "min(t1, t2) colunas"),
        (_padded_with_eos, "completou pred com eos_id"),
        (_no_eos_check, "sem <eos> no lugar"),
        (_whole_row, "depois do primeiro <eos>"),
        (_per_token, "acerto por token"),
        (lambda *a: 100 * exact_match(*a), "porcentagem"),
        (lambda p, t, e, z: exact_match(p, t, 2, 0), "ids 2 e 0"),
        (lambda *a: exact_match(*a) > 0.5, "devolva um número"),
    ],
    ids=[
        "min-colunas",
        "com-eos",
        "sem-eos",
        "linha-inteira",
        "por-token",
        "porcentagem",
        "ids-fixos",
        "bool",
    ],
)
def test_exact_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_exact_match, answer, capsys, fragment)


@pytest.mark.parametrize("name", ["pred", "target"])
def test_exact_in_place_change_of_each_input_is_named(name, capsys):
    def sneaky(pred, target, eos_id, pad_id):
        value = exact_match(pred, target, eos_id, pad_id)
        (pred if name == "pred" else target).masked_fill_(pred[:, :1] < 0, 0)  # não muda valores
        return value

    _rejected(ex.check_exact_match, sneaky, capsys, f"modificou `{name}` no lugar")
