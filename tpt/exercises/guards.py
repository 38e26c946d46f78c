"""Guardas das conferências: entradas intactas, gradientes e casos sorteados.

- :func:`call_answer` chama a resposta com as entradas **de verdade** (não cópias) e
  confere depois que nenhum tensor, lista ou dicionário recebido mudou: um
  ``scores.sub_(...)`` ou um ``tokens.insert(0, ...)`` estragaria os dados de quem chamou.
- :func:`check_gradients` roda resposta e referência fora de ``no_grad``, com entradas que
  pedem gradiente, e compara os gradientes: uma resposta calculada sob ``torch.no_grad()``
  ou com ``.detach()`` dá o valor certo e não treina.
- :func:`case_generator` sorteia tamanhos e valores a cada execução (além dos casos fixos),
  para que uma tabela com as respostas dos casos testados não passe; :func:`randsize`
  sorteia tamanhos numa faixa larga (pequenos e grandes com a mesma chance);
- :func:`sandbox` cerca a conferência inteira (:func:`~tpt.exercises.core.exercise` a
  liga): enquanto o código do aluno roda, nenhuma thread ou processo novo começa, nenhum
  código dos módulos de conferência (referências, auxiliares) é executado a pedido dele, e
  o perfil e o rastreamento do Python (``sys.setprofile``, ``sys.settrace``) não mudam;
  e nada de que a conferência depende (os módulos de conferência, ``torch``,
  ``torch.nn.functional``, ``torch.Tensor``) é trocado pela resposta: o retrato de
  :mod:`tpt.exercises.integrity`, tirado no começo, é conferido cada vez que a resposta
  devolve o controle (uma troca desfeita depois também é vista).
"""

from __future__ import annotations

import _thread
import contextlib
import copy
import functools
import math
import multiprocessing.process
import os
import secrets
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from tpt.exercises import integrity
from tpt.exercises.messages import (
    ExerciseError,
    autograd_explanation,
    difference_text,
    expect,
    first_line,
    max_abs_diff,
)
from tpt.exercises.rules import CHECK, LIBRARY, STUDENT, code_kind
from tpt.numfmt import fmt

__all__ = [
    "call_answer",
    "check_gradients",
    "expect_finite_gradient",
    "case_generator",
    "seed_note",
    "fixed_seed",
    "SEED_VARIABLE",
    "randint",
    "randsize",
    "Snapshot",
    "sandbox",
    "allow_callback",
    "shared_memory",
]


