"""Do tpt ao Hugging Face: ``to_hf`` e ``from_hf`` entre ``tpt.GPT`` e ``transformers``.

Ver notebooks/11_do_tpt_ao_hugging_face.ipynb e, para o classificador e a LoRA
(``to_peft``, ``from_peft``), notebooks/12_ajuste_fino.ipynb.

Um ``tpt.GPT`` com a receita certa **é** um GPT-2 ou um Llama: as mesmas contas, com os
pesos guardados em outros nomes e, às vezes, em outra arrumação. Duas famílias têm
equivalente exato:

- **GPT-2** (``GPT2LMHeadModel``): posições aprendidas, LayerNorm, pré-normalização,
  GELU (exata ou aproximada por tanh) ou ReLU, sem GQA;
- **Llama** (``LlamaForCausalLM``): RoPE, RMSNorm, SwiGLU, GQA opcional, com ou sem
  viés (``attention_bias``/``mlp_bias``), pesos amarrados ou não.

As convenções que diferem, e o que fazemos com cada uma:

1. o ``Conv1D`` do GPT-2 guarda o peso **transposto** (``(d_in, d_out)``, ``y = x W + b``)
   e funde Q, K e V numa matriz só, ``c_attn``, de ``(d, 3d)``: é o ``qkv_proj`` do tpt
   (linhas ``[Q | K | V]``) transposto. O Llama guarda ``q_proj``, ``k_proj`` e
   ``v_proj`` separadas (``get_qkv`` e ``set_qkv`` fazem a separação);
2. o tpt multiplica os embeddings por ``√d`` (``TokenEmbedding``); o Hugging Face não.
   Dobramos a escala na tabela (``E' = √d · E``). Com pesos amarrados, a ``lm_head``
   passa a ser ``E'`` também, então dividimos o ganho (e o viés) da normalização final
   por ``√d``: ``norm'(x) E'ᵀ = norm(x) Eᵀ``, e o amarrado continua amarrado.
   ``head_scale=True`` (o ``d^-1/2`` antes da ``lm_head``) entra no mesmo ganho;
3. o RoPE do tpt gira pares vizinhos ``(2i, 2i+1)``; o do Llama gira as metades
   (``rotate_half``: ``i`` com ``i + d_h/2``). É uma permutação fixa das linhas de
   ``W_Q`` e ``W_K`` dentro de cada cabeça (``rope_permutation``); a pontuação
   ``q·k`` não muda quando q e k são permutados do mesmo jeito;
4. ``activation``: ``"gelu"`` (exata) vira ``"gelu"``, ``"gelu_tanh"`` vira
   ``"gelu_pytorch_tanh"`` (na volta aceitamos também ``"gelu_new"``, a do GPT-2
   publicado, a mesma fórmula); os ``eps`` das normalizações vão junto.

O que não tem equivalente nessas duas classes (pós-normalização, posições senoidais ou
ALiBi, RoPE com LayerNorm, mistura de especialistas, ``rope_scaling``...) levanta
``ValueError`` nomeando o campo, nunca um modelo diferente em silêncio.

O ``tpt.GPTClassifier`` vira ``GPT2ForSequenceClassification`` ou
``LlamaForSequenceClassification`` (a cabeça ``score`` no último token que não é
``pad_token_id``), e a LoRA do ``tpt.lora`` vira adaptadores do ``peft`` (``to_peft``):
as linhas de ``B`` seguem a mesma arrumação das linhas de ``W`` (permutação do RoPE em
Q e K, divisão do ``qkv_proj``, ``Conv1D`` transposto do GPT-2).

Mesmo em float64, o ``LlamaForCausalLM`` calcula a RMSNorm e os ângulos do RoPE em
float32: os logits de ``to_hf`` ficam a ~1e-7 dos do tpt, não a 1e-15 (``from_hf`` não
tem esse limite). O ``transformers`` (5.0 ou mais novo) só é importado aqui dentro, na
primeira chamada (o ``peft`` também): ``import tpt`` não fica mais pesado.
"""

from __future__ import annotations

import copy
import math
import re
import warnings
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tpt.classifier import GPTClassifier
from tpt.lora import LoRALinear, _freeze
from tpt.model import GPT, GPTConfig
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, BaseTokenizer

if TYPE_CHECKING:  # só para as anotações: o transformers e o peft não são importados aqui
    from peft import PeftModel
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "FAMILIES",
    "CLASSIFIER_FAMILIES",
    "hf_family",
    "to_hf",
    "from_hf",
    "to_peft",
    "from_peft",
    "parameter_map",
    "rope_permutation",
    "get_qkv",
    "set_qkv",
    "to_hf_tokenizer",
]

#: Famílias com equivalente exato no ``transformers``: nome no tpt -> classe do HF.
FAMILIES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
#: O mesmo para o ``tpt.GPTClassifier``: a cabeça ``score`` no último token real.
CLASSIFIER_FAMILIES = {
    "gpt2": "GPT2ForSequenceClassification",
    "llama": "LlamaForSequenceClassification",
}

# activation do tpt -> activation_function do GPT-2 (e a volta, com os sinônimos do HF).
_GPT2_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
_GPT2_ACT_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",  # a do GPT-2 publicado: a mesma fórmula com tanh
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


def _transformers():
    """Importa o ``transformers`` (só aqui), com uma mensagem clara se faltar."""
    try:
        import transformers
    except ImportError as error:  # pragma: no cover - depende do ambiente
        raise ImportError(
            "tpt.hf precisa do pacote transformers: pip install 'transformers>=5.0'"
        ) from error
    major = int(transformers.__version__.split(".")[0])
    if major < 5:  # pragma: no cover - depende do ambiente
        raise ImportError(
            f"tpt.hf foi testado com transformers 5.0 ou mais novo; este ambiente tem o "
            f"{transformers.__version__}: pip install -U 'transformers>=5.0'"
        )
    return transformers


def _peft():
    """Importa o ``peft`` (só aqui), com uma mensagem clara se faltar."""
    _transformers()
    try:
        import peft
    except ImportError as error:  # pragma: no cover - depende do ambiente
        message = "to_peft e from_peft precisam do pacote peft: pip install peft"
        raise ImportError(message) from error
    return peft


# --------------------------------------------------------------------------------------
# Q, K e V de uma atenção do tpt (o único lugar que conhece a arrumação das projeções)
# --------------------------------------------------------------------------------------
def get_qkv(attn: nn.Module) -> tuple[list[Tensor], list[Tensor | None]]:
    """``([W_Q, W_K, W_V], [b_Q, b_K, b_V])`` de uma ``MultiHeadAttention`` do tpt.

    A atenção do tpt guarda as três projeções numa só, ``qkv_proj``, com as linhas
    ``[Q | K | V]``. Formas: ``W_Q`` ``(d, d)``, ``W_K`` e ``W_V`` ``(h_kv·d_h, d)`` (a
    convenção do ``nn.Linear``: saída × entrada); vieses ``(d,)``/``(h_kv·d_h,)`` ou
    ``None``. São vistas (``split``) do mesmo tensor, não cópias.
    """
    kv_dim = attn.num_kv_heads * attn.head_dim
    sizes = [attn.embed_dim, kv_dim, kv_dim]
    weights = list(attn.qkv_proj.weight.split(sizes, dim=0))
    bias = attn.qkv_proj.bias
    biases = [None] * 3 if bias is None else list(bias.split(sizes, dim=0))
    return weights, biases


