"""tpt.hf com o classificador e com a LoRA: to_hf/from_hf e to_peft/from_peft.

Tudo offline (HF_HUB_OFFLINE=1), com configurações sorteadas (sementes fixas).

Tolerâncias (logits em float64), as mesmas de tests/test_hf.py:
- GPT-2: 1e-10 (medido ~1e-15);
- Llama com a RMSNorm e os ângulos do RoPE do HF em float64 (fixture ``llama64``): 1e-10
  (medido ~1e-15); como o transformers é distribuído (RMSNorm em float32): 1e-5
  (medido ~1e-6);
- from_peft (volta ao tpt, sem passar pelas contas do HF): 1e-12.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nenhum teste baixa nada

import copy

import pytest
import torch

import tpt

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from tpt import hf  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
# Avisos internos do peft 0.21 ao chamar o transformers 5 (get_peft_model, from_pretrained),
# e o de LoRA numa tabela amarrada (o caso recusado de propósito abaixo).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing`:FutureWarning"),
    pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`:UserWarning"),
]

LLAMA = dict(positional="rope", norm="rmsnorm", activation="swiglu")
TARGETS = {
    "gpt2": ["q", "k", "v", "qkv_proj", "out_proj", "linear1", "linear2"],
    "llama": ["q", "k", "v", "qkv_proj", "out_proj", "linear1", "linear3", "linear2"],
}


# A fixture llama64 (RMSNorm e RoPE do Llama em float64) fica em tests/conftest.py.


def _drawn(seed: int, family: str) -> tuple[dict, tuple[str, ...], int, float]:
    """Configuração, alvos da LoRA, posto e alpha sorteados (semente fixa)."""
    g = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    heads = pick([1, 2, 4, 6])
    head_dim = pick([2, 4, 6])
    kwargs = dict(
        vocab_size=pick([13, 29, 61]),
        embed_dim=heads * head_dim,
        num_heads=heads,
        num_layers=pick([1, 2]),
        tie_weights=pick([True, False]),
        bias=pick([True, False]),
        head_scale=pick([True, False]),
        ff_dim=pick([None, 3 * heads * head_dim + 1]),
    )
    if family == "gpt2":
        kwargs["activation"] = pick(["gelu", "gelu_tanh", "relu"])
    else:
        kv = pick([k for k in range(1, heads + 1) if heads % k == 0])
        kwargs |= dict(LLAMA, num_kv_heads=kv, rope_theta=pick([10000.0, 500000.0]))
    names = TARGETS[family]
    chosen = [n for n in names if bool(torch.rand((), generator=g) < 0.5)] or ["v"]
    if "qkv_proj" in chosen:
        chosen = [n for n in chosen if n not in ("q", "k", "v")]
    return kwargs, tuple(chosen), pick([1, 2, 3]), pick([1.0, 4.0, 6.0])


def _model(seed: int, kwargs: dict, num_classes: int | None = None):
    """Um GPT (ou classificador) em float64 com pesos longe do padrão."""
    torch.manual_seed(seed)
    model = tpt.GPT(tpt.GPTConfig(max_len=24, **kwargs))
    if num_classes is not None:
        model = tpt.GPTClassifier(model, num_classes)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _randomize_lora(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tpt.lora_parameters(model):
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _ids(vocab_size: int, seed: int, b: int = 3, t: int = 11, pad: str = "right"):
    """ids ``(b, t)`` sem <pad>, e com <pad> à direita ou à esquerda em duas linhas."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (b, t), generator=g)
    if pad == "right":
        ids[0, 7:] = tpt.PAD_ID
        ids[2, 4:] = tpt.PAD_ID
    elif pad == "left":
        ids[0, :3] = tpt.PAD_ID
        ids[1, :6] = tpt.PAD_ID
    return ids


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------------------
# O classificador: to_hf / from_hf
# --------------------------------------------------------------------------------------
def _classifier_round_trip(clf, tmp_path, atol):
    vocab = clf.gpt.config.vocab_size
    hf_model = hf.to_hf(clf)
    family = hf.hf_family(clf.gpt.config)
    assert type(hf_model).__name__ == hf.CLASSIFIER_FAMILIES[family]
    assert hf_model.config.num_labels == clf.num_classes
    assert hf_model.config.pad_token_id == clf.pad_id
    with torch.no_grad():
        for pad in ("none", "right", "left"):
            ids = _ids(vocab, 4, pad=pad)
            mask = ids == clf.pad_id
            expected = clf(ids, key_padding_mask=mask)
            attention = (~mask).long()
            assert _max_diff(hf_model(ids, attention_mask=attention).logits, expected) <= atol
            if pad != "left":  # sem máscara nos dois: iguais também
                assert _max_diff(hf_model(ids).logits, clf(ids)) <= atol
        back = hf.from_hf(hf_model)
        assert isinstance(back, tpt.GPTClassifier)
        assert (back.num_classes, back.pad_id) == (clf.num_classes, clf.pad_id)
        ids = _ids(vocab, 5)
        assert _max_diff(back(ids), clf(ids)) <= atol
        hf_model.save_pretrained(tmp_path)
        from_dir = hf.from_hf(tmp_path, dtype=torch.float64)
        assert isinstance(from_dir, tpt.GPTClassifier)
        assert _max_diff(from_dir(ids), clf(ids)) <= atol


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_classifier_equal_both_ways_on_drawn_configs(family, seed, tmp_path, llama64):
    kwargs, *_ = _drawn(100 + seed, family)
    clf = _model(seed, kwargs, num_classes=2 + seed)
    _classifier_round_trip(clf, tmp_path, atol=1e-10)


