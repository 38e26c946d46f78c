"""Conferências dos exercícios do notebook 01_tokens (tpt.exercises.tokens)."""

from __future__ import annotations

import unicodedata

import torch

from tpt.exercises import tokens as ex
from tpt.tokenizer import PAD_ID, SPECIAL_TOKENS

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook)
# --------------------------------------------------------------------------------------


def build_vocab(texts):
    chars = set()
    for text in texts:
        chars.update(unicodedata.normalize("NFC", text))
    return [*SPECIAL_TOKENS, *sorted(chars)]


def pad_batch(sequences):
    lengths = torch.tensor([len(s) for s in sequences])
    t = int(lengths.max())
    input_ids = torch.full((len(sequences), t), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    padding_mask = torch.arange(t)[None, :] >= lengths[:, None]
    return input_ids, padding_mask


def merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


# --------------------------------------------------------------------------------------
# Exercício 1
# --------------------------------------------------------------------------------------


def test_build_vocab_reference_passes(capsys):
    assert ex.check_build_vocab(build_vocab) is True
    assert "✅" in capsys.readouterr().out


def test_build_vocab_stub_is_pending(capsys):
    assert ex.check_build_vocab(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


def test_build_vocab_unsorted_is_reported(capsys):
    def reversed_order(texts):
        return build_vocab(texts)[:4] + sorted(build_vocab(texts)[4:], reverse=True)

    assert ex.check_build_vocab(reversed_order) is False
    out = capsys.readouterr().out
    assert "❌" in out and "fora de ordem" in out and "sorted" in out and "'pão'" in out


def test_build_vocab_without_special_tokens_is_reported(capsys):
    assert ex.check_build_vocab(lambda texts: build_vocab(texts)[4:]) is False
    out = capsys.readouterr().out
    assert "tokens especiais" in out and "<pad>" in out


def test_build_vocab_without_nfc_is_reported(capsys):
    def no_nfc(texts):
        return [*SPECIAL_TOKENS, *sorted(set("".join(texts)))]

    assert ex.check_build_vocab(no_nfc) is False
    assert "NFC" in capsys.readouterr().out


def test_build_vocab_set_is_reported(capsys):
    assert ex.check_build_vocab(lambda texts: set(build_vocab(texts))) is False
    assert "recebi set" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 2
# --------------------------------------------------------------------------------------


def test_pad_batch_reference_passes(capsys):
    assert ex.check_pad_batch(pad_batch) is True
    assert "✅" in capsys.readouterr().out


def test_pad_batch_stub_is_pending(capsys):
    assert ex.check_pad_batch(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_pad_batch_inverted_mask_is_reported(capsys):
    def inverted(sequences):
        input_ids, mask = pad_batch(sequences)
        return input_ids, ~mask

    assert ex.check_pad_batch(inverted) is False
    out = capsys.readouterr().out
    assert "invertida" in out and "[[5, 6, 7], [8], [9, 10]]" in out


def test_pad_batch_integer_mask_is_reported(capsys):
    def int_mask(sequences):
        input_ids, mask = pad_batch(sequences)
        return input_ids, mask.long()

    assert ex.check_pad_batch(int_mask) is False
    assert "torch.bool" in capsys.readouterr().out


def test_pad_batch_wrong_pad_value_is_reported(capsys):
    def pad_minus_one(sequences):
        input_ids, mask = pad_batch(sequences)
        return input_ids.masked_fill(mask, -1), mask

    assert ex.check_pad_batch(pad_minus_one) is False
    out = capsys.readouterr().out
    assert "PAD_ID=0" in out and "-1" in out


# --------------------------------------------------------------------------------------
# Exercício 3
# --------------------------------------------------------------------------------------


def test_merge_reference_passes(capsys):
    assert ex.check_merge_pair(merge) is True
    assert "✅" in capsys.readouterr().out


def test_merge_stub_is_pending(capsys):
    assert ex.check_merge_pair(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_merge_with_string_replace_is_reported(capsys):
    # Erro típico: juntar tudo numa string e usar replace perde as fronteiras dos tokens.
    def via_replace(symbols, pair):
        text = " ".join(symbols).replace(f"{pair[0]} {pair[1]}", pair[0] + pair[1])
        return text.split(" ")

    assert ex.check_merge_pair(via_replace) is False
    out = capsys.readouterr().out
    assert "esperava" in out and "recebi" in out and "symbols=" in out


def test_merge_that_mutates_its_input_is_reported(capsys):
    def in_place(symbols, pair):
        symbols[:] = merge(symbols, pair)
        return symbols

    assert ex.check_merge_pair(in_place) is False
    assert "modificou a lista de entrada" in capsys.readouterr().out


def test_merge_overlap_right_to_left_is_reported(capsys):
    def right_to_left(symbols, pair):
        return [s[::-1] for s in merge([s[::-1] for s in symbols][::-1], pair[::-1])][::-1]

    assert ex.check_merge_pair(right_to_left) is False
    out = capsys.readouterr().out
    assert "['a', 'a', 'a']" in out and "['aa', 'a']" in out