@torch.no_grad()
def set_qkv(attn: nn.Module, weights: list[Tensor], biases: list[Tensor | None]) -> None:
    """Copia ``[W_Q, W_K, W_V]`` e os vieses para uma atenção do tpt (inverso de ``get_qkv``)."""
    current_w, current_b = get_qkv(attn)
    for target, source in zip(current_w + current_b, list(weights) + list(biases), strict=True):
        if target is None:
            continue
        target.copy_(torch.zeros_like(target) if source is None else source)


def rope_permutation(head_dim: int) -> Tensor:
    """Índices ``(d_h,)``: a linha ``j`` do Llama é a linha ``perm[j]`` do tpt, numa cabeça.

    O tpt gira os pares ``(2i, 2i+1)``; o Llama gira ``(i, i + d_h/2)``. Então a metade
    de cima do Llama são as linhas pares do tpt e a de baixo, as ímpares:
    ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``. Use ``W[perm]`` numa cabeça de ``W_Q`` ou
    ``W_K``; a inversa é ``torch.argsort(perm)``.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2:
        raise ValueError(f"head_dim={head_dim!r} deve ser um inteiro par >= 2")
    if head_dim % 2:
        raise ValueError(f"head_dim={head_dim} deve ser par: o RoPE gira pares de dimensões")
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _permute_heads(w: Tensor | None, num_heads: int, perm: Tensor) -> Tensor | None:
    """Aplica ``perm`` às linhas de cada cabeça: ``(h·d_h, ...)`` -> mesma forma."""
    if w is None:
        return None
    head_dim = perm.numel()
    rows = w.reshape(num_heads, head_dim, *w.shape[1:])  # (h, d_h, ...)
    return rows[:, perm.to(w.device)].reshape(w.shape)


# --------------------------------------------------------------------------------------
# Qual família? (ou um erro que diz qual campo não tem equivalente)
# --------------------------------------------------------------------------------------
def hf_family(config: GPTConfig) -> str:
    """``"gpt2"`` ou ``"llama"``: a família do HF equivalente a ``config``.

    Levanta ``ValueError`` nomeando o primeiro campo sem equivalente.
    """
    if not isinstance(config, GPTConfig):
        raise TypeError(f"esperava um GPTConfig; recebi {type(config).__name__}")
    c = config

    def refuse(field: str, why: str) -> ValueError:
        return ValueError(
            f"{field}={getattr(c, field)!r}: {why}. Sem equivalente em GPT2LMHeadModel nem "
            "em LlamaForCausalLM, to_hf não converte (daria um modelo diferente)."
        )

    if c.num_experts is not None:
        raise refuse("num_experts", "mistura de especialistas")
    if not c.norm_first:
        raise refuse("norm_first", "o GPT-2 e o Llama usam pré-normalização")
    if c.positional == "learned":
        if c.norm != "layernorm":
            raise refuse("norm", "com posições aprendidas (GPT-2), a norma é a LayerNorm")
        if c.activation not in _GPT2_ACT_TO_HF:
            raise refuse("activation", "o GPT-2 usa uma ativação simples (gelu, gelu_tanh, relu)")
        if c.num_kv_heads not in (None, c.num_heads):
            raise refuse("num_kv_heads", "o GPT-2 não tem GQA")
        return "gpt2"
    if c.positional == "rope":
        if c.norm != "rmsnorm":
            raise refuse("norm", "com RoPE (Llama), a norma é a RMSNorm")
        if c.activation != "swiglu":
            raise refuse("activation", "com RoPE (Llama), a FFN é a SwiGLU")
        return "llama"
    raise refuse("positional", "o GPT-2 usa posições aprendidas e o Llama, RoPE")


# --------------------------------------------------------------------------------------
# O mapa de nomes: lido dos parâmetros do próprio modelo
# --------------------------------------------------------------------------------------
_WB = r"(?P<kind>weight|bias)"  # o tipo do parâmetro, nos padrões abaixo


@dataclass
class _Rule:
    pattern: str  # regex sobre o nome no tpt
    hf_name: str  # nome no HF ({layer} = número da camada, {kind} = weight ou bias)
    how: str  # a conversão, em português
    bias_how: str | None = None  # a do viés, quando difere da do peso (vieses não se transpõem)


def _rules(family: str, model: GPT) -> list[_Rule]:
    c = model.config
    tied = c.tie_weights
    final = "÷ √d (amarrada à tabela, que leva o √d)" if tied else "igual"
    if c.head_scale:
        final += ", × d^-1/2 (head_scale)"
    if family == "gpt2":
        h = "transformer.h.{layer}."
        qkv = _Rule(
            r"self_attn\.qkv_proj\." + _WB,
            h + "attn.c_attn.{kind}",
            "transposta (Conv1D guarda Wᵀ; as linhas [Q | K | V] viram colunas)",
            "igual (um viés não tem orientação; [Q | K | V] na mesma ordem)",
        )
        layer = [
            _Rule(r"norm1\." + _WB, h + "ln_1.{kind}", "igual"),
            qkv,
            _Rule(
                r"self_attn\.out_proj\." + _WB,
                h + "attn.c_proj.{kind}",
                "transposta",
                "igual (um viés não tem orientação)",
            ),
            _Rule(r"norm2\." + _WB, h + "ln_2.{kind}", "igual"),
            _Rule(
                r"ffn\.linear1\." + _WB,
                h + "mlp.c_fc.{kind}",
                "transposta",
                "igual (um viés não tem orientação)",
            ),
            _Rule(
                r"ffn\.linear2\." + _WB,
                h + "mlp.c_proj.{kind}",
                "transposta",
                "igual (um viés não tem orientação)",
            ),
        ]
        top = [
            _Rule(r"embedding\.embedding\.weight", "transformer.wte.weight", "× √d"),
            _Rule(r"positional\.embedding\.weight", "transformer.wpe.weight", "igual"),
            _Rule(r"norm\." + _WB, "transformer.ln_f.{kind}", final),
        ]
    else:
        h = "model.layers.{layer}."
        qkv = _Rule(
            r"self_attn\.qkv_proj\." + _WB,
            h + "self_attn.{{q,k,v}}_proj.{kind}",
            "linhas [Q | K | V] separadas; em Q e K, linhas permutadas em cada cabeça "
            "(pares vizinhos -> metades)",
            "partes [Q | K | V] separadas; em Q e K, entradas permutadas em cada cabeça, "
            "como as linhas do peso",
        )
        layer = [
            _Rule(r"norm1\.weight", h + "input_layernorm.weight", "igual"),
            qkv,
            _Rule(r"self_attn\.out_proj\." + _WB, h + "self_attn.o_proj.{kind}", "igual"),
            _Rule(r"norm2\.weight", h + "post_attention_layernorm.weight", "igual"),
            _Rule(r"ffn\.linear1\." + _WB, h + "mlp.gate_proj.{kind}", "igual (a porta)"),
            _Rule(r"ffn\.linear3\." + _WB, h + "mlp.up_proj.{kind}", "igual"),
            _Rule(r"ffn\.linear2\." + _WB, h + "mlp.down_proj.{kind}", "igual"),
        ]
        top = [
            _Rule(r"embedding\.embedding\.weight", "model.embed_tokens.weight", "× √d"),
            _Rule(r"norm\.weight", "model.norm.weight", final),
        ]
    for rule in layer:
        rule.pattern = r"layers\.(?P<layer>\d+)\." + rule.pattern
    head = [_Rule(r"lm_head\.weight", "lm_head.weight", "igual")]
    return top + layer + head


def parameter_map(model: GPT) -> list[tuple[str, str, str]]:
    """``[(nome no tpt, nome no HF, conversão), ...]``, um por parâmetro de ``model``.

    A lista é lida de ``model.named_parameters()`` (um parâmetro amarrado aparece uma
    vez só, com o nome da tabela de embeddings). Levanta ``ValueError`` se a
    configuração não tiver equivalente (ver ``hf_family``). Com LoRA, os ``A`` e ``B``
    ficam de fora: não são pesos do modelo do HF, e sim do ``peft`` (ver ``to_peft``).
    """
    if not isinstance(model, GPT):
        raise TypeError(
            f"parameter_map espera um tpt.GPT (de um classificador, passe clf.gpt); recebi "
            f"{type(model).__name__}"
        )
    family = hf_family(model.config)
    rules = _rules(family, model)
    rows = []
    for name, _ in model.named_parameters():
        if name.split(".")[-2] in ("lora_A", "lora_B"):
            continue
        for rule in rules:
            match = re.fullmatch(rule.pattern, name)
            if match:
                hf_name = rule.hf_name.format(**match.groupdict())
                is_bias = match.groupdict().get("kind") == "bias"
                rows.append(
                    (name, hf_name, rule.bias_how if is_bias and rule.bias_how else rule.how)
                )
                break
        else:  # pragma: no cover - um parâmetro novo no tpt sem regra
            raise ValueError(f"o parâmetro {name!r} do tpt não tem nome no Hugging Face")
    return rows


# --------------------------------------------------------------------------------------
# tpt -> Hugging Face
# --------------------------------------------------------------------------------------
def _final_scale(c: GPTConfig) -> float:
    """Fator do ganho da norma final no HF: ``1/√d`` (amarrada) × ``d^-1/2`` (head_scale)."""
    scale = 1.0 / math.sqrt(c.embed_dim) if c.tie_weights else 1.0
    return scale * (c.embed_dim**-0.5 if c.head_scale else 1.0)


def _hf_config(
    model: GPT, family: str, num_labels: int | None = None, pad_id: int = PAD_ID
) -> PreTrainedConfig:
    """A configuração do HF; com ``num_labels``, a de um classificador (``pad_token_id``)."""
    c = model.config
    transformers = _transformers()
    common = dict(
        vocab_size=c.vocab_size,
        tie_word_embeddings=c.tie_weights,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=pad_id,
    )
    if num_labels is not None:
        common["num_labels"] = num_labels
    if family == "gpt2":
        return transformers.GPT2Config(
            n_positions=c.max_len,
            n_embd=c.embed_dim,
            n_layer=c.num_layers,
            n_head=c.num_heads,
            n_inner=model.layers[0].ffn.ff_dim,
            activation_function=_GPT2_ACT_TO_HF[c.activation],
            resid_pdrop=c.dropout,
            embd_pdrop=c.dropout,
            attn_pdrop=c.dropout,
            layer_norm_epsilon=c.eps,
            **common,
        )
    if c.dropout > 0:
        warnings.warn(
            f"dropout={c.dropout}: o Llama só tem dropout nos pesos de atenção "
            "(attention_dropout); em modo eval as saídas são iguais, no treino não.",
            stacklevel=3,
        )
    return transformers.LlamaConfig(
        hidden_size=c.embed_dim,
        intermediate_size=model.layers[0].ffn.ff_dim,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads or c.num_heads,
        head_dim=c.embed_dim // c.num_heads,
        hidden_act="silu",
        max_position_embeddings=c.max_len,
        rms_norm_eps=c.eps,
        rope_theta=float(c.rope_theta),
        attention_bias=c.bias,
        mlp_bias=c.bias,
        attention_dropout=c.dropout,
        **common,
    )


def _gpt2_state(model: GPT, head: bool = True) -> dict[str, Tensor]:
    """Pesos do tpt com os nomes e a arrumação do ``GPT2LMHeadModel``.

    ``head=False``: o corpo de um classificador, sem ``lm_head`` e com a norma final
    como no tpt (a cabeça ``score`` lê o estado oculto sem o ajuste da ``lm_head``).
    """
    c = model.config
    sd: dict[str, Tensor] = {}

    def linear(prefix: str, lin: nn.Linear) -> None:  # Conv1D: peso transposto, viés sempre
        sd[prefix + ".weight"] = lin.weight.t()
        sd[prefix + ".bias"] = _bias(lin.bias, lin.out_features, lin.weight)

    def norm(prefix: str, module: nn.Module, scale: float = 1.0) -> None:
        sd[prefix + ".weight"] = module.weight * scale
        sd[prefix + ".bias"] = _bias(module.bias, module.weight.numel(), module.weight) * scale

    table = model.embedding.weight * model.embedding.multiplier  # (V, d): o √d vai na tabela
    sd["transformer.wte.weight"] = table
    sd["transformer.wpe.weight"] = model.positional.embedding.weight
    for i, layer in enumerate(model.layers):
        h = f"transformer.h.{i}."
        norm(h + "ln_1", layer.norm1)
        linear(h + "attn.c_attn", layer.self_attn.qkv_proj)  # (d, 3d): [Q | K | V] em colunas
        linear(h + "attn.c_proj", layer.self_attn.out_proj)
        norm(h + "ln_2", layer.norm2)
        linear(h + "mlp.c_fc", layer.ffn.linear1)
        linear(h + "mlp.c_proj", layer.ffn.linear2)
    norm("transformer.ln_f", model.norm, _final_scale(c) if head else 1.0)
    if head:
        sd["lm_head.weight"] = table if c.tie_weights else model.lm_head.weight
    return sd


def _llama_state(model: GPT, head: bool = True) -> dict[str, Tensor]:
    """Pesos do tpt com os nomes e a arrumação do ``LlamaForCausalLM`` (``head`` como no GPT-2)."""
    c = model.config
    sd: dict[str, Tensor] = {}
    kv_heads = c.num_kv_heads or c.num_heads
    perm = rope_permutation(c.embed_dim // c.num_heads)

    def linear(prefix: str, lin: nn.Linear) -> None:
        sd[prefix + ".weight"] = lin.weight
        if lin.bias is not None:
            sd[prefix + ".bias"] = lin.bias

    table = model.embedding.weight * model.embedding.multiplier
    sd["model.embed_tokens.weight"] = table
    for i, layer in enumerate(model.layers):
        h = f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = layer.norm1.weight
        (wq, wk, wv), (bq, bk, bv) = get_qkv(layer.self_attn)
        projections = {
            "q_proj": (
                _permute_heads(wq, c.num_heads, perm),
                _permute_heads(bq, c.num_heads, perm),
            ),
            "k_proj": (_permute_heads(wk, kv_heads, perm), _permute_heads(bk, kv_heads, perm)),
            "v_proj": (wv, bv),
        }
        for name, (w, b) in projections.items():
            sd[h + f"self_attn.{name}.weight"] = w
            if b is not None:
                sd[h + f"self_attn.{name}.bias"] = b
        linear(h + "self_attn.o_proj", layer.self_attn.out_proj)
        sd[h + "post_attention_layernorm.weight"] = layer.norm2.weight
        linear(h + "mlp.gate_proj", layer.ffn.linear1)
        linear(h + "mlp.up_proj", layer.ffn.linear3)
        linear(h + "mlp.down_proj", layer.ffn.linear2)
    sd["model.norm.weight"] = model.norm.weight * (_final_scale(c) if head else 1.0)
    if head:
        sd["lm_head.weight"] = table if c.tie_weights else model.lm_head.weight
    return sd


def _bias(bias: Tensor | None, size: int, like: Tensor) -> Tensor:
    """O viés, ou zeros (``bias=False`` no tpt = viés zero no GPT-2, que sempre tem viés)."""
    return torch.zeros(size, dtype=like.dtype, device=like.device) if bias is None else bias


def _unmerged_lora(model: nn.Module) -> list[LoRALinear]:
    return [m for m in model.modules() if isinstance(m, LoRALinear) and not m.merged]


def _refuse_mean_pooling(model: nn.Module, where: str) -> None:
    if isinstance(model, GPTClassifier) and model.pooling != "last":
        raise ValueError(
            f"{where}: o GPTClassifier usa pooling={model.pooling!r}, e o "
            "LlamaForSequenceClassification só lê o último token real (pooling='last')"
        )


@torch.no_grad()
def to_hf(model: GPT | GPTClassifier) -> PreTrainedModel:
    """Converte um ``tpt.GPT`` ou ``tpt.GPTClassifier`` num modelo do ``transformers``.

    Um ``GPT`` vira um ``GPT2LMHeadModel`` (posições aprendidas, LayerNorm, GELU/ReLU) ou
    um ``LlamaForCausalLM`` (RoPE, RMSNorm, SwiGLU): ``to_hf(model)(ids).logits``
    ``(b, t, V)`` é igual a ``model(ids)``. Um ``GPTClassifier`` vira um
    ``GPT2ForSequenceClassification`` ou ``LlamaForSequenceClassification`` com
    ``num_labels = num_classes`` e ``pad_token_id = pad_id`` (a mesma regra do último
    token real): ``.logits`` ``(b, C)`` igual a ``clf(ids)``; com preenchimento,
    ``attention_mask=(ids != pad_id)`` equivale a ``key_padding_mask=(ids == pad_id)``.

    O modelo novo fica no mesmo dtype, device e modo (treino/avaliação) e pode ser salvo
    com ``save_pretrained``. Levanta ``ValueError`` nomeando o campo quando não há
    equivalente (ver ``hf_family``). Com LoRA, só depois de ``merge_lora`` (exporta os
    pesos fundidos); para manter os adaptadores separados, use ``to_peft``.
    """
    if not isinstance(model, (GPT, GPTClassifier)):
        raise TypeError(
            f"to_hf espera um tpt.GPT ou tpt.GPTClassifier; recebi {type(model).__name__}"
        )
    _refuse_mean_pooling(model, "to_hf")
    if _unmerged_lora(model):
        raise ValueError(
            "o modelo tem LoRA não fundida: to_hf exportaria só os pesos congelados. Use "
            "tpt.merge_lora(model) antes (um modelo comum) ou tpt.hf.to_peft(model) (os "
            "adaptadores no peft)"
        )
    return _to_hf(model)


@torch.no_grad()
def _to_hf(model: GPT | GPTClassifier) -> PreTrainedModel:
    """``to_hf`` sem a conferência da LoRA: exporta o ``weight`` de cada linear (a base)."""
    transformers = _transformers()
    classifier = isinstance(model, GPTClassifier)
    body = model.gpt if classifier else model
    family = hf_family(body.config)
    if classifier:
        config = _hf_config(body, family, num_labels=model.num_classes, pad_id=model.pad_id)
        cls = getattr(transformers, CLASSIFIER_FAMILIES[family])
    else:
        config = _hf_config(body, family)
        cls = getattr(transformers, FAMILIES[family])
    ref = body.embedding.weight
    hf_model = cls(config).to(device=ref.device, dtype=ref.dtype)
    head = not classifier
    state = _gpt2_state(body, head) if family == "gpt2" else _llama_state(body, head)
    if classifier:
        state["score.weight"] = model.score.weight
    hf_model.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    if not classifier:
        hf_model.tie_weights()
    hf_model.train(model.training)
    return hf_model


# --------------------------------------------------------------------------------------
# Hugging Face -> tpt
# --------------------------------------------------------------------------------------
def _load(source: PreTrainedModel | str | PathLike, **kwargs) -> PreTrainedModel:
    """Um modelo do HF já na memória, ou carregado de uma pasta (``save_pretrained``) ou do Hub."""
    if isinstance(source, (str, PathLike)):
        transformers = _transformers()
        if isinstance(source, PathLike) and not Path(source).exists():
            raise FileNotFoundError(f"a pasta {str(source)!r} não existe")
        config = transformers.AutoConfig.from_pretrained(str(source))
        architectures = getattr(config, "architectures", None) or []
        if any(name.endswith("ForSequenceClassification") for name in architectures):
            auto = transformers.AutoModelForSequenceClassification
        else:
            auto = transformers.AutoModelForCausalLM
        return auto.from_pretrained(str(source), **kwargs)
    if not isinstance(source, nn.Module) or not hasattr(source, "config"):
        raise TypeError(
            "from_hf espera um modelo do transformers, uma pasta de save_pretrained ou o "
            f"nome de um modelo no Hub; recebi {type(source).__name__}"
        )
    return source


def _rope_theta(config: PreTrainedConfig) -> float:
    """Lê ``rope_theta`` e recusa ``rope_scaling`` (qualquer RoPE que não seja o padrão)."""
    params = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) if not params else None
    rope_type = params.get("rope_type", "default") if params else None
    if scaling or rope_type not in (None, "default"):
        raise ValueError(
            f"rope_scaling={scaling or params!r}: o tpt só tem o RoPE padrão (sem "
            "escalonamento de frequências, como o 'llama3' ou o 'yarn'); from_hf não converte."
        )
    theta = params.get("rope_theta") if params else getattr(config, "rope_theta", None)
    return 10000.0 if theta is None else float(theta)


def _tpt_config(hf_config: PreTrainedConfig, max_len: int | None) -> GPTConfig:
    """O ``GPTConfig`` equivalente a um ``GPT2Config``/``LlamaConfig`` (ou um erro claro)."""
    kind = getattr(hf_config, "model_type", None)
    if kind == "gpt2":
        act = hf_config.activation_function
        if act not in _GPT2_ACT_FROM_HF:
            raise ValueError(
                f"activation_function={act!r} não tem equivalente no tpt; aceitas: "
                f"{', '.join(_GPT2_ACT_FROM_HF)}"
            )
        if not hf_config.scale_attn_weights or hf_config.scale_attn_by_inverse_layer_idx:
            raise ValueError(
                "scale_attn_weights=False ou scale_attn_by_inverse_layer_idx=True: a escala "
                "da atenção do tpt é sempre 1/√d_h"
            )
        if hf_config.add_cross_attention:
            raise ValueError("add_cross_attention=True: o GPT do tpt não tem atenção cruzada")
        d = hf_config.n_embd
        return GPTConfig(
            vocab_size=hf_config.vocab_size,
            max_len=max_len or hf_config.n_positions,
            embed_dim=d,
            num_heads=hf_config.n_head,
            num_layers=hf_config.n_layer,
            ff_dim=hf_config.n_inner or 4 * d,
            dropout=float(hf_config.resid_pdrop),
            activation=_GPT2_ACT_FROM_HF[act],
            norm="layernorm",
            positional="learned",
            tie_weights=bool(hf_config.tie_word_embeddings),
            bias=True,
            eps=hf_config.layer_norm_epsilon,
        )
    if kind == "llama":
        if hf_config.hidden_act not in ("silu", "swish"):
            raise ValueError(
                f"hidden_act={hf_config.hidden_act!r}: o tpt só tem a SwiGLU (hidden_act='silu')"
            )
        d, heads = hf_config.hidden_size, hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or d // heads
        if head_dim * heads != d:
            raise ValueError(
                f"head_dim={head_dim}: no tpt, head_dim = hidden_size / num_attention_heads "
                f"= {d // heads}"
            )
        kv_heads = hf_config.num_key_value_heads or heads
        if getattr(hf_config, "pretraining_tp", 1) not in (None, 1):
            raise ValueError(f"pretraining_tp={hf_config.pretraining_tp}: só 1 é suportado")
        return GPTConfig(
            vocab_size=hf_config.vocab_size,
            max_len=max_len or hf_config.max_position_embeddings,
            embed_dim=d,
            num_heads=heads,
            num_layers=hf_config.num_hidden_layers,
            num_kv_heads=kv_heads if kv_heads != heads else None,
            ff_dim=hf_config.intermediate_size,
            dropout=float(hf_config.attention_dropout or 0.0),
            activation="swiglu",
            norm="rmsnorm",
            positional="rope",
            tie_weights=bool(hf_config.tie_word_embeddings),
            bias=bool(hf_config.attention_bias or hf_config.mlp_bias),
            eps=hf_config.rms_norm_eps,
            rope_theta=_rope_theta(hf_config),
        )
    raise ValueError(
        f"model_type={kind!r}: from_hf converte só as famílias gpt2 (GPT2LMHeadModel) e "
        "llama (LlamaForCausalLM)"
    )


@torch.no_grad()
def _load_gpt2(model: GPT, hf_model: PreTrainedModel, head: bool = True) -> None:
    c = model.config
    sd = hf_model.state_dict()

    def take(name: str) -> Tensor:
        return sd[name]

    table = take("transformer.wte.weight")  # (V, d), já com o √d do tpt dentro
    model.embedding.weight.copy_(table / model.embedding.multiplier)
    model.positional.embedding.weight.copy_(take("transformer.wpe.weight"))
    for i, layer in enumerate(model.layers):
        h = f"transformer.h.{i}."
        for ours, theirs in ((layer.norm1, "ln_1"), (layer.norm2, "ln_2")):
            ours.weight.copy_(take(h + theirs + ".weight"))
            ours.bias.copy_(take(h + theirs + ".bias"))
        for ours, theirs in (
            (layer.self_attn.qkv_proj, "attn.c_attn"),
            (layer.self_attn.out_proj, "attn.c_proj"),
            (layer.ffn.linear1, "mlp.c_fc"),
            (layer.ffn.linear2, "mlp.c_proj"),
        ):
            ours.weight.copy_(take(h + theirs + ".weight").t())
            ours.bias.copy_(take(h + theirs + ".bias"))
    scale = _final_scale(c) if head else 1.0
    model.norm.weight.copy_(take("transformer.ln_f.weight") / scale)
    model.norm.bias.copy_(take("transformer.ln_f.bias") / scale)
    if head and not c.tie_weights:
        model.lm_head.weight.copy_(take("lm_head.weight"))


@torch.no_grad()
def _load_llama(model: GPT, hf_model: PreTrainedModel, head: bool = True) -> None:
    c = model.config
    sd = hf_model.state_dict()
    kv_heads = c.num_kv_heads or c.num_heads
    inverse = torch.argsort(rope_permutation(c.embed_dim // c.num_heads))

    def linear(ours: nn.Linear, name: str) -> None:
        ours.weight.copy_(sd[name + ".weight"])
        if ours.bias is not None:
            ours.bias.copy_(sd.get(name + ".bias", torch.zeros_like(ours.bias)))

    model.embedding.weight.copy_(sd["model.embed_tokens.weight"] / model.embedding.multiplier)
    for i, layer in enumerate(model.layers):
        h = f"model.layers.{i}.self_attn."
        layer.norm1.weight.copy_(sd[f"model.layers.{i}.input_layernorm.weight"])
        layer.norm2.weight.copy_(sd[f"model.layers.{i}.post_attention_layernorm.weight"])
        weights = [
            _permute_heads(sd[h + "q_proj.weight"], c.num_heads, inverse),
            _permute_heads(sd[h + "k_proj.weight"], kv_heads, inverse),
            sd[h + "v_proj.weight"],
        ]
        biases = [
            _permute_heads(sd.get(h + "q_proj.bias"), c.num_heads, inverse),
            _permute_heads(sd.get(h + "k_proj.bias"), kv_heads, inverse),
            sd.get(h + "v_proj.bias"),
        ]
        set_qkv(layer.self_attn, weights, biases)
        linear(layer.self_attn.out_proj, h + "o_proj")
        mlp = f"model.layers.{i}.mlp."
        linear(layer.ffn.linear1, mlp + "gate_proj")
        linear(layer.ffn.linear3, mlp + "up_proj")
        linear(layer.ffn.linear2, mlp + "down_proj")
    model.norm.weight.copy_(sd["model.norm.weight"] / (_final_scale(c) if head else 1.0))
    if head and not c.tie_weights:
        model.lm_head.weight.copy_(sd["lm_head.weight"])


def from_hf(
    source: PreTrainedModel | str | PathLike,
    *,
    max_len: int | None = None,
    **from_pretrained_kwargs,
) -> GPT | GPTClassifier:
    """Converte um modelo GPT-2 ou Llama do ``transformers`` num modelo do tpt igual.

    ``GPT2LMHeadModel``/``LlamaForCausalLM`` viram um ``tpt.GPT``;
    ``GPT2ForSequenceClassification``/``LlamaForSequenceClassification`` viram um
    ``tpt.GPTClassifier`` (``num_classes = num_labels``, ``pad_id = pad_token_id``; a
    ``lm_head`` do corpo fica sem uso, amarrada ou sorteada conforme
    ``tie_word_embeddings``).

    ``source``: o modelo já carregado, a pasta de um ``save_pretrained`` ou o nome de um
    modelo no Hub (os dois últimos passam por ``AutoModelForCausalLM.from_pretrained``,
    ou ``AutoModelForSequenceClassification`` se a pasta guarda um classificador, que
    recebe ``from_pretrained_kwargs``, por exemplo ``dtype=torch.float64``).
    ``max_len`` limita o contexto do tpt (padrão: o do modelo; o RoPE do tpt guarda
    tabelas de ``max_len`` posições em cada camada, então um Llama com 131.072
    posições pede um ``max_len`` menor). O modelo devolvido fica no mesmo dtype, device
    e modo do original, com ``head_scale=False``: o ``√d`` sai da tabela do HF.
    """
    hf_model = _load(source, **from_pretrained_kwargs)
    config = _tpt_config(hf_model.config, max_len)
    classifier = type(hf_model).__name__ in CLASSIFIER_FAMILIES.values()
    if not classifier and type(hf_model).__name__.endswith("ForSequenceClassification"):
        raise ValueError(
            f"{type(hf_model).__name__}: from_hf converte só os classificadores "
            f"{' e '.join(CLASSIFIER_FAMILIES.values())}"
        )
    ref = hf_model.get_input_embeddings().weight
    model = GPT(config).to(device=ref.device, dtype=ref.dtype)
    if config.positional == "learned":
        _load_gpt2(model, hf_model, head=not classifier)
    else:
        _load_llama(model, hf_model, head=not classifier)
    model.train(hf_model.training)
    if not classifier:
        return model
    pad_id = hf_model.config.pad_token_id
    if pad_id is None:
        raise ValueError(
            "pad_token_id=None: o classificador precisa do id de <pad> para achar o último "
            "token real de cada linha"
        )
    clf = GPTClassifier(model, hf_model.config.num_labels, pad_id=int(pad_id))
    score = hf_model.score
    if getattr(score, "bias", None) is not None:
        raise ValueError("a cabeça score tem viés: o GPTClassifier usa score sem viés")
    with torch.no_grad():
        clf.score.weight.copy_(score.weight)
    clf.train(hf_model.training)
    return clf


# --------------------------------------------------------------------------------------
# LoRA: tpt <-> peft
# --------------------------------------------------------------------------------------
# Alvo do tpt (fora do qkv_proj) -> módulo do HF em cada camada, por família.
_PEFT_NAMES = {
    "llama": {
        "out_proj": "self_attn.o_proj",
        "linear1": "mlp.gate_proj",
        "linear3": "mlp.up_proj",
        "linear2": "mlp.down_proj",
    },
    "gpt2": {"out_proj": "attn.c_proj", "linear1": "mlp.c_fc", "linear2": "mlp.c_proj"},
}
_LAYER_PREFIX = {"llama": "model.layers.{i}.", "gpt2": "transformer.h.{i}."}
_LLAMA_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


@dataclass
class _Adapter:
    a: Tensor  # (r, d_in)
    b: Tensor  # (d_out, r)
    scaling: float
    dropout: float


def _peft_adapters(body: GPT, family: str) -> dict[str, _Adapter]:
    """``{nome do módulo no HF: adaptador}`` com os A e B já na arrumação do HF."""
    c = body.config
    kv_heads = c.num_kv_heads or c.num_heads
    adapters: dict[str, _Adapter] = {}
    for i, layer in enumerate(body.layers):
        prefix = _LAYER_PREFIX[family].format(i=i)
        attn = layer.self_attn
        qkv = attn.qkv_proj
        if isinstance(qkv, LoRALinear):
            p = qkv.lora_dropout.p
            if family == "gpt2":  # um adaptador só no c_attn, que é o qkv_proj inteiro
                adapters[prefix + "attn.c_attn"] = _fused_adapter(qkv)
            else:
                perm = rope_permutation(attn.head_dim)
                sizes = [attn.embed_dim, attn.kv_dim, attn.kv_dim]
                heads = {"q": c.num_heads, "k": kv_heads, "v": None}
                for name in qkv.slices:
                    a, b = qkv.lora_A[name], qkv.lora_B[name]
                    parts = {name: b}
                    if name == "qkv_proj":  # o mesmo A para q, k e v; B separado por linhas
                        parts = dict(zip("qkv", b.split(sizes), strict=True))
                    for part, rows in parts.items():
                        if heads[part] is not None:  # Q e K: as linhas do RoPE permutadas
                            rows = _permute_heads(rows, heads[part], perm)
                        adapters[prefix + f"self_attn.{part}_proj"] = _Adapter(
                            a.detach(), rows.detach(), qkv.scaling, p
                        )
        names = {"out_proj": attn.out_proj}
        for name in ("linear1", "linear3", "linear2"):
            if hasattr(layer.ffn, name):
                names[name] = getattr(layer.ffn, name)
        for name, module in names.items():
            if isinstance(module, LoRALinear):
                adapters[prefix + _PEFT_NAMES[family][name]] = _fused_adapter(module)
    return adapters


def _fused_adapter(module: LoRALinear) -> _Adapter:
    """Um par ``A, B`` para a linear inteira: as fatias viram blocos (posto r × fatias).

    ``ΔW`` tem, nas linhas de cada fatia, ``(α/r)·B_f·A_f``. Empilhando os ``A_f``
    ``(n·r, d_in)`` e pondo cada ``B_f`` no seu bloco de linhas e colunas de um ``B``
    ``(d_out, n·r)`` com zeros no resto, ``B·A`` dá exatamente esse ``ΔW`` com a mesma
    escala ``α/r``.
    """
    slices = sorted(module.slices.items(), key=lambda item: item[1])
    if len(slices) == 1 and slices[0][1] == (0, module.out_features):
        name = slices[0][0]
        a, b = module.lora_A[name].detach(), module.lora_B[name].detach()
        return _Adapter(a, b, module.scaling, module.lora_dropout.p)
    r = module.rank
    a = torch.cat([module.lora_A[name].detach() for name, _ in slices])  # (n·r, d_in)
    b = module.weight.new_zeros(module.out_features, r * len(slices))  # (d_out, n·r)
    for j, (name, (start, end)) in enumerate(slices):
        b[start:end, j * r : (j + 1) * r] = module.lora_B[name].detach()
    return _Adapter(a, b, module.scaling, module.lora_dropout.p)


def _target_modules(names: list[str], family: str, num_layers: int) -> list[str]:
    """Os ``target_modules`` do ``peft``: nomes curtos (``"q_proj"``) se valem em toda camada.

    O ``peft`` escolhe os módulos cujo nome termina em ``.<alvo>``. Com os mesmos alvos
    em todas as camadas (o que ``add_lora`` faz), basta o nome local, como se escreve à
    mão (``["q_proj", "v_proj"]``); no GPT-2, ``c_proj`` existe na atenção e na FFN, daí
    ``"attn.c_proj"`` e ``"mlp.c_proj"``. Senão, os nomes completos.
    """
    prefix = re.compile(re.escape(_LAYER_PREFIX[family]).replace(r"\{i\}", r"(\d+)"))
    layers: dict[str, set[int]] = {}
    for name in names:
        match = prefix.match(name)
        layers.setdefault(name[match.end() :], set()).add(int(match.group(1)))
    if any(found != set(range(num_layers)) for found in layers.values()):
        return names
    short = [local.split(".")[-1] for local in layers]
    return [
        s if s != "c_proj" else local for s, local in zip(short, layers, strict=True)
    ]


@torch.no_grad()
def to_peft(model: GPT | GPTClassifier) -> PeftModel:
    """Um ``peft.PeftModel`` com os mesmos adaptadores LoRA de ``model`` (e as mesmas saídas).

    O modelo de base é ``to_hf`` dos pesos congelados; cada ``LoRALinear`` do tpt vira um
    adaptador do ``peft`` (nome ``"default"``) no módulo correspondente:

    - Llama: as fatias ``"q"``, ``"k"`` e ``"v"`` do ``qkv_proj`` vão para ``q_proj``,
      ``k_proj`` e ``v_proj`` (com GQA, K e V têm ``h_kv·d_h`` linhas). ``to_hf`` permuta
      as linhas de ``W_Q`` e ``W_K`` em cada cabeça (o RoPE do Llama gira metades, o do tpt
      pares vizinhos); ``ΔW = B·A`` tem de ir junto, então as linhas de ``B`` de q e k
      recebem a mesma permutação (``A`` age nas entradas, que não mudam). O alvo
      ``"qkv_proj"`` (a fundida inteira) vira os três, com o mesmo ``A``.
      ``out_proj`` -> ``o_proj``; ``linear1``/``linear3``/``linear2`` ->
      ``gate_proj``/``up_proj``/``down_proj``;
    - GPT-2: o ``qkv_proj`` é o ``c_attn`` (um ``Conv1D``, peso transposto:
      ``fan_in_fan_out=True``), que recebe **um** adaptador. Com fatias, os ``A`` são
      empilhados e os ``B`` postos em blocos: o posto vira ``r`` × número de fatias, com
      a mesma escala. ``out_proj`` -> ``attn.c_proj``, ``linear1`` -> ``mlp.c_fc``,
      ``linear2`` -> ``mlp.c_proj``.

    Um ``GPTClassifier`` dá um ``PeftModelForSequenceClassification`` (``score`` em
    ``modules_to_save``, treinável como no tpt); um ``GPT``, um
    ``PeftModelForCausalLM``. ``model`` não pode estar fundido (``unmerge_lora`` antes).
    """
    if not isinstance(model, (GPT, GPTClassifier)):
        raise TypeError(
            f"to_peft espera um tpt.GPT ou tpt.GPTClassifier com LoRA; recebi "
            f"{type(model).__name__}"
        )
    _refuse_mean_pooling(model, "to_peft")
    lora = [m for m in model.modules() if isinstance(m, LoRALinear)]
    if not lora:
        raise ValueError("to_peft: o modelo não tem LoRA (use tpt.add_lora antes)")
    if any(m.merged for m in lora):
        raise ValueError(
            "to_peft: a LoRA está fundida nos pesos (merge_lora); chame tpt.unmerge_lora(model) "
            "antes, ou exporte o modelo fundido com to_hf"
        )
    peft = _peft()
    classifier = isinstance(model, GPTClassifier)
    body = model.gpt if classifier else model
    family = hf_family(body.config)
    adapters = _peft_adapters(body, family)
    dropouts = {ad.dropout for ad in adapters.values()}
    if len(dropouts) > 1:
        raise ValueError(
            f"to_peft: os LoRALinear têm dropouts diferentes {sorted(dropouts)}; o peft usa um só"
        )
    first = next(iter(adapters.values()))
    rank, alpha = first.a.shape[0], first.scaling * first.a.shape[0]
    rank_pattern, alpha_pattern = {}, {}
    for name, ad in adapters.items():  # posto e escala diferentes (fatias no c_attn, from_peft)
        r = ad.a.shape[0]
        if r != rank or ad.scaling != first.scaling:
            key = "^" + re.escape(name)
            rank_pattern[key], alpha_pattern[key] = r, ad.scaling * r
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=_target_modules(list(adapters), family, body.config.num_layers),
        lora_dropout=dropouts.pop(),
        fan_in_fan_out=family == "gpt2",
        bias="none",
        rank_pattern=rank_pattern,
        alpha_pattern=alpha_pattern,
        task_type="SEQ_CLS" if classifier else "CAUSAL_LM",
        modules_to_save=["score"] if classifier else None,
    )
    hf_model = _to_hf(model)
    with warnings.catch_warnings():  # aviso interno do peft ao transformers, sem ação nossa
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        peft_model = peft.get_peft_model(hf_model, config)
    inner = peft_model.get_base_model()
    for name, ad in adapters.items():
        layer = inner.get_submodule(name)
        if abs(layer.scaling["default"] - ad.scaling) > 1e-12 * ad.scaling:
            raise RuntimeError(  # pragma: no cover - proteção contra mudanças no peft
                f"{name}: o peft escolheu a escala {layer.scaling['default']}, não {ad.scaling}"
            )
        layer.lora_A["default"].weight.copy_(ad.a)
        layer.lora_B["default"].weight.copy_(ad.b)
    if classifier:
        trainable = model.score.weight.requires_grad
        for p in peft_model.base_model.model.score.parameters():
            p.requires_grad_(trainable)
    peft_model.train(model.training)
    return peft_model


def _peft_layers(inner: nn.Module, adapter: str) -> dict[str, nn.Module]:
    """Os módulos com LoRA do ``peft`` (``LoraLayer``), por nome no modelo do HF."""
    from peft.tuners.lora import LoraLayer

    return {
        name: module
        for name, module in inner.named_modules()
        if isinstance(module, LoraLayer)
        and (adapter in module.lora_A or adapter in getattr(module, "lora_embedding_A", {}))
    }


@torch.no_grad()
def from_peft(peft_model: PeftModel) -> GPT | GPTClassifier:
    """O inverso de ``to_peft``: um ``tpt.GPT``/``GPTClassifier`` com a mesma LoRA.

    Lê o adaptador ativo (um só) de um ``PeftModel`` sobre um GPT-2 ou Llama (causal ou
    de classificação), sem alterar ``peft_model``. O modelo de base vem de ``from_hf``;
    cada adaptador vira um ``LoRALinear`` (no Llama, ``q_proj``/``k_proj``/``v_proj``
    viram fatias do ``qkv_proj``, com a permutação do RoPE desfeita em ``B``). Como em
    ``add_lora``, só os ``A``, ``B`` (e a ``score`` de um classificador) ficam treináveis.
    Adaptadores sem equivalente (DoRA, viés na LoRA, ``rslora`` com escala diferente em
    fatias do mesmo ``qkv_proj``, módulos que o tpt não adapta) levantam ``ValueError``.
    """
    peft = _peft()
    if not isinstance(peft_model, peft.PeftModel):
        raise TypeError(f"from_peft espera um peft.PeftModel; recebi {type(peft_model).__name__}")
    adapter = peft_model.active_adapter
    if len(peft_model.peft_config) != 1:
        raise ValueError(
            f"from_peft lê um adaptador só; este modelo tem {sorted(peft_model.peft_config)}"
        )
    config = peft_model.peft_config[adapter]
    if config.peft_type != peft.PeftType.LORA:
        raise ValueError(f"peft_type={config.peft_type}: from_peft só lê LoRA")
    if getattr(config, "use_dora", False) or getattr(config, "lora_bias", False):
        raise ValueError("use_dora=True ou lora_bias=True: o LoRALinear do tpt não tem equivalente")
    if config.bias != "none":
        raise ValueError(f"bias={config.bias!r}: o tpt não treina vieses junto com a LoRA")
    plain = copy.deepcopy(peft_model).unload()  # o modelo do HF sem os adaptadores
    model = from_hf(plain)
    classifier = isinstance(model, GPTClassifier)
    body = model.gpt if classifier else model
    family = hf_family(body.config)
    layers = _peft_layers(peft_model.get_base_model(), adapter)
    _attach_peft(body, family, layers, adapter)
    _freeze(model, ("score",) if classifier else ())
    model.train(peft_model.training)
    return model


def _peft_pair(layer: nn.Module, adapter: str) -> tuple[Tensor, Tensor, float, float]:
    dropout = layer.lora_dropout[adapter]
    p = dropout.p if isinstance(dropout, nn.Dropout) else 0.0
    a = layer.lora_A[adapter].weight.detach()  # (r, d_in)
    b = layer.lora_B[adapter].weight.detach()  # (d_out, r)
    return a, b, float(layer.scaling[adapter]), p


def _attach_peft(body: GPT, family: str, layers: dict[str, nn.Module], adapter: str) -> None:
    """Põe no ``body`` um ``LoRALinear`` por adaptador de ``layers`` (nomes do HF)."""
    c = body.config
    kv_heads = c.num_kv_heads or c.num_heads
    names = {v: k for k, v in _PEFT_NAMES[family].items()}  # módulo do HF -> alvo do tpt
    pattern = re.compile(re.escape(_LAYER_PREFIX[family]).replace(r"\{i\}", r"(\d+)") + "(.+)")
    qkv: dict[int, dict[str, tuple]] = {}
    for hf_name, layer in layers.items():
        match = pattern.fullmatch(hf_name)
        if match is None or int(match.group(1)) >= len(body.layers):
            raise ValueError(f"o adaptador em {hf_name!r} não tem equivalente no tpt")
        i, local = int(match.group(1)), match.group(2)
        block = body.layers[i]
        a, b, scaling, p = _peft_pair(layer, adapter)
        r = a.shape[0]
        if family == "llama" and local in _LLAMA_QKV:
            qkv.setdefault(i, {})[local[len("self_attn.")]] = (a, b, scaling, p)
            continue
        if family == "gpt2" and local == "attn.c_attn":
            target, parent, attr = "qkv_proj", block.self_attn, "qkv_proj"
        elif local in names:
            target = names[local]
            parent = block.self_attn if target == "out_proj" else block.ffn
            attr = target
        else:
            raise ValueError(f"o adaptador em {hf_name!r} não tem equivalente no tpt")
        linear = getattr(parent, attr)
        slices = {"qkv_proj": (0, linear.out_features)} if target == "qkv_proj" else None
        new = LoRALinear.from_linear(linear, r, scaling * r, slices=slices, dropout=p)
        key = next(iter(new.slices))
        new.lora_A[key].copy_(a)
        new.lora_B[key].copy_(b)
        setattr(parent, attr, new)
    perm = rope_permutation(c.embed_dim // c.num_heads) if family == "llama" else None
    for i, parts in qkv.items():
        attn = body.layers[i].self_attn
        settings = {(x[0].shape[0], x[2], x[3]) for x in parts.values()}
        if len(settings) > 1:
            raise ValueError(
                f"camada {i}: q_proj, k_proj e v_proj com posto, escala ou dropout diferentes "
                "não cabem num só LoRALinear do tpt (um posto e uma escala por qkv_proj)"
            )
        r, scaling, p = settings.pop()
        d, kv = attn.embed_dim, attn.kv_dim
        spans = {"q": (0, d), "k": (d, d + kv), "v": (d + kv, d + 2 * kv)}
        slices = {name: spans[name] for name in "qkv" if name in parts}
        new = LoRALinear.from_linear(attn.qkv_proj, r, scaling * r, slices=slices, dropout=p)
        inverse = torch.argsort(perm)
        for name in slices:
            a, b = parts[name][0], parts[name][1]
            if name != "v":  # desfaz a permutação do RoPE nas linhas de B
                b = _permute_heads(b, c.num_heads if name == "q" else kv_heads, inverse)
            new.lora_A[name].copy_(a)
            new.lora_B[name].copy_(b)
        attn.qkv_proj = new


# --------------------------------------------------------------------------------------
# Tokenizador: o CharTokenizer do tpt como um tokenizador do transformers
# --------------------------------------------------------------------------------------
def to_hf_tokenizer(tokenizer: BaseTokenizer) -> PreTrainedTokenizerFast:
    """Um ``PreTrainedTokenizerFast`` que dá os mesmos ids que um ``CharTokenizer`` do tpt.

    Um caractere por token (vocabulário de palavras inteiras, ``WordLevel``, depois de
    quebrar o texto em caracteres), a mesma normalização Unicode, ``<unk>`` para o que
    não está no vocabulário e os quatro especiais com os mesmos ids. Sem ``<bos>``
    automático, como ``tokenizer.encode``. Salva com ``save_pretrained`` e volta com
    ``AutoTokenizer.from_pretrained`` (só o arquivo ``tokenizer.json``, sem código nosso),
    então serve para ``pipeline("text-generation")``.
    """
    from tpt.tokenizer import CharTokenizer

    if not isinstance(tokenizer, CharTokenizer):
        raise TypeError(
            f"to_hf_tokenizer converte um tpt.CharTokenizer; recebi {type(tokenizer).__name__}"
        )
    transformers = _transformers()
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    backend = Tokenizer(models.WordLevel(vocab=dict(tokenizer.stoi), unk_token="<unk>"))
    if tokenizer.normalization is not None:
        backend.normalizer = getattr(normalizers, tokenizer.normalization)()
    # Cada caractere (inclusive espaço e quebra de linha) vira um pedaço isolado.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # junta os caracteres sem espaço entre eles
    roles = ("pad_token", "bos_token", "eos_token", "unk_token")
    names = dict(zip(roles, SPECIAL_TOKENS, strict=True))
    assert [tokenizer.stoi[t] for t in SPECIAL_TOKENS] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, clean_up_tokenization_spaces=False, **names
    )
