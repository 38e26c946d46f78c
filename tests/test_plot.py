"""Testes de tpt.plot (backend Agg: nenhuma janela é aberta)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tpt.plot import (  # noqa: E402
    plot_attention,
    plot_attention_heads,
    plot_heatmap,
    plot_loss_curves,
    plot_positional_encoding,
)

TOKENS = ["João", " pensou", ":", " o", " trem"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _labels(ticklabels) -> list[str]:
    return [label.get_text() for label in ticklabels]


def _softmax_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).softmax(dim=-1)


def test_plot_attention_labels_and_colorbar():
    weights = _softmax_weights(5, 5).requires_grad_()  # com gradiente: precisa de detach
    fig = plot_attention(weights, TOKENS)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # mapa + barra de cores
    ax = fig.axes[0]
    assert _labels(ax.get_xticklabels()) == TOKENS  # chaves no eixo x
    assert _labels(ax.get_yticklabels()) == TOKENS  # consultas no eixo y
    assert ax.get_xlabel() == "chaves" and ax.get_ylabel() == "consultas"
    assert ax.get_title() == "Pesos de atenção"
    image = ax.get_images()[0].get_array()
    np.testing.assert_allclose(image, weights.detach().numpy(), rtol=0, atol=1e-7)  # float32


def test_plot_attention_cross_attention_and_existing_axes():
    weights = _softmax_weights(3, 5).numpy()
    queries = ["mil", "duzentos", "<eos>"]
    fig, ax = plt.subplots()
    returned = plot_attention(weights, queries, TOKENS, title="Atenção cruzada", ax=ax)
    assert returned is fig
    assert _labels(ax.get_xticklabels()) == TOKENS
    assert _labels(ax.get_yticklabels()) == queries
    assert ax.get_title() == "Atenção cruzada"
    # (1, 1, t, s), como sai de um lote com uma cabeça, também é aceito
    fig2 = plot_attention(torch.from_numpy(weights)[None, None], queries, TOKENS)
    assert fig2.axes[0].get_images()[0].get_array().shape == (3, 5)


def test_plot_attention_wrong_label_count():
    weights = _softmax_weights(5, 5)
    with pytest.raises(ValueError, match=r"query_labels tem 4 rótulos, mas a matriz tem 5"):
        plot_attention(weights, TOKENS[:4])
    with pytest.raises(ValueError, match=r"key_labels tem 3 rótulos, mas a matriz tem 5"):
        plot_attention(weights, TOKENS, TOKENS[:3])
    with pytest.raises(ValueError, match=r"t=3 consultas e s=5 chaves.*key_labels"):
        plot_attention(_softmax_weights(3, 5), TOKENS[:3])
    with pytest.raises(ValueError, match=r"weights deve ter formato \(t, s\).*\(2, 5, 5\)"):
        plot_attention(_softmax_weights(2, 5, 5), TOKENS)


def test_plot_attention_whitespace_labels_are_visible():
    fig = plot_attention(_softmax_weights(3, 3), ["a", " ", "\n"])
    assert _labels(fig.axes[0].get_xticklabels()) == ["a", "␣", "\\n"]


@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 4, 5, 5)])
def test_plot_attention_heads_grid_with_one_colorbar(shape):
    weights = _softmax_weights(*shape)
    fig = plot_attention_heads(weights, TOKENS, title="Cabeças")
    num_layers, num_heads = (1, shape[0]) if len(shape) == 3 else shape[:2]
    assert isinstance(fig, Figure)
    assert len(fig.axes) == num_layers * num_heads + 1  # painéis + UMA barra de cores
    first = fig.axes[0]
    assert first.get_title() == "cabeça 1"
    assert _labels(first.get_yticklabels()) == TOKENS
    bottom_left = fig.axes[(num_layers - 1) * num_heads]
    assert _labels(bottom_left.get_xticklabels()) == TOKENS
    # todas as cabeças usam a mesma escala de cores
    limits = {image.get_clim() for ax in fig.axes for image in ax.get_images()}
    assert len(limits) == 1
    assert fig.get_suptitle() == "Cabeças"


def test_plot_attention_heads_accepts_a_list_of_layers():
    layers = [_softmax_weights(1, 2, 5, 5, seed=i) for i in range(3)]  # (1, h, t, s) cada
    fig = plot_attention_heads(layers, TOKENS)
    assert len(fig.axes) == 3 * 2 + 1
    assert fig.axes[2].get_ylabel() == "camada 2\nconsultas"
    with pytest.raises(ValueError, match=r"query_labels tem 2 rótulos, mas a matriz tem 5"):
        plot_attention_heads(layers, TOKENS[:2])
    with pytest.raises(ValueError, match=r"\(h, t, s\) ou \(L, h, t, s\).*\(5, 5\)"):
        plot_attention_heads(_softmax_weights(5, 5), TOKENS)


def test_attention_maps_share_a_fixed_color_scale():
    """vmin/vmax fixos: um mapa de uma cabeça e uma grade de duas na mesma escala 0–1."""
    one = plot_attention(_softmax_weights(5, 5), TOKENS, vmin=0.0, vmax=1.0)
    grid = plot_attention_heads(_softmax_weights(2, 5, 5), TOKENS, vmin=0.0, vmax=1.0)
    images = [image for fig in (one, grid) for ax in fig.axes for image in ax.get_images()]
    assert len(images) == 3
    limits = {image.get_clim() for image in images}
    assert limits == {(0.0, 1.0)}
    # sem vmin/vmax, a escala continua a dos próprios pesos
    weights = _softmax_weights(5, 5)
    (image,) = plot_attention(weights, TOKENS).axes[0].get_images()
    np.testing.assert_allclose(image.get_clim(), (weights.min(), weights.max()), rtol=1e-6)


def test_plot_positional_encoding_is_diverging_and_symmetric():
    positions = torch.arange(20.0)[:, None]
    pe = torch.sin(positions / torch.tensor([1.0, 3.0, 10.0, 30.0]))  # (t=20, d=4)
    fig = plot_positional_encoding(pe)
    ax = fig.axes[0]
    assert len(fig.axes) == 2
    assert ax.get_xlabel() == "dimensão" and ax.get_ylabel() == "posição"
    image = ax.get_images()[0]
    assert image.get_array().shape == (20, 4)  # linhas = posições
    assert image.get_cmap().name == "RdBu"
    low, high = image.get_clim()
    assert low == pytest.approx(-high)  # escala centrada em 0
    with pytest.raises(ValueError, match=r"pe deve ter formato \(t, d\)"):
        plot_positional_encoding(torch.zeros(2, 3, 4))


def test_plot_heatmap_generic():
    matrix = np.array([[1.0, 0.5, -0.2], [0.5, 1.0, 0.1]])
    fig = plot_heatmap(
        matrix,
        xlabel="token",
        ylabel="token",
        title="Similaridade de cossenos",
        xticklabels=["a", "b", "c"],
        yticklabels=["a", "b"],
        cmap="RdBu",
        center=0.0,
        annotate=True,
    )
    ax = fig.axes[0]
    assert ax.get_title() == "Similaridade de cossenos"
    assert _labels(ax.get_xticklabels()) == ["a", "b", "c"]
    assert ax.get_images()[0].get_clim() == (-1.0, 1.0)
    assert [text.get_text() for text in ax.texts] == [
        "1,00",
        "0,50",
        "-0,20",
        "0,50",
        "1,00",
        "0,10",
    ]
    with pytest.raises(ValueError, match=r"xticklabels tem 2 rótulos, mas a matriz tem 3"):
        plot_heatmap(matrix, xticklabels=["a", "b"])
    with pytest.raises(TypeError, match="matrix deve ser um tensor ou array numérico"):
        plot_heatmap([["a", "b"]])


def test_plot_loss_curves():
    history = {"treino": [3.0, 2.0, 1.5, 1.2], "validação": ([2, 4], [2.5, 1.6])}
    fig = plot_loss_curves(history)
    ax = fig.axes[0]
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    assert ax.get_xlabel() == "passo" and ax.get_ylabel() == "perda"
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["treino", "validação"]
    assert list(lines[0].get_xdata()) == [1, 2, 3, 4]
    assert list(lines[1].get_xdata()) == [2, 4]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["treino", "validação"]


def test_plot_loss_curves_shared_steps_tensors_and_errors():
    fig = plot_loss_curves(
        {"passo": [10, 20, 30], "treino": [torch.tensor(2.0), torch.tensor(1.0), 0.5]},
        logy=True,
    )
    ax = fig.axes[0]
    assert list(ax.get_lines()[0].get_xdata()) == [10, 20, 30]
    assert list(ax.get_lines()[0].get_ydata()) == [2.0, 1.0, 0.5]
    assert ax.get_yscale() == "log"
    assert len(plot_loss_curves([1.0, 0.5]).axes[0].get_lines()) == 1
    with pytest.raises(ValueError, match="nenhuma curva"):
        plot_loss_curves({})
    with pytest.raises(ValueError, match=r"'val' tem 2 passos e 3 valores"):
        plot_loss_curves({"val": ([1, 2], [1.0, 2.0, 3.0])})
    with pytest.raises(TypeError, match=r"'treino' tem um valor não numérico na posição 1"):
        plot_loss_curves({"treino": [1.0, "x"]})


def test_plot_mask_two_colors_labels_and_legend():
    from tpt.masks import merge_masks, padding_mask
    from tpt.plot import plot_mask

    kpm = padding_mask([5, 3], 5)  # (2, 5)
    mask = merge_masks(key_padding_mask=kpm, is_causal=True, t=5)  # (2, 1, 5, 5)
    fig = plot_mask(mask[1:2, 0], TOKENS, title="máscara combinada")
    ax = fig.axes[0]
    assert len(fig.axes) == 1  # legenda, não barra de cores
    image = ax.images[0].get_array()
    assert np.array_equal(np.asarray(image), mask[1, 0].numpy().astype(float))
    assert _labels(ax.get_xticklabels()) == TOKENS
    assert ax.get_xlabel() == "chaves" and ax.get_ylabel() == "consultas"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["livre (False)", "bloqueado (True)"]
    bare = plot_mask(mask[0, 0], legend=False)
    assert bare.axes[0].get_legend() is None


def test_plot_mask_rejects_float_masks_in_portuguese():
    from tpt.plot import plot_mask

    additive = torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), float("-inf"))
    with pytest.raises(TypeError, match=r"booleana.*mask == float\('-inf'\)"):
        plot_mask(additive)
    with pytest.raises(TypeError, match=r"booleana"):
        plot_mask(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"passe key_labels"):
        plot_mask(torch.zeros(2, 3, dtype=torch.bool), ["a", "b"])


def test_plot_norm_placement_draws_both_blocks():
    from tpt.plot import plot_norm_placement

    fig = plot_norm_placement()
    assert isinstance(fig, Figure)
    post, pre = fig.axes
    assert post.get_title().startswith("Pós-normalização")
    assert pre.get_title().startswith("Pré-normalização")
    texts = [[t.get_text() for t in ax.texts] for ax in (post, pre)]
    # Duas normas por camada nas duas ordens; a norma final só na pré-normalização.
    assert texts[0].count("LayerNorm") == 2 and "LayerNorm final" not in texts[0]
    assert texts[1].count("LayerNorm") == 2 and "LayerNorm final" in texts[1]
    for labels in texts:
        assert labels.count("+") == 2 and labels.count("Dropout") == 2
        assert "Autoatenção" in labels and "FFN" in labels
    # Pós: a subcamada vem antes da norma; pré: a norma vem antes da subcamada.
    ys = {ax: {t.get_text(): t.get_position()[1] for t in ax.texts} for ax in (post, pre)}
    assert ys[post]["Autoatenção"] < min(
        t.get_position()[1] for t in post.texts if t.get_text() == "LayerNorm"
    )
    assert ys[pre]["Autoatenção"] > min(
        t.get_position()[1] for t in pre.texts if t.get_text() == "LayerNorm"
    )
    assert post.get_ylim() == pre.get_ylim()  # mesma escala nas duas colunas


def test_plot_norm_placement_rejects_bad_sublayers():
    from tpt.plot import plot_norm_placement

    with pytest.raises(ValueError, match="sublayers"):
        plot_norm_placement("FFN")
    with pytest.raises(ValueError, match="titles"):
        plot_norm_placement(titles=("só um",))
