"""tpt.scoring: a perda do modelo de linguagem por sequência, o limiar e o acerto balanceado.

Tolerâncias (float64): a perda de uma sequência sozinha e no lote com <pad> à direita
(ou à esquerda com a máscara) é a mesma a 1e-12 (medido ~1e-16).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpt

LLAMA = dict(positional="rope", norm="rmsnorm", activation="swiglu")
LONG4 = torch.ones(4, dtype=torch.long)


def _gpt(seed: int = 0) -> tpt.GPT:
    torch.manual_seed(seed)
    config = tpt.GPTConfig(vocab_size=19, embed_dim=16, num_heads=2, num_layers=2, max_len=16,
                           **LLAMA)
    return tpt.GPT(config).double().eval()


def test_sequence_loss_is_the_mean_next_token_cross_entropy():
    model = _gpt()
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        expected = F.cross_entropy(model(ids)[0, :-1], ids[0, 1:])
        assert tpt.sequence_loss(model(ids), ids).shape == (1,)
        assert abs(tpt.sequence_loss(model(ids), ids).item() - expected.item()) <= 1e-12


def test_sequence_loss_ignores_right_padding_and_masked_left_padding():
    model = _gpt(1)
    g = torch.Generator().manual_seed(0)
    texts = [torch.randint(1, 19, (n,), generator=g) for n in (2, 6, 4)]
    t = max(len(x) for x in texts)
    pad = tpt.PAD_ID
    right = torch.stack([torch.cat([x, x.new_full((t - len(x),), pad)]) for x in texts])
    left = torch.stack([torch.cat([x.new_full((t - len(x),), pad), x]) for x in texts])
    with torch.no_grad():
        alone = torch.cat([tpt.sequence_loss(model(x[None]), x[None]) for x in texts])
        assert (tpt.sequence_loss(model(right), right) - alone).abs().max() <= 1e-12
        masked = tpt.sequence_loss(model(left, key_padding_mask=left == pad), left)
        assert (masked - alone).abs().max() <= 1e-12


def test_sequence_loss_keeps_the_gradient():
    model = _gpt(2).train()
    ids = torch.tensor([[3, 4, 5]])
    tpt.sequence_loss(model(ids), ids).sum().backward()
    assert model.embedding.weight.grad.abs().sum() > 0


def test_fit_threshold_separates_when_it_can_and_breaks_ties_low():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])
    labels = torch.tensor([1, 1, 0, 0])  # classe 1 = perda baixa
    assert tpt.fit_threshold(scores, labels) == 2.5
    # Nenhum limiar acerta tudo: vale o que acerta mais (3 de 4), o menor deles.
    threshold = tpt.fit_threshold(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1, 0, 1, 0]))
    assert threshold == 1.5
    # Notas repetidas: os candidatos ficam entre valores distintos.
    assert tpt.fit_threshold(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([1, 1, 0])) == 1.5
    # Todos da classe 1: um limiar acima de todas as notas.
    assert tpt.fit_threshold(torch.tensor([0.5, 0.7]), torch.tensor([1, 1])) > 0.7
    accuracy = ((scores < 2.5).long() == labels).float().mean()
    assert accuracy == 1.0


def test_fit_threshold_is_optimal_on_random_labels():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        scores = torch.randn(15, generator=g)
        labels = torch.randint(0, 2, (15,), generator=g)
        threshold = tpt.fit_threshold(scores, labels)
        cuts = [-9.0, 9.0] + [c + e for c in scores.tolist() for e in (0.0, 1e-9)]
        best = max(((scores < c).long() == labels).sum().item() for c in cuts)
        assert ((scores < threshold).long() == labels).sum().item() == best


def test_balanced_accuracy():
    labels = torch.tensor([0, 0, 0, 0, 1, 2])
    assert tpt.balanced_accuracy(torch.zeros(6, dtype=torch.long), labels) == pytest.approx(1 / 3)
    assert tpt.balanced_accuracy(labels, labels) == 1.0
    predictions = torch.tensor([0, 0, 1, 1, 1, 0])  # classe 0: 2/4, classe 1: 1/1, classe 2: 0/1
    assert tpt.balanced_accuracy(predictions, labels) == pytest.approx((0.5 + 1 + 0) / 3)


def test_linear_probe_separates_separable_classes_and_is_deterministic():
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 3.0]])
    labels = torch.arange(3).repeat(20)  # (60,)
    points = centers[labels] + 0.3 * torch.randn(60, 3, generator=g)
    test_labels = torch.arange(3).repeat(5)
    test = centers[test_labels] + 0.3 * torch.randn(15, 3, generator=g)
    predictions = tpt.linear_probe(points, labels, test)
    assert predictions.shape == (15,) and predictions.dtype == torch.long
    assert torch.equal(predictions, test_labels)
    assert torch.equal(tpt.linear_probe(points, labels, test), predictions)
    # Uma coluna constante (desvio zero) não quebra a padronização.
    constant = torch.cat([points, torch.ones(60, 1)], dim=1)
    assert torch.equal(tpt.linear_probe(constant, labels, torch.cat([test, torch.ones(15, 1)], 1)),
                       test_labels)


def test_linear_probe_with_gradients_off_outside():
    points, labels = torch.randn(10, 2), torch.tensor([0, 1] * 5)
    with torch.no_grad():
        assert tpt.linear_probe(points, labels, points).shape == (10,)


def test_bootstrap_interval_resamples_whole_groups():
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    seen = []

    def statistic(index):
        seen.append(index)
        return float(index.double().mean())

    low, high = tpt.bootstrap_interval(statistic, groups, reps=50, seed=1)
    assert len(seen) == 50 and low <= high
    for index in seen:
        assert len(index) == 8  # 4 grupos sorteados, 2 itens cada
        assert torch.equal(index.view(-1, 2) // 2, (index.view(-1, 2) // 2)[:, :1].expand(-1, 2))
    again = tpt.bootstrap_interval(lambda i: float(i.double().mean()), groups, reps=50, seed=1)
    assert (low, high) == again


def test_bootstrap_interval_of_a_mean_matches_its_spread():
    g = torch.Generator().manual_seed(0)
    hits = (torch.rand(400, generator=g) < 0.7).double()  # acertos de 400 itens independentes
    low, high = tpt.bootstrap_interval(lambda i: hits[i].mean().item(), torch.arange(400))
    spread = (0.7 * 0.3 / 400) ** 0.5  # o desvio-padrão da média
    assert low < hits.mean() < high
    assert 2.5 * spread < high - low < 4 * spread  # 90%: cerca de 3,3 desvios de largura
    # Um valor constante não tem incerteza.
    assert tpt.bootstrap_interval(lambda i: 1.0, torch.arange(5), reps=10) == (1.0, 1.0)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: tpt.sequence_loss(torch.ones(2, 3, 5), torch.tensor([[3, 0, 0], [3, 4, 0]])),
         ValueError, r"as linhas \[0\] de ids têm menos de 2 tokens"),
        (lambda: tpt.sequence_loss(torch.ones(2, 3, 5), torch.ones(2, 3)), TypeError,
         "ids inteiros"),
        (lambda: tpt.sequence_loss(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)),
         ValueError, r"logits deve ter forma \(b, t, V\)"),
        (lambda: tpt.sequence_loss(torch.ones(2, 4, 5), torch.ones(2, 3, dtype=torch.long)),
         ValueError, r"logits deve ter forma"),
        (lambda: tpt.fit_threshold(torch.ones(3), torch.tensor([0, 1])), ValueError, "mesma forma"),
        (lambda: tpt.fit_threshold(torch.ones(2), torch.tensor([0, 2])), ValueError,
         "só os inteiros 0 e 1"),
        (lambda: tpt.fit_threshold(torch.ones(2), torch.tensor([0.0, 1.0])), ValueError, "0 e 1"),
        (lambda: tpt.fit_threshold(torch.tensor([1.0, float("nan")]), torch.tensor([0, 1])),
         ValueError, "não finitos"),
        (lambda: tpt.fit_threshold(torch.ones(0), torch.ones(0, dtype=torch.long)), ValueError,
         r"vetor \(n,\)"),
        (lambda: tpt.balanced_accuracy(torch.ones(3), torch.ones(2)), ValueError, "mesma forma"),
        (lambda: tpt.bootstrap_interval(1.0, torch.arange(3)), TypeError, "statistic"),
        (lambda: tpt.bootstrap_interval(len, torch.arange(3), reps=1), ValueError, "reps=1"),
        (lambda: tpt.bootstrap_interval(len, torch.arange(3), level=90), ValueError, "level=90"),
        (lambda: tpt.linear_probe(torch.ones(4), torch.ones(4, dtype=torch.long), torch.ones(2, 1)),
         ValueError, r"train_features deve ser um tensor \(n, d\)"),
        (lambda: tpt.linear_probe(torch.ones(4, 2), LONG4, torch.ones(2, 3)),
         ValueError, "devem ser iguais"),
        (lambda: tpt.linear_probe(torch.ones(4, 2), LONG4[:3], torch.ones(2, 2)),
         ValueError, "3 rótulos para 4 exemplos"),
        (lambda: tpt.linear_probe(torch.ones(2, 2), torch.tensor([0.0, 1.0]), torch.ones(2, 2)),
         ValueError, "inteiros >= 0"),
    ],
)
def test_bad_inputs_raise_in_portuguese(call, error, match):
    with pytest.raises(error, match=match):
        call()
