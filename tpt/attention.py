"""Atenção: a função explícita (notebook 03) e a atenção multicabeça (notebook 04).

Lido de cima para baixo, este arquivo segue as aulas:

1. ``scaled_dot_product_attention``: softmax(QKᵀ/√d_k)·V escrita passo a passo
   (notebooks/03_atencao_produto_escalar.ipynb);
2. ``MultiHeadAttention.forward``: os sete passos do notebook 04 (projetar uma vez,
   ``view``, ``transpose``, uma chamada de atenção, ``transpose`` de volta, juntar as
   cabeças, projetar a saída), em uma tela (notebooks/04_atencao_multicabeca.ipynb). O
   passo 1 é ``project_qkv``: Q, K e V saem de **uma** multiplicação de matrizes, como
   ``in_proj_weight`` do ``nn.MultiheadAttention`` e ``c_attn`` do GPT-2;
3. as etapas que chegam depois, em métodos pequenos com nome próprio, que uma primeira
   leitura pode pular: posições dentro da atenção (RoPE e ALiBi, notebook 10), cache de
   chaves e valores (``tpt.kv_cache``, notebook 09), GQA/MQA (notebook 10), o caminho
   rápido por ``F.scaled_dot_product_attention`` (notebooks 03 e 10) e a conferência
   das entradas;
4. ``MultiHeadAttention.from_torch``: copia os pesos de um ``nn.MultiheadAttention``.

Convenção de máscaras (ver ``tpt.masks``): booleanas, ``True`` = bloqueado.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.kv_cache import KVCache
from tpt.masks import _check_bool, causal_mask, check_attn_mask, check_key_padding_mask, merge_masks
from tpt.positional import RotaryEmbedding, alibi_bias

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "KVCache"]


# --------------------------------------------------------------------------------------
# 1. A versão explícita, linha a linha (notebook 03)
# --------------------------------------------------------------------------------------
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Atenção por produto escalar com escala, escrita passo a passo.

    ``query`` ``(..., t, d_k)``, ``key`` ``(..., s, d_k)``, ``value`` ``(..., s, d_v)``.
    Devolve ``(saída (..., t, d_v), pesos (..., t, s))``.

    1. pontuações = Q Kᵀ · scale (``scale`` padrão ``1/sqrt(d_k)``), forma ``(..., t, s)``;
    2. soma ``bias`` (viés aditivo float, por exemplo o ALiBi);
    3. posições bloqueadas (``attn_mask`` com ``True`` = bloqueado, ou ``is_causal``)
       recebem ``-inf``;
    4. softmax sobre as **chaves** (``dim=-1``): cada linha de pesos soma 1;
    5. saída = pesos @ V.

    Uma linha inteiramente bloqueada daria NaN (softmax de só ``-inf``); aqui ela vira
    pesos 0 e saída 0, sem NaN também no gradiente.

    ``is_causal`` usa ``causal_mask(t, s)``: com ``s > t`` as consultas são as últimas
    ``t`` posições (alinhamento do cache). ``F.scaled_dot_product_attention`` alinha pelo
    canto superior esquerdo; as duas coincidem quando ``t == s``. Os pesos devolvidos
    são os efetivamente usados (depois do dropout, como em ``nn.MultiheadAttention``).
    """
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key e value devem ter o mesmo comprimento s, mas key tem forma "
            f"{tuple(key.shape)} e value tem forma {tuple(value.shape)}."
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query e key devem ter a mesma largura d_k, mas query tem forma "
            f"{tuple(query.shape)} e key tem forma {tuple(key.shape)}."
        )
    t, s = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])

    scores = query @ key.transpose(-2, -1) * scale  # (..., t, s)
    if bias is not None:
        scores = scores + bias  # (..., t, s)

    if is_causal:
        causal = causal_mask(t, s, device=query.device)  # (t, s)
        attn_mask = causal if attn_mask is None else attn_mask | causal
    if attn_mask is not None:
        _check_bool(attn_mask, "attn_mask")
        _check_broadcast(attn_mask, scores)
        scores = scores.masked_fill(attn_mask, float("-inf"))  # (..., t, s)

    # Linhas sem nenhuma chave visível: trocamos -inf por 0 antes do softmax (evita NaN
    # na ida e na volta) e zeramos os pesos depois.
    fully_masked = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., t, 1)
    scores = scores.masked_fill(fully_masked, 0.0)
    weights = torch.softmax(scores, dim=-1)  # (..., t, s)
    weights = weights.masked_fill(fully_masked, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)

    return weights @ value, weights  # (..., t, d_v), (..., t, s)


