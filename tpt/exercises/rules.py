"""Regras dos enunciados verificadas pelo que **executa**, não pelos nomes no código.

"Não use softmax", "uma chamada de atenção", "sem laços": a conferência grava as
operações do PyTorch (ATen) que rodaram durante a chamada da resposta, com um
``TorchDispatchMode``. Um ``torch.softmax`` guardado num argumento padrão, embrulhado
num ``functools.partial`` ou chamado como ``torch._softmax`` ou
``torch.ops.aten._softmax`` chega ao mesmo núcleo ``_softmax`` e é visto do mesmo
jeito; um laço escondido num ``map``, numa compreensão ou numa função auxiliar faz o
número de operações crescer com o tamanho da entrada, e é isso que se mede. Um laço que
foge do PyTorch (uma compreensão sobre ``tolist()`` terminada em ``torch.tensor``, um
laço em numpy terminado em ``torch.from_numpy``) aparece nas linhas de Python do aluno e
nos dados levados para fora do tensor, que :func:`op_counts_by_size` também mede.

:func:`record_modules` vê as camadas prontas pelo código dos seus métodos (uma chamada
direta ``Classe.forward(camada, ...)`` também conta); :func:`code_kind` diz de onde vem
um código (biblioteca, máquina, conferência ou aluno), para as guardas de ``guards``.

Exemplo::

    with record_ops() as ops:
        out = answer(scores)
    expect(not ops.used(*SOFTMAX_OPS), "o exercício pede o softmax escrito por você")
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tpt.exercises.messages import ExerciseError

__all__ = [
    "SOFTMAX_OPS",
    "ATTENTION_KERNEL_OPS",
    "REPEAT_OPS",
    "OpRecord",
    "record_ops",
    "op_counts_by_size",
    "record_python_calls",
    "functions_from_file",
    "watch_autograd",
    "record_torch_calls",
    "record_modules",
    "code_kind",
    "chain_profile",
    "LIBRARY",
    "MACHINERY",
    "CHECK",
    "STUDENT",
]

# Núcleos ATen que fazem um softmax (qualquer caminho do Python chega a um deles).
SOFTMAX_OPS = frozenset({"_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax"})

# Núcleos fundidos de atenção (F.scaled_dot_product_attention e nn.MultiheadAttention
# chegam a um deles, conforme o dispositivo e a versão do torch).
ATTENTION_KERNEL_OPS = frozenset(
    {
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
        "_scaled_dot_product_attention_math_for_mps",
        "_native_multi_head_attention",
        "_fused_sdp_choice",
    }
)

# Operações que copiam um tensor ao longo de um eixo (repetir K e V, por exemplo).
REPEAT_OPS = frozenset(
    {"repeat", "repeat_interleave", "index_select", "index", "gather", "cat", "stack", "tile"}
)


class OpRecord:
    """As operações ATen que rodaram dentro de ``record_ops``, com quantas vezes cada uma."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        # (nome, forma) de cada tensor novo que uma operação produziu (vistas de fora):
        # serve para regras como "sem materializar K repetido" (forma (b, h, s, d_h)).
        self.outputs: list[tuple[str, tuple[int, ...]]] = []

    @property
    def total(self) -> int:
        """Número total de operações executadas."""
        return sum(self.counts.values())

    def used(self, *names: str | Iterable[str]) -> set[str]:
        """Quais dos nomes (ou conjuntos de nomes) rodaram pelo menos uma vez."""
        return {name for name in _flatten(names) if self.counts.get(name, 0) > 0}

    def materialized(self, shape: tuple[int, ...]) -> set[str]:
        """Operações que criaram (não só viram) um tensor com exatamente essa forma."""
        return {name for name, out_shape in self.outputs if out_shape == tuple(shape)}

    def count(self, *names: str | Iterable[str]) -> int:
        """Quantas vezes os nomes dados rodaram, somados."""
        return sum(self.counts.get(name, 0) for name in _flatten(names))

    def __repr__(self) -> str:
        return f"OpRecord({dict(self.counts)})"


class _Recorder(TorchDispatchMode):
    def __init__(self, record: OpRecord) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        self.record.counts[name] += 1
        out = func(*args, **(kwargs or {}))
        if not _is_view(func):
            for tensor in _tensors(out):
                self.record.outputs.append((name, tuple(tensor.shape)))
        return out


