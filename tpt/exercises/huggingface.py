"""Conferências dos exercícios de notebooks/11_do_tpt_ao_hugging_face.ipynb.

Dois exercícios, na ordem do notebook:

1. :func:`check_rope_rows`: reordenar as linhas de ``W_Q`` ou ``W_K`` ``(h·d_h, d)`` do
   arranjo do tpt (pares vizinhos ``(2i, 2i+1)``) para o do Llama do Hugging Face
   (metades ``(i, i + d_h/2)``), cabeça por cabeça, sem ``tpt.hf.rope_permutation``.
2. :func:`check_fold_sqrt_d`: consertar um ``state_dict`` do GPT-2 copiado "ingênuo" (sem
   o ``√d`` do embedding do tpt): a resposta devolve o ``state_dict`` com a escala
   dobrada na tabela e, quando os pesos são amarrados, compensada na norma final. A
   conferência carrega o resultado num ``GPT2LMHeadModel`` e compara os logits com os do
   ``tpt.GPT``.

Os diagnósticos só aparecem quando a variante errada correspondente foi calculada e
bateu com a resposta (``expect_close`` com ``variants``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

import tpt
import tpt.hf
from tpt.exercises import ExerciseError, exercise, expect, expect_close
from tpt.exercises.guards import call_answer, case_generator
from tpt.exercises.rules import record_python_calls

__all__ = ["check_rope_rows", "check_fold_sqrt_d"]


# --------------------------------------------------------------------------------------
# Exercício 1: a permutação do RoPE nas linhas de W_Q e W_K
# --------------------------------------------------------------------------------------
def reference_rope_rows(w: Tensor, num_heads: int) -> Tensor:
    """A resposta: ``perm = [0, 2, 4, ..., 1, 3, 5, ...]`` aplicada a cada cabeça."""
    head_dim = w.shape[0] // num_heads
    perm = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return w.reshape(num_heads, head_dim, *w.shape[1:])[:, perm].reshape(w.shape)


def _rope_variants(w: Tensor, num_heads: int) -> list[tuple[str, Tensor]]:
    head_dim = w.shape[0] // num_heads
    perm = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    inverse = torch.argsort(perm)
    rows = w.reshape(num_heads, head_dim, *w.shape[1:])
    whole = torch.cat([torch.arange(0, w.shape[0], 2), torch.arange(1, w.shape[0], 2)])
    return [
        (
            "as linhas não mudaram de lugar. No tpt a linha 2i forma par com a 2i+1; no "
            "Llama, a linha i forma par com a i + d_h/2.",
            w,
        ),
        (
            "você aplicou a permutação inversa (das metades para os pares). A linha j do "
            "Llama deve ser a linha perm[j] do tpt, com perm = [0, 2, 4, ..., 1, 3, 5, ...].",
            rows[:, inverse].reshape(w.shape),
        ),
        (
            "você permutou a matriz inteira de uma vez. Cada cabeça tem as suas d_h "
            "linhas e o seu RoPE: separe as cabeças com reshape(h, d_h, d) e permute "
            "dentro de cada uma.",
            w[whole],
        ),
    ]


# As funções prontas do tpt.hf que fariam os exercícios: vistas pelo código que roda
# (um apelido, um argumento padrão ou um functools.partial chegam ao mesmo código).
_ROPE_READY = {
    tpt.hf.rope_permutation.__code__: "tpt.hf.rope_permutation",
    tpt.hf.to_hf.__code__: "tpt.hf.to_hf",
}
_FOLD_READY = {
    tpt.hf.to_hf.__code__: "tpt.hf.to_hf",
    tpt.hf._gpt2_state.__code__: "tpt.hf._gpt2_state",
}


def _call_watched(answer: Callable, args: dict, where: str, ready: dict, rule: str) -> object:
    """``call_answer`` vigiando as funções prontas; a regra vale mesmo se a resposta falhar."""
    error = None
    with record_python_calls() as ran:
        try:
            got = call_answer(answer, args, where)
        except ExerciseError as err:
            error = err
    used = sorted(name for code, name in ready.items() if code in ran)
    expect(not used, f"sua função chamou {', '.join(used)}: {rule}.")
    if error is not None:
        raise error
    return got


@exercise("Exercício 1 (a permutação do RoPE nas linhas de W_Q e W_K)")
def check_rope_rows(rope_rows: Callable[[Tensor, int], Tensor]) -> None:
    """Confere ``rope_rows(w, num_heads)`` com ``w`` ``(h·d_h, d)`` em casos fixos e sorteados."""
    generator, seed = case_generator()
    drawn = torch.randint(1, 9, (3,), generator=generator).tolist()  # caso sorteado
    cases = [(1, 4, 3), (2, 8, 16), (4, 6, 5), (2, 16, 32)]
    cases.append((1 + drawn[0] % 4, 2 * drawn[1], drawn[2]))
    for num_heads, head_dim, d_in in cases:
        w = torch.randn(num_heads * head_dim, d_in, dtype=torch.float64, generator=generator)
        where = f"Com num_heads={num_heads}, d_h={head_dim} e w de forma {tuple(w.shape)}"
        if (num_heads, head_dim, d_in) == cases[-1]:
            where += f" (caso sorteado, semente {seed})"
        got = _call_watched(
            rope_rows,
            {"w": w, "num_heads": num_heads},
            where,
            _ROPE_READY,
            "o exercício pede a permutação escrita por você",
        )
        expect_close(
            got,
            reference_rope_rows(w, num_heads),
            where,
            atol=0.0,
            name="w reordenada",
            variants=_rope_variants(w, num_heads) if num_heads > 1 or head_dim > 2 else (),
        )


# --------------------------------------------------------------------------------------
# Exercício 2: o √d do embedding, dobrado nos pesos do GPT-2
# --------------------------------------------------------------------------------------
def naive_gpt2_state(model: tpt.GPT) -> dict[str, Tensor]:
    """Os pesos de ``model`` nos nomes do GPT-2, **sem** cuidar do ``√d``.

    Tudo o mais está certo (transpostas do ``Conv1D``, ``c_attn``). Com pesos amarrados
    não há ``lm_head.weight`` (o GPT-2 a amarra a ``transformer.wte.weight``, como o
    ``save_pretrained`` faz).
    """
    state = tpt.hf._gpt2_state(model)
    state["transformer.wte.weight"] = model.embedding.weight
    state["transformer.ln_f.weight"] = model.norm.weight
    state["transformer.ln_f.bias"] = model.norm.bias
    if model.config.tie_weights:
        del state["lm_head.weight"]
    return {name: value.detach().clone() for name, value in state.items()}


def reference_fold_sqrt_d(state: dict[str, Tensor], embed_dim: int, tied: bool) -> dict:
    """A resposta: tabela × √d; com pesos amarrados, norma final (ganho e viés) ÷ √d."""
    scale = math.sqrt(embed_dim)
    fixed = dict(state)
    fixed["transformer.wte.weight"] = state["transformer.wte.weight"] * scale
    if tied:
        fixed["transformer.ln_f.weight"] = state["transformer.ln_f.weight"] / scale
        fixed["transformer.ln_f.bias"] = state["transformer.ln_f.bias"] / scale
    return fixed


def _fold_diagnosis(got: dict, state: dict, embed_dim: int, tied: bool) -> str | None:
    """Diz qual convenção ficou de fora, comparando só as chaves que deveriam mudar."""
    scale = math.sqrt(embed_dim)

    def same(name: str, value: Tensor) -> bool:
        return torch.allclose(got[name].double(), value.double(), atol=1e-12, rtol=1e-12)

    wte = state["transformer.wte.weight"]
    ln_w, ln_b = state["transformer.ln_f.weight"], state["transformer.ln_f.bias"]
    if same("transformer.wte.weight", wte):
        return (
            "a tabela transformer.wte.weight ficou como estava. O tpt multiplica o embedding "
            "por √d no forward e o GPT-2 não: essa escala tem de entrar na própria tabela."
        )
    if same("transformer.wte.weight", wte / scale):
        return "você dividiu a tabela por √d; o embedding do tpt sai multiplicado por √d."
    if tied and same("transformer.ln_f.weight", ln_w) and same("transformer.ln_f.bias", ln_b):
        return (
            "com pesos amarrados, a lm_head do GPT-2 é a mesma tabela, agora √d vezes maior: "
            "os logits saem √d vezes maiores. Compense na norma final (transformer.ln_f), "
            "que vem logo antes da lm_head."
        )
    if (
        tied
        and same("transformer.ln_f.weight", ln_w / scale)
        and same("transformer.ln_f.bias", ln_b)
    ):
        return (
            "você dividiu o ganho de transformer.ln_f por √d, mas não o viés: a saída da "
            "LayerNorm é x̂·γ + β, e a lm_head recebe as duas partes."
        )
    if not tied and not (
        same("transformer.ln_f.weight", ln_w) and same("transformer.ln_f.bias", ln_b)
    ):
        return (
            "sem pesos amarrados, a lm_head não muda (ela não é a tabela), então a norma "
            "final também não deve mudar."
        )
    return None


@exercise("Exercício 2 (o √d do embedding, dobrado nos pesos do GPT-2)")
def check_fold_sqrt_d(fold_sqrt_d: Callable[[dict, int, bool], dict]) -> None:
    """Confere ``fold_sqrt_d(state, embed_dim, tied)`` carregando o resultado num GPT-2."""
    transformers = tpt.hf._transformers()
    models = []
    for i, (d, heads, tied) in enumerate([(32, 4, True), (24, 3, False), (16, 2, True)]):
        torch.manual_seed(100 + i)
        config = tpt.GPTConfig(
            vocab_size=23,
            max_len=16,
            embed_dim=d,
            num_heads=heads,
            num_layers=1,
            tie_weights=tied,
        )
        model = tpt.GPT(config).double().eval()
        with torch.no_grad():  # ganho e viés da norma final longe de 1 e 0
            model.norm.weight.add_(0.3 * torch.randn_like(model.norm.weight))
            model.norm.bias.add_(0.3 * torch.randn_like(model.norm.bias))
        hf_model = transformers.GPT2LMHeadModel(tpt.hf._hf_config(model, "gpt2"))
        models.append((model, naive_gpt2_state(model), hf_model.double().eval()))
    for i, (model, state, hf_model) in enumerate(models):
        d, tied = model.config.embed_dim, model.config.tie_weights
        where = f"Com embed_dim={d} e tied={tied}"
        got = _call_watched(
            fold_sqrt_d,
            {"state": state, "embed_dim": d, "tied": tied},
            where,
            _FOLD_READY,
            "o exercício pede a correção escrita por você",
        )
        expect(
            isinstance(got, dict) and set(got) == set(state),
            f"{where}, esperava um dicionário com as mesmas chaves do state recebido.",
        )
        diagnosis = _fold_diagnosis(got, state, d, tied)
        expect(diagnosis is None, f"{where}, {diagnosis}")
        hf_model.load_state_dict(got, strict=False)
        hf_model.tie_weights()
        ids = torch.randint(0, 23, (2, 10), generator=torch.Generator().manual_seed(i))
        with torch.no_grad():
            expect_close(
                hf_model(ids).logits,
                model(ids),
                where,
                atol=1e-9,
                name="os logits do GPT-2 carregado com o seu state",
            )
