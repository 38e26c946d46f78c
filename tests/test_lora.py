"""tpt.lora: LoRA do zero (W + (α/r)·B·A), nas projeções do tpt.GPT.

Tolerâncias (float64, modelos pequenos com A e B sorteados longe de zero):
- B = 0: saída **bit a bit** igual à do modelo sem LoRA (somar zero não muda nada);
- forward fundido (merge_lora) contra o não fundido: 1e-12 (medido ~1e-14);
- unmerge_lora devolve os pesos a 1e-13 (W + ΔW - ΔW: medido ~1e-15, não é bit a bit);
- LoRALinear contra a fórmula com W + ΔW formada: 1e-12.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import tpt
from tpt.decode_step import lean_step_supported
from tpt.lora import LORA_TARGETS, LoRALinear, lora_targets

LLAMA = dict(positional="rope", norm="rmsnorm", activation="swiglu")
CASES = {
    "gpt2": dict(vocab_size=23, embed_dim=24, num_heads=4, num_layers=2),
    "llama": dict(vocab_size=29, embed_dim=32, num_heads=4, num_layers=2, bias=False, **LLAMA),
    "llama_gqa": dict(vocab_size=19, embed_dim=48, num_heads=6, num_kv_heads=2, num_layers=2,
                      **LLAMA),
    "mqa_alibi": dict(vocab_size=17, embed_dim=16, num_heads=4, num_kv_heads=1, num_layers=1,
                      positional="alibi"),
}
ALL_TARGETS = {
    "gpt2": ("q", "k", "v", "out_proj", "linear1", "linear2"),
    "llama": ("q", "k", "v", "out_proj", "linear1", "linear3", "linear2"),
    "llama_gqa": ("q", "k", "v", "out_proj", "linear1", "linear3", "linear2"),
    "mqa_alibi": ("qkv_proj", "out_proj", "linear1", "linear2"),
}


def _model(case: str, seed: int = 0) -> tpt.GPT:
    torch.manual_seed(seed)
    return tpt.GPT(tpt.GPTConfig(max_len=16, **CASES[case])).double().eval()


def _ids(model, seed: int = 1, b: int = 3, t: int = 9) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, model.config.vocab_size, (b, t), generator=g)


def _randomize(model, scale: float = 0.3, seed: int = 5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tpt.lora_parameters(model):
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------------------
# LoRALinear sozinha
# --------------------------------------------------------------------------------------
def test_lora_linear_is_the_formula_with_w_plus_delta():
    torch.manual_seed(0)
    lin = LoRALinear(12, 20, rank=3, alpha=6, slices={"a": (0, 5), "b": (11, 20)}).double()
    _randomize(lin)
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    w = lin.weight.detach().clone()
    for name, (start, end) in lin.slices.items():
        w[start:end] += 2.0 * lin.lora_B[name] @ lin.lora_A[name]  # α/r = 2
    assert lin.scaling == 2.0
    assert _max_diff(lin(x), F.linear(x, w, lin.bias)) <= 1e-12
    assert _max_diff(lin.delta_weight(), w - lin.weight) <= 1e-12
    # Fora das fatias, a saída é a da linear base, bit a bit.
    base = F.linear(x, lin.weight, lin.bias)
    assert torch.equal(lin(x)[..., 5:11], base[..., 5:11])


def test_lora_linear_starts_with_b_zero_and_a_random():
    torch.manual_seed(0)
    lin = LoRALinear(8, 6, rank=2, alpha=4)
    assert set(lin.slices) == {"all"} and lin.slices["all"] == (0, 6)
    assert lin.lora_A["all"].shape == (2, 8) and lin.lora_B["all"].shape == (6, 2)
    assert torch.count_nonzero(lin.lora_B["all"]) == 0
    assert torch.count_nonzero(lin.lora_A["all"]) == 16
    x = torch.randn(4, 8)
    assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))


def test_from_linear_keeps_weight_bias_dtype_and_mode():
    torch.manual_seed(0)
    base = torch.nn.Linear(5, 7, bias=False).double().train()
    lin = LoRALinear.from_linear(base, rank=1, alpha=1.0)
    assert torch.equal(lin.weight, base.weight) and lin.bias is None
    assert lin.weight.dtype == torch.float64 and lin.lora_A["all"].dtype == torch.float64
    assert lin.training


class _RecordShapes(TorchDispatchMode):
    """Guarda a forma de cada resultado das operações que não são vistas (view, t, ...)."""

    VIEWS = ("view", "t", "transpose", "permute", "expand", "detach", "alias", "slice",
             "split", "unsqueeze", "_unsafe_view", "as_strided")

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name not in self.VIEWS:
            for tensor in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(tensor, torch.Tensor):
                    self.shapes.append((name, tuple(tensor.shape)))
        return out


def test_forward_never_forms_w_plus_ba():
    torch.manual_seed(0)
    lin = LoRALinear(12, 20, rank=3, alpha=3, slices={"q": (0, 8), "v": (14, 20)})
    _randomize(lin)
    lin.weight.requires_grad_(False)  # congelado, como add_lora deixa
    lin.bias.requires_grad_(False)
    x = torch.randn(2, 5, 12, requires_grad=True)
    with _RecordShapes() as rec:
        lin(x).sum().backward()
    # Nenhuma conta produz uma matriz do tamanho de W (ou de uma fatia de W): só (..., r).
    banned = {(20, 12), (12, 20), (8, 12), (12, 8), (6, 12), (12, 6)}
    made = {shape for _, shape in rec.shapes}
    assert not made & banned, [(op, shape) for op, shape in rec.shapes if shape in banned]
    assert any(shape[-1] == 3 for shape in made)  # x Aᵀ: (..., r)


def test_slices_are_checked():
    with pytest.raises(ValueError, match="se sobrepõem"):
        LoRALinear(4, 10, 1, 1, slices={"a": (0, 5), "b": (4, 10)})
    with pytest.raises(ValueError, match=r"fatia 'a'=\(0, 11\) inválida.*out_features=10"):
        LoRALinear(4, 10, 1, 1, slices={"a": (0, 11)})
    with pytest.raises(ValueError, match="slices vazio"):
        LoRALinear(4, 10, 1, 1, slices={})
    with pytest.raises(TypeError, match="sem LoRA"):
        LoRALinear.from_linear(LoRALinear(4, 4, 1, 1), 1, 1)


# --------------------------------------------------------------------------------------
# add_lora no modelo
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_b_zero_leaves_the_output_unchanged_bit_for_bit(case):
    model = _model(case)
    ids = _ids(model)
    with torch.no_grad():
        expected = model(ids)
        assert tpt.add_lora(model, 2, 4, ALL_TARGETS[case]) is model
        assert torch.equal(model(ids), expected)


@pytest.mark.parametrize("case", list(CASES))
def test_merge_equals_unmerged_and_unmerge_restores_weights(case):
    model = _model(case)
    ids = _ids(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tpt.add_lora(model, 3, 5, ALL_TARGETS[case])
    _randomize(model)
    with torch.no_grad():
        unmerged = model(ids)
        assert _max_diff(unmerged, _model(case)(ids)) > 1e-2  # a LoRA muda a saída
        assert tpt.merge_lora(model) is model
        assert all(m.merged for m in model.modules() if isinstance(m, LoRALinear))
        assert _max_diff(model(ids), unmerged) <= 1e-12
        tpt.unmerge_lora(model)
        assert _max_diff(model(ids), unmerged) <= 1e-12
    after = model.state_dict()
    for name, value in before.items():
        assert _max_diff(after[name], value) <= 1e-13, name


@pytest.mark.parametrize("case", list(CASES))
def test_only_a_and_b_get_gradients_and_move(case):
    model = _model(case).train()
    tpt.add_lora(model, 2, 2, ALL_TARGETS[case])
    _randomize(model)
    lora = {id(p) for p in tpt.lora_parameters(model)}
    assert lora and all(p.requires_grad == (id(p) in lora) for p in model.parameters())
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) not in lora}
    optimizer = torch.optim.AdamW(tpt.lora_parameters(model), lr=1e-2)
    ids = _ids(model)
    logits = model(ids[:, :-1])  # (b, t - 1, V)
    F.cross_entropy(logits.transpose(1, 2), ids[:, 1:]).backward()
    for name, p in model.named_parameters():
        if id(p) in lora:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name
    optimizer.step()
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name


def _expected_trainable(model, rank, targets):
    c = model.config
    d, h_kv = c.embed_dim, c.num_kv_heads or c.num_heads
    kv = h_kv * d // c.num_heads
    ff = model.layers[0].ffn.ff_dim
    rows = {"q": d, "k": kv, "v": kv, "qkv_proj": d + 2 * kv, "out_proj": d,
            "linear1": ff, "linear3": ff, "linear2": d}
    cols = {"linear2": ff}
    return c.num_layers * sum(rank * (cols.get(t, d) + rows[t]) for t in targets)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("targets", [("q", "v"), ("k",), "all"])
def test_trainable_count_is_r_times_in_plus_out(case, targets):
    model = _model(case)
    targets = ALL_TARGETS[case] if targets == "all" else targets
    if "qkv_proj" in ALL_TARGETS[case] and targets != ALL_TARGETS[case]:
        targets = ("qkv_proj",)
    tpt.add_lora(model, 4, 8, targets)
    assert model.num_parameters(trainable_only=True) == _expected_trainable(model, 4, targets)
    assert sum(p.numel() for p in tpt.lora_parameters(model)) == _expected_trainable(
        model, 4, targets
    )
    assert lora_targets(model) == tuple(t for t in LORA_TARGETS if t in targets)


@pytest.mark.parametrize("case", ["llama_gqa", "mqa_alibi", "gpt2"])
@pytest.mark.parametrize("targets", [("q",), ("k",), ("v",), ("q", "v"), ("k", "v")])
def test_slices_of_the_fused_qkv_change_only_their_rows(case, targets):
    model = _model(case)
    tpt.add_lora(model, 2, 2, targets)
    _randomize(model)
    attn = model.layers[0].self_attn
    d, kv = attn.embed_dim, attn.kv_dim
    spans = {"q": (0, d), "k": (d, d + kv), "v": (d + kv, d + 2 * kv)}
    qkv = attn.qkv_proj
    assert isinstance(qkv, LoRALinear) and qkv.slices == {t: spans[t] for t in targets}
    for name in targets:  # com GQA, K e V têm h_kv·d_h linhas
        start, end = spans[name]
        assert qkv.lora_B[name].shape == (end - start, 2)
        assert qkv.lora_A[name].shape == (2, d)
    x = torch.randn(2, 5, d, dtype=torch.float64)
    with torch.no_grad():
        changed = (qkv(x) - F.linear(x, qkv.weight, qkv.bias)).abs().amax(dim=(0, 1))  # (out,)
    for name, (start, end) in spans.items():
        if name in targets:
            assert changed[start:end].min() > 0, name
        else:
            assert changed[start:end].max() == 0, name


def test_classifier_keeps_its_head_trainable_by_default():
    clf = tpt.GPTClassifier(_model("llama"), 3)
    tpt.add_lora(clf, 2, 4, ("q", "v"))
    trainable = {n for n, p in clf.named_parameters() if p.requires_grad}
    assert "score.weight" in trainable
    assert all(".lora_" in n or n == "score.weight" for n in trainable)
    frozen = tpt.add_lora(tpt.GPTClassifier(_model("llama"), 3), 2, 4, "q", modules_to_save=())
    assert not frozen.score.weight.requires_grad


def test_state_dict_keeps_the_base_names():
    model = _model("llama")
    names = set(model.state_dict())
    tpt.add_lora(model, 2, 4, ("q", "v", "linear1"))
    new = set(model.state_dict())
    assert names <= new
    assert "layers.0.self_attn.qkv_proj.lora_A.q" in new
    assert "layers.1.ffn.linear1.lora_B.all" in new


def test_dropout_only_in_training():
    model = _model("gpt2")
    tpt.add_lora(model, 2, 4, ("q", "v"), dropout=0.5)
    _randomize(model)
    ids = _ids(model)
    with torch.no_grad():
        a, b = model(ids), model(ids)
        assert torch.equal(a, b)
        model.train()
        torch.manual_seed(0)
        assert _max_diff(model(ids), a) > 1e-6


def test_generation_uses_the_adapters():
    model = _model("gpt2")
    tpt.add_lora(model, 2, 4, ("q", "v", "linear1"))
    _randomize(model, scale=1.0)
    assert not lean_step_supported(model, model.new_cache())  # o passo enxuto ignoraria B·A
    merged = tpt.merge_lora(copy.deepcopy(model)).state_dict()
    plain = _model("gpt2")  # um GPT comum com os pesos fundidos: usa o passo enxuto
    plain.load_state_dict({k: v for k, v in merged.items() if ".lora_" not in k})
    assert lean_step_supported(plain, plain.new_cache())
    ids = _ids(model, b=1, t=4)
    ours, theirs = (tpt.generate(m, ids, 8, greedy=True) for m in (model, plain))
    assert torch.equal(ours, theirs)
    assert not torch.equal(theirs, tpt.generate(_model("gpt2"), ids, 8, greedy=True))


# --------------------------------------------------------------------------------------
# Entradas ruins: erros em português
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank=0), r"rank=0 deve ser um inteiro >= 1"),
        (dict(rank=2.5), r"rank=2\.5 deve ser um inteiro >= 1"),
        (dict(rank=True), r"rank=True deve ser um inteiro >= 1"),
        (dict(alpha=0), r"alpha=0 deve ser um número positivo"),
        (dict(alpha=-1.0), r"alpha=-1\.0 deve ser um número positivo"),
        (dict(dropout=1.0), r"dropout=1\.0 deve estar em \[0, 1\)"),
        (dict(targets=("q_proj",)), r"alvo 'q_proj' inexistente; alvos válidos: q, k, v.*"
                                    r"do Hugging Face se chama 'q' no tpt"),
        (dict(targets=("wq",)), r"alvo 'wq' inexistente.*fatias da projeção fundida"),
        (dict(targets=()), r"targets está vazio"),
        (dict(targets=("q", "q")), r"alvos repetidos em targets: q"),
        (dict(targets=("qkv_proj", "v")), r"'qkv_proj'.*e também fatias"),
        (dict(targets=("linear3",)), r"'linear3' só existe na FFN SwiGLU"),
        (dict(modules_to_save=("cabeca",)), r"não tem o submódulo 'cabeca'"),
    ],
)
def test_add_lora_refuses_bad_inputs(kwargs, match):
    model = _model("gpt2")
    args = dict(rank=2, alpha=4, targets=("q", "v")) | kwargs
    with pytest.raises(ValueError, match=match):
        tpt.add_lora(model, **args)


def test_add_lora_refuses_other_models_moe_and_twice():
    with pytest.raises(TypeError, match="tpt.GPT ou tpt.GPTClassifier; recebi Linear"):
        tpt.add_lora(torch.nn.Linear(3, 3))
    moe = tpt.GPT(tpt.GPTConfig(vocab_size=11, embed_dim=8, num_heads=2, num_layers=1,
                                num_experts=2))
    with pytest.raises(ValueError, match="num_experts=2"):
        tpt.add_lora(moe)
    model = tpt.add_lora(_model("gpt2"))
    with pytest.raises(ValueError, match="já tem LoRA"):
        tpt.add_lora(model)


def test_merge_and_unmerge_refuse_the_wrong_state():
    model = _model("gpt2")
    with pytest.raises(ValueError, match="merge_lora: o modelo não tem LoRA"):
        tpt.merge_lora(model)
    tpt.add_lora(model)
    with pytest.raises(ValueError, match="não está fundido"):
        tpt.unmerge_lora(model)
    tpt.merge_lora(model)
    with pytest.raises(ValueError, match="já está fundido"):
        tpt.merge_lora(model)
    with pytest.raises(TypeError, match="lora_parameters espera um nn.Module"):
        tpt.lora_parameters("modelo")
