"""Conferências dos exercícios de notebooks/02_embeddings.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_embed_one_hot`: a consulta de embeddings escrita como one-hot vezes a
   matriz ``(|V|, d)``: ids ``(...)`` -> vetores ``(..., d)``, a linha ``E[id]`` de cada
   token (indexada pelo ID do token, não pela posição);
2. :func:`check_make_embedding`: um ``nn.Embedding`` do tamanho REAL do vocabulário de
   um tokenizador, com ``padding_idx`` no ``<pad>``;
3. :func:`check_cosine_matrix`: a matriz ``(n, n)`` de similaridade de cossenos entre
   ``n`` vetores, sem NaN quando um vetor é nulo (como a linha do ``<pad>``).

Cada conferência compara a resposta do aluno com uma referência e diz, em português,
qual entrada falhou, o que era esperado e o que veio. Os erros mais comuns (devolver o
próprio one-hot, indexar pela posição, esquecer os tokens especiais ou o
``padding_idx``, não normalizar os vetores) têm mensagens próprias.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.embedding import TokenEmbedding
from tpt.exercises import ExerciseError, exercise, expect
from tpt.tokenizer import PAD_ID, SPECIAL_TOKENS, BaseTokenizer, CharTokenizer

__all__ = ["check_embed_one_hot", "check_make_embedding", "check_cosine_matrix"]


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _rounded(row: Tensor) -> list[float]:
    return [round(float(v), 4) for v in row]


def _atol(dtype: torch.dtype) -> float:
    # float32: ~7 algarismos; float64: ~16. Os casos são pequenos (d <= 8).
    return 1e-5 if dtype == torch.float32 else 1e-10


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=_atol(b.dtype), rtol=1e-5)


# --------------------------------------------------------------------------------------
# Exercício 1: consulta = one-hot vezes a matriz
# --------------------------------------------------------------------------------------


def _one_hot_cases() -> list[tuple[Tensor, Tensor]]:
    """Casos ``(ids, weight)``; ids com repetições e maiores que o comprimento t."""
    generator = torch.Generator().manual_seed(2)
    cases = []
    for ids, vocab_size, dim, dtype in [
        ([4, 1, 6, 1, 0], 7, 3, torch.float32),
        ([[9, 2, 2, 5], [3, 0, 0, 0]], 10, 5, torch.float64),  # (b, t) com <pad>=0
        ([8], 12, 4, torch.float32),  # um token só
    ]:
        weight = torch.randn(vocab_size, dim, generator=generator, dtype=dtype)  # (V, d)
        cases.append((torch.tensor(ids, dtype=torch.long), weight))
    return cases


@exercise("Exercício 1 (embedding por one-hot × matriz)")
def check_embed_one_hot(embed_one_hot: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``embed_one_hot(ids (...), weight (V, d)) -> (..., d)`` igual a ``weight[ids]``."""
    for ids, weight in _one_hot_cases():
        vocab_size, dim = weight.shape
        expected = weight[ids]  # (..., d): a linha E[id] de cada token
        where = f"para ids={ids.tolist()} e weight de formato {tuple(weight.shape)}"
        try:
            received = embed_one_hot(ids.clone(), weight.clone())
        except NotImplementedError:  # subclasse de RuntimeError: o exercício está pendente
            raise
        except RuntimeError as err:
            raise ExerciseError(
                f"{where} sua função levantou RuntimeError ({err}). Dica: F.one_hot devolve "
                "inteiros (torch.long); converta com .to(weight.dtype) antes de multiplicar."
            ) from None
        expect(
            isinstance(received, Tensor),
            f"{where} esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) == (*ids.shape, vocab_size) and vocab_size != dim:
            expect(
                False,
                f"{where} o resultado tem formato {_shape(received)}: isso é o próprio "
                f"one-hot (... × |V|, |V|={vocab_size}). Falta multiplicar pela matriz "
                f"weight (|V| × d) para chegar a {tuple(expected.shape)} (... × d).",
            )
        expect(
            tuple(received.shape) == tuple(expected.shape),
            f"{where} esperava formato {tuple(expected.shape)} (ids {tuple(ids.shape)} "
            f"seguido de d={dim}); recebi {_shape(received)}.",
        )
        expect(
            received.dtype == weight.dtype,
            f"{where} esperava o dtype de weight ({weight.dtype}); recebi {received.dtype}.",
        )
        by_position = weight[torch.arange(ids.shape[-1]).expand_as(ids)]  # (..., d)
        if not torch.equal(by_position, expected):
            expect(
                not _close(received, by_position),
                f"{where} a linha de cada token saiu da POSIÇÃO dele (weight[i]); ela deve "
                "vir do ID do token (weight[ids[i]]). Tokens iguais em posições diferentes "
                "recebem o mesmo vetor.",
            )
        scaled = expected * math.sqrt(dim)
        if not _close(received, expected) and _close(received, scaled):
            expect(
                False,
                f"{where} o resultado está multiplicado por sqrt(d)={math.sqrt(dim):.4f}; "
                "aqui queremos a consulta pura (a escala é papel do TokenEmbedding).",
            )
        if not _close(received, expected):
            flat_ids = ids.reshape(-1)
            bad = (received - expected).abs().reshape(len(flat_ids), dim).amax(dim=-1) > _atol(
                weight.dtype
            )
            first = int(bad.nonzero()[0, 0])
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), ids.shape))
            position = index[0] if len(index) == 1 else index
            expect(
                False,
                f"{where} na posição {position} (id {int(flat_ids[first])}) esperava a linha "
                f"{_rounded(expected.reshape(-1, dim)[first])}, recebi "
                f"{_rounded(received.reshape(-1, dim)[first])}.",
            )


