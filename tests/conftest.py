"""Configuração comum dos testes: uma thread e matplotlib sem janela."""

from __future__ import annotations

import matplotlib
import torch

matplotlib.use("Agg")
# Modelos minúsculos: 1 thread evita a disputa de núcleos numa máquina compartilhada
# e deixa os resultados independentes do número de núcleos.
torch.set_num_threads(1)
