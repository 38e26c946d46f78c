"""Embedding de tokens: de ids inteiros para vetores de dimensão ``d``.

Ver notebooks/02_embeddings.ipynb.

Um embedding é uma matriz ``E`` de formato ``(V, d)`` (V = tamanho do vocabulário). O
vetor do token de id ``x`` é a LINHA ``E[x]`` (indexada pelo id do token, não pela
posição dele na frase). Isso é o mesmo que multiplicar o vetor one-hot de ``x`` por
``E``, só que sem construir o one-hot: uma sequência de ``t`` tokens vira ``(t, d)``
em vez de ``(t, V)``.

O artigo "Attention Is All You Need" multiplica os embeddings por ``sqrt(d)``
(``d`` = ``d_model``). A tabela começa com variância pequena, ``1/d`` (a mesma matriz
pode ser reaproveitada na camada de saída, onde pesos pequenos dão logits de ordem 1), e
a escala devolve aos embeddings variância 1, a mesma ordem de grandeza da codificação
posicional (valores entre -1 e 1) que será somada a eles.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

__all__ = ["TokenEmbedding"]


def _check_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} deve ser int; recebi {type(value).__name__} ({value!r}).")
    if value < 1:
        raise ValueError(f"{name}={value} deve ser >= 1.")
    return int(value)


class TokenEmbedding(nn.Module):
    """Tabela de embeddings ``(vocab_size, embed_dim)`` com a escala ``sqrt(embed_dim)``.

    Args:
        vocab_size: tamanho REAL do vocabulário (ex.: ``tokenizer.vocab_size``).
        embed_dim: dimensão ``d`` de cada vetor.
        padding_idx: id do ``<pad>`` (normalmente ``PAD_ID=0``): a linha começa em zero
            e não recebe gradiente.
        scale: se ``True`` (padrão, como no artigo), multiplica a saída por
            ``sqrt(embed_dim)`` e inicializa a tabela com N(0, 1/d); se ``False``, a
            tabela começa com N(0, 1), como em ``nn.Embedding``.

    Atributos:
        embedding: o ``nn.Embedding`` que guarda a tabela.
        weight: atalho para ``embedding.weight``, formato ``(vocab_size, embed_dim)``.

    Forward: ids inteiros ``(b, t)`` -> vetores ``(b, t, d)`` (qualquer formato
    ``(...)`` vira ``(..., d)``).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        padding_idx: int | None = None,
        scale: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = _check_positive_int(vocab_size, "vocab_size")
        self.embed_dim = _check_positive_int(embed_dim, "embed_dim")
        if padding_idx is not None:
            if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
                raise TypeError(f"padding_idx deve ser int ou None; recebi {padding_idx!r}.")
            if not 0 <= padding_idx < vocab_size:
                raise ValueError(
                    f"padding_idx={padding_idx} fora do vocabulário (vocab_size={vocab_size}; "
                    f"esperava 0 <= padding_idx < {vocab_size})."
                )
            padding_idx = int(padding_idx)
        self.padding_idx = padding_idx
        self.scale = bool(scale)
        self.embedding = nn.Embedding(
            vocab_size, embed_dim, padding_idx=padding_idx, device=device, dtype=dtype
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Inicializa a tabela com N(0, 1/d) se ``scale``, senão N(0, 1) (padrão do PyTorch).

        Assim a SAÍDA tem variância 1 nos dois casos: ``sqrt(d) * N(0, 1/d) = N(0, 1)``.
        A linha de ``padding_idx`` começa em zero.
        """
        std = self.embed_dim**-0.5 if self.scale else 1.0
        with torch.no_grad():
            nn.init.normal_(self.embedding.weight, mean=0.0, std=std)
            if self.padding_idx is not None:
                self.embedding.weight[self.padding_idx].zero_()

    @property
    def weight(self) -> nn.Parameter:
        """A tabela ``E``, formato ``(vocab_size, embed_dim)``."""
        return self.embedding.weight

    @property
    def multiplier(self) -> float:
        """O fator aplicado à saída: ``sqrt(embed_dim)`` com ``scale=True``, senão 1."""
        return math.sqrt(self.embed_dim) if self.scale else 1.0

    def _check_ids(self, ids: Tensor) -> Tensor:
        if not isinstance(ids, Tensor):
            raise TypeError(
                f"esperava um tensor de ids inteiros (torch.long), recebi "
                f"{type(ids).__name__}; use torch.tensor(ids, dtype=torch.long)."
            )
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            dtype_name = str(ids.dtype).removeprefix("torch.")
            raise TypeError(f"esperava ids inteiros (torch.long), recebi {dtype_name}.")
        if ids.dtype not in (torch.long, torch.int32):
            ids = ids.long()  # ex.: uint8/int16: o nn.Embedding só aceita int32/int64
        if ids.numel() > 0:
            largest, smallest = torch.stack([ids.max(), ids.min()]).tolist()  # uma leitura só
            if largest >= self.vocab_size or smallest < 0:
                raise ValueError(
                    f"ids fora do vocabulário: maior id={largest}, menor id={smallest}, "
                    f"mas vocab_size={self.vocab_size} (ids válidos: 0 a "
                    f"{self.vocab_size - 1})."
                )
        return ids

    def forward(self, ids: Tensor, *, validate: bool = True) -> Tensor:
        """Ids ``(b, t)`` -> embeddings ``(b, t, d)``, vezes ``sqrt(d)`` se ``scale``.

        ``validate=False`` pula a conferência dos ids, que lê os valores (na GPU, a CPU
        espera por ela): os modelos do ``tpt`` já conferiram os ids antes de chamar.
        """
        if validate:
            ids = self._check_ids(ids)
        vectors = self.embedding(ids)  # (b, t, d): a linha E[id] de cada token
        if self.scale:
            vectors = vectors * math.sqrt(self.embed_dim)
        return vectors

    @classmethod
    def from_torch(cls, embedding: nn.Embedding, scale: bool = True) -> TokenEmbedding:
        """Cria um ``TokenEmbedding`` com uma CÓPIA dos pesos de um ``nn.Embedding``."""
        if not isinstance(embedding, nn.Embedding):
            raise TypeError(
                f"from_torch espera um nn.Embedding; recebi {type(embedding).__name__}."
            )
        if embedding.max_norm is not None or embedding.sparse:
            raise ValueError(
                "from_torch não suporta nn.Embedding com max_norm ou sparse=True "
                f"(recebi max_norm={embedding.max_norm}, sparse={embedding.sparse})."
            )
        weight = embedding.weight
        module = cls(
            embedding.num_embeddings,
            embedding.embedding_dim,
            padding_idx=embedding.padding_idx,
            scale=scale,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            module.embedding.weight.copy_(weight)
        return module

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, embed_dim={self.embed_dim}, "
            f"padding_idx={self.padding_idx}, scale={self.scale}"
        )