# --------------------------------------------------------------------------------------
# Exercício 2: um nn.Embedding do tamanho certo, com padding_idx
# --------------------------------------------------------------------------------------

_EMBEDDING_CASES: list[tuple[list[str], int]] = [
    (["pão e cão"], 4),
    (["João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre."], 8),
    (["Açúcar e café.", "Você viu o pássaro?"], 6),
]


@exercise("Exercício 2 (nn.Embedding do vocabulário, com padding_idx)")
def check_make_embedding(make_embedding: Callable[[BaseTokenizer, int], nn.Module]) -> None:
    """``make_embedding(tokenizer, embed_dim) -> nn.Embedding`` (V, d) com padding_idx."""
    for texts, embed_dim in _EMBEDDING_CASES:
        tokenizer = CharTokenizer.fit(texts)
        vocab_size = tokenizer.vocab_size
        where = f"para CharTokenizer.fit({texts!r}) (vocab_size={vocab_size}) e d={embed_dim}"
        torch.manual_seed(0)
        module = make_embedding(tokenizer, embed_dim)
        if isinstance(module, TokenEmbedding):
            module = module.embedding
        expect(
            isinstance(module, nn.Embedding),
            f"{where} esperava um nn.Embedding; recebi {type(module).__name__}.",
        )
        num_chars = len(tokenizer.chars)
        if module.num_embeddings == num_chars:
            expect(
                False,
                f"{where} num_embeddings={module.num_embeddings} conta só os caracteres; o "
                f"vocabulário tem também os {len(SPECIAL_TOKENS)} tokens especiais "
                f"({vocab_size} no total). Use tokenizer.vocab_size.",
            )
        expect(
            module.num_embeddings == vocab_size,
            f"{where} num_embeddings={module.num_embeddings}, mas o vocabulário tem "
            f"{vocab_size} tokens (ids de 0 a {vocab_size - 1}); use tokenizer.vocab_size.",
        )
        expect(
            module.embedding_dim == embed_dim,
            f"{where} embedding_dim={module.embedding_dim}; esperava d={embed_dim}.",
        )
        expect(
            module.padding_idx == PAD_ID,
            f"{where} padding_idx={module.padding_idx}; esperava o id do <pad> "
            f"(tpt.PAD_ID={PAD_ID}), para que a linha do <pad> fique nula e não receba "
            "gradiente.",
        )
        expect(
            bool((module.weight[PAD_ID] == 0).all()),
            f"{where} a linha do <pad> (id {PAD_ID}) deveria começar nula; recebi "
            f"{module.weight[PAD_ID].tolist()}.",
        )
        batch = tokenizer.encode_batch([*texts, texts[0][:3]])
        vectors = module(batch["input_ids"])  # (b, t, d)
        expected_shape = (*batch["input_ids"].shape, embed_dim)
        expect(
            tuple(vectors.shape) == expected_shape,
            f"{where} um lote (b, t)={tuple(batch['input_ids'].shape)} deveria virar "
            f"{expected_shape}; recebi {tuple(vectors.shape)}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: matriz de similaridade de cossenos
# --------------------------------------------------------------------------------------


def _reference_cosine(vectors: Tensor) -> Tensor:
    unit = F.normalize(vectors, dim=-1)  # (n, d); um vetor nulo continua nulo
    return unit @ unit.T  # (n, n)


def _cosine_cases() -> list[Tensor]:
    generator = torch.Generator().manual_seed(3)
    scales = torch.tensor([[0.5], [2.0], [3.0], [1.0], [4.0]])
    random5 = torch.randn(5, 8, generator=generator) * scales  # normas bem diferentes
    with_zero = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    with_zero[1] = 0.0  # como a linha do <pad>
    opposite = torch.tensor([[1.0, 2.0, 0.0], [-2.0, -4.0, 0.0], [0.0, 0.0, 5.0]])
    return [random5, opposite, with_zero]


@exercise("Exercício 3 (similaridade de cossenos)")
def check_cosine_matrix(cosine_matrix: Callable[[Tensor], Tensor]) -> None:
    """``cosine_matrix(vectors (n, d)) -> (n, n)``; vetor nulo -> similaridade 0."""
    for vectors in _cosine_cases():
        expected = _reference_cosine(vectors)
        n = vectors.shape[0]
        has_zero = bool((vectors.abs().sum(dim=-1) == 0).any())
        where = f"para vectors de formato {tuple(vectors.shape)}" + (
            " (com uma linha nula)" if has_zero else ""
        )
        received = cosine_matrix(vectors.clone())
        expect(
            isinstance(received, Tensor),
            f"{where} esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            tuple(received.shape) == (n, n),
            f"{where} esperava formato ({n}, {n}) (um valor por par de vetores); recebi "
            f"{_shape(received)}.",
        )
        expect(
            not bool(torch.isnan(received).any()),
            f"{where} o resultado tem NaN: um vetor nulo tem norma 0 e a divisão vira 0/0. "
            "Use F.normalize (que tem um eps) ou divida por norma.clamp_min(1e-12); a "
            "similaridade com um vetor nulo deve dar 0.",
        )
        received = received.to(expected.dtype)
        if not has_zero:
            diagonal = torch.diagonal(received)
            expect(
                torch.allclose(diagonal, torch.ones(n, dtype=expected.dtype), atol=1e-4),
                f"{where} a diagonal deveria ser 1 (cada vetor com ele mesmo: cos 0 = 1); "
                f"recebi {[round(float(v), 4) for v in diagonal]}. Você normalizou cada "
                "vetor pela sua norma (dim=-1)?",
            )
        if not _close(received, expected):
            bad = ((received - expected).abs() > 1e-4).nonzero()
            i, j = (int(v) for v in bad[0])
            expect(
                False,
                f"{where} S[{i}, {j}] deveria ser {float(expected[i, j]):.4f} (cosseno entre "
                f"as linhas {i} e {j}); recebi {float(received[i, j]):.4f}. Normalize cada "
                "LINHA (dim=-1) e faça unit @ unit.T.",
            )
