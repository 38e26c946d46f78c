"""Mistura de especialistas (MoE): uma FFN com vários especialistas e um roteador.

Ver notebooks/10_transformers_modernos.ipynb.

Em vez de uma FFN só, o bloco tem ``N`` FFNs independentes (os *especialistas*) e um
roteador linear que escolhe, para **cada** token, os ``k`` especialistas que vão
processá-lo (``k`` costuma ser 1 ou 2):

1. ``probs = softmax(x W_r)``: uma probabilidade por especialista, ``(n, N)``;
2. os ``k`` maiores valores de ``probs`` e seus índices, ``(n, k)``;
3. os ``k`` pesos escolhidos são **renormalizados** para somar 1;
4. cada especialista recebe **só** os tokens roteados para ele (índices com
   ``nonzero``/``index_select``) e sua saída, multiplicada pelo peso, volta para o
   lugar do token com ``index_add_``. Nenhum especialista roda nos outros tokens: é
   daí que vem a economia (parâmetros totais grandes, computação por token pequena).

Como nada obriga o roteador a espalhar os tokens, o treino acrescenta a perda
auxiliar de balanceamento do Switch Transformer (Fedus et al., 2021):

    aux = alpha * N * sum_i f_i * P_i

com ``f_i`` = fração das atribuições (token, vaga) que foram para o especialista ``i``
e ``P_i`` = média, sobre os tokens, da probabilidade que o roteador deu a ``i``. Com
roteamento perfeitamente uniforme, ``f_i = P_i = 1/N`` e ``aux = alpha``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tpt.feedforward import FeedForward, check_activation

__all__ = ["MoEFeedForward", "load_balancing_loss"]


def _check_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} deve ser um inteiro >= {minimum}")
    return value


def load_balancing_loss(
    router_probs: Tensor, expert_indices: Tensor, num_experts: int, alpha: float = 1.0
) -> Tensor:
    """Perda de balanceamento do Switch Transformer: ``alpha * N * sum_i f_i * P_i``.

    Args:
        router_probs: probabilidades do roteador ``(n, N)`` (cada linha soma 1).
        expert_indices: especialistas escolhidos ``(n, k)`` (inteiros em ``[0, N)``).
        num_experts: ``N``.
        alpha: peso da perda (o artigo do Switch usa ``1e-2``).

    ``f_i`` conta as ``n * k`` atribuições (cada token conta ``k`` vezes) e soma 1; por
    isso o valor com roteamento uniforme é ``alpha`` para qualquer ``k``. (Algumas
    bibliotecas contam cada vaga separadamente e chegam a ``k * alpha``.) ``f_i`` vem
    de uma escolha discreta e não tem gradiente; o gradiente chega ao roteador por
    ``P_i``.
    """
    if router_probs.dim() != 2 or router_probs.shape[-1] != num_experts:
        raise ValueError(
            f"router_probs deve ter forma (n, {num_experts}); recebi {tuple(router_probs.shape)}"
        )
    if expert_indices.dim() != 2 or expert_indices.shape[0] != router_probs.shape[0]:
        raise ValueError(
            f"expert_indices deve ter forma (n, k) com n={router_probs.shape[0]}; "
            f"recebi {tuple(expert_indices.shape)}"
        )
    counts = torch.bincount(expert_indices.reshape(-1), minlength=num_experts)  # (N,)
    fraction = counts.to(router_probs.dtype) / expert_indices.numel()  # f_i, (N,), soma 1
    mean_prob = router_probs.mean(dim=0)  # P_i, (N,), soma 1
    return alpha * num_experts * (fraction * mean_prob).sum()


class MoEFeedForward(nn.Module):
    """FFN de mistura de especialistas com roteamento top-k: ``(b, t, d) -> (b, t, d)``.

    Args:
        embed_dim: largura ``d`` dos tokens.
        num_experts: número ``N`` de especialistas (cada um é uma ``tpt.FeedForward``).
        top_k: quantos especialistas processam cada token (``1 <= k <= N``).
        ff_dim: largura interna de **cada** especialista; padrão ``4 * embed_dim``.
        activation: ``"swiglu"`` (padrão, como no Mixtral), ``"relu"`` ou ``"gelu"``.
        dropout: dropout dentro de cada especialista.
        bias: viés nas lineares dos especialistas (o roteador nunca tem viés).
        aux_loss_weight: ``alpha`` da perda de balanceamento.
        renormalize: divide os ``k`` pesos escolhidos pela soma deles (padrão, como no
            Mixtral). Com ``top_k=1`` o peso renormalizado vale sempre 1 e o roteador só
            aprende pela perda auxiliar; por isso o Switch Transformer (k = 1) usa a
            probabilidade sem renormalizar (``renormalize=False``).

    Submódulos: ``router`` (Linear d -> N, sem viés) e ``experts`` (``nn.ModuleList``).

    Depois de cada ``forward`` ficam disponíveis:

    - ``aux_loss``: a perda de balanceamento (tensor escalar, com gradiente);
    - ``router_probs`` ``(b, t, N)``, ``expert_indices`` ``(b, t, k)``,
      ``expert_weights`` ``(b, t, k)`` (renormalizados) e ``tokens_per_expert`` ``(N,)``,
      sem gradiente, para inspecionar o roteamento.

    Não há limite de capacidade: nenhum token é descartado, mesmo que muitos escolham o
    mesmo especialista.
    """

    def __init__(
        self,
        embed_dim: int,
        num_experts: int,
        top_k: int = 2,
        ff_dim: int | None = None,
        *,
        activation: str = "swiglu",
        dropout: float = 0.0,
        bias: bool = False,
        aux_loss_weight: float = 0.01,
        renormalize: bool = True,
    ) -> None:
        super().__init__()
        _check_int("embed_dim", embed_dim)
        _check_int("num_experts", num_experts)
        _check_int("top_k", top_k)
        if top_k > num_experts:
            raise ValueError(
                f"top_k={top_k} não pode passar de num_experts={num_experts}: cada token "
                "escolhe k especialistas diferentes"
            )
        check_activation(activation)
        if isinstance(aux_loss_weight, bool) or not isinstance(aux_loss_weight, (int, float)):
            raise ValueError(f"aux_loss_weight={aux_loss_weight!r} deve ser um número >= 0")
        if aux_loss_weight < 0:
            raise ValueError(f"aux_loss_weight={aux_loss_weight} deve ser >= 0")
        self.embed_dim = embed_dim
        self.num_experts = num_experts
        self.top_k = top_k
        self.aux_loss_weight = float(aux_loss_weight)
        self.renormalize = bool(renormalize)
        self.router = nn.Linear(embed_dim, num_experts, bias=False)
        self.experts = nn.ModuleList(
            FeedForward(embed_dim, ff_dim, activation=activation, dropout=dropout, bias=bias)
            for _ in range(num_experts)
        )
        self.ff_dim = self.experts[0].ff_dim
        self.aux_loss: Tensor | None = None
        self.router_probs: Tensor | None = None
        self.expert_indices: Tensor | None = None
        self.expert_weights: Tensor | None = None
        self.tokens_per_expert: Tensor | None = None

    def route(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Roteia ``tokens`` ``(n, d)``: devolve ``(probs (n, N), pesos (n, k), índices (n, k))``.

        Os pesos são as ``k`` maiores probabilidades divididas pela soma delas (somam 1);
        com ``renormalize=False``, as próprias probabilidades.
        """
        logits = self.router(tokens)  # (n, N)
        probs = torch.softmax(logits, dim=-1)  # (n, N), cada linha soma 1
        top_probs, indices = probs.topk(self.top_k, dim=-1)  # (n, k), (n, k)
        if not self.renormalize:
            return probs, top_probs, indices
        weights = top_probs / top_probs.sum(dim=-1, keepdim=True)  # (n, k), renormalizados
        return probs, weights, indices

    def forward(self, x: Tensor) -> Tensor:
        """Aplica a MoE a cada token: ``(b, t, d) -> (b, t, d)`` (aceita ``(..., d)``)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"MoEFeedForward espera um torch.Tensor; recebi {type(x).__name__}")
        if x.dim() < 2 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"MoEFeedForward espera forma (b, t, {self.embed_dim}) (último eixo = "
                f"embed_dim); recebi forma {tuple(x.shape)}"
            )
        shape = x.shape
        tokens = x.reshape(-1, self.embed_dim)  # (n, d), n = b * t
        probs, weights, indices = self.route(tokens)  # (n, N), (n, k), (n, k)

        out = torch.zeros_like(tokens)  # (n, d)
        for e, expert in enumerate(self.experts):
            # Quais tokens escolheram o especialista e, e em qual das k vagas.
            token_idx, slot = (indices == e).nonzero(as_tuple=True)  # (n_e,), (n_e,)
            if token_idx.numel() == 0:
                continue
            expert_out = expert(tokens.index_select(0, token_idx))  # (n_e, d): só os seus
            route_weight = weights[token_idx, slot].unsqueeze(-1)  # (n_e, 1): peso do roteador
            out.index_add_(0, token_idx, expert_out * route_weight)  # devolve cada um ao seu lugar

        self.aux_loss = load_balancing_loss(
            probs, indices, self.num_experts, alpha=self.aux_loss_weight
        )
        k = self.top_k
        self.router_probs = probs.detach().reshape(*shape[:-1], self.num_experts)  # (b, t, N)
        self.expert_indices = indices.detach().reshape(*shape[:-1], k)  # (b, t, k)
        self.expert_weights = weights.detach().reshape(*shape[:-1], k)  # (b, t, k)
        self.tokens_per_expert = torch.bincount(indices.reshape(-1), minlength=self.num_experts)
        return out.reshape(shape)  # (b, t, d)

    def num_active_parameters(self) -> int:
        """Parâmetros usados por UM token: roteador + ``k`` especialistas."""
        router = sum(p.numel() for p in self.router.parameters())
        per_expert = sum(p.numel() for p in self.experts[0].parameters())
        return router + self.top_k * per_expert

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, top_k={self.top_k}, "
            f"aux_loss_weight={self.aux_loss_weight}, renormalize={self.renormalize}"
        )