class Snapshot:
    """Cópia profunda de um argumento, para conferir depois que ele não mudou."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.copy = _clone(value)
        self.versions = _versions(value)

    def changed(self) -> bool:
        """O argumento mudou (valores, tamanho, ou uma operação no lugar num tensor)?"""
        return self.versions != _versions(self.value) or not _same(self.value, self.copy)


def call_answer(
    answer: Callable[..., Any],
    args: Mapping[str, Any],
    where: str,
    hint: str = "",
) -> Any:
    """``answer(*args.values())``, conferindo que nenhum argumento foi modificado no lugar.

    ``args`` dá nome a cada argumento (na ordem da assinatura): o retorno diz qual deles
    mudou ("sua função modificou `scores` no lugar"). Um erro da resposta vira uma
    explicação em português com ``hint``; ``NotImplementedError`` (exercício pendente)
    passa direto.
    """
    snapshots = {name: Snapshot(value) for name, value in args.items()}
    try:
        result = answer(*args.values())
    except (NotImplementedError, ExerciseError):
        raise
    except Exception as err:  # o erro do aluno, explicado
        original = first_line(err)
        detail = f" (mensagem original: {original})" if original else ""
        tip = f" {hint}" if hint else ""
        explained = autograd_explanation(err)
        if explained:
            raise ExerciseError(f"{where}, {explained}") from None
        raise ExerciseError(
            f"{where}, sua função levantou {type(err).__name__}.{tip}{detail}"
        ) from None
    for name, snap in snapshots.items():
        if not snap.changed():
            continue
        # O conselho cabe no tipo do argumento que mudou.
        if isinstance(snap.value, (set, frozenset)):
            advice = (
                f"trabalhe numa cópia (set({name})) ou use operações que devolvem um conjunto "
                f"novo ({name} | {{x}} em vez de {name}.add(x), {name} - outros em vez de "
                f"{name} -= outros)."
            )
        elif isinstance(snap.value, list):
            advice = (
                f"trabalhe numa cópia (list({name}), e também das listas de dentro, se houver) "
                f"ou use operações que devolvem uma lista nova ([x] + {name} em vez de "
                f"{name}.insert(0, x), {name}[:-1] em vez de {name}.pop())."
            )
        else:
            advice = (
                "trabalhe numa cópia ou use operações que devolvem um tensor novo (x - y em "
                "vez de x.sub_(y) ou x -= y)."
            )
        raise ExerciseError(
            f"{where}, sua função modificou `{name}` no lugar (o argumento de quem chamou "
            f"mudou). Quem chama ainda vai usar `{name}`: {advice}"
        )
    return result


def check_gradients(
    answer: Callable[..., Tensor],
    reference: Callable[..., Tensor],
    inputs: Mapping[str, Any],
    where: str,
    *,
    wrt: tuple[str, ...] | None = None,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Os gradientes da resposta em relação às entradas ``wrt`` batem com os da referência?

    As entradas (tensores float) são copiadas com ``requires_grad=True``; as duas funções
    rodam com o gradiente ligado, e um mesmo gradiente de saída aleatório volta pelas
    duas. ``wrt`` padrão: todos os tensores float de ``inputs``. ``nn.Module`` entre as
    entradas entra com os seus parâmetros (os gradientes dos pesos também são comparados).
    """
    names = wrt or tuple(
        name for name, x in inputs.items() if isinstance(x, Tensor) and x.is_floating_point()
    )
    grads = [
        _gradients(fn, inputs, names, where, seed, check=fn is answer) for fn in (answer, reference)
    ]
    for name, expected in grads[1].items():
        received = grads[0][name]
        if expected is None:
            continue
        expect(
            received is not None,
            f"{where}, o gradiente em relação a `{name}` não existe na sua resposta: `{name}` "
            "não participa do resultado pelo autograd.",
        )
        diff = max_abs_diff(received, expected)
        if diff <= atol:
            continue
        found = (
            f"{where}, o gradiente em relação a `{name}` difere do esperado "
            f"({difference_text(received, expected)}, tolerância {fmt(atol, 0, sci=True)})"
        )
        float32_gap = _float32_gap(reference, inputs, names, name, expected, where, seed)
        if float32_gap is not None and diff <= 10 * float32_gap:
            raise ExerciseError(
                f"{found}, uma diferença do tamanho do arredondamento do float32 (a mesma "
                "conta feita em float32 pela referência difere em "
                f"{fmt(float32_gap, 1, sci=True)}): a conta foi feita em float32 em alguma "
                "parte, embora as entradas sejam float64. Mantenha o dtype das entradas "
                "(cuidado com .float(), torch.tensor(...) sem dtype e tensores criados sem "
                "dtype=x.dtype)."
            )
        raise ExerciseError(
            f"{found}, embora a saída confira: alguma parte da conta passa ao lado do autograd."
        )


def _gradients(
    fn: Callable[..., Tensor],
    inputs: Mapping[str, Any],
    names: tuple[str, ...],
    where: str,
    seed: int,
    *,
    check: bool,
    dtype: torch.dtype | None = None,
) -> dict[str, Tensor | None]:
    """Gradientes de ``fn`` em relação a ``names`` e aos parâmetros dos módulos recebidos."""
    leaves = {}
    for name, x in inputs.items():
        if isinstance(x, Tensor):
            x = x.detach().clone()
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
            x.requires_grad_(name in names)
        leaves[name] = x
    try:
        with torch.enable_grad():
            out = fn(*leaves.values())
        expect(
            isinstance(out, Tensor), f"{where}, esperava um tensor; recebi {type(out).__name__}."
        )
        targets = [leaves[name] for name in names]
        params = [
            (f"{name}.{pname}", p)
            for name, x in leaves.items()
            if isinstance(x, torch.nn.Module)
            for pname, p in x.named_parameters()
        ]
        if check:
            expect(
                out.requires_grad,
                f"{where}, o resultado não tem gradiente (requires_grad=False): algo no caminho "
                "cortou o grafo do autograd (torch.no_grad(), .detach(), .data, ou uma passagem "
                "por numpy ou .tolist()). Dentro de um modelo, essa conta não deixaria os pesos "
                "aprenderem.",
            )
        g = torch.Generator().manual_seed(seed)
        # O mesmo gradiente de saída para as duas funções, mesmo que uma devolva float64 e
        # a outra float32: sorteado em float64 e convertido para o dtype de cada saída.
        upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
        upstream = upstream.to(device=out.device, dtype=out.dtype)
        every = targets + [p for _, p in params]
        got = torch.autograd.grad(out, every, upstream, allow_unused=True)
    except RuntimeError as err:
        explained = autograd_explanation(err) if check else None
        if explained is None:
            raise
        raise ExerciseError(f"{where}, {explained}") from None
    for p in (p for _, p in params):
        p.grad = None
    return dict(zip(list(names) + [n for n, _ in params], got, strict=True))


