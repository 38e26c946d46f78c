"""Máscaras de atenção: causal, de preenchimento, janela deslizante e a combinação delas.

Ver notebooks/06_mascaras.ipynb.

A convenção do tpt é UMA só, em todo o pacote:

* máscaras são tensores ``torch.bool``;
* ``True`` = BLOQUEADO: aquela posição NÃO pode ser atendida.

É a mesma convenção de ``nn.MultiheadAttention``/``nn.Transformer`` e de
``scores.masked_fill(mask, float("-inf"))``. Cuidado: ``F.scaled_dot_product_attention``
usa a convenção oposta (``True`` = pode atender); por isso o caminho rápido do tpt
passa ``~mask`` para ela.

Formatos aceitos:

* ``attn_mask``: ``(t, s)``, ``(b, t, s)`` ou ``(b, h, t, s)`` (dimensões iguais a 1
  são expandidas por broadcasting);
* ``key_padding_mask``: ``(b, s)``, com ``True`` onde a chave é ``<pad>``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "sliding_window_mask",
    "padding_mask",
    "merge_masks",
    "check_attn_mask",
    "check_key_padding_mask",
]


# --------------------------------------------------------------------------------------
# Construção das máscaras
# --------------------------------------------------------------------------------------
def causal_mask(
    t: int, s: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Máscara causal ``(t, s)``: ``True`` (bloqueado) nas chaves do futuro.

    Com ``s == t`` é o triângulo superior estrito: a consulta ``i`` vê as chaves
    ``0..i``. Com ``s > t`` (por exemplo, ``s - t`` posições já guardadas num cache),
    as ``t`` consultas são as ÚLTIMAS ``t`` posições da sequência: a consulta ``i``
    está na posição absoluta ``i + (s - t)`` e vê as chaves ``0..i + (s - t)``.
    """
    s = t if s is None else s
    if t < 0 or s < 0:
        raise ValueError(f"causal_mask: t={t} e s={s} precisam ser >= 0.")
    if s < t:
        raise ValueError(
            f"causal_mask: s={s} é menor que t={t}; as consultas são as últimas t "
            f"posições das s chaves, então é preciso s >= t."
        )
    blocked = torch.ones(t, s, dtype=torch.bool, device=device)  # (t, s)
    # Bloqueia a chave j para a consulta i quando j > i + (s - t).
    return blocked.triu(diagonal=s - t + 1)  # (t, s)


