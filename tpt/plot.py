"""Gráficos do curso: mapas de atenção, codificação posicional, matrizes e perdas.

Ver notebooks/03_atencao_produto_escalar.ipynb (mapa de atenção),
notebooks/04_atencao_multicabeca.ipynb (grade de cabeças),
notebooks/05_codificacao_posicional.ipynb (codificação posicional),
notebooks/02_embeddings.ipynb (matrizes e similaridade) e
notebooks/08_encoder_decoder.ipynb (curvas de perda).

Todas as funções aceitam tensores do PyTorch (em qualquer dispositivo, com ou sem
gradiente) ou arrays do numpy, DEVOLVEM a ``Figure`` e não chamam ``plt.show()``.
No notebook, termine a célula com ``plt.show()`` para a figura aparecer uma vez só
(e sem a representação em texto da ``Figure`` como saída).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import ScalarFormatter

from tpt.numfmt import to_brazilian

__all__ = [
    "plot_heatmap",
    "plot_attention",
    "plot_attention_heads",
    "plot_positional_encoding",
    "plot_loss_curves",
    "plot_mask",
    "plot_norm_placement",
    "BrazilianFormatter",
    "brazilian_axes",
]

# Larguras máximas (polegadas) para caber numa coluna de notebook.
_MAX_WIDTH = 10.0
_MAX_GRID_WIDTH = 14.0


# --------------------------------------------------------------------------------------
# Auxiliares
# --------------------------------------------------------------------------------------


def _to_numpy(values: Any, name: str) -> np.ndarray:
    """Tensor (qualquer dispositivo, com gradiente) ou array -> ``np.ndarray`` float."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{name} deve ser um tensor ou array numérico; recebi {type(values).__name__}."
        ) from error
    return array


def _squeeze_leading(array: np.ndarray, ndim: int, name: str, hint: str) -> np.ndarray:
    """Remove dimensões iniciais de tamanho 1 até sobrar ``ndim`` dimensões."""
    while array.ndim > ndim and array.shape[0] == 1:
        array = array[0]
    if array.ndim != ndim:
        raise ValueError(f"{name} deve ter formato {hint}; recebi {tuple(array.shape)}.")
    return array


def _display_label(label: Any) -> str:
    """Rótulo visível: quebras de linha e tabs escapados, espaço sozinho vira '␣'."""
    text = str(label).replace("\n", "\\n").replace("\t", "\\t")
    if text and text.strip(" ") == "":
        text = text.replace(" ", "␣")
    return text


def _check_labels(labels: Sequence[Any] | None, size: int, name: str, axis: str) -> list[str]:
    """Valida o número de rótulos; ``None`` vira ``["0", "1", ...]``."""
    if labels is None:
        return [str(i) for i in range(size)]
    if isinstance(labels, str):
        labels = list(labels)  # uma string é lida como uma lista de caracteres
    labels = list(labels)
    if len(labels) != size:
        raise ValueError(
            f"{name} tem {len(labels)} rótulos, mas a matriz tem {size} {axis}; "
            "esperava um rótulo por token."
        )
    return [_display_label(label) for label in labels]


