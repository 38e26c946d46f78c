"""Pontuar com o modelo de linguagem e medir classificadores.

Ver notebooks/12_ajuste_fino.ipynb (seção 3).

Um modelo de linguagem pré-treinado já dá uma nota a qualquer texto: a sua perda, a
entropia cruzada média dos tokens, baixa no que se parece com o texto de pré-treino e alta
no resto. Para usá-la como classificador de duas classes basta um **limiar**, ajustado
nos exemplos rotulados: abaixo dele, classe 1.

- ``sequence_loss``: a perda média por token de cada sequência de um lote, ``(b,)``;
- ``fit_threshold``: o limiar que mais acerta nos rótulos dados;
- ``balanced_accuracy``: o acerto médio por classe, que não premia quem responde sempre
  a classe mais comum (ela tira ``1 / C``);
- ``linear_probe``: uma regressão logística sobre características congeladas (os estados
  ocultos de um modelo que não treina), a melhor cabeça linear que elas permitem;
- ``bootstrap_interval``: o intervalo de uma medida reamostrando o teste (grupos inteiros,
  com reposição), para saber quanto dela é sorte do sorteio.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from tpt.classifier import last_token_index
from tpt.tokenizer import PAD_ID

__all__ = [
    "balanced_accuracy",
    "bootstrap_interval",
    "fit_threshold",
    "linear_probe",
    "sequence_loss",
]


def sequence_loss(logits: Tensor, ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """A perda do modelo de linguagem em cada sequência: ``(b, t, V)``, ``(b, t)`` -> ``(b,)``.

    ``logits`` são os de ``model(ids)``. A perda de uma sequência é a média, sobre as
    posições ``i`` em que ``ids[:, i]`` e ``ids[:, i + 1]`` são tokens reais (não
    ``pad_id``), da entropia cruzada que os logits da posição ``i`` dão ao token
    ``i + 1`` (nats por token). O primeiro token não é previsto (nada vem antes dele), e
    nenhum ``<pad>`` entra, nem como entrada nem como alvo: a mesma sequência dá a mesma
    perda sozinha ou com ``<pad>`` à direita (à esquerda, se o modelo recebeu
    ``key_padding_mask=(ids == pad_id)``).

    Diferente de ``lm_loss``, que devolve uma média só para o lote inteiro. O gradiente
    passa: para só pontuar, chame dentro de ``torch.no_grad()``.
    """
    last_token_index(ids, pad_id)  # confere ids (b, t) inteiros e linhas não vazias
    if (
        not isinstance(logits, Tensor)
        or logits.dim() != 3
        or tuple(logits.shape[:2]) != tuple(ids.shape)
    ):
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"logits deve ter forma (b, t, V) com (b, t) = {tuple(ids.shape)} (os de ids); "
            f"recebi {shape}"
        )
    real = ids != pad_id  # (b, t)
    counted = real[:, :-1] & real[:, 1:]  # (b, t - 1): entrada e alvo reais
    count = counted.sum(dim=1)  # (b,)
    if bool((count == 0).any()):
        rows = (count == 0).nonzero().flatten().tolist()
        raise ValueError(
            f"as linhas {rows} de ids têm menos de 2 tokens reais seguidos: não há token "
            "previsto para pontuar"
        )
    targets = ids[:, 1:].to(logits.device).masked_fill(~counted.to(logits.device), -100)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    return losses.sum(dim=1) / count.to(losses.device, losses.dtype)  # (b,)


def _as_1d(values: object, name: str) -> Tensor:
    if not isinstance(values, Tensor):
        values = torch.as_tensor(values)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(
            f"{name} deve ser um vetor (n,) com n >= 1; recebi forma {tuple(values.shape)}"
        )
    return values.detach().cpu()


def fit_threshold(scores: Tensor, labels: Tensor) -> float:
    """O limiar que mais acerta em ``labels (n,)`` com a regra "classe 1 se ``score`` < limiar".

    ``scores (n,)`` é uma nota em que menor quer dizer "mais classe 1" (uma perda:
    ``sequence_loss``); ``labels`` tem só 0 e 1. Os candidatos são os pontos médios
    entre notas vizinhas (e um abaixo e um acima de todas); no empate, vale o menor
    limiar. Devolve um ``float``.
    """
    scores, labels = _as_1d(scores, "scores").double(), _as_1d(labels, "labels")
    if scores.shape != labels.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} e labels {tuple(labels.shape)} devem ter a mesma forma"
        )
    if labels.dtype.is_floating_point or not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError(f"labels deve ter só os inteiros 0 e 1; recebi {labels.unique().tolist()}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores tem valores não finitos (nan ou inf)")
    values = scores.unique()  # em ordem crescente
    candidates = torch.cat([values[:1] - 1, (values[1:] + values[:-1]) / 2, values[-1:] + 1])
    hits = ((scores[None, :] < candidates[:, None]) == labels[None, :].bool()).sum(dim=1)
    return float(candidates[int(hits.argmax())])  # argmax: o primeiro máximo


def balanced_accuracy(predictions: Tensor, labels: Tensor) -> float:
    """O acerto médio por classe: para cada classe presente em ``labels (n,)``, a fração
    dos seus exemplos que ``predictions (n,)`` acerta, e a média dessas frações.

    Responder sempre a mesma classe dá ``1 / C`` (``C`` = classes em ``labels``),
    qualquer que seja a proporção das classes no teste.
    """
    predictions, labels = _as_1d(predictions, "predictions"), _as_1d(labels, "labels")
    if predictions.shape != labels.shape:
        raise ValueError(
            f"predictions {tuple(predictions.shape)} e labels {tuple(labels.shape)} devem ter "
            "a mesma forma"
        )
    recalls = [(predictions[labels == k] == k).double().mean() for k in labels.unique()]
    return float(torch.stack(recalls).mean())


def linear_probe(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    *,
    l2: float = 1e-2,
    max_iter: int = 300,
) -> Tensor:
    """Uma regressão logística ajustada em ``train_features (n, d)``, aplicada a
    ``test_features (m, d)``: devolve as classes previstas ``(m,)``.

    É a cabeça linear de um corpo **congelado**: como as características não mudam, basta
    calculá-las uma vez e ajustar só a cabeça, até convergir (LBFGS, ``max_iter``
    iterações), em vez de passar o corpo inteiro a cada passo. Cada coluna é padronizada
    com a média e o desvio do treino, e ``l2 · ||W||²`` evita pesos enormes quando as
    classes se separam. ``train_labels (n,)`` são inteiros ``0..C-1``. Roda na CPU, em
    float64, e é determinística.
    """
    if not isinstance(train_features, Tensor) or train_features.dim() != 2:
        raise ValueError("train_features deve ser um tensor (n, d)")
    if not isinstance(test_features, Tensor) or test_features.dim() != 2:
        raise ValueError("test_features deve ser um tensor (m, d)")
    if test_features.shape[1] != train_features.shape[1]:
        raise ValueError(
            f"train_features tem d = {train_features.shape[1]} e test_features tem "
            f"d = {test_features.shape[1]}: devem ser iguais"
        )
    labels = _as_1d(train_labels, "train_labels")
    if labels.shape[0] != train_features.shape[0]:
        raise ValueError(
            f"train_labels tem {labels.shape[0]} rótulos para {train_features.shape[0]} exemplos"
        )
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or bool((labels < 0).any()):
        raise ValueError("train_labels deve ter inteiros >= 0 (as classes 0..C-1)")
    if not l2 >= 0:
        raise ValueError(f"l2={l2} deve ser >= 0")
    labels = labels.long()
    num_classes = max(int(labels.max()) + 1, 2)
    train = train_features.detach().cpu().double()
    test = test_features.detach().cpu().double()
    center, spread = train.mean(dim=0), train.std(dim=0, unbiased=False) + 1e-6
    train, test = (train - center) / spread, (test - center) / spread
    weights = torch.zeros(train.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=max_iter)

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(train @ weights + bias, labels) + l2 * weights.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        return (test @ weights + bias).argmax(dim=1)  # (m,)


def bootstrap_interval(
    statistic: Callable[[Tensor], float],
    groups: Tensor,
    *,
    reps: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float]:
    """O intervalo de ``level`` (padrão 90%) de uma medida, reamostrando o teste.

    ``groups (n,)`` dá o grupo de cada item do teste (itens que acertam ou erram juntos:
    os parágrafos de um mesmo texto, uma palavra e a sua pseudopalavra). Cada repetição
    sorteia, com reposição, tantos grupos quantos existem, e chama ``statistic(index)``
    com os índices ``(m,)`` dos itens sorteados (repetidos quando o grupo sai mais de uma
    vez); o intervalo vai dos quantis ``(1 - level) / 2`` a ``(1 + level) / 2`` dos
    ``reps`` valores. Determinístico para o mesmo ``seed``.
    """
    if not callable(statistic):
        raise TypeError("statistic deve ser uma função índices -> número")
    groups = _as_1d(groups, "groups")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 2:
        raise ValueError(f"reps={reps!r} deve ser um inteiro >= 2")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} deve estar entre 0 e 1 (ex.: 0.9 para 90%)")
    names, members = groups.unique(return_inverse=True)
    rows = [(members == g).nonzero().flatten() for g in range(len(names))]  # os itens de cada grupo
    generator = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(reps):
        picked = torch.randint(len(rows), (len(rows),), generator=generator).tolist()
        values.append(float(statistic(torch.cat([rows[g] for g in picked]))))
    low, high = torch.tensor(values, dtype=torch.float64).quantile(
        torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    )
    return float(low), float(high)