def sliding_window_mask(
    t: int,
    window: int,
    s: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Máscara causal com janela deslizante (atenção local) ``(t, s)``: ``True`` = bloqueado.

    A consulta na posição absoluta ``p`` vê só as ``window`` chaves mais recentes,
    ``p - window + 1 .. p`` (ela mesma incluída): o futuro fica bloqueado, como em
    :func:`causal_mask`, e o passado distante também. Com ``window >= s`` é igual à
    máscara causal. As posições seguem :func:`causal_mask`: com ``s > t`` as consultas
    são as últimas ``t`` posições (``p = i + (s - t)``).
    """
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(
            f"sliding_window_mask: window deve ser um inteiro >= 1 (quantas chaves cada "
            f"consulta vê, ela mesma incluída), mas recebeu {window!r}."
        )
    if window < 1:
        raise ValueError(
            f"sliding_window_mask: window={window}, mas precisa ser >= 1 (com window=1 "
            f"cada token vê só a si mesmo)."
        )
    future = causal_mask(t, s, device=device)  # (t, s): as chaves do futuro
    s = future.shape[-1]
    # Bloqueia também a chave j quando j <= p - window, com p = i + (s - t).
    too_old = torch.ones(t, s, dtype=torch.bool, device=future.device).tril(
        diagonal=s - t - window
    )  # (t, s)
    return future | too_old  # (t, s)


def padding_mask(
    lengths: Tensor | Sequence[int],
    t: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Máscara de preenchimento ``(b, t)``: ``True`` onde a posição é ``>= lengths[b]``.

    ``lengths`` tem forma ``(b,)`` e dá o comprimento real de cada sequência de um lote
    preenchido à direita. ``t`` é o comprimento do lote (padrão: o maior comprimento).
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1:
        raise ValueError(
            f"padding_mask: lengths deve ter forma (b,), mas tem forma {tuple(lengths.shape)}."
        )
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(
            f"padding_mask: lengths deve conter inteiros, mas tem dtype {lengths.dtype}."
        )
    if lengths.numel() > 0 and int(lengths.min()) < 0:
        raise ValueError(f"padding_mask: comprimentos negativos em lengths={lengths.tolist()}.")
    longest = int(lengths.max()) if lengths.numel() > 0 else 0
    t = longest if t is None else t
    if longest > t:
        raise ValueError(
            f"padding_mask: há um comprimento {longest} maior que t={t}; "
            f"use t >= {longest} (ou trunque as sequências antes)."
        )
    positions = torch.arange(t, device=lengths.device)  # (t,)
    return positions[None, :] >= lengths[:, None]  # (b, t)


def merge_masks(
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    t: int | None = None,
    s: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor | None:
    """Junta ``attn_mask``, ``key_padding_mask`` e a máscara causal numa só.

    Uma posição fica bloqueada se QUALQUER uma das máscaras a bloquear (``OU`` lógico).
    O resultado é booleano e faz broadcasting para ``(b, h, t, s)``:

    * ``attn_mask`` ``(t, s)`` vira ``(1, 1, t, s)``; ``(b, t, s)`` vira ``(b, 1, t, s)``;
    * ``key_padding_mask`` ``(b, s)`` vira ``(b, 1, 1, s)``;
    * ``is_causal=True`` acrescenta ``causal_mask(t, s)`` como ``(1, 1, t, s)``.

    Devolve ``None`` quando não há máscara nenhuma. Com ``is_causal=True`` é preciso
    informar ``t`` (o comprimento das consultas); ``s`` é deduzido das máscaras quando
    omitido (ou vale ``t``).
    """
    merged: Tensor | None = None

    if attn_mask is not None:
        _check_bool(attn_mask, "attn_mask")
        if attn_mask.dim() not in (2, 3, 4):
            raise ValueError(
                f"attn_mask deve ter forma (t, s), (b, t, s) ou (b, h, t, s), "
                f"mas tem forma {tuple(attn_mask.shape)}."
            )
        while attn_mask.dim() < 4:
            # (t, s) -> (1, 1, t, s); (b, t, s) -> (b, 1, t, s)
            attn_mask = attn_mask.unsqueeze(-3 if attn_mask.dim() == 3 else 0)
        merged = attn_mask  # (b|1, h|1, t, s)

    if key_padding_mask is not None:
        _check_bool(key_padding_mask, "key_padding_mask")
        if key_padding_mask.dim() != 2:
            raise ValueError(
                f"key_padding_mask deve ter forma (b, s), mas tem forma "
                f"{tuple(key_padding_mask.shape)}."
            )
        kpm = key_padding_mask[:, None, None, :]  # (b, 1, 1, s)
        merged = kpm if merged is None else merged | kpm  # (b, h|1, t|1, s)

    if is_causal:
        if t is None:
            raise ValueError(
                "merge_masks: com is_causal=True informe t (o comprimento das consultas)."
            )
        if s is None:
            s = merged.shape[-1] if merged is not None else t
        if device is None and merged is not None:
            device = merged.device
        causal = causal_mask(t, s, device=device)[None, None]  # (1, 1, t, s)
        merged = causal if merged is None else merged | causal  # (b|1, h|1, t, s)

    return merged


# --------------------------------------------------------------------------------------
# Validação (mensagens claras em vez de resultados errados em silêncio)
# --------------------------------------------------------------------------------------
def _check_bool(mask: Tensor, name: str) -> None:
    """Exige um tensor ``torch.bool``; explica a convenção do tpt caso contrário."""
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"{name} deve ser um torch.Tensor booleano, mas recebeu {type(mask).__name__}."
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} tem dtype {mask.dtype}, mas o tpt usa máscaras booleanas (torch.bool) "
            f"com True = bloqueado (a posição NÃO pode ser atendida), como nn.MultiheadAttention. "
            f"Para converter uma máscara aditiva float (0 = livre, -inf = bloqueado), use "
            f"`mask == float('-inf')`; para uma máscara 0/1 em que 1 = bloqueado, "
            f"use `mask.bool()`."
        )


def _inverted_hint(name: str) -> str:
    return (
        f"{name} parece estar com a convenção invertida. No tpt, True = bloqueado; "
        f"talvez você tenha passado a convenção de F.scaled_dot_product_attention "
        f"(True = pode atender). Use `~mask` para inverter."
    )


def check_attn_mask(
    mask: Tensor | None,
    t: int,
    s: int,
    *,
    batch_size: int | None = None,
    num_heads: int | None = None,
    self_attention: bool = True,
) -> None:
    """Valida ``attn_mask``: booleana, forma ``(t, s)``, ``(b, t, s)`` ou ``(b, h, t, s)``.

    Dimensões iguais a 1 são aceitas (broadcasting). ``batch_size`` e ``num_heads``,
    quando informados, também são conferidos. Levanta ``TypeError`` para dtype não
    booleano e ``ValueError`` para forma errada ou, na autoatenção
    (``self_attention=True``), para uma máscara quadrada cuja diagonal está toda
    bloqueada (sinal de convenção invertida). Na atenção cruzada a diagonal não tem
    significado especial e não é conferida.
    """
    if mask is None:
        return
    _check_bool(mask, "attn_mask")
    expected = [t, s]
    if mask.dim() >= 3:
        expected.insert(0, batch_size if batch_size is not None else "b")
    if mask.dim() == 4:
        expected.insert(1, num_heads if num_heads is not None else "h")
    expected_text = "(" + ", ".join(str(e) for e in expected) + ")"
    if mask.dim() not in (2, 3, 4):
        raise ValueError(
            f"attn_mask tem forma {tuple(mask.shape)}, mas deveria ter forma ({t}, {s}), "
            f"(b, {t}, {s}) ou (b, h, {t}, {s})."
        )
    for got, want in zip(mask.shape, expected, strict=True):
        if isinstance(want, int) and got not in (want, 1):
            raise ValueError(
                f"attn_mask tem forma {tuple(mask.shape)}, mas deveria ter forma {expected_text} "
                f"(t = comprimento das consultas, s = comprimento das chaves)."
            )
    if self_attention and t == s and mask.shape[-2:] == (t, s) and t > 0:
        diagonal = mask.diagonal(dim1=-2, dim2=-1)  # (..., t)
        if bool(diagonal.all(dim=-1).any()):
            raise ValueError(
                "attn_mask bloqueia a diagonal inteira (nenhum token pode ver a si mesmo). "
                + _inverted_hint("attn_mask")
            )


def check_key_padding_mask(mask: Tensor | None, b: int, s: int) -> None:
    """Valida ``key_padding_mask``: booleana, forma ``(b, s)``, nenhuma linha toda ``True``.

    Uma linha inteira ``True`` significaria uma sequência só de ``<pad>``, o que quase
    sempre indica a convenção invertida (``True`` = token real).
    """
    if mask is None:
        return
    _check_bool(mask, "key_padding_mask")
    if tuple(mask.shape) != (b, s):
        raise ValueError(
            f"key_padding_mask tem forma {tuple(mask.shape)}, mas deveria ter forma ({b}, {s}) "
            f"(b = tamanho do lote, s = comprimento das chaves, incluindo as que estão no cache)."
        )
    if s > 0:
        all_pad = mask.all(dim=-1)  # (b,)
        if bool(all_pad.any()):
            rows = all_pad.nonzero().flatten().tolist()
            raise ValueError(
                f"key_padding_mask tem linha(s) {rows} inteiramente True: nenhuma chave "
                f"visível. Ou essas sequências estão vazias (só <pad>; retire-as do lote), "
                f"ou a máscara está invertida. "
                + _inverted_hint("key_padding_mask")
            )
