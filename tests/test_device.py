"""Testes de tpt.device: escolha do dispositivo e sementes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tpt.device import get_device, seed_everything


@pytest.fixture
def no_gpu(monkeypatch):
    """Simula uma máquina sem CUDA e sem MPS, sem TPT_DEVICE definido."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.delenv("TPT_DEVICE", raising=False)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Simula uma GPU CUDA (sem tocar em nenhuma GPU de verdade)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "GPU de teste")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.delenv("TPT_DEVICE", raising=False)


def test_falls_back_to_cpu_and_says_why(no_gpu, capsys):
    device = get_device()
    assert device == torch.device("cpu")
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # uma linha só
    assert out.startswith("Dispositivo: cpu")
    assert "nenhuma GPU CUDA ou Apple MPS disponível" in out


def test_verbose_false_prints_nothing(no_gpu, capsys):
    assert get_device(verbose=False) == torch.device("cpu")
    assert capsys.readouterr().out == ""


def test_prefers_cuda_when_available(fake_cuda, capsys):
    device = get_device()
    assert device.type == "cuda"
    out = capsys.readouterr().out
    assert "Dispositivo: cuda" in out and "GPU de teste" in out


def test_mps_when_no_cuda(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.delenv("TPT_DEVICE", raising=False)
    assert get_device().type == "mps"
    assert "Apple MPS" in capsys.readouterr().out


def test_env_var_overrides_detection(fake_cuda, monkeypatch, capsys):
    monkeypatch.setenv("TPT_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    assert "definido por TPT_DEVICE=cpu" in capsys.readouterr().out


def test_argument_overrides_env_var(fake_cuda, monkeypatch, capsys):
    monkeypatch.setenv("TPT_DEVICE", "cpu")
    assert get_device("cuda").type == "cuda"
    assert "preferred='cuda'" in capsys.readouterr().out
    # "auto" devolve a decisão para TPT_DEVICE e a detecção
    assert get_device("auto", verbose=False) == torch.device("cpu")
    assert get_device(torch.device("cpu"), verbose=False) == torch.device("cpu")


def test_explicit_cuda_index(fake_cuda):
    assert get_device("cuda:0", verbose=False) == torch.device("cuda", 0)
    with pytest.raises(ValueError, match=r"'cuda:3'.*só tem 1 GPU"):
        get_device("cuda:3", verbose=False)


def test_unavailable_device_is_an_error(no_gpu):
    with pytest.raises(ValueError, match=r"'cuda'.*não há GPU CUDA.*'cpu'"):
        get_device("cuda")
    with pytest.raises(ValueError, match=r"'mps'.*não há GPU Apple MPS"):
        get_device("mps")


def test_unknown_device_names_it_and_the_choices(no_gpu, monkeypatch):
    with pytest.raises(ValueError, match=r"dispositivo desconhecido 'tpu'.*'cpu', 'cuda'"):
        get_device("tpu")
    monkeypatch.setenv("TPT_DEVICE", "gpu")
    with pytest.raises(ValueError, match=r"'gpu' \(TPT_DEVICE=gpu\)"):
        get_device()
    with pytest.raises(TypeError, match="preferred deve ser str"):
        get_device(0)


def _draws() -> tuple[float, float, torch.Tensor]:
    return random.random(), float(np.random.rand()), torch.randn(5)


def test_seed_everything_is_reproducible():
    seed_everything(1234)
    first = _draws()
    seed_everything(1234)
    second = _draws()
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert torch.equal(first[2], second[2])
    seed_everything(4321)
    assert not torch.equal(first[2], _draws()[2])


def test_seed_everything_rejects_bad_seeds():
    with pytest.raises(TypeError, match=r"seed deve ser um inteiro; recebi float \(1\.5\)"):
        seed_everything(1.5)
    with pytest.raises(TypeError, match="recebi str"):
        seed_everything("42")
    with pytest.raises(TypeError, match="recebi bool"):
        seed_everything(True)
    with pytest.raises(ValueError, match=r"seed=-1 fora do intervalo"):
        seed_everything(-1)
    seed_everything(np.int64(7))  # inteiros do numpy também servem


def test_host_reads_are_free_only_on_the_cpu():
    from tpt.device import host_reads_are_free

    assert host_reads_are_free(torch.device("cpu"))
    assert not host_reads_are_free(torch.device("meta"))  # como uma GPU: ler custa uma espera
