"""Testes de tpt.tokenizer: CharTokenizer e BPETokenizer."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import torch

import tpt.tokenizer as tokenizer_module
from tpt.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
    count_pairs,
    merge_pair,
    pretokenize,
)

SENTENCE = "João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre."
WORDS = "ação, pão, açúcar, pássaro, cão, avó, você"

# Um pequeno texto original, com acentos, pontuação, números e quebras de linha.
CORPUS = (
    "João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre.\n"
    "A cadeira ficava perto da janela, e a janela mostrava a cidade acordando.\n"
    "Na estação seguinte, uma senhora entrou com um cesto de pão e um cão pequeno.\n"
    "O cão olhou para João; João olhou para o cão. Os dois pensaram a mesma coisa:\n"
    "a viagem ia ser longa, mas a manhã estava bonita.\n\n"
    "Às 7 horas e 15 minutos, o trem parou de novo. Ninguém desceu!\n"
    "Você já pensou em quantas histórias cabem num vagão? Eu penso nisso sempre.\n"
    "A senhora dividiu o pão: um pedaço para João, outro para o cão, e o resto ficou no cesto.\n"
) * 4

CORPUS_TEXTS = [CORPUS, WORDS]


@pytest.fixture(scope="module")
def char_tok() -> CharTokenizer:
    return CharTokenizer.fit(CORPUS_TEXTS)


@pytest.fixture(scope="module")
def bpe_tok() -> BPETokenizer:
    return BPETokenizer.train(CORPUS_TEXTS, 120)


@pytest.fixture(params=["char", "bpe"])
def tok(request, char_tok, bpe_tok):
    return char_tok if request.param == "char" else bpe_tok


# --------------------------------------------------------------------------------------
# Vocabulário e tokens especiais
# --------------------------------------------------------------------------------------


def test_special_tokens_have_fixed_ids(tok):
    assert SPECIAL_TOKENS == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert tok.itos[:4] == list(SPECIAL_TOKENS)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.stoi[token] == i
    assert len(tok) == tok.vocab_size == len(tok.itos) == len(tok.stoi)
    assert tok.vocab == tok.itos


def test_char_vocabulary_is_sorted_and_complete(char_tok):
    chars = char_tok.chars
    assert chars == sorted(chars)
    expected = set(unicodedata.normalize("NFC", CORPUS + WORDS))
    assert set(chars) == expected
    assert len(chars) == len(expected)  # sem repetição


def test_char_constructor_keeps_the_given_order():
    tok = CharTokenizer(["z", "a", "ç"])
    assert tok.itos == [*SPECIAL_TOKENS, "z", "a", "ç"]
    assert tok.encode("açz") == [5, 6, 4]
    with pytest.raises(ValueError, match=r"'a' \(U\+0061 LATIN SMALL LETTER A\) repetido"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(ValueError, match=r"chars\[1\]='ab' tem 2 caracteres"):
        CharTokenizer(["a", "ab"])
    with pytest.raises(ValueError, match="normalization='NFX' inválido"):
        CharTokenizer(["a"], normalization="NFX")
    with pytest.raises(ValueError, match="unknown='skip' inválido"):
        CharTokenizer(["a"], unknown="skip")


# --------------------------------------------------------------------------------------
# Ida e volta, Unicode
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [SENTENCE, WORDS, CORPUS])
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(isinstance(i, int) for i in ids)
    assert UNK_ID not in ids
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids)) == text  # tensor 1-D também serve


def test_special_tokens_around_and_skipped(tok):
    ids = tok.encode(SENTENCE, add_special_tokens=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert ids[1:-1] == tok.encode(SENTENCE)
    assert tok.decode(ids) == SENTENCE
    assert tok.decode(ids, skip_special_tokens=False) == f"<bos>{SENTENCE}<eos>"


def test_nfd_input_encodes_like_nfc(tok):
    nfd = unicodedata.normalize("NFD", WORDS)
    nfc = unicodedata.normalize("NFC", WORDS)
    assert nfd != nfc and len(nfd) > len(nfc)  # "ã" = "a" + til combinante em NFD
    assert tok.encode(nfd) == tok.encode(nfc)
    assert tok.decode(tok.encode(nfd)) == nfc


def test_normalization_is_exposed_and_changes_the_vocabulary():
    nfc = CharTokenizer.fit("pão")
    nfd = CharTokenizer.fit("pão", normalization="NFD")
    assert nfc.normalization == "NFC" and nfd.normalization == "NFD"
    assert len(nfc.encode("ã")) == 1
    assert len(nfd.encode("ã")) == 2  # letra + U+0303 COMBINING TILDE
    assert "\u0303" in nfd.chars and "\u0303" not in nfc.chars
    assert nfc.normalize("a\u0303") == "ã"


# Carrega só o arquivo tpt/tokenizer.py (sem o resto do pacote) e põe um torch de mentira
# no lugar do verdadeiro: fit/train/encode não usam tensores, e importar o torch em dois
# processos custaria segundos.
_HASH_SCRIPT = """
import importlib.util, sys, types
fake_torch = types.ModuleType("torch")
fake_torch.Tensor = type("Tensor", (), {{}})
sys.modules["torch"] = fake_torch
spec = importlib.util.spec_from_file_location("tokenizer", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
BPETokenizer, CharTokenizer = module.BPETokenizer, module.CharTokenizer
text = {text!r}
char = CharTokenizer.fit(text)
bpe = BPETokenizer.train(text, 40)
print(char.itos)
print(char.encode(text))
print(bpe.merges)
print(bpe.encode(text))
"""


def test_ids_do_not_depend_on_pythonhashseed():
    path = str(Path(tokenizer_module.__file__).resolve())
    script = _HASH_SCRIPT.format(path=path, text=SENTENCE + " " + WORDS + "\n" + CORPUS[:400])
    processes = []
    for seed in ("0", "123"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"}
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", script],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1]
    assert outputs[0].count("\n") == 4 and len(outputs[0]) > 200


# --------------------------------------------------------------------------------------
# Caracteres desconhecidos e ids inválidos
# --------------------------------------------------------------------------------------


def test_unknown_char_becomes_unk(tok):
    ids = tok.encode("pão ñ")
    assert ids.count(UNK_ID) == 1
    assert tok.decode(ids).endswith("<unk>")  # o <unk> continua visível
    assert tok.tokenize("ñ") == ["<unk>"]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_unknown_char_error_names_char_and_position(kind):
    if kind == "char":
        tok = CharTokenizer.fit(CORPUS, unknown="error")
    else:
        tok = BPETokenizer.train(CORPUS, 30, unknown="error")
    assert tok.unknown == "error"
    with pytest.raises(
        ValueError,
        match=r"'ñ' \(U\+00F1 LATIN SMALL LETTER N WITH TILDE\) na posição 5 .*unknown='unk'",
    ):
        tok.encode("cão, ñ")
    with pytest.raises(TypeError, match="encode espera um str; recebi list"):
        tok.encode(["cão"])


def test_decode_rejects_bad_ids(tok):
    v = tok.vocab_size
    with pytest.raises(ValueError, match=rf"id {v} fora do vocabulário \(vocab_size={v}"):
        tok.decode([4, v])
    with pytest.raises(ValueError, match=r"id -1 fora do vocabulário"):
        tok.decode(torch.tensor([-1, 4]))
    with pytest.raises(TypeError, match="recebi um tensor torch.float32"):
        tok.decode(torch.tensor([4.0, 5.0]))
    with pytest.raises(ValueError, match=r"tensor 1-D.*\(2, 2\).*decode_batch"):
        tok.decode(torch.tensor([[4, 5], [5, 4]]))
    with pytest.raises(TypeError, match=r"o item 1 é float"):
        tok.decode([4, 5.0])


# --------------------------------------------------------------------------------------
# Lotes
# --------------------------------------------------------------------------------------

BATCH = ["cão", "João pensou", "", "pão e cão"]


def test_encode_batch_longest(tok):
    batch = tok.encode_batch(BATCH)
    ids, lengths, mask = batch["input_ids"], batch["lengths"], batch["padding_mask"]
    expected = [tok.encode(text) for text in BATCH]
    b, t = len(BATCH), max(len(e) for e in expected)
    assert ids.shape == (b, t) and ids.dtype == torch.long
    assert lengths.shape == (b,) and lengths.dtype == torch.long
    assert mask.shape == (b, t) and mask.dtype == torch.bool
    assert lengths.tolist() == [len(e) for e in expected]
    for row, e in enumerate(expected):
        assert ids[row, : len(e)].tolist() == e
        assert (ids[row, len(e) :] == PAD_ID).all()
        assert not mask[row, : len(e)].any() and mask[row, len(e) :].all()
    assert torch.equal(mask, ids == PAD_ID)  # nenhum token real tem id 0
    assert tok.decode_batch(ids) == BATCH


def test_encode_batch_max_length_and_truncation(tok):
    lengths = [len(tok.encode(text)) for text in BATCH]
    longest = max(lengths)
    padded = tok.encode_batch(BATCH, padding="max_length", max_length=longest + 3)
    assert padded["input_ids"].shape == (len(BATCH), longest + 3)
    assert padded["padding_mask"][:, -3:].all()

    index = next(i for i, n in enumerate(lengths) if n > 2)  # o primeiro longo demais
    with pytest.raises(
        ValueError, match=rf"índice {index} tem {lengths[index]} tokens.*max_length=2"
    ):
        tok.encode_batch(BATCH, max_length=2)

    cut = tok.encode_batch(BATCH, max_length=2, truncation=True)
    assert cut["input_ids"].shape == (len(BATCH), 2)
    assert cut["lengths"].tolist() == [min(n, 2) for n in lengths]
    assert cut["input_ids"][1].tolist() == tok.encode(BATCH[1])[:2]


def test_encode_batch_special_tokens_survive_truncation(tok):
    batch = tok.encode_batch(
        BATCH, add_special_tokens=True, max_length=4, truncation=True, padding="max_length"
    )
    ids = batch["input_ids"]
    assert ids.shape == (len(BATCH), 4)
    assert (ids[:, 0] == BOS_ID).all()
    last = batch["lengths"] - 1
    assert (ids[torch.arange(len(BATCH)), last] == EOS_ID).all()
    assert ids[2].tolist() == [BOS_ID, EOS_ID, PAD_ID, PAD_ID]  # texto vazio


def test_encode_batch_left_padding(tok):
    right = tok.encode_batch(BATCH)
    left = tok.encode_batch(BATCH, padding_side="left")
    t = right["input_ids"].shape[1]
    for row, n in enumerate(right["lengths"].tolist()):
        assert left["input_ids"][row, t - n :].tolist() == right["input_ids"][row, :n].tolist()
        assert left["padding_mask"][row].tolist() == [True] * (t - n) + [False] * n


def test_encode_batch_errors(tok):
    with pytest.raises(TypeError, match="LISTA de textos"):
        tok.encode_batch("cão")
    with pytest.raises(ValueError, match="lista vazia"):
        tok.encode_batch([])
    with pytest.raises(ValueError, match="padding='max_length' precisa de max_length"):
        tok.encode_batch(BATCH, padding="max_length")
    with pytest.raises(ValueError, match="truncation=True precisa de max_length"):
        tok.encode_batch(BATCH, truncation=True)
    with pytest.raises(ValueError, match="padding='maior' inválido"):
        tok.encode_batch(BATCH, padding="maior")
    with pytest.raises(TypeError, match=r"texts\[1\] deve ser str; recebi int"):
        tok.encode_batch(["cão", 3])


# --------------------------------------------------------------------------------------
# Salvar e carregar
# --------------------------------------------------------------------------------------


def test_state_dict_round_trip_weights_only(tok, tmp_path):
    path = tmp_path / "tokenizer.pt"
    torch.save({"tokenizer": tok.state_dict()}, path)
    state = torch.load(path, weights_only=True)["tokenizer"]
    restored = type(tok).from_state_dict(state)
    assert restored.itos == tok.itos
    assert restored.normalization == tok.normalization and restored.unknown == tok.unknown
    assert restored.encode(CORPUS) == tok.encode(CORPUS)
    assert restored.decode(restored.encode(SENTENCE)) == SENTENCE


def test_state_dict_of_the_wrong_type_is_rejected(char_tok, bpe_tok):
    with pytest.raises(ValueError, match="é de 'CharTokenizer', não de 'BPETokenizer'"):
        BPETokenizer.from_state_dict(char_tok.state_dict())
    state = bpe_tok.state_dict()
    del state["merges"]
    with pytest.raises(ValueError, match=r"faltam as chaves \['merges'\]"):
        BPETokenizer.from_state_dict(state)


# --------------------------------------------------------------------------------------
# BPE
# --------------------------------------------------------------------------------------


def test_pretokenize_partitions_any_text():
    assert pretokenize("Oi, João!") == ["Oi", ",", " João", "!"]
    assert pretokenize("a  b\nc") == ["a", " ", " b", "\n", "c"]
    rng = random.Random(0)
    alphabet = "aãçé Z9_.,;!?\n\t-–\u0303²"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert "".join(pretokenize(text)) == text


def test_merge_pair_is_left_to_right():
    assert merge_pair(["c", "ã", "o"], ("ã", "o")) == ["c", "ão"]
    assert merge_pair(["a", "a", "a"], ("a", "a")) == ["aa", "a"]
    assert merge_pair(["a", "b"], ("b", "a")) == ["a", "b"]


def _naive_bpe(texts, num_merges, min_frequency=2):
    """Referência explícita: recontar todos os pares a cada fusão."""
    counts = Counter()
    for text in texts:
        counts.update(pretokenize(unicodedata.normalize("NFC", text)))
    words = {tuple(word): n for word, n in counts.items()}
    merges, history = [], []
    for _ in range(num_merges):
        pairs = {p: n for p, n in count_pairs(words).items() if p not in merges}
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        merges.append(best)
        history.append((best, pairs[best]))
        words = {tuple(merge_pair(w, best)): n for w, n in words.items()}
    return merges, history, words


@pytest.mark.parametrize("num_merges", [1, 25, 200])
def test_fast_training_equals_naive_reference(num_merges):
    merges, history, words = _naive_bpe(CORPUS_TEXTS, num_merges)
    tok = BPETokenizer.train(CORPUS_TEXTS, num_merges)
    assert tok.merges == merges
    assert tok.history == history
    # Codificar cada palavra do corpus dá a mesma segmentação do fim do treino.
    for symbols in words:
        word = "".join(symbols)
        assert tuple(tok.tokenize(word)) == symbols


def test_bpe_tie_breaking_and_min_frequency():
    tok = BPETokenizer.train("ab ab cd cd", 10)
    # pares com frequência 2: (" ", "c"), ("a", "b"), ("c", "d"): o menor vem primeiro
    assert tok.merges[0] == (" ", "c")
    assert tok.history[0] == ((" ", "c"), 2)
    assert all(freq >= 2 for _, freq in tok.history)
    assert BPETokenizer.train("abcdef", 10).merges == []  # tudo com frequência 1
    assert BPETokenizer.train("abcdef", 10, min_frequency=1).tokenize("abcdef") == ["abcdef"]


def test_bpe_vocab_layout(bpe_tok):
    vocab = bpe_tok.vocab
    alphabet = bpe_tok.alphabet
    assert vocab[: 4 + len(alphabet)] == [*SPECIAL_TOKENS, *alphabet]
    assert alphabet == sorted(alphabet)
    assert vocab[4 + len(alphabet) :] == ["".join(pair) for pair in bpe_tok.merges]
    assert len(bpe_tok.history) == len(bpe_tok.merges) == 120
    frequencies = [freq for _, freq in bpe_tok.history]
    assert frequencies == sorted(frequencies, reverse=True)


def test_bpe_compresses_portuguese_text(bpe_tok, char_tok):
    text = CORPUS
    bpe_ids = bpe_tok.encode(text)
    char_ids = char_tok.encode(text)
    assert len(char_ids) == len(text)
    assert len(bpe_ids) < 0.6 * len(text)  # bem menos tokens que caracteres
    assert bpe_tok.decode(bpe_ids) == text
    # A frase nova (fora do corpus) também comprime e volta igual.
    new = "A senhora pensou: o pão estava quente, e o cão conseguiu um pedaço."
    assert len(bpe_tok.encode(new)) < len(new)
    assert bpe_tok.decode(bpe_tok.encode(new)) == new


def test_bpe_same_string_from_two_merges_is_one_token():
    tok = BPETokenizer(["a", "b", "c"], [("a", "b"), ("ab", "c"), ("b", "c"), ("a", "bc")])
    assert tok.vocab.count("abc") == 1
    assert tok.vocab_size == 4 + 3 + 3  # ab, abc, bc
    assert tok.tokenize("abc") == ["abc"]
    with pytest.raises(ValueError, match=r"merges\[0\]=\('x', 'b'\) usa um token"):
        BPETokenizer(["a", "b"], [("x", "b")])
    with pytest.raises(ValueError, match="aparece duas vezes"):
        BPETokenizer(["a", "b"], [("a", "b"), ("a", "b")])


def test_bpe_train_rejects_bad_arguments():
    with pytest.raises(TypeError, match="num_merges deve ser int; recebi 2.5"):
        BPETokenizer.train(CORPUS, 2.5)
    with pytest.raises(ValueError, match="num_merges=-1 deve ser >= 0"):
        BPETokenizer.train(CORPUS, -1)
    with pytest.raises(ValueError, match="min_frequency=0 deve ser >= 1"):
        BPETokenizer.train(CORPUS, 5, min_frequency=0)
