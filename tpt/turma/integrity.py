"""Retrato das conferências antes do código do aluno, e a comparação depois.

Antes de qualquer célula do aluno, o processo da correção guarda a identidade de tudo de
que as conferências dependem: os verificadores de ``ex``, cada módulo ``tpt.*`` (seus
nomes e os objetos a que apontam), o código, os padrões e as variáveis de fechamento de
cada função desses módulos, ``builtins`` e os atributos de ``torch``,
``torch.nn.functional``, ``torch.Tensor`` e ``torch.nn.Module``. Depois das células (e
depois de cada conferência), qualquer diferença é "conferência alterada". Nomes novos
não contam (o PyTorch cria submódulos sob demanda); trocados ou apagados, sim.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import types
from pathlib import Path
from typing import Any

# Nomes que o próprio IPython troca ao rodar uma célula.
_VOLATILE = {"_", "__", "___", "exit", "quit", "get_ipython", "display", "__IPYTHON__"}
_MODULES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "math",
    "inspect",
    "functools",
    "contextlib",
    "io",
    "copy",
    "secrets",
    "random",
    "operator",
    "linecache",
    "traceback",
    "types",
    "ast",
    "re",
    "numpy",
)


def _function_state(fn: Any) -> tuple:
    closure = tuple(id(c.cell_contents) for c in (fn.__closure__ or ()) if _filled(c))
    return (
        id(fn.__code__),
        id(fn.__defaults__),
        id(fn.__kwdefaults__),
        closure,
        id(fn.__globals__),
    )


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _functions(namespace: dict, module_name: str) -> dict[str, Any]:
    """As funções de um módulo (e os métodos das suas classes), com os embrulhos."""
    found: dict[str, Any] = {}
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType):
            found[f"{module_name}.{name}"] = value
            wrapped = value
            depth = 0
            while depth < 3:
                inner = [c.cell_contents for c in (wrapped.__closure__ or ()) if _filled(c)]
                inner_fns = [f for f in inner if isinstance(f, types.FunctionType)]
                if not inner_fns:
                    break
                for k, f in enumerate(inner_fns):
                    found[f"{module_name}.{name}<{depth}.{k}>"] = f
                wrapped = inner_fns[0]
                depth += 1
        elif isinstance(value, type) and value.__module__ == module_name:
            for attr, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType):
                    found[f"{module_name}.{name}.{attr}"] = member
    return found


def _torch_wrapper_of(new: Any, old: Any) -> bool:
    """``new`` é um embrulho que o próprio PyTorch pôs em ``old``?

    Ao importar ``torch._dynamo`` (sob demanda), o PyTorch troca ``torch.manual_seed`` por
    ``torch._disable_dynamo(torch.manual_seed)``: outro objeto, com ``__wrapped__``
    apontando o original e código de dentro do pacote torch. Isso não é o aluno.
    """
    import torch

    code = getattr(new, "__code__", None)
    if code is None or not code.co_filename.startswith(_torch_dir(torch)):
        return False
    seen = 0
    while seen < 5 and hasattr(new, "__wrapped__"):
        new = new.__wrapped__
        seen += 1
        if new is old:
            return True
    return False


def _torch_dir(torch: Any) -> str:
    return str(Path(torch.__file__).resolve().parent)


class Snapshot:
    """Identidades guardadas antes do código do aluno."""

    def __init__(self, checks: Any, check_names: list[str]) -> None:
        self.checks = checks
        self.callables = {name: getattr(checks, name) for name in check_names}
        self.check_dict = dict(vars(checks))
        self.namespaces: dict[str, dict[str, int]] = {}
        self.functions: dict[str, tuple[Any, tuple]] = {}
        for name in _MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
        # As cópias mantêm vivos os objetos: um id guardado não é reaproveitado por outro.
        self._kept = self._watched()
        for label, namespace in self._kept.items():
            self.namespaces[label] = {k: id(v) for k, v in namespace.items()}
        for module_name in self._tpt_modules():
            namespace = vars(sys.modules[module_name])
            for label, fn in _functions(namespace, module_name).items():
                self.functions[label] = (fn, _function_state(fn))
        for name, fn in self.callables.items():
            for label, inner in _functions({name: fn}, "ex").items():
                self.functions[label] = (inner, _function_state(inner))

    @staticmethod
    def _tpt_modules() -> list[str]:
        return sorted(
            name
            for name, module in list(sys.modules.items())
            if module is not None
            and (name == "tpt" or name.startswith("tpt."))
            and not name.startswith("tpt.turma")
        )

    def _watched(self) -> dict[str, dict]:
        watched: dict[str, dict] = {
            "builtins": {k: v for k, v in vars(builtins).items() if k not in _VOLATILE}
        }
        for name in (*_MODULES, *self._tpt_modules()):
            module = sys.modules.get(name)
            if module is not None:
                watched[name] = dict(vars(module))
        import torch

        watched["torch.Tensor"] = dict(vars(torch.Tensor))
        watched["torch.nn.Module"] = dict(vars(torch.nn.Module))
        watched["torch._C.TensorBase"] = dict(vars(torch._C.TensorBase))
        return watched

    def changes(self, namespace: dict) -> list[str]:
        """O que mudou desde o retrato (lista vazia: nada)."""
        found = []
        if namespace.get("ex") is not self.checks:
            found.append("`ex` foi trocado por outro objeto")
        if dict(vars(self.checks)).keys() != self.check_dict.keys() or any(
            vars(self.checks).get(k) is not v for k, v in self.check_dict.items()
        ):
            found.append("um verificador de `ex` foi trocado")
        for name, fn in self.callables.items():
            if getattr(self.checks, name, None) is not fn:
                found.append(f"`ex.{name}` foi trocado")
        watched = self._watched()
        for label, before in self.namespaces.items():
            now = watched.get(label, {})
            for key, ident in before.items():
                if key not in now:
                    found.append(f"`{label}.{key}` foi apagado")
                elif id(now[key]) != ident and not _torch_wrapper_of(
                    now[key], self._kept[label][key]
                ):
                    found.append(f"`{label}.{key}` foi trocado")
        for label, (fn, state) in self.functions.items():
            if _function_state(fn) != state:
                found.append(f"o código de `{label}` foi alterado")
        return sorted(set(found))
