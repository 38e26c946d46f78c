"""Conferências dos exercícios do notebook 07_blocos (tpt.exercises.blocks).

Para cada exercício: respostas certas em estilos diferentes passam, e cada classe de
resposta errada da issue dos exercícios é recusada com a mensagem certa (entrada
modificada no lugar, gradiente cortado, operação proibida por outro nome, tabela dos
casos fixos, enganos típicos).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import tpt
from tpt.exercises import checks

ex = checks("blocks")


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
        assert fragment.lower() in out.lower(), f"esperava {fragment!r} em:\n{out}"
    return out


def test_only_checks_are_visible():
    assert dir(ex) == [
        "check_encoder_layer_flops",
        "check_ffn_as_convolution",
        "check_parallel_block",
    ]
    for hidden in ("_measured_flops", "_parallel_reference", "_FLOP_MISTAKES", "FeedForward"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", [ex.check_ffn_as_convolution, ex.check_parallel_block, ex.check_encoder_layer_flops]
)
def test_stub_is_pending(check, capsys):
    assert check(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: a FFN como duas convoluções
# --------------------------------------------------------------------------------------
def ffn_conv(x, ffn):
    h = x.transpose(1, 2)  # (b, d, t)
    h = F.relu(F.conv1d(h, ffn.linear1.weight.unsqueeze(-1), ffn.linear1.bias))
    return F.conv1d(h, ffn.linear2.weight.unsqueeze(-1), ffn.linear2.bias).transpose(1, 2)


def conv_modules(x, ffn):
    d, d_ff = ffn.linear1.in_features, ffn.linear1.out_features
    conv1, conv2 = nn.Conv1d(d, d_ff, 1), nn.Conv1d(d_ff, d, 1)
    conv1.weight = nn.Parameter(ffn.linear1.weight[:, :, None])  # mesmos tensores: gradiente
    conv1.bias, conv2.bias = ffn.linear1.bias, ffn.linear2.bias
    conv2.weight = nn.Parameter(ffn.linear2.weight[:, :, None])
    return conv2(torch.relu(conv1(x.permute(0, 2, 1)))).permute(0, 2, 1)


def torch_conv(x, ffn):
    h = torch.conv1d(x.mT, ffn.linear1.weight[..., None], ffn.linear1.bias).relu()
    return torch.conv1d(h, ffn.linear2.weight[..., None], ffn.linear2.bias).mT


@pytest.mark.parametrize("answer", [ffn_conv, torch_conv], ids=["F.conv1d", "torch.conv1d"])
def test_conv_correct_styles_pass(answer, capsys):
    _accepted(ex.check_ffn_as_convolution, answer, capsys)


def test_conv_modules_built_from_detached_weights_lose_the_gradient(capsys):
    # nn.Parameter(peso[..., None]) cria uma folha nova: o gradiente não chega a ffn.
    _rejected(ex.check_ffn_as_convolution, conv_modules, capsys, "gradiente")


def _linear_default(x, ffn, _lin=F.linear):
    h = F.relu(_lin(x, ffn.linear1.weight, ffn.linear1.bias))
    return _lin(h, ffn.linear2.weight, ffn.linear2.bias)


_LINEAR_PARTIAL = functools.partial(F.linear)


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, ffn: ffn(x),
        lambda x, ffn: ffn.linear2(F.relu(ffn.linear1(x))),
        _linear_default,
        lambda x, ffn: _LINEAR_PARTIAL(
            F.relu(_LINEAR_PARTIAL(x, ffn.linear1.weight, ffn.linear1.bias)),
            ffn.linear2.weight,
            ffn.linear2.bias,
        ),
        lambda x, ffn: torch.ops.aten.addmm(
            ffn.linear2.bias,
            F.relu(x.reshape(-1, x.shape[-1]) @ ffn.linear1.weight.T + ffn.linear1.bias),
            ffn.linear2.weight.T,
        ).reshape(x.shape),
        lambda x, ffn: (
            torch.einsum(
                "btf,df->btd",
                F.relu(torch.einsum("btd,fd->btf", x, ffn.linear1.weight) + ffn.linear1.bias),
                ffn.linear2.weight,
            )
            + ffn.linear2.bias
        ),
    ],
    ids=["ffn(x)", "linear1", "argumento-padrao", "partial", "aten", "einsum"],
)
def test_conv_matrix_products_are_seen_whatever_the_name(answer, capsys):
    _rejected(ex.check_ffn_as_convolution, answer, capsys, "multiplicou matrizes")


def test_conv_hidden_matmul_beside_two_convs_is_seen(capsys):
    def both(x, ffn):
        _ = x @ ffn.linear1.weight.T  # uma conta a mais, escondida
        return ffn_conv(x, ffn)

    _rejected(ex.check_ffn_as_convolution, both, capsys, "multiplicou matrizes", "mm")


def test_conv_count_is_enforced(capsys):
    def three(x, ffn):
        F.conv1d(x.transpose(1, 2), ffn.linear1.weight.unsqueeze(-1))
        return ffn_conv(x, ffn)

    _rejected(ex.check_ffn_as_convolution, three, capsys, "contei 3 convolução(ões)")


def test_conv_in_place_change_of_x_is_named(capsys):
    def sneaky(x, ffn):
        out = ffn_conv(x, ffn)
        x.zero_()
        return out

    _rejected(ex.check_ffn_as_convolution, sneaky, capsys, "modificou `x` no lugar")


def test_conv_in_place_change_of_ffn_is_named(capsys):
    def sneaky(x, ffn):
        with torch.no_grad():
            ffn.linear1.bias.zero_()  # "zera o viés" e depois usa os pesos
        return ffn_conv(x, ffn)

    _rejected(ex.check_ffn_as_convolution, sneaky, capsys, "modificou `ffn` no lugar")


def test_conv_no_grad_and_detach_are_rejected(capsys):
    def under_no_grad(x, ffn):
        with torch.no_grad():
            return ffn_conv(x, ffn)

    _rejected(ex.check_ffn_as_convolution, under_no_grad, capsys, "não tem gradiente")
    _rejected(
        ex.check_ffn_as_convolution,
        lambda x, ffn: ffn_conv(x, ffn).detach(),
        capsys,
        "não tem gradiente",
    )


def test_conv_without_transpose_is_diagnosed(capsys):
    def no_transpose(x, ffn):
        h = F.relu(F.conv1d(x, ffn.linear1.weight.unsqueeze(-1), ffn.linear1.bias))
        return F.conv1d(h, ffn.linear2.weight.unsqueeze(-1), ffn.linear2.bias)

    _rejected(ex.check_ffn_as_convolution, no_transpose, capsys, "misturou posições")


def test_conv_typical_mistakes(capsys):
    def no_relu(x, ffn):
        h = F.conv1d(x.mT, ffn.linear1.weight[..., None], ffn.linear1.bias)
        return F.conv1d(h, ffn.linear2.weight[..., None], ffn.linear2.bias).mT

    def no_bias(x, ffn):
        h = F.conv1d(x.mT, ffn.linear1.weight[..., None]).relu()
        return F.conv1d(h, ffn.linear2.weight[..., None]).mT

    _rejected(ex.check_ffn_as_convolution, no_relu, capsys, "faltou o ReLU")
    _rejected(ex.check_ffn_as_convolution, no_bias, capsys, "faltaram os vieses")
    _rejected(
        ex.check_ffn_as_convolution,
        lambda x, ffn: ffn_conv(x, ffn).transpose(1, 2),
        capsys,
        "Transponha de volta",
    )


def test_conv_student_error_is_explained(capsys):
    def flat_weight(x, ffn):
        return F.conv1d(x.transpose(1, 2), ffn.linear1.weight, ffn.linear1.bias)

    _rejected(
        ex.check_ffn_as_convolution, flat_weight, capsys, "levantou RuntimeError", "unsqueeze"
    )


# --------------------------------------------------------------------------------------
# Exercício 2: o bloco paralelo
# --------------------------------------------------------------------------------------
def parallel_block(x, self_attn, ffn, norm):
    h = norm(x)
    attn_out, _ = self_attn(h)
    return x + attn_out + ffn(h)


def parallel_twice(x, self_attn, ffn, norm):
    return x + ffn(norm(x)) + self_attn(norm(x), need_weights=True)[0]


@pytest.mark.parametrize(
    "answer", [parallel_block, parallel_twice], ids=["uma-norma", "duas-vezes"]
)
def test_parallel_correct_styles_pass(answer, capsys):
    _accepted(ex.check_parallel_block, answer, capsys)


def test_parallel_matches_the_definition_with_tpt_pieces():
    layer = tpt.EncoderLayer(8, 2, 16, dropout=0.0, norm_first=True).eval()
    x = torch.randn(2, 5, 8)
    h = layer.norm1(x)
    expected = x + layer.self_attn(h)[0] + layer.ffn(h)
    assert torch.allclose(parallel_block(x, layer.self_attn, layer.ffn, layer.norm1), expected)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (
            lambda x, a, f, n: (lambda y: y + f(n(y)))(x + a(n(x))[0]),
            "bloco sequencial",
        ),
        (lambda x, a, f, n: a(n(x))[0] + f(n(x)), "faltou a conexão residual"),
        (lambda x, a, f, n: n(x) + a(n(x))[0] + f(n(x)), "fluxo normalizado"),
        (lambda x, a, f, n: x + a(x)[0] + f(x), "sem normalizar"),
        (lambda x, a, f, n: n(x + a(x)[0] + f(x)), "normalizou a soma no fim"),
        (lambda x, a, f, n: x + a(n(x))[0] + f(a(n(x))[0]), "a FFN leu a saída da atenção"),
    ],
    ids=[
        "sequencial",
        "sem-residual",
        "residual-normalizada",
        "sem-norma",
        "pos-norma",
        "ffn-depois",
    ],
)
def test_parallel_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_parallel_block, answer, capsys, fragment)


@pytest.mark.parametrize("name", ["x", "self_attn", "ffn", "norm"])
def test_parallel_in_place_change_of_each_input_is_named(name, capsys):
    def sneaky(x, self_attn, ffn, norm):
        out = parallel_block(x, self_attn, ffn, norm)
        target = {"x": x, "self_attn": self_attn, "ffn": ffn, "norm": norm}[name]
        with torch.no_grad():
            (target if name == "x" else next(target.parameters())).mul_(1.0001)
        return out

    _rejected(ex.check_parallel_block, sneaky, capsys, f"modificou `{name}` no lugar")


def test_parallel_no_grad_and_partial_detach_are_rejected(capsys):
    def under_no_grad(x, a, f, n):
        with torch.no_grad():
            return parallel_block(x, a, f, n)

    def frozen_ffn(x, a, f, n):
        h = n(x)
        return x + a(h)[0] + f(h.detach())  # o gradiente não volta pela FFN até x e à norma

    _rejected(ex.check_parallel_block, under_no_grad, capsys, "não tem gradiente")
    _rejected(ex.check_parallel_block, frozen_ffn, capsys, "o gradiente em relação a")


# --------------------------------------------------------------------------------------
# Exercício 3: os FLOPs de uma camada do encoder
# --------------------------------------------------------------------------------------
def encoder_layer_flops(d, d_ff, t):
    return 8 * t * d * d + 4 * t * t * d + 4 * t * d * d_ff


def flops_by_parts(d, d_ff, t):
    projections = 4 * (2 * t * d * d)
    attention = 2 * (2 * t * t * d)
    ffn = 2 * (2 * t * d * d_ff)
    return float(projections + attention + ffn)  # um float inteiro também vale


@pytest.mark.parametrize(
    "answer", [encoder_layer_flops, flops_by_parts], ids=["direto", "por-partes-float"]
)
def test_flops_correct_styles_pass(answer, capsys):
    _accepted(ex.check_encoder_layer_flops, answer, capsys)


@pytest.mark.parametrize(("d", "h", "d_ff", "t"), [(8, 2, 32, 1), (12, 3, 20, 7), (30, 5, 7, 33)])
def test_flops_formula_is_what_flop_counter_measures(d, h, d_ff, t):
    layer = tpt.EncoderLayer(d, h, d_ff, dropout=0.0, fused=False).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(torch.randn(1, t, d))
    assert counter.get_total_flops() == encoder_layer_flops(d, d_ff, t)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda d, f, t: encoder_layer_flops(d, f, t) // 2, "multiplicações-e-somas (MACs)"),
        (lambda d, f, t: 8 * t * d * d + 4 * t * d * f, "faltam as duas multiplicações da própria"),
        (lambda d, f, t: 8 * t * d * d + 2 * t * t * d + 4 * t * d * f, "falta uma das duas multi"),
        (
            lambda d, f, t: 6 * t * d * d + 4 * t * t * d + 4 * t * d * f,
            "falta a projeção de saída",
        ),
        (lambda d, f, t: encoder_layer_flops(d, 4 * d, t), "d_ff = 4d fixo"),
        (
            lambda d, f, t: 8 * t * d * d + 4 * t * t * d + 2 * t * d * f,
            "uma das duas matrizes da FFN",
        ),
        (lambda d, f, t: encoder_layer_flops(d, f, t) // t, "por token"),
        (lambda d, f, t: encoder_layer_flops(d, f, t) + 1, "Some as multiplicações"),
    ],
    ids=["macs", "sem-t2", "meio-t2", "sem-wo", "dff-fixo", "meia-ffn", "por-token", "outro"],
)
def test_flops_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    out = _rejected(ex.check_encoder_layer_flops, answer, capsys, fragment, "FlopCounterMode mediu")
    if fragment == "Some as multiplicações":
        assert "Parece" not in out and "MACs" not in out  # nenhum diagnóstico sem teste


def test_flops_lookup_table_of_the_fixed_cases_fails_on_drawn_cases(capsys):
    table = {(8, 32, 1): 1568, (12, 20, 7): 17136, (16, 64, 16): 0}
    table[(16, 64, 16)] = encoder_layer_flops(16, 64, 16)
    assert all(v == encoder_layer_flops(*k) for k, v in table.items())
    _rejected(
        ex.check_encoder_layer_flops, lambda d, f, t: table.get((d, f, t), 0), capsys, "mediu"
    )


def test_flops_measuring_instead_of_a_formula_is_rejected(capsys):
    def measure(d, d_ff, t):
        with torch.device("meta"):
            layer = tpt.EncoderLayer(d, 1, d_ff, dropout=0.0, fused=False)
            x = torch.empty(1, t, d)
        with FlopCounterMode(display=False) as counter:
            layer(x)
        return counter.get_total_flops()

    _rejected(ex.check_encoder_layer_flops, measure, capsys, "rodou operações do PyTorch")


def test_flops_non_integer_is_explained(capsys):
    _rejected(
        ex.check_encoder_layer_flops,
        lambda d, f, t: encoder_layer_flops(d, f, t) / 3,
        capsys,
        "número inteiro de FLOPs",
    )
