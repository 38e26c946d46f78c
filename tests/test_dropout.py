"""Testes de tpt.dropout.apply_dropout: igual a nn.Dropout, sem chamar o módulo à toa."""

from __future__ import annotations

import torch
from torch import nn

from tpt.dropout import apply_dropout


class _Counting(nn.Dropout):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return super().forward(x)


def test_apply_dropout_equals_nn_dropout_in_every_mode():
    x = torch.randn(2, 3, 8)
    for p in (0.0, 0.5):
        for training in (True, False):
            module = nn.Dropout(p).train(training)
            torch.manual_seed(0)
            expected = module(x)
            torch.manual_seed(0)
            received = apply_dropout(module, x)
            assert torch.equal(received, expected), (p, training)


def test_apply_dropout_skips_the_call_only_when_it_changes_nothing():
    x = torch.randn(4, 8)
    module = _Counting(0.5)
    module.eval()
    assert apply_dropout(module, x) is x and _Counting.calls == 0
    module.p = 0.0
    module.train()
    assert apply_dropout(module, x) is x and _Counting.calls == 0
    module.p = 0.5
    apply_dropout(module, x)
    assert _Counting.calls == 1


def test_nn_dropout_with_p_zero_draws_nothing():
    """Pular o dropout com p = 0 não muda o gerador global (nada a sortear)."""
    x = torch.randn(4, 8)
    torch.manual_seed(0)
    nn.Dropout(0.0).train()(x)
    after_module = torch.rand(3)
    torch.manual_seed(0)
    apply_dropout(nn.Dropout(0.0).train(), x)
    assert torch.equal(torch.rand(3), after_module)
