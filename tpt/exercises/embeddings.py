"""Conferências dos exercícios de notebooks/02_embeddings.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_embedding_grad`: o gradiente da tabela de embeddings escrito à mão,
   ``∂L/∂E = Xᵀ G`` (one-hot transposto vezes o gradiente que chega à saída), igual ao
   que o autograd calcula para ``nn.Embedding(..., padding_idx=...)``: ids repetidos
   somam, a linha do ``padding_idx`` fica nula; sem autograd e sem laços;
2. :func:`check_make_embedding`: um ``nn.Embedding`` pronto para pesos compartilhados:
   tamanho do vocabulário de verdade, ``padding_idx`` no ``<pad>``, entradas de
   ``N(0, 1/d)``, a linha do ``<pad>`` nula e a tabela treinável;
3. :func:`check_cosine_matrix`: a matriz ``(n, n)`` de similaridade de cossenos entre
   ``n`` vetores, sem ``F.cosine_similarity`` e sem NaN quando um vetor é nulo.

Cada conferência compara a resposta do aluno com uma referência e diz, em português,
qual entrada falhou, o que era esperado, o que veio e qual é o erro provável.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.embedding import TokenEmbedding
from tpt.exercises import (
    ExerciseError,
    exercise,
    expect,
    forbid,
    references,
    refers_to,
    uses_loops,
)
from tpt.numfmt import fmt
from tpt.tokenizer import PAD_ID, SPECIAL_TOKENS, BaseTokenizer, CharTokenizer

__all__ = ["check_embedding_grad", "check_make_embedding", "check_cosine_matrix"]


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _rounded(row: Tensor) -> str:
    return "[" + "; ".join(fmt(float(v), 4) for v in row) + "]"


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


def _atol(dtype: torch.dtype) -> float:
    # float32: ~7 algarismos; float64: ~16. Os casos são pequenos (somas de poucos termos).
    return 1e-5 if dtype == torch.float32 else 1e-10


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=_atol(b.dtype), rtol=1e-5)


# --------------------------------------------------------------------------------------
# Exercício 1: o gradiente da tabela, Xᵀ G
# --------------------------------------------------------------------------------------


def _grad_cases() -> list[tuple[Tensor, Tensor, int, int | None]]:
    """Casos ``(ids, grad_output, vocab_size, padding_idx)``.

    Todos têm ids repetidos e ``vocab_size`` maior que o maior id + 1 (linhas que nenhum
    token usa), para que os erros típicos apareçam.
    """
    generator = torch.Generator().manual_seed(2)
    cases = []
    for ids, vocab_size, dim, padding_idx, dtype in [
        ([[4, 1, 6, 1], [5, 4, 0, 0]], 9, 3, 0, torch.float32),  # (b, t) com <pad>=0
        ([[9, 2, 2, 5, 2], [3, 9, 7, 0, 0], [2, 3, 0, 0, 0]], 12, 4, 0, torch.float64),
        ([[3, 3, 1]], 6, 2, None, torch.float32),  # sem padding_idx: todas as linhas contam
    ]:
        ids_t = torch.tensor(ids, dtype=torch.long)  # (b, t)
        grad_output = torch.randn(*ids_t.shape, dim, generator=generator, dtype=dtype)
        cases.append((ids_t, grad_output, vocab_size, padding_idx))
    return cases


def _autograd_grad(
    ids: Tensor, grad_output: Tensor, vocab_size: int, padding_idx: int | None
) -> Tensor:
    """A referência: o gradiente que o autograd calcula para ``F.embedding``."""
    weight = torch.zeros(
        vocab_size, grad_output.shape[-1], dtype=grad_output.dtype, requires_grad=True
    )  # (|V|, d)
    out = F.embedding(ids, weight, padding_idx=padding_idx)  # (b, t, d)
    (grad,) = torch.autograd.grad(out, weight, grad_output)
    return grad  # (|V|, d)


class _OneHotCalls:
    """Anota as chamadas de ``F.one_hot`` (para explicar um erro do PyTorch)."""

    def __init__(self) -> None:
        self.num_classes: list[int] = []


@contextlib.contextmanager
def _watch_one_hot() -> Iterator[_OneHotCalls]:
    original = F.one_hot
    calls = _OneHotCalls()

    @functools.wraps(original)
    def watched(tensor: Tensor, num_classes: int = -1) -> Tensor:
        calls.num_classes.append(num_classes)
        return original(tensor, num_classes)

    F.one_hot = watched  # type: ignore[assignment]
    try:
        yield calls
    finally:
        F.one_hot = original  # type: ignore[assignment]


_NO_AUTOGRAD = (
    "o exercício pede o gradiente escrito à mão (Xᵀ G): sem .backward() nem "
    "torch.autograd.grad, que fariam a conta por você."
)


@exercise("Exercício 1 (o gradiente da tabela de embeddings)")
def check_embedding_grad(
    embedding_grad: Callable[[Tensor, Tensor, int, int | None], Tensor],
) -> None:
    """``embedding_grad(ids (b, t), grad_output (b, t, d), vocab_size, padding_idx)``.

    Devolve o gradiente da tabela, formato ``(|V|, d)``.
    """
    expect(
        not uses_loops(embedding_grad),
        "sua função tem um laço (for, while ou compreensão de lista). O enunciado pede a "
        "conta sem laços: monte o one-hot X (b·t, |V|) e faça X.T @ G, ou use index_add_.",
    )
    for ids, grad_output, vocab_size, padding_idx in _grad_cases():
        expected = _autograd_grad(ids, grad_output, vocab_size, padding_idx)  # (|V|, d)
        dim = grad_output.shape[-1]
        where = (
            f"para ids={ids.tolist()}, grad_output {tuple(grad_output.shape)}, "
            f"vocab_size={vocab_size} e padding_idx={padding_idx}"
        )
        with contextlib.ExitStack() as stack:
            stack.enter_context(forbid(torch.Tensor, "backward", _NO_AUTOGRAD))
            stack.enter_context(forbid(torch.autograd, "backward", _NO_AUTOGRAD))
            stack.enter_context(forbid(torch.autograd, "grad", _NO_AUTOGRAD))
            calls = stack.enter_context(_watch_one_hot())
            try:
                received = embedding_grad(ids.clone(), grad_output.clone(), vocab_size, padding_idx)
            except (NotImplementedError, ExerciseError):
                raise
            except Exception as err:  # noqa: BLE001 - explicar em português, não derrubar
                hints = []
                if any(n in (-1, None) for n in calls.num_classes):
                    hints.append(
                        "F.one_hot sem num_classes cria só max(ids) + 1 colunas, não "
                        f"|V|={vocab_size}: passe num_classes=vocab_size"
                    )
                elif calls.num_classes:
                    hints.append(
                        "F.one_hot devolve inteiros (torch.long), e o PyTorch não multiplica "
                        "long por float: converta com .to(grad_output.dtype)"
                    )
                hints.append(
                    "confira os formatos: achate o lote, X (b·t, |V|) e G (b·t, d), e "
                    "transponha X antes de multiplicar: X.T @ G dá (|V|, d)"
                )
                raise ExerciseError(
                    f"{where} sua função levantou {type(err).__name__}. Dica: "
                    + "; ".join(hints)
                    + f". (mensagem original: {err})"
                ) from None
        expect(
            isinstance(received, Tensor),
            f"{where} esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) == tuple(grad_output.shape):
            expect(
                False,
                f"{where} o resultado tem o formato de grad_output {tuple(grad_output.shape)}; "
                f"o gradiente da tabela tem uma linha por token do vocabulário: "
                f"({vocab_size}, {dim}). Some as contribuições de cada id.",
            )
        max_id = int(ids.max())
        if tuple(received.shape) == (max_id + 1, dim) and max_id + 1 != vocab_size:
            expect(
                False,
                f"{where} o resultado tem {max_id + 1} linhas (o maior id + 1), não "
                f"|V|={vocab_size}: F.one_hot sem num_classes só cria as colunas até o maior "
                "id do lote. Passe num_classes=vocab_size.",
            )
        expect(
            tuple(received.shape) == tuple(expected.shape),
            f"{where} esperava formato (|V|, d) = {tuple(expected.shape)}; recebi "
            f"{_shape(received)}.",
        )
        expect(
            received.dtype == grad_output.dtype,
            f"{where} esperava o dtype de grad_output ({grad_output.dtype}); recebi "
            f"{received.dtype}. Converta o one-hot com .to(grad_output.dtype).",
        )
        if _close(received, expected):
            continue
        if padding_idx is not None and not _close(received[padding_idx], expected[padding_idx]):
            rest = [i for i in range(vocab_size) if i != padding_idx]
            if _close(received[rest], expected[rest]):
                expect(
                    False,
                    f"{where} só a linha do padding_idx={padding_idx} está errada: ela deve "
                    f"ficar nula (o nn.Embedding não manda gradiente para o <pad>); recebi "
                    f"{_rounded(received[padding_idx])}. Zere essa linha no fim.",
                )
        flat_ids = ids.reshape(-1)  # (b·t,)
        flat_grad = grad_output.reshape(-1, dim)  # (b·t, d)
        for token in flat_ids.unique().tolist():
            if token == padding_idx or _close(received[token], expected[token]):
                continue
            positions = (flat_ids == token).nonzero().squeeze(1)
            single = [flat_grad[p] for p in positions.tolist()]
            if len(single) > 1 and any(_close(received[token], g) for g in single):
                expect(
                    False,
                    f"{where} o id {token} aparece {len(single)} vezes e a linha dele deveria "
                    f"somar os {len(single)} gradientes; recebi só um deles. Uma atribuição "
                    "(grad[ids] = ...) guarda o último e descarta os outros: some com X.T @ G "
                    "ou com index_add_.",
                )
            expect(
                False,
                f"{where} a linha do id {token} deveria ser {_rounded(expected[token])} (a soma "
                f"de grad_output nas {len(single)} posições em que ids == {token}); recebi "
                f"{_rounded(received[token])}. A linha vem do id do token, não da posição.",
            )
        unused = [i for i in range(vocab_size) if i not in set(flat_ids.tolist())]
        bad = [i for i in unused if not bool((received[i] == 0).all())]
        expect(
            not bad,
            f"{where} as linhas {bad} são de ids que não aparecem no lote e deveriam ser "
            "nulas: só os tokens do lote recebem gradiente.",
        )
        expect(False, f"{where} esperava {expected.tolist()}, recebi {received.tolist()}.")


# --------------------------------------------------------------------------------------
# Exercício 2: um nn.Embedding pronto para pesos compartilhados
# --------------------------------------------------------------------------------------

_EMBEDDING_CASES: list[tuple[list[str], int]] = [
    (["pão e cão"], 64),
    (["João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre."], 48),
    (["Açúcar e café.", "Você viu o pássaro?"], 100),
]

_NO_TOKEN_EMBEDDING = (
    "o exercício pede o nn.Embedding montado por você; o tpt.TokenEmbedding já faz "
    "a inicialização N(0, 1/d) e zera o <pad> (é a resposta pronta)."
)


@exercise("Exercício 2 (nn.Embedding para pesos compartilhados)")
def check_make_embedding(make_embedding: Callable[[BaseTokenizer, int], nn.Module]) -> None:
    """``make_embedding(tokenizer, embed_dim) -> nn.Embedding`` (|V|, d), N(0, 1/d), treinável."""
    expect(
        not references(make_embedding, "TokenEmbedding")
        and not refers_to(make_embedding, TokenEmbedding),
        _NO_TOKEN_EMBEDDING,
    )
    for texts, embed_dim in _EMBEDDING_CASES:
        tokenizer = CharTokenizer.fit(texts)
        vocab_size = tokenizer.vocab_size
        where = f"para CharTokenizer.fit({texts!r}) (vocab_size={vocab_size}) e d={embed_dim}"
        torch.manual_seed(0)
        with forbid(TokenEmbedding, "reset_parameters", _NO_TOKEN_EMBEDDING):
            module = _call(
                make_embedding,
                where,
                "Confira a chamada nn.Embedding(num_embeddings, embedding_dim, padding_idx=...) "
                "e o sorteio: nn.init.normal_(weight, mean=0.0, std=...); mudar os pesos de um "
                "parâmetro no lugar pede torch.no_grad().",
                tokenizer,
                embed_dim,
            )
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
            f"(tpt.PAD_ID={PAD_ID}), para que a linha do <pad> não receba gradiente.",
        )
        weight = module.weight.detach()  # (|V|, d)
        others = torch.cat([weight[:PAD_ID], weight[PAD_ID + 1 :]])  # (|V| - 1, d)
        std, target = float(others.std()), embed_dim**-0.5
        if not bool((weight[PAD_ID] == 0).all()):
            drawn = abs(float(weight[PAD_ID].std()) / std - 1) < 0.5
            expect(
                False,
                f"{where} a linha do <pad> (id {PAD_ID}) deveria ser nula; "
                + (
                    "ela foi sorteada junto com as outras. nn.init.normal_ (ou "
                    "weight.normal_) também sorteia a linha do padding_idx: zere-a de novo, "
                    "dentro de torch.no_grad(), depois de sortear."
                    if drawn
                    else f"recebi {_rounded(weight[PAD_ID][:6])}..."
                ),
            )
        if abs(std - 1.0) < 0.15:
            expect(
                False,
                f"{where} as entradas têm desvio {fmt(std, 3)}: é o N(0, 1) padrão do "
                f"nn.Embedding. A seção 10 pede N(0, 1/d): desvio 1/√d = {fmt(target, 3)} "
                "(nn.init.normal_(..., std=embed_dim ** -0.5)).",
            )
        if abs(std * embed_dim - 1.0) < 0.15:
            expect(
                False,
                f"{where} as entradas têm desvio {fmt(std, 4)} ≈ 1/d: você passou a "
                f"variância 1/d como desvio. O desvio de N(0, 1/d) é 1/√d = {fmt(target, 3)}.",
            )
        expect(
            abs(std / target - 1.0) < 0.15 and abs(float(others.mean())) < 0.2 * target,
            f"{where} as entradas (fora do <pad>) têm média {fmt(float(others.mean()), 3)} e "
            f"desvio {fmt(std, 3)}; esperava média 0 e desvio 1/√d = {fmt(target, 3)}.",
        )
        expect(
            module.weight.requires_grad,
            f"{where} a tabela está congelada (weight.requires_grad=False): "
            "nn.Embedding.from_pretrained congela por padrão (use freeze=False), e "
            "requires_grad_(False) também congela. Os embeddings precisam ser treinados.",
        )
        batch = tokenizer.encode_batch([*texts, texts[0][:3]])
        input_ids = batch["input_ids"]  # (b, t), com <pad>
        module.zero_grad()
        vectors = module(input_ids)  # (b, t, d)
        expected_shape = (*input_ids.shape, embed_dim)
        expect(
            tuple(vectors.shape) == expected_shape,
            f"{where} um lote (b, t)={tuple(input_ids.shape)} deveria virar "
            f"{expected_shape}; recebi {tuple(vectors.shape)}.",
        )
        vectors.sum().backward()
        grad = module.weight.grad
        used = input_ids[~batch["padding_mask"]].unique()
        expect(
            grad is not None and bool((grad[used].abs().sum(dim=-1) > 0).all()),
            f"{where} as linhas dos tokens do lote não receberam gradiente: a tabela "
            "precisa ser um parâmetro treinável (não congele nem desligue o autograd).",
        )
        expect(
            bool((grad[PAD_ID] == 0).all()),
            f"{where} a linha do <pad> recebeu gradiente; com padding_idx=tpt.PAD_ID ela "
            "não recebe.",
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


_NO_COSINE = (
    "o exercício pede a conta à mão: normalize cada linha pela sua norma e multiplique, "
    "sem F.cosine_similarity (nem nn.CosineSimilarity)."
)


@exercise("Exercício 3 (similaridade de cossenos)")
def check_cosine_matrix(cosine_matrix: Callable[[Tensor], Tensor]) -> None:
    """``cosine_matrix(vectors (n, d)) -> (n, n)``; vetor nulo -> similaridade 0."""
    expect(
        not references(cosine_matrix, "cosine_similarity")
        and not references(cosine_matrix, "CosineSimilarity")
        and not refers_to(cosine_matrix, F.cosine_similarity, nn.CosineSimilarity),
        _NO_COSINE,
    )
    for vectors in _cosine_cases():
        expected = _reference_cosine(vectors)
        n = vectors.shape[0]
        zero_rows = (vectors.abs().sum(dim=-1) == 0).nonzero().squeeze(1).tolist()
        where = f"para vectors de formato {tuple(vectors.shape)}" + (
            f" (a linha {zero_rows[0]} é nula)" if zero_rows else ""
        )
        with contextlib.ExitStack() as stack:
            stack.enter_context(forbid(F, "cosine_similarity", _NO_COSINE))
            stack.enter_context(forbid(torch, "cosine_similarity", _NO_COSINE))
            stack.enter_context(forbid(nn, "CosineSimilarity", _NO_COSINE))
            received = _call(
                cosine_matrix,
                where,
                "Confira os formatos: normas (n, 1) com keepdim=True, unit (n, d) e unit @ unit.T "
                "(d, n) para chegar a (n, n).",
                vectors.clone(),
            )
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
            "Divida por norma.clamp_min(1e-12) (ou use F.normalize, que tem um eps); a "
            "similaridade com um vetor nulo deve dar 0.",
        )
        received = received.to(expected.dtype)
        if zero_rows:
            i = zero_rows[0]
            row_ok = _close(received[i], expected[i]) and _close(received[:, i], expected[:, i])
            expect(
                row_ok,
                f"{where} o vetor nulo (linha {i}) deve ter similaridade 0 com todos, "
                f"inclusive com ele mesmo; recebi S[{i}] = {_rounded(received[i])}. Trocar o "
                "NaN por outro número (nan_to_num(nan=1.0), por exemplo) esconde o 0/0 em vez "
                "de evitá-lo: divida por norma.clamp_min(1e-12), e o vetor nulo continua nulo.",
            )
        else:
            diagonal = torch.diagonal(received)
            expect(
                torch.allclose(diagonal, torch.ones(n, dtype=expected.dtype), atol=1e-4),
                f"{where} a diagonal deveria ser 1 (cada vetor com ele mesmo: cos 0 = 1); "
                f"recebi {_rounded(diagonal)}. Você normalizou cada vetor pela sua norma, "
                "ao longo de d (dim=-1)?",
            )
        if not _close(received, expected):
            bad = ((received - expected).abs() > 1e-4).nonzero()
            i, j = (int(v) for v in bad[0])
            expect(
                False,
                f"{where} S[{i}, {j}] deveria ser {fmt(float(expected[i, j]), 4)} (cosseno "
                f"entre as linhas {i} e {j}); recebi {fmt(float(received[i, j]), 4)}. "
                "Normalize cada linha (dim=-1) e faça unit @ unit.T.",
            )
