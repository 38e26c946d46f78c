"""Camadas do Transformer: ``EncoderLayer`` e ``DecoderLayer``.

Ver notebooks/07_blocos.ipynb (camada do encoder) e notebooks/08_encoder_decoder.ipynb
(camada do decoder).

Cada subcamada (atenção ou FFN) vem embrulhada numa conexão residual e numa
normalização. A residual soma a ENTRADA da subcamada à sua saída. Há duas ordens:

- pós-normalização (artigo original, padrão aqui): ``x = norm(x + dropout(subcamada(x)))``;
- pré-normalização (modelos modernos, ``norm_first=True``): ``x = x + dropout(subcamada(norm(x)))``.

A camada do encoder tem DUAS subcamadas (autoatenção e FFN); a do decoder tem TRÊS
(autoatenção mascarada, atenção cruzada e FFN). Na atenção cruzada as CONSULTAS vêm do
decoder e as CHAVES/VALORES vêm da memória do encoder; a residual soma o fluxo do
decoder.

Máscaras seguem a convenção única do tpt: booleanas, ``True`` = BLOQUEADO (ver
``tpt/masks.py``).
"""

from __future__ import annotations

from torch import Tensor, nn

from tpt.attention import MultiHeadAttention
from tpt.dropout import apply_dropout
from tpt.feedforward import FeedForward, activation_from_torch, check_activation
from tpt.kv_cache import KVCache
from tpt.norms import _TORCH_RMSNORM, NORMS, make_norm, norm_from_torch

__all__ = ["DecoderLayer", "EncoderLayer"]

POSITIONALS = (None, "rope", "alibi")


def _check_layer_args(
    embed_dim: int, num_heads: int, dropout: float, activation: str, norm: str, positional
) -> None:
    """Validações comuns às duas camadas, com mensagens que citam o valor recebido."""
    for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}={value!r} deve ser um inteiro positivo")
    if embed_dim % num_heads != 0:
        raise ValueError(f"embed_dim={embed_dim} não é divisível por num_heads={num_heads}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout={dropout} deve estar em [0, 1)")
    check_activation(activation)
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r} desconhecida; opções válidas: {', '.join(NORMS)}")
    if positional not in POSITIONALS:
        raise ValueError(
            f"positional={positional!r} desconhecido na atenção; opções válidas: "
            "None, 'rope', 'alibi'"
        )


def _check_stream(x: Tensor, embed_dim: int, name: str) -> None:
    """Confere que ``x`` tem forma ``(b, t, d)`` com ``d = embed_dim``."""
    if x.dim() != 3 or x.shape[-1] != embed_dim:
        raise ValueError(
            f"{name} deve ter forma (b, t, {embed_dim}) (lote primeiro); "
            f"recebi forma {tuple(x.shape)}"
        )


def _torch_layer_settings(layer: nn.Module) -> dict:
    """Lê de uma camada do ``nn.Transformer`` os argumentos equivalentes do tpt."""
    norm1 = layer.norm1
    if isinstance(norm1, nn.LayerNorm):
        norm = "layernorm"
    elif _TORCH_RMSNORM is not None and isinstance(norm1, _TORCH_RMSNORM):
        norm = "rmsnorm"
    else:
        raise TypeError(f"norm1 do tipo {type(norm1).__name__} não é suportada")
    return {
        "embed_dim": layer.self_attn.embed_dim,
        "num_heads": layer.self_attn.num_heads,
        "ff_dim": layer.linear1.out_features,
        "dropout": layer.dropout1.p,
        "activation": activation_from_torch(layer),
        "norm_first": bool(layer.norm_first),
        "norm": norm,
        "eps": norm1.eps,
        "bias": layer.linear1.bias is not None,
    }


def _copy_from_torch(ours: nn.Module, layer: nn.Module, attn_names: dict[str, str]) -> None:
    """Copia atenções, FFN e normalizações de ``layer`` (PyTorch) para ``ours`` (tpt).

    ``attn_names`` liga o nome no tpt ao nome no PyTorch, por exemplo
    ``{"cross_attn": "multihead_attn"}``.
    """
    ref = layer.linear1.weight
    for ours_name, torch_name in attn_names.items():
        setattr(ours, ours_name, MultiHeadAttention.from_torch(getattr(layer, torch_name)))
    ours.ffn = FeedForward.from_torch(layer)
    for i in range(1, len(attn_names) + 2):  # norm1, norm2 (e norm3 no decoder)
        setattr(ours, f"norm{i}", norm_from_torch(getattr(layer, f"norm{i}")))
    ours.to(device=ref.device, dtype=ref.dtype)
    ours.train(layer.training)  # mesmo modo (treino/avaliação) da camada original