def test_llama_classifier_equal_as_shipped(tmp_path):
    kwargs, *_ = _drawn(7, "llama")
    clf = _model(7, kwargs, num_classes=3)
    _classifier_round_trip(clf, tmp_path, atol=1e-5)


def test_classifier_with_another_pad_id():
    kwargs, *_ = _drawn(3, "llama")
    clf = tpt.GPTClassifier(_model(3, kwargs), 3, pad_id=tpt.EOS_ID).double().eval()
    ids = _ids(kwargs["vocab_size"], 8)
    ids[ids == tpt.PAD_ID] = tpt.EOS_ID
    hf_model = hf.to_hf(clf)
    assert hf_model.config.pad_token_id == tpt.EOS_ID
    with torch.no_grad():
        assert _max_diff(hf_model(ids).logits, clf(ids)) <= 1e-5
    assert hf.from_hf(hf_model).pad_id == tpt.EOS_ID


# --------------------------------------------------------------------------------------
# LoRA: to_peft / from_peft
# --------------------------------------------------------------------------------------
def _peft_round_trip(model, atol):
    body = model.gpt if isinstance(model, tpt.GPTClassifier) else model
    ids = _ids(body.config.vocab_size, 9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        expected = model(ids)
        peft_model = hf.to_peft(model)
        assert isinstance(peft_model, peft.PeftModel)
        out = peft_model(input_ids=ids).logits
        assert _max_diff(out, expected) <= atol
        back = hf.from_peft(peft_model)
        assert type(back) is type(model)
        assert _max_diff(back(ids), expected) <= 1e-12
        # merge_and_unload: um modelo do transformers comum, com os mesmos logits.
        merged = copy.deepcopy(peft_model).merge_and_unload()
        assert not isinstance(merged, peft.PeftModel)
        assert _max_diff(merged(input_ids=ids).logits, expected) <= atol
        # Nada mudou no caminho: nem o modelo do tpt nem o do peft.
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        assert _max_diff(peft_model(input_ids=ids).logits, out) == 0
    return peft_model, back


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("kind", ["lm", "classifier"])
def test_to_peft_and_back_on_drawn_configs(kind, family, seed, llama64):
    kwargs, targets, rank, alpha = _drawn(200 + seed, family)
    model = _model(seed, kwargs, num_classes=3 if kind == "classifier" else None)
    tpt.add_lora(model, rank, alpha, targets)
    _randomize_lora(model, seed)
    peft_model, back = _peft_round_trip(model, atol=1e-10)
    # Treináveis: só A e B (e a score do classificador), como em add_lora.
    trainable = {n for n, p in back.named_parameters() if p.requires_grad}
    assert all(".lora_" in n or n == "score.weight" for n in trainable)
    assert ("score.weight" in trainable) == (kind == "classifier")
    # A mesma arrumação na volta, menos onde o HF junta ou separa o qkv_proj: fatias no
    # c_attn do GPT-2 voltam como "qkv_proj" (um bloco); "qkv_proj" no Llama volta como
    # fatias q, k e v (três A iguais).
    regrouped = "qkv_proj" in targets if family == "llama" else bool({"q", "k", "v"} & set(targets))
    if not regrouped:
        assert trainable == {n for n, p in model.named_parameters() if p.requires_grad}
        assert tpt.lora.lora_targets(back) == tpt.lora.lora_targets(model)


def test_llama_to_peft_as_shipped():
    kwargs, _, rank, alpha = _drawn(11, "llama")
    model = _model(11, kwargs | dict(num_kv_heads=1, num_heads=2, embed_dim=8))
    tpt.add_lora(model, 2, 3.0, ("q", "k", "v", "linear3"))
    _randomize_lora(model, 1)
    _peft_round_trip(model, atol=1e-5)


def test_peft_sees_q_and_k_permuted_like_to_hf(llama64):
    # B de q e k leva a permutação do RoPE: ΔW no peft é a do tpt com as linhas permutadas.
    kwargs = dict(vocab_size=13, embed_dim=16, num_heads=2, num_kv_heads=1, num_layers=1, **LLAMA)
    model = _model(0, kwargs)
    tpt.add_lora(model, 2, 2.0, ("q", "k", "v"))
    _randomize_lora(model, 0)
    peft_model = hf.to_peft(model)
    assert set(peft_model.peft_config["default"].target_modules) == {"q_proj", "k_proj", "v_proj"}
    layer = model.layers[0].self_attn.qkv_proj
    inner = peft_model.get_base_model().model.layers[0].self_attn
    perm = hf.rope_permutation(8)
    for name, heads in (("q", 2), ("k", 1), ("v", None)):
        ours = layer.delta_weight(name)
        if heads is not None:
            ours = hf._permute_heads(ours, heads, perm)
        theirs = getattr(inner, f"{name}_proj").get_delta_weight("default")
        assert _max_diff(theirs, ours) <= 1e-14


def test_gpt2_slices_become_one_block_adapter_on_c_attn():
    kwargs, *_ = _drawn(1, "gpt2")
    model = _model(1, kwargs)
    tpt.add_lora(model, 2, 4.0, ("q", "v"))
    _randomize_lora(model, 2)
    peft_model = hf.to_peft(model)
    config = peft_model.peft_config["default"]
    assert config.fan_in_fan_out and set(config.target_modules) == {"c_attn"}
    c_attn = peft_model.get_base_model().transformer.h[0].attn.c_attn
    assert c_attn.r["default"] == 4 and c_attn.scaling["default"] == 2.0  # posto 2·2, α/r = 2
    qkv = model.layers[0].self_attn.qkv_proj
    assert _max_diff(c_attn.get_delta_weight("default"), qkv.delta_weight().t()) <= 1e-14


def test_peft_save_and_load_keeps_the_logits(tmp_path, llama64):
    kwargs, targets, rank, alpha = _drawn(5, "llama")
    clf = _model(5, kwargs, num_classes=4)
    tpt.add_lora(clf, rank, alpha, targets)
    _randomize_lora(clf, 5)
    peft_model = hf.to_peft(clf)
    peft_model.save_pretrained(tmp_path / "adaptador")
    base = hf._to_hf(clf)  # os pesos congelados, sem os adaptadores
    loaded = peft.PeftModel.from_pretrained(base, tmp_path / "adaptador").eval()
    ids = _ids(kwargs["vocab_size"], 3)
    with torch.no_grad():
        assert _max_diff(loaded(input_ids=ids).logits, clf(ids)) <= 1e-10
        assert _max_diff(hf.from_peft(loaded)(ids), clf(ids)) <= 1e-10


# --------------------------------------------------------------------------------------
# Recusas, em português
# --------------------------------------------------------------------------------------
def test_to_hf_refuses_unmerged_lora_and_exports_merged():
    kwargs, *_ = _drawn(2, "gpt2")
    model = _model(2, kwargs)
    tpt.add_lora(model, 2, 2.0, ("q", "v"))
    _randomize_lora(model, 2)
    with pytest.raises(ValueError, match="LoRA não fundida.*merge_lora.*to_peft"):
        hf.to_hf(model)
    tpt.merge_lora(model)
    ids = _ids(kwargs["vocab_size"], 1)
    with torch.no_grad():
        assert _max_diff(hf.to_hf(model)(ids).logits, model(ids)) <= 1e-10


def test_to_peft_refuses():
    kwargs, *_ = _drawn(2, "gpt2")
    model = _model(2, kwargs)
    with pytest.raises(ValueError, match="não tem LoRA"):
        hf.to_peft(model)
    with pytest.raises(TypeError, match="to_peft espera um tpt.GPT"):
        hf.to_peft(torch.nn.Linear(2, 2))
    tpt.merge_lora(tpt.add_lora(model, 1, 1.0, "v"))
    with pytest.raises(ValueError, match="fundida.*unmerge_lora"):
        hf.to_peft(model)
    alibi = tpt.add_lora(_model(0, dict(vocab_size=11, embed_dim=8, num_heads=2, num_layers=1,
                                        positional="alibi")))
    with pytest.raises(ValueError, match="positional='alibi'"):
        hf.to_peft(alibi)


def _llama_peft(target_modules, **options):
    kwargs = dict(vocab_size=13, embed_dim=16, num_heads=2, num_layers=1, **LLAMA)
    hf_model = hf.to_hf(_model(0, kwargs))
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=target_modules, **options)
    return peft.get_peft_model(hf_model, config)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: _llama_peft(["q_proj"], use_dora=True), "use_dora=True"),
        (lambda: _llama_peft(["q_proj"], bias="lora_only"), "bias='lora_only'"),
        (lambda: _llama_peft(["embed_tokens"]), "'model.embed_tokens' não tem equivalente"),
        (
            lambda: _llama_peft(["q_proj", "v_proj"], rank_pattern={"v_proj": 3}),
            "camada 0: q_proj, k_proj e v_proj com posto",
        ),
    ],
)
def test_from_peft_refuses_what_the_tpt_cannot_hold(make, match):
    with pytest.raises(ValueError, match=match):
        hf.from_peft(make())


