"""Normalizações por token: LayerNorm e RMSNorm.

Ver notebooks/07_blocos.ipynb (LayerNorm) e notebooks/10_transformers_modernos.ipynb
(RMSNorm).

As duas normalizam cada token separadamente, olhando só para as ``d`` características
do último eixo: uma entrada ``(b, t, d)`` sai com a mesma forma ``(b, t, d)``.

- ``LayerNorm``: subtrai a média, divide pelo desvio padrão (variância enviesada, com
  ``eps`` para nunca dividir por zero) e aplica o ganho ``weight`` (gamma) e o
  deslocamento ``bias`` (beta), ambos aprendidos.
- ``RMSNorm``: não subtrai a média; divide pela raiz da média dos quadrados (RMS) e
  aplica só o ganho ``weight``. É mais barata e é a escolha dos modelos modernos.

O ``forward`` das duas mostra a fórmula passo a passo (``fused=False``) e, por padrão,
faz o mesmo cálculo num kernel só do PyTorch (``F.layer_norm``/``F.rms_norm``), várias
vezes mais rápido; os testes conferem que os dois caminhos dão os mesmos números.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NORMS", "LayerNorm", "RMSNorm", "make_norm", "norm_from_torch"]

#: Nomes aceitos por ``make_norm``.
NORMS = ("layernorm", "rmsnorm")

# nn.RMSNorm e F.rms_norm só existem a partir do torch 2.4.
_TORCH_RMSNORM: type | None = getattr(nn, "RMSNorm", None)
_F_RMS_NORM = getattr(F, "rms_norm", None)


def _check_dim(name: str, value: object) -> int:
    """Confere que ``value`` é um inteiro positivo (a largura ``d`` normalizada)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} deve ser um inteiro (a largura d do último eixo); "
            f"recebi {value!r} do tipo {type(value).__name__}"
        )
    if value <= 0:
        raise ValueError(f"{name}={value} deve ser positivo")
    return value


def _check_input(x: Tensor, dim: int, cls_name: str) -> None:
    """Confere que o último eixo de ``x`` tem a largura esperada."""
    if x.dim() == 0 or x.shape[-1] != dim:
        raise ValueError(
            f"{cls_name} espera o último eixo com tamanho {dim}; "
            f"recebi um tensor de forma {tuple(x.shape)}"
        )


def _torch_single_dim(module: nn.Module) -> int:
    """Lê a largura de um ``nn.LayerNorm``/``nn.RMSNorm`` que normaliza UM eixo só."""
    shape = tuple(module.normalized_shape)
    if len(shape) != 1:
        raise ValueError(
            f"só sei copiar normalizações sobre o último eixo; recebi "
            f"normalized_shape={shape} (mais de um eixo)"
        )
    if not module.elementwise_affine:
        raise ValueError(
            f"{type(module).__name__} com elementwise_affine=False não tem ganho aprendido; "
            "as normalizações do tpt sempre têm weight"
        )
    return shape[0]