def _float32_gap(
    reference: Callable[..., Tensor],
    inputs: Mapping[str, Any],
    names: tuple[str, ...],
    name: str,
    expected: Tensor,
    where: str,
    seed: int,
) -> float | None:
    """Quanto o gradiente da referência muda se a conta for feita em float32.

    ``None`` quando a medida não se aplica: nenhuma entrada float64, módulos entre as
    entradas, ou a referência não roda em float32. Serve para dizer "foi a precisão"
    só quando a diferença medida é do tamanho da que o float32 produz.
    """
    tensors = [x for x in inputs.values() if isinstance(x, Tensor)]
    if not any(x.dtype == torch.float64 for x in tensors) or any(
        isinstance(x, torch.nn.Module) for x in inputs.values()
    ):
        return None
    try:
        low = _gradients(reference, inputs, names, where, seed, check=False, dtype=torch.float32)
    except Exception:  # a referência não aceita float32: não dá para medir
        return None
    value = low.get(name)
    if value is None:
        return None
    gap = max_abs_diff(value, expected)
    return gap if math.isfinite(gap) and gap > 0 else None


def case_generator(seed: int | None = None) -> tuple[torch.Generator, int]:
    """Um ``torch.Generator`` com semente sorteada a cada chamada (ou a dada) e a semente.

    As conferências sorteiam tamanhos e valores com ele; a semente entra na mensagem de
    erro ("caso sorteado, semente 123..."), para o aluno poder reproduzir o caso.
    """
    if seed is None:
        seed = fixed_seed()
    seed = secrets.randbits(48) if seed is None else seed
    return torch.Generator().manual_seed(seed), seed


SEED_VARIABLE = "TPT_EXERCISE_SEED"


def fixed_seed() -> int | None:
    """A semente fixada pela variável de ambiente ``TPT_EXERCISE_SEED`` (ou ``None``).

    A correção de uma turma (``python -m tpt.turma corrigir``) a define: as mesmas
    entregas sorteiam os mesmos casos e recebem as mesmas notas. Sem ela, cada execução
    sorteia casos novos.
    """
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"{SEED_VARIABLE}={text!r} não é um inteiro; use um número como 1234 (ou apague a "
            "variável para sortear casos novos a cada execução)."
        ) from None
    if value < 0:
        raise ValueError(f"{SEED_VARIABLE}={value} é negativa; esperava um inteiro >= 0.")
    return value


