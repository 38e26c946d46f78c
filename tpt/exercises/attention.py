"""Conferências dos exercícios de notebooks/03_atencao_produto_escalar.ipynb.

Os exercícios, na ordem do notebook:

1. :func:`check_stable_softmax`: um softmax sobre o último eixo que não estoura com
   pontuações grandes, sem núcleo de softmax do PyTorch (nenhum caminho até ele);
2. :func:`check_article_projections`: projeções ``W_Q`` e ``W_K`` escolhidas à mão, sobre
   as características de :data:`FEATURES`, que façam cada artigo olhar para o substantivo
   de mesmo gênero que não é uma pessoa, em frases que o aluno não viu;
3. :func:`check_attention_backward`: os gradientes da atenção em relação a ``Q``, ``K``
   e ``V``, escritos em forma de matrizes a partir das fórmulas da seção 3, sem autograd.

As regras valem pelo que roda (:mod:`tpt.exercises.rules`), as entradas do aluno são as de
verdade e são conferidas depois da chamada (:mod:`tpt.exercises.guards`), e cada
conferência sorteia casos novos a cada execução, além dos casos fixos.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tpt.exercises.core import (
    ExerciseError,
    difference_text,
    exercise,
    expect,
    first_line,
    max_abs_diff,
    same_values,
)
from tpt.exercises.guards import call_answer, case_generator, check_gradients
from tpt.exercises.rules import SOFTMAX_OPS, record_ops, watch_autograd
from tpt.numfmt import fmt

__all__ = [
    "FEATURES",
    "check_stable_softmax",
    "check_article_projections",
    "check_attention_backward",
]


def _numbers(values: Tensor, decimals: int = 4, limit: int = 8) -> str:
    """Os primeiros valores de um tensor, em pt-BR: ``[0,2447; 0,6652; ...]``."""
    flat = values.detach().double().reshape(-1)
    text = "; ".join(fmt(x, decimals) for x in flat[:limit].tolist())
    return f"[{text}{'; ...' if flat.numel() > limit else ''}]"


def _where_drawn(seed: int) -> str:
    return f"num caso sorteado (semente {seed})"


# ======================================================================================
# Exercício 1: softmax numericamente estável
# ======================================================================================
_SOFTMAX_RULE = (
    "o exercício pede o softmax escrito por você: a conferência viu rodar um núcleo de "
    "softmax do PyTorch ({ops}), seja por torch.softmax, F.softmax, Tensor.softmax, "
    "log_softmax, torch._softmax ou um apelido deles. Use torch.exp, uma soma e uma divisão."
)
# float32 perto de 1000 tem resolução de ~6e-5: uma resposta certa (logsumexp, por
# exemplo) pode diferir da referência em float64 por ~2e-5.
_SOFTMAX_ATOL = 1e-4


def _softmax_fixed_cases() -> list[tuple[str, Tensor]]:
    """Casos fixos ``(descrição, pontuações)``, do mais simples ao que exige estabilidade."""
    g = torch.Generator().manual_seed(3)
    inf = float("inf")
    return [
        ("para pontuações pequenas de forma (2, 3, 5)", torch.randn(2, 3, 5, generator=g)),
        ("para uma matriz quadrada (4, 4)", 3 * torch.randn(4, 4, generator=g)),
        ("para a linha [1000, 1001, 999, 998] (float32)", torch.tensor([[1000.0, 1001, 999, 998]])),
        ("para a linha [-500, 500, 0] (float32)", torch.tensor([[-500.0, 500, 0]])),
        (
            "para duas linhas de escalas diferentes, [[1000, 1001], [0, 1]]",
            torch.tensor([[1000.0, 1001], [0, 1]]),
        ),
        (
            "para uma linha com -inf (posições mascaradas), [0, -inf, 2, -inf]",
            torch.tensor([[0.0, -inf, 2, -inf]]),
        ),
        ("para o vetor 1-D [2, 0, -1]", torch.tensor([2.0, 0, -1])),
    ]


def _softmax_drawn_case(g: torch.Generator, seed: int) -> tuple[str, Tensor]:
    """Forma, escala, deslocamento por linha e posições mascaradas sorteados."""
    dims = int(torch.randint(0, 3, (1,), generator=g))
    shape = [int(n) for n in torch.randint(1, 4, (dims,), generator=g)]
    s = int(torch.randint(2, 9, (1,), generator=g))
    scale = 10 ** float(2.5 * torch.rand(1, generator=g))  # de 1 a ~300
    scores = torch.randn(*shape, 3, s, generator=g) * scale
    scores = scores + 1000 * (torch.rand(*shape, 3, 1, generator=g) - 0.5)  # linhas desiguais
    masked = torch.rand(scores.shape, generator=g) < 0.25
    masked[..., 0] = False  # nenhuma linha toda mascarada
    scores = scores.masked_fill(masked, float("-inf"))
    return f"{_where_drawn(seed)} de forma {tuple(scores.shape)}", scores


def _softmax_reference(scores: Tensor) -> Tensor:
    return torch.softmax(scores.double(), dim=-1)


def _softmax_variants(scores: Tensor) -> list[tuple[str, Tensor]]:
    """Erros típicos, calculados: o diagnóstico só aparece se a resposta bater com um deles."""

    def normalize(e: Tensor, dim: int = -1) -> Tensor:
        return e / e.sum(dim=dim, keepdim=True)

    variants = [
        (
            "é o softmax sem subtrair nada: exp(z) estoura (vira inf) para z > 88 em float32, "
            "e inf / inf = NaN. Como softmax(z) = softmax(z - c), subtraia de cada linha um c "
            "que faça o maior expoente valer 0.",
            normalize(torch.exp(scores)),
        ),
        (
            "é o que sai ao subtrair o máximo do tensor inteiro: numa linha muito menor que as "
            "outras todas as exponenciais viram 0, e 0/0 = NaN. Subtraia o máximo de cada "
            "linha (dim=-1, keepdim=True).",
            normalize(torch.exp(scores - scores.max())),
        ),
        (
            "é o que sai ao subtrair o mínimo de cada linha: o maior expoente continua "
            "grande (estoura), e com -inf o mínimo dá -inf - (-inf) = NaN. Subtraia o máximo.",
            normalize(torch.exp(scores - scores.min(dim=-1, keepdim=True).values)),
        ),
    ]
    if scores.dim() >= 2:
        variants.append(
            (
                "cada coluna soma 1, não cada linha: você normalizou sobre o eixo das consultas. "
                "O softmax das pontuações é sobre as chaves, o último eixo (dim=-1).",
                normalize(torch.exp(scores - scores.max(dim=-2, keepdim=True).values), dim=-2),
            )
        )
    with contextlib.suppress(RuntimeError):  # sem keepdim, só alguns formatos fazem broadcast
        shifted = scores - scores.max(dim=-1).values  # (..., t) alinhado com o último eixo
        variants.append(
            (
                "o máximo de cada linha foi subtraído na direção errada: "
                "scores.max(dim=-1).values perde o eixo das chaves e se alinha com o último "
                "eixo. Use keepdim=True para manter a forma (..., 1).",
                normalize(torch.exp(shifted)),
            )
        )
    return variants


@exercise("Exercício 1 (softmax estável)")
def check_stable_softmax(stable_softmax: Callable[[Tensor], Tensor]) -> None:
    """``stable_softmax(scores (..., s)) -> (..., s)``, softmax sobre o último eixo.

    Regras: nenhum núcleo de softmax do PyTorch roda durante a chamada; ``scores`` não muda;
    o gradiente passa pela resposta como pela referência (ela vai dentro da atenção).
    """
    g, seed = case_generator()
    cases = _softmax_fixed_cases() + [_softmax_drawn_case(g, seed) for _ in range(2)]
    for where, scores in cases:
        with record_ops() as ops:
            received = call_answer(
                stable_softmax,
                {"scores": scores},
                where,
                "Confira as formas: max(dim=-1, keepdim=True) e sum(dim=-1, keepdim=True) "
                "mantêm o eixo das chaves com tamanho 1.",
            )
        used = ops.used(SOFTMAX_OPS)
        expect(not used, _SOFTMAX_RULE.format(ops=", ".join(sorted(used))))
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            tuple(received.shape) == tuple(scores.shape),
            f"{where}, esperava a forma das pontuações, {tuple(scores.shape)}; recebi "
            f"{tuple(received.shape)}. O softmax não muda a forma: ele normaliza cada linha.",
        )
        expected = _softmax_reference(scores)
        if same_values(received, expected, _SOFTMAX_ATOL):
            continue
        for diagnosis, wrong in _softmax_variants(scores):
            if same_values(received, wrong, _SOFTMAX_ATOL):
                raise ExerciseError(f"{where}, o resultado {diagnosis}")
        bad = "tem NaN ou infinito" if not bool(received.isfinite().all()) else "difere"
        raise ExerciseError(
            f"{where}, o resultado {bad}: esperava {_numbers(expected)}; recebi "
            f"{_numbers(received)} ({difference_text(received, expected)}, tolerância "
            f"{fmt(_SOFTMAX_ATOL, 0, sci=True)})."
        )
    grad_case = torch.randn(2, 3, 5, generator=g)
    where = f"No gradiente ({_where_drawn(seed)}, forma (2, 3, 5))"
    try:
        check_gradients(
            stable_softmax,
            lambda scores: torch.softmax(scores, dim=-1),
            {"scores": grad_case},
            where,
            atol=1e-5,
        )
    except RuntimeError as err:  # o autograd recusa a volta: explicado aqui, em português
        raise ExerciseError(_backward_refused(where, err)) from None


def _backward_refused(where: str, err: RuntimeError) -> str:
    """A causa, em português, de o autograd não conseguir voltar pela resposta."""
    if "inplace" in str(err) or "in-place" in str(err):
        return (
            f"{where}, o autograd não conseguiu calcular o gradiente: uma operação no "
            "lugar (como div_, /=, sub_ ou exp_) mudou um tensor que ele tinha guardado "
            "para a volta. A derivada do exp é o próprio exp, então a saída de torch.exp "
            "fica guardada; dividi-la no lugar (exps.div_(...) ou exps /= ...) a estraga. "
            "Use exps / exps.sum(dim=-1, keepdim=True), que cria um tensor novo."
        )
    return (
        f"{where}, o autograd não conseguiu voltar pela sua função ({type(err).__name__}; "
        f"mensagem original: {first_line(err)}). Dentro da atenção, que é treinada, o "
        "gradiente precisa passar por ela."
    )


# ======================================================================================
# Exercício 2: projeções escolhidas à mão (artigo -> substantivo)
# ======================================================================================

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
    "Pedro": ("pessoa", "masculino", "substantivo"),
    "Maria": ("pessoa", "feminino", "substantivo"),
    "Ana": ("pessoa", "feminino", "substantivo"),
    "trem": ("substantivo", "masculino"),
    "banco": ("substantivo", "masculino"),
    "livro": ("substantivo", "masculino"),
    "cadeira": ("substantivo", "feminino"),
    "mesa": ("substantivo", "feminino"),
    "janela": ("substantivo", "feminino"),
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
    "novo": ("adjetivo", "masculino"),
    "ocupada": ("adjetivo", "feminino"),
    "aberta": ("adjetivo", "feminino"),
    "livre": ("adjetivo",),
    "mas": ("conjunção",),
    "e": ("conjunção",),
    ":": ("pontuação",),
    ",": ("pontuação",),
    ".": ("pontuação",),
}

# (descrição, tokens, {índice do artigo: índice do substantivo que ele deve olhar})
_Sentence = tuple[str, list[str], dict[int, int]]


def _fixed_sentences() -> list[_Sentence]:
    first = (
        ("João pensou: o trem estava cheio, mas ele conseguiu uma cadeira livre.")
        .replace(":", " :")
        .replace(",", " ,")
        .replace(".", " .")
        .split()
    )
    second = (
        ("Maria e Pedro viram: a mesa estava ocupada, mas ela achou um banco livre.")
        .replace(":", " :")
        .replace(",", " ,")
        .replace(".", " .")
        .split()
    )
    return [
        ("na frase do notebook", first, {3: 4, 11: 12}),
        (
            "numa frase nova ('Maria e Pedro viram: a mesa estava ocupada, ...')",
            second,
            {5: 6, 13: 14},
        ),
    ]


def _pick(g: torch.Generator, options: list[str]) -> str:
    return options[int(torch.randint(len(options), (1,), generator=g))]


def _drawn_sentence(g: torch.Generator, seed: int) -> _Sentence:
    """Uma lista de palavras sorteada: um artigo e um objeto de cada gênero, e distrações.

    A atenção sem posições não depende da ordem; o que importa são as palavras presentes:
    pessoas e pronomes dos dois gêneros, adjetivos, verbos e pontuação, até 17 palavras.
    """
    words = [
        _pick(g, ["o", "um"]),
        _pick(g, ["trem", "banco", "livro"]),
        _pick(g, ["a", "uma"]),
        _pick(g, ["cadeira", "mesa", "janela"]),
    ]
    distractors = [w for w in _LEXICON if "artigo" not in _LEXICON[w]]
    distractors = [w for w in distractors if _LEXICON[w][:1] != ("substantivo",)]
    for _ in range(int(torch.randint(7, 14, (1,), generator=g))):
        words.append(_pick(g, distractors))
    order = torch.randperm(len(words), generator=g).tolist()
    tokens = [words[i] for i in order]
    targets = {order.index(0): order.index(1), order.index(2): order.index(3)}
    return f"{_where_drawn(seed)}, com as palavras {tokens}", tokens, targets


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
        f"característica, na ordem de FEATURES; recebi {tuple(matrix.shape)}.",
    )
    expect(
        not matrix.is_complex() and matrix.dtype != torch.bool,
        f"{name} deveria ter números reais; recebi dtype {matrix.dtype}.",
    )
    return matrix.double()


# Peso mínimo que o artigo deve dar ao seu substantivo.
_MIN_ARTICLE_WEIGHT = 0.8


def _article_weights(W_Q: Tensor, W_K: Tensor, tokens: list[str]) -> tuple[Tensor, Tensor]:
    """Pontuações ``(t, t)`` já divididas por √d_k e pesos ``(t, t)``."""
    X = _feature_matrix(tokens)  # (t, f)
    scores = (X @ W_Q) @ (X @ W_K).T / math.sqrt(W_Q.shape[1])  # (t, t)
    return scores, torch.softmax(scores, dim=-1)


def _check_sentence(W_Q: Tensor, W_K: Tensor, sentence: _Sentence) -> None:
    label, tokens, targets = sentence
    scores, weights = _article_weights(W_Q, W_K, tokens)
    for i, j in targets.items():
        article, noun = tokens[i], tokens[j]
        where = f"{label}, o artigo {article!r}"
        row, top = weights[i], int(weights[i].argmax())
        if row[j] >= _MIN_ARTICLE_WEIGHT:
            continue
        rival = top if top != j else int(row.clone().index_fill_(0, torch.tensor([j]), -1).argmax())
        rival_word = tokens[rival]
        facts = (
            f"dá {fmt(row[j].item(), 2)} do peso a {noun!r} (esperava pelo menos "
            f"{fmt(_MIN_ARTICLE_WEIGHT, 2)}) e {fmt(row[rival].item(), 2)} a {rival_word!r} "
            f"({', '.join(_LEXICON[rival_word])}); pontuações {fmt(scores[i, j].item(), 2)} e "
            f"{fmt(scores[i, rival].item(), 2)}."
        )
        if abs(scores[i, j] - scores[i, rival]) < 1e-9:
            raise ExerciseError(
                f"{where} {facts} As duas pontuações empatam, e nenhuma escala desfaz um "
                f"empate: alguma característica tem de separar {noun!r} de {rival_word!r}."
            )
        if scores[i, j] > scores[i, rival]:
            # Hipótese "falta intensidade": testada com W_Q e W_K multiplicadas por 3.
            _, stronger = _article_weights(3 * W_Q, 3 * W_K, tokens)
            if stronger[i, j] >= _MIN_ARTICLE_WEIGHT:
                raise ExerciseError(
                    f"{where} {facts} {noun!r} já tem a maior pontuação, mas por pouco: com "
                    f"W_Q e W_K multiplicadas por 3 o peso passa a {fmt(stronger[i, j].item(), 2)}."
                )
        raise ExerciseError(f"{where} {facts}")


@exercise("Exercício 2 (projeções à mão: artigo -> substantivo)")
def check_article_projections(article_projections: Callable[[], tuple[Tensor, Tensor]]) -> None:
    """``article_projections() -> (W_Q, W_K)``, cada um ``(len(FEATURES), d_k)``.

    Com ``Q = X W_Q`` e ``K = X W_K``, cada artigo deve dar pelo menos 80% do peso ao
    substantivo (que não é pessoa) de mesmo gênero: nas duas frases fixas e em listas de
    palavras sorteadas a cada execução.
    """
    answer = call_answer(
        article_projections,
        {},
        "Ao chamar article_projections()",
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
    g, seed = case_generator()
    for sentence in _fixed_sentences() + [_drawn_sentence(g, seed) for _ in range(3)]:
        _check_sentence(W_Q, W_K, sentence)


# ======================================================================================
# Exercício 3: os gradientes da atenção, à mão
# ======================================================================================
_AUTOGRAD_RULE = (
    "o exercício pede os gradientes pelas fórmulas, sem autograd: durante a chamada, a "
    "conferência viu o autograd montar um grafo (requires_grad_, backward, "
    "torch.autograd.grad ou torch.func). As entradas chegam sem requires_grad; use só "
    "multiplicações de matrizes, o softmax e somas."
)


def _attention_reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v  # (..., t, d_v)


def _reference_grads(q: Tensor, k: Tensor, v: Tensor, g: Tensor) -> tuple[Tensor, ...]:
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    with torch.enable_grad():
        out = _attention_reference(*leaves)
        return torch.autograd.grad(out, leaves, g)


def _grad_variants(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor
) -> dict[str, list[tuple[str, Tensor]]]:
    """Gradientes com os erros típicos, calculados para este caso."""
    c = 1 / math.sqrt(q.shape[-1])
    p = torch.softmax(q @ k.transpose(-2, -1) * c, dim=-1)  # (..., t, s)
    dp = g @ v.transpose(-2, -1)  # (..., t, s)
    dz = p * (dp - (dp * p).sum(-1, keepdim=True))  # (..., t, s)
    no_shift = p * dp  # esqueceu o termo - p · g
    variants: dict[str, list[tuple[str, Tensor]]] = {
        "grad_query": [
            ("falta a escala c = 1/√d_k (as pontuações são c · q · k).", dz @ k),
            (
                "parece que ∂L/∂z foi tomado como p_j · g_j, sem o termo - p · g da fórmula "
                "da seção 3.",
                no_shift @ k * c,
            ),
        ],
        "grad_key": [
            ("falta a escala c = 1/√d_k (as pontuações são c · q · k).", dz.transpose(-2, -1) @ q),
            (
                "parece que ∂L/∂z foi tomado como p_j · g_j, sem o termo - p · g da fórmula "
                "da seção 3.",
                no_shift.transpose(-2, -1) @ q * c,
            ),
        ],
        "grad_value": [],
    }
    if q.shape[-2] == k.shape[-2]:  # t = s: as transpostas esquecidas têm a forma certa
        variants["grad_key"].append(
            ("faltou transpor ∂L/∂z: a chave j soma sobre as consultas i (∂L/∂z)ᵀ Q.", dz @ q * c)
        )
        variants["grad_value"].append(
            ("faltou transpor os pesos: ∂L/∂V = pesosᵀ · ∂L/∂saída, forma (s, d_v).", p @ g)
        )
    return variants


def _backward_cases(g: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    """``(descrição, (lote..., t, s, d_k, d_v))``: fixos e sorteados."""
    fixed = [
        ("no caso t=3, s=5, d_k=4, d_v=6 (sem lote)", (3, 5, 4, 6)),
        ("no caso com lote 2 e t = s = 4, d_k=8, d_v=3", (2, 4, 4, 8, 3)),
        ("no caso com lote (2, 3), t=1, s=6, d_k=2, d_v=5", (2, 3, 1, 6, 2, 5)),
    ]
    drawn = []
    for _ in range(2):
        batch = [
            int(n)
            for n in torch.randint(
                1, 4, (int(torch.randint(0, 3, (1,), generator=g)),), generator=g
            )
        ]
        t, s, d_k, d_v = (int(n) for n in torch.randint(1, 9, (4,), generator=g))
        sizes = (*batch, t, s, d_k, d_v)
        drawn.append(
            (
                f"{_where_drawn(seed)}: lote {tuple(batch)}, t={t}, s={s}, d_k={d_k}, d_v={d_v}",
                sizes,
            )
        )
    return fixed + drawn


def _shapes_hint(t: int, s: int, d_v: int) -> str:
    """A dica de um erro de forma: as formas deste caso, sem apontar um passo não testado."""
    return (
        f"Neste caso t={t} e s={s}: pesos (..., t, s) = (..., {t}, {s}), grad_output "
        f"(..., t, d_v) = (..., {t}, {d_v}), e cada gradiente tem a forma da sua entrada "
        "(∂L/∂Q como query, ∂L/∂K como key, ∂L/∂V como value). Um produto que junta dois "
        "tensores com t de um lado e s do outro costuma pedir uma transposta; confira as "
        "formas de cada produto com a mensagem original."
    )


@exercise("Exercício 3 (os gradientes da atenção à mão)")
def check_attention_backward(
    attention_backward: Callable[..., tuple[Tensor, Tensor, Tensor]],
) -> None:
    """``attention_backward(query, key, value, grad_output) -> (grad_query, grad_key, grad_value)``.

    ``query`` ``(..., t, d_k)``, ``key`` ``(..., s, d_k)``, ``value`` ``(..., s, d_v)``,
    ``grad_output`` ``(..., t, d_v)`` = ∂L/∂saída, com saída = softmax(QKᵀ/√d_k) V. Regras:
    sem autograd (nenhum grafo montado durante a chamada) e as entradas intactas.
    """
    g, seed = case_generator()
    for where, sizes in _backward_cases(g, seed):
        *batch, t, s, d_k, d_v = sizes
        q = torch.randn(*batch, t, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(*batch, s, d_k, generator=g, dtype=torch.float64)
        v = torch.randn(*batch, s, d_v, generator=g, dtype=torch.float64)
        grad_output = torch.randn(*batch, t, d_v, generator=g, dtype=torch.float64)
        inputs = {"query": q, "key": k, "value": v, "grad_output": grad_output}
        with watch_autograd() as saved:
            try:
                received = call_answer(attention_backward, inputs, where, _shapes_hint(t, s, d_v))
            except ExerciseError as err:  # torch.func se recusa a rodar com os ganchos
                expect("saved tensor hooks" not in str(err), _AUTOGRAD_RULE)
                raise
        expect(saved[0] == 0, _AUTOGRAD_RULE)
        expect(
            isinstance(received, (tuple, list)) and len(received) == 3,
            f"{where}, esperava o trio (grad_query, grad_key, grad_value); recebi "
            f"{type(received).__name__}.",
        )
        expected = _reference_grads(q, k, v, grad_output)
        variants = _grad_variants(q, k, v, grad_output)
        for name, got, want in zip(
            ("grad_query", "grad_key", "grad_value"), received, expected, strict=True
        ):
            expect(
                isinstance(got, Tensor),
                f"{where}, esperava que {name} fosse um tensor; recebi {type(got).__name__}.",
            )
            expect(
                tuple(got.shape) == tuple(want.shape),
                f"{where}, esperava {name} com a forma da entrada correspondente, "
                f"{tuple(want.shape)}; recebi {tuple(got.shape)}.",
            )
            diff = max_abs_diff(got, want)
            if diff <= 1e-6:
                continue
            for diagnosis, wrong in variants[name]:
                if max_abs_diff(got, wrong) <= 1e-6 and max_abs_diff(wrong, want) > 1e-6:
                    raise ExerciseError(f"{where}, {name} não confere: {diagnosis}")
            raise ExerciseError(
                f"{where}, {name} difere do gradiente do autograd: "
                f"{difference_text(got, want)} (tolerância 1e-06)."
            )
