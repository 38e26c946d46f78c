"""Conferências dos exercícios do notebook 01_tokens (tpt.exercises.tokens).

A solução de referência de cada exercício vive só no notebook (e passa pela conferência
em tests/test_notebook_solutions.py). Aqui ficam soluções corretas em **outros** estilos,
que precisam ser aceitas, e as respostas erradas de cada classe da issue (entrada
modificada no lugar, função proibida por apelido, argumento padrão ou partial, tabela dos
casos fixos, erros típicos), que precisam ser recusadas com a explicação certa.
"""

from __future__ import annotations

import functools

import pytest
import torch
from exercise_answers import rejected, run, stub  # noqa: E402
from torch.nn.utils.rnn import pad_sequence

import tpt
from tpt.exercises import checks
from tpt.exercises import tokens as module
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tpt.tokenizer import merge_pair as renamed  # importada com outro nome

ex = checks("tokens")


def test_checks_expose_only_the_checks():
    assert sorted(dir(ex)) == ["check_bpe_word", "check_pad_left", "check_wordpiece"]
    for hidden in ["_wordpiece", "_bpe_word", "_left_pad", "_merge", "_WORDPIECE_CASES"]:
        assert hasattr(module, hidden)  # existe no módulo...
        with pytest.raises(AttributeError, match="não é um dos exercícios"):
            getattr(ex, hidden)  # ...mas não pelo `ex` do notebook


@pytest.mark.parametrize("check", ["check_wordpiece", "check_pad_left", "check_bpe_word"])
def test_stub_is_pending(check, capsys):
    ok, out = run(getattr(ex, check), stub, capsys)
    assert ok is False and "⏳" in out and "ainda não resolvido" in out


# --------------------------------------------------------------------------------------
# Exercício 1: WordPiece
# --------------------------------------------------------------------------------------
def wordpiece_while(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return ["<unk>"]
        pieces.append(piece)
        start = end
    return pieces


def wordpiece_recursive(word, vocab, first=True):
    if not word:
        return []
    prefix = "" if first else "##"
    for end in range(len(word), 0, -1):
        if prefix + word[:end] in vocab:
            rest = wordpiece_recursive(word[end:], vocab, first=False)
            return ["<unk>"] if rest == ["<unk>"] else [prefix + word[:end], *rest]
    return ["<unk>"]


def wordpiece_max(word, vocab):
    """Outro estilo: o maior candidato com max(), e um sinal para a palavra desconhecida."""
    pieces, start = [], 0
    while start < len(word):
        prefix = "##" if pieces else ""
        options = [e for e in range(start + 1, len(word) + 1) if prefix + word[start:e] in vocab]
        if not options:
            return [tpt.SPECIAL_TOKENS[tpt.UNK_ID]]
        end = max(options)
        pieces.append(prefix + word[start:end])
        start = end
    return pieces


@pytest.mark.parametrize("answer", [wordpiece_while, wordpiece_recursive, wordpiece_max])
def test_wordpiece_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_wordpiece, answer, capsys)
    assert ok is True, out


def test_wordpiece_changing_the_vocab_is_named(capsys):
    def adds(word, vocab):
        vocab.add("##" + word[-1:])  # "ajuda" o vocabulário de quem chamou
        return wordpiece_while(word, vocab)

    def removes(word, vocab):
        vocab -= {word[:1]}  # `-=` num set também muda o objeto de quem chamou
        return wordpiece_while(word, vocab)

    for answer in (adds, removes):
        ok, out = run(ex.check_wordpiece, answer, capsys)
        assert ok is False and "modificou `vocab` no lugar" in out
        # O conselho é de conjunto, não de tensor.
        assert "set(vocab)" in out and "vocab | {x} em vez de vocab.add(x)" in out, out
        assert "vocab -= outros" in out and "sub_" not in out and "tensor" not in out, out


def shortest_first(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                break
        else:
            return ["<unk>"]
        pieces.append(piece)
        start = end
    return pieces


def without_prefix(word, vocab):
    return [p.removeprefix("##") for p in wordpiece_while(word, vocab)]


def local_unk(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                break
        else:
            pieces.append("<unk>")
            start += 1
            continue
        pieces.append(piece)
        start = end
    return pieces


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (shortest_first, "mais **curto** primeiro"),
        (without_prefix, "sem o '##' na saída"),
        (local_unk, "a palavra inteira vira"),
    ],
)
def test_wordpiece_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_wordpiece, answer, capsys)
    assert ok is False and message in out


def lowercased(word, vocab):
    return wordpiece_while(word.lower(), vocab)


def stripped(word, vocab):
    return wordpiece_while(word.strip(), vocab)


def left_stripped(word, vocab):
    return wordpiece_while(word.lstrip(), vocab)