def _check_broadcast(mask: Tensor, scores: Tensor) -> None:
    try:
        shape = torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        shape = None
    if shape != scores.shape:
        raise ValueError(
            f"attn_mask tem forma {tuple(mask.shape)}, que não faz broadcasting para a forma "
            f"das pontuações {tuple(scores.shape)} (..., t, s)."
        )


# --------------------------------------------------------------------------------------
# 2. Atenção multicabeça (notebook 04), com as etapas opcionais em métodos à parte
# --------------------------------------------------------------------------------------
class MultiHeadAttention(nn.Module):
    """Atenção multicabeça com a projeção de entrada ``qkv_proj`` e a de saída ``out_proj``.

    ``embed_dim = d`` é dividido em ``num_heads = h`` cabeças de largura
    ``head_dim = d_h = d / h``. ``qkv_proj`` é **um** ``nn.Linear(d, d + 2 * d_kv)``
    cujas linhas são, em ordem, ``[W_Q (d linhas) | W_K (d_kv) | W_V (d_kv)]``: na
    autoatenção, Q, K e V saem de uma multiplicação só (ver ``project_qkv``). Com
    ``num_kv_heads < num_heads`` (GQA; ``1`` = MQA), cada cabeça de K/V serve
    ``h / h_kv`` cabeças de consulta: ``d_kv = kv_dim = h_kv * d_h`` (``= d`` sem GQA), e
    o cache de K/V encolhe na mesma proporção.

    ``positional``: ``None``, ``"rope"`` (gira q e k depois da divisão em cabeças) ou
    ``"alibi"`` (viés aditivo nas pontuações). ``fused=True`` usa
    ``F.scaled_dot_product_attention`` quando os pesos não são pedidos.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        fused: bool = True,
        positional: str | None = None,
        max_len: int = 4096,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        _check_sizes(embed_dim, num_heads, num_kv_heads, dropout, positional)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.fused = fused
        self.positional = positional
        self.max_len = max_len

        self.kv_dim = num_kv_heads * self.head_dim  # d_kv (= embed_dim sem GQA)
        # Linhas [W_Q | W_K | W_V]: as três projeções de entrada numa matriz só.
        self.qkv_proj = _stacked_linear(embed_dim, (embed_dim, self.kv_dim, self.kv_dim), bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.rope = (
            RotaryEmbedding(self.head_dim, max_len=max_len, theta=rope_theta)
            if positional == "rope"
            else None
        )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        validate: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """``query`` ``(b, t, d)``, ``key``/``value`` ``(b, s, d)`` -> ``(saída (b, t, d), pesos)``.

        ``key`` padrão = ``query`` (autoatenção), ``value`` padrão = ``key``. Os pesos
        ``(b, h, t, s)`` são por cabeça (sem média) e só vêm quando ``need_weights=True``.

        Com ``cache`` dinâmico, ``s`` conta também as posições guardadas e as novas posições
        começam em ``len(cache)``: a máscara causal, o RoPE e o ALiBi usam posições
        absolutas. ``attn_mask`` então tem forma ``(t, s)`` e ``key_padding_mask``
        ``(b, s)`` com ``s = len(cache) + s_novo``. Com cache estático já preenchido,
        ``key``/``value`` são ignorados e K/V vêm do cache.

        Diferença em relação a ``nn.MultiheadAttention``: uma ``attn_mask`` 3-D aqui é
        ``(b, t, s)`` (lá é ``(b * h, t, s)``); use ``(b, h, t, s)`` para máscaras por cabeça.

        ``validate=False`` pula a conferência de formas, máscaras e cache: serve para quem
        já conferiu tudo uma vez, como ``tpt.generate`` a cada token depois do prompt.
        """
        self_attention = key is None or key is query
        key = query if key is None else key
        value = key if value is None else value
        b, t = query.shape[:2]
        if validate:
            offset = self._check_inputs(
                query, key, value, attn_mask, key_padding_mask, is_causal, cache, self_attention
            )
        else:
            offset = _cache_offset(cache)  # as novas posições começam depois das guardadas

        # Passos 1 a 3: projetar Q, K e V numa só multiplicação (project_qkv), separar as
        # cabeças (view) e pô-las junto do lote (transpose).
        if cache is not None and cache.static and len(cache) > 0:
            q = self._split_heads(self._project_query(query), self.num_heads)  # (b, h, t, d_h)
            k, v = cache.k, cache.v  # atenção cruzada na geração: K/V já calculados
        else:
            q, k, v = self.project_qkv(query, key, value)  # (b, t, d), 2 x (b, s_novo, d_kv)
            q = self._split_heads(q, self.num_heads)  # (b, h, t, d_h)
            k = self._split_heads(k, self.num_kv_heads)  # (b, h_kv, s_novo, d_h)
            v = self._split_heads(v, self.num_kv_heads)  # (b, h_kv, s_novo, d_h)
            q, k = self._rotate(q, k, offset)  # RoPE (notebook 10); sem RoPE, nada muda
            if cache is not None:
                k, v = cache.update(k, v)  # (b, h_kv, s, d_h): passado + novo (notebook 09)
        k, v = self._expand_kv_heads(k), self._expand_kv_heads(v)  # (b, h, s, d_h) (GQA)

        # Passo 4: uma chamada de atenção para todas as cabeças, (b, h) fazendo papel de lote.
        out, weights = self._attend(
            q, k, v, attn_mask, key_padding_mask, is_causal, need_weights
        )  # (b, h, t, d_h), (b, h, t, s) ou None

        # Passos 5 a 7: cabeças de volta ao lugar, concatenadas, e a projeção de saída.
        out = out.transpose(1, 2).reshape(b, t, self.embed_dim)  # (b, t, h, d_h) -> (b, t, d)
        return self.out_proj(out), weights

    # ----------------------------------------------------------------------------------
    # Etapas com nome próprio (o forward acima chama cada uma numa linha)
    # ----------------------------------------------------------------------------------
    def project_qkv(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Passo 1: ``(q (b, t, d), k (b, s, d_kv), v (b, s, d_kv))``, antes da divisão em cabeças.

        ``query`` ``(b, t, d)``, ``key``/``value`` ``(b, s, d)`` (padrões como em ``forward``).
        Multiplicar pela matriz empilhada ``[W_Q | W_K | W_V]`` é o mesmo que multiplicar
        por cada bloco e concatenar: cada linha de pesos produz uma coluna da saída.

        - autoatenção (``key`` ausente ou ``key is query``): **uma** multiplicação pela
          matriz inteira (``qkv_proj(query)``) e um ``split`` das colunas;
        - atenção cruzada sobre uma memória (``key is value``): Q sozinho e um ``F.linear``
          com as linhas de K e V juntas;
        - ``key`` e ``value`` diferentes: três ``F.linear``, um por bloco de linhas.
        """
        key = query if key is None else key
        value = key if value is None else value
        d, kv = self.embed_dim, self.kv_dim
        weight, bias = self.qkv_proj.weight, self.qkv_proj.bias  # (d + 2 d_kv, d), (d + 2 d_kv,)
        if key is query and value is query:  # a chamada do módulo: ganchos e contadores o veem
            q, k, v = self.qkv_proj(query).split([d, kv, kv], dim=-1)
            return q, k, v  # (b, t, d), (b, t, d_kv), (b, t, d_kv)
        q = self._project_query(query)  # (b, t, d)
        if key is value:
            k, v = F.linear(key, weight[d:], _rows(bias, d, None)).split([kv, kv], dim=-1)
            return q, k, v  # (b, t, d), (b, s, d_kv), (b, s, d_kv)
        k = F.linear(key, weight[d : d + kv], _rows(bias, d, d + kv))  # (b, s, d_kv)
        v = F.linear(value, weight[d + kv :], _rows(bias, d + kv, None))  # (b, s, d_kv)
        return q, k, v

    def _project_query(self, query: Tensor) -> Tensor:
        """Só as ``d`` primeiras linhas de ``qkv_proj``: ``(b, t, d)`` -> ``(b, t, d)``."""
        d = self.embed_dim
        return F.linear(query, self.qkv_proj.weight[:d], _rows(self.qkv_proj.bias, 0, d))

    def _split_heads(self, x: Tensor, num_heads: int) -> Tensor:
        """``(b, t, num_heads * d_h)`` -> ``(b, num_heads, t, d_h)`` (passos 2 e 3)."""
        b, t = x.shape[:2]
        return x.view(b, t, num_heads, self.head_dim).transpose(1, 2)  # (b, h, t, d_h)

    def _rotate(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """RoPE: gira consultas e chaves pelas suas posições absolutas (``offset`` + i)."""
        if self.rope is None:
            return q, k
        return self.rope(q, offset=offset), self.rope(k, offset=offset)  # mesmas formas

    def _expand_kv_heads(self, x: Tensor) -> Tensor:
        """GQA/MQA: cada cabeça de K/V serve ``h / h_kv`` cabeças de consulta vizinhas."""
        group = self.num_heads // self.num_kv_heads
        if group == 1:
            return x
        return x.repeat_interleave(group, dim=1)  # (b, h_kv, s, d_h) -> (b, h, s, d_h)

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Passo 4: junta as máscaras (e o ALiBi) e escolhe o caminho explícito ou o rápido.

        ``q`` ``(b, h, t, d_h)``, ``k``/``v`` ``(b, h, s, d_h)``. Os pesos só existem no
        caminho explícito (o kernel fundido não os guarda).
        """
        t, s = q.shape[-2], k.shape[-2]
        if is_causal and t == 1:
            is_causal = False  # uma consulta só, a da última posição: ela vê todas as chaves
        mask = merge_masks(
            attn_mask, key_padding_mask, is_causal=is_causal, t=t, s=s, device=q.device
        )  # (b|1, h|1, t, s) ou None
        bias = None
        if self.positional == "alibi":
            bias = alibi_bias(self.num_heads, t, s, device=q.device, dtype=q.dtype)  # (h, t, s)
        dropout_p = self.dropout if self.training else 0.0

        if need_weights or not self.fused:
            out, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p=dropout_p, bias=bias
            )  # (b, h, t, d_h), (b, h, t, s)
            return out, (weights if need_weights else None)
        # Só a máscara causal quadrada? Então o kernel a gera sozinho (o caso mais rápido).
        only_causal = is_causal and t == s and bias is None
        only_causal = only_causal and attn_mask is None and key_padding_mask is None
        return _fused_attention(q, k, v, mask, bias, dropout_p, only_causal), None

    def _check_inputs(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        cache: KVCache | None,
        self_attention: bool,
    ) -> int:
        """Confere formas, máscaras e cache; devolve o offset das novas posições."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            _check_stream(x, name, self.embed_dim)
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key e value devem ter o mesmo tamanho de lote b, mas têm formas "
                f"{tuple(query.shape)}, {tuple(key.shape)} e {tuple(value.shape)}."
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key e value devem ter o mesmo comprimento s, mas key tem forma "
                f"{tuple(key.shape)} e value tem forma {tuple(value.shape)}."
            )
        b, t, s_new = query.shape[0], query.shape[1], key.shape[1]
        reuse_static = cache is not None and cache.static and len(cache) > 0
        offset = _cache_offset(cache)
        s = len(cache) if reuse_static else offset + s_new
        self._check_cache(cache, b, t, offset)
        check_attn_mask(
            attn_mask, t, s, batch_size=b, num_heads=self.num_heads, self_attention=self_attention
        )
        check_key_padding_mask(key_padding_mask, b, s)
        if is_causal and s < t:
            raise ValueError(
                f"is_causal=True exige s >= t (as consultas são as últimas t posições), "
                f"mas t={t} e s={s}."
            )
        return offset

    def _check_cache(self, cache: KVCache | None, b: int, t: int, offset: int) -> None:
        if cache is None:
            return
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache deve ser um KVCache, mas recebeu {type(cache).__name__}.")
        if cache.static and self.positional is not None:
            raise ValueError(
                f"Um cache estático (atenção cruzada) não combina com positional="
                f"{self.positional!r}: as posições das chaves vêm de outra sequência."
            )
        if cache.k is not None and cache.k.shape[0] != b:
            raise ValueError(
                f"O cache guarda um lote de tamanho {cache.k.shape[0]}, mas a entrada tem b={b}; "
                f"use cache.reset() ao começar um novo lote."
            )
        if self.rope is not None and offset + t > self.max_len:
            raise ValueError(
                f"Com o cache, as posições vão até len(cache) + t = {offset} + {t} = {offset + t}, "
                f"mas max_len={self.max_len} (tabela do RoPE). Crie o módulo com max_len maior."
            )

    # ----------------------------------------------------------------------------------
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Cria uma ``MultiHeadAttention`` com os pesos e ajustes de ``nn.MultiheadAttention``.

        ``in_proj_weight`` ``(3d, d)`` já tem as linhas na ordem ``[W_Q | W_K | W_V]`` e vai
        inteiro para ``qkv_proj``; os vieses, ``out_proj``, ``dropout`` e o modo
        (treino/avaliação) são copiados. O
        módulo do tpt tem sempre o lote primeiro, qualquer que seja ``mha.batch_first``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(
                f"from_torch espera nn.MultiheadAttention, mas recebeu {type(mha).__name__}."
            )
        d = mha.embed_dim
        if not mha._qkv_same_embed_dim:
            raise ValueError(
                f"nn.MultiheadAttention com kdim={mha.kdim} e vdim={mha.vdim} diferentes de "
                f"embed_dim={d} não é suportada: o tpt projeta key e value a partir de embed_dim."
            )
        if mha.bias_k is not None or mha.bias_v is not None:
            raise ValueError(
                "nn.MultiheadAttention com add_bias_kv=True (bias_k/bias_v) não é suportada "
                "pelo tpt."
            )
        if mha.add_zero_attn:
            raise ValueError(
                "nn.MultiheadAttention com add_zero_attn=True não é suportada pelo tpt."
            )

        has_bias = mha.in_proj_bias is not None
        new = cls(d, mha.num_heads, dropout=mha.dropout, bias=has_bias)
        weight = mha.in_proj_weight
        new = new.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            new.qkv_proj.weight.copy_(weight)  # (3d, d): mesma ordem [Q | K | V]
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                new.qkv_proj.bias.copy_(mha.in_proj_bias)  # (3d,)
                new.out_proj.bias.copy_(mha.out_proj.bias)
        new.train(mha.training)
        return new

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, dropout={self.dropout}, fused={self.fused}, "
            f"positional={self.positional!r}"
        )


