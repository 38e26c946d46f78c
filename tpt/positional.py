"""Codificações posicionais: senoidal, aprendida, RoPE e ALiBi.

Ver notebooks/05_codificacao_posicional.ipynb (senoidal e aprendida) e
notebooks/10_transformers_modernos.ipynb (RoPE e ALiBi).

Sem posições, a autoatenção é equivariante a permutações: embaralhar os tokens só
embaralha as saídas. Há duas famílias de soluções:

* **somar** um vetor por posição aos embeddings (senoidal, aprendida). A codificação é
  **absoluta**; o que a senoidal facilita é aprender deslocamentos relativos, porque
  PE(p + k) = R(k) PE(p) para uma rotação fixa R(k) (ver ``pe_rotation``);
* agir dentro da atenção, sobre as consultas e chaves ou sobre as pontuações. Para uma
  consulta na posição p e uma chave na posição p': o RoPE gira os vetores de consulta e
  de chave conforme a posição, e então as posições só entram na pontuação pelo
  deslocamento p - p' (o conteúdo dos dois vetores continua contando); o ALiBi soma às
  pontuações um viés -m * |p - p'|, com inclinação m fixa por cabeça.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tpt.dropout import apply_dropout

__all__ = [
    "sinusoidal_encoding",
    "pe_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "apply_rope",
    "alibi_slopes",
    "alibi_bias",
]


def _check_even(embed_dim: int, name: str) -> None:
    if embed_dim <= 0 or embed_dim % 2 != 0:
        raise ValueError(
            f"{name}={embed_dim} precisa ser par e positivo: as dimensões formam pares (2i, 2i+1)."
        )


def _frequencies(embed_dim: int, theta: float) -> Tensor:
    """Frequências ``1 / theta^(2i/d)`` para ``i = 0..d/2-1``, em float64: ``(d/2,)``."""
    two_i = torch.arange(0, embed_dim, 2, dtype=torch.float64)  # (d/2,)
    return theta ** (-two_i / embed_dim)  # (d/2,)


def _check_span(offset: int, t: int, max_len: int, where: str) -> None:
    if offset < 0:
        raise ValueError(f"{where}: offset={offset} não pode ser negativo.")
    if offset + t > max_len:
        raise ValueError(
            f"{where}: as posições vão até offset + t = {offset} + {t} = {offset + t}, "
            f"mas max_len={max_len}. Crie o módulo com max_len maior ou use sequências menores."
        )


# --------------------------------------------------------------------------------------
# Senoidal (o artigo original): tabela somada aos embeddings
# --------------------------------------------------------------------------------------
def sinusoidal_encoding(
    max_len: int,
    embed_dim: int,
    theta: float = 10000.0,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Tabela senoidal ``(max_len, d)`` com seno e cosseno **intercalados**.

    ``PE[p, 2i] = sin(p / theta^(2i/d))`` e ``PE[p, 2i+1] = cos(p / theta^(2i/d))``.
    Calculada em float64 e convertida para ``dtype`` (padrão: o dtype padrão do torch).
    """
    _check_even(embed_dim, "embed_dim")
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    angles = positions * _frequencies(embed_dim, theta)[None, :]  # (max_len, d/2)
    pe = torch.empty(max_len, embed_dim, dtype=torch.float64)  # (max_len, d)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(dtype=dtype or torch.get_default_dtype(), device=device)


