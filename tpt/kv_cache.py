"""Cache de chaves e valores (K/V) para a geração token a token.

Ver notebooks/09_geracao.ipynb. Na geração autorregressiva, as chaves e os valores das
posições anteriores não mudam: guardá-los evita recalcular as projeções de toda a
sequência a cada novo token. ``MultiHeadAttention`` (tpt/attention.py) recebe um
``KVCache`` pelo argumento ``cache``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache", "kv_cache_bytes"]


class KVCache:
    """Guarda K e V já projetados ``(b, h_kv, s, d_h)`` entre passos da geração.

    * ``KVCache()`` (dinâmico): cada ``update(k, v)`` **acrescenta** as novas posições ao
      longo do eixo da sequência; ``len(cache)`` é o número de posições guardadas e é o
      deslocamento (offset) das próximas posições.
    * ``KVCache(static=True)``: preenchido **uma** vez e reutilizado. Serve para a atenção
      cruzada, em que K/V vêm da saída do encoder, que não muda durante a geração.

    Memória: 2 x camadas x h_kv x d_h x tokens x b x bytes (``kv_cache_bytes``).
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Acrescenta ``k``, ``v`` ``(b, h_kv, s_novo, d_h)``; devolve K/V completos.

        Os tensores devolvidos têm forma ``(b, h_kv, s, d_h)`` com ``s = len(cache)``.

        Num cache estático já preenchido, nada é acrescentado: devolve o que está guardado.
        """
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        elif not self.static:
            if k.shape[:2] != self.k.shape[:2] or k.shape[-1] != self.k.shape[-1]:
                raise ValueError(
                    f"KVCache: o cache guarda K de forma {tuple(self.k.shape)} (b, h_kv, s, d_h), "
                    f"mas recebeu K de forma {tuple(k.shape)}; b, h_kv e d_h devem coincidir."
                )
            self.k = torch.cat([self.k, k], dim=-2)  # (b, h_kv, s + s_novo, d_h)
            self.v = torch.cat([self.v, v], dim=-2)  # (b, h_kv, s + s_novo, d_h)
        return self.k, self.v

    def reset(self) -> None:
        """Esvazia o cache (para começar uma nova sequência)."""
        self.k = None
        self.v = None

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"KVCache(static={self.static}, len={len(self)}, k={shape})"


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    tokens: int,
    *,
    batch: int = 1,
    bytes_per_value: int,
) -> int:
    """Bytes que o cache de K/V ocupa: ``2 x camadas x h_kv x d_h x tokens x b x bytes``.

    O 2 conta K e V; ``bytes_per_value`` é 4 em float32, 2 em float16/bfloat16. Com GQA
    ou MQA, ``num_kv_heads`` é o número de cabeças de K/V (não o de consultas).
    """
    sizes = {
        "num_layers": num_layers, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
        "tokens": tokens, "batch": batch, "bytes_per_value": bytes_per_value,
    }
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"kv_cache_bytes: {name}={value!r} deve ser um inteiro >= 0")
    return 2 * num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_value
