"""Pilhas e modelos completos: ``Encoder``, ``Decoder``, ``Transformer`` e ``GPT``.

Ver notebooks/08_encoder_decoder.ipynb (``Encoder``, ``Decoder``, ``Transformer``),
notebooks/09_geracao.ipynb (``GPT`` e cache de chaves e valores) e
notebooks/10_transformers_modernos.ipynb (as variantes do ``GPTConfig``).

- ``Encoder``: N camadas ``EncoderLayer``; as máscaras vão para TODAS as camadas.
- ``Decoder``: N camadas ``DecoderLayer``; cada uma lê a mesma memória do encoder.
- ``Transformer``: o modelo do artigo (seq2seq) com UM vocabulário compartilhado entre
  entrada e saída, embeddings multiplicados por ``sqrt(d)``, codificação senoidal,
  encoder, decoder e a projeção final para o vocabulário (pesos amarrados aos
  embeddings, se pedido).
- ``GPT``: só decoder. Um bloco de GPT é uma ``EncoderLayer`` com máscara causal (não
  há atenção cruzada, porque não há encoder).

A normalização final depois da pilha pertence aos modelos com pré-normalização: por isso
``final_norm`` tem como padrão ``norm_first``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tpt.dropout import apply_dropout
from tpt.embedding import TokenEmbedding
from tpt.feedforward import ACTIVATIONS
from tpt.kv_cache import KVCache
from tpt.layers import DecoderLayer, EncoderLayer, _torch_layer_settings
from tpt.moe import MoEFeedForward
from tpt.norms import NORMS, make_norm, norm_from_torch
from tpt.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

__all__ = [
    "GPT_POSITIONALS",
    "Decoder",
    "Encoder",
    "GPT",
    "GPTConfig",
    "Transformer",
    "TransformerConfig",
]

#: Codificações posicionais aceitas pelo ``GPTConfig``.
GPT_POSITIONALS = ("learned", "sinusoidal", "rope", "alibi")


# --------------------------------------------------------------------------------------
# Pilhas de camadas
# --------------------------------------------------------------------------------------
def _check_num_layers(num_layers: int) -> None:
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers={num_layers!r} deve ser um inteiro >= 1")


def _check_cache_list(cache, num_layers: int, what: str) -> None:
    if not isinstance(cache, (list, tuple)) or len(cache) != num_layers:
        got = len(cache) if isinstance(cache, (list, tuple)) else type(cache).__name__
        raise ValueError(
            f"cache deve ser uma lista com um {what} por camada ({num_layers} camadas); "
            f"recebi {got}. Use model.new_cache()."
        )


class _LayerStack(nn.Module):
    """Base comum de ``Encoder`` e ``Decoder``: N camadas iguais + norma final opcional."""

    layer_cls: type = EncoderLayer

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int | None = None,
        *,
        num_layers: int = 6,
        final_norm: bool | None = None,
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
        _check_num_layers(num_layers)
        layer_kwargs = dict(
            dropout=dropout,
            activation=activation,
            norm_first=norm_first,
            norm=norm,
            eps=eps,
            num_kv_heads=num_kv_heads,
            bias=bias,
            fused=fused,
            positional=positional,
            max_len=max_len,
        )
        self.embed_dim = embed_dim
        self.layers = nn.ModuleList(
            self.layer_cls(embed_dim, num_heads, ff_dim, **layer_kwargs) for _ in range(num_layers)
        )
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, embed_dim, eps, bias=bias) if final_norm else None

    @classmethod
    def _from_torch_stack(cls, stack: nn.Module, torch_cls: type):
        if not isinstance(stack, torch_cls):
            raise TypeError(f"esperava um nn.{torch_cls.__name__}; recebi {type(stack).__name__}")
        first = stack.layers[0]
        new = cls(
            **_torch_layer_settings(first),
            num_layers=len(stack.layers),
            final_norm=stack.norm is not None,
        )
        new.layers = nn.ModuleList(cls.layer_cls.from_torch(layer) for layer in stack.layers)
        if stack.norm is not None:
            new.norm = norm_from_torch(stack.norm)
        ref = first.linear1.weight
        new.to(device=ref.device, dtype=ref.dtype)
        new.train(stack.training)
        return new


class Encoder(_LayerStack):
    """Pilha de ``num_layers`` camadas ``EncoderLayer`` (mais a norma final opcional).

    Os argumentos de camada (``embed_dim``, ``num_heads``, ``ff_dim``, ``dropout``,
    ``activation``, ``norm_first``, ``norm``, ``eps``, ``num_kv_heads``, ``bias``,
    ``fused``, ``positional``, ``max_len``) são os de ``EncoderLayer``.

    Args:
        num_layers: número de camadas (6 no artigo).
        final_norm: normalização depois da última camada; padrão ``norm_first``
            (pré-normalização precisa dela; pós-normalização já termina normalizada).

    Submódulos: ``layers`` (``nn.ModuleList``) e ``norm`` (``None`` sem norma final).
    Atributo ``attn_weights``: lista com os pesos ``(b, h, t, s)`` de cada camada depois
    de uma chamada com ``need_weights=True``.
    """

    layer_cls = EncoderLayer
    attn_weights: list[Tensor] | None = None  # preenchido quando need_weights=True

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: list[KVCache] | None = None,
    ) -> Tensor:
        """``(b, t, d) -> (b, t, d)``; as máscaras (True = bloqueado) vão para toda camada."""
        if cache is not None:
            _check_cache_list(cache, len(self.layers), "KVCache")
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                attn_mask=attn_mask,
                key_padding_mask=key_padding_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                cache=None if cache is None else cache[i],
            )
        self.attn_weights = [lay.attn_weights for lay in self.layers] if need_weights else None
        if self.norm is not None:
            x = self.norm(x)
        return x

    @classmethod
    def from_torch(cls, encoder: nn.TransformerEncoder) -> Encoder:
        """Copia um ``nn.TransformerEncoder``: cada camada e a norma final, se houver."""
        return cls._from_torch_stack(encoder, nn.TransformerEncoder)


class Decoder(_LayerStack):
    """Pilha de ``num_layers`` camadas ``DecoderLayer`` (mais a norma final opcional).

    Mesmos argumentos de ``Encoder``. Atributos ``self_attn_weights`` e
    ``cross_attn_weights``: listas por camada depois de ``need_weights=True``.
    """

    layer_cls = DecoderLayer
    self_attn_weights: list[Tensor] | None = None  # preenchidos quando need_weights=True
    cross_attn_weights: list[Tensor] | None = None

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
        cache: list[tuple[KVCache, KVCache]] | None = None,
    ) -> Tensor:
        """``x (b, t, d)``, ``memory (b, s_enc, d)`` -> ``(b, t, d)``.

        Todas as máscaras vão para todas as camadas. ``cache``: uma lista com um par
        ``(KVCache(), KVCache(static=True))`` por camada.
        """
        if cache is not None:
            _check_cache_list(cache, len(self.layers), "par (KVCache(), KVCache(static=True))")
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                memory,
                attn_mask=attn_mask,
                key_padding_mask=key_padding_mask,
                memory_mask=memory_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                cache=None if cache is None else cache[i],
            )
        if need_weights:
            self.self_attn_weights = [lay.self_attn_weights for lay in self.layers]
            self.cross_attn_weights = [lay.cross_attn_weights for lay in self.layers]
        else:
            self.self_attn_weights = self.cross_attn_weights = None
        if self.norm is not None:
            x = self.norm(x)
        return x

    @classmethod
    def from_torch(cls, decoder: nn.TransformerDecoder) -> Decoder:
        """Copia um ``nn.TransformerDecoder``: cada camada e a norma final, se houver."""
        return cls._from_torch_stack(decoder, nn.TransformerDecoder)


# --------------------------------------------------------------------------------------
# Validação comum aos dois modelos
# --------------------------------------------------------------------------------------
def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} deve ser um inteiro >= 1")


def _check_common_config(cfg) -> None:
    for name in ("vocab_size", "embed_dim", "num_heads", "max_len"):
        _positive_int(name, getattr(cfg, name))
    if cfg.embed_dim % cfg.num_heads != 0:
        raise ValueError(f"embed_dim={cfg.embed_dim} não é divisível por num_heads={cfg.num_heads}")
    if cfg.ff_dim is not None:
        _positive_int("ff_dim", cfg.ff_dim)
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout={cfg.dropout} deve estar em [0, 1)")
    if cfg.activation not in ACTIVATIONS:
        raise ValueError(
            f"activation={cfg.activation!r} desconhecida; opções válidas: {', '.join(ACTIVATIONS)}"
        )
    if not cfg.eps > 0:
        raise ValueError(f"eps={cfg.eps} deve ser > 0")


def _check_ids(ids: object, name: str, vocab_size: int, max_len: int, offset: int = 0) -> None:
    """Confere ids ``(b, t)`` inteiros, dentro do vocabulário e de ``max_len``."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} deve ser um torch.Tensor de ids; recebi {type(ids).__name__}")
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(
            f"{name} deve conter ids inteiros (torch.long), forma (b, t); recebi dtype {ids.dtype}"
        )
    if ids.dim() != 2:
        hint = " (para uma única sequência, use ids.unsqueeze(0))" if ids.dim() == 1 else ""
        raise ValueError(f"{name} deve ter forma (b, t); recebi forma {tuple(ids.shape)}{hint}")
    t = ids.shape[1]
    if t == 0:
        raise ValueError(f"{name} está vazio: forma {tuple(ids.shape)} (t = 0)")
    if offset + t > max_len:
        where = f"len(cache) + t = {offset} + {t} = {offset + t}" if offset else f"t = {t}"
        raise ValueError(
            f"{name} é longo demais: {where} posições, mas max_len={max_len}. "
            "Trunque a sequência ou crie o modelo com max_len maior."
        )
    low, high = torch.stack([ids.min(), ids.max()]).tolist()  # uma leitura só (na GPU, uma espera)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} contém o id {bad}, fora do vocabulário [0, {vocab_size - 1}] "
            f"(vocab_size={vocab_size})"
        )