def randint(generator: torch.Generator, low: int, high: int) -> int:
    """Um inteiro em ``[low, high]`` (os dois inclusos) sorteado com ``generator``."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def randsize(generator: torch.Generator, low: int, high: int) -> int:
    """Um tamanho em ``[low, high]`` sorteado em escala logarítmica (faixas largas).

    Com ``randint(g, 1, 500)`` quase todo caso sai acima de 50; aqui 1 a 10, 10 a 100 e
    100 a 500 têm chances parecidas. Serve para que uma tabela montada fora da função
    para os tamanhos que a conferência costuma testar não cubra os casos sorteados.
    """
    if not 1 <= low <= high:
        raise ValueError(f"esperava 1 <= low <= high; recebi low={low}, high={high}.")
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    value = math.exp(math.log(low) + u * (math.log(high + 1) - math.log(low)))
    return min(high, max(low, int(value)))


def seed_note(seed: int | None) -> str:
    """O trecho ``" (caso sorteado, semente N)"`` das mensagens (vazio nos casos fixos)."""
    return "" if seed is None else f" (caso sorteado, semente {seed})"


def expect_finite_gradient(
    answer: Callable[..., Tensor], inputs: Mapping[str, Any], name: str, where: str, hint: str
) -> None:
    """O gradiente da resposta em relação a ``inputs[name]`` é finito?

    Um gradiente com ``NaN`` ou infinito estraga os pesos no primeiro passo do otimizador,
    mesmo quando a saída confere (por exemplo uma divisão por zero escondida por um
    ``nan_to_num`` na saída). ``hint`` explica a causa provável do exercício.
    """
    leaves = {
        key: value.detach().clone().requires_grad_(key == name)
        if isinstance(value, Tensor)
        else value
        for key, value in inputs.items()
    }
    with torch.enable_grad():
        out = answer(*leaves.values())
    if not (isinstance(out, Tensor) and out.requires_grad):
        return  # quem explica isso é o check_gradients
    (grad,) = torch.autograd.grad(out.sum(), [leaves[name]], allow_unused=True)
    if grad is None or bool(torch.isfinite(grad).all()):
        return
    rows = (~torch.isfinite(grad)).reshape(grad.shape[0], -1).any(dim=1)
    raise ExerciseError(
        f"{where}, a saída confere, mas o gradiente em relação a `{name}` tem NaN ou "
        f"infinito (nas linhas {rows.nonzero().squeeze(1).tolist()}): {hint}"
    )


def shared_memory(
    received: Mapping[str, Tensor], originals: Mapping[str, Tensor]
) -> list[tuple[str, str]]:
    """Os tensores de ``received`` que usam a memória de algum tensor de ``originals``.

    Devolve pares ``(nome recebido, nome original)``, na ordem de ``received``. Compara o
    armazenamento (``untyped_storage``), não o objeto: ``w.detach()``, ``w[:]``,
    ``w.view(...)`` e ``nn.Parameter(w)`` usam a memória de ``w``, e treinar um mudaria o
    outro. Tensores vazios não contam (não guardam nada).
    """

    def storage(tensor: Tensor) -> int | None:
        if not isinstance(tensor, Tensor) or tensor.numel() == 0:
            return None
        try:
            return tensor.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # tensores sem memória própria
            return None

    owners: dict[int, str] = {}
    for name, tensor in originals.items():
        ptr = storage(tensor)
        if ptr is not None:
            owners.setdefault(ptr, name)
    shared = []
    for name, tensor in received.items():
        ptr = storage(tensor)
        if ptr is not None and ptr in owners:
            shared.append((name, owners[ptr]))
    return shared


# --------------------------------------------------------------------------------------
def _clone(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, torch.nn.Module):
        return {k: v.detach().clone() for k, v in value.state_dict().items()}
    if isinstance(value, (list, tuple)):
        return (
            type(value)(_clone(v) for v in value)
            if isinstance(value, list)
            else tuple(_clone(v) for v in value)
        )
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    try:
        return copy.deepcopy(value)
    except Exception:  # objetos que não se copiam: não dá para conferir, seguimos
        return value


def _versions(value: Any) -> list[int]:
    if isinstance(value, Tensor):
        return [value._version]
    if isinstance(value, torch.nn.Module):
        return [p._version for p in value.state_dict().values()]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _versions(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _versions(item)]
    return []


def _equal_with_nan(a: Tensor, b: Tensor) -> bool:
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


def _same(value: Any, saved: Any) -> bool:
    if isinstance(value, Tensor):
        return (
            isinstance(saved, Tensor)
            and value.shape == saved.shape
            and value.dtype == saved.dtype
            and _equal_with_nan(value.detach(), saved)
        )
    if isinstance(value, torch.nn.Module):
        now = value.state_dict()
        return now.keys() == saved.keys() and all(_same(now[k], saved[k]) for k in now)
    if isinstance(value, (list, tuple)):
        return (
            type(value) is type(saved)
            and len(value) == len(saved)
            and all(_same(a, b) for a, b in zip(value, saved, strict=True))
        )
    if isinstance(value, dict):
        return value.keys() == saved.keys() and all(_same(value[k], saved[k]) for k in value)
    if type(value).__eq__ is object.__eq__ and hasattr(value, "__dict__"):
        # Objetos sem __eq__ próprio (um KVCache, por exemplo): compara os atributos.
        return type(saved) is type(value) and _same(vars(value), vars(saved))
    try:
        return bool(value == saved)
    except Exception:
        return True


# --------------------------------------------------------------------------------------
# A guarda em volta da conferência inteira: threads, processos, código da conferência
# --------------------------------------------------------------------------------------
class _Sandbox:
    """Estado da guarda ligada por :func:`sandbox` (uma por vez, na thread da conferência)."""

    def __init__(self) -> None:
        self.depth = 0
        self.thread: int | None = None
        self.violation: str | None = None
        self.profiling = False  # o perfil da guarda está ligado (a resposta roda)
        # As respostas que a conferência deve chamar (as funções, embrulhadas pela guarda).
        self.answers: tuple[Any, ...] = ()
        # O retrato do que a conferência usa, tirado no começo dela.
        self.integrity: integrity.Snapshot | None = None


_STATE = _Sandbox()

# Eventos de auditoria (sys.addaudithook) que começam um processo.
_PROCESS_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "_posixsubprocess.fork_exec",
    }
)
_THREAD_EVENTS = frozenset({"_thread.start_new_thread", "_thread.start_joinable_thread"})
_PROFILE_EVENTS = frozenset({"sys.setprofile", "sys.settrace"})

_THREAD_MESSAGE = (
    "sua resposta começou {what} ({how}). A conferência só vê o que roda na chamada da sua "
    "função, na mesma thread: trabalho feito em outra thread ou processo escaparia das "
    "regras do exercício. Faça a conta direto na função, sem threading, concurrent.futures, "
    "multiprocessing, os.fork ou subprocess."
)


def _student_running(frame: types.FrameType | None) -> bool:
    """O primeiro código fora das bibliotecas, a partir de ``frame``, é do aluno?"""
    while frame is not None:
        kind = code_kind(frame.f_code.co_filename)
        if kind is not LIBRARY:
            return kind is STUDENT
        frame = frame.f_back
    return False


def _active() -> bool:
    return _STATE.depth > 0 and _thread.get_ident() == _STATE.thread


def _refuse(message: str) -> None:
    if _STATE.violation is None:
        _STATE.violation = message
    raise ExerciseError(message)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _active():
        return
    if event in _PROCESS_EVENTS or event in _THREAD_EVENTS:
        if _student_running(sys._getframe(1)):
            what = "uma thread nova" if event in _THREAD_EVENTS else "um processo novo"
            _refuse(_THREAD_MESSAGE.format(what=what, how=event))
    elif event in _PROFILE_EVENTS and _student_running(sys._getframe(1)):
        _refuse(
            f"sua resposta chamou {event}, que desligaria o perfil com que a conferência "
            "acompanha o que roda durante a chamada. Tire essa chamada da função."
        )


_TAMPER_MESSAGE = (
    "sua resposta trocou peças de que a conferência depende ({changes}). Uma conferência "
    "com peças trocadas não confere nada, mesmo que a troca seja desfeita depois: escreva a "
    "função sem mexer nos módulos da conferência, no torch, no torch.nn.functional nem nos "
    "métodos dos tensores (se a troca ficou, reinicie o kernel)."
)


def _integrity_violation() -> str | None:
    """A explicação, se algo do retrato da conferência em andamento foi trocado."""
    snapshot = _STATE.integrity
    if snapshot is None:
        return None
    changes = snapshot.changes()
    if not changes:
        return None
    return _TAMPER_MESSAGE.format(changes=integrity.describe(changes, limit=3))


def _note_integrity() -> None:
    message = _integrity_violation()
    if message is not None and _STATE.violation is None:
        _STATE.violation = message


def _verify_integrity() -> None:
    message = _integrity_violation()
    if message is not None:
        _refuse(message)


# Um contêiner (não um bool reatribuído com ``global``): os nomes do módulo apontam
# sempre para os mesmos objetos, e a correção de uma turma (tpt.turma), que compara os
# módulos antes e depois do código do aluno, não confunde a instalação com uma troca.
_AUDIT_HOOK: set[str] = set()


def _install_audit_hook() -> None:
    # Um gancho de auditoria não se remove; ele só age com uma conferência em andamento
    # e na thread dela (fora disso, custa uma comparação por evento auditado).
    if not _AUDIT_HOOK:
        sys.addaudithook(_audit)
        _AUDIT_HOOK.add("instalado")


def _blocking(original: Callable[..., Any], what: str, how: str) -> Callable[..., Any]:
    def blocked(*args: Any, **kwargs: Any) -> Any:
        if _active() and _student_running(sys._getframe(1)):
            _refuse(_THREAD_MESSAGE.format(what=what, how=how))
        return original(*args, **kwargs)

    blocked.__wrapped__ = original  # type: ignore[attr-defined]
    return blocked


# (módulo, atributo, o que começa): trocados durante a conferência e restaurados depois.
# No Python 3.10 e 3.11 começar uma thread não gera evento de auditoria.
_STARTERS = (
    (_thread, "start_new_thread", "uma thread nova"),
    (_thread, "start_new", "uma thread nova"),
    (_thread, "start_joinable_thread", "uma thread nova"),
    (threading, "_start_new_thread", "uma thread nova"),
    (threading, "_start_joinable_thread", "uma thread nova"),
    (os, "fork", "um processo novo"),
    (os, "forkpty", "um processo novo"),
    (multiprocessing.process.BaseProcess, "start", "um processo novo"),
)


# Códigos de conferência que a resposta pode chamar: funções que a conferência entrega
# à resposta como argumento (ver :func:`allow_callback`).
_CALLBACKS: set[types.CodeType] = set()


def allow_callback(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Marca ``fn`` (definida num módulo de conferência) como algo que a resposta pode chamar.

    A guarda recusa código de conferência chamado pela resposta; uma conferência que
    entrega uma função sua à resposta (um modelo de brinquedo, um passo de geração)
    passa-a por aqui: ``call_answer(answer, {"step": allow_callback(step)}, ...)``.
    Só o ponto de entrada precisa ser marcado: o que ``fn`` chama é chamado por código
    de conferência. Devolve ``fn``.
    """
    _CALLBACKS.update(_answer_codes(fn))
    return fn


