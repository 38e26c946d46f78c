"""Conferências dos exercícios de notebooks/06_mascaras.ipynb.

Três exercícios, na ordem do notebook:

1. :func:`check_sliding_window_mask`: a máscara causal com janela deslizante (atenção
   local) ``(t, t)`` na convenção do tpt (``True`` = bloqueado), sem laços e sem
   ``tpt.sliding_window_mask``;
2. :func:`check_left_padded_decoder_mask`: a máscara do decoder ``(b, 1, t, t)`` de um lote
   preenchido à esquerda, a partir dos comprimentos, sem laços;
3. :func:`check_document_mask`: a máscara ``(b, 1, t, t)`` de um lote de sequências
   **empacotadas** (vários documentos numa linha, com o id do documento de cada posição e
   ``<pad>`` no fim): a chave fica bloqueada se é de outro documento, do futuro ou
   ``<pad>``; sem laços.

As regras são conferidas pelo que roda: "sem laços" é "o número de operações do PyTorch
não cresce com o tamanho" (:func:`op_counts_by_size`); "não use a função X do tpt" olha as
funções Python que rodaram (um apelido, um argumento padrão ou um ``partial`` chegam ao
mesmo código). Além dos casos fixos, cada execução sorteia casos novos (no exercício 1,
de tamanhos tirados de uma faixa larga, para que nenhuma tabela pronta cubra todos), e um
diagnóstico ("janela com uma chave a mais") só aparece quando a variante errada foi
calculada e bateu com a resposta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.exercises import (
    ExerciseError,
    call_answer,
    case_generator,
    exercise,
    expect,
    op_counts_by_size,
)
from tpt.exercises.rules import record_python_calls
from tpt.masks import causal_mask, sliding_window_mask

__all__ = [
    "check_sliding_window_mask",
    "check_left_padded_decoder_mask",
    "check_document_mask",
]


def _no_loops(
    answer: Callable[..., Any], make_args: Callable[[int], tuple], sizes: Callable[[int], str]
) -> None:
    small, large = op_counts_by_size(answer, make_args, (3, 7))
    expect(
        small == large,
        f"Sem laços: com {sizes(3)} a sua função executou {small} operações do PyTorch, e "
        f"com {sizes(7)}, {large}. Um laço em Python (for, while, map, compreensão ou função "
        "auxiliar chamada por posição) faz o número crescer; monte a máscara inteira de uma "
        "vez, com torch.arange, comparações e broadcasting.",
    )


def _describe(blocked: bool) -> str:
    return "bloqueada (True)" if blocked else "livre (False)"


def _expect_plain_tensor(received: Any, where: str) -> None:
    """A resposta é um ``torch.Tensor`` comum (não uma subclasse)?

    Uma subclasse de ``Tensor`` decide o que ``torch.equal``, ``shape`` e as comparações
    respondem (``__torch_function__``): a conferência só lê uma máscara de tipo exato.
    """
    kind = type(received)
    if kind is Tensor:
        return
    if isinstance(received, Tensor):
        raise ExerciseError(
            f"{where}, esperava um torch.Tensor comum; recebi um {kind.__qualname__}, "
            "subclasse de torch.Tensor. Numa subclasse, comparações e torch.equal podem "
            "responder o que ela quiser: devolva a máscara como torch.Tensor (as operações do "
            "PyTorch sobre tensores comuns já dão um)."
        )
    raise ExerciseError(f"{where}, esperava um tensor booleano; recebi {kind.__name__}.")


def _expect_mask(
    received: Any,
    expected: Tensor,
    where: str,
    axes: tuple[str, ...],
    variants: list[tuple[str, Tensor]],
) -> None:
    """Confere tipo, forma, dtype e valores de uma máscara booleana."""
    _expect_plain_tensor(received, where)
    expect(
        tuple(received.shape) == tuple(expected.shape),
        f"{where}, esperava a forma {tuple(expected.shape)}; recebi {tuple(received.shape)}.",
    )
    expect(
        received.dtype == torch.bool,
        f"{where}, a máscara tem dtype {received.dtype}, mas o tpt usa máscaras booleanas "
        "(torch.bool) com True = bloqueado. Uma 0/1 vira booleana com `.bool()` ou com uma "
        "comparação (`j > i` já é booleano).",
    )
    received = received.detach().cpu()
    if torch.equal(received, expected):
        return
    for n, (diagnosis, wrong) in enumerate(variants):
        ambiguous = any(
            torch.equal(wrong, other) for m, (_, other) in enumerate(variants) if m != n
        )
        if torch.equal(received, wrong) and not ambiguous:
            expect(False, f"{where}, a máscara está errada: {diagnosis}")
    index = (received != expected).nonzero()[0].tolist()
    cell = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    expect(
        False,
        f"{where}, na posição ({cell}) a chave deveria estar "
        f"{_describe(bool(expected[tuple(index)]))}, mas veio "
        f"{_describe(bool(received[tuple(index)]))}.",
    )


# --------------------------------------------------------------------------------------
# Exercício 1: máscara causal com janela deslizante
# --------------------------------------------------------------------------------------
_WINDOW_HINT = (
    "Use `i = torch.arange(t)[:, None]` (consultas, forma (t, 1)) e "
    "`j = torch.arange(t)[None, :]` (chaves, forma (1, t)): comparações entre eles dão a "
    "máscara (t, t) inteira por broadcasting."
)


def _window_cases() -> list[tuple[str, int, int]]:
    fixed = [(6, 3), (5, 2), (6, 1), (4, 4), (7, 10), (1, 1), (8, 3)]
    cases = [(f"Para t={t}, window={w}", t, w) for t, w in fixed]
    g, seed = case_generator()
    # Tamanhos de uma faixa larga: uma tabela de máscaras montada antes, fora da função,
    # teria de cobrir dezenas de milhares de pares (t, window), com até t² números cada.
    for _ in range(3):
        t = int(torch.randint(13, 257, (), generator=g))
        w = int(torch.randint(1, t, (), generator=g))  # window < t: a janela corta de verdade
        cases.append((f"No caso sorteado t={t}, window={w} (semente {seed})", t, w))
    return cases


def _window_variants(t: int, window: int) -> list[tuple[str, Tensor]]:
    i = torch.arange(t)[:, None]  # (t, 1)
    j = torch.arange(t)[None, :]  # (1, t)
    expected = (j > i) | (j <= i - window)
    return [
        (
            "está com a convenção invertida (True onde a chave pode ser vista, como em "
            "F.scaled_dot_product_attention). No tpt, True = bloqueado.",
            ~expected,
        ),
        (
            "a janela é simétrica: cada consulta também vê as window - 1 chaves seguintes. A "
            "atenção local do decoder continua causal: bloqueie também j > i.",
            (i - j).abs() >= window,
        ),
        (
            "a janela tem uma chave a mais: a consulta i vê window + 1 chaves (de i - window "
            "até i). Com window chaves, ela mesma incluída, a mais antiga visível é "
            "i - window + 1.",
            (j > i) | (j < i - window),
        ),
        (
            "a janela tem uma chave a menos: a consulta i vê só window - 1 chaves. Ela mesma "
            "conta como uma das window (de i - window + 1 até i).",
            (j > i) | (j <= i - window + 1),
        ),
        (
            "é a máscara causal comum: faltou bloquear as chaves antigas demais (j <= i - window).",
            j > i,
        ),
    ]


@exercise("Exercício 1 (máscara com janela deslizante)")
def check_sliding_window_mask(sliding_window: Callable[[int, int], Tensor]) -> None:
    """``sliding_window(t, window) -> (t, t)`` bool, True = bloqueado."""
    for where, t, window in _window_cases():
        with record_python_calls() as calls:
            received = call_answer(sliding_window, {"t": t, "window": window}, where, _WINDOW_HINT)
        expect(
            sliding_window_mask.__code__ not in calls,
            f"{where}, sua função chamou tpt.sliding_window_mask (com esse nome ou com "
            "outro): o exercício pede a máscara escrita por você, e é com ela que a "
            "conferência compara.",
        )
        _expect_mask(
            received,
            sliding_window_mask(t, window),
            where,
            ("consulta", "chave"),
            _window_variants(t, window) if t > 1 else [],
        )
    _no_loops(sliding_window, lambda n: (2 * n, n), lambda n: f"t={2 * n}, window={n}")


# --------------------------------------------------------------------------------------
# Exercício 2: máscara do decoder com preenchimento à esquerda
# --------------------------------------------------------------------------------------
_LEFT_HINT = (
    "Com preenchimento à esquerda, o exemplo de comprimento n tem t - n <pad> no começo: "
    "a chave j é <pad> quando j < t - n. Compare torch.arange(t) com (t - lengths)[:, None] "
    "e junte com a máscara causal usando | e broadcasting: (b, 1, 1, t) | (1, 1, t, t)."
)


def _left_pads(lengths: Tensor, t: int) -> Tensor:
    return (torch.arange(t)[None, :] < (t - lengths)[:, None])[:, None, None, :]  # (b, 1, 1, t)


def _left_reference(lengths: Tensor, t: int) -> Tensor:
    return _left_pads(lengths, t) | causal_mask(t)[None, None]  # (b, 1, t, t)


def _left_cases() -> list[tuple[str, list[int], int]]:
    fixed = [([3, 5, 1], 5), ([4, 4], 4), ([2, 6, 4, 1], 7), ([1], 1), ([3, 2], 3)]
    cases = [(f"Para lengths={lengths}, t={t}", lengths, t) for lengths, t in fixed]
    g, seed = case_generator()
    for _ in range(3):
        b, t = int(torch.randint(1, 6, (), generator=g)), int(torch.randint(2, 10, (), generator=g))
        lengths = torch.randint(1, t + 1, (b,), generator=g).tolist()
        cases.append((f"No caso sorteado lengths={lengths}, t={t} (semente {seed})", lengths, t))
    return cases


@exercise("Exercício 2 (máscara do decoder com <pad> à esquerda)")
def check_left_padded_decoder_mask(decoder_mask: Callable[[Tensor, int], Tensor]) -> None:
    """``decoder_mask(lengths (b,), t) -> (b, 1, t, t)`` bool, True = bloqueado."""
    for where, lengths_list, t in _left_cases():
        lengths = torch.tensor(lengths_list)
        b = len(lengths_list)
        received = call_answer(decoder_mask, {"lengths": lengths, "t": t}, where, _LEFT_HINT)
        shape = tuple(received.shape) if type(received) is Tensor else None
        expect(
            shape != (b, t, t) or b == 1,
            f"{where}, recebi a forma {shape} = (b, t, t); falta o eixo das cabeças. Com "
            f"(b, 1, t, t) = {(b, 1, t, t)} a mesma máscara serve a todas as h cabeças das "
            "pontuações (b, h, t, t) por broadcasting.",
        )
        expected = _left_reference(lengths, t)
        causal = causal_mask(t)[None, None].expand(b, 1, t, t)
        right = (torch.arange(t)[None, :] >= lengths[:, None])[:, None, None, :]
        _expect_mask(
            received,
            expected,
            where,
            ("exemplo", "cabeça", "consulta", "chave"),
            [
                (
                    "está com a convenção invertida (True onde a chave pode ser vista). No "
                    "tpt, True = bloqueado.",
                    ~expected,
                ),
                (
                    "você bloqueou o fim de cada linha, como num lote preenchido à direita (é "
                    "o que tpt.padding_mask faz). Aqui os <pad> estão no começo: a chave j é "
                    "<pad> quando j < t - lengths[b].",
                    right | causal,
                ),
                (
                    "é só a máscara causal: faltou bloquear as chaves <pad> do começo de cada "
                    "linha.",
                    causal,
                ),
                (
                    "é só a máscara de preenchimento: faltou a parte causal (o decoder não pode "
                    "ver o futuro, j > i).",
                    _left_pads(lengths, t).expand(b, 1, t, t),
                ),
            ],
        )
    _no_loops(
        decoder_mask,
        lambda n: (torch.arange(1, n + 1), n + 2),
        lambda n: f"lengths={list(range(1, n + 1))}, t={n + 2}",
    )


# --------------------------------------------------------------------------------------
# Exercício 3: sequências empacotadas (vários documentos por linha)
# --------------------------------------------------------------------------------------
_DOC_HINT = (
    "doc_ids tem forma (b, t): compare o documento de cada consulta com o de cada chave por "
    "broadcasting, doc_ids[:, :, None] com doc_ids[:, None, :] dá (b, t, t); junte a parte "
    "causal (t, t) e as chaves <pad> (b, 1, t) com |, e acrescente o eixo das cabeças."
)


def _doc_parts(doc_ids: Tensor, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """(outro documento (b, t, t), futuro (t, t), chave <pad> (b, 1, t))."""
    t = doc_ids.shape[1]
    other = doc_ids[:, :, None] != doc_ids[:, None, :]  # (b, t, t): consulta i, chave j
    return other, causal_mask(t), (doc_ids == pad_id)[:, None, :]


def _doc_reference(doc_ids: Tensor, pad_id: int) -> Tensor:
    other, future, pad = _doc_parts(doc_ids, pad_id)
    return (other | future | pad)[:, None]  # (b, 1, t, t)


def _doc_variants(doc_ids: Tensor, pad_id: int) -> list[tuple[str, Tensor]]:
    other, future, pad = _doc_parts(doc_ids, pad_id)
    expected = (other | future | pad)[:, None]
    b, t = doc_ids.shape
    return [
        (
            "está com a convenção invertida (True onde a chave pode ser vista). No tpt, True = "
            "bloqueado.",
            ~expected,
        ),
        (
            "falta a parte causal: dentro de um documento, a consulta i ainda não pode ver as "
            "chaves j > i.",
            (other | pad)[:, None],
        ),
        (
            "os documentos se enxergam: é só a máscara causal com os <pad>. Num lote "
            "empacotado, a chave de outro documento (doc_ids diferente) também fica bloqueada.",
            (future | pad).expand(b, t, t)[:, None],
        ),
        (
            "as consultas <pad> veem os <pad> anteriores: com o mesmo pad_id, eles passam por "
            "um documento. A chave <pad> fica bloqueada para todas as consultas.",
            (other | future)[:, None],
        ),
        (
            "bloqueou as chaves do mesmo documento e liberou as dos outros: a chave j fica "
            "bloqueada quando doc_ids[j] é diferente de doc_ids[i].",
            (~other | future | pad)[:, None],
        ),
    ]


def _packed(lengths: list[list[int]], ids: list[list[int]], t: int, pad_id: int) -> Tensor:
    """Um lote ``(b, t)``: em cada linha, documentos seguidos e ``<pad>`` até ``t``."""
    rows = []
    for row_lengths, row_ids in zip(lengths, ids, strict=True):
        row = [doc for n, doc in zip(row_lengths, row_ids, strict=True) for _ in range(n)]
        rows.append(row + [pad_id] * (t - len(row)))
    return torch.tensor(rows)


_BELOW_PAD_HINT = (
    "Neste caso há ids de documento menores que pad_id: os ids são números quaisquer, e "
    "doc_ids - pad_id pode ser negativo."
)
_HUGE_IDS_HINT = (
    "Neste caso os ids de documento são enormes: uma tabela indexada pelo id (F.one_hot, "
    "torch.bincount, um tensor do tamanho do maior id) não cabe na memória. Compare os ids "
    "entre si."
)
_HUGE = 2**50  # exato em float32 e float64: só uma tabela pelo id quebra


def _doc_cases() -> list[tuple[str, Tensor, int, str]]:
    """(descrição, doc_ids (b, t), pad_id, dica para quando a resposta quebra)."""
    fixed = [
        ([[3, 2], [5]], [[0, 1], [0]], 6, -1, ""),  # dois documentos; uma linha com <pad>
        ([[2, 2, 3], [1, 4, 2]], [[0, 1, 2], [0, 1, 2]], 7, -1, ""),  # três por linha
        ([[4, 1], [2, 2], [3]], [[7, 2], [5, 9], [4]], 6, 0, ""),  # ids quaisquer, pad_id = 0
        ([[1]], [[0]], 3, -1, ""),  # um token e dois <pad>
        # ids abaixo de pad_id (pad_id não é o menor valor do lote)
        ([[2, 3], [1, 3]], [[-3, 5], [12, -8]], 6, 4, _BELOW_PAD_HINT),
        # ids enormes, acima e abaixo de pad_id
        (
            [[3, 2], [1, 2, 2]],
            [[3 * _HUGE, -_HUGE], [_HUGE, 2**62, -(2**62)]],
            6,
            7,
            _HUGE_IDS_HINT,
        ),
    ]
    cases = []
    for lengths, ids, t, pad_id, hint in fixed:
        doc_ids = _packed(lengths, ids, t, pad_id)
        where = f"Para doc_ids={doc_ids.tolist()}, pad_id={pad_id}"
        cases.append((where, doc_ids, pad_id, hint))
    g, seed = case_generator()
    for _ in range(3):
        b = int(torch.randint(1, 5, (), generator=g))
        t = int(torch.randint(4, 40, (), generator=g))
        # pad_id e ids de -60 a 60: ids acima e abaixo de pad_id, negativos e positivos.
        pad_id = int(torch.randint(-60, 61, (), generator=g))
        lengths, ids = [], []
        for _ in range(b):
            row_lengths, used = [], 0
            while used < t:
                n = int(torch.randint(1, t - used + 1, (), generator=g))
                row_lengths.append(n)
                used += n
            if len(row_lengths) > 1 and bool(torch.randint(2, (), generator=g)):
                row_lengths.pop()  # o resto da linha fica com <pad>
            lengths.append(row_lengths)
            choices = [i for i in range(-60, 61) if i != pad_id]
            order = torch.randperm(len(choices), generator=g)[: len(row_lengths)]
            ids.append([choices[int(k)] for k in order])
        doc_ids = _packed(lengths, ids, t, pad_id)
        cases.append(
            (
                f"No caso sorteado com doc_ids {tuple(doc_ids.shape)} e pad_id={pad_id} "
                f"(semente {seed})",
                doc_ids,
                pad_id,
                _BELOW_PAD_HINT if bool((doc_ids < pad_id).any()) else "",
            )
        )
    return cases


@exercise("Exercício 3 (máscara de sequências empacotadas)")
def check_document_mask(document_mask: Callable[[Tensor, int], Tensor]) -> None:
    """``document_mask(doc_ids (b, t), pad_id) -> (b, 1, t, t)`` bool, True = bloqueado.

    A chave ``j`` fica bloqueada para a consulta ``i`` se é de outro documento
    (``doc_ids[j] != doc_ids[i]``), se está no futuro (``j > i``) ou se é ``<pad>``
    (``doc_ids[j] == pad_id``). Regras: sem laços; ``doc_ids`` fica intacto.
    """
    for where, doc_ids, pad_id, hint in _doc_cases():
        b, t = doc_ids.shape
        received = call_answer(
            document_mask,
            {"doc_ids": doc_ids, "pad_id": pad_id},
            where,
            f"{hint} {_DOC_HINT}" if hint else _DOC_HINT,
        )
        shape = tuple(received.shape) if type(received) is Tensor else None
        expect(
            shape != (b, t, t) or b == 1,
            f"{where}, recebi a forma {shape} = (b, t, t); falta o eixo das cabeças. Com "
            f"(b, 1, t, t) = {(b, 1, t, t)} a mesma máscara serve a todas as h cabeças das "
            "pontuações (b, h, t, t) por broadcasting.",
        )
        _expect_mask(
            received,
            _doc_reference(doc_ids, pad_id),
            where,
            ("exemplo", "cabeça", "consulta", "chave"),
            _doc_variants(doc_ids, pad_id),
        )

    def make_args(n: int) -> tuple[Tensor, int]:
        # n linhas de 2n posições: documentos de 2 tokens e 2 <pad> no fim.
        row = [k // 2 for k in range(2 * n - 2)] + [-1, -1]
        return torch.tensor([row] * n), -1

    _no_loops(
        document_mask,
        make_args,
        lambda n: f"doc_ids ({n}, {2 * n})",
    )