def test_from_peft_refuses_other_objects():
    with pytest.raises(TypeError, match="from_peft espera um peft.PeftModel"):
        hf.from_peft(torch.nn.Linear(2, 2))


def test_only_hf_imports_transformers_and_peft():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, tpt, tpt.hf, tpt.lora, tpt.classifier; "
        "assert not {'transformers', 'peft'} & set(sys.modules), 'importou'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    root = Path(tpt.__file__).parent
    importers = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if any(f"import {name}" in path.read_text(encoding="utf-8")
               for name in ("peft", "transformers"))
    }
    assert importers <= {"hf.py"}, importers


def test_parameter_map_leaves_the_adapters_out():
    kwargs, *_ = _drawn(4, "llama")
    model = _model(4, kwargs)
    expected = hf.parameter_map(model)
    tpt.add_lora(model, 2, 2.0, ("q", "linear2"))
    assert hf.parameter_map(model) == expected
    with pytest.raises(TypeError, match="passe clf.gpt"):
        hf.parameter_map(tpt.GPTClassifier(model, 2))


def test_mean_pooling_has_no_transformers_equivalent():
    kwargs, *_ = _drawn(5, "llama")
    clf = tpt.GPTClassifier(_model(5, kwargs), 2, pooling="mean")
    with pytest.raises(ValueError, match="to_hf: o GPTClassifier usa pooling='mean'"):
        hf.to_hf(clf)
    tpt.add_lora(clf, 2, 2.0, ("q",))
    with pytest.raises(ValueError, match="to_peft: o GPTClassifier usa pooling='mean'"):
        hf.to_peft(clf)
