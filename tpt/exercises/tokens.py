"""Conferências dos exercícios de notebooks/01_tokens.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_build_vocab`: o vocabulário de caracteres com frequência mínima
   (especiais primeiro, depois os caracteres que aparecem pelo menos ``min_count`` vezes,
   contados depois da normalização NFC, na ordem dos códigos Unicode);
2. :func:`check_pad_left`: um lote ``(b, t)`` com ``<bos>``/``<eos>``, truncamento que
   preserva o ``<eos>`` e preenchimento **à esquerda**, com a máscara de preenchimento
   na convenção do tpt (``True`` = ``<pad>`` = bloqueado);
3. :func:`check_merge_pair`: um passo do BPE (juntar um par de tokens vizinhos), sem
   usar o ``merge_pair`` do tpt.

Cada conferência compara a resposta do aluno com uma referência e diz, em português,
qual entrada falhou, o que era esperado, o que veio e qual é o erro provável.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

import tpt.tokenizer as tokenizer_module
from tpt.exercises import ExerciseError, exercise, expect, forbid, references, refers_to
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS

__all__ = ["check_build_vocab", "check_pad_left", "check_merge_pair"]


def _short(value: Any, limit: int = 120) -> str:
    """``repr`` encurtado para caber numa linha de retorno."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call(fn: Callable[..., Any], where: str, hint: str, *args: Any) -> Any:
    """Chama a resposta do aluno; um erro do Python/PyTorch vira uma dica em português."""
    try:
        return fn(*args)
    except (NotImplementedError, ExerciseError):
        raise
    except Exception as err:  # noqa: BLE001 - qualquer erro do aluno vira explicação
        raise ExerciseError(
            f"{where} sua função levantou {type(err).__name__}. {hint} (mensagem original: {err})"
        ) from None


# --------------------------------------------------------------------------------------
# Exercício 1: vocabulário com frequência mínima
# --------------------------------------------------------------------------------------

_VOCAB_CASES: list[tuple[list[str], int]] = [
    (["pão", "cão"], 1),
    (["pão", "cão"], 2),  # só 'ã' e 'o' aparecem duas vezes
    (["Açúcar e café.", "Você viu o pássaro?", "ação"], 1),  # maiúsculas: a ordem importa
    (["João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre."], 3),
    # "ação" em NFC num texto e em NFD no outro: 'ç' e 'ã' só chegam a 2 depois do NFC.
    (["ação", unicodedata.normalize("NFD", "coração")], 2),
    (["abc"], 5),  # nenhum caractere chega a 5: só os especiais
]


def _char_counts(texts: list[str]) -> Counter[str]:
    return Counter("".join(unicodedata.normalize("NFC", text) for text in texts))


def _reference_vocab(texts: list[str], min_count: int) -> list[str]:
    counts = _char_counts(texts)
    return [*SPECIAL_TOKENS, *sorted(c for c, n in counts.items() if n >= min_count)]


def _order_hint(chars: list[str], expected: list[str], counts: Counter[str]) -> str:
    """Explica uma ordem errada com a causa mais provável."""
    rule = (
        "A ordem dos ids é a dos códigos Unicode: sorted(...) sem key nem reverse, em que "
        "'A' (U+0041) vem antes de 'a' (U+0061)."
    )
    if chars == sorted(expected, key=str.lower) or chars == sorted(expected, key=str.casefold):
        return f"Parece uma ordenação com key=str.lower (maiúsculas junto das minúsculas). {rule}"
    if chars == sorted(expected, reverse=True):
        return f"Os caracteres estão em ordem decrescente. {rule}"
    by_count = sorted(expected, key=lambda c: (-counts[c], c))
    tied = len({counts[c] for c in expected}) == 1
    by_first_seen = [c for c, _ in counts.most_common() if c in expected]
    if not tied and chars in (by_count, by_first_seen):
        return (
            "Parece a ordem de frequência (most_common): a frequência só decide quem entra. " + rule
        )
    return (
        f"{rule} Se a lista veio de um set, a ordem muda de um processo do Python para outro "
        "(PYTHONHASHSEED), e os ids mudariam junto."
    )