def casefolded_and_stripped(word, vocab):
    return wordpiece_while(word.strip().casefold(), vocab)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lowercased, "é o resultado de passar a palavra para minúsculas"),
        (casefolded_and_stripped, "é o resultado de passar a palavra para minúsculas"),
        (stripped, "é o resultado de tirar os espaços das pontas da palavra"),
        (left_stripped, "é o resultado de tirar os espaços das pontas da palavra"),
    ],
)
def test_wordpiece_normalizing_the_word_is_diagnosed(answer, message, capsys):
    """Quem muda a caixa ou tira espaços da palavra é recusado, com a causa nomeada."""
    out = rejected(ex.check_wordpiece, answer, capsys, message)
    # O caso do retorno é um caso fixo (não sorteado), com a palavra que expõe o erro.
    assert "caso sorteado" not in out, out


def test_wordpiece_cased_and_spaced_cases_have_the_expected_pieces():
    """Os casos fixos com maiúscula e espaço separam de fato a resposta certa das erradas."""
    vocab = module._WORDPIECE_CASED_VOCAB
    assert module._wordpiece("Cadeira", vocab) == ["C", "##a", "##d", "##eira"]
    assert module._wordpiece("cadeira", vocab) == ["cad", "##eira"]
    assert module._wordpiece("PAPA", vocab) == ["<unk>"]
    assert module._wordpiece(" cadeira", vocab) == [" ca", "##d", "##eira"]
    assert module._wordpiece("papa ", vocab) == ["pa", "##p", "##a "]
    assert module._wordpiece("cadeira ", vocab) == ["<unk>"]
    words = [word for word, _ in module._WORDPIECE_CASES]
    assert any(word != word.lower() for word in words)
    assert any(word != word.strip() for word in words)


@pytest.mark.parametrize("answer", [wordpiece_while, wordpiece_recursive, wordpiece_max])
def test_wordpiece_correct_answers_pass_the_cased_and_spaced_cases(answer):
    """Zero falsas recusas: as respostas certas dão o esperado nos casos novos."""
    for word, vocab in module._WORDPIECE_CASES:
        assert answer(word, set(vocab)) == module._wordpiece(word, vocab), word


def test_wordpiece_lookup_table_of_fixed_cases_is_rejected(capsys):
    table = {word: module._wordpiece(word, vocab) for word, vocab in module._WORDPIECE_CASES}

    def lookup(word, vocab):
        return table.get(word, [word])

    ok, out = run(ex.check_wordpiece, lookup, capsys)
    assert ok is False and "caso sorteado, semente" in out


def test_wordpiece_wrong_type_is_explained(capsys):
    ok, out = run(ex.check_wordpiece, lambda word, vocab: " ".join(word), capsys)
    assert ok is False and "esperava uma lista de tokens" in out


# --------------------------------------------------------------------------------------
# Exercício 2: preenchimento à esquerda
# --------------------------------------------------------------------------------------
def pad_left_with_pad_sequence(sequences, max_length):
    """Estilo alternativo: pad_sequence nas linhas invertidas, e inverte de volta."""
    rows = [
        torch.tensor([BOS_ID, *ids[: max_length - 2], EOS_ID], dtype=torch.long)
        for ids in sequences
    ]
    reversed_rows = [row.flip(0) for row in rows]
    input_ids = pad_sequence(reversed_rows, batch_first=True, padding_value=PAD_ID).flip(1)
    return input_ids, input_ids == PAD_ID


def pad_left_with_lists(sequences, max_length):
    """Estilo alternativo: listas do Python, um tensor no fim."""
    rows = [[BOS_ID] + list(ids)[: max_length - 2] + [EOS_ID] for ids in sequences]
    t = max(len(row) for row in rows)
    ids = [[PAD_ID] * (t - len(row)) + row for row in rows]
    mask = [[True] * (t - len(row)) + [False] * len(row) for row in rows]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask)


@pytest.mark.parametrize("answer", [pad_left_with_pad_sequence, pad_left_with_lists])
def test_pad_left_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_pad_left, answer, capsys)
    assert ok is True, out


def test_pad_left_inserting_bos_into_the_callers_lists_is_named(capsys):
    def inserts(sequences, max_length):
        for ids in sequences:
            ids.insert(0, BOS_ID)  # muda a lista de quem chamou
        return pad_left_with_lists([ids[1:] for ids in sequences], max_length)

    ok, out = run(ex.check_pad_left, inserts, capsys)
    assert ok is False and "modificou `sequences` no lugar" in out
    # O conselho é de lista (as de dentro também), não de tensor.
    assert "list(sequences), e também das listas de dentro" in out, out
    assert "sequences.insert(0, x)" in out and "sub_" not in out, out


