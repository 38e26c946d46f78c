"""A célula do Hub do notebook 12 (``LOAD_FROM_HUB``), rodada sem internet.

A célula fica desligada na execução guardada (baixaria centenas de MB). Este teste lê o
código dela do próprio notebook e o roda com ``LOAD_FROM_HUB = True`` e ``hub_model``
apontando para uma pasta local com um Llama minúsculo (``tpt.hf.to_hf`` de um GPT de
caracteres com pesos aleatórios) e o seu tokenizador (``tpt.hf.to_hf_tokenizer``),
gravados com ``save_pretrained``: o mesmo caminho de ``from_pretrained`` que o modelo do
Hub percorre, até a última linha impressa.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nada é baixado

import contextlib
import io
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

import tpt

transformers = pytest.importorskip("transformers")
from tpt import hf  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "12_ajuste_fino.ipynb"
CLASS_NAMES = ["fábulas e contos", "cotidiano", "descrições"]


def _cell(start: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(start)]
    assert len(cells) == 1, f"esperava uma célula começando com {start!r}; achei {len(cells)}"
    return cells[0]


def _genre_data() -> dict:
    """Parágrafos de verdade do corpus, poucos, com os rótulos de 0 a 2 (o formato do notebook)."""
    paragraphs = [p for text in tpt.load_corpus() for p in text.split("\n\n")[1:] if len(p) >= 20]
    train = paragraphs[:6]
    test = paragraphs[-4:]
    return {
        "class_names": CLASS_NAMES,
        "genre_train_paragraphs": train,
        "genre_train_labels": [0, 1, 2, 0, 1, 2],
        "genre_test_paragraphs": test,
        "genre_test_labels": [0, 1, 2, 1],
        "genre_test_y": torch.tensor([0, 1, 2, 1]),
    }


def _run(source: str, namespace: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "célula do Hub", "exec"), namespace)
    return out.getvalue()


def _namespace(**extra) -> dict:
    return {"torch": torch, "F": F, "transformers": transformers, "tpt": tpt, "fmt": tpt.fmt,
            "device": torch.device("cpu"), "seed": 0, **_genre_data(), **extra}


def test_the_hub_cell_runs_on_a_tiny_local_llama(tmp_path):
    tokenizer = tpt.CharTokenizer.fit(tpt.load_corpus())
    torch.manual_seed(0)
    config = tpt.GPTConfig(vocab_size=tokenizer.vocab_size, max_len=1024, embed_dim=16, num_heads=2,
                           num_layers=1, positional="rope", norm="rmsnorm", activation="swiglu",
                           bias=False)
    hf.to_hf(tpt.GPT(config).eval()).save_pretrained(tmp_path)
    hf.to_hf_tokenizer(tokenizer).save_pretrained(tmp_path)

    namespace = _namespace(LOAD_FROM_HUB=True, hub_model=str(tmp_path))
    printed = _run(_cell("if LOAD_FROM_HUB:"), namespace)

    assert f"{tmp_path}, few-shot com um exemplo rotulado de cada classe no contexto" in printed
    assert "previsões por classe:" in printed and "acerto balanceado" in printed
    predictions = namespace["hub_predictions"]
    assert predictions.shape == (4,) and set(predictions.tolist()) <= {0, 1, 2}
    # Os três exemplos ficam num contexto só, cada um seguido do seu rótulo.
    shots = namespace["shots"]
    assert all(shots.count(f"Gênero: {name}\n") == 1 for name in CLASS_NAMES)
    assert shots.count("Texto: ") == 3


def test_the_hub_cell_does_nothing_when_off():
    printed = _run(_cell("if LOAD_FROM_HUB:"), _namespace(LOAD_FROM_HUB=False, hub_model="nenhum"))
    assert printed.startswith("LOAD_FROM_HUB = False: nada foi baixado")
