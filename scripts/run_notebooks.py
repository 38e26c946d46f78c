"""Executa os notebooks do curso em ordem com o papermill, regravando as saídas.

    python scripts/run_notebooks.py                      # todos
    python scripts/run_notebooks.py 03_atencao_produto_escalar.ipynb
    python scripts/run_notebooks.py 08_encoder_decoder.ipynb -p train_seconds 120

(`make notebooks` e `make notebooks NB=...` chamam este script.) Os metadados
voláteis do papermill são removidos, de modo que rodar duas vezes seguidas não deixa
diff no git. Se um notebook falhar, o original fica intacto e a versão com o erro vai
para .cache/falhas/.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import time
from pathlib import Path

import papermill
from traitlets.config import Config

from tpt import fmt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_tools import (  # noqa: E402
    NOTEBOOKS,
    ROOT,
    children_cpu,
    course_notebooks,
    normalize,
    read,
    write,
)


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def kernel_config() -> Config:
    """Kernels ligados por sockets de arquivo (IPC), não por portas TCP.

    Com TCP, o ipykernel avisa a cada notebook que a conexão não é criptografada ("Kernel
    is running over TCP without encryption…"). É verdade, mas aqui kernel e papermill
    estão na mesma máquina: com IPC nada passa pela rede e o aviso não existe. O Windows
    não tem sockets de arquivo; lá fica o TCP (e o aviso).
    """
    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc"}})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="nomes em notebooks/ (padrão: todos)")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NOME", "VALOR"))
    args = parser.parse_args(argv)

    paths = [NOTEBOOKS / Path(n).name for n in args.notebooks] or course_notebooks()
    for path in paths:
        if not path.exists():
            print(f"Notebook não encontrado: {path}", file=sys.stderr)
            return 2
    params = {name: _value(value) for name, value in args.p}
    failures = ROOT / ".cache" / "falhas"
    total = total_cpu = 0.0
    for path in paths:
        previous = read(path)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / path.name
            start, cpu_start = time.perf_counter(), children_cpu()
            try:
                papermill.execute_notebook(
                    str(path),
                    str(out),
                    parameters=params,
                    kernel_name="python3",
                    cwd=str(NOTEBOOKS),
                    progress_bar=False,
                    coalesce_streams=True,
                    config=kernel_config(),
                )
            except Exception as exc:  # o papermill grava o notebook com o erro
                failures.mkdir(parents=True, exist_ok=True)
                if out.exists():
                    out.replace(failures / path.name)
                print(f"FALHOU {path.name}: {type(exc).__name__}; veja {failures / path.name}")
                return 1
            elapsed, cpu = time.perf_counter() - start, children_cpu() - cpu_start
            total += elapsed
            total_cpu += cpu
            write(normalize(read(out), previous), path)
        print(f"{path.name}: {fmt(elapsed, 1)} s de relógio, {fmt(cpu, 1)} s de CPU (kernel)")
    print(f"total: {fmt(total, 1)} s de relógio, {fmt(total_cpu, 1)} s de CPU (kernel)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
