"""Conferências dos exercícios de notebooks/01_tokens.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_wordpiece`: a codificação gulosa do WordPiece (o pedaço mais longo do
   vocabulário primeiro, ``##`` na continuação, a palavra inteira vira ``<unk>`` quando
   um pedaço não existe), descrita na seção 8 e não escrita no notebook;
2. :func:`check_pad_left`: um lote ``(b, t)`` com ``<bos>``/``<eos>``, truncamento que
   preserva o ``<eos>`` e preenchimento **à esquerda**, com a máscara na convenção do
   tpt (``True`` = ``<pad>``);
3. :func:`check_bpe_word`: uma palavra nova codificada com as fusões aprendidas, na
   ordem, com a fusão escrita pelo aluno (sem o ``merge_pair`` nem o ``BPETokenizer``).

Cada conferência roda casos fixos (as armadilhas) e casos sorteados a cada execução,
chama a resposta com as entradas de verdade (que não podem mudar) e, quando a resposta
erra, mostra o caso, o esperado e o recebido; um diagnóstico só aparece quando a
variante errada correspondente foi calculada e deu exatamente a resposta do aluno.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

import tpt.tokenizer as _tokenizer_module
from tpt.exercises.core import ExerciseError, exercise, expect
from tpt.exercises.guards import call_answer, case_generator, seed_note
from tpt.exercises.rules import functions_from_file, record_python_calls
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

UNK_TOKEN = SPECIAL_TOKENS[UNK_ID]  # "<unk>"

__all__ = ["check_wordpiece", "check_pad_left", "check_bpe_word"]


def _short(value: Any, limit: int = 160) -> str:
    """``repr`` encurtado para caber numa linha de retorno."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_token_list(received: Any, where: str) -> list[str]:
    expect(
        isinstance(received, (list, tuple)),
        f"{where}, esperava uma lista de tokens (strings); recebi {type(received).__name__}.",
    )
    expect(
        all(isinstance(token, str) for token in received),
        f"{where}, esperava só strings na lista; recebi {_short(list(received))}.",
    )
    return list(received)


def _expect_tokens(
    received: list[str],
    expected: list[str],
    where: str,
    variants: list[tuple[str, list[str]]],
) -> None:
    """Compara listas de tokens; diagnóstico só de variante calculada que bate."""
    if received == expected:
        return
    for diagnosis, wrong in variants:
        if wrong != expected and received == wrong:
            raise ExerciseError(
                f"{where}, esperava {_short(expected)}, recebi {_short(received)}: {diagnosis}"
            )
    raise ExerciseError(f"{where}, esperava {_short(expected)}, recebi {_short(received)}.")


_TOKENIZER_FILE = _tokenizer_module.__file__


