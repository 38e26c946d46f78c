"""Conferências dos exercícios de notebooks/01_tokens.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_build_vocab`: o vocabulário de caracteres (especiais primeiro, depois os
   caracteres do corpus em NFC, em ordem ordenada);
2. :func:`check_pad_batch`: um lote ``(b, t)`` preenchido com ``<pad>`` e a máscara de
   preenchimento na convenção do tpt (``True`` = ``<pad>`` = bloqueado);
3. :func:`check_merge_pair`: um passo do BPE (juntar um par de tokens vizinhos).

Cada conferência compara a resposta do aluno com a referência do :mod:`tpt.tokenizer`
e diz, em português, qual entrada falhou, o que era esperado e o que veio.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from tpt.exercises import exercise, expect
from tpt.tokenizer import PAD_ID, SPECIAL_TOKENS, CharTokenizer, merge_pair

__all__ = ["check_build_vocab", "check_pad_batch", "check_merge_pair"]


def _short(value: Any, limit: int = 120) -> str:
    """``repr`` encurtado para caber numa linha de retorno."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Exercício 1: vocabulário de caracteres
# --------------------------------------------------------------------------------------

_VOCAB_CASES: list[list[str]] = [
    ["pão", "cão"],
    ["João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre."],
    ["Açúcar e café.", "Você viu o pássaro?", "ação"],
    # "ação" chegando em NFD: "ç" e "ã" como letra + sinal combinante.
    [unicodedata.normalize("NFD", "ação e coração")],
]