#: Métodos que o próprio PyTorch chama, de dentro do C++, a cada operação que a resposta
#: executa: são a instrumentação que a conferência ligou (um ``TorchDispatchMode`` que
#: conta contas), não código que a resposta escolheu rodar.
_TORCH_CALLBACKS = frozenset({"__torch_dispatch__", "__torch_function__"})


def _check_caller(frame: types.FrameType) -> None:
    """``frame`` começa código de um módulo de conferência: quem chamou foi o aluno?"""
    if frame.f_code in _CALLBACKS or frame.f_code.co_name in _TORCH_CALLBACKS:
        return
    caller = frame.f_back
    if _student_running(caller) and _STATE.violation is None:
        code = frame.f_code
        name = getattr(code, "co_qualname", code.co_name)
        module = os.path.basename(code.co_filename)
        _STATE.violation = (
            f"sua resposta executou código da própria conferência (`{name}`, de "
            f"tpt/exercises/{module}). As referências e os auxiliares da conferência são o "
            "gabarito: chamá-los, por qualquer caminho (import, getattr, uma função que os "
            "guarda), não resolve o exercício. Escreva a conta você mesmo."
        )


def _answer_codes(answer: Any) -> Iterator[types.CodeType]:
    """Os códigos que rodam quando ``answer(...)`` é chamada (partial, método, __wrapped__)."""
    seen: set[int] = set()
    stack = [answer]
    while stack:
        value = stack.pop()
        if id(value) in seen or value is None:
            continue
        seen.add(id(value))
        if isinstance(value, functools.partial):
            stack.append(value.func)
            continue
        if isinstance(value, types.MethodType):
            stack.append(value.__func__)
            continue
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType):
            yield code
            stack.append(getattr(value, "__wrapped__", None))
        elif not isinstance(value, type) and callable(value):
            stack.append(type(value).__call__)


