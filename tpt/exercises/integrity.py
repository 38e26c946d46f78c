"""O retrato do que as conferências usam, e a comparação depois do código do aluno.

Um :class:`Snapshot` guarda a identidade de tudo de que as conferências dependem: cada
módulo ``tpt.*`` (seus nomes e os objetos a que apontam: os auxiliares como
``_expect_mask`` ou ``expect_close``), o código, os padrões e as variáveis de fechamento
de cada função desses módulos, ``builtins`` e os atributos de ``torch``,
``torch.nn.functional``, ``torch.Tensor`` e ``torch.nn.Module``; com ``checks``, também
os verificadores de ``ex``. :meth:`Snapshot.changes` diz o que foi trocado ou apagado
desde então, e os nomes novos que escondem outro: um método acrescentado a
``torch.Tensor`` que esconde o de ``TensorBase``, ou um nome global novo num módulo que
esconde um de ``builtins``. Nomes novos que não escondem nada não contam (o PyTorch e o
``import`` criam submódulos sob demanda; o ``transformers`` acrescenta métodos a
``nn.Module``).

O mesmo retrato serve a três lugares:

- a correção de uma turma (``python -m tpt.turma corrigir``) o tira antes das células do
  aluno e o confere antes e depois de cada conferência;
- as células de nota do nbgrader: a célula travada de importação chama :func:`take` e
  cada célula de nota chama :func:`verify` antes da conferência;
- a guarda das conferências no notebook (:func:`tpt.exercises.guards.sandbox`) o tira no
  começo da conferência e o confere a cada vez que a resposta devolve o controle, para
  que uma resposta que troca uma peça da conferência (e a restaura depois) seja recusada.

Limites conhecidos (fora do escopo): código que lê o quadro (*frame*) da conferência em
andamento, ou que roda uma cópia do código-fonte da conferência, não troca nada e não
aparece aqui.
"""

from __future__ import annotations

import builtins
import importlib
import itertools
import operator
import sys
import types
from pathlib import Path
from typing import Any

from tpt.exercises.messages import ExerciseError

__all__ = ["Snapshot", "IntegrityError", "take", "taken", "verify", "describe"]

# Nomes que o próprio IPython troca ao rodar uma célula (o núcleo do Jupyter também troca
# ``input`` a cada execução, para pedir a entrada ao navegador).
_VOLATILE = {"_", "__", "___", "exit", "quit", "get_ipython", "display", "__IPYTHON__", "input"}
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
_MISSING = object()
_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__", "__globals__")
# Classes vigiadas: um nome novo nelas que esconde o de uma classe base muda o que roda.
_CLASSES = ("torch.Tensor", "torch.nn.Module", "torch._C.TensorBase")


def _shadows(label: str, name: str) -> bool:
    """Um nome novo em ``label`` esconde outro (de uma classe base, ou de ``builtins``)?"""
    if label == "builtins":
        return False
    if label in _CLASSES:
        torch = sys.modules["torch"]
        cls = {
            "torch.Tensor": torch.Tensor,
            "torch.nn.Module": torch.nn.Module,
            "torch._C.TensorBase": torch._C.TensorBase,
        }[label]
        return any(name in vars(base) for base in cls.__mro__[1:])
    return name in vars(builtins)


class IntegrityError(ExerciseError):
    """Algo de que as conferências dependem foi trocado depois do retrato."""


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _function_state(fn: Any) -> tuple:
    closure = tuple(id(c.cell_contents) for c in (fn.__closure__ or ()) if _filled(c))
    return (
        id(fn.__code__),
        id(fn.__defaults__),
        id(fn.__kwdefaults__),
        closure,
        id(fn.__globals__),
    )


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


def _tpt_modules() -> list[str]:
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if module is not None
        and (name == "tpt" or name.startswith("tpt."))
        and not name.startswith("tpt.turma")
    )


def _watched() -> dict[str, dict]:
    """Cópias rasas dos espaços de nomes vigiados, agora."""
    watched: dict[str, dict] = {
        "builtins": {k: v for k, v in vars(builtins).items() if k not in _VOLATILE}
    }
    for name in (*_MODULES, *_tpt_modules()):
        module = sys.modules.get(name)
        if module is not None:
            watched[name] = dict(vars(module))
    torch = sys.modules["torch"]
    watched["torch.Tensor"] = dict(vars(torch.Tensor))
    watched["torch.nn.Module"] = dict(vars(torch.nn.Module))
    watched["torch._C.TensorBase"] = dict(vars(torch._C.TensorBase))
    return watched


def _live(label: str) -> Any:
    """O espaço de nomes vigiado ``label`` como está agora (sem cópia), ou ``None``."""
    if label == "builtins":
        return vars(builtins)
    if label in _CLASSES:
        torch = sys.modules["torch"]
        return vars(
            {
                "torch.Tensor": torch.Tensor,
                "torch.nn.Module": torch.nn.Module,
                "torch._C.TensorBase": torch._C.TensorBase,
            }[label]
        )
    module = sys.modules.get(label)
    return None if module is None else vars(module)