# --------------------------------------------------------------------------------------
# Exercício 1: WordPiece, o pedaço mais longo primeiro
# --------------------------------------------------------------------------------------
def _wordpiece(
    word: str,
    vocab: set[str],
    *,
    shortest: bool = False,
    prefix: str = "##",
    local_unk: bool = False,
    strip: bool = False,
) -> list[str]:
    """A referência (e, com as opções, as variantes erradas típicas)."""
    pieces: list[str] = []
    start = 0
    while start < len(word):
        ends = range(start + 1, len(word) + 1) if shortest else range(len(word), start, -1)
        found = None
        for end in ends:
            piece = (prefix if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = (piece, end)
                break
        if found is None:
            if not local_unk:
                return [UNK_TOKEN]
            pieces.append(UNK_TOKEN)
            start += 1
            continue
        piece, start = found
        pieces.append(
            piece[len(prefix) :] if strip and piece.startswith(prefix) and prefix else piece
        )
    return pieces


_WORDPIECE_VOCAB = {
    "c",
    "ca",
    "cad",
    "##a",
    "##d",
    "##e",
    "##ei",
    "##eira",
    "##i",
    "##r",
    "##ra",
    "##o",
    "p",
    "pa",
    "##p",
    "##ã",
    "##ão",
    "a",
    "e",
    "ei",
    "##s",
}

# Pedaços com maiúscula e com espaço: a palavra entra como veio, sem normalização. Quem
# passa a palavra para minúsculas ou tira os espaços das pontas encontra outros pedaços.
_WORDPIECE_CASED_VOCAB = _WORDPIECE_VOCAB | {"C", "P", "##A", " ca", "##a "}

_WORDPIECE_CASES: list[tuple[str, set[str]]] = [
    ("cadeira", _WORDPIECE_VOCAB),  # cad + ##eira: o mais longo, não c + ##a + ...
    ("pão", _WORDPIECE_VOCAB),  # pa? não: "pã" não existe, então p + ##ão
    ("cadeiras", _WORDPIECE_VOCAB),
    ("papa", _WORDPIECE_VOCAB),  # o meio da palavra pede "##": "pa" sozinho não serve
    ("cadex", _WORDPIECE_VOCAB),  # "x" não existe: a palavra inteira vira <unk>
    ("eira", _WORDPIECE_VOCAB),  # no começo não há "##": ei + ##ra
    ("", _WORDPIECE_VOCAB),  # palavra vazia: nenhum pedaço
    # A caixa importa: "C" é outro pedaço que "c" (em minúsculas daria cad + ##eira).
    ("Cadeira", _WORDPIECE_CASED_VOCAB),  # C + ##a + ##d + ##eira
    ("PAPA", _WORDPIECE_CASED_VOCAB),  # P + ##A + <unk>: sem "##P", a palavra inteira
    # Os espaços importam: " ca" e "##a " são pedaços do vocabulário, com o espaço.
    (" cadeira", _WORDPIECE_CASED_VOCAB),  # " ca" + ##d + ##eira (sem o espaço: cad + ##eira)
    ("papa ", _WORDPIECE_CASED_VOCAB),  # pa + ##p + "##a " (sem o espaço: pa + ##p + ##a)
    ("cadeira ", _WORDPIECE_CASED_VOCAB),  # "##eira " não existe: <unk>
]


def _random_wordpiece_case(g: torch.Generator) -> tuple[str, set[str]]:
    rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=g)))
    alphabet = "abcde"
    vocab = set(alphabet) | {"##" + c for c in alphabet if rng.random() < 0.8}
    for _ in range(rng.randint(4, 10)):
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 4)))
        vocab.add(piece if rng.random() < 0.5 else "##" + piece)
    vocab.discard(rng.choice(sorted(vocab)))  # às vezes falta uma letra: aparece o <unk>
    word = "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 9)))
    return word, vocab


@exercise("Exercício 1 (WordPiece: o pedaço mais longo primeiro)")
def check_wordpiece(wordpiece_tokenize: Callable[[str, set[str]], list[str]]) -> None:
    """``wordpiece_tokenize(word, vocab) -> list[str]``; ``vocab`` é um conjunto de pedaços."""
    g, seed = case_generator()
    cases = [(word, vocab, None) for word, vocab in _WORDPIECE_CASES]
    cases += [(*_random_wordpiece_case(g), seed) for _ in range(30)]
    for word, vocab, case_seed in cases:
        vocab = set(vocab)  # cada caso com o seu conjunto (a resposta recebe este, o real)
        expected = _wordpiece(word, vocab)
        where = f"Para word={word!r}{seed_note(case_seed)}"
        if case_seed is not None:
            where += f" e vocab={_short(sorted(vocab), 200)}"
        received = call_answer(
            wordpiece_tokenize,
            {"word": word, "vocab": vocab},
            where,
            "Confira os índices do pedaço word[start:end] e a condição de parada.",
        )
        received = _as_token_list(received, where)
        _expect_tokens(
            received,
            expected,
            where,
            [
                (
                    "é o resultado de procurar o pedaço mais **curto** primeiro; o WordPiece "
                    "tenta o mais longo (end começa em len(word) e diminui).",
                    _wordpiece(word, vocab, shortest=True),
                ),
                (
                    "é o resultado de procurar os pedaços do meio da palavra sem o prefixo "
                    "'##'; depois do primeiro pedaço, procure '##' + word[start:end].",
                    _wordpiece(word, vocab, prefix=""),
                ),
                (
                    "os pedaços certos, mas sem o '##' na saída: os pedaços do meio da "
                    "palavra ficam com o prefixo (é assim que estão no vocabulário).",
                    _wordpiece(word, vocab, strip=True),
                ),
                (
                    f"é o resultado de trocar só o caractere sem pedaço por {UNK_TOKEN!r} e "
                    f"seguir; no WordPiece, a palavra inteira vira [{UNK_TOKEN!r}].",
                    _wordpiece(word, vocab, local_unk=True),
                ),
                (
                    "é o resultado de passar a palavra para minúsculas; a caixa faz parte "
                    "do pedaço ('C' e 'c' são pedaços diferentes no vocabulário), então "
                    "procure a palavra como ela veio.",
                    _wordpiece(word.lower(), vocab),
                ),
                (
                    "é o resultado de tirar os espaços das pontas da palavra (strip); o "
                    "espaço faz parte da palavra recebida e dos pedaços do vocabulário, "
                    "então procure a palavra como ela veio.",
                    _wordpiece(word.strip(), vocab),
                ),
            ],
        )


