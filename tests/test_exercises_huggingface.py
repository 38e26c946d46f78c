"""Conferências dos exercícios do notebook 11_do_tpt_ao_hugging_face (tpt.exercises.huggingface).

As soluções de referência vivem só no notebook (tests/test_notebook_solutions.py as passa
pelas conferências). Aqui ficam: o pendente, respostas certas em outros estilos, as
respostas erradas típicas (cada uma com a sua mensagem) e as regras dos enunciados.
"""

from __future__ import annotations

import functools
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

pytest.importorskip("transformers")

from exercise_answers import accepted as _accepted
from exercise_answers import rejected as _rejected
from exercise_answers import stub  # noqa: E402

import tpt  # noqa: E402
import tpt.hf  # noqa: E402
from tpt.exercises import checks  # noqa: E402

ex = checks("huggingface")


def test_stubs_are_pending(capsys):
    for check in (ex.check_gpt2_to_tpt, ex.check_tpt_to_llama):
        assert check(stub) is False
        assert "⏳" in capsys.readouterr().out


def test_checks_show_only_the_checkers():
    assert sorted(dir(ex)) == ["check_gpt2_to_tpt", "check_tpt_to_llama"]


# --------------------------------------------------------------------------------------
# Exercício 1: gpt2_to_tpt
# --------------------------------------------------------------------------------------
_CONV1D = {
    "attn.c_attn": "self_attn.qkv_proj",
    "attn.c_proj": "self_attn.out_proj",
    "mlp.c_fc": "ffn.linear1",
    "mlp.c_proj": "ffn.linear2",
}
_NORMS = {"ln_1": "norm1", "ln_2": "norm2"}


def gpt2_to_tpt(
    state, config, *, scale=None, transpose=True, fold=True, bias_t=False, head_scaled=False
):
    """Resposta certa (padrão) e, com os argumentos, os erros típicos."""
    scale = math.sqrt(config.embed_dim) if scale is None else scale
    out = {
        "embedding.embedding.weight": state["transformer.wte.weight"] / scale,
        "positional.embedding.weight": state["transformer.wpe.weight"],
    }
    for i in range(config.num_layers):
        hf, ours = f"transformer.h.{i}.", f"layers.{i}."
        for a, b in _CONV1D.items():
            w = state[hf + a + ".weight"]
            out[ours + b + ".weight"] = w.T if transpose else w.reshape(w.shape[1], w.shape[0])
            bias = state[hf + a + ".bias"]
            out[ours + b + ".bias"] = bias.flip(0) if bias_t else bias
        for a, b in _NORMS.items():
            for kind in ("weight", "bias"):
                out[ours + b + "." + kind] = state[hf + a + "." + kind]
    final = scale if (config.tie_weights and fold) else 1.0
    out["norm.weight"] = state["transformer.ln_f.weight"] * final
    out["norm.bias"] = state["transformer.ln_f.bias"] * final
    if not config.tie_weights:
        out["lm_head.weight"] = state["lm_head.weight"] / (scale if head_scaled else 1.0)
    return out


def gpt2_float32_sqrt(state, config):  # o idioma natural: √d em float32
    return gpt2_to_tpt(state, config, scale=torch.sqrt(torch.tensor(config.embed_dim)))


def gpt2_with_tied_head(state, config):  # outro estilo: devolve também a lm_head amarrada
    out = gpt2_to_tpt(state, config)
    out["lm_head.weight"] = out.get("lm_head.weight", out["embedding.embedding.weight"])
    return out


def gpt2_by_parameter_map(state, config):  # outro estilo: os nomes lidos do parameter_map
    names = {ours: theirs for ours, theirs, _ in tpt.hf.parameter_map(tpt.GPT(config))}
    scale = math.sqrt(config.embed_dim)
    out = {}
    for ours, theirs in names.items():
        value = state[theirs]
        if any(ours.endswith(f"{b}.weight") for b in _CONV1D.values()):
            value = value.t().contiguous()
        if ours == "embedding.embedding.weight":
            value = value / scale
        if ours.startswith("norm.") and config.tie_weights:
            value = value * scale
        out[ours] = value
    return out