def _refuse_check_answers(answers: tuple[Any, ...]) -> None:
    for answer in answers:
        for code in _answer_codes(answer):
            if code_kind(code.co_filename) is CHECK:
                _STATE.violation = (
                    "a resposta entregue é código da própria conferência "
                    f"(`{getattr(code, 'co_qualname', code.co_name)}`, de tpt/exercises/"
                    f"{os.path.basename(code.co_filename)}). As referências e os auxiliares "
                    "da conferência são o gabarito: entregá-los não resolve o exercício. "
                    "Escreva a função você mesmo."
                )
                return


@contextlib.contextmanager
def sandbox(answers: tuple[Any, ...] = ()) -> Iterator[_Sandbox]:
    """Liga as guardas durante o bloco (a conferência inteira) e devolve o estado.

    Depois do bloco, ``state.violation`` traz a explicação do que a resposta fez de
    proibido (ou ``None``): começar uma thread ou processo, executar código de um módulo
    de conferência (o caminho até ele não importa: quem chamou é o que conta), ou trocar
    o perfil ou o rastreamento do Python. ``answers`` (as respostas recebidas) não podem
    ser elas mesmas código de conferência; a conferência chama ``state.answers``, as
    mesmas funções embrulhadas para que o perfil da guarda fique ligado só enquanto elas
    rodam. Tudo o que foi trocado volta ao que era. Aninhar é permitido (uma conferência
    dentro de outra usa a guarda de fora).
    """
    if _STATE.depth > 0:
        if _thread.get_ident() != _STATE.thread:
            raise RuntimeError("as conferências rodam uma por vez, na mesma thread.")
        outer = _STATE.answers
        _STATE.answers = tuple(_guarded(a) if _wrappable(a) else a for a in answers)
        _STATE.depth += 1
        try:
            yield _STATE
        finally:
            _STATE.depth -= 1
            _STATE.answers = outer
        return
    _install_audit_hook()
    saved = [
        (owner, name, getattr(owner, name), what)
        for owner, name, what in _STARTERS
        if hasattr(owner, name)
    ]
    previous_profile = sys.getprofile()
    _STATE.violation = None
    _STATE.thread = _thread.get_ident()
    _refuse_check_answers(answers)
    grading = integrity.taken()  # o retrato da célula travada do nbgrader, se houver
    if grading is not None and _STATE.violation is None:
        changes = grading.changes()
        if changes:
            _STATE.violation = (
                "conferência alterada: o notebook mexeu no que as conferências usam "
                f"({integrity.describe(changes, limit=3)})."
            )
    _STATE.integrity = integrity.Snapshot()
    try:
        for owner, name, original, what in saved:
            setattr(owner, name, _blocking(original, what, f"{owner.__name__}.{name}"))
        # O perfil (caro: o Python fica mais lento com ele) só fica ligado enquanto a
        # resposta roda: cada função recebida é embrulhada. Uma resposta que não é função
        # (um objeto chamável) deixa o perfil ligado na conferência inteira.
        _STATE.answers = tuple(_guarded(a) if _wrappable(a) else a for a in answers)
        whole = any(callable(a) and not _wrappable(a) for a in answers)
        if whole:
            sys.setprofile(_chained(previous_profile))
        _STATE.depth = 1
        try:
            yield _STATE
        finally:
            _STATE.depth = 0
            if whole:
                _restore_profile(previous_profile)
            _note_integrity()
    finally:
        for owner, name, original, _ in saved:
            setattr(owner, name, original)
        _STATE.thread = None
        _STATE.profiling = False
        _STATE.integrity = None


