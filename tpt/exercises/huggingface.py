"""Conferências dos exercícios de notebooks/11_do_tpt_ao_hugging_face.ipynb.

Dois exercícios, na ordem do notebook; nos dois, a resposta converte um modelo inteiro,
de tamanhos sorteados a cada execução, e a conferência compara os **logits** do modelo
carregado com a resposta com os do original:

1. :func:`check_gpt2_to_tpt`: os pesos de um ``GPT2LMHeadModel`` (``state_dict`` com os
   nomes do Hugging Face) viram os de um ``tpt.GPT``: o ``Conv1D`` transposto (só os
   pesos: vieses não têm orientação), as normas como estão e o ``√d`` do embedding do tpt
   desfeito na tabela e, com pesos amarrados, na norma final.
2. :func:`check_tpt_to_llama`: os pesos de um ``tpt.GPT`` da receita do Llama, com GQA
   (``num_kv_heads`` diferente de ``num_heads``), viram os de um ``LlamaForCausalLM``:
   ``qkv_proj`` separada em Q (``h·d_h`` linhas), K e V (``h_kv·d_h`` linhas cada), a
   permutação do RoPE em cada cabeça de Q (``h`` cabeças) e de K (``h_kv`` cabeças), a
   SwiGLU nos seus três nomes e o ``√d`` dobrado na tabela e na norma final.

As funções de conversão de ``tpt.hf`` ficam recusadas pelo código que roda (apelidos e
``functools.partial`` chegam ao mesmo código); ``parameter_map`` (só nomes) e
``rope_permutation`` (exercício 2) continuam liberadas. Os diagnósticos só aparecem depois
que os logits não conferem, e cada um é uma variante errada calculada que bateu com o
tensor da resposta.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

import tpt
import tpt.hf
from tpt.exercises import ExerciseError, exercise, expect, expect_close
from tpt.exercises.core import max_abs_diff
from tpt.exercises.guards import call_answer, case_generator, randint, seed_note
from tpt.exercises.rules import functions_from_file, record_python_calls
from tpt.numfmt import fmt

__all__ = ["check_gpt2_to_tpt", "check_tpt_to_llama"]

# Funções de tpt/hf.py que a resposta pode rodar: os nomes (parameter_map e o que ela usa)
# e, no exercício 2, a permutação de uma cabeça (impressa no notebook).
_NAMES_ONLY = {"parameter_map", "hf_family", "_rules", "hf_family.<locals>.refuse"}


def _call_watched(answer: Callable, args: dict, where: str, allowed: set[str]) -> object:
    """``call_answer`` recusando as conversões prontas de ``tpt.hf``, mesmo se a resposta falhar."""
    error = None
    with record_python_calls() as ran:
        try:
            got = call_answer(answer, args, where)
        except ExerciseError as err:
            error = err
    used = sorted(
        name
        for name in functions_from_file(ran, tpt.hf.__file__)
        if name not in allowed and not name.startswith("_Rule")
    )
    expect(
        not used,
        f"{where}, sua função rodou código pronto de tpt.hf ({', '.join(used)}): o exercício "
        "pede a conversão escrita por você.",
    )
    if error is not None:
        raise error
    return got


def _check_keys(
    got: object, expected: dict[str, Tensor], tied_head: str | None, where: str
) -> dict:
    """Confere as chaves e as formas; com pesos amarrados, ``tied_head`` pode faltar."""
    expect(
        isinstance(got, dict),
        f"{where}, esperava um dicionário nome -> tensor; recebi {type(got).__name__}.",
    )
    missing = [name for name in expected if name not in got and name != tied_head]
    expect(not missing, f"{where}, faltam chaves no seu dicionário, por exemplo {missing[:3]}.")
    extra = [name for name in got if name not in expected]
    expect(
        not extra,
        f"{where}, o seu dicionário tem chaves que o modelo de destino não tem, por exemplo "
        f"{extra[:3]}.",
    )
    for name, value in got.items():
        expect(
            isinstance(value, Tensor),
            f"{where}, `{name}` deveria ser um tensor; recebi {type(value).__name__}.",
        )
        want = tuple(expected[name].shape)
        expect(
            tuple(value.shape) == want,
            f"{where}, esperava `{name}` com forma {want}; recebi {tuple(value.shape)}.",
        )
    return got


def _first_wrong(
    got: dict, reference: dict[str, Tensor], diagnose: Callable[[str, Tensor], str | None]
) -> str | None:
    """O primeiro tensor da resposta longe da referência, com o diagnóstico dele se houver."""
    for name, want in reference.items():
        if name not in got:
            continue
        value = got[name].detach().double()
        tol = 1e-6 * (1.0 + float(want.abs().max()))
        diff = max_abs_diff(value, want)
        if diff > tol:
            why = diagnose(name, value)
            if why:
                return f"`{name}` não confere: {why}"
            return (
                f"`{name}` é o primeiro tensor que não confere com o que o modelo de destino "
                f"espera (maior diferença {fmt(diff, 2, sci=True)})."
            )
    return None


def _is(value: Tensor, other: Tensor | None) -> bool:
    if other is None or tuple(value.shape) != tuple(other.shape):
        return False
    return max_abs_diff(value, other.double()) <= 1e-6 * (1.0 + float(other.abs().max()))


def _tied_head(got: dict, table_name: str, head_name: str, where: str) -> dict:
    """Com pesos amarrados, a ``lm_head`` é a tabela: se veio, tem de ser igual a ela."""
    if head_name in got:
        expect(
            _is(got[head_name].detach().double(), got[table_name].detach().double()),
            f"{where}, com pesos amarrados `{head_name}` é o mesmo tensor que `{table_name}`; "
            "o seu dicionário traz valores diferentes para os dois (deixe a lm_head de fora "
            "ou dê a ela a mesma tabela).",
        )
    return {name: value for name, value in got.items() if name != head_name}


def _case_sizes(generator: torch.Generator) -> dict:
    heads = randint(generator, 1, 6)
    return dict(
        vocab_size=randint(generator, 5, 80),
        max_len=randint(generator, 4, 24),
        num_heads=heads,
        head_dim=2 * randint(generator, 1, 8),
        num_layers=randint(generator, 1, 3),
        tie_weights=bool(randint(generator, 0, 1)),
    )


def _random_model(config: tpt.GPTConfig, seed: int) -> tpt.GPT:
    """Um ``tpt.GPT`` em float64 com as normas longe de 1 e 0 (para que ganho e viés contem)."""
    torch.manual_seed(seed)
    model = tpt.GPT(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def _ids(config: tpt.GPTConfig, seed: int) -> Tensor:
    t = min(config.max_len, 12)
    return torch.randint(
        0, config.vocab_size, (2, t), generator=torch.Generator().manual_seed(seed)
    )


# --------------------------------------------------------------------------------------
# Exercício 1: um GPT-2 do Hugging Face dentro do tpt
# --------------------------------------------------------------------------------------
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
_TPT_OF_CONV1D = {
    "attn.c_attn": "self_attn.qkv_proj",
    "attn.c_proj": "self_attn.out_proj",
    "mlp.c_fc": "ffn.linear1",
    "mlp.c_proj": "ffn.linear2",
}


def _gpt2_diagnosis(config: tpt.GPTConfig, hf_state: dict[str, Tensor]) -> Callable:
    scale = math.sqrt(config.embed_dim)
    wte = hf_state["transformer.wte.weight"]
    ln_w, ln_b = hf_state["transformer.ln_f.weight"], hf_state["transformer.ln_f.bias"]

    def diagnose(name: str, value: Tensor) -> str | None:
        if name == "embedding.embedding.weight":
            if _is(value, wte):
                return (
                    "é a wte do GPT-2 como está. O tpt multiplica o embedding por √d no "
                    "forward e o GPT-2 não: a tabela do tpt tem de sair √d vezes menor."
                )
            if _is(value, wte * scale):
                return "você multiplicou a wte por √d; o tpt já multiplica no forward, divida."
        if name == "lm_head.weight" and _is(value, wte / scale):
            return (
                "sem pesos amarrados, a lm_head do GPT-2 não tem o √d: ela passa como está "
                "(só a tabela de embeddings muda)."
            )
        if name in ("norm.weight", "norm.bias"):
            gpt2 = ln_w if name == "norm.weight" else ln_b
            if config.tie_weights and _is(value, gpt2):
                return (
                    "com pesos amarrados, a lm_head do tpt é a tabela, agora √d vezes menor "
                    "que a wte: os logits sairiam √d vezes menores. Compense na norma final "
                    "(ganho e viés de transformer.ln_f), que vem logo antes da lm_head."
                )
            if config.tie_weights and _is(value, gpt2 / scale):
                return (
                    "com pesos amarrados a norma final compensa multiplicando por √d, "
                    "não dividindo."
                )
            if not config.tie_weights and not _is(value, gpt2):
                return (
                    "sem pesos amarrados a lm_head não é a tabela, então a norma final passa "
                    "como está."
                )
        for hf_name, ours in _TPT_OF_CONV1D.items():
            if name.endswith(ours + ".weight"):
                source = hf_state["transformer.h." + name.split(".")[1] + "." + hf_name + ".weight"]
                if _is(value, source):
                    return (
                        f"é o {hf_name}.weight sem transpor. O Conv1D do GPT-2 guarda o peso "
                        "como (entrada × saída) e o nn.Linear do tpt, como (saída × entrada)."
                    )
                if _is(value, source.reshape(value.shape)):
                    return (
                        f"é o {hf_name}.weight com outra forma (reshape ou view), não "
                        "transposto: reshape lê os números na mesma ordem e só muda a forma; "
                        "a transposta (.T) troca linhas por colunas."
                    )
        return None

    return diagnose


def _gpt2_case(config: tpt.GPTConfig, seed: int) -> tuple[tpt.GPT, dict[str, Tensor], object]:
    original = _random_model(config, seed)
    hf_model = tpt.hf.to_hf(original)
    hf_state = {name: p.detach().clone() for name, p in hf_model.named_parameters()}
    return original, hf_state, hf_model


@exercise("Exercício 1 (um GPT-2 do Hugging Face dentro do tpt)")
def check_gpt2_to_tpt(gpt2_to_tpt: Callable[[dict, tpt.GPTConfig], dict]) -> None:
    """Confere ``gpt2_to_tpt(state, config)`` carregando o resultado num ``tpt.GPT``."""
    generator, seed = case_generator()
    drawn = _case_sizes(generator)
    drawn["activation"] = ("gelu", "gelu_tanh", "relu")[randint(generator, 0, 2)]
    cases = [
        dict(vocab_size=23, max_len=16, num_heads=4, head_dim=8, num_layers=2, tie_weights=True),
        dict(
            vocab_size=17,
            max_len=10,
            num_heads=3,
            head_dim=6,
            num_layers=1,
            tie_weights=False,
            activation="gelu_tanh",
        ),
        drawn,
    ]
    for i, sizes in enumerate(cases):
        sizes = dict(sizes)
        head_dim = sizes.pop("head_dim")
        config = tpt.GPTConfig(embed_dim=sizes["num_heads"] * head_dim, **sizes)
        where = (
            f"Com embed_dim={config.embed_dim}, num_heads={config.num_heads}, "
            f"num_layers={config.num_layers}, tie_weights={config.tie_weights}"
            + seed_note(seed if i == len(cases) - 1 else None)
        )
        original, hf_state, hf_model = _gpt2_case(config, 200 + i)
        got = _call_watched(gpt2_to_tpt, {"state": hf_state, "config": config}, where, _NAMES_ONLY)
        expected = original.state_dict()
        tied_head = "lm_head.weight" if config.tie_weights else None
        got = _check_keys(got, expected, tied_head, where)
        if tied_head:
            got = _tied_head(got, "embedding.embedding.weight", tied_head, where)
        model = tpt.GPT(config).double().eval()
        model.load_state_dict({name: value.detach() for name, value in got.items()}, strict=False)
        ids = _ids(config, i)
        with torch.no_grad():
            want = hf_model(ids, attention_mask=torch.ones_like(ids)).logits
            logits = model(ids)
        if max_abs_diff(logits, want) > 1e-6 * (1.0 + float(want.abs().max())):
            reference = {n: v.double() for n, v in expected.items() if n != tied_head}
            why = _first_wrong(got, reference, _gpt2_diagnosis(config, hf_state))
            if why:
                raise ExerciseError(f"{where}, {why}")
        expect_close(
            logits,
            want,
            where,
            atol=1e-6,
            rtol=1e-6,
            name="os logits do tpt.GPT carregado com o seu dicionário",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: um tpt.GPT com GQA dentro do LlamaForCausalLM
# --------------------------------------------------------------------------------------
def _heads_permuted(w: Tensor, num_heads: int) -> Tensor | None:
    """``w`` ``(n·k, d)`` com a permutação do RoPE em ``num_heads`` blocos de linhas (ou None)."""
    if w.shape[0] % num_heads or (w.shape[0] // num_heads) % 2:
        return None
    block = w.shape[0] // num_heads
    perm = torch.cat([torch.arange(0, block, 2), torch.arange(1, block, 2)])
    return w.reshape(num_heads, block, *w.shape[1:])[:, perm].reshape(w.shape)


def _heads_unpermuted(w: Tensor, num_heads: int) -> Tensor:
    block = w.shape[0] // num_heads
    perm = torch.cat([torch.arange(0, block, 2), torch.arange(1, block, 2)])
    return w.reshape(num_heads, block, *w.shape[1:])[:, torch.argsort(perm)].reshape(w.shape)


def _llama_diagnosis(config: tpt.GPTConfig, state: dict[str, Tensor]) -> Callable:
    scale = math.sqrt(config.embed_dim)
    heads, kv_heads = config.num_heads, config.num_kv_heads or config.num_heads
    head_dim = config.embed_dim // heads
    sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]

    def diagnose(name: str, value: Tensor) -> str | None:
        table = state["embedding.embedding.weight"]
        if name == "model.embed_tokens.weight":
            if _is(value, table):
                return (
                    "é a tabela do tpt como está. O tpt multiplica o embedding por √d no forward "
                    "e o Llama não: essa escala tem de entrar na própria tabela."
                )
            if _is(value, table / scale):
                return "você dividiu a tabela por √d; o embedding do tpt sai multiplicado por √d."
        if name == "model.norm.weight":
            gain = state["norm.weight"]
            if config.tie_weights and _is(value, gain):
                return (
                    "com pesos amarrados, a lm_head do Llama é a tabela, agora √d vezes maior: "
                    "os logits sairiam √d vezes maiores. Compense no ganho da norma final "
                    "(model.norm), que vem logo antes da lm_head."
                )
            if not config.tie_weights and not _is(value, gain):
                return (
                    "sem pesos amarrados a lm_head não é a tabela, então a norma final "
                    "passa como está."
                )
        if name == "lm_head.weight" and _is(value, table * scale):
            return "sem pesos amarrados, a lm_head do tpt não leva o √d: ela passa como está."
        parts = name.split(".")
        if len(parts) < 5:
            return None
        layer, proj = parts[2], parts[4]
        ours = f"layers.{layer}."
        if proj in ("q_proj", "k_proj", "v_proj"):
            wq, wk, wv = state[ours + "self_attn.qkv_proj.weight"].split(sizes)
            raw, n = {"q_proj": (wq, heads), "k_proj": (wk, kv_heads), "v_proj": (wv, kv_heads)}[
                proj
            ]
            if proj == "v_proj":
                if _is(value, _heads_permuted(raw, kv_heads)):
                    return (
                        "você permutou também as linhas de W_V. O RoPE gira só q e k; "
                        "W_V passa como está."
                    )
                return None
            if _is(value, raw):
                return (
                    "as linhas não mudaram de lugar. No tpt o RoPE gira a linha 2i com a 2i+1 "
                    "de cada cabeça; no Llama, a linha i com a i + d_h/2."
                )
            if _is(value, _heads_unpermuted(raw, n)):
                return (
                    "você aplicou a permutação inversa: a linha j do Llama é a linha perm[j] do "
                    "tpt, com perm = [0, 2, 4, ..., 1, 3, 5, ...]."
                )
            if proj == "k_proj" and kv_heads != heads and _is(value, _heads_permuted(raw, heads)):
                return (
                    f"você permutou W_K em num_heads = {heads} blocos de linhas. Com GQA, W_K "
                    f"tem num_kv_heads = {kv_heads} cabeças de d_h = {head_dim} linhas: "
                    "permute dentro de cada uma delas."
                )
            if _is(value, _heads_permuted(raw, 1)) and n > 1:
                return (
                    "você permutou a matriz inteira de uma vez. Cada cabeça tem as suas d_h "
                    "linhas e o seu RoPE: permute dentro de cada cabeça."
                )
        if proj in ("gate_proj", "up_proj"):
            other = "linear3" if proj == "gate_proj" else "linear1"
            if _is(value, state[ours + f"ffn.{other}.weight"]):
                return (
                    "gate_proj e up_proj trocadas. A porta (a que passa pela SiLU) é a "
                    "linear1 do tpt; a up_proj é a linear3."
                )
        return None

    return diagnose


@exercise("Exercício 2 (um tpt.GPT com GQA dentro do LlamaForCausalLM)")
def check_tpt_to_llama(tpt_to_llama: Callable[[dict, tpt.GPTConfig], dict]) -> None:
    """Confere ``tpt_to_llama(state, config)`` carregando o resultado num ``LlamaForCausalLM``."""
    transformers = tpt.hf._transformers()
    generator, seed = case_generator()
    drawn = _case_sizes(generator)
    divisors = [k for k in range(1, drawn["num_heads"] + 1) if drawn["num_heads"] % k == 0]
    drawn["num_kv_heads"] = divisors[randint(generator, 0, len(divisors) - 1)]
    cases = [
        dict(
            vocab_size=23,
            max_len=16,
            num_heads=4,
            num_kv_heads=2,
            head_dim=8,
            num_layers=2,
            tie_weights=True,
        ),
        dict(
            vocab_size=19,
            max_len=12,
            num_heads=6,
            num_kv_heads=3,
            head_dim=4,
            num_layers=1,
            tie_weights=False,
        ),
        dict(
            vocab_size=11,
            max_len=8,
            num_heads=2,
            num_kv_heads=1,
            head_dim=6,
            num_layers=1,
            tie_weights=True,
        ),
        drawn,
    ]
    for i, sizes in enumerate(cases):
        sizes = dict(sizes)
        head_dim = sizes.pop("head_dim")
        config = tpt.GPTConfig(
            embed_dim=sizes["num_heads"] * head_dim,
            positional="rope",
            norm="rmsnorm",
            activation="swiglu",
            bias=False,
            **sizes,
        )
        where = (
            f"Com embed_dim={config.embed_dim}, num_heads={config.num_heads}, "
            f"num_kv_heads={config.num_kv_heads}, num_layers={config.num_layers}, "
            f"tie_weights={config.tie_weights}" + seed_note(seed if i == len(cases) - 1 else None)
        )
        original = _random_model(config, 300 + i)
        state = {name: value.detach().clone() for name, value in original.state_dict().items()}
        got = _call_watched(
            tpt_to_llama,
            {"state": state, "config": config},
            where,
            _NAMES_ONLY | {"rope_permutation"},
        )
        hf_model = (
            transformers.LlamaForCausalLM(tpt.hf._hf_config(original, "llama")).double().eval()
        )
        expected = dict(hf_model.named_parameters())
        if config.tie_weights:  # named_parameters lista a lm_head amarrada uma vez só
            expected.setdefault("lm_head.weight", hf_model.lm_head.weight)
        tied_head = "lm_head.weight" if config.tie_weights else None
        got = _check_keys(got, expected, tied_head, where)
        if tied_head:
            got = _tied_head(got, "model.embed_tokens.weight", tied_head, where)
        hf_model.load_state_dict({n: v.detach() for n, v in got.items()}, strict=False)
        hf_model.tie_weights()
        ids = _ids(config, i)
        with torch.no_grad():
            logits = hf_model(ids, attention_mask=torch.ones_like(ids)).logits
            want = original(ids)
        # O Llama do transformers faz a RMSNorm e os ângulos do RoPE em float32.
        if max_abs_diff(logits, want) > 1e-5 * (1.0 + float(want.abs().max())):
            reference = {
                n: v.detach().double()
                for n, v in tpt.hf._llama_state(original).items()
                if n != tied_head
            }
            why = _first_wrong(got, reference, _llama_diagnosis(config, state))
            if why:
                raise ExerciseError(f"{where}, {why}")
        expect_close(
            logits,
            want,
            where,
            atol=1e-5,
            rtol=1e-5,
            name="os logits do LlamaForCausalLM carregado com o seu dicionário",
        )
