"""Treino em vários processos com ``DistributedDataParallel`` e o mesmo ``tpt.train``.

Ver scripts/treinar_gpt.py e notebooks/10_transformers_modernos.ipynb.

A ideia do paralelismo de dados: cada processo (um "rank") tem uma cópia inteira do
modelo e treina com lotes **diferentes**; depois do ``backward``, o DDP tira a média dos
gradientes de todos os processos (um *all-reduce*), de modo que todas as cópias dão o
mesmo passo e continuam idênticas. Com ``n`` processos e lotes de tamanho ``b``, cada
passo equivale a um passo num lote de ``n · b`` exemplos.

Uso, dentro de um script lançado com ``torchrun --nproc_per_node N script.py``::

    rank, world_size, device = tpt.distributed.setup()
    model = tpt.distributed.wrap(model.to(device), device)
    tpt.train(model, batches_do_rank, ...)     # o mesmo laço de sempre
    tpt.distributed.cleanup()

``setup`` escolhe ``nccl`` quando há GPU CUDA e ``gloo`` na CPU. Sem ``torchrun``
(variáveis ``RANK``/``WORLD_SIZE`` ausentes) ele não inicia nada e devolve ``(0, 1,
dispositivo)``: o mesmo script roda num processo só.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["setup", "cleanup", "wrap", "unwrap", "rank", "world_size", "is_main_process"]


def is_initialized() -> bool:
    """Há um grupo de processos ativo (``torch.distributed`` iniciado)?"""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """Número deste processo (0 quando não há treino distribuído)."""
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    """Quantos processos treinam juntos (1 quando não há treino distribuído)."""
    return dist.get_world_size() if is_initialized() else 1


def is_main_process() -> bool:
    """O processo 0 é o único que imprime o progresso e salva checkpoints."""
    return rank() == 0


def setup(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Inicia o grupo de processos a partir das variáveis do ``torchrun``.

    Devolve ``(rank, world_size, device)``. ``backend``: ``None`` escolhe ``"nccl"``
    quando há uma GPU CUDA para cada processo da máquina, e ``"gloo"`` (na CPU) se não.
    Com ``nccl``, cada processo usa a GPU ``LOCAL_RANK``.
    Sem as variáveis do ``torchrun``, não inicia nada: ``(0, 1, cuda ou cpu)``.
    """
    cuda = torch.cuda.is_available()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device("cuda" if cuda else "cpu")
    if not dist.is_available():
        raise RuntimeError("este PyTorch foi compilado sem torch.distributed")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # Processos nesta máquina (o torchrun define LOCAL_WORLD_SIZE; sem ele, todos).
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    gpus = torch.cuda.device_count() if cuda else 0
    # O nccl quer uma GPU por processo. Com menos GPUs que processos (ex.: Colab com 1 GPU
    # e --nproc_per_node 2), TODOS os processos vão juntos para gloo na CPU.
    backend = backend or ("nccl" if gpus >= local_world else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend={backend!r} desconhecido; use 'nccl' (GPU) ou 'gloo' (CPU)")
    if backend == "nccl" and not cuda:
        raise ValueError("backend='nccl' precisa de GPU CUDA; na CPU use 'gloo'")
    if backend == "nccl" and local_rank >= gpus:
        raise ValueError(
            f"backend='nccl' com LOCAL_RANK={local_rank}, mas só há {gpus} GPU(s) CUDA: "
            f"use --nproc_per_node <= {gpus} ou backend='gloo'"
        )
    if cuda and backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not is_initialized():
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), device


def cleanup() -> None:
    """Encerra o grupo de processos (chame no fim do script)."""
    if is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Embrulha ``model`` em ``DistributedDataParallel`` quando há vários processos.

    Num processo só, devolve o próprio modelo (nada muda).
    """
    if not is_initialized() or world_size() == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device(device) if device is not None else next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: nn.Module) -> nn.Module:
    """O modelo de dentro de um ``DistributedDataParallel`` (ou o próprio modelo)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model