class BrazilianFormatter(ScalarFormatter):
    """Marcas de eixo em pt-BR: ``0,5`` e ``12.000`` em vez de ``0.5`` e ``12000``."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return to_brazilian(super().__call__(x, pos))

    def get_offset(self) -> str:
        return to_brazilian(super().get_offset())


def brazilian_axes(target: Axes | Figure | Any) -> Axes | Figure | Any:
    """Põe ``BrazilianFormatter`` nos eixos x e y (de um eixo, de uma figura ou de uma barra
    de cores) com escala linear. Devolve o próprio objeto. Eixos logarítmicos e de
    categorias (rótulos de tokens) ficam como estão.
    """
    if isinstance(target, Figure):
        for ax in target.axes:
            brazilian_axes(ax)
        return target
    axes = [target.xaxis, target.yaxis] if isinstance(target, Axes) else [target.ax.yaxis]
    for axis in axes:
        if axis.get_scale() == "linear" and isinstance(axis.get_major_formatter(), ScalarFormatter):
            axis.set_major_formatter(BrazilianFormatter())
    return target


def _cell_size(n: int) -> float:
    """Tamanho (polegadas) de um eixo com ``n`` linhas/colunas de tokens."""
    return min(max(0.32 * n + 1.2, 3.0), 7.0)


def _new_axes(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


def _annotate(ax: Axes, matrix: np.ndarray, norm: Normalize, fmt: str) -> None:
    """Escreve o valor de cada célula, em branco ou preto conforme o fundo."""
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            value = matrix[i, j]
            color = "white" if norm(value) < 0.5 else "black"
            text = to_brazilian(format(value, fmt))
            ax.text(j, i, text, ha="center", va="center", color=color, fontsize=8)


# --------------------------------------------------------------------------------------
# Mapa de calor genérico e mapa de atenção
# --------------------------------------------------------------------------------------


def plot_heatmap(
    matrix: Any,
    *,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    xticklabels: Sequence[Any] | None = None,
    yticklabels: Sequence[Any] | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    center: float | None = None,
    colorbar_label: str | None = None,
    annotate: bool = False,
    fmt: str = ".2f",
    ax: Axes | None = None,
) -> Figure:
    """Mapa de calor de uma matriz ``(linhas, colunas)`` com barra de cores.

    Serve para similaridade entre codificações posicionais, matrizes de embedding,
    similaridade de cossenos etc.

    Args:
        matrix: matriz 2-D ``(n, m)`` (dimensões iniciais de tamanho 1 são removidas).
        xlabel, ylabel, title: textos dos eixos e do título.
        xticklabels, yticklabels: um rótulo por coluna / por linha (opcional). Sem
            rótulos, o matplotlib escolhe as marcas numéricas.
        cmap: mapa de cores (ex.: ``"viridis"``; ``"RdBu"`` para valores com sinal).
        vmin, vmax: limites da escala de cores (padrão: mínimo e máximo da matriz).
        center: se dado, a escala fica simétrica em torno dele (bom com ``"RdBu"``).
        colorbar_label: legenda da barra de cores.
        annotate: escreve o valor em cada célula (para matrizes pequenas).
        fmt: formato dos valores escritos (``".2f"``).
        ax: eixo onde desenhar; por padrão cria uma figura nova.

    Returns:
        A ``Figure`` (não chama ``plt.show()``).
    """
    data = _squeeze_leading(_to_numpy(matrix, "matrix"), 2, "matrix", "(n, m)")
    n_rows, n_cols = data.shape
    x_labels = (
        None
        if xticklabels is None
        else _check_labels(xticklabels, n_cols, "xticklabels", "colunas")
    )
    y_labels = (
        None if yticklabels is None else _check_labels(yticklabels, n_rows, "yticklabels", "linhas")
    )
    if center is not None:
        radius = float(np.nanmax(np.abs(data - center))) if data.size else 1.0
        radius = radius or 1.0
        vmin, vmax = center - radius, center + radius

    if ax is None:
        width = min(_cell_size(n_cols) + 1.3, _MAX_WIDTH)
        fig, ax = _new_axes((width, _cell_size(n_rows)))
    else:
        fig = ax.figure
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    colorbar = brazilian_axes(fig.colorbar(image, ax=ax))
    if colorbar_label:
        colorbar.set_label(colorbar_label)
    if x_labels is not None:
        ax.set_xticks(range(n_cols), x_labels, rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(n_rows), y_labels)
    if annotate:
        _annotate(ax, data, image.norm, fmt)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


def plot_attention(
    weights: Any,
    query_labels: Sequence[Any] | None = None,
    key_labels: Sequence[Any] | None = None,
    *,
    title: str = "Pesos de atenção",
    ax: Axes | None = None,
    cmap: str = "viridis",
    annotate: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Figure:
    """Mapa de calor dos pesos de atenção ``(t, s)``: linha i = consulta i.

    As chaves ficam no eixo x e as consultas no eixo y; cada LINHA soma 1 (softmax
    sobre as chaves).

    Args:
        weights: ``(t, s)`` (aceita ``(1, t, s)`` ou ``(1, 1, t, s)``; para várias
            cabeças use :func:`plot_attention_heads`).
        query_labels: ``t`` rótulos (os tokens que perguntam).
        key_labels: ``s`` rótulos; se omitido e ``s == t`` (autoatenção), usa os
            mesmos de ``query_labels``.
        title: título do gráfico.
        ax: eixo onde desenhar (opcional).
        cmap: mapa de cores.
        annotate: escreve o peso em cada célula.
        vmin, vmax: limites da escala de cores (padrão: mínimo e máximo dos pesos). Para
            comparar mapas de modelos diferentes, fixe ``vmin=0, vmax=1`` em todos: a mesma
            cor passa a ser o mesmo peso.
    """
    data = _squeeze_leading(
        _to_numpy(weights, "weights"),
        2,
        "weights",
        "(t, s); para várias cabeças use plot_attention_heads",
    )
    t, s = data.shape
    y_labels, x_labels = _attention_labels(query_labels, key_labels, t, s)
    return plot_heatmap(
        data,
        xlabel="chaves",
        ylabel="consultas",
        title=title,
        xticklabels=x_labels,
        yticklabels=y_labels,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        colorbar_label="peso",
        annotate=annotate,
        ax=ax,
    )


def _attention_labels(
    query_labels: Sequence[Any] | None, key_labels: Sequence[Any] | None, t: int, s: int
) -> tuple[list[str], list[str]]:
    """Valida os rótulos das ``t`` consultas e das ``s`` chaves.

    Sem ``key_labels``, a autoatenção (``s == t``) reaproveita os rótulos das consultas.
    """
    y_labels = _check_labels(query_labels, t, "query_labels", "consultas (linhas)")
    if key_labels is None and query_labels is not None:
        if s != t:
            raise ValueError(
                f"os pesos têm t={t} consultas e s={s} chaves; como s != t, passe "
                "key_labels com um rótulo por chave."
            )
        return y_labels, y_labels
    return y_labels, _check_labels(key_labels, s, "key_labels", "chaves (colunas)")


# --------------------------------------------------------------------------------------
# Grade de cabeças (e camadas)
# --------------------------------------------------------------------------------------


def plot_attention_heads(
    weights: Any,
    query_labels: Sequence[Any] | None = None,
    key_labels: Sequence[Any] | None = None,
    *,
    title: str | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
) -> Figure:
    """Grade de mapas de atenção: linhas = camadas, colunas = cabeças, UMA barra de cores.

    Todas as cabeças usam a mesma escala de cores, para que possam ser comparadas.

    Args:
        weights: ``(h, t, s)`` (uma camada) ou ``(L, h, t, s)``; também aceita uma lista
            com os pesos de cada camada, cada um ``(h, t, s)`` ou ``(1, h, t, s)``.
        query_labels: ``t`` rótulos; key_labels: ``s`` rótulos (padrão: os das
            consultas, se ``s == t``).
        title: título geral (opcional).
        vmin, vmax: limites da escala de cores comum (padrão: de ``min(0, menor peso)`` ao
            maior peso). ``vmin=0, vmax=1`` deixa a grade na mesma escala de um
            :func:`plot_attention` de outro modelo desenhado com os mesmos limites.
    """
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ValueError("weights é uma lista vazia; esperava os pesos de cada camada.")
        layers = [
            _squeeze_leading(_to_numpy(w, f"weights[{i}]"), 3, f"weights[{i}]", "(h, t, s)")
            for i, w in enumerate(weights)
        ]
        shapes = {layer.shape for layer in layers}
        if len(shapes) != 1:
            raise ValueError(f"as camadas têm formatos diferentes: {sorted(shapes)}.")
        data = np.stack(layers)  # (L, h, t, s)
    else:
        data = _to_numpy(weights, "weights")
        if data.ndim == 3:
            data = data[None]  # (1, h, t, s)
        if data.ndim != 4:
            raise ValueError(
                f"weights deve ter formato (h, t, s) ou (L, h, t, s); recebi "
                f"{tuple(data.shape)}. Para um lote (b, h, t, s) passe weights[0]."
            )
    num_layers, num_heads, t, s = data.shape
    y_labels, x_labels = _attention_labels(query_labels, key_labels, t, s)

    panel = min(max(0.25 * max(t, s) + 1.0, 2.0), 3.5)
    width = min(num_heads * panel + 1.0, _MAX_GRID_WIDTH)
    height = num_layers * panel + (0.5 if title else 0.2)
    fig, axes = plt.subplots(
        num_layers,
        num_heads,
        figsize=(width, height),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    finite = data[np.isfinite(data)]
    low = float(finite.min()) if finite.size else 0.0
    norm = Normalize(
        vmin=min(0.0, low) if vmin is None else vmin,
        vmax=(float(finite.max()) if finite.size else 1.0) if vmax is None else vmax,
    )
    image = None
    for layer in range(num_layers):
        for head in range(num_heads):
            ax = axes[layer, head]
            image = ax.imshow(
                data[layer, head], cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"
            )
            if layer == 0:
                ax.set_title(f"cabeça {head + 1}")
            if head == 0:
                prefix = f"camada {layer + 1}\n" if num_layers > 1 else ""
                ax.set_ylabel(prefix + "consultas")
                ax.set_yticks(range(t), y_labels)
            if layer == num_layers - 1:
                ax.set_xlabel("chaves")
                ax.set_xticks(range(s), x_labels, rotation=90)
    brazilian_axes(fig.colorbar(image, ax=axes.ravel().tolist(), label="peso", shrink=0.8))
    if title:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------
# Codificação posicional
# --------------------------------------------------------------------------------------


def plot_positional_encoding(
    pe: Any,
    *,
    title: str = "Codificação posicional senoidal",
    cmap: str = "RdBu",
    ax: Axes | None = None,
) -> Figure:
    """Mapa de calor da tabela de codificação posicional ``(t, d)``.

    Linhas = posições, colunas = dimensões; escala divergente simétrica em torno de 0
    (azul e vermelho para os sinais, branco para 0).
    """
    data = _squeeze_leading(_to_numpy(pe, "pe"), 2, "pe", "(t, d) (posições x dimensões)")
    t, d = data.shape
    if ax is None:
        fig, ax = _new_axes(
            (min(max(0.08 * d + 3.0, 5.0), _MAX_WIDTH), min(max(0.05 * t + 2.0, 3.0), 6.0))
        )
    return plot_heatmap(
        data,
        xlabel="dimensão",
        ylabel="posição",
        title=title,
        cmap=cmap,
        center=0.0,
        colorbar_label="valor",
        ax=ax,
    )


# --------------------------------------------------------------------------------------
# Curvas de perda
# --------------------------------------------------------------------------------------

_STEP_KEYS = ("step", "steps", "passo", "passos")


def _as_float_list(values: Any, name: str) -> list[float]:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist()
    result = []
    for i, value in enumerate(values):
        try:
            result.append(float(value))
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"a curva {name!r} tem um valor não numérico na posição {i}: {value!r}."
            ) from error
    return result


def plot_loss_curves(
    history: Mapping[str, Any] | Sequence[float],
    *,
    title: str = "Curvas de perda",
    xlabel: str = "passo",
    ylabel: str = "perda",
    logy: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Uma curva por nome (ex.: ``{"treino": [...], "validação": [...]}``).

    Formatos aceitos para cada curva:

    * lista de valores: o eixo x é ``1, 2, ..., n`` (ou a lista na chave ``"step"``/
      ``"steps"``/``"passo"``/``"passos"``, se existir e tiver o mesmo tamanho);
    * par ``(passos, valores)``, para curvas medidas só de vez em quando (validação).

    Uma lista simples de números também é aceita (vira a curva ``"perda"``).
    """
    if isinstance(history, Mapping):
        curves = dict(history)
    elif isinstance(history, (str, bytes)):
        raise TypeError("history deve ser um dict nome -> valores ou uma lista de números.")
    else:
        curves = {"perda": history}
    shared_steps = None
    for key in _STEP_KEYS:
        if key in curves:
            shared_steps = _as_float_list(curves.pop(key), key)
            break
    if not curves:
        raise ValueError("history não tem nenhuma curva para desenhar.")

    if ax is None:
        fig, ax = _new_axes((6.0, 3.8))
    else:
        fig = ax.figure
    for name, values in curves.items():
        is_pair = (
            isinstance(values, (tuple, list))
            and len(values) == 2
            and all(isinstance(v, (list, tuple, np.ndarray, torch.Tensor)) for v in values)
        )
        if is_pair:
            steps = _as_float_list(values[0], name)
            ys = _as_float_list(values[1], name)
            if len(steps) != len(ys):
                raise ValueError(
                    f"a curva {name!r} tem {len(steps)} passos e {len(ys)} valores; "
                    "esperava o mesmo número."
                )
        else:
            ys = _as_float_list(values, name)
            if shared_steps is not None and len(shared_steps) == len(ys):
                steps = shared_steps
            else:
                steps = list(range(1, len(ys) + 1))
        marker = "o" if len(ys) <= 30 else None
        ax.plot(steps, ys, label=str(name), marker=marker, markersize=3)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    brazilian_axes(ax)
    return fig


