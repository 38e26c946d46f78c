"""Dados do curso: números por extenso, o corpus de português e um baixador opcional.

- `tpt.data.numbers`: números -> palavras em português do Brasil e a tarefa seq2seq
  (notebooks/08_encoder_decoder.ipynb e 09_geracao.ipynb).
- `tpt.data.number_text`: os mesmos números como texto de um modelo só-decoder: o texto
  de pré-treino (algarismos ao lado das palavras) e os pares de instrução
  (notebooks/12_ajuste_fino.ipynb).
- `tpt.data.corpus`: os textos originais que vêm com o pacote (notebooks/01_tokens.ipynb
  e 09_geracao.ipynb). Não precisa de internet.
- `tpt.data.words`: palavras do corpus e pseudopalavras (letras de dentro embaralhadas),
  a tarefa "palavra real ou pseudopalavra" (notebooks/12_ajuste_fino.ipynb).
- `tpt.data.download`: baixa, confere (sha256) e guarda em cache um texto maior de
  domínio público, para quem quiser ir além do corpus embutido.
"""

from __future__ import annotations

from tpt.data.corpus import corpus_splits, corpus_stats, load_corpus
from tpt.data.download import default_cache_dir, download_text, file_sha256
from tpt.data.number_text import (
    INSTRUCTION_WORDS,
    instruction_batch,
    instruction_pair,
    instruction_vocab,
    pretraining_batch,
    pretraining_sequence,
    write_numbers,
)
from tpt.data.numbers import (
    MAX_NUMBER,
    NumbersDataset,
    NumberVocab,
    collate_numbers,
    make_number_splits,
    number_batches,
    number_to_tokens,
    number_to_words,
)
from tpt.data.words import pseudoword, pseudowords, text_words, unseen_words, word_candidates

__all__ = [
    "INSTRUCTION_WORDS",
    "MAX_NUMBER",
    "NumberVocab",
    "NumbersDataset",
    "collate_numbers",
    "corpus_splits",
    "corpus_stats",
    "default_cache_dir",
    "download_text",
    "file_sha256",
    "instruction_batch",
    "instruction_pair",
    "instruction_vocab",
    "load_corpus",
    "make_number_splits",
    "number_batches",
    "number_to_tokens",
    "number_to_words",
    "pretraining_batch",
    "pretraining_sequence",
    "write_numbers",
    "pseudoword",
    "pseudowords",
    "text_words",
    "unseen_words",
    "word_candidates",
]
