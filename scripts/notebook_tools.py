"""Ferramentas comuns aos scripts que mexem nos notebooks (execução e limpeza).

Usado por `scripts/run_notebooks.py` e pelos testes em `tests/test_notebooks_meta.py`.
"""

from __future__ import annotations

import configparser
import copy
import hashlib
import re
import resource
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE_FILE = ROOT / "tests" / "nbval_sanitize.cfg"

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO_KEYS = ("name", "codemirror_mode", "file_extension", "mimetype", "pygments_lexer")
VOLATILE_CELL_KEYS = ("papermill", "execution", "collapsed", "scrolled")
IGNORE_MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
# Tag de célula: a figura mostra só tempos (muda a cada execução sem que os dados mudem).
# Só nessas a comparação da regravação ignora a imagem (ver `equivalent_run`).
TIMING_FIGURE_TAG = "grafico-de-tempos"
# Nessas células, a regravação anota o código que desenhou a imagem guardada (um resumo
# do texto da célula): se o código mudou desde então, a imagem velha não é reaproveitada,
# mesmo que a célula já tenha sido editada e commitada antes da regravação.
FIGURE_SOURCE_KEY = "fonte_da_figura"


def course_notebooks() -> list[Path]:
    """Os notebooks do curso, na ordem (o nome começa pelo número)."""
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def sanitize_patterns(path: Path = SANITIZE_FILE) -> list[tuple[re.Pattern[str], str]]:
    """Lê os pares regex/replace do arquivo de sanitização do nbval."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]


SPACES = re.compile(r"[ \t]+")


def _sanitized_text(text: str, patterns) -> str:
    """O texto com as partes voláteis trocadas pelos nomes do arquivo de sanitização e os
    espaços seguidos reduzidos a um: uma coluna alinhada à direita muda de largura quando o
    número dentro dela muda de tamanho (486,759 ms contra 106,281 ms), e isso não é conteúdo."""
    for regex, rep in patterns:
        text = regex.sub(rep, text)
    return SPACES.sub(" ", text)


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
                    data[key] = _sanitized_text("".join(value), patterns)
        if "text" in out:
            out["text"] = _sanitized_text("".join(out["text"]), patterns)
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


def source_digest(cell) -> str:
    """Resumo (sha256, 16 dígitos) do código da célula."""
    return hashlib.sha256(cell.source.encode("utf-8")).hexdigest()[:16]


def _same_outputs(old, cell, patterns) -> bool:
    """As saídas de `old` e `cell` (o mesmo id e o mesmo código) só diferem em partes voláteis.

    As imagens entram na comparação: uma figura cujos dados mudaram conta como mudança, mesmo
    numa célula ignorada pelo nbval. A exceção são as células com a tag ``grafico-de-tempos``
    (a figura só mostra tempos) cuja imagem guardada foi desenhada pelo mesmo código (o resumo
    anotado em ``fonte_da_figura``).
    """
    timing = is_volatile(cell) and is_timing_figure(cell)
    drawn_by_same_code = old.metadata.get(FIGURE_SOURCE_KEY) == source_digest(cell)
    keep_image = timing and drawn_by_same_code
    return _sanitized_outputs(old.outputs, patterns, ignore_images=keep_image) == (
        _sanitized_outputs(cell.outputs, patterns, ignore_images=keep_image)
    )


def equivalent_run(nb, previous) -> bool:
    """A execução nova (`nb`) equivale à guardada (`previous`).

    Mesmas células de código (ids e código, na mesma ordem) e saídas que só diferem em partes
    voláteis (tempos, taxas, endereços).
    """
    patterns = sanitize_patterns()
    new_code = [c for c in nb.cells if c.cell_type == "code"]
    old_code = [c for c in previous.cells if c.cell_type == "code"]
    if [(c.get("id"), c.source) for c in new_code] != [(c.get("id"), c.source) for c in old_code]:
        return False
    pairs = zip(old_code, new_code, strict=True)
    return all(_same_outputs(old, cell, patterns) for old, cell in pairs)


def normalize(nb, previous=None):
    """Remove metadados voláteis do papermill e decide, **tudo ou nada**, de que execução vêm as
    saídas.

    Se a execução nova equivale à guardada (`previous`, a versão anterior do notebook; ver
    `equivalent_run`), o notebook fica com **todas** as saídas guardadas: duas regravações
    seguidas não deixam diff no git. Se qualquer célula mudou de verdade (um número, uma figura,
    o código), o notebook fica com **todas** as saídas novas. Nunca se misturam: o texto que uma
    célula imprime e a figura que outra desenha dos mesmos números vêm sempre da mesma execução
    (uma tabela de tempos guardada ao lado de uma figura refeita mostrava duas medições).
    """
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    info = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {k: info[k] for k in LANGUAGE_INFO_KEYS if k in info}
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
    keep_previous = previous is not None and equivalent_run(nb, previous)
    old_code = iter([c for c in previous.cells if c.cell_type == "code"]) if keep_previous else None
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if keep_previous:
            old = next(old_code)
            cell.outputs = old.outputs
            cell.execution_count = old.get("execution_count")
        # A imagem guardada de uma figura de tempos foi desenhada por este código.
        if is_timing_figure(cell):
            cell.metadata[FIGURE_SOURCE_KEY] = source_digest(cell)
        else:
            cell.metadata.pop(FIGURE_SOURCE_KEY, None)
    return nb


def children_cpu() -> float:
    """Tempo de CPU (user + sys, s) dos processos filhos já encerrados: o kernel de cada notebook.

    Medir o notebook pelo relógio engana numa máquina compartilhada (a carga muda o tempo 3×);
    o tempo de CPU do kernel quase não muda com a carga.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def read(path: Path):
    return nbformat.read(path, as_version=4)


def write(nb, path: Path) -> None:
    nbformat.validate(nb)
    nbformat.write(nb, path)