@exercise("Exercício 1 (vocabulário a partir do corpus)")
def check_build_vocab(build_vocab: Callable[[list[str]], list[str]]) -> None:
    """``build_vocab(texts) -> list[str]``: especiais + caracteres em NFC, ordenados."""
    for texts in _VOCAB_CASES:
        expected = CharTokenizer.fit(texts).itos
        received = build_vocab(list(texts))
        where = f"para texts={_short(texts)}"
        expect(
            isinstance(received, (list, tuple)),
            f"{where} esperava uma lista de tokens; recebi {type(received).__name__}. "
            "Um set ou um dict não têm uma ordem confiável para virar ids.",
        )
        received = list(received)
        expect(
            received[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS),
            f"{where} os {len(SPECIAL_TOKENS)} primeiros itens devem ser os tokens especiais "
            f"{list(SPECIAL_TOKENS)} (ids fixos 0 a 3); recebi "
            f"{_short(received[: len(SPECIAL_TOKENS)])}.",
        )
        chars = received[len(SPECIAL_TOKENS) :]
        repeated = sorted(token for token, n in Counter(chars).items() if n > 1)
        expect(
            not repeated,
            f"{where} os tokens {_short(repeated)} aparecem mais de uma vez; cada token "
            "deve ter um único id.",
        )
        combining = [c for c in chars if isinstance(c, str) and unicodedata.combining(c)]
        expect(
            not combining,
            f"{where} o vocabulário tem sinais combinantes soltos {_short(combining)}: "
            "normalize cada texto com unicodedata.normalize('NFC', texto) antes de contar "
            "os caracteres.",
        )
        missing = sorted(set(expected) - set(received))
        extra = sorted(set(received) - set(expected), key=repr)
        expect(
            not missing,
            f"{where} faltam os caracteres {_short(missing)} no vocabulário.",
        )
        expect(
            not extra,
            f"{where} sobram tokens que não estão nos textos: {_short(extra)}.",
        )
        expect(
            received == expected,
            f"{where} os caracteres estão certos, mas fora de ordem: esperava "
            f"{_short(expected[len(SPECIAL_TOKENS):])} (use sorted), recebi {_short(chars)}. "
            "A ordem de um set muda de uma execução para outra.",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: lote com preenchimento e máscara
# --------------------------------------------------------------------------------------

_PAD_CASES: list[list[list[int]]] = [
    [[5, 6, 7], [8], [9, 10]],
    [[4, 4], [4, 4]],  # mesmo comprimento: nenhum <pad>
    [[11, 12, 13, 14]],  # lote com um texto só
    [[7], [7, 8, 9, 10, 11], [], [12, 13]],  # inclui uma sequência vazia
]


def _reference_pad(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)  # (b,)
    t = int(lengths.max())
    input_ids = torch.full((len(sequences), t), PAD_ID, dtype=torch.long)  # (b, t)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    padding_mask = torch.arange(t)[None, :] >= lengths[:, None]  # (b, t)
    return input_ids, padding_mask


@exercise("Exercício 2 (lote com <pad> e máscara)")
def check_pad_batch(
    pad_batch: Callable[[list[list[int]]], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """``pad_batch(sequences) -> (input_ids (b, t), padding_mask (b, t))``."""
    for sequences in _PAD_CASES:
        expected_ids, expected_mask = _reference_pad(sequences)
        result = pad_batch([list(s) for s in sequences])
        where = f"para sequences={sequences}"
        expect(
            isinstance(result, (tuple, list)) and len(result) == 2,
            f"{where} esperava uma tupla (input_ids, padding_mask); recebi "
            f"{type(result).__name__}.",
        )
        input_ids, mask = result
        expect(
            isinstance(input_ids, torch.Tensor) and isinstance(mask, torch.Tensor),
            f"{where} input_ids e padding_mask devem ser tensores; recebi "
            f"{type(input_ids).__name__} e {type(mask).__name__}.",
        )
        expect(
            tuple(input_ids.shape) == tuple(expected_ids.shape),
            f"{where} input_ids deveria ter formato (b, t) = {tuple(expected_ids.shape)} "
            f"(t = a maior sequência); recebi {tuple(input_ids.shape)}.",
        )
        expect(
            input_ids.dtype == torch.long,
            f"{where} input_ids deve ser torch.long (é o que nn.Embedding aceita); "
            f"recebi {input_ids.dtype}.",
        )
        expect(
            torch.equal(input_ids, expected_ids),
            f"{where} input_ids esperado {expected_ids.tolist()} (PAD_ID={PAD_ID} à direita), "
            f"recebi {input_ids.tolist()}.",
        )
        expect(
            tuple(mask.shape) == tuple(expected_mask.shape),
            f"{where} padding_mask deveria ter formato {tuple(expected_mask.shape)}; recebi "
            f"{tuple(mask.shape)}.",
        )
        expect(
            mask.dtype == torch.bool,
            f"{where} padding_mask deve ser torch.bool (True = <pad>); recebi {mask.dtype}.",
        )
        if expected_mask.any() and torch.equal(mask, ~expected_mask):
            expect(
                False,
                f"{where} sua máscara está invertida: no tpt, True marca o <pad> (posição "
                f"BLOQUEADA) e False o token real. Esperava {expected_mask.tolist()}, recebi "
                f"{mask.tolist()}.",
            )
        expect(
            torch.equal(mask, expected_mask),
            f"{where} padding_mask esperada {expected_mask.tolist()} (True onde a posição "
            f">= comprimento), recebi {mask.tolist()}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: um passo do BPE
# --------------------------------------------------------------------------------------

_MERGE_CASES: list[tuple[list[str], tuple[str, str]]] = [
    (["c", "ã", "o"], ("ã", "o")),
    ([" ", "c", "a", "d", "e", "i", "r", "a"], (" ", "c")),
    (["a", "r", "a", "r", "a"], ("a", "r")),  # duas ocorrências
    (["a", "a", "a"], ("a", "a")),  # sobreposição: da esquerda para a direita
    (["p", "ã", "o"], ("o", "p")),  # o par não aparece
    (["ab", "c", "a", "bc"], ("a", "bc")),  # tokens com mais de um caractere
]


@exercise("Exercício 3 (juntar um par do BPE)")
def check_merge_pair(
    merge: Callable[[list[str], tuple[str, str]], list[str]],
) -> None:
    """``merge(symbols, pair) -> list[str]``: junta cada ocorrência, da esquerda para a direita."""
    for symbols, pair in _MERGE_CASES:
        expected = merge_pair(symbols, pair)
        given = list(symbols)
        received = merge(given, pair)
        where = f"para symbols={symbols} e pair={pair}"
        expect(
            given == symbols,
            f"{where} sua função modificou a lista de entrada (virou {given}); devolva uma "
            "lista nova e deixe a original intacta.",
        )
        expect(
            isinstance(received, (list, tuple)),
            f"{where} esperava uma lista de tokens; recebi {type(received).__name__}.",
        )
        expect(
            list(received) == expected,
            f"{where} esperava {expected}, recebi {list(received)}.",
        )
