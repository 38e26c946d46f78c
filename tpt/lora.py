"""LoRA do zero: ``W + (α/r)·B·A``, com só ``A`` e ``B`` treináveis.

Ver notebooks/12_ajuste_fino.ipynb.

A LoRA (*Low-Rank Adaptation*, Hu et al., 2021) congela o peso ``W (d_out, d_in)`` de uma
linear e treina só uma correção de posto baixo ``ΔW = (α/r)·B·A``, com
``A (r, d_in)`` e ``B (d_out, r)``, ``r`` muito menor que ``d_in`` e ``d_out``:

- ``B`` começa em **zero**: no início ``ΔW = 0`` e o modelo dá exatamente as mesmas
  saídas de antes; ``A`` começa sorteado (``kaiming_uniform_``, como no ``peft``), senão
  o gradiente de ``B`` também seria zero e nada andaria;
- o ``forward`` calcula ``x Wᵀ + b + (α/r)·(x Aᵀ) Bᵀ`` **sem formar** ``W + B·A``: a
  correção custa ``r·(d_in + d_out)`` multiplicações por token, e a matriz ``(d_out, d_in)``
  da soma nunca existe;
- o otimizador só guarda estado (os momentos do Adam) para ``A`` e ``B``;
- depois do treino, ``merge_lora`` soma ``ΔW`` em ``W`` (a inferência volta a custar o
  mesmo de uma linear comum) e ``unmerge_lora`` desfaz a soma.

A projeção fundida ``qkv_proj`` do tpt empilha as linhas ``[W_Q | W_K | W_V]``. Para
adaptar só Q e V (o que o ``peft`` faz com ``target_modules=["q_proj", "v_proj"]``), o
``LoRALinear`` aceita **fatias**: cada fatia é um intervalo de linhas da saída com o seu
próprio par ``A, B``. ``add_lora(model, targets=("q", "v"))`` põe no lugar de cada
``qkv_proj`` um ``LoRALinear`` com as fatias ``"q"`` e ``"v"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.attention import MultiHeadAttention

__all__ = [
    "LORA_TARGETS",
    "LoRALinear",
    "add_lora",
    "merge_lora",
    "unmerge_lora",
    "lora_parameters",
    "lora_targets",
]

#: Alvos aceitos por ``add_lora``, com o que cada um adapta em cada camada.
LORA_TARGETS = {
    "q": "linhas de W_Q em self_attn.qkv_proj",
    "k": "linhas de W_K em self_attn.qkv_proj",
    "v": "linhas de W_V em self_attn.qkv_proj",
    "qkv_proj": "self_attn.qkv_proj inteira (um par A, B para Q, K e V juntas)",
    "out_proj": "self_attn.out_proj, a projeção de saída da atenção",
    "linear1": "ffn.linear1 (a porta, gate_proj, na SwiGLU; a primeira linear na GELU/ReLU)",
    "linear3": "ffn.linear3 (up_proj; só na SwiGLU)",
    "linear2": "ffn.linear2 (down_proj, a linear de saída da FFN)",
}
_QKV_SLICES = ("q", "k", "v")


def _check_rank_alpha(rank: object, alpha: object, dropout: object) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank={rank!r} deve ser um inteiro >= 1 (o posto r de B·A)")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"alpha={alpha!r} deve ser um número positivo (a escala é alpha / rank)")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise ValueError(f"dropout={dropout!r} deve ser um número em [0, 1)")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout={dropout} deve estar em [0, 1)")


class LoRALinear(nn.Linear):
    """Uma ``nn.Linear`` congelada mais correções de posto baixo por fatia de linhas.

    ``(..., d_in) -> (..., d_out)``: ``y = x Wᵀ + b`` e, para cada fatia ``[start, end)``
    de ``slices``, ``y[..., start:end] += (α/r)·(dropout(x) Aᵀ) Bᵀ``.

    Args:
        in_features, out_features, bias: os de ``nn.Linear`` (``weight`` e ``bias`` são o
            peso de base, com os mesmos nomes no ``state_dict``).
        rank: o posto ``r`` (>= 1), o mesmo para todas as fatias.
        alpha: a escala ``α``; a correção é multiplicada por ``scaling = α / r``.
        slices: ``{nome: (start, end)}``, intervalos de linhas da saída, sem sobreposição;
            padrão ``{"all": (0, out_features)}`` (a matriz inteira).
        dropout: dropout aplicado à entrada da correção (``lora_dropout`` do ``peft``).

    Parâmetros novos: ``lora_A[nome]`` ``(r, d_in)`` e ``lora_B[nome]`` ``(end - start, r)``,
    este com zeros. Atributo ``merged``: ``True`` depois de ``merge()`` (então ``weight``
    já contém ``ΔW`` e o forward é o de uma linear comum).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        alpha: float,
        *,
        bias: bool = True,
        slices: dict[str, tuple[int, int]] | None = None,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        _check_rank_alpha(rank, alpha, dropout)
        slices = {"all": (0, out_features)} if slices is None else dict(slices)
        _check_slices(slices, out_features)
        self.rank = rank
        self.alpha = float(alpha)
        self.scaling = self.alpha / rank
        self.slices = slices
        self.lora_dropout = nn.Dropout(dropout)
        self.merged = False
        self.lora_A = nn.ParameterDict()
        self.lora_B = nn.ParameterDict()
        factory = dict(device=self.weight.device, dtype=self.weight.dtype)
        for name, (start, end) in slices.items():
            a = torch.empty(rank, in_features, **factory)
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))  # a do nn.Linear e do peft
            self.lora_A[name] = nn.Parameter(a)
            self.lora_B[name] = nn.Parameter(torch.zeros(end - start, rank, **factory))

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        rank: int,
        alpha: float,
        *,
        slices: dict[str, tuple[int, int]] | None = None,
        dropout: float = 0.0,
    ) -> LoRALinear:
        """Um ``LoRALinear`` com o peso e o viés de ``linear`` (mesmo device e dtype)."""
        if not isinstance(linear, nn.Linear) or isinstance(linear, LoRALinear):
            raise TypeError(
                f"from_linear espera uma nn.Linear sem LoRA; recebi {type(linear).__name__}"
            )
        w = linear.weight
        new = cls(
            linear.in_features,
            linear.out_features,
            rank,
            alpha,
            bias=linear.bias is not None,
            slices=slices,
            dropout=dropout,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            new.weight.copy_(w)
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
        new.weight.requires_grad_(w.requires_grad)
        if new.bias is not None:
            new.bias.requires_grad_(linear.bias.requires_grad)
        new.train(linear.training)
        return new

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d_in) -> (..., d_out)``, sem formar ``W + ΔW`` (se não estiver fundido)."""
        y = F.linear(x, self.weight, self.bias)  # (..., d_out)
        if self.merged:
            return y
        h = self.lora_dropout(x)  # (..., d_in)
        parts, cursor = [], 0
        for name, (start, end) in sorted(self.slices.items(), key=lambda item: item[1]):
            if start > cursor:
                parts.append(y[..., cursor:start])  # linhas sem correção
            down = F.linear(h, self.lora_A[name])  # (..., r): x Aᵀ
            up = F.linear(down, self.lora_B[name])  # (..., end - start): (x Aᵀ) Bᵀ
            parts.append(y[..., start:end] + self.scaling * up)
            cursor = end
        if cursor < self.out_features:
            parts.append(y[..., cursor:])
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)  # (..., d_out)

    def delta_weight(self, name: str | None = None) -> Tensor:
        """``ΔW``: ``(d_out, d_in)`` com ``(α/r)·B·A`` nas linhas de cada fatia (zeros fora).

        Com ``name``, só o bloco ``(end - start, d_in)`` dessa fatia. Esta matriz só é
        formada aqui e em ``merge``/``unmerge``, nunca no ``forward``.
        """
        if name is not None:
            if name not in self.slices:
                raise KeyError(f"fatia {name!r} inexistente; fatias: {', '.join(self.slices)}")
            return self.scaling * (self.lora_B[name] @ self.lora_A[name])
        delta = torch.zeros_like(self.weight)
        for key, (start, end) in self.slices.items():
            delta[start:end] = self.scaling * (self.lora_B[key] @ self.lora_A[key])
        return delta

    @torch.no_grad()
    def merge(self) -> None:
        """``W <- W + ΔW``; depois disso o forward é o de uma linear comum."""
        if self.merged:
            raise RuntimeError("este LoRALinear já está fundido (merge foi chamado antes)")
        for name, (start, end) in self.slices.items():
            self.weight[start:end] += self.delta_weight(name)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """``W <- W - ΔW``: desfaz ``merge`` (igual até o arredondamento da soma)."""
        if not self.merged:
            raise RuntimeError("este LoRALinear não está fundido: nada a desfazer")
        for name, (start, end) in self.slices.items():
            self.weight[start:end] -= self.delta_weight(name)
        self.merged = False

    def extra_repr(self) -> str:
        slices = ", ".join(f"{k}={s}:{e}" for k, (s, e) in self.slices.items())
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha:g}, slices=[{slices}]"


def _check_slices(slices: dict[str, tuple[int, int]], out_features: int) -> None:
    if not slices:
        raise ValueError("slices vazio: indique ao menos uma fatia {nome: (início, fim)}")
    spans = []
    for name, span in slices.items():
        ok = isinstance(span, (tuple, list)) and len(span) == 2
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
        if not ok or not 0 <= span[0] < span[1] <= out_features:
            raise ValueError(
                f"fatia {name!r}={span!r} inválida: use (início, fim) inteiros com "
                f"0 <= início < fim <= out_features={out_features}"
            )
        spans.append((span[0], span[1], name))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise ValueError(f"as fatias {first!r} e {second!r} se sobrepõem")


# --------------------------------------------------------------------------------------
# No modelo inteiro
# --------------------------------------------------------------------------------------
def _body(model: nn.Module):
    """O ``tpt.GPT`` de ``model`` (ele mesmo ou o corpo de um ``GPTClassifier``)."""
    from tpt.classifier import GPTClassifier
    from tpt.model import GPT

    if isinstance(model, GPTClassifier):
        return model.gpt
    if isinstance(model, GPT):
        return model
    raise TypeError(
        f"a LoRA do tpt se aplica a um tpt.GPT ou tpt.GPTClassifier; recebi {type(model).__name__}"
    )


def _lora_modules(model: nn.Module) -> list[LoRALinear]:
    return [m for m in model.modules() if isinstance(m, LoRALinear)]


def _check_targets(targets: object, swiglu: bool) -> tuple[str, ...]:
    if isinstance(targets, str):
        targets = (targets,)
    if not isinstance(targets, Iterable):
        raise TypeError(f"targets deve ser uma lista de nomes; recebi {type(targets).__name__}")
    targets = tuple(targets)
    if not targets:
        raise ValueError(f"targets está vazio; alvos válidos: {', '.join(LORA_TARGETS)}")
    for name in targets:
        if name not in LORA_TARGETS:
            raise ValueError(
                f"alvo {name!r} inexistente; alvos válidos: {', '.join(LORA_TARGETS)} "
                "(q, k e v são as fatias da projeção fundida qkv_proj)"
            )
    repeated = sorted({n for n in targets if targets.count(n) > 1})
    if repeated:
        raise ValueError(f"alvos repetidos em targets: {', '.join(repeated)}")
    if "qkv_proj" in targets and any(n in targets for n in _QKV_SLICES):
        raise ValueError(
            "targets tem 'qkv_proj' (a matriz fundida inteira) e também fatias 'q'/'k'/'v' "
            "dela: escolha um dos dois"
        )
    if "linear3" in targets and not swiglu:
        raise ValueError("alvo 'linear3' só existe na FFN SwiGLU (activation='swiglu')")
    return targets


def lora_targets(model: nn.Module) -> tuple[str, ...]:
    """Os alvos de ``add_lora`` presentes em ``model``, na ordem de ``LORA_TARGETS``."""
    found: set[str] = set()
    for layer in _body(model).layers:
        if isinstance(layer.self_attn.qkv_proj, LoRALinear):
            found.update(layer.self_attn.qkv_proj.slices)  # "q", "k", "v" ou "qkv_proj"
        if isinstance(layer.self_attn.out_proj, LoRALinear):
            found.add("out_proj")
        for name in ("linear1", "linear3", "linear2"):
            if isinstance(getattr(layer.ffn, name, None), LoRALinear):
                found.add(name)
    return tuple(name for name in LORA_TARGETS if name in found)


def _qkv_slices(attn: MultiHeadAttention, names: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    d, kv = attn.embed_dim, attn.kv_dim
    spans = {"q": (0, d), "k": (d, d + kv), "v": (d + kv, d + 2 * kv)}
    return {name: spans[name] for name in names}


def add_lora(
    model: nn.Module,
    rank: int = 8,
    alpha: float = 16,
    targets: Iterable[str] = ("q", "v"),
    *,
    dropout: float = 0.0,
    modules_to_save: Iterable[str] | None = None,
) -> nn.Module:
    """Põe LoRA nas projeções ``targets`` de cada camada e congela o resto; devolve ``model``.

    ``model``: um ``tpt.GPT`` ou ``tpt.GPTClassifier``, modificado no lugar. ``targets``
    (ver ``LORA_TARGETS``): ``"q"``, ``"k"``, ``"v"`` (fatias de ``qkv_proj``, cada uma
    com o seu par ``A, B``; com GQA, K e V têm ``h_kv·d_h`` linhas), ``"qkv_proj"`` (a
    matriz fundida inteira, um par só), ``"out_proj"``, ``"linear1"``, ``"linear3"`` e
    ``"linear2"``. Cada linear adaptada vira um ``LoRALinear`` com o mesmo peso: como
    ``B = 0``, as saídas não mudam.

    Todos os parâmetros do modelo ficam com ``requires_grad=False``, menos os ``A`` e ``B``
    e os dos submódulos de ``modules_to_save`` (nomes de ``named_modules``). Padrão:
    ``("score",)`` num ``GPTClassifier`` (a cabeça nova treina junto, como no ``peft``
    com ``task_type="SEQ_CLS"``) e nada num ``GPT``.
    """
    from tpt.classifier import GPTClassifier

    body = _body(model)
    c = body.config
    _check_rank_alpha(rank, alpha, dropout)
    if c.num_experts is not None:
        raise ValueError(
            f"num_experts={c.num_experts}: add_lora não adapta a mistura de especialistas"
        )
    if _lora_modules(model):
        raise ValueError("o modelo já tem LoRA: add_lora só pode ser chamado uma vez")
    targets = _check_targets(targets, c.activation == "swiglu")
    if modules_to_save is None:
        modules_to_save = ("score",) if isinstance(model, GPTClassifier) else ()
    if isinstance(modules_to_save, str):
        modules_to_save = (modules_to_save,)
    modules = dict(model.named_modules())
    for name in modules_to_save:
        if name not in modules or name == "":
            raise ValueError(f"modules_to_save: o modelo não tem o submódulo {name!r}")

    options = dict(dropout=dropout)
    slices = tuple(n for n in _QKV_SLICES if n in targets)
    for layer in body.layers:
        attn = layer.self_attn
        if slices:
            attn.qkv_proj = LoRALinear.from_linear(
                attn.qkv_proj, rank, alpha, slices=_qkv_slices(attn, slices), **options
            )
        if "qkv_proj" in targets:
            out = attn.qkv_proj.out_features
            attn.qkv_proj = LoRALinear.from_linear(
                attn.qkv_proj, rank, alpha, slices={"qkv_proj": (0, out)}, **options
            )
        if "out_proj" in targets:
            attn.out_proj = LoRALinear.from_linear(attn.out_proj, rank, alpha, **options)
        for name in ("linear1", "linear3", "linear2"):
            if name in targets:
                linear = getattr(layer.ffn, name)
                setattr(layer.ffn, name, LoRALinear.from_linear(linear, rank, alpha, **options))
    _freeze(model, modules_to_save)
    return model


def _freeze(model: nn.Module, modules_to_save: Iterable[str]) -> None:
    """Só os ``A``, ``B`` e os parâmetros de ``modules_to_save`` ficam treináveis."""
    for p in model.parameters():
        p.requires_grad_(False)
    for p in lora_parameters(model):
        p.requires_grad_(True)
    modules = dict(model.named_modules())
    for name in modules_to_save:
        for p in modules[name].parameters():
            p.requires_grad_(True)


def _require_lora(model: nn.Module, what: str) -> list[LoRALinear]:
    layers = _lora_modules(model)
    if not layers:
        raise ValueError(f"{what}: o modelo não tem LoRA (use add_lora antes)")
    return layers


def merge_lora(model: nn.Module) -> nn.Module:
    """Soma ``ΔW = (α/r)·B·A`` no peso de cada ``LoRALinear``; devolve ``model``.

    Depois disso o forward é o de um modelo comum (sem o custo da correção) e dá as
    mesmas saídas até o arredondamento. ``unmerge_lora`` desfaz.
    """
    layers = _require_lora(model, "merge_lora")
    if any(m.merged for m in layers):
        raise ValueError("merge_lora: o modelo já está fundido (use unmerge_lora para desfazer)")
    for m in layers:
        m.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    """Subtrai ``ΔW`` de volta do peso de cada ``LoRALinear``; devolve ``model``."""
    layers = _require_lora(model, "unmerge_lora")
    if not all(m.merged for m in layers):
        raise ValueError("unmerge_lora: o modelo não está fundido (chame merge_lora antes)")
    for m in layers:
        m.unmerge()
    return model


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Todos os ``A`` e ``B`` de ``model``, na ordem de ``named_parameters``.

    Para um otimizador só da LoRA: ``torch.optim.AdamW(lora_parameters(model))``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"lora_parameters espera um nn.Module; recebi {type(model).__name__}")
    wanted = (["lora_A"], ["lora_B"])  # nomes "...lora_A.<fatia>" e "...lora_B.<fatia>"
    return [p for name, p in model.named_parameters() if name.split(".")[-2:-1] in wanted]