# --------------------------------------------------------------------------------------
# 3. O caminho rápido e as conferências (notebooks 03 e 10)
# --------------------------------------------------------------------------------------
def _fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    bias: Tensor | None,
    dropout_p: float,
    only_causal: bool,
) -> Tensor:
    """Caminho rápido: ``F.scaled_dot_product_attention`` (kernels fundidos).

    ``q`` ``(b, h, t, d_h)``, ``k``/``v`` ``(b, h, s, d_h)``, ``mask`` booleana do tpt
    (``True`` = bloqueado) ou ``None``, ``bias`` ``(h, t, s)`` ou ``None``. A função do
    PyTorch usa a convenção oposta (``True`` = pode atender), daí o ``~mask``; um viés
    vira uma máscara float aditiva com ``-inf`` nas posições bloqueadas. Linhas
    totalmente bloqueadas dariam NaN ou lixo no kernel: liberamos essas linhas antes da
    chamada e zeramos as saídas delas depois (o gradiente também fica limpo).
    """
    if only_causal:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)

    fully_masked = None
    if mask is not None:
        fully_masked = mask.all(dim=-1, keepdim=True)  # (b|1, h|1, t, 1)
        mask = mask & ~fully_masked  # (b|1, h|1, t, s): libera as linhas vazias
    if bias is not None:
        sdpa_mask = bias[None]  # (1, h, t, s): máscara float aditiva
        if mask is not None:
            sdpa_mask = sdpa_mask.masked_fill(mask, float("-inf"))  # (b|1, h, t, s)
    else:
        sdpa_mask = None if mask is None else ~mask  # True = pode atender

    out = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, dropout_p=dropout_p)
    if fully_masked is not None:
        out = out.masked_fill(fully_masked, 0.0)  # (b, h, t, d_h)
    return out