@contextlib.contextmanager
def record_ops() -> Iterator[OpRecord]:
    """Grava o nome de cada operação ATen executada no bloco (``"_softmax"``, ``"mm"``...).

    Vale para qualquer dispositivo; funções compostas (``F.softmax``, ``torch.matmul``)
    aparecem pelos núcleos a que chegam. Operações do ``backward`` contam se o
    ``backward`` rodar dentro do bloco.
    """
    record = OpRecord()
    with _Recorder(record):
        yield record


def op_counts_by_size(
    fn: Callable[..., Any],
    make_args: Callable[[int], tuple[Any, ...]],
    sizes: tuple[int, int],
    *,
    python_work: bool = True,
) -> tuple[int, int]:
    """Quantas operações ``fn(*make_args(n))`` executa em cada um dos dois tamanhos.

    Uma resposta vetorizada executa o mesmo número de operações em qualquer tamanho; um
    laço em Python sobre as posições (``for``, ``map``, compreensão, função auxiliar) faz
    o número crescer com ``n``. Use ``sizes`` bem diferentes, por exemplo ``(5, 11)``, e
    sem eixos de tamanho 1 (com um eixo de tamanho 1, ``expand`` + ``reshape`` vira uma
    vista e a contagem muda sem laço nenhum).

    "Sem laços" vale também fora do PyTorch: com ``python_work`` (o padrão), quando a
    contagem de operações não cresce, mede-se ainda (1) o trabalho em Python do código do
    aluno (linhas e chamadas executadas fora das bibliotecas e da conferência) e (2) os
    dados levados do tensor para o Python ou o numpy (``tolist``, ``numpy``, ``item``...,
    em número de elementos). Se um dos dois cresce com o tamanho, levanta
    :class:`~tpt.exercises.core.ExerciseError` com a medida: um laço sobre ``tolist()``
    terminado em ``torch.tensor(...)``, ou um laço em numpy terminado em
    ``torch.from_numpy``, roda o mesmo número de operações do PyTorch e seria aceito.
    """
    counts, lines, exported = [], [], []
    if python_work:
        _warm_up_dispatch()
    for n in sizes:
        args = make_args(n)
        if python_work:
            with _PythonWork() as work, _Exports() as out, record_ops() as ops:
                fn(*args)
            lines.append(work.events)
            exported.append(out.elements)
        else:
            with record_ops() as ops:
                fn(*args)
        counts.append(ops.total)
    if python_work and counts[0] == counts[1]:
        _expect_no_python_growth(sizes, lines, exported)
    return counts[0], counts[1]


_WARM: list[bool] = []


def _warm_up_dispatch() -> None:
    """Roda uma operação sob ``record_ops`` uma vez por processo, fora do rastreamento.

    A primeira operação sob um ``TorchDispatchMode`` importa boa parte do PyTorch (alguns
    segundos); com o ``sys.settrace`` da medida ligado, essa importação seria muito mais
    lenta. O aquecimento não muda nenhuma contagem.
    """
    if not _WARM:
        with record_ops():
            torch.ones(1) + 1
        _WARM.append(True)


def _expect_no_python_growth(
    sizes: tuple[int, int], lines: list[int], exported: list[dict[str, int]]
) -> None:
    small, large = (sum(e.values()) for e in exported)
    if large > small:
        names = ", ".join(sorted(set(exported[0]) | set(exported[1])))
        raise ExerciseError(
            "Sem laços: a conferência rodou sua função em dois tamanhos de entrada e, no "
            f"maior, ela passou mais dados dos tensores para o Python ou o numpy ({names}: "
            f"{small} elemento(s) no tamanho menor, {large} no maior). Trabalhar nos números "
            "fora do PyTorch, mesmo voltando a um tensor no fim (torch.tensor, "
            "torch.from_numpy), é um laço escondido: faça a conta inteira em tensores do "
            "PyTorch, de uma vez."
        )
    if lines[1] > lines[0]:
        raise ExerciseError(
            "Sem laços: a conferência rodou sua função em dois tamanhos de entrada e o "
            f"trabalho em Python do seu código cresceu com o tamanho ({lines[0]} linhas e "
            f"chamadas executadas no menor, {lines[1]} no maior), embora o número de "
            "operações do PyTorch não mude: há um laço em Python ou numpy (for, while, "
            "compreensão, map) sobre os dados. Faça a conta inteira em tensores do PyTorch, "
            "de uma vez."
        )


