"""Os números por extenso como texto de um modelo só-decoder: pré-treino e instruções.

Ver notebooks/12_ajuste_fino.ipynb (seção "Ajuste por instruções").

A tarefa do notebook 08 (1234 -> "mil duzentos e trinta e quatro") escrita de dois jeitos,
os dois numa sequência só, para um `tpt.GPT`:

- **texto de pré-treino**, sem pedido nem rótulo: os algarismos ao lado das palavras,
  `<bos> 1 2 3 4 mil duzentos e trinta e quatro <eos>`. A perda cobra todos os tokens,
  como em qualquer texto. `parts="digits"` ou `parts="words"` escreve só uma das metades
  (os controles: um texto sem a associação algarismo-palavra);
- **par de instrução**, pedido -> resposta:
  `<bos> Escreva por extenso: 1 2 3 4 =` | `mil duzentos e trinta e quatro <eos>`. Com
  `mask_prompt=True`, a perda cobra só a resposta: os rótulos das posições cujo próximo
  token é do pedido (e das de `<pad>`) são -100, o `ignore_index` da `F.cross_entropy`.

Os lotes têm `input_ids` `(b, t)`, com `<pad>` à direita, e `targets` `(b, t)`, o token
seguinte de cada posição ou -100: o formato de `tpt.lm_loss` e de `tpt.lm_batches`.
O vocabulário é o de `NumberVocab` com os quatro tokens do pedido no fim
(`instruction_vocab`): o texto de pré-treino nunca os usa.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tpt.data.numbers import DIGITS, SPECIAL_TOKENS, WORDS, NumberVocab, _check_number

__all__ = [
    "IGNORE_INDEX",
    "INSTRUCTION_WORDS",
    "PRETRAINING_PARTS",
    "instruction_batch",
    "instruction_pair",
    "instruction_vocab",
    "pretraining_batch",
    "pretraining_sequence",
    "write_numbers",
]

IGNORE_INDEX = -100
"""O rótulo das posições que a perda não cobra (o `ignore_index` padrão da `F.cross_entropy`)."""

INSTRUCTION_WORDS: tuple[str, ...] = ("Escreva", "por", "extenso:", "=")
"""Os tokens do pedido: as três palavras da instrução e o "=" que fecha o pedido."""

PRETRAINING_PARTS: tuple[str, ...] = ("both", "digits", "words")
"""O que `pretraining_sequence` escreve: algarismos e palavras, só algarismos ou só palavras."""


def instruction_vocab() -> NumberVocab:
    """O vocabulário do notebook 08 com os quatro tokens de `INSTRUCTION_WORDS` no fim.

    Os ids dos especiais, dos algarismos e das palavras são os de `NumberVocab()`; os do
    pedido vêm depois deles.
    """
    return NumberVocab(list(SPECIAL_TOKENS) + list(DIGITS) + list(WORDS) + list(INSTRUCTION_WORDS))


def _check_vocab(vocab: Any, *, instruction: bool) -> NumberVocab:
    if vocab is None:
        return instruction_vocab()
    if not isinstance(vocab, NumberVocab):
        raise TypeError(
            f"vocab deve ser um NumberVocab (por exemplo, tpt.data.instruction_vocab()); "
            f"recebi {type(vocab).__name__}"
        )
    if instruction:
        missing = [w for w in INSTRUCTION_WORDS if w not in vocab.stoi]
        if missing:
            raise ValueError(
                f"o vocabulário não tem os tokens do pedido {missing}; use "
                f"tpt.data.instruction_vocab() (o de NumberVocab com {list(INSTRUCTION_WORDS)})"
            )
    return vocab


def _check_numbers(numbers: Any) -> list[int]:
    if isinstance(numbers, (str, bytes)) or not isinstance(numbers, Sequence):
        if isinstance(numbers, Tensor) and numbers.dim() == 1:
            numbers = numbers.tolist()
        else:
            raise TypeError(
                f"numbers deve ser uma lista de inteiros (os números do lote); recebi "
                f"{type(numbers).__name__}"
            )
    if len(numbers) == 0:
        raise ValueError("numbers está vazio: um lote precisa de ao menos um número")
    return [_check_number(n, "número") for n in numbers]


def pretraining_sequence(
    n: int, vocab: NumberVocab | None = None, *, parts: str = "both"
) -> list[int]:
    """Ids do texto de pré-treino de `n`: `<bos> 1 2 3 4 mil duzentos ... <eos>`.

    `parts="both"` (padrão) escreve os algarismos e depois as palavras; `"digits"` só os
    algarismos e `"words"` só as palavras (os controles, sem a associação entre os dois).
    Nunca usa os tokens do pedido.
    """
    vocab = _check_vocab(vocab, instruction=False)
    if parts not in PRETRAINING_PARTS:
        raise ValueError(
            f"parts={parts!r} desconhecido; opções: {', '.join(map(repr, PRETRAINING_PARTS))}"
        )
    digits = vocab.encode_source(n) if parts in ("both", "digits") else []
    words = vocab.encode_target(n) if parts in ("both", "words") else []
    return [vocab.bos_id, *digits, *words, vocab.eos_id]


def instruction_pair(n: int, vocab: NumberVocab | None = None) -> tuple[list[int], list[int]]:
    """(pedido, resposta) de `n`, em ids.

    Pedido: `<bos> Escreva por extenso: 1 2 3 4 =`; resposta: `mil duzentos e trinta e
    quatro <eos>`. A sequência de treino é `pedido + resposta`.
    """
    vocab = _check_vocab(vocab, instruction=True)
    instruction = [vocab.stoi[w] for w in INSTRUCTION_WORDS[:-1]]
    prompt = [
        vocab.bos_id,
        *instruction,
        *vocab.encode_source(n),
        vocab.stoi[INSTRUCTION_WORDS[-1]],
    ]
    return prompt, [*vocab.encode_target(n), vocab.eos_id]


def _lm_batch(rows: list[tuple[list[int], int]], pad_id: int) -> dict[str, Tensor]:
    """Lote `(b, t)` de sequências (ids, comprimento do trecho não cobrado).

    A posição i lê o token i e tem como rótulo o token i + 1; o rótulo é -100 quando esse
    token está no trecho não cobrado (as primeiras `skip` posições) ou não existe
    (`<pad>` e a última posição de cada sequência).
    """
    t = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), t), pad_id, dtype=torch.long)  # (b, t)
    targets = torch.full((len(rows), t), IGNORE_INDEX, dtype=torch.long)  # (b, t)
    for row, (ids, skip) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        for i in range(len(ids) - 1):  # a posição i prevê o token i + 1
            if i + 1 >= skip:
                targets[row, i] = ids[i + 1]
    return {"input_ids": input_ids, "targets": targets}


def pretraining_batch(
    numbers: Sequence[int], vocab: NumberVocab | None = None, *, parts: str = "both"
) -> dict[str, Tensor]:
    """Lote de texto de pré-treino: `input_ids` `(b, t)` e `targets` `(b, t)`.

    Uma sequência de `pretraining_sequence` por número, com `<pad>` à direita. O rótulo da
    posição i é o token i + 1 (todos os tokens do texto contam, até o `<eos>`); as
    posições cujo próximo token seria `<pad>` e a última ficam em -100. Pronto para
    `tpt.lm_loss`.
    """
    vocab = _check_vocab(vocab, instruction=False)
    rows = [(pretraining_sequence(n, vocab, parts=parts), 0) for n in _check_numbers(numbers)]
    return _lm_batch(rows, vocab.pad_id)


def instruction_batch(
    numbers: Sequence[int], vocab: NumberVocab | None = None, *, mask_prompt: bool = True
) -> dict[str, Tensor]:
    """Lote de pares de instrução: `input_ids` `(b, t)` e `targets` `(b, t)`.

    Cada linha é `pedido + resposta` (`instruction_pair`) com `<pad>` à direita. O rótulo
    da posição i é o token i + 1, ou -100 quando esse token é `<pad>` (ou não existe) e,
    com `mask_prompt=True` (padrão), quando ele é do pedido: a primeira posição cobrada é
    a do "=", que prevê a primeira palavra da resposta. Com `mask_prompt=False`, a perda
    cobra também o pedido (os tokens depois do `<bos>`).
    """
    vocab = _check_vocab(vocab, instruction=True)
    if not isinstance(mask_prompt, bool):
        raise TypeError(f"mask_prompt={mask_prompt!r} deve ser True ou False")
    rows = []
    for n in _check_numbers(numbers):
        prompt, answer = instruction_pair(n, vocab)
        rows.append((prompt + answer, len(prompt) if mask_prompt else 0))
    return _lm_batch(rows, vocab.pad_id)


def write_numbers(
    model: nn.Module,
    numbers: Sequence[int],
    vocab: NumberVocab | None = None,
    *,
    prompt: str = "instruction",
    max_new_tokens: int = 20,
) -> list[str]:
    """O que `model` (um `tpt.GPT`) escreve para cada número, por geração gulosa.

    `prompt="instruction"`: o pedido de `instruction_pair` (`<bos> Escreva por extenso:
    1 2 3 4 =`); `prompt="digits"`: o começo do texto de pré-treino (`<bos> 1 2 3 4`).
    Devolve um texto por número, na ordem de `numbers`, com o que veio depois do prompt
    até o primeiro `<eos>` (ou até `max_new_tokens` tokens), decodificado por
    `vocab.decode` sem pular os especiais (um `<pad>` gerado fica no texto). Os prompts
    do mesmo comprimento vão no mesmo lote `(b, p)`, sem `<pad>`. Compare com
    `tpt.number_to_words(n)` para o acerto exato.
    """
    from tpt.generation import generate  # aqui: tpt.generation é carregado depois de tpt.data

    if prompt not in ("instruction", "digits"):
        raise ValueError(f"prompt={prompt!r} desconhecido; opções: 'instruction', 'digits'")
    vocab = _check_vocab(vocab, instruction=prompt == "instruction")
    if isinstance(max_new_tokens, bool):
        raise TypeError(f"max_new_tokens={max_new_tokens!r} deve ser um inteiro >= 1")
    try:
        max_new_tokens = operator.index(max_new_tokens)
    except TypeError:
        raise TypeError(f"max_new_tokens={max_new_tokens!r} deve ser um inteiro >= 1") from None
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} deve ser >= 1")
    config = getattr(model, "config", None)
    if getattr(config, "vocab_size", None) != vocab.vocab_size:
        raise ValueError(
            f"o modelo tem vocab_size={getattr(config, 'vocab_size', None)}, mas o vocabulário "
            f"tem {vocab.vocab_size} tokens: use o mesmo vocabulário do treino"
        )
    numbers = _check_numbers(numbers)
    device = next(model.parameters()).device
    by_length: dict[int, list[int]] = {}
    prompts: dict[int, list[int]] = {}
    for n in dict.fromkeys(numbers):  # cada número uma vez, na ordem em que aparece
        if prompt == "instruction":
            ids = instruction_pair(n, vocab)[0]
        else:
            ids = [vocab.bos_id, *vocab.encode_source(n)]
        prompts[n] = ids
        by_length.setdefault(len(ids), []).append(n)
    answers: dict[int, str] = {}
    for length, group in by_length.items():
        idx = torch.tensor([prompts[n] for n in group], device=device)  # (b, p)
        out = generate(model, idx, max_new_tokens, greedy=True, eos_id=vocab.eos_id)  # (b, p + k)
        for n, row in zip(group, out[:, length:].tolist(), strict=True):
            if vocab.eos_id in row:
                row = row[: row.index(vocab.eos_id)]  # o que veio antes do primeiro <eos>
            # Sem pular especiais: um <pad> ou <bos> gerado aparece na resposta (e ela erra).
            answers[n] = vocab.decode(row, skip_special_tokens=False)
    return [answers[n] for n in numbers]
