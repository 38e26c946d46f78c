"""O corpus de português do curso: textos originais que vêm DENTRO do pacote `tpt`.

Ver notebooks/01_tokens.ipynb (vocabulário de caracteres e BPE) e
notebooks/09_geracao.ipynb (modelo de linguagem de caracteres).

Os textos ficam em `tpt/data/textos/*.txt` e são instalados junto com o pacote (de uma
wheel, do git ou em modo editável), então o caminho padrão do curso nunca precisa de
internet. Formato de cada arquivo (UTF-8):

    # Título do primeiro texto

    Primeiro parágrafo.

    Segundo parágrafo.

    # Título do segundo texto
    ...

Cada texto começa numa linha `# Título` e termina onde começa o próximo título (ou no
fim do arquivo). `load_corpus` devolve cada texto com o título na PRIMEIRA linha (sem o
"# "), uma linha em branco e os parágrafos separados por uma linha em branco. O título
fica porque também é português correto e ensina ao modelo como um texto começa.
"""

from __future__ import annotations

import random
import unicodedata
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # só para as anotações; importlib.resources.abc surgiu no Python 3.11
    from importlib.resources.abc import Traversable

TEXT_SEPARATOR = "\n\n"
"""Separador entre textos quando eles são unidos numa string só."""

_TITLE_PREFIX = "# "


def _default_directory() -> Traversable:
    """A pasta `textos/` ao lado deste módulo, achada por importlib.resources.

    Funciona com o pacote instalado de qualquer jeito (pasta, wheel, zip), ao contrário
    de montar o caminho com `__file__`.
    """
    return resources.files("tpt.data").joinpath("textos")


def _resolve(directory: str | PathLike[str] | Traversable | None) -> Traversable:
    if directory is None:
        return _default_directory()
    if isinstance(directory, (str, PathLike)):
        path = Path(directory)
        if not path.is_dir():
            raise FileNotFoundError(f"a pasta do corpus {str(path)!r} não existe")
        return path
    return directory


def _parse_file(name: str, content: str) -> list[str]:
    """Separa um arquivo em textos; cada texto = título + linha em branco + parágrafos."""
    texts: list[str] = []
    title: str | None = None
    paragraphs: list[list[str]] = []

    def close() -> None:
        if title is None:
            return
        body = [p for p in paragraphs if p]
        if not body:
            raise ValueError(f"{name}: o texto {title!r} não tem nenhum parágrafo")
        texts.append("\n\n".join([title] + ["\n".join(p) for p in body]))

    for number, raw in enumerate(content.splitlines(), start=1):
        line = raw.rstrip()
        if line.startswith(_TITLE_PREFIX):
            close()
            title = line[len(_TITLE_PREFIX) :].strip()
            if not title:
                raise ValueError(f"{name}, linha {number}: título vazio")
            paragraphs = [[]]
        elif title is None:
            if line.strip():
                raise ValueError(
                    f"{name}, linha {number}: há texto antes do primeiro título; cada "
                    f"texto deve começar com uma linha '# Título' (recebi {line[:40]!r})"
                )
        elif not line.strip():
            paragraphs.append([])  # linha em branco: termina o parágrafo atual
        else:
            paragraphs[-1].append(line)
    close()
    return texts


def load_corpus(directory: str | PathLike[str] | Traversable | None = None) -> list[str]:
    """Lê os textos do corpus e devolve uma lista de strings, um texto por item.

    `directory=None` usa os textos que vêm com o `tpt`; qualquer outra pasta com arquivos
    `.txt` no mesmo formato também serve (por exemplo, o seu próprio corpus). Os arquivos
    são lidos em ordem alfabética de nome e os textos na ordem em que aparecem, então o
    resultado é o mesmo em qualquer máquina. Cada texto é normalizado em Unicode NFC
    ("ã" como UM código, não "a" + til combinante).
    """
    folder = _resolve(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"a pasta do corpus {str(folder)!r} não existe")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    texts: list[str] = []
    for file in files:
        try:
            content = file.read_bytes().decode("utf-8-sig")  # tolera um BOM no início
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{file.name} não está em UTF-8 (byte inválido na posição {error.start}); "
                f"salve o arquivo como UTF-8"
            ) from None
        texts += [unicodedata.normalize("NFC", t) for t in _parse_file(file.name, content)]
    if not texts:
        raise ValueError(
            f"nenhum texto encontrado em {str(folder)!r}: esperava arquivos .txt em UTF-8 "
            f"com textos que começam por uma linha '# Título' (achei {len(files)} arquivo(s) "
            f".txt)"
        )
    return texts


def corpus_splits(
    val_fraction: float = 0.1,
    seed: int = 0,
    directory: str | PathLike[str] | Traversable | None = None,
) -> tuple[str, str]:
    """Divide o corpus em `(texto_de_treino, texto_de_validação)`.

    A divisão é por TEXTO inteiro, não por caractere: um texto está todo no treino ou
    todo na validação, e a validação mede o modelo em histórias que ele nunca viu (cortar
    no meio poria o começo de uma história no treino e o fim na validação). Sorteia
    `round(val_fraction * número_de_textos)` textos (no mínimo 1) com
    `random.Random(seed)`; dentro de cada parte, os textos ficam na ordem original e são
    unidos por uma linha em branco ("\\n\\n").
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)):
        raise TypeError(f"val_fraction={val_fraction!r} deve ser um número entre 0 e 1")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction} deve estar entre 0 e 1 (exclusive)")
    texts = load_corpus(directory)
    if len(texts) < 2:
        raise ValueError(
            f"o corpus tem só {len(texts)} texto; são precisos pelo menos 2 para separar "
            f"treino e validação"
        )
    n_val = min(max(1, round(val_fraction * len(texts))), len(texts) - 1)
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    val_ids = set(order[:n_val])
    train = [t for i, t in enumerate(texts) if i not in val_ids]
    val = [t for i, t in enumerate(texts) if i in val_ids]
    return TEXT_SEPARATOR.join(train), TEXT_SEPARATOR.join(val)


def corpus_stats(directory: str | PathLike[str] | Traversable | None = None) -> dict[str, int]:
    """Números do corpus, contados no texto inteiro unido por "\\n\\n".

    Chaves: `num_texts` (textos), `num_chars` (caracteres Unicode), `num_distinct_chars`
    (tamanho do vocabulário de caracteres, sem os tokens especiais), `num_bytes` (bytes
    em UTF-8; maior que `num_chars` porque "ã", "ç", "—" ocupam 2 ou 3 bytes) e
    `num_words` (palavras separadas por espaço).
    """
    texts = load_corpus(directory)
    full = TEXT_SEPARATOR.join(texts)
    return {
        "num_texts": len(texts),
        "num_chars": len(full),
        "num_distinct_chars": len(set(full)),
        "num_bytes": len(full.encode("utf-8")),
        "num_words": len(full.split()),
    }
