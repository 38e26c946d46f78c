"""Conferências dos exercícios do notebook 01_tokens (tpt.exercises.tokens).

A solução de referência de cada exercício vive só no notebook (e passa pela conferência
em tests/test_notebook_solutions.py). Aqui ficam soluções corretas em **outros** estilos,
que precisam ser aceitas, e as respostas erradas típicas, que precisam ser recusadas com
a explicação certa.
"""

from __future__ import annotations

import unicodedata
from collections import Counter

import torch
from torch.nn.utils.rnn import pad_sequence

import tpt
from tpt.exercises import tokens as ex
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS
from tpt.tokenizer import merge_pair as renamed  # importada com outro nome


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


# --------------------------------------------------------------------------------------
# Exercício 1: vocabulário com frequência mínima
# --------------------------------------------------------------------------------------


def vocab_with_counter(texts, min_count):
    """Estilo alternativo: junta os textos, normaliza uma vez, filtra o Counter."""
    counts = Counter(unicodedata.normalize("NFC", "".join(texts)))
    return list(SPECIAL_TOKENS) + sorted(c for c in counts if counts[c] >= min_count)


def vocab_with_dict(texts, min_count):
    """Estilo alternativo: dicionário de contagens escrito à mão."""
    counts = {}
    for text in texts:
        for char in unicodedata.normalize("NFC", text):
            counts[char] = counts.get(char, 0) + 1
    return [*SPECIAL_TOKENS, *sorted(k for k, v in counts.items() if v >= min_count)]


def test_build_vocab_alternative_styles_pass(capsys):
    assert ex.check_build_vocab(vocab_with_counter) is True
    assert ex.check_build_vocab(vocab_with_dict) is True
    assert capsys.readouterr().out.count("✅") == 2


