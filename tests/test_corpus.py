"""Testes de tpt.data.corpus: leitura, formato, divisão por texto e estatísticas."""

from __future__ import annotations

import unicodedata

import pytest

from tpt.data.corpus import corpus_splits, corpus_stats, load_corpus

FILE_A = """# A garça

A garça pescava na lagoa.
Ficava parada horas.

Depois voou para o sul.

# O tatu
O tatu cavou um buraco fundo.
"""

FILE_B = "# Ônibus\n\nO ônibus chegou às sete.\n\n\n\n# Feira\n\nTinha caju e pão de queijo.\n"


@pytest.fixture
def corpus_dir(tmp_path):
    (tmp_path / "b_segundo.txt").write_text(FILE_B, encoding="utf-8")
    (tmp_path / "a_primeiro.txt").write_text(FILE_A, encoding="utf-8")
    (tmp_path / "leia-me.md").write_text("# não é texto do corpus\n\nignorar", encoding="utf-8")
    return tmp_path


def test_load_parses_titles_and_paragraphs(corpus_dir):
    texts = load_corpus(corpus_dir)
    # Arquivos em ordem alfabética (a_ antes de b_), textos na ordem do arquivo; .md fora.
    assert texts == [
        "A garça\n\nA garça pescava na lagoa.\nFicava parada horas.\n\nDepois voou para o sul.",
        "O tatu\n\nO tatu cavou um buraco fundo.",
        "Ônibus\n\nO ônibus chegou às sete.",
        "Feira\n\nTinha caju e pão de queijo.",
    ]
    assert load_corpus(str(corpus_dir)) == texts  # str ou Path


def test_load_normalizes_to_nfc(tmp_path):
    decomposed = unicodedata.normalize("NFD", "# Canção\n\nO pão e o cão não são iguais.\n")
    assert len(decomposed) > len(unicodedata.normalize("NFC", decomposed))
    (tmp_path / "nfd.txt").write_bytes(("\ufeff" + decomposed).encode("utf-8"))  # com BOM
    (text,) = load_corpus(tmp_path)
    assert text == "Canção\n\nO pão e o cão não são iguais."
    assert unicodedata.is_normalized("NFC", text)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"não existe"):
        load_corpus(tmp_path / "nada")
    with pytest.raises(ValueError, match=r"nenhum texto encontrado.*0 arquivo"):
        load_corpus(tmp_path)
    (tmp_path / "vazio.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"nenhum texto encontrado.*1 arquivo"):
        load_corpus(tmp_path)
    (tmp_path / "vazio.txt").write_text("Sem título aqui.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vazio.txt, linha 1: há texto antes do primeiro"):
        load_corpus(tmp_path)
    (tmp_path / "vazio.txt").write_text("# Só título\n\n# Outro\n\nTexto.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'Só título' não tem nenhum parágrafo"):
        load_corpus(tmp_path)
    (tmp_path / "vazio.txt").write_bytes("# Título\n\nAção".encode("latin-1"))
    with pytest.raises(ValueError, match=r"vazio.txt não está em UTF-8"):
        load_corpus(tmp_path)


def test_splits_are_by_whole_text_and_deterministic(corpus_dir):
    texts = load_corpus(corpus_dir)
    train, val = corpus_splits(0.25, seed=0, directory=corpus_dir)
    assert corpus_splits(0.25, seed=0, directory=corpus_dir) == (train, val)
    # Cada texto inteiro está em exatamente uma das partes (nenhum cortado ao meio).
    pieces_train = [t for t in texts if t in train]
    pieces_val = [t for t in texts if t in val]
    assert len(pieces_val) == 1 and len(pieces_train) == 3
    assert not set(pieces_train) & set(pieces_val)
    assert train == "\n\n".join(pieces_train) and val == "\n\n".join(pieces_val)
    # Sementes diferentes escolhem outros textos para a validação (com 4 textos, alguma
    # das 10 primeiras sementes tem de divergir da semente 0).
    assert any(corpus_splits(0.25, seed=s, directory=corpus_dir)[1] != val for s in range(1, 11))


def test_splits_bad_arguments(corpus_dir, tmp_path_factory):
    with pytest.raises(ValueError, match=r"val_fraction=1.5 deve estar entre 0 e 1"):
        corpus_splits(1.5, directory=corpus_dir)
    with pytest.raises(TypeError, match=r"val_fraction='0.1'"):
        corpus_splits("0.1", directory=corpus_dir)
    single = tmp_path_factory.mktemp("um")
    (single / "x.txt").write_text("# Um\n\nSó um texto.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"só 1 texto"):
        corpus_splits(0.5, directory=single)


def test_stats(corpus_dir):
    stats = corpus_stats(corpus_dir)
    full = "\n\n".join(load_corpus(corpus_dir))
    assert stats["num_texts"] == 4
    assert stats["num_chars"] == len(full)
    assert stats["num_distinct_chars"] == len(set(full))
    # "ç", "ã", "Ô", "à" ocupam 2 bytes em UTF-8: 6 caracteres assim no corpus.
    assert stats["num_bytes"] == len(full) + 6
    assert stats["num_words"] == len(full.split())


# --- O corpus que vem com o pacote (escrito pela equipe) --------------------------------


def test_packaged_corpus_is_well_formed():
    try:
        texts = load_corpus()
    except ValueError as error:  # pragma: no cover - só enquanto os textos não chegam
        pytest.skip(f"corpus embutido ainda vazio: {error}")
    assert len(texts) >= 10
    assert all(unicodedata.is_normalized("NFC", t) for t in texts)
    assert not any(line.startswith("# ") for t in texts for line in t.splitlines())
    full = "\n\n".join(texts)
    assert "\ufffd" not in full  # nenhum caractere de substituição (UTF-8 quebrado)
    missing = [ch for ch in "áàâãéêíóôõúç" if ch not in full]
    assert missing == []  # o português acentuado está lá de verdade
    stats = corpus_stats()
    assert stats["num_bytes"] > stats["num_chars"]  # há caracteres de mais de um byte
    train, val = corpus_splits()
    assert 0.03 < len(val) / (len(train) + len(val)) < 0.3