# --------------------------------------------------------------------------------------
# Máscaras booleanas (notebook 06)
# --------------------------------------------------------------------------------------


def plot_mask(
    mask: Any,
    query_labels: Sequence[Any] | None = None,
    key_labels: Sequence[Any] | None = None,
    *,
    title: str = "Máscara de atenção",
    ax: Axes | None = None,
    legend: bool = True,
) -> Figure:
    """Desenha uma máscara booleana ``(t, s)`` na convenção do tpt (``True`` = bloqueado).

    Duas cores só (cinza-escuro = bloqueado, claro = livre) e uma legenda no lugar da
    barra de cores. Linhas = consultas, colunas = chaves, como em :func:`plot_attention`.

    Args:
        mask: tensor ou array booleano ``(t, s)`` (aceita ``(1, t, s)``, ``(1, 1, t, s)``).
        query_labels: ``t`` rótulos; key_labels: ``s`` rótulos (padrão: os das consultas,
            se ``s == t``).
        title: título do gráfico.
        ax: eixo onde desenhar (opcional).
        legend: mostra a legenda das duas cores (desligue nos painéis repetidos).
    """
    if isinstance(mask, torch.Tensor):
        if mask.dtype != torch.bool:
            raise TypeError(
                f"plot_mask espera uma máscara booleana (torch.bool, True = bloqueado); "
                f"recebi dtype {mask.dtype}. Para uma máscara aditiva float use "
                "`mask == float('-inf')`."
            )
        mask = mask.detach().cpu().numpy()
    array = np.asarray(mask)
    if array.dtype != np.bool_:
        raise TypeError(
            f"plot_mask espera uma máscara booleana (True = bloqueado); recebi {array.dtype}."
        )
    data = _squeeze_leading(array.astype(np.float64), 2, "mask", "(t, s)")
    t, s = data.shape
    y_labels, x_labels = _attention_labels(query_labels, key_labels, t, s)
    if ax is None:
        fig, ax = _new_axes((min(_cell_size(s) + 2.2, _MAX_WIDTH), _cell_size(t) + 0.4))
    else:
        fig = ax.figure
    colors = ListedColormap(["#f2f2f2", "#3b3b3b"])  # livre, bloqueado
    ax.imshow(data, cmap=colors, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(s), x_labels, rotation=90)
    ax.set_yticks(range(t), y_labels)
    # Linhas finas entre as células, para contar posições.
    ax.set_xticks(np.arange(-0.5, s, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, t, 1.0), minor=True)
    ax.grid(which="minor", color="#9a9a9a", linewidth=0.4)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("chaves")
    ax.set_ylabel("consultas")
    ax.set_title(title)
    if legend:
        handles = [
            Patch(facecolor="#f2f2f2", edgecolor="gray", label="livre (False)"),
            Patch(facecolor="#3b3b3b", edgecolor="gray", label="bloqueado (True)"),
        ]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    return fig