def _cache_offset(cache: KVCache | None) -> int:
    """Onde começam as novas posições: depois das guardadas num cache dinâmico, senão em 0."""
    return len(cache) if cache is not None and not cache.static else 0


def _stacked_linear(in_features: int, sizes: tuple[int, ...], bias: bool) -> nn.Linear:
    """Um ``nn.Linear(in_features, sum(sizes))`` com as linhas de um ``nn.Linear`` por bloco.

    Cada bloco é sorteado como um ``nn.Linear(in_features, size)`` separado, na ordem: a
    inicialização (e o gerador aleatório) fica igual à de projeções separadas.
    """
    parts = [nn.Linear(in_features, size, bias=bias) for size in sizes]
    stacked = nn.Linear(in_features, sum(sizes), bias=bias, device="meta")  # não sorteia nada
    with torch.no_grad():
        stacked.weight = nn.Parameter(torch.cat([p.weight for p in parts]))  # (sum(sizes), in)
        if bias:
            stacked.bias = nn.Parameter(torch.cat([p.bias for p in parts]))  # (sum(sizes),)
    return stacked


def _rows(bias: Tensor | None, start: int, end: int | None) -> Tensor | None:
    """O pedaço ``bias[start:end]`` do viés de ``qkv_proj`` (``None`` sem viés)."""
    return None if bias is None else bias[start:end]