def _rows_to_batch(rows, left=True):
    t = max(len(row) for row in rows)
    pad = [[PAD_ID] * (t - len(row)) for row in rows]
    ids = [p + row if left else row + p for p, row in zip(pad, rows, strict=True)]
    ids_t = torch.tensor(ids, dtype=torch.long)
    return ids_t, ids_t == PAD_ID


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            lambda s, m: _rows_to_batch([[BOS_ID, *ids[: m - 2], EOS_ID] for ids in s], False),
            "o <pad> ficou à direita",
        ),
        (
            lambda s, m: _rows_to_batch([[BOS_ID, *ids, EOS_ID][:m] for ids in s]),
            "o corte levou o <eos> embora",
        ),
        (
            lambda s, m: _rows_to_batch(
                [[BOS_ID, *ids[max(len(ids) - (m - 2), 0) :], EOS_ID] for ids in s]
            ),
            "você guardou o fim do texto",
        ),
    ],
    ids=["direita", "corta-eos", "guarda-o-fim"],
)
def test_pad_left_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_pad_left, answer, capsys)
    assert ok is False and message in out


def test_pad_left_inverted_mask_is_named(capsys):
    def inverted(sequences, max_length):
        ids, mask = pad_left_with_lists(sequences, max_length)
        return ids, ~mask

    ok, out = run(ex.check_pad_left, inverted, capsys)
    assert ok is False and "a máscara está invertida" in out


def test_pad_left_float_ids_are_rejected(capsys):
    def floats(sequences, max_length):
        ids, mask = pad_left_with_lists(sequences, max_length)
        return ids.float(), mask

    ok, out = run(ex.check_pad_left, floats, capsys)
    assert ok is False and "input_ids deve ser torch.long" in out


def test_pad_left_lookup_table_of_fixed_cases_is_rejected(capsys):
    table = {repr((seqs, m)): pad_left_with_lists(seqs, m) for seqs, m in module._PAD_CASES}

    def lookup(sequences, max_length):
        key = repr((sequences, max_length))
        if key in table:
            return table[key]
        return torch.zeros(len(sequences), 2, dtype=torch.long), torch.zeros(
            len(sequences), 2, dtype=torch.bool
        )

    ok, out = run(ex.check_pad_left, lookup, capsys)
    assert ok is False and "caso sorteado, semente" in out


# --------------------------------------------------------------------------------------
# Exercício 3: uma palavra com as fusões do BPE
# --------------------------------------------------------------------------------------
def bpe_word_by_index(word, merges):
    """Estilo alternativo: funde no lugar numa cópia, com del."""
    symbols = list(word)
    for a, b in merges:
        i = 0
        while i < len(symbols) - 1:
            if symbols[i] == a and symbols[i + 1] == b:
                symbols[i : i + 2] = [a + b]
            i += 1
    return symbols


