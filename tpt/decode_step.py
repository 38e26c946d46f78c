"""O passo enxuto da geração: um token novo pelo ``GPT``, sem a maquinaria de ``nn.Module``.

Ver notebooks/09_geracao.ipynb (cache de chaves e valores).

Com cache, cada passo da geração leva **um** token por todas as camadas. As contas são
pequenas (vetores ``(1, 1, d)``), e o tempo do Python em volta delas pesa: cada chamada
de módulo passa por ``nn.Module.__call__``, cada camada confere formas, monta máscaras e
escolhe entre caminhos que, nesse passo, são sempre os mesmos. O passo que
``lean_decode_step`` prepara faz as **mesmas** operações do ``GPT.forward`` (as mesmas
funções do PyTorch, na mesma ordem, sobre os mesmos parâmetros), chamando
``F.embedding``, ``F.layer_norm``, ``F.linear`` e ``F.scaled_dot_product_attention``
direto: os logits são idênticos, bit a bit.

Só vale quando nada de fora observa os módulos: ``lean_step_supported`` confere que o
modelo está em avaliação, que cada peça é exatamente a do tpt (nada trocado nem
sobrescrito) e que não há ganchos (hooks) registrados, nem globais nem em módulo algum.
Se não, ``tpt.generate`` segue pelo ``GPT.forward`` de sempre.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import module as _module

from tpt.attention import MultiHeadAttention
from tpt.feedforward import FeedForward
from tpt.kv_cache import KVCache
from tpt.layers import EncoderLayer
from tpt.model import GPT
from tpt.norms import _F_RMS_NORM, LayerNorm, RMSNorm
from tpt.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    apply_rope,
)

__all__ = ["lean_decode_step", "lean_step_supported"]

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_NORMS = (LayerNorm, RMSNorm)
# Os métodos das classes que o passo enxuto refaz, como estavam ao importar: se alguém
# trocar um deles na classe (para espiar ou mudar uma conta), o passo enxuto não vale.
_METHODS = {
    cls: {name: fn for name, fn in vars(cls).items() if inspect.isfunction(fn)}
    for cls in (GPT, EncoderLayer, MultiHeadAttention, FeedForward, LayerNorm, RMSNorm,
                LearnedPositionalEmbedding, SinusoidalPositionalEncoding, RotaryEmbedding)
}


def _untouched(module: nn.Module, kinds: tuple[type, ...]) -> bool:
    """``module`` é exatamente de um dos tipos (sem subclasse) e sem ``forward`` trocado."""
    return type(module) in kinds and "forward" not in vars(module)


def lean_step_supported(model: nn.Module, cache: object) -> bool:
    """``True`` se o passo de ``lean_decode_step`` dá os logits de ``model(idx, cache=cache)``.

    Exige um ``GPT`` em avaliação, sem mistura de especialistas, com a atenção pelo
    caminho rápido (``fused=True``), um ``KVCache`` dinâmico por camada, nenhuma peça
    trocada por outra classe (nem as lineares), nenhum método trocado e nenhum gancho
    registrado (quem registra um gancho quer ver cada chamada de módulo).
    """
    if type(model) is not GPT or "forward" in vars(model) or model.training:
        return False
    for cls, methods in _METHODS.items():
        if any(vars(cls).get(name) is not fn for name, fn in methods.items()):
            return False
    c = model.config
    if c.num_experts is not None or not c.fused:
        return False
    if not (isinstance(cache, list) and len(cache) == len(model.layers)):
        return False
    if any(type(kv) is not KVCache or kv.static for kv in cache):
        return False
    if any(getattr(_module, name, None) for name in _GLOBAL_HOOKS):
        return False
    for module in model.modules():
        if any(getattr(module, name, None) for name in _HOOK_DICTS):
            return False
    positional = model.positional
    allowed_positional = (LearnedPositionalEmbedding, SinusoidalPositionalEncoding)
    if positional is not None and not _untouched(positional, allowed_positional):
        return False
    if model.norm is not None and not _untouched(model.norm, _NORMS):
        return False
    for layer in model.layers:
        parts = (
            (layer, (EncoderLayer,)),
            (layer.self_attn, (MultiHeadAttention,)),
            (layer.ffn, (FeedForward,)),
            (layer.norm1, _NORMS),
            (layer.norm2, _NORMS),
        )
        if not all(_untouched(m, kinds) for m, kinds in parts) or not layer.self_attn.fused:
            return False
        # Lineares trocadas (por exemplo pela LoRALinear de tpt.lora, que soma B·A no
        # forward) fazem contas que o passo enxuto, que lê só o .weight, não faria.
        linears = [layer.self_attn.qkv_proj, layer.self_attn.out_proj]
        linears += [getattr(layer.ffn, n) for n in ("linear1", "linear2", "linear3")
                    if hasattr(layer.ffn, n)]
        if any(type(m) is not nn.Linear for m in linears):
            return False
    return True


Step = Callable[[Tensor, list[KVCache]], Tensor]


def _norm_fn(norm: nn.Module) -> Callable[[Tensor], Tensor]:
    """A conta de ``norm.forward`` sem a conferência de formas: ``(b, t, d) -> (b, t, d)``."""
    if type(norm) is LayerNorm and norm.fused:
        shape, weight, bias, eps = (norm.normalized_shape,), norm.weight, norm.bias, norm.eps
        return lambda x: F.layer_norm(x, shape, weight, bias, eps)
    if type(norm) is RMSNorm and norm.fused and _F_RMS_NORM is not None:
        shape, weight, eps = (norm.dim,), norm.weight, norm.eps
        return lambda x: _F_RMS_NORM(x, shape, weight, eps)
    return norm.forward  # passo a passo (fused=False): a própria fórmula do módulo


def _attention_fn(attn: MultiHeadAttention) -> Callable[[Tensor, KVCache], Tensor]:
    """Autoatenção de um token novo ``(b, 1, d)`` sobre o cache; devolve ``(b, 1, d)``."""
    d, h, h_kv, d_h = attn.embed_dim, attn.num_heads, attn.num_kv_heads, attn.head_dim
    sizes = [d, attn.kv_dim, attn.kv_dim]
    qkv_w, qkv_b = attn.qkv_proj.weight, attn.qkv_proj.bias
    out_w, out_b = attn.out_proj.weight, attn.out_proj.bias
    group = h // h_kv
    rope, alibi = attn.rope, attn.positional == "alibi"

    def attention(x: Tensor, cache: KVCache) -> Tensor:
        b, t = x.shape[:2]
        q, k, v = F.linear(x, qkv_w, qkv_b).split(sizes, dim=-1)  # passo 1
        q = q.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        k = k.view(b, t, h_kv, d_h).transpose(1, 2)  # (b, h_kv, t, d_h)
        v = v.view(b, t, h_kv, d_h).transpose(1, 2)  # (b, h_kv, t, d_h)
        if rope is not None:
            offset = len(cache)
            cos = rope.cos[offset : offset + t].to(dtype=q.dtype)  # (t, d_h)
            sin = rope.sin[offset : offset + t].to(dtype=q.dtype)  # (t, d_h)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = cache.update(k, v)  # (b, h_kv, s, d_h)
        if group > 1:  # GQA/MQA
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        mask = None
        if alibi:
            mask = alibi_bias(h, t, k.shape[-2], device=q.device, dtype=q.dtype)[None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        out = out.transpose(1, 2).reshape(b, t, d)  # (b, t, d)
        return F.linear(out, out_w, out_b)

    return attention


def _feedforward_fn(ffn: FeedForward) -> Callable[[Tensor], Tensor]:
    """A conta de ``FeedForward.forward`` em avaliação: ``(b, t, d) -> (b, t, d)``."""
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    activation = ffn.activation
    if activation == "swiglu":
        w3, b3 = ffn.linear3.weight, ffn.linear3.bias
        return lambda x: F.linear(F.silu(F.linear(x, w1, b1)) * F.linear(x, w3, b3), w2, b2)
    if activation == "relu":
        return lambda x: F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
    approximate = "tanh" if activation == "gelu_tanh" else "none"
    return lambda x: F.linear(F.gelu(F.linear(x, w1, b1), approximate=approximate), w2, b2)


def lean_decode_step(model: nn.Module, cache: object) -> Step | None:
    """Prepara o passo enxuto de ``model``, ou ``None`` se ``lean_step_supported`` não vale.

    O passo devolvido, ``step(idx (b, 1), cache) -> logits (b, V)``, é igual a
    ``model(idx, cache=cache, validate=False)[:, -1, :]`` (e enche o cache do mesmo
    jeito). Ele lê os parâmetros do próprio modelo (sem cópia), reunidos uma vez aqui:
    serve enquanto os pesos não mudam, ou seja, durante uma chamada de ``tpt.generate``.
    Um token só por passo: a consulta nova vê todas as chaves, não há máscara causal.
    """
    if not lean_step_supported(model, cache):
        return None
    c = model.config
    emb = model.embedding
    table = emb.embedding.weight  # (V, d)
    scale = math.sqrt(emb.embed_dim) if emb.scale else None
    positional = model.positional
    if type(positional) is LearnedPositionalEmbedding:
        positions = positional.embedding.weight  # (max_len, d)
    elif type(positional) is SinusoidalPositionalEncoding:
        positions = positional.pe  # (max_len, d)
    else:
        positions = None  # RoPE/ALiBi: a posição entra na atenção
    layers = [
        (
            layer.norm_first,
            _norm_fn(layer.norm1),
            _attention_fn(layer.self_attn),
            _norm_fn(layer.norm2),
            _feedforward_fn(layer.ffn),
        )
        for layer in model.layers
    ]
    final_norm = None if model.norm is None else _norm_fn(model.norm)
    head_scale = c.embed_dim**-0.5 if c.head_scale else None
    head_w, head_b = model.lm_head.weight, model.lm_head.bias

    def step(idx: Tensor, cache: list[KVCache]) -> Tensor:
        t = idx.shape[1]
        x = F.embedding(idx, table)  # (b, t, d)
        if scale is not None:
            x = x * scale
        if positions is not None:
            offset = len(cache[0])
            x = x + positions[offset : offset + t].to(dtype=x.dtype)[None, :, :]
        for layer, kv in zip(layers, cache, strict=True):
            norm_first, norm1, attention, norm2, feedforward = layer
            if norm_first:
                x = x + attention(norm1(x), kv)
                x = x + feedforward(norm2(x))
            else:
                x = norm1(x + attention(x, kv))
                x = norm2(x + feedforward(x))
        if final_norm is not None:
            x = final_norm(x)
        if head_scale is not None:
            x = x * head_scale
        return F.linear(x, head_w, head_b)[:, -1, :]  # (b, V)

    return step
