"""Conferências dos exercícios de notebooks/03_atencao_produto_escalar.ipynb.

Três exercícios, na ordem do notebook. Nenhum deles repete uma célula do notebook:
cada um pede um passo que o aluno ainda não viu escrito.

1. :func:`check_stable_softmax`: um softmax sobre o último eixo que não estoura com
   pontuações grandes (``exp(1000)`` é infinito em ``float32``), **sem** ``torch.softmax``,
   ``F.softmax``, ``Tensor.softmax`` nem ``log_softmax``;
2. :func:`check_article_projections`: projeções ``W_Q`` e ``W_K`` escolhidas à mão, sobre
   as características de cada palavra (:data:`FEATURES`), que façam cada artigo olhar
   para o substantivo de mesmo gênero (``o`` -> ``trem``, ``uma`` -> ``cadeira``),
   conferidas também numa frase que o aluno não viu;
3. :func:`check_max_seq_len`: o maior comprimento ``t`` cujo tensor de pesos
   ``(b, h, t, t)`` cabe num orçamento de memória (a fórmula do notebook, invertida).

Cada conferência diz, em português, qual entrada falhou, o que era esperado e o que
veio; os erros mais comuns têm mensagens próprias, e as regras dos enunciados ("sem
``torch.softmax``") são verificadas, não só pedidas.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tpt.exercises import ExerciseError, exercise, expect, forbid, references
from tpt.numfmt import fmt

__all__ = [
    "FEATURES",
    "check_stable_softmax",
    "check_article_projections",
    "check_max_seq_len",
]


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else ""


def _call(fn: Callable[..., Any], args: tuple[Any, ...], where: str, hint: str) -> Any:
    """Chama a função do aluno; um erro vira uma explicação em português com uma dica."""
    try:
        return fn(*args)
    except (NotImplementedError, ExerciseError):
        raise
    except Exception as err:  # o erro do aluno, explicado
        original = _first_line(err)
        detail = f" (mensagem original: {original})" if original else ""
        raise ExerciseError(
            f"{where}, sua função levantou {type(err).__name__}. {hint}{detail}"
        ) from None


# --------------------------------------------------------------------------------------
# Exercício 1: softmax numericamente estável
# --------------------------------------------------------------------------------------

_FORBIDDEN_SOFTMAX = (
    (torch, "softmax"),
    (torch, "log_softmax"),
    (torch.Tensor, "softmax"),
    (torch.Tensor, "log_softmax"),
    (F, "softmax"),
    (F, "log_softmax"),
    (torch.special, "softmax"),
    (torch.special, "log_softmax"),
)
_SOFTMAX_RULE = (
    "o exercício pede o softmax escrito por você, sem torch.softmax, F.softmax, "
    "Tensor.softmax nem log_softmax: use torch.exp, uma soma e uma divisão."
)


@contextlib.contextmanager
def _no_builtin_softmax() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for owner, name in _FORBIDDEN_SOFTMAX:
            stack.enter_context(forbid(owner, name, _SOFTMAX_RULE))
        yield


def _softmax_cases() -> list[tuple[str, Tensor]]:
    """Casos ``(descrição, pontuações)``, do mais simples ao que exige estabilidade."""
    g = torch.Generator().manual_seed(3)
    inf = float("inf")
    return [
        ("pontuações pequenas de forma (2, 3, 5)", torch.randn(2, 3, 5, generator=g)),
        ("uma matriz quadrada (4, 4)", 3 * torch.randn(4, 4, generator=g)),
        ("uma linha [1000, 1001, 999, 998] (float32)", torch.tensor([[1000.0, 1001, 999, 998]])),
        ("uma linha [-500, 500, 0] (float32)", torch.tensor([[-500.0, 500, 0]])),
        ("duas linhas de escalas diferentes: [[1000, 1001], [0, 1]]",
         torch.tensor([[1000.0, 1001], [0, 1]])),
        ("uma linha com -inf (posições mascaradas): [0, -inf, 2, -inf]",
         torch.tensor([[0.0, -inf, 2, -inf]])),
        ("um vetor 1-D [2, 0, -1]", torch.tensor([2.0, 0, -1])),
    ]


# float32 perto de 1000 tem resolução de ~6e-5: uma resposta certa (logsumexp, por
# exemplo) pode diferir da referência em float64 por ~2e-5.
_SOFTMAX_ATOL = 1e-4


def _reference_softmax(scores: Tensor) -> Tensor:
    return torch.softmax(scores.double(), dim=-1)


@exercise("Exercício 1 (softmax estável)")
def check_stable_softmax(stable_softmax: Callable[[Tensor], Tensor]) -> None:
    """``stable_softmax(scores (..., s)) -> (..., s)``, softmax sobre o último eixo."""
    uses_builtin = references(stable_softmax, "softmax") or references(
        stable_softmax, "log_softmax"
    )
    expect(not uses_builtin, _SOFTMAX_RULE)
    for where, scores in _softmax_cases():
        expected = _reference_softmax(scores)
        where = f"para {where}"
        with _no_builtin_softmax():
            received = _call(
                stable_softmax,
                (scores.clone(),),
                where,
                "Confira as formas: scores.max(dim=-1, keepdim=True) e .sum(dim=-1, "
                "keepdim=True) mantêm o eixo das chaves (com tamanho 1), para que a subtração "
                "e a divisão funcionem linha a linha.",
            )
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            received.shape == scores.shape,
            f"{where}, esperava a mesma forma das pontuações, {tuple(scores.shape)}; recebi "
            f"{_shape(received)}. O softmax não muda a forma: ele normaliza cada linha.",
        )
        received = received.detach().double()
        if bool(torch.isnan(received).any()) or bool(torch.isinf(received).any()):
            finite = scores[torch.isfinite(scores)]
            row_max = scores.reshape(-1, scores.shape[-1]).amax(dim=-1)  # (linhas,)
            if bool(torch.isneginf(scores).any()):
                hint = (
                    "Com -inf nas pontuações, subtrair o mínimo dá -inf - (-inf) = NaN; "
                    "subtraia o máximo de cada linha: exp(-inf - máximo) = 0, como deve ser."
                )
            elif float(row_max.max() - row_max.min()) > 100:
                hint = (
                    "Aqui as linhas têm escalas muito diferentes: subtrair o máximo do tensor "
                    "inteiro zera todas as exponenciais de uma linha (0/0 = NaN). Subtraia o "
                    "máximo de cada linha: scores.max(dim=-1, keepdim=True)."
                )
            elif finite.numel() and float(finite.max() - finite.min()) > 200:
                hint = (
                    "exp(z) é infinito em float32 para z > 88 (e zero para z < -103). Como "
                    "softmax(z) = softmax(z - c) para qualquer c, escolha c para que o maior "
                    "expoente seja 0: subtraia o máximo de cada linha (com o mínimo, o maior "
                    "expoente ainda estoura)."
                )
            else:
                hint = (
                    "exp(z) é infinito em float32 para z > 88, e inf / inf = NaN. Como "
                    "softmax(z) = softmax(z - c) para qualquer c, subtraia de cada linha o seu "
                    "máximo antes da exponencial."
                )
            expect(False, f"{where}, o resultado tem NaN ou infinito. {hint}")
        rows = received.sum(dim=-1)
        if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
            for axis in range(received.dim() - 1):
                sums = received.sum(dim=axis)
                expect(
                    not torch.allclose(sums, torch.ones_like(sums), atol=1e-4),
                    f"{where}, as somas que dão 1 são as do eixo {axis}: você normalizou sobre "
                    "o eixo errado. O softmax das pontuações é sobre as chaves, o último eixo: "
                    "tire o máximo e some em dim=-1.",
                )
            expect(
                False,
                f"{where}, cada linha deveria somar 1; as somas foram "
                f"{[fmt(x, 4) for x in rows.reshape(-1)[:6].tolist()]}. Divida cada "
                "exponencial pela soma da sua linha (sum(dim=-1, keepdim=True)).",
            )
        if scores.dim() == 2 and scores.shape[0] == scores.shape[1]:
            column_max = scores.double().amax(dim=-1)  # (n,): subtraído na direção errada
            wrong = torch.exp(scores.double() - column_max)
            wrong = wrong / wrong.sum(dim=-1, keepdim=True)
            expect(
                not torch.allclose(received, wrong, atol=1e-6),
                f"{where}, os valores estão errados: parece que o máximo de cada linha foi "
                "subtraído das colunas (scores.max(dim=-1).values tem forma (n,) e se "
                "alinha com o último eixo). Use keepdim=True para manter a forma (n, 1).",
            )
        diff = (received - expected).abs().max().item()
        expect(
            diff <= _SOFTMAX_ATOL,
            f"{where}, esperava {[fmt(x, 4) for x in expected.reshape(-1)[:8].tolist()]}; "
            f"recebi {[fmt(x, 4) for x in received.reshape(-1)[:8].tolist()]} (diferença "
            f"máxima {fmt(diff, sci=True)}).",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: projeções escolhidas à mão (artigo -> substantivo)
# --------------------------------------------------------------------------------------

#: As características de cada palavra, na ordem das colunas de ``X`` (as mesmas do
#: notebook 03). Uma linha de ``W_Q`` (ou ``W_K``) por característica.
FEATURES: tuple[str, ...] = (
    "pessoa",
    "masculino",
    "feminino",
    "substantivo",
    "pronome",
    "artigo",
    "verbo",
    "adjetivo",
    "conjunção",
    "pontuação",
)

_LEXICON: dict[str, tuple[str, ...]] = {
    "João": ("pessoa", "masculino", "substantivo"),
    "Maria": ("pessoa", "feminino", "substantivo"),
    "Pedro": ("pessoa", "masculino", "substantivo"),
    "trem": ("substantivo", "masculino"),
    "banco": ("substantivo", "masculino"),
    "cadeira": ("substantivo", "feminino"),
    "mesa": ("substantivo", "feminino"),
    "o": ("artigo", "masculino"),
    "um": ("artigo", "masculino"),
    "a": ("artigo", "feminino"),
    "uma": ("artigo", "feminino"),
    "ele": ("pronome", "masculino"),
    "ela": ("pronome", "feminino"),
    "pensou": ("verbo",),
    "estava": ("verbo",),
    "conseguiu": ("verbo",),
    "viram": ("verbo",),
    "achou": ("verbo",),
    "cheio": ("adjetivo", "masculino"),
    "ocupada": ("adjetivo", "feminino"),
    "livre": ("adjetivo",),
    "mas": ("conjunção",),
    "e": ("conjunção",),
    ":": ("pontuação",),
    ",": ("pontuação",),
    ".": ("pontuação",),
}

# (frase, a mesma separada em tokens, {artigo: substantivo que ele deve olhar})
_ARTICLE_SENTENCES: list[tuple[str, list[str], dict[str, str]]] = [
    (
        "João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre.",
        ["João", "pensou", ":", "o", "trem", "estava", "cheio", ",", "mas", "ele",
         "conseguiu", "uma", "cadeira", "livre", "."],
        {"o": "trem", "uma": "cadeira"},
    ),
    (
        "Maria e Pedro viram: a mesa estava ocupada, mas ela achou um banco livre.",
        ["Maria", "e", "Pedro", "viram", ":", "a", "mesa", "estava", "ocupada", ",", "mas",
         "ela", "achou", "um", "banco", "livre", "."],
        {"a": "mesa", "um": "banco"},
    ),
]
# Peso mínimo que o artigo deve dar ao seu substantivo.
_MIN_ARTICLE_WEIGHT = 0.8


def _feature_matrix(tokens: list[str]) -> Tensor:
    """``X`` ``(t, len(FEATURES))``: 1 onde a palavra tem a característica, 0 onde não tem."""
    X = torch.zeros(len(tokens), len(FEATURES), dtype=torch.float64)
    for i, token in enumerate(tokens):
        for name in _LEXICON[token]:
            X[i, FEATURES.index(name)] = 1.0
    return X


def _as_matrix(value: Any, name: str) -> Tensor:
    try:
        matrix = torch.as_tensor(value.detach() if isinstance(value, Tensor) else value)
    except (TypeError, ValueError, RuntimeError):
        raise ExerciseError(
            f"{name} deveria ser um tensor (len(FEATURES), d_k); recebi {type(value).__name__}."
        ) from None
    expect(
        matrix.dim() == 2 and matrix.shape[0] == len(FEATURES),
        f"{name} deveria ter forma (len(FEATURES), d_k) = ({len(FEATURES)}, d_k): uma linha por "
        f"característica, na ordem de FEATURES; recebi {_shape(matrix)}.",
    )
    expect(
        matrix.is_floating_point() or not matrix.is_complex(),
        f"{name} deveria ter números reais; recebi dtype {matrix.dtype}.",
    )
    return matrix.double()


def _feature_names(token: str) -> str:
    return ", ".join(_LEXICON[token])


@exercise("Exercício 2 (projeções à mão: artigo -> substantivo)")
def check_article_projections(article_projections: Callable[[], tuple[Tensor, Tensor]]) -> None:
    """``article_projections() -> (W_Q, W_K)``, cada um ``(len(FEATURES), d_k)``.

    Com ``Q = X W_Q`` e ``K = X W_K``, cada artigo deve dar pelo menos 80% do peso ao
    substantivo (que não é pessoa) de mesmo gênero, na frase do notebook e numa outra.
    """
    answer = _call(
        article_projections,
        (),
        "ao chamar article_projections()",
        "A função não recebe argumentos e devolve o par (W_Q, W_K).",
    )
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 2,
        "article_projections() deveria devolver um par (W_Q, W_K); recebi "
        f"{type(answer).__name__}.",
    )
    W_Q, W_K = _as_matrix(answer[0], "W_Q"), _as_matrix(answer[1], "W_K")
    expect(
        W_Q.shape == W_K.shape,
        f"W_Q tem forma {tuple(W_Q.shape)} e W_K tem forma {tuple(W_K.shape)}: as duas precisam "
        "do mesmo número de colunas d_k, porque as pontuações são produtos escalares q · k.",
    )
    expect(
        bool(torch.isfinite(W_Q).all() and torch.isfinite(W_K).all()),
        "W_Q ou W_K tem NaN ou infinito; use números finitos.",
    )
    d_k = W_Q.shape[1]
    for number, (sentence, tokens, targets) in enumerate(_ARTICLE_SENTENCES, start=1):
        X = _feature_matrix(tokens)  # (t, f)
        Q, K = X @ W_Q, X @ W_K  # (t, d_k)
        weights = torch.softmax(Q @ K.T / math.sqrt(d_k), dim=-1)  # (t, t)
        label = "na frase do notebook" if number == 1 else "numa frase nova"
        for article, noun in targets.items():
            i, j = tokens.index(article), tokens.index(noun)
            row = weights[i]
            top = int(row.argmax())
            where = f"{label} ({sentence!r}), o artigo {article!r} ({_feature_names(article)})"
            if top != j:
                chosen = tokens[top]
                features = _LEXICON[chosen]
                if "pessoa" in features:
                    hint = (
                        f"{chosen!r} também é um substantivo do mesmo gênero, mas é uma pessoa: "
                        "faça a característica 'pessoa' tirar pontos da chave (um valor "
                        "negativo em W_K)."
                    )
                elif "substantivo" not in features:
                    hint = (
                        f"{chosen!r} não é substantivo ({_feature_names(chosen)}): a consulta "
                        "de um artigo precisa pedir 'substantivo', e a chave de um "
                        "substantivo precisa responder."
                    )
                else:
                    hint = (
                        f"{chosen!r} é um substantivo de outro gênero: a consulta de um artigo "
                        "masculino precisa combinar com chaves masculinas, e a de um feminino "
                        "com chaves femininas."
                    )
                expect(
                    False,
                    f"{where} deu o maior peso a {chosen!r} ({fmt(row[top].item(), 2)}), e "
                    f"não a {noun!r} ({fmt(row[j].item(), 2)}). {hint}",
                )
            expect(
                row[j].item() >= _MIN_ARTICLE_WEIGHT,
                f"{where} já olha mais para {noun!r}, mas com peso {fmt(row[j].item(), 2)} "
                f"(esperava pelo menos {fmt(_MIN_ARTICLE_WEIGHT, 2)}). A diferença entre as "
                "pontuações ainda é pequena: multiplique W_Q e W_K por um número maior (o "
                "softmax fica mais concentrado).",
            )


# --------------------------------------------------------------------------------------
# Exercício 3: o maior t que cabe num orçamento de memória
# --------------------------------------------------------------------------------------

# (budget_bytes, batch_size, num_heads, bytes_per_element)
_BUDGET_CASES: list[tuple[int, int, int, int]] = [
    (2**30, 1, 1, 4),
    (16 * 2**30, 1, 16, 2),
    (80 * 2**30, 8, 32, 2),
    (10**9, 2, 12, 4),
    (1000, 1, 1, 4),
    (3, 1, 1, 4),
]


def _weights_bytes(t: int, batch_size: int, num_heads: int, bytes_per_element: int) -> int:
    return batch_size * num_heads * t * t * bytes_per_element


def _reference_max_len(budget: int, batch_size: int, num_heads: int, nbytes: int) -> int:
    return math.isqrt(budget // (batch_size * num_heads * nbytes))


def _as_integer(value: Any) -> int | None:
    """Um inteiro (int, numpy, tensor de um elemento) ou um real com valor inteiro; senão None."""
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        if float(value).is_integer():
            return int(value)
    return None


@exercise("Exercício 3 (o maior t que cabe na memória)")
def check_max_seq_len(max_seq_len: Callable[..., int]) -> None:
    """``max_seq_len(budget_bytes, batch_size, num_heads, bytes_per_element) -> int``."""
    for budget, b, h, nbytes in _BUDGET_CASES:
        expected = _reference_max_len(budget, b, h, nbytes)
        where = (
            f"para budget_bytes={budget}, batch_size={b}, num_heads={h}, "
            f"bytes_per_element={nbytes}"
        )
        received = _call(
            max_seq_len,
            (budget, b, h, nbytes),
            where,
            "Lembre que os pesos ocupam batch_size · num_heads · t · t · bytes_per_element bytes.",
        )
        t = _as_integer(received)
        if t is None and isinstance(received, numbers.Real) and not isinstance(received, bool):
            expect(
                False,
                f"{where}, recebi {received!r}, um número com casas decimais: t conta tokens e "
                "é inteiro. Arredonde para baixo (math.floor, ou math.isqrt).",
            )
        expect(
            t is not None,
            f"{where}, esperava um número inteiro de tokens; recebi {type(received).__name__} "
            f"({received!r}).",
        )
        if t == expected:
            continue
        used = _weights_bytes(t, b, h, nbytes)
        if t == math.isqrt(budget // (b * nbytes)) and h > 1:
            expect(
                False,
                f"{where}, recebi t={t}, que ignora as cabeças: cada uma das {h} cabeças guarda "
                f"a sua matriz (t, t). Esperava {expected}.",
            )
        if t == math.isqrt(budget // (b * h)) and nbytes > 1:
            expect(
                False,
                f"{where}, recebi t={t}: o orçamento está em bytes e cada número ocupa "
                f"{nbytes} bytes; divida também por bytes_per_element. Esperava {expected}.",
            )
        if t == expected + 1:
            expect(
                False,
                f"{where}, recebi t={t}, mas com esse t os pesos ocupam {fmt(used)} bytes, mais "
                f"que o orçamento ({fmt(budget)}): arredonde a raiz para baixo. Esperava "
                f"{expected}.",
            )
        if 0 <= t < expected:
            expect(
                False,
                f"{where}, recebi t={t}, mas t={expected} ainda cabe "
                f"({fmt(_weights_bytes(expected, b, h, nbytes))} bytes de {fmt(budget)}). "
                "Procure o maior t com b · h · t² · bytes <= orçamento.",
            )
        expect(
            False,
            f"{where}, esperava t={expected}; recebi {t} (com t={t} os pesos ocupam "
            f"{fmt(used)} bytes; o orçamento é {fmt(budget)}).",
        )
