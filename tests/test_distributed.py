"""Treino distribuído (DDP, gloo na CPU): o mesmo tpt.train em 2 processos.

Dois processos em 127.0.0.1, cada um com lotes diferentes. Conferimos que as duas
réplicas terminam com pesos idênticos e iguais aos de UM processo treinado nos lotes dos
dois juntos (a média dos gradientes do DDP = o gradiente do lote concatenado), e que a
perda cai. Tudo limitado no tempo; os processos são encerrados no fim.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tpt
from tpt import distributed

ROOT = Path(__file__).resolve().parent.parent
STEPS, BATCH, BLOCK, VOCAB = 6, 4, 12, 7
TIMEOUT = 180


def _config() -> tpt.GPTConfig:
    return tpt.GPTConfig(vocab_size=VOCAB, max_len=BLOCK, embed_dim=16, num_heads=2,
                         num_layers=1, dropout=0.0)


def _batches(rank: int) -> list[dict[str, torch.Tensor]]:
    """Lotes de um texto periódico (a perda cai rápido), diferentes para cada rank."""
    text = torch.tensor([0, 1, 2, 3, 4, 5, 6] * 40)
    gen = torch.Generator().manual_seed(100 + rank)
    return list(tpt.lm_batches(text, BLOCK, BATCH, generator=gen, num_batches=STEPS))


def _train(model, batches):
    return tpt.train(model, batches, loss_fn=tpt.lm_loss, max_steps=STEPS, lr=1e-2,
                     warmup_steps=0, progress=False)


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    got_rank, got_world, device = distributed.setup()
    assert (got_rank, got_world, device.type) == (rank, world, "cpu")
    try:
        torch.manual_seed(0)  # o mesmo modelo inicial nos dois processos
        model = distributed.wrap(tpt.GPT(_config()).double())
        history = _train(model, _batches(rank))
        state = {k: v.detach().clone() for k, v in distributed.unwrap(model).state_dict().items()}
        torch.save({"state": state, "loss": history["train_loss"]}, Path(out_dir) / f"{rank}.pt")
        tpt.save_checkpoint(Path(out_dir) / "modelo.pt", model)  # só o rank 0 grava
    finally:
        distributed.cleanup()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch sem distributed")
def test_two_process_ddp_equals_one_process_on_both_batches(tmp_path, monkeypatch):
    # Os processos herdam o ambiente: sem GPU visível, o teste roda em gloo na CPU também
    # numa máquina com GPU (e com TPT_DEVICE=cuda).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(TIMEOUT)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(10)

    results = [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in range(2)]
    for name, value in results[0]["state"].items():
        assert torch.equal(value, results[1]["state"][name]), f"réplicas diferentes em {name}"

    torch.manual_seed(0)
    single = tpt.GPT(_config()).double()
    both = [
        {k: torch.cat([a[k], b[k]]) for k in a}  # (2b, t): os lotes dos dois ranks juntos
        for a, b in zip(_batches(0), _batches(1), strict=True)
    ]
    _train(single, both)
    for name, value in single.state_dict().items():
        # float64: o AdamW divide pela raiz do 2º momento e amplifica diferenças de
        # arredondamento em gradientes quase nulos; em float64 elas ficam desprezíveis.
        torch.testing.assert_close(results[0]["state"][name], value, atol=1e-9, rtol=1e-7)

    losses = results[0]["loss"]
    assert losses[-1] < losses[0]
    # O checkpoint foi gravado uma vez, pelo rank 0, sem o embrulho do DDP.
    model, _, _ = tpt.load_checkpoint(tmp_path / "modelo.pt")
    assert isinstance(model, tpt.GPT)


def test_setup_without_torchrun_is_a_single_process(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    rank, world, device = distributed.setup()
    assert (rank, world) == (0, 1) and distributed.is_main_process()
    model = tpt.GPT(_config())
    assert distributed.wrap(model) is model and distributed.unwrap(model) is model


def test_setup_rejects_unknown_backend(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="backend='mpi' desconhecido"):
        distributed.setup("mpi")


@pytest.mark.parametrize("gpus", [0, 1])
def test_setup_falls_back_to_gloo_with_fewer_gpus_than_processes(monkeypatch, gpus):
    """Colab com 1 GPU e torchrun --nproc_per_node 2: gloo na CPU, não 'invalid device ordinal'."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))
    monkeypatch.setattr(distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend: calls.append(("init", backend)))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    for var, value in dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2").items():
        monkeypatch.setenv(var, value)
    assert distributed.setup() == (1, 2, torch.device("cpu"))
    assert calls == [("init", "gloo")]
    if gpus:
        with pytest.raises(ValueError, match="só há 1 GPU"):
            distributed.setup("nccl")


def test_training_script_runs_under_torchrun(tmp_path):
    """O script do curso roda com torchrun --nproc_per_node 2 (2 processos na CPU)."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(port),
        str(ROOT / "scripts" / "treinar_gpt.py"), "--steps", "3", "--batch-size", "2",
        "--block", "16", "--dim", "16", "--layers", "1", "--heads", "2",
        "--out", str(tmp_path / "gpt.pt"),
    ]
    # CUDA_VISIBLE_DEVICES vazio: 2 processos na CPU também numa máquina com GPU.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 processo(s) em cpu" in result.stdout
    assert result.stdout.count("bits/caractere") == 1  # só o processo 0 imprime
    model, tokenizer, _ = tpt.load_checkpoint(tmp_path / "gpt.pt")
    assert isinstance(model, tpt.GPT) and tokenizer is not None
