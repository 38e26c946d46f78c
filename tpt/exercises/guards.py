"""Guardas das conferências: entradas intactas, gradientes e casos sorteados.

- :func:`call_answer` chama a resposta com as entradas **de verdade** (não cópias) e
  confere depois que nenhum tensor, lista ou dicionário recebido mudou: um
  ``scores.sub_(...)`` ou um ``tokens.insert(0, ...)`` estragaria os dados de quem chamou.
- :func:`check_gradients` roda resposta e referência fora de ``no_grad``, com entradas que
  pedem gradiente, e compara os gradientes: uma resposta calculada sob ``torch.no_grad()``
  ou com ``.detach()`` dá o valor certo e não treina.
- :func:`case_generator` sorteia tamanhos e valores a cada execução (além dos casos fixos),
  para que uma tabela com as respostas dos casos testados não passe.
"""

from __future__ import annotations

import copy
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from tpt.exercises.core import ExerciseError, expect, first_line, max_abs_diff
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
    "Snapshot",
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
        raise ExerciseError(
            f"{where}, sua função levantou {type(err).__name__}.{tip}{detail}"
        ) from None
    for name, snap in snapshots.items():
        expect(
            not snap.changed(),
            f"{where}, sua função modificou `{name}` no lugar (o argumento de quem chamou "
            f"mudou). Quem chama ainda vai usar `{name}`: trabalhe numa cópia ou use "
            "operações que devolvem um tensor novo (x - y em vez de x.sub_(y) ou x -= y).",
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
    grads = []
    for fn in (answer, reference):
        leaves = {
            name: (x.detach().clone().requires_grad_(name in names) if isinstance(x, Tensor) else x)
            for name, x in inputs.items()
        }
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
        if fn is answer:
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
        grads.append(dict(zip(list(names) + [n for n, _ in params], got, strict=True)))
        for p in (p for _, p in params):
            p.grad = None
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
        expect(
            diff <= atol,
            f"{where}, o gradiente em relação a `{name}` difere do esperado (maior diferença "
            f"{fmt(diff, 2, sci=True)}, tolerância {fmt(atol, 0, sci=True)}), embora a saída "
            "confira: alguma parte da conta passa ao lado do autograd.",
        )


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