def _wrappable(answer: Any) -> bool:
    return isinstance(answer, (types.FunctionType, types.MethodType, functools.partial))


def _guarded(answer: Callable[..., Any]) -> Callable[..., Any]:
    """``answer`` com o perfil da guarda ligado enquanto ela roda (``inspect`` vê a original)."""

    @functools.wraps(answer)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _STATE.profiling or not _active():
            return answer(*args, **kwargs)
        previous = sys.getprofile()
        sys.setprofile(_chained(previous))
        _STATE.profiling = True
        try:
            return answer(*args, **kwargs)
        finally:
            _STATE.profiling = False
            _restore_profile(previous)
            # A resposta devolveu o controle: nada do que a conferência usa pode ter mudado.
            _verify_integrity()

    return guarded


def _restore_profile(previous: Callable[..., Any] | None) -> None:
    current = sys.getprofile()
    sys.setprofile(previous if callable(previous) else None)
    if not getattr(current, "_tpt_guard", False) and _STATE.violation is None:
        _STATE.violation = (
            "sua resposta trocou o perfil do Python (sys.setprofile), com que a "
            "conferência acompanha o que roda durante a chamada. Tire essa troca da função."
        )


def _chained(previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """O perfil da guarda, encadeado com o que já estava ligado (se havia um)."""

    if not callable(previous):  # um perfilador em C (cProfile): o Python não o chama
        previous = None

    def guard(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and code_kind(frame.f_code.co_filename) is CHECK:
            _check_caller(frame)
        elif (
            event == "return"
            and not _STATE.profiling
            and code_kind(frame.f_code.co_filename) is STUDENT
            and not _student_running(frame.f_back)
        ):
            # Uma resposta que não é função (uma classe, um módulo) devolve o controle à
            # conferência aqui: o retrato é conferido, como no embrulho das funções.
            _note_integrity()
        if previous is not None:
            previous(frame, event, arg)

    guard._tpt_guard = True  # type: ignore[attr-defined]
    return guard