def _check_sizes(
    embed_dim: int, num_heads: int, num_kv_heads: int, dropout: float, positional: str | None
) -> None:
    if embed_dim <= 0 or num_heads <= 0 or num_kv_heads <= 0:
        raise ValueError(
            f"embed_dim={embed_dim}, num_heads={num_heads} e num_kv_heads={num_kv_heads} "
            f"precisam ser positivos."
        )
    if embed_dim % num_heads != 0:
        raise ValueError(
            f"embed_dim={embed_dim} não é divisível por num_heads={num_heads}; "
            f"cada cabeça precisa de embed_dim / num_heads dimensões inteiras."
        )
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads={num_heads} não é divisível por num_kv_heads={num_kv_heads}; "
            f"cada cabeça de K/V precisa servir o mesmo número de cabeças de consulta."
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout={dropout} deve estar no intervalo [0, 1).")
    if positional not in (None, "rope", "alibi"):
        raise ValueError(f"positional={positional!r} inválido; use None, 'rope' ou 'alibi'.")


def _check_stream(x: Tensor, name: str, embed_dim: int) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} deve ser um torch.Tensor, mas recebeu {type(x).__name__}.")
    if x.dim() != 3:
        hint = " (para uma única sequência, use x.unsqueeze(0))" if x.dim() == 2 else ""
        raise ValueError(
            f"{name} deve ter 3 dimensões (b, t, d), com o lote primeiro, mas tem forma "
            f"{tuple(x.shape)}{hint}."
        )
    if x.shape[-1] != embed_dim:
        raise ValueError(
            f"{name} tem largura {x.shape[-1]} (forma {tuple(x.shape)}), mas "
            f"embed_dim={embed_dim}."
        )
