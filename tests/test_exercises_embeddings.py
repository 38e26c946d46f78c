"""Conferências dos exercícios do notebook 02_embeddings (tpt.exercises.embeddings).

A solução de referência de cada exercício vive só no notebook (e passa pela conferência
em tests/test_notebook_solutions.py). Aqui ficam soluções corretas em **outros** estilos,
que precisam ser aceitas, e as respostas erradas típicas (inclusive as que quebram as
regras do enunciado), que precisam ser recusadas com a explicação certa.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import cosine_similarity as similarity  # importada com outro nome

import tpt
from tpt.exercises import embeddings as ex


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


# --------------------------------------------------------------------------------------
# Exercício 1: o gradiente da tabela, Xᵀ G
# --------------------------------------------------------------------------------------


def grad_with_index_add(ids, grad_output, vocab_size, padding_idx):
    """Estilo alternativo: index_add_ soma as linhas de G no id de cada posição."""
    d = grad_output.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_output.dtype)
    grad.index_add_(0, ids.reshape(-1), grad_output.reshape(-1, d))
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def grad_with_einsum(ids, grad_output, vocab_size, padding_idx):
    """Estilo alternativo: einsum sobre o one-hot (b, t, |V|), sem achatar."""
    one_hot = F.one_hot(ids, vocab_size).to(grad_output.dtype)  # (b, t, |V|)
    grad = torch.einsum("btv,btd->vd", one_hot, grad_output)  # (|V|, d)
    if padding_idx is not None:
        grad[padding_idx].zero_()
    return grad


def grad_with_mask(ids, grad_output, vocab_size, padding_idx):
    """Estilo alternativo: zera as posições de <pad> antes de somar."""
    keep = torch.ones_like(ids, dtype=torch.bool) if padding_idx is None else ids != padding_idx
    one_hot = F.one_hot(ids.flatten(), num_classes=vocab_size).double()  # (b·t, |V|)
    g = (grad_output * keep[..., None]).reshape(-1, grad_output.shape[-1]).double()
    return (one_hot.T @ g).to(grad_output.dtype)


def test_embedding_grad_alternative_styles_pass(capsys):
    for answer in (grad_with_index_add, grad_with_einsum, grad_with_mask):
        assert ex.check_embedding_grad(answer) is True, answer.__name__
    assert capsys.readouterr().out.count("✅") == 3


def test_embedding_grad_stub_is_pending(capsys):
    assert ex.check_embedding_grad(stub) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "ainda não resolvido" in out


def test_embedding_grad_with_autograd_is_rejected(capsys):
    def via_backward(ids, grad_output, vocab_size, padding_idx):
        weight = torch.zeros(
            vocab_size, grad_output.shape[-1], dtype=grad_output.dtype, requires_grad=True
        )
        (F.embedding(ids, weight, padding_idx=padding_idx) * grad_output).sum().backward()
        return weight.grad

    def via_autograd_grad(ids, grad_output, vocab_size, padding_idx):
        weight = torch.zeros(
            vocab_size, grad_output.shape[-1], dtype=grad_output.dtype, requires_grad=True
        )
        out = nn.functional.embedding(ids, weight, padding_idx=padding_idx)
        return torch.autograd.grad(out, weight, grad_output)[0]

    for answer in (via_backward, via_autograd_grad):
        assert ex.check_embedding_grad(answer) is False
        assert "sem .backward()" in capsys.readouterr().out


def test_embedding_grad_with_a_loop_is_rejected(capsys):
    def with_loop(ids, grad_output, vocab_size, padding_idx):
        grad = torch.zeros(vocab_size, grad_output.shape[-1], dtype=grad_output.dtype)
        for b in range(ids.shape[0]):
            for t in range(ids.shape[1]):
                grad[ids[b, t]] += grad_output[b, t]
        if padding_idx is not None:
            grad[padding_idx] = 0
        return grad

    assert ex.check_embedding_grad(with_loop) is False
    assert "sem laços" in capsys.readouterr().out


def test_embedding_grad_assignment_instead_of_sum_is_reported(capsys):
    def assign(ids, grad_output, vocab_size, padding_idx):
        grad = torch.zeros(vocab_size, grad_output.shape[-1], dtype=grad_output.dtype)
        grad[ids] = grad_output  # ids repetidos: só um valor fica
        if padding_idx is not None:
            grad[padding_idx] = 0
        return grad

    assert ex.check_embedding_grad(assign) is False
    out = capsys.readouterr().out
    assert "o id 1 aparece 2 vezes" in out and "index_add_" in out


def test_embedding_grad_forgetting_the_padding_row_is_reported(capsys):
    def no_padding(ids, grad_output, vocab_size, padding_idx):
        return grad_with_index_add(ids, grad_output, vocab_size, None)

    assert ex.check_embedding_grad(no_padding) is False
    out = capsys.readouterr().out
    assert "só a linha do padding_idx=0" in out and "nula" in out


def test_embedding_grad_without_num_classes_is_reported_as_num_classes(capsys):
    # Sem num_classes o one-hot tem max(ids) + 1 colunas: a culpa não é do dtype.
    def no_num_classes(ids, grad_output, vocab_size, padding_idx):
        one_hot = F.one_hot(ids.reshape(-1)).to(grad_output.dtype)  # (b·t, max+1)
        grad = one_hot.T @ grad_output.reshape(-1, grad_output.shape[-1])
        if padding_idx is not None:
            grad[padding_idx] = 0
        return grad

    assert ex.check_embedding_grad(no_num_classes) is False
    out = capsys.readouterr().out
    assert "num_classes=vocab_size" in out and "(o maior id + 1)" in out
    assert "dtype" not in out


def test_embedding_grad_without_num_classes_and_dtype_blames_num_classes(capsys):
    def neither(ids, grad_output, vocab_size, padding_idx):
        return F.one_hot(ids.reshape(-1)).T @ grad_output.reshape(-1, grad_output.shape[-1])

    assert ex.check_embedding_grad(neither) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and "num_classes=vocab_size" in out


def test_embedding_grad_long_one_hot_blames_the_dtype(capsys):
    def long_one_hot(ids, grad_output, vocab_size, padding_idx):
        one_hot = F.one_hot(ids.reshape(-1), num_classes=vocab_size)  # torch.long
        return one_hot.T @ grad_output.reshape(-1, grad_output.shape[-1])

    assert ex.check_embedding_grad(long_one_hot) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and ".to(grad_output.dtype)" in out
    assert "num_classes=vocab_size" not in out


def test_embedding_grad_without_transpose_is_explained(capsys):
    def no_transpose(ids, grad_output, vocab_size, padding_idx):
        one_hot = F.one_hot(ids.reshape(-1), num_classes=vocab_size).to(grad_output.dtype)
        return one_hot @ grad_output.reshape(-1, grad_output.shape[-1])

    assert ex.check_embedding_grad(no_transpose) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and "X.T @ G" in out


def test_embedding_grad_returning_grad_output_is_reported(capsys):
    assert ex.check_embedding_grad(lambda ids, g, v, p: g.clone()) is False
    assert "uma linha por token do vocabulário" in capsys.readouterr().out


def test_embedding_grad_by_position_is_reported(capsys):
    def by_position(ids, grad_output, vocab_size, padding_idx):
        grad = torch.zeros(vocab_size, grad_output.shape[-1], dtype=grad_output.dtype)
        positions = torch.arange(ids.shape[1]).expand_as(ids)  # a posição, não o id
        grad.index_add_(0, positions.reshape(-1), grad_output.reshape(-1, grad_output.shape[-1]))
        return grad

    assert ex.check_embedding_grad(by_position) is False
    assert "vem do id do token, não da posição" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 2: nn.Embedding para pesos compartilhados
# --------------------------------------------------------------------------------------


def embedding_from_pretrained(tokenizer, embed_dim):
    """Estilo alternativo: sorteia a tabela à mão e usa from_pretrained(freeze=False)."""
    weight = torch.randn(tokenizer.vocab_size, embed_dim) / embed_dim**0.5
    weight[tpt.PAD_ID] = 0.0
    return nn.Embedding.from_pretrained(weight, freeze=False, padding_idx=tpt.PAD_ID)


def embedding_with_data(tokenizer, embed_dim):
    """Estilo alternativo: weight.data.normal_ e zera a linha do <pad> depois."""
    embedding = nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)
    embedding.weight.data.normal_(0.0, embed_dim**-0.5)
    embedding.weight.data[tpt.PAD_ID].zero_()
    return embedding


def test_make_embedding_alternative_styles_pass(capsys):
    assert ex.check_make_embedding(embedding_from_pretrained) is True
    assert ex.check_make_embedding(embedding_with_data) is True
    assert capsys.readouterr().out.count("✅") == 2


def test_make_embedding_stub_is_pending(capsys):
    assert ex.check_make_embedding(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_make_embedding_token_embedding_is_rejected(capsys):
    def with_tpt(tokenizer, embed_dim):
        return tpt.TokenEmbedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)

    def inner_module(tokenizer, embed_dim):
        return tpt.TokenEmbedding(tokenizer.vocab_size, embed_dim, padding_idx=0).embedding

    for answer in (with_tpt, inner_module):
        assert ex.check_make_embedding(answer) is False
        assert "tpt.TokenEmbedding já faz" in capsys.readouterr().out


def test_make_embedding_frozen_tables_are_rejected(capsys):
    def frozen_pretrained(tokenizer, embed_dim):
        weight = torch.randn(tokenizer.vocab_size, embed_dim) / embed_dim**0.5
        weight[tpt.PAD_ID] = 0.0
        return nn.Embedding.from_pretrained(weight, padding_idx=tpt.PAD_ID)  # freeze=True

    def requires_grad_off(tokenizer, embed_dim):
        return embedding_with_data(tokenizer, embed_dim).requires_grad_(False)

    for answer in (frozen_pretrained, requires_grad_off):
        assert ex.check_make_embedding(answer) is False
        out = capsys.readouterr().out
        assert "congelada" in out and "freeze=False" in out


def test_make_embedding_default_init_is_reported(capsys):
    def default_init(tokenizer, embed_dim):
        return nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)

    assert ex.check_make_embedding(default_init) is False
    out = capsys.readouterr().out
    assert "N(0, 1) padrão" in out and "1/√d = 0,125" in out


def test_make_embedding_normal_over_the_padding_row_is_reported(capsys):
    def forgot_pad(tokenizer, embed_dim):
        embedding = nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)
        nn.init.normal_(embedding.weight, std=embed_dim**-0.5)
        return embedding

    assert ex.check_make_embedding(forgot_pad) is False
    out = capsys.readouterr().out
    assert "sorteada junto com as outras" in out and "torch.no_grad()" in out


def test_make_embedding_variance_as_std_is_reported(capsys):
    def variance(tokenizer, embed_dim):
        embedding = nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)
        with torch.no_grad():
            embedding.weight.normal_(0.0, 1.0 / embed_dim)
            embedding.weight[tpt.PAD_ID] = 0.0
        return embedding

    assert ex.check_make_embedding(variance) is False
    assert "variância 1/d como desvio" in capsys.readouterr().out


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
    assert "embedding_dim=128; esperava d=64" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 3: matriz de similaridade de cossenos
# --------------------------------------------------------------------------------------


def cosine_with_normalize(vectors):
    """Estilo alternativo: F.normalize (que tem um eps) e o produto das linhas."""
    unit = F.normalize(vectors, dim=-1)
    return unit @ unit.T


def cosine_with_outer_norms(vectors):
    """Estilo alternativo: produtos escalares divididos pelo produto das normas."""
    norms = torch.linalg.vector_norm(vectors, dim=-1)  # (n,)
    return (vectors @ vectors.T) / (norms[:, None] * norms[None, :]).clamp_min(1e-12)


def cosine_with_nan_to_zero(vectors):
    """Estilo alternativo: deixa o 0/0 acontecer e troca o NaN por 0 (o valor certo)."""
    unit = torch.nan_to_num(vectors / vectors.norm(dim=-1, keepdim=True), nan=0.0)
    return unit @ unit.T


def test_cosine_matrix_alternative_styles_pass(capsys):
    for answer in (cosine_with_normalize, cosine_with_outer_norms, cosine_with_nan_to_zero):
        assert ex.check_cosine_matrix(answer) is True, answer.__name__
    assert capsys.readouterr().out.count("✅") == 3


def test_cosine_matrix_stub_is_pending(capsys):
    assert ex.check_cosine_matrix(stub) is False
    assert "ainda não resolvido" in capsys.readouterr().out


def test_cosine_matrix_torch_functions_are_rejected(capsys):
    def with_functional(vectors):
        return F.cosine_similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)

    def with_module(vectors):
        return nn.CosineSimilarity(dim=-1)(vectors[:, None, :], vectors[None, :, :])

    def renamed(vectors):
        return similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)

    for answer in (with_functional, with_module, renamed):
        assert ex.check_cosine_matrix(answer) is False, answer.__name__
        assert "sem F.cosine_similarity" in capsys.readouterr().out


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
    assert "NaN" in out and "linha 1 é nula" in out


def test_cosine_matrix_nan_replaced_by_one_blames_the_zero_row(capsys):
    def nan_to_one(vectors):
        unit = vectors / vectors.norm(dim=-1, keepdim=True)
        return torch.nan_to_num(unit @ unit.T, nan=1.0)

    assert ex.check_cosine_matrix(nan_to_one) is False
    out = capsys.readouterr().out
    assert "o vetor nulo (linha 1) deve ter similaridade 0" in out and "nan_to_num" in out
    assert "Normalize cada linha" not in out


def test_cosine_matrix_wrong_axis_is_reported(capsys):
    def wrong_axis(vectors):
        unit = F.normalize(vectors, dim=0)
        return unit @ unit.T

    assert ex.check_cosine_matrix(wrong_axis) is False
    assert "diagonal deveria ser 1" in capsys.readouterr().out


def test_cosine_matrix_shape_error_is_explained_in_portuguese(capsys):
    def no_transpose(vectors):
        unit = F.normalize(vectors, dim=-1)
        return unit @ unit  # (n, d) @ (n, d): formatos incompatíveis

    assert ex.check_cosine_matrix(no_transpose) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and "unit @ unit.T" in out


def test_make_embedding_in_place_error_is_explained_in_portuguese(capsys):
    def without_no_grad(tokenizer, embed_dim):
        embedding = nn.Embedding(tokenizer.vocab_size, embed_dim, padding_idx=tpt.PAD_ID)
        embedding.weight.normal_(0.0, embed_dim**-0.5)  # folha com requires_grad: erro
        return embedding

    assert ex.check_make_embedding(without_no_grad) is False
    out = capsys.readouterr().out
    assert "RuntimeError" in out and "torch.no_grad()" in out
