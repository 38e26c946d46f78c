"""Configuração comum dos testes: uma thread e matplotlib sem janela."""

from __future__ import annotations

import matplotlib
import torch

matplotlib.use("Agg")
# Modelos minúsculos: 1 thread evita a disputa de núcleos numa máquina compartilhada
# e deixa os resultados independentes do número de núcleos.
torch.set_num_threads(1)

# As entregas sintéticas do kit do instrutor (tests/entregas/) são dados dos testes da
# correção, não notebooks do curso: várias são quebradas de propósito (laço infinito,
# bomba de memória, JSON inválido), e o nbval não deve executá-las.
collect_ignore = ["entregas"]