class _PythonWork:
    """Conta as linhas e chamadas executadas no código do aluno (``sys.settrace``)."""

    def __init__(self) -> None:
        self.events = 0

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.events += 1
        return self._local

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if code_kind(frame.f_code.co_filename) is not STUDENT:
            return None  # bibliotecas e conferência: sem rastrear linhas
        self.events += 1
        return self._local

    def __enter__(self) -> _PythonWork:
        previous = sys.gettrace()
        self._previous = previous if callable(previous) else None
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)


# Saídas do PyTorch para o Python ou o numpy: quantos elementos cada uma leva.
_EXPORT_ALL = frozenset({"tolist", "numpy", "__array__"})
_EXPORT_ONE = frozenset({"item", "__int__", "__float__", "__index__", "__bool__", "__complex__"})


class _Exports(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.elements: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = getattr(func, "__name__", "")
        if name in _EXPORT_ALL and args and isinstance(args[0], Tensor):
            self.elements[name] += args[0].numel()
        elif name in _EXPORT_ONE:
            self.elements[name] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def record_python_calls() -> Iterator[set[types.CodeType]]:
    """O código (``__code__``) de cada função Python executada no bloco (``sys.setprofile``).

    Para regras como "não use ``tpt.sliding_window_mask``" ou "não chame o módulo pronto":
    uma função é reconhecida pelo seu código, qualquer que seja o nome pelo qual foi
    chamada (apelido, argumento padrão, ``functools.partial``, ``mha(...)``).
    """
    seen: set[types.CodeType] = set()

    def listener(frame: types.FrameType) -> None:
        seen.add(frame.f_code)

    with chain_profile(listener):
        yield seen


@contextlib.contextmanager
def chain_profile(listener: Callable[[types.FrameType], None]) -> Iterator[None]:
    """Chama ``listener(frame)`` a cada função Python que começa a rodar no bloco.

    Encadeia com o perfil que já estiver ligado (o da guarda de :func:`exercise`, ou o
    de outro ``record_*`` por fora): os dois continuam vendo tudo.
    """
    previous = sys.getprofile()
    # Um perfilador em C (cProfile) aparece como um objeto que o Python não chama: fica de fora.
    chained = previous if callable(previous) else None

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            listener(frame)
        if chained is not None:
            chained(frame, event, arg)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(chained)


def functions_from_file(codes: Iterable[types.CodeType], path: str) -> set[str]:
    """Nomes das funções definidas no arquivo ``path`` entre os códigos gravados."""
    target = str(Path(path).resolve())
    codes = tuple(codes)  # cópia: dentro do bloco gravado, o próprio laço abaixo é gravado
    return {
        getattr(code, "co_qualname", code.co_name) for code in codes if code.co_filename == target
    }


@contextlib.contextmanager
def watch_autograd() -> Iterator[list[int]]:
    """Conta os tensores que o autograd guarda para um ``backward`` durante o bloco.

    "Sem autograd" pelo que roda: toda operação que entra num grafo do autograd guarda as
    suas entradas (``saved_tensors_hooks`` vê cada uma), qualquer que seja o caminho
    (``requires_grad_``, ``torch.enable_grad``, uma função auxiliar). ``torch.func`` se
    recusa a rodar com esses ganchos ligados (a conferência explica isso ao aluno).
    """
    saved = [0]

    def pack(tensor: Any) -> Any:
        saved[0] += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield saved


class _TorchCalls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def record_torch_calls() -> Iterator[set[str]]:
    """Nomes das funções da API Python do torch chamadas no bloco (``tolist``, ``numpy``...).

    Complementa :func:`record_ops` para o que não chega a ser uma operação ATen, como
    sair do PyTorch por ``Tensor.tolist`` ou ``Tensor.numpy``.
    """
    mode = _TorchCalls()
    with mode:
        yield mode.names


@contextlib.contextmanager
def record_modules() -> Iterator[set[type]]:
    """As classes dos ``nn.Module`` cujo código rodou no bloco.

    Duas vias: um gancho global vê cada ``módulo(...)`` (a classe do objeto chamado), e o
    perfil vê o código de cada método executado, qualquer que seja o caminho: uma
    chamada direta ``DecoderLayer.forward(camada, ...)``, ``Classe._sa_block(...)`` ou um
    método qualquer definido na classe conta para a classe que o definiu. Os métodos do
    próprio ``nn.Module`` (``__call__``, ``__setattr__``...) não contam, nem construir a
    camada (``__init__``).
    """
    seen: set[type] = set()
    owners = _module_methods()

    def listener(frame: types.FrameType) -> None:
        owner = owners.get(frame.f_code)
        if owner is not None:
            seen.add(owner)

    handle = nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: seen.add(type(module))
    )
    try:
        with chain_profile(listener):
            yield seen
    finally:
        handle.remove()


