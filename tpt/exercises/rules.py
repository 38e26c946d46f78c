"""Regras dos enunciados verificadas pelo que **executa**, não pelos nomes no código.

"Não use softmax", "uma chamada de atenção", "sem laços": a conferência grava as
operações do PyTorch (ATen) que rodaram durante a chamada da resposta, com um
``TorchDispatchMode``. Um ``torch.softmax`` guardado num argumento padrão, embrulhado
num ``functools.partial`` ou chamado como ``torch._softmax`` ou
``torch.ops.aten._softmax`` chega ao mesmo núcleo ``_softmax`` e é visto do mesmo
jeito; um laço escondido num ``map``, numa compreensão ou numa função auxiliar faz o
número de operações crescer com o tamanho da entrada, e é isso que se mede.

Exemplo::

    with record_ops() as ops:
        out = answer(scores)
    expect(not ops.used(*SOFTMAX_OPS), "o exercício pede o softmax escrito por você")
"""

from __future__ import annotations

import collections
import contextlib
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

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
    fn: Callable[..., Any], make_args: Callable[[int], tuple[Any, ...]], sizes: tuple[int, int]
) -> tuple[int, int]:
    """Quantas operações ``fn(*make_args(n))`` executa em cada um dos dois tamanhos.

    Uma resposta vetorizada executa o mesmo número de operações em qualquer tamanho; um
    laço em Python sobre as posições (``for``, ``map``, compreensão, função auxiliar) faz
    o número crescer com ``n``. Use ``sizes`` bem diferentes, por exemplo ``(5, 11)``, e
    sem eixos de tamanho 1 (com um eixo de tamanho 1, ``expand`` + ``reshape`` vira uma
    vista e a contagem muda sem laço nenhum).
    """
    counts = []
    for n in sizes:
        args = make_args(n)
        with record_ops() as ops:
            fn(*args)
        counts.append(ops.total)
    return counts[0], counts[1]


@contextlib.contextmanager
def record_python_calls() -> Iterator[set[types.CodeType]]:
    """O código (``__code__``) de cada função Python executada no bloco (``sys.setprofile``).

    Para regras como "não use ``tpt.sliding_window_mask``" ou "não chame o módulo pronto":
    uma função é reconhecida pelo seu código, qualquer que seja o nome pelo qual foi
    chamada (apelido, argumento padrão, ``functools.partial``, ``mha(...)``).
    """
    seen: set[types.CodeType] = set()

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


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
    """As classes dos ``nn.Module`` cujo ``forward`` rodou no bloco (gancho global)."""
    seen: set[type] = set()
    handle = nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: seen.add(type(module))
    )
    try:
        yield seen
    finally:
        handle.remove()


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
