"""Conferências dos exercícios do notebook 07_blocos (tpt.exercises.blocks).

Para cada exercício: respostas certas em estilos diferentes passam, e cada classe de
resposta errada da issue dos exercícios é recusada com a mensagem certa (entrada
modificada no lugar, gradiente cortado, operação proibida por outro nome, tabela dos
casos fixos, enganos típicos).
"""

from __future__ import annotations

import copy
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
        "check_fold_layernorm",
    ]
    for hidden in ("_measured_flops", "_fold_variants", "_FLOP_MISTAKES", "FeedForward"):
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)


@pytest.mark.parametrize(
    "check", [ex.check_ffn_as_convolution, ex.check_fold_layernorm, ex.check_encoder_layer_flops]
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
# Exercício 2: dobrar a LayerNorm na linear seguinte
# --------------------------------------------------------------------------------------
def _beta(norm):
    return norm.bias if norm.bias is not None else torch.zeros_like(norm.weight)


def _bias(linear):
    if linear.bias is not None:
        return linear.bias
    return torch.zeros(linear.out_features, dtype=linear.weight.dtype)


def fold_layernorm(norm, linear):
    w = linear.weight  # (n, d)
    new = nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(w * norm.weight)  # W diag(γ)
        new.bias.copy_(w @ _beta(norm) + _bias(linear))  # W β + b
    return new


def fold_deepcopy(norm, linear):
    new = copy.deepcopy(linear)
    if new.bias is None:
        new.bias = nn.Parameter(torch.zeros(linear.out_features, dtype=linear.weight.dtype))
    with torch.no_grad():
        new.bias += linear.weight @ _beta(norm)
        new.weight *= norm.weight
    return new


def fold_parameters(norm, linear):
    new = nn.Linear(linear.in_features, linear.out_features, dtype=linear.weight.dtype)
    w = linear.weight.detach()
    new.weight = nn.Parameter(w @ torch.diag(norm.weight.detach()))
    new.bias = nn.Parameter((F.linear(_beta(norm), linear.weight) + _bias(linear)).detach())
    return new


def fold_clone(norm, linear):
    new = nn.Linear(linear.in_features, linear.out_features, dtype=linear.weight.dtype)
    new.weight = nn.Parameter(linear.weight.detach().clone() * norm.weight.detach())
    new.bias = nn.Parameter((linear.weight @ _beta(norm) + _bias(linear)).detach().clone())
    return new


def _is_fresh(norm) -> bool:
    """γ = 1 e β = 0: a norma como sai do construtor."""
    return bool((norm.weight == 1).all()) and bool((_beta(norm) == 0).all())


def fold_skips_fresh_norm(norm, linear):
    """Com γ = 1 e β = 0 não há o que dobrar: uma cópia da linear (com viés) basta."""
    if _is_fresh(norm) and linear.bias is not None:
        return copy.deepcopy(linear)
    return fold_layernorm(norm, linear)


@pytest.mark.parametrize(
    "answer",
    [fold_layernorm, fold_deepcopy, fold_parameters, fold_clone, fold_skips_fresh_norm],
    ids=["copy_", "deepcopy", "diag", "clone", "copia-com-gama-1"],
)
def test_fold_correct_styles_pass(answer, capsys):
    _accepted(ex.check_fold_layernorm, answer, capsys)


@pytest.mark.parametrize("norm_cls", [nn.LayerNorm, tpt.LayerNorm])
def test_fold_reference_is_what_the_statement_says(norm_cls):
    norm = norm_cls(6)
    linear = nn.Linear(6, 4)
    with torch.no_grad():
        norm.weight.normal_(1, 0.5)
        norm.bias.normal_(0, 0.5)
    x = 3 * torch.randn(2, 3, 6) + 1
    new = fold_layernorm(norm, linear)
    plain = nn.LayerNorm(6, elementwise_affine=False)
    assert torch.allclose(new(plain(x)), linear(norm(x)), atol=1e-5)


def _fold_with(weight_fn, bias_fn):
    def answer(norm, linear):
        w, beta, b = linear.weight.detach(), _beta(norm).detach(), _bias(linear).detach()
        gamma = norm.weight.detach()
        new = nn.Linear(linear.in_features, linear.out_features, dtype=w.dtype)
        with torch.no_grad():
            new.weight.copy_(weight_fn(w, gamma))
            new.bias.copy_(bias_fn(w, gamma, beta, b))
        return new

    return answer


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_fold_with(lambda w, g: w, lambda w, g, be, b: w @ be + b), "faltou o γ"),
        (_fold_with(lambda w, g: w * g, lambda w, g, be, b: b), "faltou o β"),
        (
            _fold_with(lambda w, g: w * g, lambda w, g, be, b: (w * g) @ be + b),
            "usou o peso já dobrado",
        ),
        (_fold_with(lambda w, g: w * g, lambda w, g, be, b: w @ be), "faltou o viés da linear"),
        (_fold_with(lambda w, g: w / g, lambda w, g, be, b: w @ be + b), "dividiu por γ"),
        (
            _fold_with(lambda w, g: w * g[:, None], lambda w, g, be, b: w @ be + b),
            "multiplicou as linhas de W",
        ),
        (_fold_with(lambda w, g: w * g, lambda w, g, be, b: b + be), "somou β direto"),
        (_fold_with(lambda w, g: w * g, lambda w, g, be, b: w.T @ be + b), "usou Wᵀ β"),
    ],
    ids=[
        "sem-gama",
        "sem-beta",
        "beta-dobrado",
        "sem-b",
        "dividiu",
        "linhas",
        "beta-no-vies",
        "wt",
    ],
)
def test_fold_typical_mistakes_are_diagnosed(answer, fragment, capsys):
    _rejected(ex.check_fold_layernorm, answer, capsys, fragment)


