"""Ferramentas comuns aos scripts que mexem nos notebooks (execução e limpeza).

Usado por `scripts/run_notebooks.py` e pelos testes em `tests/test_notebooks_meta.py`.
"""

from __future__ import annotations

import configparser
import copy
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE_FILE = ROOT / "tests" / "nbval_sanitize.cfg"

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO_KEYS = ("name", "codemirror_mode", "file_extension", "mimetype", "pygments_lexer")
VOLATILE_CELL_KEYS = ("papermill", "execution", "collapsed", "scrolled")
IGNORE_MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
# Tag de célula: a figura mostra SÓ tempos (muda a cada execução sem que os dados mudem).
# Só nessas a regravação guarda a imagem anterior quando o texto, sanitizado, é o mesmo.
TIMING_FIGURE_TAG = "grafico-de-tempos"


def course_notebooks() -> list[Path]:
    """Os notebooks do curso, na ordem (o nome começa pelo número)."""
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def sanitize_patterns(path: Path = SANITIZE_FILE) -> list[tuple[re.Pattern[str], str]]:
    """Lê os pares regex/replace do arquivo de sanitização do nbval."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]


def _sanitized_outputs(outputs: list, patterns, *, ignore_images: bool) -> list:
    result = []
    for out in outputs:
        out = copy.deepcopy(dict(out))
        out.pop("execution_count", None)
        out.pop("metadata", None)
        data = out.get("data")
        if isinstance(data, dict):
            data.pop("application/vnd.jupyter.widget-view+json", None)
            if ignore_images:
                for key in [k for k in data if k.startswith("image/")]:
                    data.pop(key)
            for key, value in data.items():
                if isinstance(value, (str, list)):
                    text = "".join(value)
                    for regex, rep in patterns:
                        text = regex.sub(rep, text)
                    data[key] = text
        if "text" in out:
            text = "".join(out["text"])
            for regex, rep in patterns:
                text = regex.sub(rep, text)
            out["text"] = text
        result.append(out)
    return result


def is_volatile(cell) -> bool:
    """A célula tem saída marcada como variável (o nbval não a compara).

    Mesma regra do nbval: o marcador precisa estar SOZINHO num comentário
    (``# NBVAL_IGNORE_OUTPUT``); texto depois dele desliga o marcador.
    """
    tags = cell.get("metadata", {}).get("tags", [])
    comments = {
        line.strip().lstrip("#").strip()
        for line in cell.source.splitlines()
        if line.strip().startswith("#")
    }
    return bool(comments & set(IGNORE_MARKERS)) or any(
        t in tags for t in ("nbval-ignore-output", "nbval-skip")
    )


def merge_streams(outputs: list) -> list:
    """Junta saídas de texto vizinhas do mesmo fluxo (stdout/stderr).

    O kernel às vezes divide um mesmo ``print`` em pedaços (o texto é enviado em
    intervalos de tempo), em lugares diferentes a cada execução.
    """
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (
            out.get("output_type") == "stream"
            and prev is not None
            and prev.get("output_type") == "stream"
            and prev.get("name") == out.get("name")
        ):
            prev["text"] = "".join(prev["text"]) + "".join(out["text"])
        else:
            merged.append(out)
    return merged


def is_timing_figure(cell) -> bool:
    """A célula está marcada como gráfico só de tempos (tag ``grafico-de-tempos``)."""
    return TIMING_FIGURE_TAG in cell.get("metadata", {}).get("tags", [])


def normalize(nb, previous=None):
    """Remove metadados voláteis do papermill e reaproveita saídas equivalentes.

    Se `previous` (a versão anterior do notebook) tiver uma célula com o mesmo id, o
    mesmo código e saídas que só diferem em partes voláteis (tempos, ids de widgets),
    mantemos as saídas anteriores: assim duas reconstruções seguidas não deixam diff no
    git. As imagens entram na comparação: uma figura cujos dados mudaram é sempre
    refeita, mesmo numa célula ignorada pelo nbval. A única exceção são as células com a
    tag ``grafico-de-tempos`` (a figura só mostra tempos, que mudam a cada execução):
    nelas a imagem anterior fica se o texto sanitizado for o mesmo.
    """
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    info = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {k: info[k] for k in LANGUAGE_INFO_KEYS if k in info}
    patterns = sanitize_patterns()
    old_cells = {c.get("id"): c for c in previous.cells} if previous is not None else {}
    for cell in nb.cells:
        for key in VOLATILE_CELL_KEYS:
            cell.metadata.pop(key, None)
        if cell.metadata.get("tags") == []:
            cell.metadata.pop("tags")
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.id = "injected-parameters"
        if cell.cell_type != "code":
            continue
        cell.outputs = merge_streams(cell.outputs)
        old = old_cells.get(cell.get("id"))
        if old is None or old.cell_type != "code" or old.source != cell.source:
            continue
        timing = is_volatile(cell) and is_timing_figure(cell)
        same = _sanitized_outputs(old.outputs, patterns, ignore_images=timing) == (
            _sanitized_outputs(cell.outputs, patterns, ignore_images=timing)
        )
        if same:
            cell.outputs = old.outputs
    return nb


def read(path: Path):
    return nbformat.read(path, as_version=4)


def write(nb, path: Path) -> None:
    nbformat.validate(nb)
    nbformat.write(nb, path)
