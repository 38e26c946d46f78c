"""Escolha do dispositivo (CPU, GPU CUDA ou Apple MPS) e sementes reprodutíveis.

Ver notebooks/01_tokens.ipynb (célula de preparação, repetida em todos os notebooks).

A ordem de escolha de :func:`get_device` é:

1. o argumento ``preferred`` (quando dado);
2. a variável de ambiente ``TPT_DEVICE`` (por exemplo ``TPT_DEVICE=cpu``);
3. ``cuda``, se houver uma GPU CUDA;
4. ``mps``, se houver uma GPU Apple (Metal);
5. ``cpu``.

Um pedido explícito (passos 1 e 2) nunca é trocado em silêncio por outro dispositivo:
se o dispositivo pedido não existe nesta máquina, levantamos ``ValueError``.
"""

from __future__ import annotations

import numbers
import os
import random
import re

import torch

__all__ = ["ENV_VAR", "get_device", "seed_everything"]

#: Nome da variável de ambiente que força um dispositivo (ex.: ``TPT_DEVICE=cpu``).
ENV_VAR = "TPT_DEVICE"

# "cpu", "cuda", "cuda:0", "cuda:1", ..., "mps" (maiúsculas são aceitas).
_DEVICE_RE = re.compile(r"^(cpu|mps|cuda)(?::(\d+))?$")
_VALID_CHOICES = "'cpu', 'cuda', 'cuda:N' (N = número da GPU), 'mps' ou 'auto'"


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _cuda_name(index: int) -> str:
    """Nome da GPU para a mensagem; nunca falha (é só informativo)."""
    try:
        return torch.cuda.get_device_name(index)
    except Exception:  # o nome é só informativo; a escolha não depende dele
        return "GPU CUDA"


def _available_choices() -> str:
    choices = ["'cpu'"]
    if _cuda_available():
        choices.append("'cuda'")
    if _mps_available():
        choices.append("'mps'")
    return ", ".join(choices)


def _resolve_explicit(request: str, origin: str) -> tuple[torch.device, str]:
    """Valida um pedido explícito e devolve ``(dispositivo, motivo)``.

    ``origin`` descreve de onde veio o pedido, para as mensagens (ex.: "TPT_DEVICE=cpu").
    """
    match = _DEVICE_RE.match(request.strip().lower())
    if match is None:
        raise ValueError(
            f"dispositivo desconhecido {request!r} ({origin}); escolhas válidas: {_VALID_CHOICES}."
        )
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index is not None:
            raise ValueError(
                f"dispositivo {request!r} ({origin}): a CPU não tem número; use 'cpu'."
            )
        return torch.device("cpu"), f"definido por {origin}"
    if kind == "mps":
        if not _mps_available():
            raise ValueError(
                f"dispositivo {request!r} pedido ({origin}), mas não há GPU Apple MPS "
                f"disponível nesta máquina; escolhas disponíveis aqui: "
                f"{_available_choices()}."
            )
        return torch.device("mps"), f"definido por {origin}"
    # kind == "cuda"
    if not _cuda_available():
        raise ValueError(
            f"dispositivo {request!r} pedido ({origin}), mas não há GPU CUDA disponível "
            f"nesta máquina; escolhas disponíveis aqui: {_available_choices()}."
        )
    number = int(index) if index is not None else 0
    count = torch.cuda.device_count()
    if number >= count:
        raise ValueError(
            f"dispositivo {request!r} pedido ({origin}), mas esta máquina só tem "
            f"{count} GPU(s) CUDA (números 0 a {count - 1})."
        )
    device = torch.device("cuda", number) if index is not None else torch.device("cuda")
    return device, f"definido por {origin}; {_cuda_name(number)}"


def get_device(
    preferred: str | torch.device | None = None, *, verbose: bool = True
) -> torch.device:
    """Escolhe o dispositivo onde os tensores e o modelo vão morar.

    Args:
        preferred: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, um ``torch.device``, ou
            ``None``/``"auto"`` para escolher sozinho (variável ``TPT_DEVICE``, depois
            cuda, mps e cpu, nesta ordem).
        verbose: se ``True``, imprime UMA linha em português dizendo o que foi escolhido
            e por quê.

    Returns:
        O ``torch.device`` escolhido.

    Raises:
        ValueError: se um dispositivo pedido explicitamente (argumento ou ``TPT_DEVICE``)
            é desconhecido ou não existe nesta máquina.
        TypeError: se ``preferred`` não é ``str``, ``torch.device`` nem ``None``.
    """
    if isinstance(preferred, torch.device):
        preferred = str(preferred)
    if preferred is not None and not isinstance(preferred, str):
        raise TypeError(
            f"preferred deve ser str, torch.device ou None; recebi "
            f"{type(preferred).__name__} ({preferred!r})."
        )

    env_value = os.environ.get(ENV_VAR, "").strip()
    if preferred is not None and preferred.strip().lower() not in ("", "auto"):
        device, reason = _resolve_explicit(preferred, f"preferred={preferred!r}")
    elif env_value and env_value.lower() != "auto":
        device, reason = _resolve_explicit(env_value, f"{ENV_VAR}={env_value}")
    elif _cuda_available():
        device, reason = torch.device("cuda"), f"GPU CUDA disponível: {_cuda_name(0)}"
    elif _mps_available():
        device, reason = torch.device("mps"), "GPU Apple MPS disponível; nenhuma GPU CUDA"
    else:
        device, reason = torch.device("cpu"), "nenhuma GPU CUDA ou Apple MPS disponível"

    if verbose:
        print(f"Dispositivo: {device} ({reason}).")
    return device


def seed_everything(seed: int) -> None:
    """Fixa a semente de ``random``, ``numpy`` (se instalado), ``torch`` e CUDA.

    Com a mesma semente, o mesmo número de threads e a mesma CPU, os resultados na CPU
    saem idênticos entre execuções. Na GPU alguns kernels continuam não determinísticos.

    Args:
        seed: inteiro entre 0 e 2**32 - 1 (o intervalo que o numpy aceita).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed deve ser um inteiro; recebi {type(seed).__name__} ({seed!r}).")
    seed = int(seed)
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} fora do intervalo esperado [0, 2**32 - 1].")
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # o numpy é opcional para o tpt
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # semeia também todas as GPUs CUDA (se houver)
    torch.cuda.manual_seed_all(seed)  # explícito; é adiado até a CUDA ser usada


def host_reads_are_free(device: torch.device) -> bool:
    """Ler um tensor deste dispositivo no Python (``.item()``, ``bool(t)``) sai de graça?

    Na CPU, sim. Numa GPU, a leitura faz a CPU esperar a GPU terminar tudo o que foi
    enfileirado: ``tpt.train`` e ``tpt.generate`` então leem em blocos, não a cada passo.
    """
    return device.type == "cpu"