def bpe_word_by_rank(word, merges):
    """Estilo alternativo: como o tpt, a fusão de menor posição presente primeiro."""
    ranks = {pair: r for r, pair in reversed(list(enumerate(merges)))}
    symbols, last = list(word), -1

    def merge(symbols, pair):
        out, i = [], 0
        while i < len(symbols):
            if tuple(symbols[i : i + 2]) == pair:
                out.append(pair[0] + pair[1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        return out

    while True:
        present = [
            ranks[p] for p in zip(symbols, symbols[1:], strict=False) if ranks.get(p, -1) > last
        ]
        if not present:
            return symbols
        last = min(present)
        symbols = merge(symbols, merges[last])


@pytest.mark.parametrize("answer", [bpe_word_by_index, bpe_word_by_rank])
def test_bpe_word_correct_styles_pass(answer, capsys):
    ok, out = run(ex.check_bpe_word, answer, capsys)
    assert ok is True, out


def test_bpe_word_agrees_with_the_trained_tokenizer():
    text = "o trem estava cheio, mas ele conseguiu uma cadeira livre. " * 20
    bpe = tpt.BPETokenizer.train(text, 40)
    for word in tpt.tokenizer.pretokenize(text):
        assert module._bpe_word(word, bpe.merges) == bpe.tokenize(word)


def _with_merge_pair(merge):
    def answer(word, merges):
        symbols = list(word)
        for pair in merges:
            symbols = merge(symbols, pair)
        return symbols

    return answer


def merge_in_default(word, merges, _merge=tpt.tokenizer.merge_pair):
    symbols = list(word)
    for pair in merges:
        symbols = _merge(symbols, pair)
    return symbols


def with_tokenizer(word, merges):
    return tpt.BPETokenizer(sorted(set(word)) or ["a"], merges).tokenize(word) if word else []


@pytest.mark.parametrize(
    "answer",
    [
        _with_merge_pair(tpt.tokenizer.merge_pair),
        _with_merge_pair(renamed),
        merge_in_default,
        _with_merge_pair(functools.partial(renamed)),
        with_tokenizer,
    ],
    ids=["direto", "apelido", "argumento-padrao", "partial", "BPETokenizer"],
)
def test_bpe_word_tokenizer_functions_are_seen_whatever_the_name(answer, capsys):
    ok, out = run(ex.check_bpe_word, answer, capsys)
    assert ok is False and "a conferência viu rodar a função" in out


def test_bpe_word_changing_merges_is_named(capsys):
    def pops(word, merges):
        result = bpe_word_by_index(word, merges)
        if merges:
            merges.pop()
        return result

    ok, out = run(ex.check_bpe_word, pops, capsys)
    assert ok is False and "modificou `merges` no lugar" in out
    assert "merges[:-1] em vez de merges.pop()" in out and "sub_" not in out, out


def _merge_variant(*, loose=False, once=False, glued=False, from_right=False):
    """Respostas erradas escritas aqui (sem chamar o código da conferência)."""

    def merge(symbols, pair):
        out, i, done = [], 0, False
        while i < len(symbols):
            joins = False
            if i + 1 < len(symbols) and not (once and done):
                left, right = symbols[i], symbols[i + 1]
                if glued:
                    joins = left + right == pair[0] + pair[1]
                else:
                    joins = left == pair[0] and (loose or right == pair[1])
            if joins:
                out.append(symbols[i] + symbols[i + 1])
                i, done = i + 2, True
            else:
                out.append(symbols[i])
                i += 1
        return out

    def answer(word, merges):
        symbols = list(word)
        for a, b in merges:
            if from_right:
                flipped = [s[::-1] for s in symbols[::-1]]
                symbols = [s[::-1] for s in merge(flipped, (b[::-1], a[::-1]))][::-1]
            else:
                symbols = merge(symbols, (a, b))
        return symbols

    return answer


def glued_by_text(word, merges):
    """O erro do issue: junta quando symbols[i] + symbols[i + 1] == a + b."""
    symbols = list(word)
    for a, b in merges:
        i = 0
        while i < len(symbols) - 1:
            if symbols[i] + symbols[i + 1] == a + b:
                symbols[i : i + 2] = [a + b]
            i += 1
    return symbols


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda w, m: bpe_word_by_index(w, m[::-1]), "na ordem inversa"),
        (_merge_variant(loose=True), "só o primeiro token do par confere"),
        (_merge_variant(once=True), "só a primeira ocorrência"),
        (_merge_variant(from_right=True), "da direita para a esquerda"),
        (_merge_variant(glued=True), "sem olhar a fronteira"),
        (glued_by_text, "sem olhar a fronteira"),
    ],
    ids=["ordem-inversa", "so-o-primeiro", "uma-vez", "da-direita", "texto-colado", "texto-del"],
)
def test_bpe_word_typical_mistakes_are_diagnosed(answer, message, capsys):
    ok, out = run(ex.check_bpe_word, answer, capsys)
    assert ok is False and message in out


def test_bpe_word_glued_text_fails_on_a_fixed_case(capsys, monkeypatch):
    """Sem depender do sorteio: o caso fixo ("abc", [("b", "c"), ("ab", "c")]) o pega."""
    assert ("abc", [("b", "c"), ("ab", "c")]) in module._BPE_CASES
    assert glued_by_text("abc", [("b", "c"), ("ab", "c")]) == ["abc"]
    assert bpe_word_by_index("abc", [("b", "c"), ("ab", "c")]) == ["a", "bc"]
    for seed in range(3):
        monkeypatch.setenv("TPT_EXERCISE_SEED", str(seed))
        ok, out = run(ex.check_bpe_word, glued_by_text, capsys)
        assert ok is False and "sem olhar a fronteira" in out, out


def test_bpe_word_joining_into_a_string_is_rejected(capsys):
    """Juntar tudo numa string perde as fronteiras entre tokens."""

    def by_string(word, merges):
        text = " ".join(word)
        for a, b in merges:
            text = text.replace(f"{a} {b}", a + b)
        return text.split(" ") if text else []

    ok, out = run(ex.check_bpe_word, by_string, capsys)
    assert ok is False and "juntar os seus tokens dá" in out


def test_bpe_word_lookup_table_of_fixed_cases_is_rejected(capsys):
    table = {(w, tuple(m)): module._bpe_word(w, m) for w, m in module._BPE_CASES}

    def lookup(word, merges):
        return table.get((word, tuple(merges)), list(word))

    ok, out = run(ex.check_bpe_word, lookup, capsys)
    assert ok is False and "caso sorteado, semente" in out
