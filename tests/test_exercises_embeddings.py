"""Conferências dos exercícios do notebook 02_embeddings (tpt.exercises.embeddings)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import tpt
from tpt.exercises import embeddings as ex

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook)
# --------------------------------------------------------------------------------------


def embed_one_hot(ids, weight):
    one_hot = F.one_hot(ids, num_classes=weight.shape[0]).to(weight.dtype)  # (..., V)
    return one_hot @ weight  # (..., d)


def make_embedding(tokenizer, embed_dim):
    return nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)


def cosine_matrix(vectors):
    unit = F.normalize(vectors, dim=-1)
    return unit @ unit.T


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


# --------------------------------------------------------------------------------------
# Exercício 1
# --------------------------------------------------------------------------------------


def test_embed_one_hot_reference_passes(capsys):
    assert ex.check_embed_one_hot(embed_one_hot) is True
    assert "✅" in capsys.readouterr().out


def test_embed_one_hot_indexing_also_passes(capsys):
    # Indexar direto dá o mesmo resultado: a conferência olha o resultado, não o método.
    assert ex.check_embed_one_hot(lambda ids, weight: weight[ids]) is True


def test_embed_one_hot_stub_is_pending(capsys):
    assert ex.check_embed_one_hot(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


def test_embed_one_hot_returning_the_one_hot_is_reported(capsys):
    def only_one_hot(ids, weight):
        return F.one_hot(ids, num_classes=weight.shape[0]).to(weight.dtype)

    assert ex.check_embed_one_hot(only_one_hot) is False
    out = capsys.readouterr().out
    assert "❌" in out and "próprio one-hot" in out and "(5, 7)" in out and "(5, 3)" in out


def test_embed_one_hot_by_position_is_reported(capsys):
    def by_position(ids, weight):
        return weight[torch.arange(ids.shape[-1]).expand_as(ids)]

    assert ex.check_embed_one_hot(by_position) is False
    out = capsys.readouterr().out
    assert "POSIÇÃO" in out and "weight[ids[i]]" in out and "[4, 1, 6, 1, 0]" in out


def test_embed_one_hot_forgetting_the_dtype_is_explained(capsys):
    def long_one_hot(ids, weight):
        return F.one_hot(ids, num_classes=weight.shape[0]) @ weight

    assert ex.check_embed_one_hot(long_one_hot) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and ".to(weight.dtype)" in out


def test_embed_one_hot_scaled_is_reported(capsys):
    def scaled(ids, weight):
        return embed_one_hot(ids, weight) * math.sqrt(weight.shape[1])

    assert ex.check_embed_one_hot(scaled) is False
    assert "sqrt(d)=1.7321" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 2
# --------------------------------------------------------------------------------------


def test_make_embedding_reference_passes(capsys):
    assert ex.check_make_embedding(make_embedding) is True
    assert "✅" in capsys.readouterr().out


def test_make_embedding_token_embedding_is_accepted(capsys):
    def with_tpt(tokenizer, embed_dim):
        return tpt.TokenEmbedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)

    assert ex.check_make_embedding(with_tpt) is True


def test_make_embedding_stub_is_pending(capsys):
    assert ex.check_make_embedding(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_make_embedding_without_special_tokens_is_reported(capsys):
    def only_chars(tokenizer, embed_dim):
        return nn.Embedding(len(tokenizer.chars), embed_dim, padding_idx=tpt.PAD_ID)

    assert ex.check_make_embedding(only_chars) is False
    out = capsys.readouterr().out
    assert "❌" in out and "tokens especiais" in out and "tokenizer.vocab_size" in out


def test_make_embedding_without_padding_idx_is_reported(capsys):
    def no_padding(tokenizer, embed_dim):
        return nn.Embedding(tokenizer.vocab_size, embed_dim)

    assert ex.check_make_embedding(no_padding) is False
    out = capsys.readouterr().out
    assert "padding_idx=None" in out and "PAD_ID=0" in out and "pão e cão" in out


def test_make_embedding_wrong_width_is_reported(capsys):
    def wrong_width(tokenizer, embed_dim):
        return nn.Embedding(tokenizer.vocab_size, 2 * embed_dim, padding_idx=tpt.PAD_ID)

    assert ex.check_make_embedding(wrong_width) is False
    assert "embedding_dim=8; esperava d=4" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 3
# --------------------------------------------------------------------------------------


def test_cosine_matrix_reference_passes(capsys):
    assert ex.check_cosine_matrix(cosine_matrix) is True
    assert "✅" in capsys.readouterr().out


def test_cosine_matrix_torch_function_passes(capsys):
    def with_torch(vectors):
        return F.cosine_similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)

    assert ex.check_cosine_matrix(with_torch) is True


def test_cosine_matrix_stub_is_pending(capsys):
    assert ex.check_cosine_matrix(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_cosine_matrix_dot_products_are_reported(capsys):
    assert ex.check_cosine_matrix(lambda vectors: vectors @ vectors.T) is False
    out = capsys.readouterr().out
    assert "diagonal deveria ser 1" in out and "(5, 8)" in out


def test_cosine_matrix_nan_on_zero_row_is_reported(capsys):
    def naive(vectors):
        unit = vectors / vectors.norm(dim=-1, keepdim=True)
        return unit @ unit.T

    assert ex.check_cosine_matrix(naive) is False
    out = capsys.readouterr().out
    assert "NaN" in out and "linha nula" in out


def test_cosine_matrix_wrong_axis_is_reported(capsys):
    def wrong_axis(vectors):
        unit = F.normalize(vectors, dim=0)
        return unit @ unit.T

    assert ex.check_cosine_matrix(wrong_axis) is False
    assert "diagonal deveria ser 1" in capsys.readouterr().out
