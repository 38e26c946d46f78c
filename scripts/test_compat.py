"""Testa o curso em outras combinações de Python e torch (make test-compat).

    python scripts/test_compat.py                    # as três combinações, uma de cada vez
    python scripts/test_compat.py colab              # só a do Colab
    python scripts/test_compat.py --listar           # o que cada combinação instala
    python scripts/test_compat.py piso --recriar     # apaga e recria o ambiente dessa combinação
    python scripts/test_compat.py -- -n 2 --dist loadscope tests notebooks --nbval ...

Cada combinação tem o seu ambiente virtual, criado uma vez em .cache/compat/NOME (ou
em $TPT_COMPAT_DIR/NOME) e reaproveitado; quando a receita (pinos, linhas do
requirements.txt) muda, é atualizado no lugar; quando o Python muda (ou com --recriar),
é recriado. O `tpt` não é instalado nele: os testes o
importam desta pasta (PYTHONPATH), então o mesmo ambiente serve para qualquer clone e
qualquer versão do `tpt`. Nele rodam os mesmos testes de `make test`: o pytest do
pacote e o nbval dos notebooks (o Makefile passa os mesmos argumentos depois de `--`).

As combinações:
- colab:   o Python e o torch do Google Colab (e o matplotlib, tqdm e ipywidgets de lá);
- piso:    o Python mais antigo que o pyproject.toml aceita e TODAS as dependências no
           piso declarado em requirements.txt (torch>=X vira torch==X): prova os pisos;
- recente: o torch mais novo que o registro de pacotes serve, com o resto também no
           mais novo (os pinos de cada combinação substituem um teto de versão que o
           pip da máquina tenha na configuração global).

O resultado de cada uma (versões, aprovados/reprovados, tempo) vai para a tabela em
benchmarks/results/compat.md e para a seção correspondente do README. Sai com código
1 se alguma combinação falhar.

Os ambientes ficam fora do .venv principal: o torch do registro é uma build CUDA de
vários GB (roda na CPU do mesmo jeito), e não deve substituir o torch de CPU da CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TPT_COMPAT_DIR") or ROOT / ".cache" / "compat")
RESULTS = ROOT / "benchmarks" / "results" / "compat.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- compat: início -->", "<!-- compat: fim -->"

# Os mesmos testes de `make test` (o Makefile passa os seus argumentos depois de `--`).
DEFAULT_PYTEST_ARGS = [
    "-n", "2", "--dist", "loadscope", "tests", "notebooks", "--nbval",
    "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-q",
]
# O mesmo isolamento do Makefile (ISOLATED_ENV), para quem chama o script direto.
ISOLATED_ENV = {
    "JUPYTER_CONFIG_DIR": str(ROOT / ".cache" / "jupyter" / "config"),
    "JUPYTER_RUNTIME_DIR": str(ROOT / ".cache" / "jupyter" / "runtime"),
    "IPYTHONDIR": str(ROOT / ".cache" / "ipython"),
    "MPLCONFIGDIR": str(ROOT / ".cache" / "matplotlib"),
    "TPT_CACHE_DIR": str(ROOT / ".cache" / "tpt"),
    "OMP_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}


@dataclass
class Combo:
    name: str
    python: str  # "3.13": major.minor
    description: str
    pins: dict[str, str] = field(default_factory=dict)  # nome -> especificador ("==2.11.0")


def requirement_floors(path: Path = ROOT / "requirements.txt") -> dict[str, str]:
    """Os pisos declarados: {'torch': '2.4', ...} a partir de linhas 'torch>=2.4'."""
    floors = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", line)
        if match is None:
            raise SystemExit(f"requirements.txt: esperava 'pacote>=versão', encontrei {line!r}")
        floors[match.group(1).lower()] = match.group(2)
    return floors


def python_floor(path: Path = ROOT / "pyproject.toml") -> str:
    match = re.search(r'^requires-python\s*=\s*">=\s*(\d+\.\d+)"', path.read_text("utf-8"), re.M)
    if match is None:
        raise SystemExit("pyproject.toml: requires-python deveria ser '>=X.Y'")
    return match.group(1)


def combos() -> dict[str, Combo]:
    floors = requirement_floors()
    return {
        c.name: c
        for c in [
            # Google Colab (instantâneo de ago/2026, notes/tooling.md): Python 3.13,
            # torch 2.11, matplotlib 3.10, ipywidgets 7.7, tqdm 4.67.
            Combo(
                "colab",
                "3.13",
                "Google Colab",
                {
                    "torch": "==2.11.0",
                    "matplotlib": "==3.10.*",
                    "ipywidgets": "==7.7.*",
                    "tqdm": "==4.67.*",
                },
            ),
            Combo(
                "piso",
                python_floor(),
                "pisos do requirements.txt",
                {name: f"=={version}" for name, version in floors.items()},
            ),
            Combo("recente", "3.12", "torch mais novo do registro", {}),
        ]
    }


def find_python(version: str) -> str | None:
    """Um executável do Python `version` (major.minor): PATH, depois o pyenv."""
    override = os.environ.get(f"TPT_PYTHON_{version.replace('.', '_')}")
    if override:
        return override
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python"))
    found = [c for c in found if re.search(rf"/{re.escape(version)}\.\d+/bin", c)]
    found.sort(key=lambda c: int(re.search(r"\.(\d+)/bin", c).group(1)), reverse=True)
    on_path = shutil.which(f"python{version}")
    # Um "shim" do pyenv no PATH só funciona se essa versão estiver ativa: confere rodando.
    for candidate in [*found, *([on_path] if on_path else [])]:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def recipe(combo: Combo, python: str) -> str:
    """O que define o ambiente: se mudar, o ambiente é recriado."""
    full = _python_version(python)
    requirements = [
        line.split("#")[0].strip()
        for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    ]
    parts = [
        f"python {full}",
        *(f"{n}{s}" for n, s in sorted(combo.pins.items())),
        *sorted(r for r in requirements if r),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _python_version(python: str | Path) -> str | None:
    proc = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_venv(combo: Combo, python: str, *, recreate: bool) -> tuple[Path, float]:
    """Cria, atualiza ou reaproveita o ambiente da combinação. Devolve (python, segundos).

    Receita igual: reaproveita. Receita diferente com o mesmo Python (um piso subiu, uma
    dependência entrou): atualiza no lugar, com o mesmo `pip install`. Python diferente,
    ambiente quebrado ou --recriar: apaga e cria de novo.
    """
    venv = CACHE / combo.name
    stamp = venv / ".receita"
    py = venv / "bin" / "python"
    key = recipe(combo, python)
    if not recreate and stamp.exists() and stamp.read_text().strip() == key:
        print(f"[{combo.name}] reaproveitando o ambiente {venv}", flush=True)
        return py, 0.0
    start = time.perf_counter()
    same_python = venv.exists() and _python_version(py) == _python_version(python)
    if venv.exists() and (recreate or not same_python):
        print(f"[{combo.name}] recriando {venv}", flush=True)
        shutil.rmtree(venv)
        same_python = False
    if same_python:
        print(f"[{combo.name}] a receita mudou: atualizando {venv}", flush=True)
    else:
        CACHE.mkdir(parents=True, exist_ok=True)
        # O pip que vem com esse Python, sem atualizar: é o pip que um aluno tem.
        _run([python, "-m", "venv", str(venv)])
    stamp.unlink(missing_ok=True)
    pins = venv / "pinos.txt"
    pins.write_text(
        "# Pinos da combinação (substituem as restrições globais do pip desta máquina).\n"
        + "".join(f"{n}{s}\n" for n, s in sorted(combo.pins.items())),
        encoding="utf-8",
    )
    # PIP_CONSTRAINT no ambiente (e não -c): substitui uma restrição global da máquina
    # (por exemplo, um teto para a versão do torch) em vez de somar-se a ela.
    env = dict(os.environ, PIP_CONSTRAINT=str(pins), PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([str(py), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements.txt")], env=env)
    stamp.write_text(key + "\n")
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    if not same_python:
        (venv / ".instalacao.json").write_text(
            json.dumps({"segundos": round(seconds), "bytes": size}), encoding="utf-8"
        )
    verb = "atualizado" if same_python else "criado"
    print(f"[{combo.name}] ambiente {verb} em {seconds:.0f} s ({size / 1e9:.1f} GB)", flush=True)
    return py, seconds


VERSIONS_SCRIPT = """
import json, sys
import matplotlib, numpy, pip, torch, tqdm
cuda = torch.version.cuda
print(json.dumps({
    "python": sys.version.split()[0],
    "torch": torch.__version__.split("+")[0],
    "build": f"CUDA {cuda}" if cuda else "CPU",
    "numpy": numpy.__version__,
    "matplotlib": matplotlib.__version__,
    "tqdm": tqdm.__version__,
    "pip": pip.__version__,
}))
"""


def versions(py: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(py), "-c", VERSIONS_SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_tests(combo: Combo, py: Path, pytest_args: list[str]) -> dict:
    """Roda o pytest (pacote + notebooks) no ambiente da combinação."""
    log = CACHE / combo.name / "ultimo_teste.log"
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [
            str(py), "-m", "pytest", *pytest_args, "-p", "no:cacheprovider",
            f"--junitxml={junit}",
        ]
        env = dict(os.environ)
        for key, value in ISOLATED_ENV.items():
            env.setdefault(key, value)
        # Os testes que conferem a tabela gravada se pulam: ela está sendo refeita agora.
        env["TPT_COMPAT_RUN"] = combo.name
        # O tpt desta pasta (não instalado no ambiente): vale também para o kernel do nbval.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        print("$", " ".join(cmd), flush=True)
        start = time.perf_counter()
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                fh.write(line)
            returncode = proc.wait()
        seconds = time.perf_counter() - start
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        if junit.exists():
            for suite in ET.parse(junit).getroot().iter("testsuite"):
                total = int(suite.get("tests", 0))
                failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
                skipped = int(suite.get("skipped", 0))
                counts["failed"] += failed
                counts["skipped"] += skipped
                counts["passed"] += total - failed - skipped
    ok = returncode == 0 and counts["failed"] == 0 and counts["passed"] > 0
    return {"ok": ok, "returncode": returncode, "seconds": seconds, **counts}


# ---------------------------------------------------------------- tabela de resultados

HEADER = (
    "| Combinação | Python | torch | build | numpy | matplotlib | tqdm | pip "
    "| resultado | tempo dos testes |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
)


def _fmt_seconds(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _numfmt():
    """tpt/numfmt.py carregado pelo caminho: este script roda num Python sem torch."""
    spec = importlib.util.spec_from_file_location("_tpt_numfmt", ROOT / "tpt" / "numfmt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # o @dataclass do módulo procura o módulo aqui
    spec.loader.exec_module(module)
    return module


fmt_count = _numfmt().fmt_count


def table_row(combo: Combo, info: dict[str, str], result: dict) -> str:
    verdict = (f"{fmt_count(result['passed'], 'aprovado', 'aprovados')}, "
               f"{fmt_count(result['failed'], 'reprovado', 'reprovados')}")
    if result["skipped"]:
        verdict += f", {fmt_count(result['skipped'], 'pulado', 'pulados')}"
    verdict = ("✅ " if result["ok"] else "❌ ") + verdict
    cells = [
        f"{combo.name} ({combo.description})",
        info["python"], info["torch"], info["build"], info["numpy"], info["matplotlib"],
        info["tqdm"], info["pip"], verdict, _fmt_seconds(result["seconds"]),
    ]
    return "| " + " | ".join(cells) + " |\n"


def read_rows(path: Path | None = None) -> dict[str, str]:
    """As linhas já gravadas, por combinação (a primeira palavra da primeira coluna)."""
    path = RESULTS if path is None else path
    rows = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            match = re.match(r"\| (\w+) \(", line)
            if match:
                rows[match.group(1)] = line
    return rows


def render_table(rows: dict[str, str], order: list[str]) -> str:
    ordered = [rows[n] for n in order if n in rows] + [
        line for n, line in rows.items() if n not in order
    ]
    return HEADER + "".join(ordered)


def write_results(rows: dict[str, str], order: list[str], machine: str) -> str:
    table = render_table(rows, order)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# Compatibilidade: o curso testado em outras versões de Python e torch\n\n"
        "Gerado por `make test-compat` (scripts/test_compat.py): em cada combinação, os\n"
        "testes do `tpt` e os notebooks (nbval), como em `make test`.\n"
        f"Última execução: {machine}.\n\n" + table,
        encoding="utf-8",
    )
    update_readme(table)
    return table


def update_readme(table: str, path: Path | None = None) -> bool:
    """Troca a tabela entre os marcadores do README (se eles existirem)."""
    path = README if path is None else path
    if not path.exists():
        return False
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        return False
    updated = pattern.sub(lambda _: f"{BEGIN}\n{table}{END}", text)
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return True


def machine_description() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = os.cpu_count() or 0
    today = dt.date.today().isoformat()
    return f"{today}, {cpu or 'CPU'} ({cores} núcleos), sem GPU"


# ------------------------------------------------------------------------ principal


def main(argv: list[str]) -> int:
    pytest_args = DEFAULT_PYTEST_ARGS
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1 :] or DEFAULT_PYTEST_ARGS
    all_combos = combos()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nomes", nargs="*", help=f"combinações ({', '.join(all_combos)})")
    parser.add_argument("--listar", action="store_true", help="mostra as combinações e sai")
    parser.add_argument("--recriar", action="store_true", help="recria os ambientes do zero")
    args = parser.parse_args(argv)
    names = args.nomes or list(all_combos)
    unknown = [n for n in names if n not in all_combos]
    if unknown:
        print(f"Combinação desconhecida: {', '.join(unknown)}. Existem: {', '.join(all_combos)}.")
        return 2
    if args.listar:
        for combo in all_combos.values():
            pins = " ".join(f"{n}{s}" for n, s in sorted(combo.pins.items())) or "(nada fixado)"
            print(f"{combo.name:8} Python {combo.python}  {pins}")
        return 0

    rows = read_rows()
    failures = []
    summary = []
    for name in names:
        combo = all_combos[name]
        python = find_python(combo.python)
        if python is None:
            var = f"TPT_PYTHON_{combo.python.replace('.', '_')}"
            print(
                f"[{name}] Python {combo.python} não encontrado: instale-o (por exemplo, "
                f"`pyenv install {combo.python}`) ou indique o executável em {var}."
            )
            failures.append(name)
            continue
        print(f"\n===== [{name}] {combo.description}: Python {combo.python} =====", flush=True)
        try:
            py, _ = ensure_venv(combo, python, recreate=args.recriar)
        except subprocess.CalledProcessError as err:
            print(f"[{name}] a instalação falhou (código {err.returncode}); veja acima.")
            failures.append(name)
            continue
        info = versions(py)
        result = run_tests(combo, py, pytest_args)
        rows[name] = table_row(combo, info, result)
        summary.append(rows[name])
        if not result["ok"]:
            failures.append(name)
    if summary:
        table = write_results(rows, list(all_combos), machine_description())
        print("\n" + table)
        print(f"Tabela gravada em {RESULTS.relative_to(ROOT)} e no README.")
    if failures:
        print(f"Falharam: {', '.join(failures)} (registros em .cache/compat/NOME/).")
        return 1
    print("Todas as combinações passaram.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