@exercise("Exercício 1 (vocabulário com frequência mínima)")
def check_build_vocab(build_vocab: Callable[[list[str], int], list[str]]) -> None:
    """``build_vocab(texts, min_count) -> list[str]``: especiais + caracteres frequentes."""
    for texts, min_count in _VOCAB_CASES:
        expected = _reference_vocab(texts, min_count)
        counts = _char_counts(texts)
        where = f"para texts={_short(texts)} e min_count={min_count}"
        received = _call(
            build_vocab,
            where,
            "Confira que a função recebe (texts, min_count) e devolve uma lista de strings.",
            list(texts),
            min_count,
        )
        expect(
            isinstance(received, (list, tuple)),
            f"{where} esperava uma lista de tokens; recebi {type(received).__name__}. "
            "Um set ou um dict não têm uma ordem confiável para virar ids.",
        )
        received = list(received)
        expect(
            received[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS),
            f"{where} os {len(SPECIAL_TOKENS)} primeiros itens devem ser os tokens especiais "
            f"{list(SPECIAL_TOKENS)} (ids fixos 0 a 3), mesmo quando nenhum caractere passa "
            f"do limite; recebi {_short(received[: len(SPECIAL_TOKENS)])}.",
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
        expected_chars = expected[len(SPECIAL_TOKENS) :]
        missing = sorted(set(expected_chars) - set(chars))
        extra = sorted(set(chars) - set(expected_chars), key=repr)
        if missing:
            at_limit = [c for c in missing if counts[c] == min_count]
            raw_counts = Counter("".join(texts))
            needs_nfc = [c for c in missing if raw_counts[c] < min_count]
            if needs_nfc:
                detail = (
                    f"{_short(needs_nfc)} só chegam a {min_count} ocorrências depois da "
                    "normalização NFC (um dos textos chega em NFD): normalize cada texto "
                    "antes de contar."
                )
            elif len(at_limit) == len(missing):
                detail = (
                    f"eles aparecem exatamente min_count={min_count} vezes: a regra é "
                    "'pelo menos min_count' (>=, não >)."
                )
            else:
                detail = "conte as ocorrências em todos os textos juntos (Counter)."
            expect(False, f"{where} faltam os caracteres {_short(missing)}; {detail}")
        if extra:
            rare = {c: counts.get(c, 0) for c in extra if isinstance(c, str)}
            expect(
                False,
                f"{where} sobram tokens {_short(extra)}: aparecem {_short(rare)} vezes, "
                f"menos que min_count={min_count} (ou nem estão nos textos). Os raros ficam "
                "de fora do vocabulário e viram <unk>.",
            )
        expect(
            chars == expected_chars,
            f"{where} os caracteres estão certos, mas fora de ordem: esperava "
            f"{_short(expected_chars)}, recebi {_short(chars)}. "
            + _order_hint(chars, expected_chars, counts),
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


def _reference_rows(sequences: list[list[int]], max_length: int) -> list[list[int]]:
    return [[BOS_ID, *ids[: max_length - 2], EOS_ID] for ids in sequences]


def _left_pad(rows: list[list[int]], t: int) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.full((len(rows), t), PAD_ID, dtype=torch.long)  # (b, t)
    mask = torch.ones(len(rows), t, dtype=torch.bool)  # (b, t)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, t - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, t - len(row) :] = False
    return input_ids, mask


def _right_pad(rows: list[list[int]], t: int) -> torch.Tensor:
    input_ids = torch.full((len(rows), t), PAD_ID, dtype=torch.long)  # (b, t)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return input_ids


def _diagnose_rows(
    sequences: list[list[int]], max_length: int, received: torch.Tensor, t: int
) -> str | None:
    """Reconhece os erros comuns de corte e de lado do preenchimento."""
    rows = _reference_rows(sequences, max_length)
    candidates = {
        "right": _right_pad(rows, t),
        "cut_eos": _left_pad([[BOS_ID, *ids, EOS_ID][:max_length] for ids in sequences], t)[0],
        "keep_end": _left_pad(
            [[BOS_ID, *ids[max(len(ids) - (max_length - 2), 0) :], EOS_ID] for ids in sequences],
            t,
        )[0],
        "no_specials": _left_pad([ids[:max_length] for ids in sequences], t)[0],
        "no_bos": _left_pad([[*ids[: max_length - 1], EOS_ID] for ids in sequences], t)[0],
    }
    messages = {
        "right": "o <pad> ficou à direita; aqui ele vai à esquerda, para que a última "
        "coluna (input_ids[:, -1]) seja o <eos> de toda linha.",
        "cut_eos": "o corte levou o <eos> embora: ao cortar [<bos>, ...texto, <eos>] em "
        "max_length, o fim (onde está o <eos>) some. Corte o texto (ids[:max_length - 2]) "
        "e só depois ponha <bos> e <eos>.",
        "keep_end": "você guardou o fim do texto; o enunciado pede o começo "
        "(ids[:max_length - 2]), como o truncation=True do tpt.",
        "no_specials": "faltam o <bos> (tpt.BOS_ID) no início e o <eos> (tpt.EOS_ID) no "
        "fim de cada linha.",
        "no_bos": "falta o <bos> (tpt.BOS_ID) no início de cada linha (e ele também conta "
        "em max_length).",
    }
    for name, candidate in candidates.items():
        if tuple(candidate.shape) == tuple(received.shape) and torch.equal(candidate, received):
            return messages[name]
    return None


@exercise("Exercício 2 (lote preenchido à esquerda, com <eos> preservado)")
def check_pad_left(
    pad_left: Callable[[list[list[int]], int], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """``pad_left(sequences, max_length) -> (input_ids (b, t), padding_mask (b, t))``."""
    for sequences, max_length in _PAD_CASES:
        rows = _reference_rows(sequences, max_length)
        t = max(len(row) for row in rows)
        expected_ids, expected_mask = _left_pad(rows, t)
        where = f"para sequences={sequences} e max_length={max_length}"
        hint = (
            "Dica: torch.tensor([]) (uma sequência vazia) cria um tensor float32; crie os "
            "tensores com dtype=torch.long."
            if any(not s for s in sequences)
            else "Confira os formatos e os tipos dos tensores que você monta."
        )
        result = _call(pad_left, where, hint, [list(s) for s in sequences], max_length)
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
        if input_ids.is_floating_point():
            expect(
                not any(not s for s in sequences),
                f"{where} input_ids veio {input_ids.dtype}: a sequência vazia virou "
                "torch.tensor([]), que é float32, e o tipo dela contaminou o lote (o "
                "pad_sequence usa o tipo da primeira linha). Passe dtype=torch.long.",
            )
        expect(
            input_ids.dtype == torch.long,
            f"{where} input_ids deve ser torch.long (é o que nn.Embedding aceita); "
            f"recebi {input_ids.dtype}.",
        )
        if input_ids.dim() == 2 and input_ids.shape[0] == len(sequences):
            longest = max(len(s) + 2 for s in sequences)
            if input_ids.shape[1] == longest and longest > max_length:
                expect(
                    False,
                    f"{where} input_ids tem {longest} colunas, mais que max_length: "
                    "corte o texto das sequências longas (truncamento).",
                )
            if input_ids.shape[1] == max_length and t < max_length:
                expect(
                    False,
                    f"{where} input_ids tem max_length={max_length} colunas, mas t deve "
                    f"ser o comprimento da maior linha depois do corte ({t}); max_length "
                    "é só o limite.",
                )
        expect(
            tuple(input_ids.shape) == tuple(expected_ids.shape),
            f"{where} input_ids deveria ter formato (b, t) = {tuple(expected_ids.shape)} "
            f"(t = a maior linha, com <bos> e <eos>, depois do corte); recebi "
            f"{tuple(input_ids.shape)}.",
        )
        if not torch.equal(input_ids, expected_ids):
            diagnosis = _diagnose_rows(sequences, max_length, input_ids, t)
            expect(
                False,
                f"{where} input_ids esperado {expected_ids.tolist()}, recebi "
                f"{input_ids.tolist()}. "
                + (
                    diagnosis
                    or "Cada linha é [<bos>, ids[:max_length - 2]..., <eos>], "
                    f"com PAD_ID={PAD_ID} à esquerda."
                ),
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
                f"bloqueada) e False o token real. Esperava {expected_mask.tolist()}, "
                f"recebi {mask.tolist()}.",
            )
        flipped = expected_mask.flip(-1)
        if expected_mask.any() and torch.equal(mask, flipped):
            expect(
                False,
                f"{where} a máscara marca o fim das linhas, mas o <pad> agora está no "
                f"começo: esperava {expected_mask.tolist()}, recebi {mask.tolist()}. A "
                "máscara tem de apontar para onde os <pad> estão (input_ids == tpt.PAD_ID).",
            )
        expect(
            torch.equal(mask, expected_mask),
            f"{where} padding_mask esperada {expected_mask.tolist()} (True onde há <pad>), "
            f"recebi {mask.tolist()}.",
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

_NO_MERGE_PAIR = (
    "o exercício pede a sua versão da fusão: não chame o merge_pair do tpt (ele é a "
    "resposta pronta)."
)


@exercise("Exercício 3 (juntar um par do BPE)")
def check_merge_pair(
    merge: Callable[[list[str], tuple[str, str]], list[str]],
) -> None:
    """``merge(symbols, pair) -> list[str]``: junta cada ocorrência, da esquerda para a direita."""
    reference = tokenizer_module.merge_pair
    expect(
        not references(merge, "merge_pair") and not refers_to(merge, reference),
        _NO_MERGE_PAIR,
    )
    with forbid(tokenizer_module, "merge_pair", _NO_MERGE_PAIR):
        for symbols, pair in _MERGE_CASES:
            expected = reference(symbols, pair)
            given = list(symbols)
            where = f"para symbols={symbols} e pair={pair}"
            received = _call(
                merge,
                where,
                "Confira os índices ao olhar o vizinho (i + 1) no fim da lista.",
                given,
                pair,
            )
            expect(
                given == symbols,
                f"{where} sua função modificou a lista de entrada (virou {given}); devolva "
                "uma lista nova e deixe a original intacta.",
            )
            expect(
                isinstance(received, (list, tuple)),
                f"{where} esperava uma lista de tokens; recebi {type(received).__name__}.",
            )
            expect(
                list(received) == expected,
                f"{where} esperava {expected}, recebi {list(received)}.",
            )
