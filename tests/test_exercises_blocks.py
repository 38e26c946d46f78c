"""Conferências dos exercícios do notebook 07_blocos (tpt.exercises.blocks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import blocks as ex

# --------------------------------------------------------------------------------------
# Soluções de referência e respostas erradas típicas
# --------------------------------------------------------------------------------------


def ffn_conv(x, ffn):
    h = x.transpose(1, 2)  # (b, d, t)
    h = F.conv1d(h, ffn.linear1.weight.unsqueeze(-1), ffn.linear1.bias)  # (b, d_ff, t)
    h = F.conv1d(F.relu(h), ffn.linear2.weight.unsqueeze(-1), ffn.linear2.bias)  # (b, d, t)
    return h.transpose(1, 2)  # (b, t, d)


def pre_norm_layer(x, self_attn, ffn, norm1, norm2):
    out, _ = self_attn(norm1(x))
    x = x + out
    return x + ffn(norm2(x))


def encoder_layer_params(d, d_ff):
    return (4 * d * d + 4 * d) + (2 * d * d_ff + d_ff + d) + 2 * (2 * d)


def stub(*args, **kwargs):
    raise NotImplementedError("Escreva sua solução aqui")


def _pending(out: str) -> bool:
    return "⏳" in out and "ainda não resolvido" in out


def _rejected(check, answer, capsys, *fragments: str) -> str:
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, f"esperava {fragment!r} em:\n{out}"
    return out


# --------------------------------------------------------------------------------------
# Exercício 1: FFN como convolução
# --------------------------------------------------------------------------------------


def test_conv_reference_passes(capsys):
    assert ex.check_ffn_as_convolution(ffn_conv) is True
    assert "✅" in capsys.readouterr().out


def test_conv_with_conv1d_modules_passes(capsys):
    def with_modules(x, ffn):
        d, d_ff = ffn.linear1.in_features, ffn.linear1.out_features
        conv1, conv2 = nn.Conv1d(d, d_ff, 1), nn.Conv1d(d_ff, d, 1)
        with torch.no_grad():
            conv1.weight.copy_(ffn.linear1.weight[:, :, None])
            conv1.bias.copy_(ffn.linear1.bias)
            conv2.weight.copy_(ffn.linear2.weight[:, :, None])
            conv2.bias.copy_(ffn.linear2.bias)
        return conv2(torch.relu(conv1(x.permute(0, 2, 1)))).permute(0, 2, 1)

    assert ex.check_ffn_as_convolution(with_modules) is True
    assert "✅" in capsys.readouterr().out


def test_conv_torch_conv1d_name_is_counted(capsys):
    def via_torch(x, ffn):
        h = torch.conv1d(x.mT, ffn.linear1.weight[..., None], ffn.linear1.bias)
        return torch.conv1d(h.relu(), ffn.linear2.weight[..., None], ffn.linear2.bias).mT

    assert ex.check_ffn_as_convolution(via_torch) is True
    capsys.readouterr()


def test_conv_stub_is_pending(capsys):
    assert ex.check_ffn_as_convolution(stub) is False
    assert _pending(capsys.readouterr().out)


def test_conv_calling_the_module_is_forbidden(capsys):
    _rejected(ex.check_ffn_as_convolution, lambda x, ffn: ffn(x), capsys, "F.linear")


def test_conv_calling_f_linear_is_forbidden(capsys):
    def linear(x, ffn):
        h = F.relu(F.linear(x, ffn.linear1.weight, ffn.linear1.bias))
        return F.linear(h, ffn.linear2.weight, ffn.linear2.bias)

    _rejected(ex.check_ffn_as_convolution, linear, capsys, "F.linear")


def test_conv_matmul_without_conv_is_rejected(capsys):
    def matmul(x, ffn):
        h = F.relu(x @ ffn.linear1.weight.T + ffn.linear1.bias)
        return h @ ffn.linear2.weight.T + ffn.linear2.bias

    _rejected(ex.check_ffn_as_convolution, matmul, capsys, "contei 0 chamada(s) de F.conv1d")


def test_conv_without_transpose_gets_a_portuguese_hint(capsys):
    def no_transpose(x, ffn):
        h = F.conv1d(x, ffn.linear1.weight.unsqueeze(-1), ffn.linear1.bias)
        return F.conv1d(F.relu(h), ffn.linear2.weight.unsqueeze(-1), ffn.linear2.bias)

    _rejected(ex.check_ffn_as_convolution, no_transpose, capsys, "misturou posições")


def test_conv_runtime_error_gets_a_portuguese_hint(capsys):
    def flat_weight(x, ffn):
        h = F.conv1d(x.transpose(1, 2), ffn.linear1.weight, ffn.linear1.bias)  # peso 2-D
        return F.conv1d(F.relu(h), ffn.linear2.weight, ffn.linear2.bias).transpose(1, 2)

    _rejected(ex.check_ffn_as_convolution, flat_weight, capsys, "PyTorch reclamou", "unsqueeze")


def test_conv_missing_final_transpose(capsys):
    def no_final(x, ffn):
        return ffn_conv(x, ffn).transpose(1, 2)

    _rejected(ex.check_ffn_as_convolution, no_final, capsys, "Transponha de volta")


def test_conv_missing_relu(capsys):
    def no_relu(x, ffn):
        h = F.conv1d(x.transpose(1, 2), ffn.linear1.weight.unsqueeze(-1), ffn.linear1.bias)
        return F.conv1d(h, ffn.linear2.weight.unsqueeze(-1), ffn.linear2.bias).transpose(1, 2)

    _rejected(ex.check_ffn_as_convolution, no_relu, capsys, "ReLU")


def test_conv_missing_bias(capsys):
    def no_bias(x, ffn):
        h = F.conv1d(x.transpose(1, 2), ffn.linear1.weight.unsqueeze(-1))
        return F.conv1d(F.relu(h), ffn.linear2.weight.unsqueeze(-1)).transpose(1, 2)

    _rejected(ex.check_ffn_as_convolution, no_bias, capsys, "vieses")


def test_conv_three_calls_rejected(capsys):
    def three(x, ffn):
        F.conv1d(x.transpose(1, 2), ffn.linear1.weight.unsqueeze(-1))  # chamada a mais
        return ffn_conv(x, ffn)

    _rejected(ex.check_ffn_as_convolution, three, capsys, "contei 3")


def test_conv_check_restores_functions(capsys):
    linear, conv = F.linear, F.conv1d
    ex.check_ffn_as_convolution(lambda x, ffn: ffn(x))
    capsys.readouterr()
    assert F.linear is linear and F.conv1d is conv and torch.conv1d is conv


# --------------------------------------------------------------------------------------
# Exercício 2: pré-normalização
# --------------------------------------------------------------------------------------


def test_pre_norm_reference_passes(capsys):
    assert ex.check_pre_norm_layer(pre_norm_layer) is True
    assert "✅" in capsys.readouterr().out


def test_pre_norm_alternative_style_passes(capsys):
    def one_liner(x, self_attn, ffn, norm1, norm2):
        h = x + self_attn(norm1(x), need_weights=False)[0]
        return torch.add(h, ffn(norm2(h)))

    assert ex.check_pre_norm_layer(one_liner) is True
    capsys.readouterr()


def test_pre_norm_stub_is_pending(capsys):
    assert ex.check_pre_norm_layer(stub) is False
    assert _pending(capsys.readouterr().out)


def test_pre_norm_post_norm_is_reported(capsys):
    def post(x, self_attn, ffn, norm1, norm2):
        x = norm1(x + self_attn(x)[0])
        return norm2(x + ffn(x))

    _rejected(ex.check_pre_norm_layer, post, capsys, "pós-normalização")


def test_pre_norm_normalized_stream_is_reported(capsys):
    def normalized(x, self_attn, ffn, norm1, norm2):
        x = norm1(x)
        x = x + self_attn(x)[0]
        x = norm2(x)
        return x + ffn(x)

    _rejected(ex.check_pre_norm_layer, normalized, capsys, "fluxo normalizado")


def test_pre_norm_swapped_norms(capsys):
    def swapped(x, self_attn, ffn, norm1, norm2):
        return pre_norm_layer(x, self_attn, ffn, norm2, norm1)

    _rejected(ex.check_pre_norm_layer, swapped, capsys, "normas estão trocadas")


def test_pre_norm_missing_ffn_residual(capsys):
    def no_res(x, self_attn, ffn, norm1, norm2):
        x = x + self_attn(norm1(x))[0]
        return ffn(norm2(x))

    _rejected(ex.check_pre_norm_layer, no_res, capsys, "residual da FFN")


def test_pre_norm_missing_attention_residual(capsys):
    def no_res(x, self_attn, ffn, norm1, norm2):
        x = self_attn(norm1(x))[0]
        return x + ffn(norm2(x))

    _rejected(ex.check_pre_norm_layer, no_res, capsys, "residual da autoatenção")


def test_pre_norm_extra_final_norm(capsys):
    def extra(x, self_attn, ffn, norm1, norm2):
        return norm2(pre_norm_layer(x, self_attn, ffn, norm1, norm2))

    _rejected(ex.check_pre_norm_layer, extra, capsys, "normalizou a saída no fim")


def test_pre_norm_tuple_gets_hint(capsys):
    def tuple_bug(x, self_attn, ffn, norm1, norm2):
        x = x + self_attn(norm1(x))
        return x + ffn(norm2(x))

    _rejected(ex.check_pre_norm_layer, tuple_bug, capsys, "devolve um par")


def test_pre_norm_calling_torch_layer_is_forbidden(capsys):
    def cheat(x, self_attn, ffn, norm1, norm2):
        d = x.shape[-1]
        layer = nn.TransformerEncoderLayer(
            d, self_attn.num_heads, ffn.ff_dim, dropout=0.0, batch_first=True, norm_first=True
        ).eval()
        return layer(x)

    _rejected(ex.check_pre_norm_layer, cheat, capsys, "camada pronta")


def test_pre_norm_calling_tpt_layer_is_forbidden(capsys):
    def cheat(x, self_attn, ffn, norm1, norm2):
        layer = tpt.EncoderLayer(x.shape[-1], self_attn.num_heads, ffn.ff_dim, norm_first=True)
        layer.self_attn, layer.ffn, layer.norm1, layer.norm2 = self_attn, ffn, norm1, norm2
        return layer.eval()(x)

    _rejected(ex.check_pre_norm_layer, cheat, capsys, "camada pronta")


def test_pre_norm_calling_attention_twice_is_rejected(capsys):
    def twice(x, self_attn, ffn, norm1, norm2):
        self_attn(norm1(x))
        return pre_norm_layer(x, self_attn, ffn, norm1, norm2)

    _rejected(ex.check_pre_norm_layer, twice, capsys, "self_attn: 2")


def test_pre_norm_check_restores_forward(capsys):
    forward = tpt.EncoderLayer.forward
    torch_forward = nn.TransformerEncoderLayer.forward
    ex.check_pre_norm_layer(pre_norm_layer)
    capsys.readouterr()
    assert tpt.EncoderLayer.forward is forward
    assert nn.TransformerEncoderLayer.forward is torch_forward


def test_checks_do_not_touch_the_global_generator(capsys):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_pre_norm_layer(pre_norm_layer)
    ex.check_ffn_as_convolution(ffn_conv)
    capsys.readouterr()
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------------------
# Exercício 3: contagem de parâmetros
# --------------------------------------------------------------------------------------


def test_params_reference_passes(capsys):
    assert ex.check_encoder_layer_params(encoder_layer_params) is True
    out = capsys.readouterr().out
    assert "✅" in out
    assert "3.152.384" in out  # d = 512, d_ff = 2048


def test_params_expanded_formula_passes(capsys):
    assert ex.check_encoder_layer_params(lambda d, f: 4 * d**2 + 2 * d * f + 9 * d + f) is True
    capsys.readouterr()


def test_params_stub_is_pending(capsys):
    assert ex.check_encoder_layer_params(stub) is False
    assert _pending(capsys.readouterr().out)


def test_params_building_modules_is_forbidden(capsys):
    def build(d, d_ff):
        layer = tpt.EncoderLayer(d, 1, d_ff)
        return sum(p.numel() for p in layer.parameters())

    _rejected(ex.check_encoder_layer_params, build, capsys, "fórmula em d e d_ff")


def test_params_float_is_rejected(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: float(encoder_layer_params(d, f)),
        capsys,
        "inteiro",
    )


def test_params_without_norms(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: encoder_layer_params(d, f) - 4 * d,
        capsys,
        "LayerNorm",
    )


def test_params_one_norm(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: encoder_layer_params(d, f) - 2 * d,
        capsys,
        "a camada tem duas",
    )


def test_params_without_biases(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: 4 * d * d + 2 * d * f + 4 * d,
        capsys,
        "Faltam todos os vieses",
    )


def test_params_without_ffn_biases(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: 4 * d * d + 4 * d + 2 * d * f + 4 * d,
        capsys,
        "vieses da FFN",
    )


def test_params_fixed_4d(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: encoder_layer_params(d, 4 * d),
        capsys,
        "d_ff = 4d fixo",
    )


def test_params_without_output_projection(capsys):
    _rejected(
        ex.check_encoder_layer_params,
        lambda d, f: encoder_layer_params(d, f) - d * d - d,
        capsys,
        "W_O",
    )


def test_params_check_restores_module_init(capsys):
    init = nn.Module.__init__
    ex.check_encoder_layer_params(lambda d, f: nn.Linear(d, f) and 0)
    capsys.readouterr()
    assert nn.Module.__init__ is init
    nn.Linear(2, 2)  # ainda funciona