def pe_rotation(
    offset: int,
    embed_dim: int,
    theta: float = 10000.0,
    *,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Rotação bloco-diagonal ``R(k)`` ``(d, d)`` com ``PE(p + k) = R(k) @ PE(p)``.

    Cada par ``(sin a, cos a)`` vira ``(sin(a + b), cos(a + b))`` com ``b = k * w_i``:
    ``[[cos b, sin b], [-sin b, cos b]]``. A matriz só depende de ``k``, não de ``p``.
    """
    _check_even(embed_dim, "embed_dim")
    angles = offset * _frequencies(embed_dim, theta)  # (d/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    rotation = torch.zeros(embed_dim, embed_dim, dtype=torch.float64)  # (d, d)
    rotation[0::2, 0::2] = torch.diag(cos)  # sin(a+b) = sin a cos b + cos a sin b
    rotation[0::2, 1::2] = torch.diag(sin)
    rotation[1::2, 0::2] = torch.diag(-sin)  # cos(a+b) = cos a cos b - sin a sin b
    rotation[1::2, 1::2] = torch.diag(cos)
    return rotation.to(dtype=dtype or torch.get_default_dtype())


class SinusoidalPositionalEncoding(nn.Module):
    """Soma a tabela senoidal ao longo do eixo da **sequência** de ``x`` ``(b, t, d)``.

    A tabela é um buffer **não** persistente (não vai para o ``state_dict``, é refeita na
    construção e acompanha ``.to(device)``). Não há ``torch.no_grad`` no caminho: o
    gradiente chega intacto aos embeddings.
    """

    def __init__(
        self, embed_dim: int, max_len: int = 5000, dropout: float = 0.0, theta: float = 10000.0
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.max_len = max_len
        self.theta = theta
        self.pe: Tensor
        self.register_buffer("pe", sinusoidal_encoding(max_len, embed_dim, theta), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def _apply(self, fn, *args, **kwargs):
        # Em .double(), .half() ou .to(...), refaz a tabela no novo dtype a partir do float64,
        # em vez de converter valores já arredondados em float32: um modelo em float64 fica
        # exato, não só até ~1e-7.
        module = super()._apply(fn, *args, **kwargs)
        self.pe = sinusoidal_encoding(
            self.max_len, self.embed_dim, self.theta, dtype=self.pe.dtype, device=self.pe.device
        )
        return module

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x`` ``(b, t, d)`` -> ``x + PE[offset:offset+t]`` ``(b, t, d)``."""
        t = _check_input(x, self.embed_dim, "SinusoidalPositionalEncoding")
        _check_span(offset, t, self.max_len, "SinusoidalPositionalEncoding")
        pe = self.pe[offset : offset + t].to(dtype=x.dtype)  # (t, d)
        return apply_dropout(self.dropout, x + pe[None, :, :])  # (b, t, d): igual para todo b


class LearnedPositionalEmbedding(nn.Module):
    """Um embedding aprendido por posição, somado a ``x`` ``(b, t, d)``.

    Inicializada com N(0, 0.02), como no GPT-2. Não extrapola além de ``max_len``.
    """

    def __init__(self, embed_dim: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, embed_dim)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x`` ``(b, t, d)`` -> ``x + E[offset:offset+t]`` ``(b, t, d)``."""
        t = _check_input(x, self.embed_dim, "LearnedPositionalEmbedding")
        _check_span(offset, t, self.max_len, "LearnedPositionalEmbedding")
        table = self.embedding.weight[offset : offset + t]  # (t, d): as linhas das posições
        return apply_dropout(self.dropout, x + table[None, :, :])  # (b, t, d)


def _check_input(x: Tensor, embed_dim: int, where: str) -> int:
    if x.dim() != 3 or x.shape[-1] != embed_dim:
        raise ValueError(
            f"{where}: a entrada deve ter forma (b, t, {embed_dim}) (lote primeiro), "
            f"mas tem forma {tuple(x.shape)}."
        )
    return x.shape[1]


# --------------------------------------------------------------------------------------
# RoPE: gira pares (2i, 2i+1) de q e k por um ângulo proporcional à posição
# --------------------------------------------------------------------------------------
def _rotate_pairs(x: Tensor) -> Tensor:
    """Troca cada par ``(x_2i, x_2i+1)`` por ``(-x_2i+1, x_2i)`` (rotação de 90 graus)."""
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., d/2) cada
    return torch.stack((-odd, even), dim=-1).flatten(-2)  # (..., d)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Aplica a rotação do RoPE: ``x * cos + rot90(x) * sin``.

    ``x`` ``(..., t, d_h)``; ``cos`` e ``sin`` ``(t, d_h)`` com cada ângulo repetido no
    par ``(2i, 2i+1)``. O par vira ``(x0 cos - x1 sin, x1 cos + x0 sin)``.
    """
    return x * cos + _rotate_pairs(x) * sin


class RotaryEmbedding(nn.Module):
    """RoPE: gira q ou k ``(b, h, t, d_h)`` conforme a posição absoluta.

    Com a consulta ``q`` na posição ``m`` e a chave ``k`` na posição ``n``, como
    ``R(m)^T R(n) = R(n - m)``, a pontuação ``<R(m) q, R(n) k> = <q, R(n - m) k>``: as
    posições só entram pelo deslocamento ``n - m``, e o conteúdo (``q`` e ``k``) continua
    contando. As tabelas de cos e sin ``(max_len, d_h)`` são buffers não persistentes.
    """

    def __init__(self, head_dim: int, max_len: int = 4096, theta: float = 10000.0) -> None:
        super().__init__()
        _check_even(head_dim, "head_dim")
        self.head_dim = head_dim
        self.max_len = max_len
        self.theta = theta
        cos, sin = self._tables(torch.get_default_dtype(), None)
        self.cos: Tensor
        self.sin: Tensor
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, dtype: torch.dtype, device: torch.device | None) -> tuple[Tensor, Tensor]:
        """Tabelas de cos e sin ``(max_len, d_h)``, calculadas em float64."""
        positions = torch.arange(self.max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
        angles = positions * _frequencies(self.head_dim, self.theta)[None, :]  # (max_len, d_h/2)
        angles = angles.repeat_interleave(2, dim=-1)  # (max_len, d_h): pares (2i, 2i+1)
        return (
            torch.cos(angles).to(dtype=dtype, device=device),
            torch.sin(angles).to(dtype=dtype, device=device),
        )

    def _apply(self, fn, *args, **kwargs):
        # Como na senoidal: as tabelas são refeitas no novo dtype, a partir do float64.
        module = super()._apply(fn, *args, **kwargs)
        self.cos, self.sin = self._tables(self.cos.dtype, self.cos.device)
        return module

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x`` ``(..., t, d_h)`` nas posições ``offset..offset+t-1`` -> mesma forma."""
        if x.shape[-1] != self.head_dim:
            raise ValueError(
                f"RotaryEmbedding: a última dimensão deve ser head_dim={self.head_dim}, "
                f"mas a entrada tem forma {tuple(x.shape)}."
            )
        t = x.shape[-2]
        _check_span(offset, t, self.max_len, "RotaryEmbedding")
        cos = self.cos[offset : offset + t].to(dtype=x.dtype)  # (t, d_h)
        sin = self.sin[offset : offset + t].to(dtype=x.dtype)  # (t, d_h)
        return apply_rope(x, cos, sin)


# --------------------------------------------------------------------------------------
# ALiBi: viés linear na distância, com inclinação fixa por cabeça
# --------------------------------------------------------------------------------------
def _power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]


def alibi_slopes(num_heads: int) -> Tensor:
    """Inclinações ``(h,)`` do ALiBi: ``m_k = 2^(-8k/H)``, ``k = 1..H``.

    Não são hiperparâmetros treinados. Quando ``H`` não é potência de 2, segue o artigo:
    usa as ``n`` inclinações da maior potência de 2 ``n < H`` e completa com as
    inclinações de ``2n`` de índice ímpar (1ª, 3ª, 5ª, ...).
    """
    if num_heads <= 0:
        raise ValueError(f"alibi_slopes: num_heads={num_heads} precisa ser positivo.")
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(n)
    if n < num_heads:
        slopes += _power_of_two_slopes(2 * n)[0::2][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.get_default_dtype())


def alibi_bias(
    num_heads: int,
    t: int,
    s: int | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Viés aditivo ``(h, t, s)`` do ALiBi: ``-m_h * |pos_q - pos_k|``.

    As ``t`` consultas são as **últimas** ``t`` das ``s`` posições (como num cache):
    a consulta ``i`` está na posição ``i + s - t``.
    """
    s = t if s is None else s
    if s < t:
        raise ValueError(
            f"alibi_bias: s={s} é menor que t={t}; as consultas são as últimas t das s posições."
        )
    dtype = dtype or torch.get_default_dtype()
    q_pos = torch.arange(s - t, s, device=device)  # (t,)
    k_pos = torch.arange(s, device=device)  # (s,)
    distance = (q_pos[:, None] - k_pos[None, :]).abs().to(dtype)  # (t, s)
    slopes = alibi_slopes(num_heads).to(device=device, dtype=dtype)  # (h,)
    return -slopes[:, None, None] * distance[None, :, :]  # (h, t, s)