@pytest.mark.parametrize(
    "answer", [gpt2_to_tpt, gpt2_float32_sqrt, gpt2_with_tied_head, gpt2_by_parameter_map]
)
def test_gpt2_to_tpt_accepts_other_styles(answer, capsys):
    _accepted(ex.check_gpt2_to_tpt, answer, capsys)


def test_gpt2_to_tpt_wrong_answers(capsys):
    def no_scale(state, config):
        return gpt2_to_tpt(state, config, scale=1.0)

    def times_scale(state, config):
        return gpt2_to_tpt(state, config, scale=1 / math.sqrt(config.embed_dim))

    def no_transpose_square(state, config):  # c_proj é quadrada: a forma não acusa
        out = gpt2_to_tpt(state, config)
        for i in range(config.num_layers):
            out[f"layers.{i}.self_attn.out_proj.weight"] = state[
                f"transformer.h.{i}.attn.c_proj.weight"
            ]
        return out

    def bad_tied_head(state, config):
        out = gpt2_to_tpt(state, config)
        out["lm_head.weight"] = state["transformer.wte.weight"]
        return out

    def head_divided(state, config):
        return gpt2_to_tpt(state, config, head_scaled=True)

    _rejected(ex.check_gpt2_to_tpt, no_scale, capsys, "é a wte do GPT-2 como está")
    _rejected(ex.check_gpt2_to_tpt, times_scale, capsys, "divida")
    _rejected(
        ex.check_gpt2_to_tpt,
        functools.partial(gpt2_to_tpt, fold=False),
        capsys,
        "Compense na norma final",
    )
    _rejected(ex.check_gpt2_to_tpt, no_transpose_square, capsys, "sem transpor")
    _rejected(
        ex.check_gpt2_to_tpt,
        functools.partial(gpt2_to_tpt, transpose=False),
        capsys,
        "reshape lê os números na mesma ordem",
    )
    _rejected(
        ex.check_gpt2_to_tpt, functools.partial(gpt2_to_tpt, bias_t=True), capsys, "não confere"
    )
    _rejected(ex.check_gpt2_to_tpt, bad_tied_head, capsys, "mesmo tensor")
    _rejected(ex.check_gpt2_to_tpt, lambda s, c: list(s), capsys, "dicionário")
    _rejected(
        ex.check_gpt2_to_tpt,
        lambda s, c: {**gpt2_to_tpt(s, c), "extra": s["transformer.wte.weight"]},
        capsys,
        "chaves que o modelo de destino não tem",
    )


def test_gpt2_to_tpt_untied_head_is_not_scaled(capsys):
    # o caso fixo 2 é desamarrado: dividir a lm_head por √d é diagnosticado nele
    out = _rejected(ex.check_gpt2_to_tpt, lambda s, c: gpt2_to_tpt(s, c, head_scaled=True), capsys)
    assert "lm_head" in out, out


def test_gpt2_to_tpt_rules(capsys):
    def in_place(state, config):
        state["transformer.wte.weight"].div_(math.sqrt(config.embed_dim))
        return gpt2_to_tpt(state, config, scale=1.0)

    def uses_from_hf(state, config):
        tpt.hf.from_hf(None)

    def uses_loader(state, config):
        tpt.hf._load_gpt2(None, None)

    _rejected(ex.check_gpt2_to_tpt, in_place, capsys, "modificou `state` no lugar")
    _rejected(ex.check_gpt2_to_tpt, uses_from_hf, capsys, "from_hf", "escrita por você")
    _rejected(ex.check_gpt2_to_tpt, uses_loader, capsys, "_load_gpt2")