class EncoderLayer(nn.Module):
    """Camada do encoder: autoatenção + FFN, cada uma com residual e normalização.

    Args:
        embed_dim: largura ``d`` dos tokens.
        num_heads: número de cabeças de atenção.
        ff_dim: largura interna da FFN (padrão ``4 * embed_dim``).
        dropout: dropout da atenção, da FFN e das residuais.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` ou ``"swiglu"``.
        norm_first: ``False`` = pós-normalização (artigo); ``True`` = pré-normalização.
        norm: ``"layernorm"`` ou ``"rmsnorm"``.
        eps: ``eps`` das normalizações.
        num_kv_heads: cabeças de chave/valor (GQA/MQA); padrão ``num_heads``.
        bias: viés nas lineares e na LayerNorm.
        fused: usar ``F.scaled_dot_product_attention`` quando possível.
        positional: ``None``, ``"rope"`` ou ``"alibi"`` (posição dentro da atenção).
        max_len: maior posição suportada por RoPE/ALiBi.
        rope_theta: base das frequências do RoPE (10.000 no artigo; 500.000 no Llama 3).

    Submódulos: ``self_attn``, ``ffn``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``.
    Atributo ``attn_weights``: pesos por cabeça ``(b, h, t, s)`` da última chamada com
    ``need_weights=True`` (``None`` caso contrário).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int | None = None,
        *,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        num_kv_heads: int | None = None,
        bias: bool = True,
        fused: bool = True,
        positional: str | None = None,
        max_len: int = 4096,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        _check_layer_args(embed_dim, num_heads, dropout, activation, norm, positional)
        self.embed_dim = embed_dim
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(
            embed_dim,
            num_heads,
            num_kv_heads,
            dropout=dropout,
            bias=bias,
            fused=fused,
            positional=positional,
            max_len=max_len,
            rope_theta=rope_theta,
        )
        self.ffn = FeedForward(embed_dim, ff_dim, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, embed_dim, eps, bias=bias)
        self.norm2 = make_norm(norm, embed_dim, eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.attn_weights: Tensor | None = None

    def _sa_block(
        self, x: Tensor, attn_mask, key_padding_mask, is_causal, need_weights, cache, validate
    ):
        out, weights = self.self_attn(
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            cache=cache,
            validate=validate,
        )
        if need_weights or self.attn_weights is not None:  # evita um __setattr__ por token
            self.attn_weights = weights if need_weights else None
        return apply_dropout(self.dropout1, out)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        validate: bool = True,
    ) -> Tensor:
        """Aplica a camada: ``(b, t, d) -> (b, t, d)``.

        ``attn_mask`` ``(t, s)``/``(b, t, s)``/``(b, h, t, s)`` e ``key_padding_mask``
        ``(b, s)`` são booleanas com ``True`` = bloqueado. ``is_causal=True`` impede cada
        token de ver os seguintes (bloco de um GPT). Com ``cache`` (um ``KVCache``), ``x``
        traz só os tokens novos e ``s = len(cache) + t``. ``validate=False`` pula as
        conferências de formas (a geração, token a token, já as fez no prompt).
        """
        if validate:
            _check_stream(x, self.embed_dim, "x")
        sa = (attn_mask, key_padding_mask, is_causal, need_weights, cache, validate)
        if self.norm_first:  # pré-normalização
            x = x + self._sa_block(self.norm1(x), *sa)
            x = x + apply_dropout(self.dropout2, self.ffn(self.norm2(x)))
        else:  # pós-normalização (artigo)
            x = self.norm1(x + self._sa_block(x, *sa))
            x = self.norm2(x + apply_dropout(self.dropout2, self.ffn(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Cria uma ``EncoderLayer`` igual a um ``nn.TransformerEncoderLayer``.

        Lê tamanhos, ``norm_first``, ReLU ou GELU, ``eps``, dropout e ``bias`` e copia os
        pesos (mantendo dtype e device). O tpt usa sempre o lote primeiro: se ``layer`` tiver
        ``batch_first=False``, os pesos servem igual, mas a entrada é ``(b, t, d)``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"esperava um nn.TransformerEncoderLayer; recebi {type(layer).__name__}"
            )
        new = cls(**_torch_layer_settings(layer))
        _copy_from_torch(new, layer, {"self_attn": "self_attn"})
        return new


class DecoderLayer(nn.Module):
    """Camada do decoder: autoatenção mascarada, atenção cruzada e FFN.

    Mesmos argumentos de ``EncoderLayer``. RoPE/ALiBi (``positional``) valem só para a
    autoatenção; a atenção cruzada não usa posição (a memória já a carrega).

    Submódulos: ``self_attn``, ``cross_attn``, ``ffn``, ``norm1``, ``norm2``, ``norm3``,
    ``dropout1``, ``dropout2``, ``dropout3``. Atributos ``self_attn_weights`` ``(b, h, t,
    t)`` e ``cross_attn_weights`` ``(b, h, t, s_enc)``, preenchidos quando
    ``need_weights=True``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int | None = None,
        *,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        num_kv_heads: int | None = None,
        bias: bool = True,
        fused: bool = True,
        positional: str | None = None,
        max_len: int = 4096,
    ) -> None:
        super().__init__()
        _check_layer_args(embed_dim, num_heads, dropout, activation, norm, positional)
        self.embed_dim = embed_dim
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(
            embed_dim,
            num_heads,
            num_kv_heads,
            dropout=dropout,
            bias=bias,
            fused=fused,
            positional=positional,
            max_len=max_len,
        )
        self.cross_attn = MultiHeadAttention(
            embed_dim, num_heads, num_kv_heads, dropout=dropout, bias=bias, fused=fused
        )
        self.ffn = FeedForward(embed_dim, ff_dim, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, embed_dim, eps, bias=bias)
        self.norm2 = make_norm(norm, embed_dim, eps, bias=bias)
        self.norm3 = make_norm(norm, embed_dim, eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.self_attn_weights: Tensor | None = None
        self.cross_attn_weights: Tensor | None = None

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal, need_weights, cache):
        out, weights = self.self_attn(
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            cache=cache,
        )
        self.self_attn_weights = weights if need_weights else None
        return apply_dropout(self.dropout1, out)

    def _ca_block(self, x, memory, memory_mask, memory_key_padding_mask, need_weights, cache):
        # Consultas do decoder (x); chaves e valores da memória do encoder.
        out, weights = self.cross_attn(
            x,
            memory,
            memory,
            attn_mask=memory_mask,
            key_padding_mask=memory_key_padding_mask,
            need_weights=need_weights,
            cache=cache,
        )
        self.cross_attn_weights = weights if need_weights else None
        return apply_dropout(self.dropout2, out)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
    ) -> Tensor:
        """Aplica a camada: ``x (b, t, d)`` e ``memory (b, s_enc, d)`` -> ``(b, t, d)``.

        ``attn_mask``/``key_padding_mask``/``is_causal`` valem para a autoatenção;
        ``memory_mask`` ``(t, s_enc)`` e ``memory_key_padding_mask`` ``(b, s_enc)`` para a
        atenção cruzada. ``cache = (KVCache(), KVCache(static=True))``: o primeiro guarda
        as chaves/valores da autoatenção; o segundo é preenchido uma vez com a memória
        projetada e reaproveitado a cada passo.
        """
        _check_stream(x, self.embed_dim, "x")
        _check_stream(memory, self.embed_dim, "memory")
        if memory.shape[0] != x.shape[0]:
            raise ValueError(f"memory tem lote b={memory.shape[0]}, mas x tem b={x.shape[0]}")
        if cache is None:
            self_cache = cross_cache = None
        else:
            if not (isinstance(cache, (tuple, list)) and len(cache) == 2):
                raise TypeError(
                    "o cache de uma DecoderLayer é um par (KVCache(), KVCache(static=True)); "
                    f"recebi {type(cache).__name__}"
                )
            self_cache, cross_cache = cache
        sa = (attn_mask, key_padding_mask, is_causal, need_weights, self_cache)
        ca = (memory, memory_mask, memory_key_padding_mask, need_weights, cross_cache)
        if self.norm_first:  # pré-normalização
            x = x + self._sa_block(self.norm1(x), *sa)
            x = x + self._ca_block(self.norm2(x), *ca)
            x = x + apply_dropout(self.dropout3, self.ffn(self.norm3(x)))
        else:  # pós-normalização (artigo)
            x = self.norm1(x + self._sa_block(x, *sa))
            x = self.norm2(x + self._ca_block(x, *ca))
            x = self.norm3(x + apply_dropout(self.dropout3, self.ffn(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Cria uma ``DecoderLayer`` igual a um ``nn.TransformerDecoderLayer``.

        ``layer.multihead_attn`` (a atenção cruzada do PyTorch) vira ``cross_attn``.
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(
                f"esperava um nn.TransformerDecoderLayer; recebi {type(layer).__name__}"
            )
        new = cls(**_torch_layer_settings(layer))
        _copy_from_torch(new, layer, {"self_attn": "self_attn", "cross_attn": "multihead_attn"})
        return new
