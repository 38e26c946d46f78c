"""Conferências dos exercícios de notebooks/02_embeddings.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_mean_embedding`: o vetor médio de cada texto de um lote ``(b, t)``,
   consultando a tabela e ignorando as posições de ``<pad>`` pela máscara (um texto só
   de ``<pad>`` dá o vetor nulo); a conta fica no caminho do treino, então os
   gradientes em relação à tabela são comparados; sem laço sobre o lote (o número de
   operações não pode crescer com ``b``);
2. :func:`check_cosine_matrix`: a matriz ``(n, n)`` de similaridade de cossenos, sem
   NaN quando um vetor é nulo e sem criar o tensor ``(n, n, d)`` que a comparação "todos
   contra todos" por broadcasting (ou ``F.cosine_similarity``) cria;
3. :func:`check_nearest_tokens`: os ``k`` vizinhos mais próximos (pelo cosseno) de cada
   token pedido, sem ele mesmo e sem o ``<pad>``, do mais parecido ao menos; sem laço
   sobre os tokens pedidos.

Cada conferência roda casos fixos e casos sorteados a cada execução, chama a resposta
com as entradas de verdade (que não podem mudar) e só dá um diagnóstico quando a
variante errada correspondente foi calculada e deu a resposta do aluno.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from tpt.exercises.core import ExerciseError, exercise, expect, expect_close, max_abs_diff
from tpt.exercises.guards import (
    call_answer,
    case_generator,
    check_gradients,
    expect_finite_gradient,
    seed_note,
)
from tpt.exercises.rules import op_counts_by_size, record_ops
from tpt.numfmt import fmt
from tpt.tokenizer import PAD_ID

__all__ = ["check_mean_embedding", "check_cosine_matrix", "check_nearest_tokens"]


def _atol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-10


# --------------------------------------------------------------------------------------
# Exercício 1: o vetor médio de cada texto, sem os <pad>
# --------------------------------------------------------------------------------------
def _mean_embedding(weight: Tensor, input_ids: Tensor, padding_mask: Tensor) -> Tensor:
    vectors = F.embedding(input_ids, weight)  # (b, t, d)
    keep = (~padding_mask).to(weight.dtype)  # (b, t): 1 = token de verdade
    total = (vectors * keep[..., None]).sum(dim=1)  # (b, d)
    count = keep.sum(dim=1, keepdim=True).clamp_min(1)  # (b, 1)
    return total / count


def _mean_case(
    g: torch.Generator, b: int, t: int, vocab: int, d: int, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor, Tensor]:
    """Um lote sorteado: a linha do <pad> da tabela **não** é nula, há <pad> à direita e à
    esquerda, um texto só de <pad> e (com b > 2) um texto sem nenhum."""
    weight = torch.randn(vocab, d, generator=g, dtype=dtype) + 0.5  # média longe de 0
    input_ids = torch.randint(PAD_ID + 1, vocab, (b, t), generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0] = 0  # um texto só de <pad>
    if b > 2:
        lengths[1] = t  # um texto sem <pad>
    positions = torch.arange(t)[None, :]  # (1, t)
    right = positions >= lengths[:, None]  # (b, t)
    left = positions < (t - lengths)[:, None]  # (b, t)
    use_left = torch.rand(b, generator=g) < 0.5
    padding_mask = torch.where(use_left[:, None], left, right)  # (b, t)
    input_ids = input_ids.masked_fill(padding_mask, PAD_ID)
    return weight, input_ids, padding_mask


def _disagreeing_case(
    g: torch.Generator, b: int, t: int, vocab: int, d: int, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor, Tensor]:
    """Um lote em que os ids não dizem onde está o <pad>: posições de <pad> guardam outro
    id (como um colador que preenche com <eos>) e o id ``PAD_ID`` aparece onde a máscara
    diz que há texto. Só a máscara acerta."""
    weight, input_ids, padding_mask = _mean_case(g, b, t, vocab, d, dtype)
    filler = torch.randint(PAD_ID + 1, vocab, (b, t), generator=g)
    input_ids = torch.where(padding_mask, filler, input_ids)  # <pad> com outro id
    real = (~padding_mask).nonzero()  # (m, 2): posições de texto
    chosen = real[torch.randperm(len(real), generator=g)[: max(1, len(real) // 3)]]
    input_ids[chosen[:, 0], chosen[:, 1]] = PAD_ID  # o id 0 como texto
    return weight, input_ids, padding_mask


def _mean_variants(
    weight: Tensor, input_ids: Tensor, padding_mask: Tensor
) -> list[tuple[str, Tensor]]:
    vectors = F.embedding(input_ids, weight)  # (b, t, d)
    keep = (~padding_mask).to(weight.dtype)  # (b, t)
    count = keep.sum(dim=1, keepdim=True)  # (b, 1)
    pads = padding_mask.to(weight.dtype)  # (b, t)
    by_id = input_ids == PAD_ID  # (b, t): o <pad> decidido pelos ids, não pela máscara
    return [
        (
            "é a média decidida pelos ids (input_ids == PAD_ID), não pela máscara: neste "
            "lote as posições de <pad> guardam outros ids e o id PAD_ID aparece onde a "
            "máscara diz que há texto. Use padding_mask.",
            _mean_embedding(weight, input_ids, by_id),
        ),
        (
            "é a média sobre as t posições, com os <pad> juntos; a média é só sobre os "
            "tokens de verdade (os False da máscara).",
            vectors.mean(dim=1),
        ),
        (
            "é a soma dos vetores dos <pad> dividida pelo número de tokens de verdade: "
            "a linha do <pad> desta tabela não é nula, então os <pad> precisam sair da "
            "soma pela máscara.",
            vectors.sum(dim=1) / count.clamp_min(1),
        ),
        (
            "é a média só das posições de <pad>: a máscara foi usada ao contrário (no tpt, "
            "True marca o <pad>).",
            (vectors * pads[..., None]).sum(dim=1) / pads.sum(dim=1, keepdim=True).clamp_min(1),
        ),
        (
            "é a soma dos vetores dos tokens, sem dividir pelo número de tokens de cada texto.",
            (vectors * keep[..., None]).sum(dim=1),
        ),
    ]


_MEAN_FIXED = [  # (b, t, |V|, d, dtype)
    (4, 6, 9, 5, torch.float32),
    (3, 5, 7, 3, torch.float64),
    (1, 4, 6, 2, torch.float32),  # o lote inteiro é um texto só de <pad>
]
_MEAN_DISAGREEING = [  # ids e máscara discordam: só a máscara diz onde está o <pad>
    (4, 6, 9, 5, torch.float32),
    (3, 7, 8, 3, torch.float64),
]


@exercise("Exercício 1 (o vetor médio de cada texto, sem os <pad>)")
def check_mean_embedding(mean_embedding: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """``mean_embedding(weight (|V|, d), input_ids (b, t), padding_mask (b, t)) -> (b, d)``."""
    g, seed = case_generator()
    cases = [
        (*_mean_case(torch.Generator().manual_seed(i), *shape), None)
        for i, shape in enumerate(_MEAN_FIXED)
    ]
    cases += [
        (*_disagreeing_case(torch.Generator().manual_seed(10 + i), *shape), None)
        for i, shape in enumerate(_MEAN_DISAGREEING)
    ]
    for _ in range(8):
        b, t = (int(v) for v in torch.randint(2, 9, (2,), generator=g))
        vocab, d = (int(v) for v in torch.randint(5, 30, (2,), generator=g))
        cases.append((*_mean_case(g, b, t, vocab, d), seed))
    for weight, input_ids, padding_mask, case_seed in cases:
        b, t = input_ids.shape
        disagree = int((padding_mask != (input_ids == PAD_ID)).sum())
        where = (
            f"Para weight {tuple(weight.shape)} ({weight.dtype}), input_ids (b, t) = "
            f"({b}, {t}) e {int(padding_mask.sum())} posições de <pad>"
            + (
                f" (em {disagree} posições o id e a máscara discordam: vale a máscara)"
                if disagree
                else ""
            )
            + seed_note(case_seed)
        )
        expected = _mean_embedding(weight, input_ids, padding_mask)
        received = call_answer(
            mean_embedding,
            {"weight": weight, "input_ids": input_ids, "padding_mask": padding_mask},
            where,
            "Confira os formatos: vetores (b, t, d), máscara (b, t) e contagem (b, 1).",
        )
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) == tuple(expected.shape) and bool(received.isnan().any()):
            rows = received.isnan().any(dim=-1).nonzero().squeeze(1).tolist()
            empty = (padding_mask.all(dim=-1)).nonzero().squeeze(1).tolist()
            raise ExerciseError(
                f"{where}, o resultado tem NaN nas linhas {rows}"
                + (
                    f"; as linhas {empty} só têm <pad> (0 tokens): a divisão por 0 dá NaN. "
                    "Divida pela contagem com .clamp_min(1): o texto vazio fica com o vetor nulo."
                    if empty and set(rows) <= set(empty)
                    else "."
                )
            )
        expect(
            received.dtype == weight.dtype,
            f"{where}, esperava o dtype da tabela ({weight.dtype}); recebi {received.dtype}.",
        )
        expect_close(
            received,
            expected,
            where,
            atol=_atol(weight.dtype),
            rtol=1e-5,
            name="o vetor médio",
            variants=_mean_variants(weight, input_ids, padding_mask),
        )
        expect_finite_gradient(
            mean_embedding,
            {"weight": weight, "input_ids": input_ids, "padding_mask": padding_mask},
            "weight",
            where,
            "uma divisão por 0 (um texto só de <pad>) seguida de nan_to_num ou torch.where "
            "esconde o NaN da saída, mas não do gradiente. Evite a divisão por 0: "
            "contagem.clamp_min(1).",
        )
        check_gradients(
            mean_embedding,
            _mean_embedding,
            {"weight": weight, "input_ids": input_ids, "padding_mask": padding_mask},
            where,
            wrt=("weight",),
            atol=10 * _atol(weight.dtype),
        )
    # "Sem laço sobre o lote": uma resposta vetorizada roda as mesmas operações com b = 3 e b = 9.
    sizes = (3, 9)
    small, large = op_counts_by_size(
        mean_embedding,
        lambda n: _mean_case(torch.Generator().manual_seed(n), n, 6, 11, 4),
        sizes,
    )
    expect(
        small == large,
        f"Com lotes de b = {sizes[0]} e b = {sizes[1]} textos, sua função executou {small} e "
        f"{large} operações do PyTorch: o número cresce com o lote, então há um laço "
        "(for, map, compreensão ou função auxiliar) sobre os textos. Faça a conta do lote "
        "inteiro de uma vez, com a máscara (b, t).",
    )


# --------------------------------------------------------------------------------------
# Exercício 2: matriz de similaridade de cossenos, sem o tensor (n, n, d)
# --------------------------------------------------------------------------------------
def _cosine(vectors: Tensor) -> Tensor:
    unit = F.normalize(vectors, dim=-1)  # (n, d); um vetor nulo continua nulo
    return unit @ unit.T  # (n, n)


def _cosine_fixed() -> list[Tensor]:
    g = torch.Generator().manual_seed(3)
    scales = torch.tensor([[0.5], [2.0], [3.0], [1.0], [4.0]])
    random5 = torch.randn(5, 8, generator=g) * scales  # normas bem diferentes
    with_zero = torch.randn(4, 6, generator=g, dtype=torch.float64)
    with_zero[1] = 0.0  # como a linha do <pad>
    opposite = torch.tensor([[1.0, 2.0, 0.0, 1.0], [-2.0, -4.0, 0.0, -2.0], [0.0, 0.0, 5.0, 0.0]])
    # vetores curtos, mas não nulos (normas 1e-4 a 1e-1): o cosseno deles consigo é 1; a
    # proteção contra 0/0 só pode agir no vetor nulo
    short = F.normalize(torch.randn(5, 7, generator=g, dtype=torch.float64), dim=-1)
    short = short * torch.tensor([[1e-4], [1e-3], [1.0], [1e-2], [1e-1]], dtype=torch.float64)
    short[2] = 0.0
    short32 = short[[0, 1, 3, 4]].float() * torch.tensor([[1.0], [1.0], [1.0], [30.0]])
    return [random5, opposite, with_zero, short, short32]


def _size(value: float) -> str:
    return fmt(value, 0, sci=True) if value < 1e-2 else fmt(value, 2)


def _protection(vectors: Tensor, received: Tensor, expected: Tensor, tol: float) -> str | None:
    """Diz, se for o caso, que a proteção contra 0/0 mexeu onde não devia.

    O cosseno de um vetor não nulo consigo é 1 e o do vetor nulo é 0 (ele não tem
    direção). Reconhece duas respostas: a certa com 1 na diagonal do vetor nulo
    (``fill_diagonal_(1)``), e a certa com cada vetor encolhido por um fator
    ``c_i ≤ 1`` (``S[i, j] = c_i c_j cos``), que é o que ``clamp_min`` grande ou
    ``norma + ε`` fazem. Devolve o diagnóstico, ou ``None`` se não for nenhuma das duas.
    """
    received = received.detach().double()
    expected = expected.double()
    norms = vectors.double().norm(dim=-1)  # (n,)
    zero = norms == 0
    diag = received.diagonal()  # (n,)
    if bool(zero.any()):
        i = int(zero.nonzero()[0])
        fixed = received.clone()
        fixed[zero, zero] = 0.0
        if abs(float(diag[i]) - 1) <= tol and max_abs_diff(fixed, expected) <= tol:
            return (
                f"S[{i}, {i}] deu 1, mas a linha {i} é o vetor nulo: ele não tem direção, e "
                "o cosseno dele com todos (inclusive consigo) é 0. Pôr 1 em toda a diagonal "
                "(fill_diagonal_(1)) acerta os outros e erra este; a divisão por "
                "norma.clamp_min(1e-12) já dá 1 nos não nulos e 0 no nulo."
            )
    c = diag.clamp(0, 1).sqrt()  # (n,): o quanto cada vetor unitário encolheu
    if (
        bool((diag[~zero] > 1 + tol).any())
        or max_abs_diff(c[:, None] * c * expected, received) > tol
    ):
        return None
    off = (~zero) & ((diag - 1).abs() > tol)
    if not bool(off.any()):
        return None
    i = int(off.nonzero()[0])
    value = float(diag[i])
    shown = fmt(value, 0, sci=True) if value < 0.5 else f"1 − {fmt(1 - value, 1, sci=True)}"
    return (
        f"S[{i}, {i}] deu {shown}, mas a linha {i} não é nula (norma "
        f"{_size(float(norms[i]))}) e o cosseno de um vetor consigo é 1 (tolerância "
        f"{fmt(tol, 0, sci=True)}): a "
        "proteção contra a divisão por 0 encolheu vetores que não são nulos. Somar um ε à "
        "norma (v / (norma + ε)) muda todo cosseno em cerca de ε/norma, e um clamp_min "
        "maior que a norma de um vetor curto (como 1e-2) o deixa mais curto que 1. Divida "
        "por norma.clamp_min(1e-12): ela só age no vetor nulo."
    )


def _random_vectors(g: torch.Generator) -> Tensor:
    n = int(torch.randint(3, 10, (1,), generator=g))
    d = n + int(torch.randint(1, 6, (1,), generator=g))  # d ≠ n: as formas não se confundem
    scales = torch.rand(n, 1, generator=g) * 5 + 0.1
    vectors = torch.randn(n, d, generator=g) * scales
    if bool(torch.rand(1, generator=g) < 0.5):
        vectors[int(torch.randint(0, n, (1,), generator=g))] = 0.0
    return vectors


def _cosine_variants(vectors: Tensor, expected: Tensor) -> list[tuple[str, Tensor]]:
    zero = vectors.abs().sum(dim=-1) == 0  # (n,)
    with_one = expected.clone()
    with_one[zero, :] = 1.0  # o que nan_to_num(nan=1.0) faz com o 0/0 do vetor nulo
    with_one[:, zero] = 1.0
    by_column = F.normalize(vectors, dim=0)
    return [
        (
            "são os produtos escalares sem normalizar; divida cada linha pela sua norma.",
            vectors @ vectors.T,
        ),
        (
            "é o resultado de normalizar as colunas (dim=0); cada vetor é uma linha, "
            "normalize ao longo de d (dim=-1).",
            by_column @ by_column.T,
        ),
        (
            "o vetor nulo ficou com similaridade 1 com todos; ele não tem direção e deve "
            "dar 0 com todos, inclusive consigo. Trocar o NaN por outro número esconde o "
            "0/0; dividir por norma.clamp_min(1e-12) o evita e mantém o vetor nulo nulo.",
            with_one,
        ),
    ]


@exercise("Exercício 2 (similaridade de cossenos sem o tensor (n, n, d))")
def check_cosine_matrix(cosine_matrix: Callable[[Tensor], Tensor]) -> None:
    """``cosine_matrix(vectors (n, d)) -> (n, n)``; vetor nulo -> similaridade 0."""
    g, seed = case_generator()
    cases = [(v, None) for v in _cosine_fixed()]
    cases += [(_random_vectors(g), seed) for _ in range(8)]
    for vectors, case_seed in cases:
        n, d = vectors.shape
        zero_rows = (vectors.abs().sum(dim=-1) == 0).nonzero().squeeze(1).tolist()
        norms = vectors.norm(dim=-1)
        short = ((norms > 0) & (norms < 0.05)).nonzero().squeeze(1).tolist()
        where = (
            f"Para vectors (n, d) = ({n}, {d}), {vectors.dtype}"
            + (f", com a linha {zero_rows[0]} nula" if zero_rows else "")
            + (
                f", com {len(short)} vetores curtos (norma a partir de "
                f"{fmt(float(norms[short].min()), 0, sci=True)})"
                if short
                else ""
            )
            + seed_note(case_seed)
        )
        expected = _cosine(vectors)
        with record_ops() as ops:
            received = call_answer(
                cosine_matrix,
                {"vectors": vectors},
                where,
                "Confira os formatos: normas (n, 1) com keepdim=True, vetores unitários "
                "(n, d) e unit @ unit.T para chegar a (n, n).",
            )
        big = ops.materialized((n, n, d))
        expect(
            not big,
            f"{where}, sua função criou um tensor (n, n, d) = ({n}, {n}, {d}) (pela "
            f"operação {', '.join(sorted(big))}): é o que a comparação de todos contra todos "
            "por broadcasting faz (F.cosine_similarity(v[:, None], v[None, :]) também). "
            "Com um vocabulário grande ele não cabe na memória; normalize as linhas e use "
            "um produto de matrizes, (n, d) @ (d, n).",
        )
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) == (n, n) and bool(received.isnan().any()):
            only_zero = all(  # os NaN estão todos na linha ou na coluna de um vetor nulo?
                i in zero_rows or j in zero_rows for i, j in received.isnan().nonzero().tolist()
            )
            raise ExerciseError(
                f"{where}, o resultado tem NaN"
                + (
                    f": só nos pares com o vetor nulo (linha {zero_rows[0]}), que tem norma 0; "
                    "a divisão vira 0/0. Divida por norma.clamp_min(1e-12): a similaridade "
                    "com um vetor nulo deve dar 0."
                    if zero_rows and only_zero
                    else "."
                )
            )
        # a tolerância do tipo menos preciso entre a entrada e a resposta
        atol = 10 * max(_atol(vectors.dtype), _atol(received.dtype))
        try:
            expect_close(
                received,
                expected.to(received.dtype),
                where,
                atol=atol,
                name="o resultado",
                variants=_cosine_variants(vectors, expected),
            )
        except ExerciseError as error:
            # sem variante reconhecida: a proteção contra 0/0 pode ter mexido demais
            diagnosis = (
                _protection(vectors, received, expected, atol)
                if "difere do esperado" in str(error)
                else None
            )
            if diagnosis is None:
                raise
            raise ExerciseError(f"{where}, o resultado não confere: {diagnosis}") from None
        if not zero_rows:  # o gradiente de um vetor nulo depende da receita; fora dele, não
            # o gradiente do cosseno cresce como 1/norma: a tolerância acompanha
            scale = max(1.0, 1.0 / float(norms.min()))
            check_gradients(cosine_matrix, _cosine, {"vectors": vectors}, where, atol=1e-4 * scale)
        else:  # com um vetor nulo, o gradiente pode variar com a receita, mas não ser NaN
            expect_finite_gradient(
                cosine_matrix,
                {"vectors": vectors},
                "vectors",
                where,
                "a divisão 0/0 do vetor nulo, trocada depois por 0 (nan_to_num ou "
                "torch.where), some da saída, mas não do gradiente. Evite a divisão por 0: "
                "norma.clamp_min(1e-12).",
            )


# --------------------------------------------------------------------------------------
# Exercício 3: os vizinhos mais próximos de cada token
# --------------------------------------------------------------------------------------
def _similarities(weight: Tensor, token_ids: Tensor) -> Tensor:
    """Cossenos ``(n, |V|)`` de cada token pedido com todos, sem ele mesmo e sem o <pad>."""
    unit = F.normalize(weight, dim=-1)  # (|V|, d)
    sims = unit[token_ids] @ unit.T  # (n, |V|)
    sims[torch.arange(len(token_ids)), token_ids] = float("-inf")
    sims[:, PAD_ID] = float("-inf")
    return sims


def _nearest(weight: Tensor, token_ids: Tensor, k: int) -> Tensor:
    return _similarities(weight, token_ids).topk(k, dim=-1).indices  # (n, k)


def _nearest_case(
    g: torch.Generator, vocab: int, d: int, n: int, k: int, pad_zero: bool
) -> tuple[Tensor, Tensor, int]:
    norms = torch.rand(vocab, 1, generator=g) * 4 + 0.2  # normas bem diferentes
    weight = F.normalize(torch.randn(vocab, d, generator=g), dim=-1) * norms  # (|V|, d)
    if pad_zero:
        weight[PAD_ID] = 0.0  # como o padding_idx deixa
    else:
        weight[PAD_ID] = weight[1:].mean(dim=0) * 5  # perto de todos: apareceria no topo
    token_ids = torch.randperm(vocab - 1, generator=g)[:n] + 1  # (n,), sem o <pad>
    return weight, token_ids, k


def _twins_case() -> tuple[Tensor, Tensor, int]:
    """Dois tokens com a mesma linha (3 e 8), os dois pedidos: para cada um, o outro tem
    cosseno 1, empatado com ele mesmo. Quem supõe que o próprio token vem em primeiro
    (``topk(k + 1)[:, 1:]``) o deixa na lista de um dos dois, qualquer que seja a ordem
    dos empates."""
    weight, _, _ = _nearest_case(torch.Generator().manual_seed(7), 11, 3, 1, 3, False)
    weight[8] = weight[3]
    return weight, torch.tensor([3, 8, 5]), 3


_NEAREST_FIXED = [  # (|V|, d, n, k, linha do <pad> nula?)
    (12, 3, 4, 3, True),
    (10, 4, 3, 2, False),
    (7, 2, 6, 5, True),
]


def _nearest_variants(weight: Tensor, token_ids: Tensor, k: int) -> list[tuple[str, Tensor]]:
    unit = F.normalize(weight, dim=-1)
    raw = unit[token_ids] @ unit.T  # (n, |V|)
    no_self = raw.clone()
    no_self[torch.arange(len(token_ids)), token_ids] = float("-inf")
    no_pad = raw.clone()
    no_pad[:, PAD_ID] = float("-inf")
    dots = weight[token_ids] @ weight.T
    dots[torch.arange(len(token_ids)), token_ids] = float("-inf")
    dots[:, PAD_ID] = float("-inf")
    zeroed = raw.clone()
    zeroed[torch.arange(len(token_ids)), token_ids] = 0.0
    zeroed[:, PAD_ID] = 0.0
    return [
        (
            "o <pad> entrou na lista: tire a coluna do PAD_ID antes do topk.",
            no_self.topk(k).indices,
        ),
        (
            "cada token apareceu como vizinho de si mesmo (cosseno 1): tire-o antes do topk.",
            no_pad.topk(k).indices,
        ),
        (
            "é a ordem dos produtos escalares, sem normalizar: aqui as linhas têm normas "
            "diferentes, e o cosseno olha só a direção.",
            dots.topk(k).indices,
        ),
        (
            "o próprio token e o <pad> foram 'tirados' com similaridade 0, mas 0 ganha dos "
            "cossenos negativos; use -inf.",
            zeroed.topk(k).indices,
        ),
        (
            "estão em ordem crescente de similaridade; a lista começa pelo mais parecido.",
            _nearest(weight, token_ids, k).flip(-1),
        ),
    ]


@exercise("Exercício 3 (os vizinhos mais próximos de cada token)")
def check_nearest_tokens(nearest_tokens: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``nearest_tokens(weight (|V|, d), token_ids (n,), k) -> (n, k)`` ids, do mais parecido."""
    g, seed = case_generator()
    cases = [
        (*_nearest_case(torch.Generator().manual_seed(i), *shape), None)
        for i, shape in enumerate(_NEAREST_FIXED)
    ]
    cases.append((*_twins_case(), None))
    for _ in range(8):
        vocab = int(torch.randint(6, 25, (1,), generator=g))
        d = int(torch.randint(2, 6, (1,), generator=g))
        n = int(torch.randint(1, vocab - 1, (1,), generator=g))
        k = int(torch.randint(1, vocab - 2, (1,), generator=g))
        pad_zero = bool(torch.rand(1, generator=g) < 0.5)
        cases.append((*_nearest_case(g, vocab, d, n, k, pad_zero), seed))
    for weight, token_ids, k, case_seed in cases:
        n = len(token_ids)
        where = (
            f"Para weight {tuple(weight.shape)}, token_ids={token_ids.tolist()} e k={k}"
            + seed_note(case_seed)
        )
        received = call_answer(
            nearest_tokens,
            {"weight": weight, "token_ids": token_ids, "k": k},
            where,
            "Confira os formatos: similaridades (n, |V|) e topk(k, dim=-1).",
        )
        expect(
            isinstance(received, Tensor) and not received.is_floating_point(),
            f"{where}, esperava um tensor de ids inteiros; recebi "
            + (f"{received.dtype}." if isinstance(received, Tensor) else type(received).__name__),
        )
        expect(
            tuple(received.shape) == (n, k),
            f"{where}, esperava (n, k) = ({n}, {k}); recebi {tuple(received.shape)}.",
        )
        expected = _nearest(weight, token_ids, k)
        if torch.equal(received, expected):
            continue
        sims = _similarities(weight, token_ids)  # (n, |V|)
        valid = bool(((received >= 0) & (received < len(weight))).all())
        if valid:  # empates por arredondamento: vale quem tem a mesma similaridade
            got = sims.gather(1, received.long())
            want = sims.gather(1, expected)
            if bool(torch.isfinite(got).all()) and float((got - want).abs().max()) <= 1e-5:
                continue
        message = f"{where}, esperava {expected.tolist()}, recebi {received.tolist()}"
        for diagnosis, wrong in _nearest_variants(weight, token_ids, k):
            if not torch.equal(wrong, expected) and torch.equal(received, wrong):
                raise ExerciseError(f"{message}: {diagnosis}")
        itself = (received == token_ids[:, None]).any(dim=-1)  # (n,)
        if bool(itself.any()):
            i = int(itself.nonzero()[0])
            twins = [
                j
                for j in range(len(weight))
                if j != int(token_ids[i]) and torch.equal(weight[j], weight[token_ids[i]])
            ]
            raise ExerciseError(
                f"{message}: a linha {i} traz o próprio token {int(token_ids[i])}, que fica "
                "de fora. Pular o primeiro da lista (topk(k + 1)[:, 1:]) supõe que o "
                "próprio token é sempre o mais parecido"
                + (
                    f", mas aqui o token {twins[0]} tem a mesma linha da tabela (cosseno 1, "
                    "empatado com ele)"
                    if twins
                    else ", e nem sempre é (empates, linhas nulas)"
                )
                + ". Tire-o com -inf antes do topk."
            )
        raise ExerciseError(message + ".")
    sizes = (2, 6)
    small, large = op_counts_by_size(
        nearest_tokens,
        lambda m: _nearest_case(torch.Generator().manual_seed(m), 12, 3, m, 3, True),
        sizes,
    )
    expect(
        small == large,
        f"Com {sizes[0]} e {sizes[1]} tokens pedidos, sua função executou {small} e {large} "
        "operações do PyTorch: o número cresce com n, então algo roda uma vez por token "
        "(for, map, compreensão ou função auxiliar). Calcule as similaridades de todos de "
        "uma vez, (n, d) @ (d, |V|).",
    )