class LayerNorm(nn.Module):
    """LayerNorm escrita por extenso (igual a ``nn.LayerNorm`` sobre o último eixo).

    Para cada token: ``y = (x - média) / sqrt(variância + eps) * weight + bias``,
    com média e variância (enviesada, dividindo por ``d``) calculadas sobre as ``d``
    características. ``weight`` começa em 1 e ``bias`` em 0.

    Args:
        normalized_shape: largura ``d`` do último eixo.
        eps: somado à variância para estabilidade numérica; num token com variância
            da ordem de ``eps`` ou menor, a saída sai com variância ``var / (var + eps)``,
            abaixo de 1.
        bias: se ``False``, não há deslocamento aprendido (``self.bias`` é ``None``).
        fused: ``True`` (padrão) calcula com ``F.layer_norm``; ``False`` segue a
            fórmula passo a passo (mais lento, mesmos números).

    Forma: ``(..., d) -> (..., d)``.
    """

    def __init__(
        self, normalized_shape: int, eps: float = 1e-5, bias: bool = True, *, fused: bool = True
    ) -> None:
        super().__init__()
        self.fused = fused
        self.normalized_shape = _check_dim("normalized_shape", normalized_shape)
        if eps < 0:
            raise ValueError(f"eps={eps} deve ser >= 0")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(normalized_shape))  # gamma, (d,)
        self.bias = nn.Parameter(torch.zeros(normalized_shape)) if bias else None  # beta

    def forward(self, x: Tensor) -> Tensor:
        """Normaliza cada token: ``(..., d) -> (..., d)``."""
        _check_input(x, self.normalized_shape, "LayerNorm")
        if self.fused:  # o mesmo cálculo das linhas abaixo, num kernel só
            shape = (self.normalized_shape,)
            return F.layer_norm(x, shape, self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1), variância enviesada
        # (..., d): média 0 e variância var / (var + eps), que é 1 quando var >> eps
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        y = x_hat * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, bias={self.bias is not None}, "
            f"fused={self.fused}"
        )

    @classmethod
    def from_torch(cls, norm: nn.LayerNorm) -> LayerNorm:
        """Cria uma ``LayerNorm`` com os mesmos pesos, ``eps``, dtype e device de ``norm``."""
        if not isinstance(norm, nn.LayerNorm):
            raise TypeError(f"esperava um nn.LayerNorm; recebi {type(norm).__name__}")
        dim = _torch_single_dim(norm)
        new = cls(dim, eps=norm.eps, bias=norm.bias is not None)
        new.to(device=norm.weight.device, dtype=norm.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(norm.weight)
            if norm.bias is not None:
                new.bias.copy_(norm.bias)
        return new


class RMSNorm(nn.Module):
    """RMSNorm: divide cada token pela raiz da média dos seus quadrados.

    ``y = x / sqrt(média(x²) + eps) * weight``. Não centraliza (não subtrai a média)
    e não tem ``bias``. O ``eps`` é obrigatório na prática: sem ele um token nulo
    daria divisão por zero.

    Args:
        dim: largura ``d`` do último eixo.
        eps: somado à média dos quadrados. ``None`` reproduz ``nn.RMSNorm(eps=None)``:
            usa ``torch.finfo(x.dtype).eps`` do tensor de entrada.
        fused: ``True`` (padrão) usa ``F.rms_norm`` quando o torch a tem (2.4 ou mais
            novo); ``False`` segue a fórmula passo a passo.

    Forma: ``(..., d) -> (..., d)``.
    """

    def __init__(self, dim: int, eps: float | None = 1e-6, *, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused
        self.dim = _check_dim("dim", dim)
        if eps is not None and eps < 0:
            raise ValueError(f"eps={eps} deve ser >= 0 (ou None)")
        self.eps = None if eps is None else float(eps)
        self.weight = nn.Parameter(torch.ones(dim))  # ganho, (d,)

    def forward(self, x: Tensor) -> Tensor:
        """Normaliza cada token pela sua RMS: ``(..., d) -> (..., d)``."""
        _check_input(x, self.dim, "RMSNorm")
        if self.fused and _F_RMS_NORM is not None:  # o mesmo cálculo, num kernel só
            return _F_RMS_NORM(x, (self.dim,), self.weight, self.eps)
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return x * torch.rsqrt(mean_square + eps) * self.weight

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, fused={self.fused}"

    @classmethod
    def from_torch(cls, norm: nn.RMSNorm) -> RMSNorm:
        """Cria uma ``RMSNorm`` com o mesmo ganho, ``eps`` (inclusive ``None``), dtype e device."""
        if _TORCH_RMSNORM is None or not isinstance(norm, _TORCH_RMSNORM):
            raise TypeError(f"esperava um nn.RMSNorm; recebi {type(norm).__name__}")
        dim = _torch_single_dim(norm)
        new = cls(dim, eps=norm.eps)
        new.to(device=norm.weight.device, dtype=norm.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(norm.weight)
        return new


def make_norm(kind: str, dim: int, eps: float = 1e-5, *, bias: bool = True) -> LayerNorm | RMSNorm:
    """Cria a normalização pelo nome: ``"layernorm"`` ou ``"rmsnorm"``.

    O mesmo ``eps`` vale para as duas (os blocos do tpt usam ``1e-5`` por padrão).
    ``bias=False`` tira o deslocamento da LayerNorm (a RMSNorm nunca tem ``bias``).
    """
    if kind == "layernorm":
        return LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm={kind!r} desconhecida; opções válidas: {', '.join(NORMS)}")


def norm_from_torch(norm: nn.Module) -> LayerNorm | RMSNorm:
    """Converte um ``nn.LayerNorm`` ou ``nn.RMSNorm`` na normalização equivalente do tpt."""
    if isinstance(norm, nn.LayerNorm):
        return LayerNorm.from_torch(norm)
    if _TORCH_RMSNORM is not None and isinstance(norm, _TORCH_RMSNORM):
        return RMSNorm.from_torch(norm)
    raise TypeError(
        f"não sei copiar uma normalização do tipo {type(norm).__name__}; "
        "esperava nn.LayerNorm ou nn.RMSNorm"
    )