class Snapshot:
    """Identidades guardadas antes do código do aluno.

    ``checks``: o objeto ``ex`` do notebook (opcional); ``check_names``: os verificadores
    dele que serão chamados (padrão: todos).
    """

    def __init__(self, checks: Any = None, check_names: list[str] | None = None) -> None:
        self.checks = checks
        if check_names is None:
            check_names = list(getattr(checks, "_names", ())) if checks is not None else []
        self.callables = {name: getattr(checks, name) for name in check_names}
        self.check_dict = dict(vars(checks)) if checks is not None else {}
        for name in _MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
        # As cópias mantêm vivos os objetos: um id guardado não é reaproveitado por outro.
        self._kept = _watched()
        self.functions: dict[str, tuple[Any, tuple]] = {}
        for module_name in _tpt_modules():
            namespace = vars(sys.modules[module_name])
            for label, fn in _functions(namespace, module_name).items():
                self.functions[label] = (fn, _function_state(fn))
        for name, fn in self.callables.items():
            for label, inner in _functions({name: fn}, "ex").items():
                self.functions[label] = (inner, _function_state(inner))
        self._baseline()

    def _baseline(self) -> None:
        """O ponto de partida da comparação rápida (:meth:`_same`), com os objetos de agora."""
        now = _watched()
        self._keys = {label: tuple(now.get(label, {})) for label in self._kept}
        self._values = {
            label: [now.get(label, {}).get(k, _MISSING) for k in keys]
            for label, keys in self._keys.items()
        }
        fns = [fn for fn, _ in self.functions.values()]
        self._fns = fns
        self._parts = {part: [getattr(fn, part) for fn in fns] for part in _FUNCTION_PARTS}
        self._cells = [c for fn in fns for c in (fn.__closure__ or ()) if _filled(c)]
        self._contents = [c.cell_contents for c in self._cells]

    def _same(self) -> bool:
        """Tudo igual ao ponto de partida? (só identidades, em laços do próprio Python em C,
        direto nos espaços de nomes, sem copiá-los)"""
        for label, keys in self._keys.items():
            current = _live(label)
            if current is None:
                return False
            if label != "builtins" and len(current) != len(keys):
                return False
            values = map(current.get, keys, itertools.repeat(_MISSING))
            if not all(map(operator.is_, values, self._values[label])):
                return False
        for part, before in self._parts.items():
            if not all(map(operator.is_, map(operator.attrgetter(part), self._fns), before)):
                return False
        try:
            contents = list(map(operator.attrgetter("cell_contents"), self._cells))
        except ValueError:  # uma variável de fechamento foi apagada
            return False
        return all(map(operator.is_, contents, self._contents))

    def _checks_changes(self, namespace: dict | None) -> list[str]:
        found = []
        if namespace is not None and namespace.get("ex") is not self.checks:
            found.append("`ex` foi trocado por outro objeto")
        if self.checks is None:
            return found
        if dict(vars(self.checks)).keys() != self.check_dict.keys() or any(
            vars(self.checks).get(k) is not v for k, v in self.check_dict.items()
        ):
            found.append("um verificador de `ex` foi trocado")
        for name, fn in self.callables.items():
            if getattr(self.checks, name, None) is not fn:
                found.append(f"`ex.{name}` foi trocado")
        return found

    def changes(self, namespace: dict | None = None) -> list[str]:
        """O que mudou desde o retrato (lista vazia: nada).

        ``namespace``: o do notebook, para conferir também que ``ex`` é o mesmo objeto.
        """
        found = self._checks_changes(namespace)
        if self._same():
            return sorted(set(found))
        watched = _watched()
        for label, before in self._kept.items():
            now = watched.get(label, {})
            for key, value in before.items():
                if key not in now:
                    found.append(f"`{label}.{key}` foi apagado")
                elif now[key] is not value and not _torch_wrapper_of(now[key], value):
                    found.append(f"`{label}.{key}` foi trocado")
            for key in now.keys() - before.keys():
                if _shadows(label, key):
                    found.append(f"`{label}.{key}` foi acrescentado")
        for label, (fn, state) in self.functions.items():
            if _function_state(fn) != state:
                found.append(f"o código de `{label}` foi alterado")
        if not found:
            # Só embrulhos do próprio PyTorch: a comparação rápida parte de agora.
            self._baseline()
        return sorted(set(found))


def describe(changes: list[str], limit: int = 4) -> str:
    """As mudanças em uma frase (as primeiras ``limit`` e quantas mais)."""
    shown = "; ".join(changes[:limit])
    more = len(changes) - limit
    return shown + (f" (e mais {more})" if more > 0 else "")


# O retrato tirado pela célula travada de importação (nbgrader). Um contêiner, não um nome
# reatribuído: os nomes deste módulo também estão no retrato.
_TAKEN: list[Snapshot] = []


def take(checks: Any) -> None:
    """Tira o retrato de agora (antes do código do aluno) e o guarda para :func:`verify`."""
    _TAKEN[:] = [Snapshot(checks)]


def taken() -> Snapshot | None:
    """O retrato guardado por :func:`take` (``None`` se não houve)."""
    return _TAKEN[0] if _TAKEN else None


def verify(namespace: dict | None = None) -> None:
    """Levanta :class:`IntegrityError` se algo do retrato de :func:`take` foi trocado.

    ``namespace``: o do notebook (``globals()``), para conferir também o ``ex``.
    """
    snapshot = taken()
    if snapshot is None:
        raise IntegrityError(
            "conferência alterada: o retrato das conferências, tirado pela célula travada de "
            "importação, não existe (a célula não rodou, ou o notebook o apagou)."
        )
    changes = snapshot.changes(namespace)
    if changes:
        raise IntegrityError(
            "conferência alterada: o notebook mexeu no que as conferências usam "
            f"({describe(changes)}). A nota não vale com a conferência trocada: apague as "
            "trocas e entregue de novo."
        )