def _module_methods() -> dict[types.CodeType, type]:
    """``{código de um método: classe que o define}`` para as subclasses de ``nn.Module``."""
    classes = _module_subclasses()
    key = len(classes)
    if _METHODS_CACHE.get("key") != key:
        owners: dict[types.CodeType, type] = {}
        for cls in classes:
            for name, value in vars(cls).items():
                if name in _NOT_RUNNING:
                    continue
                for code in _codes(value):
                    owners.setdefault(code, cls)
        _METHODS_CACHE.clear()
        _METHODS_CACHE.update(key=key, owners=owners)
    return _METHODS_CACHE["owners"]


_METHODS_CACHE: dict[str, Any] = {}
# Construir (ou mostrar) uma camada não é rodá-la.
_NOT_RUNNING = frozenset({"__init__", "__new__", "__repr__", "extra_repr", "__setstate__"})


def _module_subclasses() -> list[type]:
    found, stack = [], list(nn.Module.__subclasses__())
    seen: set[type] = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def _codes(value: Any) -> Iterator[types.CodeType]:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        for part in (value.fget, value.fset, value.fdel):
            yield from _codes(part)
        return
    if isinstance(value, functools.partialmethod):
        value = value.func
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        yield code


# --------------------------------------------------------------------------------------
# De onde vem o código que roda: biblioteca, máquina das conferências, conferência, aluno
# --------------------------------------------------------------------------------------
LIBRARY = "biblioteca"  # Python, PyTorch, numpy, pacotes instalados e o tpt fora daqui
MACHINERY = "máquina"  # messages, rules, integrity, guards, core e __init__ desta pasta
CHECK = "conferência"  # os módulos de cada notebook (masks.py, attention.py...)
STUDENT = "aluno"  # todo o resto: células do notebook, testes, código do aluno

_HERE = Path(__file__).resolve().parent
_MACHINERY_FILES = frozenset(
    _HERE / name
    for name in ("messages.py", "rules.py", "integrity.py", "guards.py", "core.py", "__init__.py")
)


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    for module in (torch, np_module()):
        if module is not None:
            roots.add(str(Path(module.__file__).resolve().parent))
    roots.add(str(_HERE.parent))  # o pacote tpt (a pasta das conferências é tratada antes)
    return tuple(os.path.realpath(root) + os.sep for root in roots)


def np_module() -> Any:
    """O numpy, se instalado (``None`` se não)."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - o numpy vem com o torch
        return None
    return numpy


@functools.cache
def code_kind(filename: str) -> str:
    """De onde vem o código de ``filename``: :data:`LIBRARY`, :data:`MACHINERY`,
    :data:`CHECK` (um módulo de conferência de notebook) ou :data:`STUDENT`.

    As guardas usam isso para distinguir o código do aluno (a célula do notebook, que roda
    sob as regras) do código de bibliotecas (transparente) e da própria conferência.
    """
    if filename.startswith("<frozen "):
        return LIBRARY
    if filename.startswith("<"):
        return STUDENT
    path = Path(os.path.realpath(filename))
    if path.parent == _HERE:
        return MACHINERY if path in _MACHINERY_FILES else CHECK
    if str(path).startswith(_LIBRARY_ROOTS):
        return LIBRARY
    return STUDENT


_LIBRARY_ROOTS = _library_roots()


def _is_view(func: Any) -> bool:
    schema = func._schema
    return any(arg.alias_info is not None and not arg.alias_info.is_write for arg in schema.returns)


def _tensors(out: Any) -> Iterator[Tensor]:
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            yield from _tensors(item)


def _flatten(names: tuple[str | Iterable[str], ...]) -> Iterator[str]:
    for name in names:
        if isinstance(name, str):
            yield name
        else:
            yield from name