# --------------------------------------------------------------------------------------
# Exercício 2: tpt_to_llama
# --------------------------------------------------------------------------------------
def _perm(head_dim):
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def tpt_to_llama(
    state,
    config,
    *,
    k_heads=None,
    permute=True,
    inverse=False,
    permute_v=False,
    swap_ffn=False,
    scale=None,
    fold=True,
):
    """Resposta certa (padrão) e, com os argumentos, os erros típicos."""
    heads, kv_heads = config.num_heads, config.num_kv_heads or config.num_heads
    head_dim = config.embed_dim // heads

    def rope(w, n):
        block = w.shape[0] // n
        perm = _perm(block)
        if inverse:
            perm = torch.argsort(perm)
        return w.reshape(n, block, -1)[:, perm].reshape(w.shape) if permute else w

    scale = math.sqrt(config.embed_dim) if scale is None else scale
    out = {"model.embed_tokens.weight": state["embedding.embedding.weight"] * scale}
    for i in range(config.num_layers):
        ours, hf = f"layers.{i}.", f"model.layers.{i}."
        wq, wk, wv = state[ours + "self_attn.qkv_proj.weight"].split(
            [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        )
        out[hf + "self_attn.q_proj.weight"] = rope(wq, heads)
        out[hf + "self_attn.k_proj.weight"] = rope(wk, k_heads or kv_heads)
        out[hf + "self_attn.v_proj.weight"] = rope(wv, kv_heads) if permute_v else wv
        out[hf + "self_attn.o_proj.weight"] = state[ours + "self_attn.out_proj.weight"]
        out[hf + "input_layernorm.weight"] = state[ours + "norm1.weight"]
        out[hf + "post_attention_layernorm.weight"] = state[ours + "norm2.weight"]
        gate, up = ("linear3", "linear1") if swap_ffn else ("linear1", "linear3")
        out[hf + "mlp.gate_proj.weight"] = state[ours + f"ffn.{gate}.weight"]
        out[hf + "mlp.up_proj.weight"] = state[ours + f"ffn.{up}.weight"]
        out[hf + "mlp.down_proj.weight"] = state[ours + "ffn.linear2.weight"]
    out["model.norm.weight"] = state["norm.weight"] / (
        scale if config.tie_weights and fold else 1.0
    )
    if not config.tie_weights:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


def llama_float32_sqrt(state, config):
    return tpt_to_llama(state, config, scale=torch.sqrt(torch.tensor(config.embed_dim)))


def llama_with_ready_permutation(state, config):  # liberada: a permutação de uma cabeça
    heads, kv = config.num_heads, config.num_kv_heads or config.num_heads
    head_dim = config.embed_dim // heads
    perm = tpt.hf.rope_permutation(head_dim)
    out = tpt_to_llama(state, config, permute=False)
    for i in range(config.num_layers):
        for proj, n in (("q_proj", heads), ("k_proj", kv)):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            out[name] = out[name].reshape(n, head_dim, -1)[:, perm].reshape(out[name].shape)
    return out


def llama_head_by_head(state, config):  # outro estilo: uma cabeça de cada vez, torch.cat
    heads, kv = config.num_heads, config.num_kv_heads or config.num_heads
    head_dim = config.embed_dim // heads
    out = tpt_to_llama(state, config, permute=False)
    perm = _perm(head_dim).tolist()
    for i in range(config.num_layers):
        for proj, n in (("q_proj", heads), ("k_proj", kv)):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            w = out[name]
            out[name] = torch.cat([w[h * head_dim : (h + 1) * head_dim][perm] for h in range(n)])
    return out


@pytest.mark.parametrize(
    "answer", [tpt_to_llama, llama_float32_sqrt, llama_with_ready_permutation, llama_head_by_head]
)
def test_tpt_to_llama_accepts_other_styles(answer, capsys):
    _accepted(ex.check_tpt_to_llama, answer, capsys)


def test_tpt_to_llama_wrong_answers(capsys):
    def k_with_num_heads(state, config):
        return tpt_to_llama(state, config, k_heads=config.num_heads)

    def equal_split(state, config):
        out = tpt_to_llama(state, config)
        for i in range(config.num_layers):
            wq, wk, wv = state[f"layers.{i}.self_attn.qkv_proj.weight"].chunk(3)
            out[f"model.layers.{i}.self_attn.k_proj.weight"] = wk
        return out

    def whole_matrix(state, config):
        return (
            tpt_to_llama(state, config, k_heads=1)
            | {
                name: value
                for name, value in tpt_to_llama(state, config, permute=False).items()
                if "q_proj" in name
            }
            | {
                name: value[_perm(value.shape[0])]
                for name, value in tpt_to_llama(state, config, permute=False).items()
                if "q_proj" in name
            }
        )

    _rejected(ex.check_tpt_to_llama, k_with_num_heads, capsys, "num_kv_heads = 2 cabeças")
    _rejected(
        ex.check_tpt_to_llama,
        functools.partial(tpt_to_llama, permute=False),
        capsys,
        "não mudaram de lugar",
    )
    _rejected(
        ex.check_tpt_to_llama,
        functools.partial(tpt_to_llama, inverse=True),
        capsys,
        "permutação inversa",
    )
    _rejected(ex.check_tpt_to_llama, functools.partial(tpt_to_llama, permute_v=True), capsys, "W_V")
    _rejected(
        ex.check_tpt_to_llama,
        functools.partial(tpt_to_llama, swap_ffn=True),
        capsys,
        "gate_proj e up_proj trocadas",
    )
    _rejected(
        ex.check_tpt_to_llama,
        functools.partial(tpt_to_llama, scale=1.0),
        capsys,
        "é a tabela do tpt como está",
    )
    _rejected(
        ex.check_tpt_to_llama,
        functools.partial(tpt_to_llama, fold=False),
        capsys,
        "Compense no ganho da norma final",
    )
    _rejected(ex.check_tpt_to_llama, equal_split, capsys, "k_proj.weight", "com forma")
    _rejected(ex.check_tpt_to_llama, whole_matrix, capsys, "matriz inteira")


def test_tpt_to_llama_rules(capsys):
    def uses_to_hf(state, config):
        model = tpt.GPT(config)
        model.load_state_dict(state)
        return dict(tpt.hf.to_hf(model).state_dict())

    def uses_get_qkv(state, config):
        model = tpt.GPT(config)
        tpt.hf.get_qkv(model.layers[0].self_attn)
        return tpt_to_llama(state, config)

    def in_place(state, config):
        state["norm.weight"].mul_(1.0)
        state["embedding.embedding.weight"].mul_(2.0)
        return tpt_to_llama(state, config)

    _rejected(ex.check_tpt_to_llama, uses_to_hf, capsys, "to_hf", "escrita por você")
    _rejected(ex.check_tpt_to_llama, uses_get_qkv, capsys, "get_qkv")
    _rejected(ex.check_tpt_to_llama, in_place, capsys, "modificou `state` no lugar")
    assert tpt.hf.rope_permutation(4).tolist() == [0, 2, 1, 3]


def test_drawn_sizes_vary_with_the_seed(monkeypatch, capsys):
    """Casos sorteados: uma resposta que só conhece os casos fixos cai no sorteado."""
    fixed = {(4, 8, 2), (3, 6, 1), (6, 4, 1), (2, 6, 1)}

    def memorized(state, config):
        key = (config.num_heads, config.embed_dim // config.num_heads, config.num_layers)
        if key not in fixed:
            raise KeyError(key)
        return tpt_to_llama(state, config)

    monkeypatch.setenv("TPT_EXERCISE_SEED", "7")
    out = _rejected(ex.check_tpt_to_llama, memorized, capsys, "caso sorteado, semente 7")
    assert "KeyError" in out
