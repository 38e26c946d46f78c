"""Testes de tpt.data.number_text: texto de pré-treino, pares de instrução e a geração."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tpt
from tpt.data.number_text import (
    IGNORE_INDEX,
    INSTRUCTION_WORDS,
    instruction_batch,
    instruction_pair,
    instruction_vocab,
    pretraining_batch,
    pretraining_sequence,
    write_numbers,
)
from tpt.data.numbers import NumberVocab
from tpt.exercises.finetuning import _labels  # a referência do exercício 1


def words(vocab: NumberVocab, ids) -> str:
    return " ".join(vocab.ids_to_tokens(ids))


def test_vocab_extends_the_numbers_vocab():
    vocab, base = instruction_vocab(), NumberVocab()
    assert vocab.tokens[: base.vocab_size] == base.tokens  # os mesmos ids do notebook 08
    assert tuple(vocab.tokens[base.vocab_size :]) == INSTRUCTION_WORDS
    assert vocab.encode_source(1234) == base.encode_source(1234)
    assert vocab.encode_target(1234) == base.encode_target(1234)


def test_pretraining_sequence():
    vocab = instruction_vocab()
    assert words(vocab, pretraining_sequence(1234, vocab)) == (
        "<bos> 1 2 3 4 mil duzentos e trinta e quatro <eos>"
    )
    assert words(vocab, pretraining_sequence(7, vocab, parts="digits")) == "<bos> 7 <eos>"
    assert words(vocab, pretraining_sequence(7, vocab, parts="words")) == "<bos> sete <eos>"
    assert pretraining_sequence(1234) == pretraining_sequence(1234, vocab)  # vocabulário padrão
    # O texto de pré-treino nunca usa os tokens do pedido.
    asked = {vocab.stoi[w] for w in INSTRUCTION_WORDS}
    for n in (0, 7, 100, 1001, 999999):
        for parts in ("both", "digits", "words"):
            assert not asked & set(pretraining_sequence(n, vocab, parts=parts))
    # Funciona também com o vocabulário do notebook 08, que não tem os tokens do pedido.
    assert pretraining_sequence(1234, NumberVocab()) == pretraining_sequence(1234, vocab)


def test_instruction_pair():
    vocab = instruction_vocab()
    prompt, answer = instruction_pair(1234, vocab)
    assert words(vocab, prompt) == "<bos> Escreva por extenso: 1 2 3 4 ="
    assert words(vocab, answer) == "mil duzentos e trinta e quatro <eos>"


def test_instruction_batch_table():
    """A tabela da seção de instruções: o rótulo da posição i é o token i + 1, ou -100."""
    vocab = instruction_vocab()
    batch = instruction_batch([1234, 7], vocab)
    ids, targets = batch["input_ids"], batch["targets"]
    assert ids.shape == targets.shape == (2, 16)
    assert ids.dtype == targets.dtype == torch.long
    assert words(vocab, ids[1]) == "<bos> Escreva por extenso: 7 = sete <eos>" + " <pad>" * 8
    expected = [-100] * 5 + [vocab.stoi["sete"], vocab.eos_id] + [-100] * 9
    assert targets[1].tolist() == expected
    # A primeira posição cobrada de cada linha é a do "=": ela prevê a primeira palavra.
    first = (targets != IGNORE_INDEX).int().argmax(dim=1)
    assert [vocab.tokens[i] for i in ids[torch.arange(2), first].tolist()] == ["=", "="]


@pytest.mark.parametrize("mask_prompt", [True, False])
def test_instruction_batch_matches_the_exercise_reference(mask_prompt):
    vocab = instruction_vocab()
    numbers = [0, 7, 100, 1001, 654321, 1234]
    batch = instruction_batch(numbers, vocab, mask_prompt=mask_prompt)
    lengths = torch.tensor([len(instruction_pair(n, vocab)[0]) for n in numbers])
    if not mask_prompt:
        lengths = torch.zeros_like(lengths)
    reference = _labels(batch["input_ids"], lengths, vocab.pad_id)
    assert torch.equal(batch["targets"], reference)
    if (
        not mask_prompt
    ):  # sem a máscara, o pedido também é cobrado (menos o <bos>, que ninguém prevê)
        assert batch["targets"][1, 0].item() == vocab.stoi["Escreva"]


def test_pretraining_batch_matches_the_shift():
    vocab = instruction_vocab()
    numbers = [5, 1234, 100000]
    batch = pretraining_batch(numbers, vocab)
    ids, targets = batch["input_ids"], batch["targets"]
    assert ids.shape == targets.shape == (3, max(len(pretraining_sequence(n)) for n in numbers))
    assert torch.equal(targets, _labels(ids, torch.zeros(3, dtype=torch.long), vocab.pad_id))
    assert words(vocab, ids[0]).startswith("<bos> 5 cinco <eos> <pad>")
    # O <eos> é cobrado (o modelo aprende a parar); o <pad> e a última posição, não.
    assert targets[0, :3].tolist() == [vocab.stoi["5"], vocab.stoi["cinco"], vocab.eos_id]
    assert (targets[0, 3:] == IGNORE_INDEX).all()


def _tiny_gpt(vocab) -> tpt.GPT:
    """Um só-decoder de uma camada, semeado, com o vocabulário dos números."""
    torch.manual_seed(0)
    config = tpt.GPTConfig(
        vocab_size=vocab.vocab_size,
        max_len=32,
        embed_dim=16,
        num_heads=2,
        num_layers=1,
        positional="rope",
    )
    return tpt.GPT(config)


def test_batches_train_a_gpt():
    vocab = instruction_vocab()
    model = _tiny_gpt(vocab)
    for batch in (
        pretraining_batch([3, 45, 678901], vocab),
        instruction_batch([3, 45, 678901], vocab),
    ):
        loss = tpt.lm_loss(model, batch)
        assert torch.isfinite(loss)
        loss.backward()


class ScriptedModel(nn.Module):
    """Um "modelo" que escreve sempre os mesmos tokens depois do prompt (para testar a leitura)."""

    def __init__(self, vocab_size: int, script: list[int]) -> None:
        super().__init__()
        self.config = tpt.GPTConfig(vocab_size=vocab_size, max_len=32, embed_dim=4, num_heads=1)
        self.script = script
        self.dummy = nn.Parameter(torch.zeros(1))

    def new_cache(self) -> list[int]:
        return [0, 0]  # [tokens já lidos, comprimento do prompt]

    def forward(self, idx: torch.Tensor, cache: list[int], **kwargs) -> torch.Tensor:
        if cache[0] == 0:
            cache[1] = idx.shape[1]
        cache[0] += idx.shape[1]
        step = cache[0] - cache[1]  # quantos tokens já foram gerados
        logits = torch.zeros(idx.shape[0], idx.shape[1], self.config.vocab_size)
        logits[:, -1, self.script[min(step, len(self.script) - 1)]] = 1.0
        return logits


def test_write_numbers_reads_up_to_eos():
    vocab = instruction_vocab()
    sete, e = vocab.stoi["sete"], vocab.stoi["e"]
    model = ScriptedModel(vocab.vocab_size, [sete, e, vocab.eos_id, sete])
    assert write_numbers(model, [7, 1234, 7], vocab) == ["sete e"] * 3
    assert write_numbers(model, [7], vocab, prompt="digits") == ["sete e"]
    assert write_numbers(model, [7], vocab, max_new_tokens=1) == ["sete"]  # sem <eos>: até o limite
    # Um <pad> gerado antes do <eos> fica no texto: a resposta não conta como certa.
    model = ScriptedModel(vocab.vocab_size, [sete, vocab.pad_id, vocab.eos_id])
    assert write_numbers(model, [7], vocab) == ["sete <pad>"]
    model = ScriptedModel(vocab.vocab_size, [vocab.eos_id])
    assert write_numbers(model, [7], vocab) == [""]


def test_write_numbers_matches_generate():
    vocab = instruction_vocab()
    model = _tiny_gpt(vocab)
    numbers = [7, 1234, 56, 999999, 1234]
    got = write_numbers(model, numbers, vocab, max_new_tokens=5)
    assert len(got) == len(numbers) and got[1] == got[4]
    for n, text in zip(numbers, got, strict=True):
        prompt = torch.tensor([instruction_pair(n, vocab)[0]])
        out = tpt.generate(model, prompt, 5, greedy=True, eos_id=vocab.eos_id)[0, prompt.shape[1] :]
        tokens = out.tolist()
        tokens = tokens[: tokens.index(vocab.eos_id)] if vocab.eos_id in tokens else tokens
        assert text == vocab.decode(tokens, skip_special_tokens=False)


def test_errors_in_portuguese():
    vocab = instruction_vocab()
    with pytest.raises(ValueError, match="parts='tudo' desconhecido"):
        pretraining_sequence(1, vocab, parts="tudo")
    with pytest.raises(ValueError, match="numbers está vazio"):
        instruction_batch([], vocab)
    with pytest.raises(TypeError, match="lista de inteiros"):
        pretraining_batch(1234, vocab)
    with pytest.raises(TypeError, match="não é um inteiro"):
        instruction_batch([1.5], vocab)
    with pytest.raises(ValueError, match="fora do intervalo"):
        instruction_batch([-1], vocab)
    with pytest.raises(ValueError, match="tokens do pedido"):
        instruction_pair(7, NumberVocab())
    with pytest.raises(TypeError, match="NumberVocab"):
        instruction_batch([7], vocab=["<pad>"])
    with pytest.raises(TypeError, match="mask_prompt"):
        instruction_batch([7], vocab, mask_prompt="sim")
    model = ScriptedModel(vocab.vocab_size, [vocab.eos_id])
    with pytest.raises(ValueError, match="prompt='pedido' desconhecido"):
        write_numbers(model, [7], vocab, prompt="pedido")
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        write_numbers(model, [7], vocab, max_new_tokens=0)
    with pytest.raises(TypeError, match="max_new_tokens"):
        write_numbers(model, [7], vocab, max_new_tokens=2.0)
    with pytest.raises(ValueError, match="vocab_size=62.*58 tokens"):
        write_numbers(model, [7], NumberVocab(), prompt="digits")


def test_tensor_of_numbers_is_accepted():
    vocab = instruction_vocab()
    assert torch.equal(
        instruction_batch(torch.tensor([7, 12]), vocab)["input_ids"],
        instruction_batch([7, 12], vocab)["input_ids"],
    )


def test_exported_at_top_level():
    for name in (
        "pretraining_sequence",
        "pretraining_batch",
        "instruction_vocab",
        "instruction_pair",
        "instruction_batch",
        "write_numbers",
    ):
        assert getattr(tpt, name) is getattr(tpt.data, name)