def test_build_vocab_stub_is_pending(capsys):
    assert ex.check_build_vocab(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


def test_build_vocab_reverse_order_is_reported(capsys):
    def reversed_order(texts, min_count):
        return vocab_with_counter(texts, min_count)[:4] + sorted(
            vocab_with_counter(texts, min_count)[4:], reverse=True
        )

    assert ex.check_build_vocab(reversed_order) is False
    out = capsys.readouterr().out
    assert "fora de ordem" in out and "decrescente" in out and "'pão'" in out


def test_build_vocab_key_str_lower_is_explained_without_blaming_the_set(capsys):
    def case_insensitive(texts, min_count):
        vocab = vocab_with_counter(texts, min_count)
        return vocab[:4] + sorted(vocab[4:], key=str.lower)

    assert ex.check_build_vocab(case_insensitive) is False
    out = capsys.readouterr().out
    assert "key=str.lower" in out and "sem key" in out
    assert "set" not in out


def test_build_vocab_frequency_order_is_explained(capsys):
    def by_frequency(texts, min_count):
        counts = Counter(unicodedata.normalize("NFC", "".join(texts)))
        return [*SPECIAL_TOKENS, *[c for c, n in counts.most_common() if n >= min_count]]

    assert ex.check_build_vocab(by_frequency) is False
    assert "most_common" in capsys.readouterr().out


def test_build_vocab_unordered_set_is_explained(capsys):
    def from_set(texts, min_count):
        chars = vocab_with_counter(texts, min_count)[4:]
        # uma ordem arbitrária (e fixa, para o teste), como a de um set num processo qualquer
        return [*SPECIAL_TOKENS, *chars[1:], *chars[:1]]

    assert ex.check_build_vocab(from_set) is False
    out = capsys.readouterr().out
    assert "fora de ordem" in out and "PYTHONHASHSEED" in out


def test_build_vocab_without_special_tokens_is_reported(capsys):
    assert ex.check_build_vocab(lambda texts, n: vocab_with_counter(texts, n)[4:]) is False
    out = capsys.readouterr().out
    assert "tokens especiais" in out and "<pad>" in out


def test_build_vocab_without_nfc_is_reported(capsys):
    def no_nfc(texts, min_count):
        counts = Counter("".join(texts))
        return [*SPECIAL_TOKENS, *sorted(c for c in counts if counts[c] >= min_count)]

    assert ex.check_build_vocab(no_nfc) is False
    assert "NFC" in capsys.readouterr().out


def test_build_vocab_nfc_after_counting_is_reported(capsys):
    # Conta no texto cru e só normaliza os caracteres que passaram: 'ç' e 'ã' ficam de fora.
    def normalize_late(texts, min_count):
        counts = Counter("".join(texts))
        kept = {unicodedata.normalize("NFC", c) for c in counts if counts[c] >= min_count}
        kept = {c for c in kept if not unicodedata.combining(c)}
        return [*SPECIAL_TOKENS, *sorted(kept)]

    assert ex.check_build_vocab(normalize_late) is False
    out = capsys.readouterr().out
    assert "faltam" in out and "depois da normalização NFC" in out


def test_build_vocab_strict_threshold_is_reported(capsys):
    def strictly_more(texts, min_count):
        counts = Counter(unicodedata.normalize("NFC", "".join(texts)))
        return [*SPECIAL_TOKENS, *sorted(c for c in counts if counts[c] > min_count)]

    assert ex.check_build_vocab(strictly_more) is False
    out = capsys.readouterr().out
    assert "exatamente min_count=1" in out and ">=" in out


def test_build_vocab_ignoring_min_count_is_reported(capsys):
    assert ex.check_build_vocab(lambda texts, n: vocab_with_counter(texts, 1)) is False
    out = capsys.readouterr().out
    assert "sobram" in out and "min_count=2" in out and "<unk>" in out


def test_build_vocab_set_is_reported(capsys):
    assert ex.check_build_vocab(lambda texts, n: set(vocab_with_counter(texts, n))) is False
    assert "recebi set" in capsys.readouterr().out


def test_build_vocab_old_signature_is_explained(capsys):
    def one_argument(texts):
        return vocab_with_counter(texts, 1)

    assert ex.check_build_vocab(one_argument) is False
    out = capsys.readouterr().out
    assert "TypeError" in out and "(texts, min_count)" in out


# --------------------------------------------------------------------------------------
# Exercício 2: preenchimento à esquerda com <eos> preservado
# --------------------------------------------------------------------------------------


def rows_for(sequences, max_length):
    return [[BOS_ID, *ids[: max_length - 2], EOS_ID] for ids in sequences]


def pad_left_with_pad_sequence(sequences, max_length):
    """Estilo alternativo: pad_sequence com padding_side="left" e dtype explícito."""
    rows = [torch.tensor(row, dtype=torch.long) for row in rows_for(sequences, max_length)]
    input_ids = pad_sequence(rows, batch_first=True, padding_value=PAD_ID, padding_side="left")
    return input_ids, input_ids == PAD_ID  # os ids de texto dos casos nunca são 0


def pad_left_with_flip(sequences, max_length):
    """Estilo alternativo: preenche à direita as linhas invertidas e desinverte."""
    rows = [torch.tensor(row[::-1], dtype=torch.long) for row in rows_for(sequences, max_length)]
    flipped = pad_sequence(rows, batch_first=True, padding_value=PAD_ID)  # (b, t)
    lengths = torch.tensor([len(r) for r in rows])  # (b,)
    mask = torch.arange(flipped.shape[1])[None, :] >= lengths[:, None]  # (b, t), à direita
    return flipped.flip(-1), mask.flip(-1)


def test_pad_left_alternative_styles_pass(capsys):
    assert ex.check_pad_left(pad_left_with_pad_sequence) is True
    assert ex.check_pad_left(pad_left_with_flip) is True
    assert capsys.readouterr().out.count("✅") == 2


def test_pad_left_matches_tpt_encode_batch():
    # A mesma regra do tpt (truncation=True mantém <bos> e <eos>; padding_side="left").
    tok = tpt.CharTokenizer.fit(["João pensou: o trem estava cheio."])
    texts = ["João pensou:", "o trem estava cheio.", ""]
    batch = tok.encode_batch(
        texts, max_length=8, truncation=True, add_special_tokens=True, padding_side="left"
    )
    ids, mask = pad_left_with_pad_sequence([tok.encode(t) for t in texts], 8)
    assert torch.equal(ids, batch["input_ids"]) and torch.equal(mask, batch["padding_mask"])


def test_pad_left_stub_is_pending(capsys):
    assert ex.check_pad_left(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_pad_left_float_ids_from_an_empty_first_sequence_are_rejected(capsys):
    # torch.tensor([]) é float32; com a vazia na primeira linha, o pad_sequence devolve float.
    def without_dtype(sequences, max_length):
        rows = [
            torch.cat(
                [
                    torch.tensor([BOS_ID]),
                    torch.tensor(ids[: max_length - 2]),
                    torch.tensor([EOS_ID]),
                ]
            )
            for ids in sequences
        ]
        input_ids = pad_sequence(rows, batch_first=True, padding_side="left")
        return input_ids, input_ids == PAD_ID

    assert pad_sequence([torch.tensor([]), torch.tensor([1])], batch_first=True).is_floating_point()
    assert ex.check_pad_left(without_dtype) is False
    out = capsys.readouterr().out
    assert "sequences=[[], [5, 6, 7]]" in out and "float32" in out and "dtype=torch.long" in out


def test_pad_left_right_padding_is_reported(capsys):
    def right_padded(sequences, max_length):
        rows = [torch.tensor(r, dtype=torch.long) for r in rows_for(sequences, max_length)]
        input_ids = pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(right_padded) is False
    out = capsys.readouterr().out
    assert "à direita" in out and "input_ids[:, -1]" in out


def test_pad_left_truncation_that_drops_eos_is_reported(capsys):
    def cut_after(sequences, max_length):
        rows = [[BOS_ID, *ids, EOS_ID][:max_length] for ids in sequences]
        tensors = [torch.tensor(r, dtype=torch.long) for r in rows]
        input_ids = pad_sequence(tensors, batch_first=True, padding_side="left")
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(cut_after) is False
    out = capsys.readouterr().out
    assert "levou o <eos>" in out and "ids[:max_length - 2]" in out


def test_pad_left_keeping_the_end_is_reported(capsys):
    def keep_end(sequences, max_length):
        keep = max_length - 2
        rows = [[BOS_ID, *ids[max(len(ids) - keep, 0) :], EOS_ID] for ids in sequences]
        tensors = [torch.tensor(r, dtype=torch.long) for r in rows]
        input_ids = pad_sequence(tensors, batch_first=True, padding_side="left")
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(keep_end) is False
    assert "guardou o fim do texto" in capsys.readouterr().out


def test_pad_left_without_truncation_is_reported(capsys):
    def no_cut(sequences, max_length):
        rows = [torch.tensor([BOS_ID, *ids, EOS_ID], dtype=torch.long) for ids in sequences]
        input_ids = pad_sequence(rows, batch_first=True, padding_side="left")
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(no_cut) is False
    assert "mais que max_length" in capsys.readouterr().out


def test_pad_left_always_max_length_is_reported(capsys):
    def fixed_width(sequences, max_length):
        rows = rows_for(sequences, max_length)
        input_ids = torch.full((len(rows), max_length), PAD_ID, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, max_length - len(row) :] = torch.tensor(row)
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(fixed_width) is False
    assert "max_length é só o limite" in capsys.readouterr().out


def test_pad_left_without_special_tokens_is_reported(capsys):
    def no_specials(sequences, max_length):
        rows = [torch.tensor(ids[:max_length], dtype=torch.long) for ids in sequences]
        input_ids = pad_sequence(rows, batch_first=True, padding_side="left")
        return input_ids, input_ids == PAD_ID

    assert ex.check_pad_left(no_specials) is False
    assert "com <bos> e <eos>" in capsys.readouterr().out


def test_pad_left_inverted_mask_is_reported(capsys):
    def inverted(sequences, max_length):
        input_ids, mask = pad_left_with_pad_sequence(sequences, max_length)
        return input_ids, ~mask

    assert ex.check_pad_left(inverted) is False
    out = capsys.readouterr().out
    assert "invertida" in out and "[[5, 6, 7], [8], [9, 10]]" in out


def test_pad_left_mask_on_the_wrong_side_is_reported(capsys):
    def right_mask(sequences, max_length):
        input_ids, _ = pad_left_with_pad_sequence(sequences, max_length)
        lengths = (input_ids != PAD_ID).sum(dim=1)  # (b,)
        return input_ids, torch.arange(input_ids.shape[1])[None, :] >= lengths[:, None]

    assert ex.check_pad_left(right_mask) is False
    assert "o <pad> agora está no começo" in capsys.readouterr().out


def test_pad_left_integer_mask_is_reported(capsys):
    def int_mask(sequences, max_length):
        input_ids, mask = pad_left_with_pad_sequence(sequences, max_length)
        return input_ids, mask.long()

    assert ex.check_pad_left(int_mask) is False
    assert "torch.bool" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 3: uma fusão do BPE
# --------------------------------------------------------------------------------------


def merge_with_for(symbols, pair):
    """Estilo alternativo: laço for com um sinal de "pule o próximo"."""
    merged, skip = [], False
    for i, symbol in enumerate(symbols):
        if skip:
            skip = False
            continue
        if i + 1 < len(symbols) and (symbol, symbols[i + 1]) == pair:
            merged.append(symbol + symbols[i + 1])
            skip = True
        else:
            merged.append(symbol)
    return merged


def test_merge_alternative_style_passes(capsys):
    assert ex.check_merge_pair(merge_with_for) is True
    assert "✅" in capsys.readouterr().out


def test_merge_stub_is_pending(capsys):
    assert ex.check_merge_pair(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_merge_calling_tpt_merge_pair_is_rejected(capsys):
    def via_tpt(symbols, pair):
        return renamed(symbols, pair)

    assert ex.check_merge_pair(via_tpt) is False
    assert "não chame o merge_pair do tpt" in capsys.readouterr().out


def test_merge_calling_tpt_merge_pair_by_name_is_rejected(capsys):
    def via_tpt(symbols, pair):
        return tpt.tokenizer.merge_pair(symbols, pair)

    assert ex.check_merge_pair(via_tpt) is False
    assert "não chame o merge_pair do tpt" in capsys.readouterr().out


def test_merge_calling_tpt_merge_pair_indirectly_is_rejected(capsys):
    import tpt.tokenizer

    helper = {"fn": lambda s, p: tpt.tokenizer.merge_pair(s, p)}  # escondido num dicionário

    def indirect(symbols, pair):
        return helper["fn"](symbols, pair)

    assert ex.check_merge_pair(indirect) is False
    assert "não chame o merge_pair do tpt" in capsys.readouterr().out


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
        symbols[:] = merge_with_for(symbols, pair)
        return symbols

    assert ex.check_merge_pair(in_place) is False
    assert "modificou a lista de entrada" in capsys.readouterr().out


def test_merge_overlap_right_to_left_is_reported(capsys):
    def right_to_left(symbols, pair):
        flipped = [s[::-1] for s in symbols][::-1]
        return [s[::-1] for s in merge_with_for(flipped, pair[::-1])][::-1]

    assert ex.check_merge_pair(right_to_left) is False
    out = capsys.readouterr().out
    assert "['a', 'a', 'a']" in out and "['aa', 'a']" in out


def test_merge_index_error_is_explained(capsys):
    def off_by_one(symbols, pair):
        merged, i = [], 0
        while i < len(symbols):
            if (symbols[i], symbols[i + 1]) == pair:
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        return merged

    assert ex.check_merge_pair(off_by_one) is False
    out = capsys.readouterr().out
    assert "IndexError" in out and "(i + 1)" in out
