"""Configuração comum dos testes: uma thread e matplotlib sem janela."""

from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
# Modelos minúsculos: 1 thread evita a disputa de núcleos numa máquina compartilhada
# e deixa os resultados independentes do número de núcleos.
torch.set_num_threads(1)

# As entregas sintéticas do kit do instrutor (tests/entregas/) são dados dos testes da
# correção, não notebooks do curso: várias são quebradas de propósito (laço infinito,
# bomba de memória, JSON inválido), e o nbval não deve executá-las.
collect_ignore = ["entregas"]


@pytest.fixture
def llama64(monkeypatch):
    """RMSNorm e ângulos do RoPE do Llama em float64 (como os do tpt)."""
    from transformers.models.llama import modeling_llama as ml

    def rms_forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        head_dim = 2 * self.inv_freq.numel()
        from tpt import hf

        theta = hf._rope_theta(self.config)
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = position_ids[..., None].double() * inv_freq.to(x.device)  # (b, t, d_h/2)
        angles = torch.cat((angles, angles), dim=-1)  # (b, t, d_h): metades, não pares
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    monkeypatch.setattr(ml.LlamaRMSNorm, "forward", rms_forward)
    monkeypatch.setattr(ml.LlamaRotaryEmbedding, "forward", rotary_forward)