# --------------------------------------------------------------------------------------
# Onde ficam as normalizações (notebook 07)
# --------------------------------------------------------------------------------------

_BLOCK_COLORS = {
    "norm": "#f6c85f",  # LayerNorm: a peça que muda de lugar
    "sublayer": "#9dc3e6",  # autoatenção e FFN
    "dropout": "#e6e6e6",
    "final": "#fbe3a6",
}


def _layer_elements(norm_first: bool, sublayers: Sequence[str]) -> list[tuple[str, str]]:
    """Elementos de baixo para cima: ``(tipo, rótulo)``; tipo em norm/sublayer/dropout/plus."""
    elements: list[tuple[str, str]] = []
    for name in sublayers:
        if norm_first:
            elements += [("norm", "LayerNorm"), ("sublayer", name), ("dropout", "Dropout")]
            elements += [("plus", "+")]
        else:
            elements += [("sublayer", name), ("dropout", "Dropout"), ("plus", "+")]
            elements += [("norm", "LayerNorm")]
    return elements


def _draw_layer(ax: Axes, norm_first: bool, sublayers: Sequence[str], title: str) -> float:
    """Desenha uma camada em ``ax``; devolve a altura usada (para alinhar as colunas)."""
    from matplotlib.patches import Circle, FancyBboxPatch

    elements = _layer_elements(norm_first, sublayers)
    step = 1.0
    y_input = 0.0
    ys = [y_input + step * (i + 1) for i in range(len(elements))]
    top = ys[-1] + step
    if norm_first:
        top += step  # espaço para a LayerNorm final
    x_mid, x_res, width, height = 0.0, -1.45, 1.9, 0.62
    arrow = dict(arrowstyle="-|>", color="#333333", linewidth=1.1, shrinkA=0, shrinkB=0)

    def stream(y0: float, y1: float) -> None:
        ax.annotate("", xy=(x_mid, y1), xytext=(x_mid, y0), arrowprops=arrow)

    ax.text(x_mid, y_input, "x (entrada da camada)", ha="center", va="center", fontsize=9)
    previous_top = y_input + 0.18
    branch_y = y_input + 0.5 * step  # onde a residual se separa do fluxo
    for (kind, label), y in zip(elements, ys, strict=True):
        if kind == "plus":
            ax.add_patch(Circle((x_mid, y), 0.22, facecolor="white", edgecolor="#333333"))
            ax.text(x_mid, y, "+", ha="center", va="center", fontsize=13)
            stream(previous_top, y - 0.22)
            # A residual: sai do fluxo ANTES da subcamada e entra na soma.
            ax.plot([x_mid, x_res, x_res], [branch_y, branch_y, y], color="#c0392b", linewidth=1.4)
            ax.annotate(
                "",
                xy=(x_mid - 0.22, y),
                xytext=(x_res, y),
                arrowprops={**arrow, "color": "#c0392b", "linewidth": 1.4},
            )
            previous_top = y + 0.22
            branch_y = y + 0.5 * step if norm_first else y + 1.5 * step
        else:
            ax.add_patch(
                FancyBboxPatch(
                    (x_mid - width / 2, y - height / 2),
                    width,
                    height,
                    boxstyle="round,pad=0.02,rounding_size=0.12",
                    facecolor=_BLOCK_COLORS[kind],
                    edgecolor="#333333",
                    linewidth=1.0,
                )
            )
            ax.text(x_mid, y, label, ha="center", va="center", fontsize=9.5)
            stream(previous_top, y - height / 2)
            previous_top = y + height / 2
    y_out = top
    if norm_first:
        y_final = ys[-1] + step * 1.1
        ax.add_patch(
            FancyBboxPatch(
                (x_mid - width / 2, y_final - height / 2),
                width,
                height,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor=_BLOCK_COLORS["final"],
                edgecolor="#333333",
                linewidth=1.0,
                linestyle="--",
            )
        )
        ax.text(x_mid, y_final, "LayerNorm final", ha="center", va="center", fontsize=9.5)
        ax.text(
            x_mid + width / 2 + 0.12,
            y_final,
            "uma vez,\ndepois da\núltima camada",
            ha="left",
            va="center",
            fontsize=8,
            color="#555555",
        )
        stream(previous_top, y_final - height / 2)
        previous_top = y_final + height / 2
        y_out = y_final + step * 0.9
    stream(previous_top, y_out - 0.18)
    ax.text(x_mid, y_out, "saída", ha="center", va="center", fontsize=9)
    ax.text(
        x_res - 0.1,
        ys[0],
        "residual",
        rotation=90,
        ha="right",
        va="bottom",
        fontsize=8,
        color="#c0392b",
    )
    ax.set_xlim(-2.3, 2.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=11)
    return y_out