def _init_embedding(embedding: TokenEmbedding, embed_dim: int, pad_id: int | None) -> None:
    """Embeddings N(0, 1/d): multiplicados por ``sqrt(d)``, chegam com variância 1.

    Com os pesos amarrados, a mesma escala dá logits de ordem 1 no início do treino.
    """
    weight = embedding.embedding.weight
    with torch.no_grad():
        nn.init.normal_(weight, mean=0.0, std=embed_dim**-0.5)
        if pad_id is not None:
            weight[pad_id].zero_()  # a linha de <pad> começa nula, como em nn.Embedding


class _ModelMixin:
    """Utilidades comuns aos dois modelos."""

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Número de parâmetros (pesos amarrados contam uma vez só)."""
        return sum(
            p.numel()
            for p in self.parameters()  # type: ignore[attr-defined]
            if p.requires_grad or not trainable_only
        )


# --------------------------------------------------------------------------------------
# Transformer do artigo (encoder-decoder)
# --------------------------------------------------------------------------------------
@dataclass
class TransformerConfig:
    """Hiperparâmetros do ``Transformer`` (seq2seq). ``dataclasses.asdict`` dá tipos simples.

    Campos: ``vocab_size`` (UM vocabulário para entrada e saída), ``embed_dim`` (d),
    ``num_heads``, ``num_encoder_layers``, ``num_decoder_layers``, ``ff_dim`` (padrão
    4d), ``dropout``, ``activation`` (relu, gelu, swiglu), ``norm_first`` (pré-normalização),
    ``max_len`` (maior comprimento de entrada e de saída), ``pad_id``, ``tie_weights``
    (``lm_head`` usa a matriz dos embeddings), ``eps`` e ``final_norm`` (norma depois de
    cada pilha; ``None`` = ``norm_first``; ``True`` para copiar um ``nn.Transformer``,
    que sempre tem essas normas).
    """

    vocab_size: int
    embed_dim: int = 128
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    ff_dim: int | None = None
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    max_len: int = 256
    pad_id: int = 0
    tie_weights: bool = True
    eps: float = 1e-5
    final_norm: bool | None = None

    def __post_init__(self) -> None:
        _check_common_config(self)
        _positive_int("num_encoder_layers", self.num_encoder_layers)
        _positive_int("num_decoder_layers", self.num_decoder_layers)
        if (
            isinstance(self.pad_id, bool)
            or not isinstance(self.pad_id, int)
            or not (0 <= self.pad_id < self.vocab_size)
        ):
            raise ValueError(
                f"pad_id={self.pad_id!r} deve ser um id do vocabulário [0, {self.vocab_size - 1}]"
            )
        if self.embed_dim % 2 != 0:
            raise ValueError(
                f"embed_dim={self.embed_dim} deve ser par (a codificação senoidal usa pares)"
            )


class Transformer(_ModelMixin, nn.Module):
    """O Transformer encoder-decoder do artigo, com um vocabulário compartilhado.

    ``embedding`` (``TokenEmbedding`` com escala ``sqrt(d)`` e ``padding_idx=pad_id``)
    -> ``positional`` (senoidal, com dropout) -> ``encoder`` / ``decoder`` ->
    ``lm_head`` (Linear d -> V sem viés, amarrada aos embeddings com ``tie_weights``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"esperava um TransformerConfig; recebi {type(config).__name__}")
        self.config = config
        c = config
        stack_kwargs = dict(
            dropout=c.dropout,
            activation=c.activation,
            norm_first=c.norm_first,
            eps=c.eps,
            final_norm=c.final_norm,
        )
        self.embedding = TokenEmbedding(c.vocab_size, c.embed_dim, padding_idx=c.pad_id)
        self.positional = SinusoidalPositionalEncoding(
            c.embed_dim, max_len=c.max_len, dropout=c.dropout
        )
        self.encoder = Encoder(
            c.embed_dim, c.num_heads, c.ff_dim, num_layers=c.num_encoder_layers, **stack_kwargs
        )
        self.decoder = Decoder(
            c.embed_dim, c.num_heads, c.ff_dim, num_layers=c.num_decoder_layers, **stack_kwargs
        )
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Xavier nas matrizes do encoder/decoder, como nn.Transformer faz com as suas; a
        # qkv_proj conta como as três matrizes que empilha (W_Q, W_K, W_V).
        for name, p in (*self.encoder.named_parameters(), *self.decoder.named_parameters()):
            if p.dim() < 2:
                continue
            d_kv = (p.shape[0] - p.shape[1]) // 2  # qkv_proj: d + 2 d_kv linhas
            blocks = p.split([p.shape[1], d_kv, d_kv]) if name.endswith("qkv_proj.weight") else [p]
            for block in blocks:
                nn.init.xavier_uniform_(block)
        _init_embedding(self.embedding, self.config.embed_dim, self.config.pad_id)
        if self.config.tie_weights:
            self.lm_head.weight = self.embedding.embedding.weight  # o MESMO tensor
        else:
            nn.init.normal_(self.lm_head.weight, std=self.config.embed_dim**-0.5)

    def embed(self, ids: Tensor, offset: int = 0, *, validate: bool = True) -> Tensor:
        """ids ``(b, t)`` -> embeddings multiplicados + posição ``(b, t, d)``.

        ``encode``/``decode`` conferem os ids antes e chamam com ``validate=False``.
        """
        return self.positional(self.embedding(ids, validate=validate), offset=offset)

    def _default_padding(self, ids: Tensor, mask: Tensor | None) -> Tensor | None:
        if mask is not None:
            return mask
        mask = ids == self.config.pad_id  # (b, t), True = <pad>
        return mask if bool(mask.any()) else None

    def encode(self, src: Tensor, *, src_key_padding_mask: Tensor | None = None) -> Tensor:
        """Codifica a fonte: ``src`` ``(b, s)`` -> memória ``(b, s, d)``.

        Sem máscara, ``src_key_padding_mask = (src == pad_id)``.
        """
        c = self.config
        _check_ids(src, "src", c.vocab_size, c.max_len)
        mask = self._default_padding(src, src_key_padding_mask)
        return self.encoder(self.embed(src, validate=False), key_padding_mask=mask)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: list[tuple[KVCache, KVCache]] | None = None,
        need_weights: bool = False,
    ) -> Tensor:
        """Decodifica: ``tgt`` ``(b, t)`` e ``memory`` ``(b, s, d)`` -> logits ``(b, t, V)``.

        A máscara causal é aplicada sempre. Passe ``memory_key_padding_mask`` (a mesma
        máscara de preenchimento da fonte) quando a fonte tiver ``<pad>``.

        Com ``cache`` (de ``new_cache()``), ``tgt`` traz só os tokens NOVOS: as posições
        começam em ``len(cache)`` e K/V antigos vêm do cache. Sem cache,
        ``tgt_key_padding_mask`` padrão é ``tgt == pad_id``; com cache não há padrão
        (se passada, a máscara cobre ``len(cache) + t`` posições).
        Com ``need_weights=True``, os pesos ficam em ``self.decoder.self_attn_weights`` e
        ``self.decoder.cross_attn_weights``.
        """
        c = self.config
        offset = 0
        if cache is not None:
            _check_cache_list(cache, c.num_decoder_layers, "par (KVCache(), KVCache(static=True))")
            offset = len(cache[0][0])
        _check_ids(tgt, "tgt", c.vocab_size, c.max_len, offset)
        if cache is None:
            tgt_key_padding_mask = self._default_padding(tgt, tgt_key_padding_mask)
        x = self.decoder(
            self.embed(tgt, offset, validate=False),
            memory,
            key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            is_causal=True,
            need_weights=need_weights,
            cache=cache,
        )
        return self.lm_head(x)  # (b, t, V)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        *,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """``src`` ``(b, s)`` e ``tgt`` ``(b, t)`` -> logits ``(b, t, V)`` (teacher forcing).

        ``tgt`` é a entrada do decoder (``<bos>`` + alvo); os rótulos são o alvo +
        ``<eos>``. As máscaras de preenchimento padrão são ``ids == pad_id``.
        """
        c = self.config
        _check_ids(src, "src", c.vocab_size, c.max_len)
        src_mask = self._default_padding(src, src_key_padding_mask)
        memory = self.encoder(self.embed(src, validate=False), key_padding_mask=src_mask)
        return self.decode(
            tgt,
            memory,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=src_mask,
        )

    def new_cache(self) -> list[tuple[KVCache, KVCache]]:
        """Um par ``(KVCache(), KVCache(static=True))`` por camada do decoder."""
        return [(KVCache(), KVCache(static=True)) for _ in self.decoder.layers]

    @classmethod
    def from_torch(cls, model: nn.Transformer, vocab_size: int, **config_overrides) -> Transformer:
        """Cria um ``Transformer`` com o encoder e o decoder de um ``nn.Transformer``.

        O ``nn.Transformer`` não tem embeddings nem ``lm_head``: esses ficam aleatórios.
        Tamanhos, ``norm_first``, ativação, ``eps`` e dropout vêm de ``model``; as normas
        finais (que o ``nn.Transformer`` sempre cria) são copiadas (``final_norm=True``).
        ``config_overrides`` só pode mudar ``max_len``, ``pad_id`` e ``tie_weights``
        (o resto descreve as camadas copiadas).
        """
        if not isinstance(model, nn.Transformer):
            raise TypeError(f"esperava um nn.Transformer; recebi {type(model).__name__}")
        allowed = ("max_len", "pad_id", "tie_weights")
        unknown = sorted(set(config_overrides) - set(allowed))
        if unknown:
            raise ValueError(
                f"from_torch não aceita {unknown}: esses valores vêm do nn.Transformer; "
                f"só é possível mudar {', '.join(allowed)}"
            )
        enc, dec = model.encoder, model.decoder
        if not isinstance(enc, nn.TransformerEncoder) or not isinstance(dec, nn.TransformerDecoder):
            raise TypeError("from_torch só copia nn.Transformer com encoder e decoder padrão")
        if (enc.norm is None) != (dec.norm is None):
            raise ValueError("o encoder e o decoder devem ambos ter (ou não ter) norma final")
        settings = _torch_layer_settings(enc.layers[0])
        if not settings.pop("bias"):
            raise ValueError("nn.Transformer(bias=False) não é suportado pelo TransformerConfig")
        if settings.pop("norm") != "layernorm":
            raise ValueError("o TransformerConfig só usa LayerNorm")
        config = TransformerConfig(
            vocab_size=vocab_size,
            num_encoder_layers=len(enc.layers),
            num_decoder_layers=len(dec.layers),
            final_norm=enc.norm is not None,
            **settings,
        )
        config = dataclasses.replace(config, **config_overrides)
        new = cls(config)
        ref = enc.layers[0].linear1.weight
        new.to(device=ref.device, dtype=ref.dtype)
        new.encoder = Encoder.from_torch(enc)
        new.decoder = Decoder.from_torch(dec)
        new.train(model.training)
        return new


# --------------------------------------------------------------------------------------
# GPT (só decoder)
# --------------------------------------------------------------------------------------
@dataclass
class GPTConfig:
    """Hiperparâmetros do ``GPT``. ``dataclasses.asdict`` dá tipos simples.

    ``positional``: ``"learned"`` (GPT-2), ``"sinusoidal"`` (artigo), ``"rope"`` ou
    ``"alibi"`` (os dois últimos agem dentro da atenção). ``num_kv_heads`` < ``num_heads``
    liga GQA (1 = MQA). ``norm``: ``"layernorm"`` ou ``"rmsnorm"``. ``activation``:
    ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` ou ``"swiglu"``. ``num_experts`` (padrão
    ``None``) troca a FFN de cada bloco por uma ``MoEFeedForward`` com ``num_experts``
    especialistas de largura ``ff_dim``, ``moe_top_k`` por token e perda de balanceamento
    de peso ``moe_aux_weight`` (``lm_loss`` a soma durante o treino).

    ``head_scale`` (padrão ``False``): multiplica o vetor final ``(b, t, d)`` por
    ``d^-1/2`` antes da ``lm_head``, como o T5 faz com os pesos amarrados. No padrão, o
    embedding entra multiplicado por ``sqrt(d)`` e a ``lm_head`` usa a mesma matriz: o
    modelo sem treino dá ao token atual um logit de cerca de ``sqrt(d)`` e a perda
    inicial fica muito acima de ``ln V``. Com ``head_scale=True`` os logits começam de
    ordem 1 e a perda inicial fica perto de ``ln V`` (ver notebooks/09_geracao.ipynb,
    que compara as duas escolhas depois de um treino curto).

    ``rope_theta`` (padrão 10.000, o do artigo do RoPE): a base das frequências do RoPE;
    o Llama 3 usa 500.000. ``activation="gelu_tanh"`` é a GELU aproximada do GPT-2
    original. Os dois existem para receber modelos publicados (ver ``tpt.hf``).
    """

    vocab_size: int
    max_len: int = 256
    embed_dim: int = 128
    num_heads: int = 4
    num_layers: int = 4
    num_kv_heads: int | None = None
    ff_dim: int | None = None
    dropout: float = 0.0
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_first: bool = True
    positional: str = "learned"
    tie_weights: bool = True
    bias: bool = True
    eps: float = 1e-5
    fused: bool = True
    num_experts: int | None = None
    moe_top_k: int = 2
    moe_aux_weight: float = 0.01
    head_scale: bool = False
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        _check_common_config(self)
        _positive_int("num_layers", self.num_layers)
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise ValueError(f"rope_theta={theta!r} deve ser um número positivo")
        if not isinstance(self.head_scale, bool):
            raise ValueError(f"head_scale={self.head_scale!r} deve ser True ou False")
        if self.num_experts is not None:
            _positive_int("num_experts", self.num_experts)
            _positive_int("moe_top_k", self.moe_top_k)
            if self.moe_top_k > self.num_experts:
                raise ValueError(
                    f"moe_top_k={self.moe_top_k} não pode passar de "
                    f"num_experts={self.num_experts}"
                )
            if not self.moe_aux_weight >= 0:
                raise ValueError(f"moe_aux_weight={self.moe_aux_weight} deve ser >= 0")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r} desconhecida; opções válidas: {', '.join(NORMS)}")
        if self.positional not in GPT_POSITIONALS:
            raise ValueError(
                f"positional={self.positional!r} desconhecido; opções válidas: "
                f"{', '.join(GPT_POSITIONALS)}"
            )
        if self.num_kv_heads is not None:
            _positive_int("num_kv_heads", self.num_kv_heads)
            if self.num_heads % self.num_kv_heads != 0:
                raise ValueError(
                    f"num_heads={self.num_heads} não é divisível por "
                    f"num_kv_heads={self.num_kv_heads}"
                )
        head_dim = self.embed_dim // self.num_heads
        if self.positional == "rope" and head_dim % 2 != 0:
            raise ValueError(f"RoPE precisa de head_dim par; embed_dim/num_heads = {head_dim}")
        if self.positional == "sinusoidal" and self.embed_dim % 2 != 0:
            raise ValueError(
                f"a codificação senoidal precisa de embed_dim par; recebi "
                f"embed_dim={self.embed_dim}"
            )


class GPT(_ModelMixin, nn.Module):
    """Modelo de linguagem só-decoder (estilo GPT).

    ``embedding`` (``TokenEmbedding``, escala ``sqrt(d)``) -> ``positional`` (aprendida
    ou senoidal; ``None`` com RoPE/ALiBi, que agem dentro da atenção) -> ``dropout`` ->
    ``layers`` (``EncoderLayer`` chamadas com ``is_causal=True``) -> ``norm`` (só na
    pré-normalização) -> (``* d^-1/2`` com ``head_scale``) -> ``lm_head`` (amarrada aos
    embeddings com ``tie_weights``).

    Atributo ``attn_weights``: lista por camada dos pesos ``(b, h, t, s)`` depois de
    ``need_weights=True``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"esperava um GPTConfig; recebi {type(config).__name__}")
        self.config = config
        c = config
        self.embedding = TokenEmbedding(c.vocab_size, c.embed_dim)
        if c.positional == "learned":
            self.positional: nn.Module | None = LearnedPositionalEmbedding(c.embed_dim, c.max_len)
        elif c.positional == "sinusoidal":
            self.positional = SinusoidalPositionalEncoding(c.embed_dim, max_len=c.max_len)
        else:
            self.positional = None  # RoPE/ALiBi: a posição entra na atenção
        self.dropout = nn.Dropout(c.dropout)
        attn_positional = c.positional if c.positional in ("rope", "alibi") else None
        self.layers = nn.ModuleList(
            EncoderLayer(
                c.embed_dim,
                c.num_heads,
                c.ff_dim,
                dropout=c.dropout,
                activation=c.activation,
                norm_first=c.norm_first,
                norm=c.norm,
                eps=c.eps,
                num_kv_heads=c.num_kv_heads,
                bias=c.bias,
                fused=c.fused,
                positional=attn_positional,
                max_len=c.max_len,
                rope_theta=c.rope_theta,
            )
            for _ in range(c.num_layers)
        )
        if c.num_experts is not None:  # mistura de especialistas no lugar de cada FFN
            for layer in self.layers:
                layer.ffn = MoEFeedForward(
                    c.embed_dim, c.num_experts, c.moe_top_k, c.ff_dim, activation=c.activation,
                    dropout=c.dropout, bias=c.bias, aux_loss_weight=c.moe_aux_weight,
                )
        self.norm = make_norm(c.norm, c.embed_dim, c.eps, bias=c.bias) if c.norm_first else None
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        self.attn_weights: list[Tensor] | None = None
        self.aux_loss: Tensor | None = None  # soma das perdas de balanceamento (só com MoE)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # As lineares ficam com a inicialização padrão do PyTorch; só os embeddings mudam.
        # (Testamos N(0, 0.02) no estilo GPT-2: com pós-normalização e pesos amarrados, o modelo
        # ficava parado no nível dos unigramas por centenas de passos.)
        c = self.config
        _init_embedding(self.embedding, c.embed_dim, None)
        if c.tie_weights:
            self.lm_head.weight = self.embedding.embedding.weight  # o MESMO tensor
        else:
            nn.init.normal_(self.lm_head.weight, std=c.embed_dim**-0.5)

    def forward(
        self,
        idx: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
        need_weights: bool = False,
        validate: bool = True,
    ) -> Tensor:
        """ids ``(b, t)`` -> logits ``(b, t, V)`` (causal: a posição i só vê 0..i).

        Com ``cache`` (de ``new_cache()``), ``idx`` traz só os tokens novos, que ocupam
        as posições ``len(cache) .. len(cache) + t - 1``. ``key_padding_mask`` ``(b, s)``
        (True = ``<pad>``) cobre todas as ``s = len(cache) + t`` chaves.

        ``validate=False`` pula as conferências: a dos ids (que lê os valores e, na GPU, faz
        a CPU esperar por ela), a do cache e as de formas em cada camada. ``tpt.generate``
        confere o prompt uma vez e depois só passa tokens que o próprio modelo escolheu.
        """
        x = self.hidden_states(
            idx,
            key_padding_mask=key_padding_mask,
            cache=cache,
            need_weights=need_weights,
            validate=validate,
        )  # (b, t, d)
        if self.config.head_scale:
            x = x * self.config.embed_dim**-0.5  # (b, t, d): logits de ordem 1 no início
        return self.lm_head(x)  # (b, t, V)

    def hidden_states(
        self,
        idx: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
        need_weights: bool = False,
        validate: bool = True,
    ) -> Tensor:
        """ids ``(b, t)`` -> estados ocultos finais ``(b, t, d)``, antes da ``lm_head``.

        O vetor de cada posição depois da pilha e da norma final (sem o ``d^-1/2`` do
        ``head_scale``, que pertence à ``lm_head``). É o que ``forward`` projeta no
        vocabulário e o que ``tpt.GPTClassifier`` lê no último token. Argumentos como em
        ``forward``.
        """
        c = self.config
        offset = 0
        if cache is not None:
            if validate:
                _check_cache_list(cache, c.num_layers, "KVCache")
            offset = len(cache[0])
        if validate:
            _check_ids(idx, "idx", c.vocab_size, c.max_len, offset)
        x = self.embedding(idx, validate=False)  # (b, t, d); os ids já foram conferidos acima
        if self.positional is not None:
            x = self.positional(x, offset=offset)  # (b, t, d)
        x = apply_dropout(self.dropout, x)
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                key_padding_mask=key_padding_mask,
                is_causal=True,
                need_weights=need_weights,
                cache=None if cache is None else cache[i],
                validate=validate,
            )
        if need_weights or self.attn_weights is not None:  # nn.Module.__setattr__ custa caro
            self.attn_weights = [lay.attn_weights for lay in self.layers] if need_weights else None
        if self.config.num_experts is not None:
            self.aux_loss = sum(layer.ffn.aux_loss for layer in self.layers)
        if self.norm is not None:
            x = self.norm(x)
        return x  # (b, t, d)

    def new_cache(self) -> list[KVCache]:
        """Um ``KVCache`` por camada."""
        return [KVCache() for _ in self.layers]
