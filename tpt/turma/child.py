"""O processo que corrige UM notebook entregue (``python -m tpt.turma.child FD``).

Recebe o trabalho em JSON pela entrada padrão e devolve eventos, um JSON por linha, pelo
descritor ``FD`` que o processo pai abriu (um cano só dele; a saída padrão e a de erros
ficam para o aluno). Ordem:

1. roda o código confiável tirado do notebook do curso (importações, parâmetros);
2. guarda o retrato das conferências (:mod:`tpt.turma.integrity`) e os verificadores;
3. roda as células de código do aluno da seção de exercícios, uma a uma, menos as de
   conferência, anotando qual levantou o quê;
4. para cada exercício, confere o retrato e chama o verificador GUARDADO no passo 2 com
   a função do aluno, lendo a linha ✅/❌/⏳ que ele imprime e o booleano que devolve.

O pai mede o tempo e a memória (limites do sistema) e trata o processo que morre.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import sys
import time
import traceback
from typing import Any

MARKS = ("✅", "❌", "⏳")
MEMORY_HINTS = (
    "MemoryError",
    "can't allocate memory",
    "not enough memory",
    "DefaultCPUAllocator",
    "std::bad_alloc",
    "Cannot allocate memory",
)


class Channel:
    """O cano para o pai: uma linha JSON por evento, gravada na hora."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1)

    def send(self, **event: Any) -> None:
        event["t"] = round(time.monotonic(), 2)
        self._file.write(json.dumps(event, ensure_ascii=False) + "\n")
        self._file.flush()


def _shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    return shell


def _run(shell: Any, source: str, name: str) -> BaseException | None:
    """Roda uma célula no namespace do IPython; devolve a exceção (ou None)."""
    try:
        code = shell.transform_cell(source)
        filename = f"<{name}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        compiled = compile(code, filename, "exec")
        with shell.builtin_trap:
            exec(compiled, shell.user_ns)
    except BaseException as err:  # noqa: BLE001 — SystemExit e KeyboardInterrupt também
        return err
    return None


def _describe(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"chamou sys.exit({err.code!r})"
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return f"levantou {text.splitlines()[-1] if text else type(err).__name__}"


def _is_memory(text: str) -> bool:
    return any(hint in text for hint in MEMORY_HINTS)


def _peak() -> int:
    """O pico do espaço de endereços deste processo (bytes; 0 se o sistema não diz)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _near_limit(before: int) -> bool:
    """O pico subiu até perto do limite de memória (90%) desde ``before``?

    Uma conferência pode pegar o erro de alocação da resposta e explicar só "sua função
    levantou RuntimeError"; o pico do processo mostra que foi a memória que acabou.
    """
    import resource

    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    now = _peak()
    return limit > 0 and now > before and now >= 0.9 * limit


def _verdict(returned: Any, printed: str) -> tuple[str, str]:
    lines = [line for line in printed.splitlines() if line.startswith(MARKS)]
    line = lines[-1] if lines else ""
    if returned is True and line.startswith("✅"):
        return "certo", line
    if not line:
        return "erro", "a conferência não imprimiu o veredito (a saída foi desviada?)"
    if line.startswith("⏳"):
        return "pendente", line
    if line.startswith("✅"):  # imprimiu ✅ sem devolver True: algo imitou o verificador
        return "conferência alterada", "a conferência devolveu False depois de imprimir ✅"
    if "sua resposta levantou" in line:
        return ("memória esgotada" if _is_memory(line) else "erro"), line
    return "errado", line


def main(fd: int) -> None:
    channel = Channel(fd)
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    shell = _shell()
    ns = shell.user_ns
    for k, source in enumerate(job["prelude"]):
        err = _run(shell, source, f"curso-{k}")
        if err is not None:
            channel.send(kind="fatal", message=f"o código do curso {_describe(err)}")
            return
    from tpt.turma.integrity import Snapshot

    checks = ns["ex"]
    exercises = job["exercises"]
    snapshot = Snapshot(checks, [e["check_name"] for e in exercises])
    channel.send(kind="ready")

    for cell in job["cells"]:
        channel.send(kind="cell", index=cell["index"])
        before = _peak()
        err = _run(shell, cell["source"], f"célula-{cell['index']}")
        if err is not None:
            memory = isinstance(err, MemoryError) or _is_memory(str(err)) or _near_limit(before)
            channel.send(
                kind="cell_error",
                index=cell["index"],
                exercise=cell["exercise"],
                memory=memory,
                exit=isinstance(err, SystemExit),
                message=_describe(err),
            )

    for exercise in exercises:
        number = exercise["number"]
        channel.send(kind="start", exercise=number)
        changes = snapshot.changes(ns)
        if changes:
            channel.send(kind="tampered", exercise=number, changes=changes)
            continue
        function = ns.get(exercise["function_name"])
        if function is None:
            channel.send(
                kind="result",
                exercise=number,
                situacao="erro",
                mensagem=f"a função `{exercise['function_name']}` não está definida "
                "no notebook entregue (apagada ou com outro nome?)",
            )
            continue
        buffer = io.StringIO()
        check = snapshot.callables[exercise["check_name"]]
        before = _peak()
        try:
            with contextlib.redirect_stdout(buffer):
                returned = check(function)
        except BaseException as err:  # noqa: BLE001 — a resposta chamou sys.exit, por exemplo
            situacao = "memória esgotada" if isinstance(err, MemoryError) else "erro"
            channel.send(
                kind="result",
                exercise=number,
                situacao=situacao,
                mensagem=f"a função, chamada pela conferência, {_describe(err)}",
            )
            continue
        changes = snapshot.changes(ns)
        if changes:
            channel.send(kind="tampered", exercise=number, changes=changes)
            continue
        situacao, message = _verdict(returned, buffer.getvalue())
        if situacao in ("errado", "erro") and (_near_limit(before) or _is_memory(message)):
            situacao = "memória esgotada"
            message = f"a resposta passou do limite de memória da correção; {message}"
        channel.send(kind="result", exercise=number, situacao=situacao, mensagem=message)
    channel.send(kind="done")


if __name__ == "__main__":
    main(int(sys.argv[1]))