def plot_norm_placement(
    sublayers: Sequence[str] = ("Autoatenção", "FFN"),
    *,
    titles: tuple[str, str] = (
        "Pós-normalização (artigo, 2017)",
        "Pré-normalização (modelos atuais)",
    ),
) -> Figure:
    """Diagrama lado a lado de uma camada com pós- e com pré-normalização.

    Em cada coluna o fluxo sobe de ``x`` até a saída; a linha vermelha é a conexão
    residual, que sai do fluxo ANTES da subcamada (ela soma a entrada da subcamada) e
    entra no ``+``. O dropout fica na saída da subcamada, antes da soma. Na
    pré-normalização, a ``LayerNorm final`` (tracejada) aparece uma vez só, depois da
    última camada da pilha. Ver notebooks/07_blocos.ipynb.
    """
    if isinstance(sublayers, str) or len(sublayers) < 1:
        raise ValueError(
            f"sublayers deve ser uma sequência com os nomes das subcamadas, como "
            f"('Autoatenção', 'FFN'); recebi {sublayers!r}"
        )
    if len(titles) != 2:
        raise ValueError(f"titles deve ter dois textos (pós e pré); recebi {titles!r}")
    rows = 4 * len(sublayers) + 3
    fig, axes = plt.subplots(1, 2, figsize=(9.0, min(0.55 * rows + 1.0, 9.0)), layout="constrained")
    heights = [
        _draw_layer(ax, norm_first, list(sublayers), title)
        for ax, norm_first, title in zip(axes, (False, True), titles, strict=True)
    ]
    for ax in axes:
        ax.set_ylim(-0.6, max(heights) + 0.6)  # a mesma escala nas duas colunas
    return fig
