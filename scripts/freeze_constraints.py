"""Regrava constraints-ci.txt com as versões do .venv (mantendo o torch de CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = [
    "# Versões exatas usadas pela CI desta máquina (Linux x86_64, sem GPU, Python 3.11).",
    "# O torch fica fixado na build de CPU que já está no disco: um piso aberto puxaria",
    "# uma build CUDA de vários GB. Fora daqui, para um torch só de CPU, veja o README.",
    "# Gerado com: make constraints (pip freeze do .venv).",
]

freeze = subprocess.run(
    [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
    check=True,
    capture_output=True,
    text=True,
).stdout.splitlines()
lines = [line for line in freeze if line and not line.startswith(("-e", "tpt"))]
if not any(line.startswith("torch==") and "+cpu" in line for line in lines):
    raise SystemExit("O .venv não tem um torch '+cpu'; a CI precisa dele fixado.")
(ROOT / "constraints-ci.txt").write_text("\n".join(HEADER + lines) + "\n", encoding="utf-8")
print(f"constraints-ci.txt: {len(lines)} pacotes")