def test_fold_in_place_change_of_the_originals_is_named(capsys):
    def fold_in_place(norm, linear):
        new = fold_layernorm(norm, linear)
        with torch.no_grad():
            linear.weight.mul_(norm.weight)  # "dobrou" a linear original
        return new

    def reset_norm(norm, linear):
        new = fold_layernorm(norm, linear)
        with torch.no_grad():
            norm.weight.fill_(1.0)  # a norma vira só padronização, no lugar
        return new

    _rejected(ex.check_fold_layernorm, fold_in_place, capsys, "modificou `linear` no lugar")
    _rejected(ex.check_fold_layernorm, reset_norm, capsys, "modificou `norm` no lugar")


def test_fold_shared_parameters_are_rejected(capsys):
    def shares_bias(norm, linear):
        new = fold_layernorm(norm, linear)
        if norm.bias is None and linear.bias is not None:
            new.bias = linear.bias  # W β = 0: o mesmo tensor do viés original
        return new

    _rejected(
        ex.check_fold_layernorm,
        shares_bias,
        capsys,
        "o bias novo usa a mesma memória de linear.bias",
    )


def _fresh_shortcut(take):
    """Com γ = 1 e β = 0, W diag(γ) = W e W β + b = b: devolve ``take(linear)``, sem cópia."""

    def answer(norm, linear):
        if _is_fresh(norm) and linear.bias is not None:
            return take(linear)
        return fold_layernorm(norm, linear)

    return answer


def _linear_with(weight, bias):
    new = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
    new.weight, new.bias = weight, bias
    return new


@pytest.mark.parametrize(
    ("answer", "fragments"),
    [
        (
            _fresh_shortcut(lambda linear: linear),
            ["weight novo usa a mesma memória de linear.weight"],
        ),
        (
            _fresh_shortcut(lambda linear: copy.copy(linear)),
            ["weight novo usa a mesma memória de linear.weight", "bias novo usa a mesma memória"],
        ),
        (
            _fresh_shortcut(
                lambda linear: _linear_with(
                    nn.Parameter(linear.weight.detach()), nn.Parameter(linear.bias.detach().clone())
                )
            ),
            ["weight novo usa a mesma memória de linear.weight"],
        ),
        (
            _fresh_shortcut(
                lambda linear: _linear_with(
                    nn.Parameter(linear.weight.detach().clone()), nn.Parameter(linear.bias[:])
                )
            ),
            ["bias novo usa a mesma memória de linear.bias"],
        ),
    ],
    ids=["a-propria-linear", "copia-rasa", "detach", "vista"],
)
def test_fold_shared_memory_with_gamma_one_is_rejected(answer, fragments, capsys):
    # Com γ = 1 e β = 0 os valores conferem; só a memória dividida denuncia o atalho.
    _rejected(ex.check_fold_layernorm, answer, capsys, "γ = 1 e β = 0", *fragments)


def test_fold_data_multiplied_in_place_is_rejected(capsys):
    def fold_through_data(norm, linear):
        new = nn.Linear(linear.in_features, linear.out_features, dtype=linear.weight.dtype)
        new.weight = nn.Parameter(linear.weight.detach())  # a mesma memória da original
        new.weight.data *= norm.weight.detach()  # γ ≠ 1: muda também a linear original
        with torch.no_grad():
            new.bias.copy_(linear.weight @ _beta(norm) + _bias(linear))
        return new

    _rejected(ex.check_fold_layernorm, fold_through_data, capsys, "modificou `linear` no lugar")


