"""Rede feed-forward aplicada a cada posição (FFN): ReLU, GELU e SwiGLU.

Ver notebooks/07_blocos.ipynb (ReLU e GELU) e notebooks/10_transformers_modernos.ipynb
(SwiGLU).

A mesma rede de duas camadas é aplicada a cada token, sem misturar posições:

- artigo original: ``FFN(x) = max(0, x W1 + b1) W2 + b2``, com ``d_ff = 4d``;
- GELU: troca o ReLU pela GELU exata (BERT); ``"gelu_tanh"`` é a aproximação por tanh
  da GELU, a que o GPT-2 original usa (``gelu_new`` no Hugging Face, ver ``tpt.hf``);
- SwiGLU (LLaMA): ``FFN(x) = (SiLU(x W1) * x W3) W2``. A porta (*gate*) é o ramo que
  passa pela não linearidade, ``SiLU(x W1)``; ela multiplica elemento a elemento o ramo
  linear ``x W3`` (*up*), e ``W2`` (*down*) volta para ``d``. São os nomes do Hugging
  Face: ``W1`` é ``gate_proj``, ``W3`` é ``up_proj`` e ``W2`` é ``down_proj``.

O dropout fica logo depois da ativação, como em ``nn.TransformerEncoderLayer``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from tpt.dropout import apply_dropout

__all__ = ["ACTIVATIONS", "FeedForward", "activation_from_torch", "check_activation"]

#: Ativações aceitas por ``FeedForward``.
ACTIVATIONS = ("relu", "gelu", "swiglu", "gelu_tanh")


def check_activation(activation: object) -> str:
    """Confere o nome da ativação e devolve-o; erro em português com as opções válidas."""
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation={activation!r} desconhecida; opções válidas: {', '.join(ACTIVATIONS)}"
        )
    return activation  # type: ignore[return-value]


class FeedForward(nn.Module):
    """FFN posição a posição: ``(b, t, d) -> (b, t, d)``.

    Args:
        embed_dim: largura ``d`` dos tokens.
        ff_dim: largura interna ``d_ff``; padrão ``4 * embed_dim`` (como no artigo).
            Com SwiGLU há três matrizes em vez de duas; o LLaMA usa ``d_ff`` perto de
            ``8d/3`` para manter o mesmo número de parâmetros.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` (GELU aproximada por tanh,
            a do GPT-2) ou ``"swiglu"``.
        dropout: probabilidade do dropout aplicado logo depois da ativação.
        bias: se as camadas lineares têm viés.

    Submódulos: ``linear1`` (d -> d_ff; com SwiGLU, a porta, ``gate_proj`` no Hugging
    Face, a que passa pela SiLU), ``linear2`` (d_ff -> d; ``down_proj``) e, só com
    SwiGLU, ``linear3`` (d -> d_ff; o ramo *up*, ``up_proj``, sem ativação, multiplicado
    pela porta).
    """

    def __init__(
        self,
        embed_dim: int,
        ff_dim: int | None = None,
        *,
        activation: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"embed_dim={embed_dim!r} deve ser um inteiro positivo")
        if ff_dim is None:
            ff_dim = 4 * embed_dim
        if isinstance(ff_dim, bool) or not isinstance(ff_dim, int) or ff_dim <= 0:
            raise ValueError(f"ff_dim={ff_dim!r} deve ser um inteiro positivo (ou None)")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout} deve estar em [0, 1)")
        self.embed_dim = embed_dim
        self.ff_dim = ff_dim
        self.activation = check_activation(activation)
        self.linear1 = nn.Linear(embed_dim, ff_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ff_dim, embed_dim, bias=bias)
        if activation == "swiglu":
            self.linear3 = nn.Linear(embed_dim, ff_dim, bias=bias)  # o ramo up (up_proj)

    def forward(self, x: Tensor) -> Tensor:
        """Aplica a FFN a cada token: ``(b, t, d) -> (b, t, d)``."""
        if x.dim() == 0 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"FeedForward espera o último eixo com tamanho embed_dim={self.embed_dim}; "
                f"recebi forma {tuple(x.shape)}"
            )
        h = self.linear1(x)  # (b, t, d_ff); com SwiGLU, a entrada da porta (gate_proj)
        if self.activation == "relu":
            h = F.relu(h)
        elif self.activation == "gelu":
            h = F.gelu(h)  # GELU exata (com erf), a mesma de nn.TransformerEncoderLayer
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")  # 0,5·x·(1 + tanh(√(2/π)·(x + 0,044715·x³)))
        else:
            h = F.silu(h) * self.linear3(x)  # SwiGLU: porta SiLU(x W1) * ramo up x W3, (b, t, d_ff)
        return self.linear2(apply_dropout(self.dropout, h))  # (b, t, d)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"

    @classmethod
    def from_torch(cls, layer: nn.Module) -> FeedForward:
        """Copia a FFN de um ``nn.TransformerEncoderLayer`` ou ``nn.TransformerDecoderLayer``.

        Lê ``linear1``, ``linear2``, o dropout interno e a ativação (ReLU ou GELU).
        """
        if not isinstance(layer, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
            raise TypeError(
                "esperava um nn.TransformerEncoderLayer ou nn.TransformerDecoderLayer; "
                f"recebi {type(layer).__name__}"
            )
        weight = layer.linear1.weight
        new = cls(
            layer.linear1.in_features,
            layer.linear1.out_features,
            activation=activation_from_torch(layer),
            dropout=layer.dropout.p,
            bias=layer.linear1.bias is not None,
        )
        new.to(device=weight.device, dtype=weight.dtype)
        new.load_state_dict(
            {
                f"{name}.{key}": value
                for name in ("linear1", "linear2")
                for key, value in getattr(layer, name).state_dict().items()
            }
        )
        return new


def activation_from_torch(layer: nn.Module) -> str:
    """Descobre se uma camada do ``nn.Transformer`` usa ``"relu"`` ou ``"gelu"``.

    A camada guarda a função em ``layer.activation`` (``F.relu``, ``F.gelu``,
    ``nn.ReLU()`` ou ``nn.GELU()``); a do encoder também guarda o código
    ``activation_relu_or_gelu`` (1 = ReLU, 2 = GELU, 0 = outra).
    """
    act = getattr(layer, "activation", None)
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if act is None:
        code = getattr(layer, "activation_relu_or_gelu", 0)
        if code in (1, 2):
            return "relu" if code == 1 else "gelu"
    raise ValueError(
        f"ativação {act!r} não suportada: só sei copiar ReLU e GELU exata "
        "(F.relu, F.gelu, nn.ReLU(), nn.GELU(approximate='none'))"
    )
