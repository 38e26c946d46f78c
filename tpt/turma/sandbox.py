"""Roda o processo de correção de um notebook com limites (tempo, memória) e isolado.

Cada notebook entregue roda num processo próprio (:mod:`tpt.turma.child`):

- numa pasta de rascunho nova (``cwd`` e ``HOME``), apagada no fim;
- sem rede: ``HF_HUB_OFFLINE=1`` e ``TRANSFORMERS_OFFLINE=1`` (nada na correção baixa);
- com a semente dos casos sorteados fixa (``TPT_EXERCISE_SEED``);
- com limite de memória (``RLIMIT_DATA``: a memória que o processo aloca; não o espaço de
  endereços, que o torch com CUDA reserva aos GB só ao ser importado), de tamanho
  de arquivo (``RLIMIT_FSIZE``) e sem core dumps, postos no filho antes do ``exec``;
- com limite de tempo de relógio: estourou, o grupo de processos inteiro é morto.

Os resultados voltam por um cano aberto pelo pai (não pela saída padrão, que é do aluno).
Isso NÃO é uma caixa de areia de segurança: o código do aluno roda com as permissões de
quem corrige (veja o README).
"""

from __future__ import annotations

import json
import math
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_LIMIT = 256 * 2**20  # bytes que o aluno pode gravar num arquivo
STDERR_TAIL = 4000


@dataclass
class Limits:
    """Limites de um notebook: segundos de relógio e bytes de memória alocada (RLIMIT_DATA)."""

    seconds: float = 300.0
    memory: int = 4 * 2**30
    seed: int = 0


@dataclass
class ChildRun:
    """O que voltou de um processo de correção."""

    events: list[dict] = field(default_factory=list)
    timed_out: bool = False
    returncode: int | None = None
    stderr: str = ""
    seconds: float = 0.0

    @property
    def finished(self) -> bool:
        return any(e.get("kind") == "done" for e in self.events)


def _limit(memory: int, seconds: float):
    # Rede de segurança do tempo: se o pai morrer (Ctrl+C, kill), ninguém mais mata o
    # filho pelo relógio; o limite de CPU o derruba sozinho um pouco depois do prazo
    # (com 1 thread, o tempo de CPU nunca passa o de relógio: o prazo do pai vem antes).
    cpu = math.ceil(seconds) + 10

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def child_env(scratch: Path, seed: int) -> dict[str, str]:
    """O ambiente do filho: o do pai, offline, com casa e caches na pasta de rascunho."""
    env = dict(os.environ)
    home = Path.home()
    env.update(
        HOME=str(scratch),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=os.environ.get("HF_HOME", str(home / ".cache" / "huggingface")),
        TPT_EXERCISE_SEED=str(seed),
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        MPLBACKEND="Agg",
        IPYTHONDIR=str(scratch / ".ipython"),
        MPLCONFIGDIR=str(scratch / ".matplotlib"),
        JUPYTER_CONFIG_DIR=str(scratch / ".jupyter"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONIOENCODING="utf-8",
    )
    env.pop("PYTHONSTARTUP", None)
    return env


def run_child(job: dict[str, Any], limits: Limits) -> ChildRun:
    """Roda um trabalho (ver :mod:`tpt.turma.child`) e devolve os eventos recebidos."""
    result = ChildRun()
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tpt-correcao-", ignore_cleanup_errors=True) as folder:
        scratch = Path(folder)
        stderr_path = scratch.parent / f"{scratch.name}.stderr"
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "tpt.turma.child", str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=scratch,
                env=child_env(scratch, limits.seed),
                pass_fds=(write_fd,),
                preexec_fn=_limit(limits.memory, limits.seconds),
                start_new_session=True,
            )
        os.close(write_fd)
        try:
            _feed(process, job)
            result.events, result.timed_out = _collect(read_fd, process, start + limits.seconds)
        finally:
            os.close(read_fd)
            _kill_group(process)
            result.returncode = process.wait()
            result.seconds = time.monotonic() - start
            try:
                data = stderr_path.read_bytes()
                result.stderr = data[-STDERR_TAIL:].decode("utf-8", "replace")
            finally:
                stderr_path.unlink(missing_ok=True)
    return result


def _feed(process: subprocess.Popen, job: dict) -> None:
    try:
        assert process.stdin is not None
        process.stdin.write(json.dumps(job, ensure_ascii=False).encode("utf-8"))
        process.stdin.close()
    except BrokenPipeError:
        pass  # o filho morreu cedo: o retorno diz por quê


def _collect(fd: int, process: subprocess.Popen, deadline: float) -> tuple[list[dict], bool]:
    """Lê as linhas JSON até o cano fechar ou o prazo acabar."""
    events: list[dict] = []
    buffer = b""
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return events, True
        if not selector.select(timeout=min(remaining, 1.0)):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # uma linha que não é JSON não é nossa
            if isinstance(event, dict):
                events.append(event)
    selector.close()
    try:
        process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return events, True
    return events, False


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