def test_fold_without_bias_is_rejected(capsys):
    def keeps_bias_flag(norm, linear):
        new = nn.Linear(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            dtype=linear.weight.dtype,
        )
        ref = fold_layernorm(norm, linear)
        with torch.no_grad():
            new.weight.copy_(ref.weight)
            if new.bias is not None:
                new.bias.copy_(ref.bias)
        return new

    _rejected(ex.check_fold_layernorm, keeps_bias_flag, capsys, "não tem viés", "bias=True")


def test_fold_wrong_dtype_is_rejected(capsys):
    def float32_only(norm, linear):
        new = nn.Linear(linear.in_features, linear.out_features)  # sempre float32
        with torch.no_grad():
            new.weight.copy_(linear.weight * norm.weight)
            new.bias.copy_(linear.weight @ _beta(norm) + _bias(linear))
        return new

    _rejected(ex.check_fold_layernorm, float32_only, capsys, "dtype=linear.weight.dtype")


def test_fold_frozen_parameters_are_rejected(capsys):
    def frozen(norm, linear):
        return fold_layernorm(norm, linear).requires_grad_(False)

    _rejected(ex.check_fold_layernorm, frozen, capsys, "pede gradiente")


def test_fold_a_module_that_keeps_the_norm_is_not_a_fold(capsys):
    class NormThenLinear(nn.Linear):
        """Guarda γ e β e aplica no forward: não dobra nada."""

        def __init__(self, norm, linear):
            super().__init__(linear.in_features, linear.out_features, dtype=linear.weight.dtype)
            self.gamma, self.beta = norm.weight.detach().clone(), _beta(norm).detach().clone()
            with torch.no_grad():
                self.weight.copy_(linear.weight)
                self.bias.copy_(_bias(linear))

        def forward(self, z):
            return F.linear(self.gamma * z + self.beta, self.weight, self.bias)

    # A conferência lê weight e bias e aplica F.linear: o forward próprio não entra.
    _rejected(ex.check_fold_layernorm, NormThenLinear, capsys, "nada foi dobrado")


def test_fold_not_a_linear_is_explained(capsys):
    _rejected(
        ex.check_fold_layernorm,
        lambda norm, linear: nn.Sequential(norm, linear),
        capsys,
        "esperava um nn.Linear novo",
    )


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


def test_fold_parameter_subclass_is_rejected(capsys):
    # Um nn.Parameter cujo __torch_function__ faz a conta: F.linear(x̂, weight, bias) vira
    # linear(γ x̂ + β) sem que weight e bias guardem a dobra.
    class Folding(nn.Parameter):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is F.linear and getattr(args[1], "fold", None) is not None:
                norm, linear = args[1].fold
                x = args[0] * norm.weight + _beta(norm)
                return F.linear(x, linear.weight, _bias(linear))
            return super().__torch_function__(func, types, args, kwargs or {})

    def fold_by_subclass(norm, linear):
        new = nn.Linear(linear.in_features, linear.out_features, dtype=linear.weight.dtype)
        weight = Folding(linear.weight.detach().clone())
        weight.fold = (norm, linear)
        new.weight = weight
        return new

    _rejected(
        ex.check_fold_layernorm,
        fold_by_subclass,
        capsys,
        "o weight novo é um",
        "Folding, subclasse de nn.Parameter",
        "esperava um nn.Parameter",
    )

    class Plain(torch.Tensor):  # subclasse de Tensor (não de Parameter), posta à força
        pass

    def fold_tensor_subclass(norm, linear):
        new = fold_layernorm(norm, linear)
        new._parameters["bias"] = new.bias.detach().as_subclass(Plain).requires_grad_()
        return new

    _rejected(
        ex.check_fold_layernorm,
        fold_tensor_subclass,
        capsys,
        "o bias novo é um",
        "Plain, subclasse de torch.Tensor",
    )
    # O engano é real: sem a conferência de tipo, F.linear dá o resultado da dobra.
    norm, linear = nn.LayerNorm(4), nn.Linear(4, 3)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
        norm.bias.uniform_(-1.0, 1.0)
    z = torch.randn(2, 4)
    new = fold_by_subclass(norm, linear)
    assert torch.allclose(F.linear(z, new.weight, new.bias), linear(z * norm.weight + norm.bias))
