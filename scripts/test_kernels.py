"""Confere os notebooks (nbval) com outros núcleos de CPU, não só os melhores desta máquina.

    python scripts/test_kernels.py -- -n 2 --dist loadscope notebooks --nbval ...

(`make test-kernels` chama este script; a CI o roda depois de `make test`.)

O PyTorch escolhe as rotinas de CPU pelo conjunto de instruções da máquina (AVX-512,
AVX2 ou a versão genérica, `ATEN_CPU_CAPABILITY`), e as bibliotecas que ele usa fazem o
mesmo: a MKL nas multiplicações de matrizes (`MKL_CBWR`) e a oneDNN em algumas
ativações (`ONEDNN_MAX_CPU_ISA`). Cada escolha soma os números numa ordem um pouco
diferente, e o arredondamento muda (zero exato numa CPU, 6e-07 em outra). As saídas
guardadas dos notebooks precisam valer em qualquer CPU; este script roda o nbval sobre
elas com os núcleos trocados:

- `genérico`: os três no caminho mais simples (sempre);
- `avx2`: AVX2 em vez de AVX-512 nos três (só onde a máquina tem AVX-512);
- `genérico-só-aten`: só o PyTorch no caminho genérico, com a MKL e a oneDNN nos núcleos
  nativos (onde o PyTorch desta máquina não é já o genérico);
- `avx2-só-aten`: só o PyTorch em AVX2, com a MKL e a oneDNN nos núcleos nativos (só
  onde a máquina tem AVX-512).

Misturas como as duas últimas acontecem de verdade (uma MKL que escolhe o próprio
caminho) e já mudaram saídas que os conjuntos completos não mudavam: `avx2-só-aten`, uma
contagem do 02; `genérico-só-aten`, um veredito sobre as cabeças de atenção do 09.

As saídas foram gravadas (`make notebooks`) com os núcleos nativos de alguma máquina;
passar aqui prova que a gravação e a conferência podem usar núcleos diferentes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

KERNEL_SETS: dict[str, dict[str, str]] = {
    "genérico": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "genérico-só-aten": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2-só-aten": {"ATEN_CPU_CAPABILITY": "avx2"},
}
# Os nomes que o PyTorch dá ao caminho genérico (o torch 2.6, o piso, diz "NO AVX").
GENERIC = {"DEFAULT", "NO AVX"}
PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def capability(env: dict[str, str] | None = None) -> str:
    """O conjunto de instruções que o PyTorch usa com o ambiente ``env`` (ex.: ``AVX2``)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def kernel_sets(native: str) -> list[str]:
    """Os conjuntos a conferir, dado o nativo desta máquina."""
    chosen = ["genérico"]
    if native.upper() not in GENERIC:
        chosen.append("genérico-só-aten")
    if native.upper().startswith("AVX512"):
        chosen += ["avx2", "avx2-só-aten"]
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", help="nomes separados por vírgula (padrão: automático)")
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="argumentos do pytest, depois de --"
    )
    args = parser.parse_args(argv)
    pytest_args = [a for a in args.pytest_args if a != "--"]

    native = capability()
    names = args.sets.split(",") if args.sets else kernel_sets(native)
    unknown = [n for n in names if n not in KERNEL_SETS]
    if unknown:
        print(
            f"conjunto desconhecido: {', '.join(unknown)}; esperava um de {', '.join(KERNEL_SETS)}",
            file=sys.stderr,
        )
        return 2
    print(f"núcleos nativos desta máquina: {native}; conferindo com: {', '.join(names)}")
    failed = []
    for name in names:
        env = {**os.environ, **KERNEL_SETS[name]}
        used = capability(env)
        settings = " ".join(f"{k}={v}" for k, v in KERNEL_SETS[name].items())
        print(f"\n== núcleos '{name}' ({settings}; o PyTorch usa {used}) ==", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env)
        minutes, seconds = divmod(round(time.perf_counter() - start), 60)
        print(
            f"== núcleos '{name}': {'passou' if code == 0 else 'FALHOU'} "
            f"em {minutes} min {seconds} s ==",
            flush=True,
        )
        if code != 0:
            failed.append(name)
    if failed:
        print(f"\nfalhou com os núcleos: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