# --------------------------------------------------------------------------------------
# Exercício 2: preenchimento à esquerda, truncamento que preserva o <eos>
# --------------------------------------------------------------------------------------
_PAD_CASES: list[tuple[list[list[int]], int]] = [
    ([[5, 6, 7], [8], [9, 10]], 8),  # sem corte
    ([[], [5, 6, 7]], 8),  # a primeira sequência é vazia: torch.tensor([]) é float32
    ([[11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [4]], 6),  # a primeira é cortada
    ([[4, 4], [4, 4]], 10),  # mesmo comprimento: nenhum <pad>
    ([[9, 8, 7, 6], [5], []], 4),  # corte e sequência vazia juntos
    ([[7, 8, 9]], 2),  # max_length=2: sobram só <bos> e <eos>
]


def _left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    t = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), t), PAD_ID, dtype=torch.long)  # (b, t)
    mask = torch.ones(len(rows), t, dtype=torch.bool)  # (b, t)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, t - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, t - len(row) :] = False
    return input_ids, mask


def _pad_variants(sequences: list[list[int]], max_length: int) -> list[tuple[str, torch.Tensor]]:
    """As variantes erradas típicas, calculadas para o caso."""
    rows = [[BOS_ID, *ids[: max_length - 2], EOS_ID] for ids in sequences]
    t = max(len(row) for row in rows)
    right = torch.full((len(rows), t), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        right[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    keep_end = [[BOS_ID, *ids[max(len(ids) - (max_length - 2), 0) :], EOS_ID] for ids in sequences]
    variants = [
        (
            "o <pad> ficou à direita; aqui ele vai à esquerda, para que a última coluna "
            "(input_ids[:, -1]) seja o <eos> de toda linha.",
            right,
        ),
        (
            "o corte levou o <eos> embora: cortar [<bos>, ...texto, <eos>] em max_length "
            "tira o fim, onde está o <eos>. Corte o texto (ids[:max_length - 2]) e só "
            "depois ponha <bos> e <eos>.",
            _left_pad([[BOS_ID, *ids, EOS_ID][:max_length] for ids in sequences])[0],
        ),
        (
            "você guardou o fim do texto; o enunciado pede o começo (ids[:max_length - 2]).",
            _left_pad(keep_end)[0],
        ),
    ]
    no_specials = [ids[:max_length] for ids in sequences]
    if any(no_specials):
        variants.append(
            (
                "faltam o <bos> (tpt.BOS_ID) no início e o <eos> (tpt.EOS_ID) no fim de "
                "cada linha.",
                _left_pad(no_specials)[0],
            )
        )
    return variants


def _random_pad_case(g: torch.Generator) -> tuple[list[list[int]], int]:
    b = int(torch.randint(1, 6, (1,), generator=g))
    max_length = int(torch.randint(2, 9, (1,), generator=g))
    sequences = []
    for _ in range(b):
        length = int(torch.randint(0, 11, (1,), generator=g))
        sequences.append(torch.randint(4, 60, (length,), generator=g).tolist())
    return sequences, max_length


@exercise("Exercício 2 (lote preenchido à esquerda, com <eos> preservado)")
def check_pad_left(
    pad_left: Callable[[list[list[int]], int], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """``pad_left(sequences, max_length) -> (input_ids (b, t), padding_mask (b, t))``."""
    g, seed = case_generator()
    cases = [([list(s) for s in seqs], m, None) for seqs, m in _PAD_CASES]
    cases += [(*_random_pad_case(g), seed) for _ in range(20)]
    for sequences, max_length, case_seed in cases:
        rows = [[BOS_ID, *ids[: max_length - 2], EOS_ID] for ids in sequences]
        expected_ids, expected_mask = _left_pad(rows)
        where = f"Para sequences={_short(sequences)} e max_length={max_length}" + seed_note(
            case_seed
        )
        result = call_answer(
            pad_left,
            {"sequences": sequences, "max_length": max_length},
            where,
            "Confira os formatos e os tipos dos tensores que você monta"
            + (
                " (este caso tem uma sequência vazia, e torch.tensor([]) é float32: passe "
                "dtype=torch.long)."
                if not all(sequences)
                else "."
            ),
        )
        expect(
            isinstance(result, (tuple, list)) and len(result) == 2,
            f"{where}, esperava uma tupla (input_ids, padding_mask); recebi "
            f"{type(result).__name__}.",
        )
        input_ids, mask = result
        expect(
            isinstance(input_ids, torch.Tensor) and isinstance(mask, torch.Tensor),
            f"{where}, input_ids e padding_mask devem ser tensores; recebi "
            f"{type(input_ids).__name__} e {type(mask).__name__}.",
        )
        expect(
            input_ids.dtype == torch.long,
            f"{where}, input_ids deve ser torch.long (é o que nn.Embedding aceita); recebi "
            f"{input_ids.dtype}.",
        )
        expect(
            tuple(input_ids.shape) == tuple(expected_ids.shape),
            f"{where}, input_ids deveria ter formato (b, t) = {tuple(expected_ids.shape)} "
            "(t = a maior linha, com <bos> e <eos>, depois do corte); recebi "
            f"{tuple(input_ids.shape)}.",
        )
        if not torch.equal(input_ids, expected_ids):
            message = (
                f"{where}, input_ids esperado {expected_ids.tolist()}, recebi {input_ids.tolist()}"
            )
            for diagnosis, wrong in _pad_variants(sequences, max_length):
                if wrong.shape == input_ids.shape and torch.equal(wrong, input_ids):
                    raise ExerciseError(f"{message}: {diagnosis}")
            raise ExerciseError(message + ".")
        expect(
            mask.dtype == torch.bool and tuple(mask.shape) == tuple(expected_mask.shape),
            f"{where}, padding_mask deve ser torch.bool com formato "
            f"{tuple(expected_mask.shape)}; recebi {mask.dtype} com formato "
            f"{tuple(mask.shape)}.",
        )
        if not torch.equal(mask, expected_mask):
            message = (
                f"{where}, padding_mask esperada {expected_mask.tolist()} (True onde há "
                f"<pad>), recebi {mask.tolist()}"
            )
            if torch.equal(mask, ~expected_mask):
                raise ExerciseError(
                    f"{message}: a máscara está invertida; no tpt, True marca o <pad> "
                    "(posição bloqueada)."
                )
            if torch.equal(mask, expected_mask.flip(-1)):
                raise ExerciseError(
                    f"{message}: a máscara marca o fim das linhas, mas o <pad> está no começo."
                )
            raise ExerciseError(message + ".")


# --------------------------------------------------------------------------------------
# Exercício 3: uma palavra nova com as fusões aprendidas, na ordem
# --------------------------------------------------------------------------------------
def _merge(
    symbols: list[str],
    pair: tuple[str, str],
    *,
    loose: bool = False,
    once: bool = False,
    glued: bool = False,
) -> list[str]:
    """Uma fusão da esquerda para a direita (e, com as opções, as variantes erradas).

    ``glued``: junta quando o texto dos dois vizinhos é ``a + b``, sem olhar onde fica a
    fronteira entre eles (("a", "bc") passaria por ("ab", "c")).
    """
    merged: list[str] = []
    i, done = 0, False
    while i < len(symbols):
        pair_matches = False
        if i + 1 < len(symbols):
            left, right = symbols[i], symbols[i + 1]
            if glued:
                pair_matches = left + right == pair[0] + pair[1]
            else:
                pair_matches = left == pair[0] and (loose or right == pair[1])
        match = pair_matches and not (once and done)
        if match:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
            done = True
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def _merge_from_right(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    return [
        s[::-1] for s in _merge([s[::-1] for s in symbols[::-1]], (pair[1][::-1], pair[0][::-1]))
    ][::-1]


def _bpe_word(word: str, merges: list[tuple[str, str]], **options: bool) -> list[str]:
    symbols = list(word)
    for pair in merges:
        symbols = _merge(symbols, pair, **options)
    return symbols


def _bpe_word_from_right(word: str, merges: list[tuple[str, str]]) -> list[str]:
    symbols = list(word)
    for pair in merges:
        symbols = _merge_from_right(symbols, pair)
    return symbols


_BPE_CASES: list[tuple[str, list[tuple[str, str]]]] = [
    (" cadeira", [(" ", "c"), ("r", "a"), (" c", "a"), ("d", "e"), ("de", "i"), ("dei", "ra")]),
    ("abc", [("b", "c"), ("a", "b")]),  # a ordem decide: a + bc, não ab + c
    # a fronteira decide: "a" + "bc" tem o texto de "ab" + "c", mas não é esse par
    ("abc", [("b", "c"), ("ab", "c")]),
    ("aaaa", [("a", "a"), ("aa", "a")]),  # sobreposição: da esquerda para a direita
    ("aaa", [("a", "a")]),
    ("acab", [("a", "b")]),  # só o par inteiro: o "a" seguido de "c" fica
    ("são", [("ã", "o"), ("s", "ão")]),
    ("x", [("x", "y")]),
    ("", [("a", "b")]),
]


def _random_bpe_case(g: torch.Generator) -> tuple[str, list[tuple[str, str]]]:
    rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=g)))
    word = "".join(rng.choice("abc") for _ in range(rng.randint(4, 12)))
    tokens = list("abc")
    merges: list[tuple[str, str]] = []
    for _ in range(rng.randint(2, 7)):
        pair = (rng.choice(tokens), rng.choice(tokens))
        if pair not in merges:
            merges.append(pair)
            tokens.append(pair[0] + pair[1])
    return word, merges


_NO_TOKENIZER = (
    "a conferência viu rodar a função {names} do tpt.tokenizer (o merge_pair ou o "
    "BPETokenizer dão a resposta pronta): escreva a sua fusão."
)


@exercise("Exercício 3 (uma palavra nova com as fusões do BPE)")
def check_bpe_word(bpe_word: Callable[[str, list[tuple[str, str]]], list[str]]) -> None:
    """``bpe_word(word, merges) -> list[str]``: as fusões aplicadas na ordem da lista."""
    g, seed = case_generator()
    cases = [(word, list(merges), None) for word, merges in _BPE_CASES]
    cases += [(*_random_bpe_case(g), seed) for _ in range(30)]
    for word, merges, case_seed in cases:
        expected = _bpe_word(word, merges)
        where = f"Para word={word!r} e merges={_short(merges, 200)}" + seed_note(case_seed)
        with record_python_calls() as ran:
            try:
                received = call_answer(
                    bpe_word,
                    {"word": word, "merges": merges},
                    where,
                    "Confira os índices ao olhar o vizinho (i + 1) no fim da lista.",
                )
            except ExerciseError:
                used = functions_from_file(ran, _TOKENIZER_FILE)
                expect(not used, _NO_TOKENIZER.format(names=", ".join(sorted(used))))
                raise
        used = functions_from_file(ran, _TOKENIZER_FILE)
        expect(not used, _NO_TOKENIZER.format(names=", ".join(sorted(used))))
        received = _as_token_list(received, where)
        expect(
            "".join(received) == word,
            f"{where}, juntar os seus tokens dá {''.join(received)!r}, não a palavra: uma "
            "fusão só junta vizinhos, nunca perde nem repete caracteres.",
        )
        _expect_tokens(
            received,
            expected,
            where,
            [
                (
                    "é o resultado de aplicar as fusões na ordem inversa; a ordem é a da "
                    "lista, a mesma em que foram aprendidas.",
                    _bpe_word(word, merges[::-1]),
                ),
                (
                    "é o resultado de juntar quando só o primeiro token do par confere; "
                    "os dois precisam conferir (symbols[i] == a e symbols[i + 1] == b).",
                    _bpe_word(word, merges, loose=True),
                ),
                (
                    "é o resultado de juntar quando o texto dos dois vizinhos é a + b, sem "
                    "olhar a fronteira: ('a', 'bc') tem o texto de ('ab', 'c'), mas não é "
                    "esse par; compare cada token (symbols[i] == a e symbols[i + 1] == b).",
                    _bpe_word(word, merges, glued=True),
                ),
                (
                    "é o resultado de juntar só a primeira ocorrência de cada par; cada "
                    "fusão junta todas, da esquerda para a direita.",
                    _bpe_word(word, merges, once=True),
                ),
                (
                    "é o resultado de juntar da direita para a esquerda; numa sobreposição "
                    "(a, a, a), quem junta primeiro é o par da esquerda.",
                    _bpe_word_from_right(word, merges),
                ),
            ],
        )
