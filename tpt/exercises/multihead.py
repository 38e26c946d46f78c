"""Conferências dos exercícios de notebooks/04_atencao_multicabeca.ipynb.

Três exercícios, na ordem do notebook. O notebook escreve a atenção multicabeça
comum passo a passo; os exercícios pedem o que ele só descreve, a atenção com
consultas agrupadas (GQA, ``num_kv_heads < num_heads``):

1. :func:`check_repeat_kv`: repetir as ``h_kv`` cabeças de chaves (ou valores)
   ``(b, h_kv, s, d_h)`` para ``(b, h, s, d_h)``, de modo que a cabeça de consulta ``i``
   use a cabeça de K/V ``i // (h / h_kv)``; **sem laços**;
2. :func:`check_gqa_forward`: a atenção multicabeça inteira de um
   ``tpt.MultiHeadAttention`` com GQA (inclusive com ``t != s``), com **uma** chamada de
   atenção para todas as cabeças, sem laços e sem chamar o módulo (``mha(...)``);
3. :func:`check_num_parameters`: o número de parâmetros de
   ``tpt.MultiHeadAttention(embed_dim, num_heads, num_kv_heads, bias=bias)`` **sem
   construir** o módulo (nem camadas ``nn.Linear``).

Cada conferência compara a resposta do aluno com o próprio ``tpt`` e diz, em
português, qual entrada falhou, o que era esperado e o que veio. As regras dos
enunciados são verificadas: o bytecode da função (laços, nomes usados) e chamadas
contadas ou proibidas durante a conferência.
"""

from __future__ import annotations

import contextlib
import numbers
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tpt
import tpt.attention
from tpt.attention import MultiHeadAttention
from tpt.exercises import ExerciseError, exercise, expect, forbid, references, uses_loops
from tpt.numfmt import fmt

__all__ = ["check_repeat_kv", "check_gqa_forward", "check_num_parameters"]


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def _max_diff(a: Tensor, b: Tensor) -> str:
    return fmt((a.double() - b.double()).abs().max().item(), sci=True)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else ""


def _explain(err: Exception, where: str, hint: str) -> ExerciseError:
    original = _first_line(err)
    detail = f" (mensagem original: {original})" if original else ""
    return ExerciseError(f"{where}, sua função levantou {type(err).__name__}. {hint}{detail}")


# --------------------------------------------------------------------------------------
# Exercício 1: repetir as cabeças de K/V (GQA)
# --------------------------------------------------------------------------------------

# (b, h_kv, s, d_h, h): MHA (h_kv = h), GQA e MQA (h_kv = 1).
_REPEAT_CASES: list[tuple[int, int, int, int, int]] = [
    (1, 2, 3, 4, 4),
    (2, 2, 5, 3, 8),
    (1, 3, 4, 2, 6),
    (2, 1, 3, 4, 4),
    (1, 4, 2, 3, 4),
]


def _reference_repeat(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)  # (b, h, s, d_h)


@exercise("Exercício 1 (repetir as cabeças de chave e valor)")
def check_repeat_kv(repeat_kv: Callable[[Tensor, int], Tensor]) -> None:
    """``repeat_kv(kv (b, h_kv, s, d_h), num_heads) -> (b, h, s, d_h)``, sem laços."""
    expect(
        not uses_loops(repeat_kv),
        "sua função usa um laço (for, while ou compreensão de lista). O exercício pede a "
        "repetição sem laços, com uma operação de tensores sobre o eixo das cabeças.",
    )
    generator = torch.Generator().manual_seed(4)
    for b, h_kv, s, d_h, h in _REPEAT_CASES:
        kv = torch.randn(b, h_kv, s, d_h, generator=generator)
        expected = _reference_repeat(kv, h)
        where = f"para kv de forma {(b, h_kv, s, d_h)} e num_heads={h}"
        try:
            received = repeat_kv(kv.clone(), h)
        except (NotImplementedError, ExerciseError):
            raise
        except Exception as err:
            raise _explain(
                err,
                where,
                f"Cada uma das {h_kv} cabeças de K/V deve aparecer h / h_kv = {h // h_kv} "
                "vezes seguidas no eixo 1 (o das cabeças).",
            ) from None
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        if tuple(received.shape) != (b, h, s, d_h):
            hint = ""
            if tuple(received.shape) == (b, h_kv, s * (h // h_kv), d_h) and h != h_kv:
                hint = " Você repetiu ao longo do eixo das posições (dim=2); repita no eixo 1."
            expect(
                False,
                f"{where}, esperava a forma {(b, h, s, d_h)} = (b, h, s, d_h); recebi "
                f"{_shape(received)}.{hint}",
            )
        if torch.equal(received, expected):
            continue
        group = h // h_kv
        tiled = kv.repeat(1, group, 1, 1)  # cabeça i usa i % h_kv: a ordem errada
        expect(
            not torch.equal(received, tiled),
            f"{where}, a forma está certa, mas a ordem não: com kv.repeat a cabeça de consulta i "
            f"usa a cabeça de K/V i % h_kv (as cópias se intercalam: 0, 1, 0, 1...). No GQA as "
            f"{group} cabeças de consulta vizinhas compartilham a mesma cabeça de K/V "
            "(0, 0, 1, 1...): a cabeça i usa i // (h / h_kv). Veja repeat_interleave.",
        )
        bad = next(i for i in range(h) if not torch.equal(received[:, i], expected[:, i]))
        expect(
            False,
            f"{where}, a cabeça de consulta {bad} deveria usar a cabeça de K/V "
            f"{bad} // {group} = {bad // group}; a diferença máxima nessa cabeça é "
            f"{_max_diff(received[:, bad], expected[:, bad])}.",
        )


# --------------------------------------------------------------------------------------
# Exercício 2: a atenção multicabeça com GQA, em lote
# --------------------------------------------------------------------------------------

# (b, t, s, d, h, h_kv, bias): autoatenção e atenção cruzada (t != s); MHA, GQA e MQA.
_FORWARD_CASES: list[tuple[int, int, int, int, int, int, bool]] = [
    (1, 5, 5, 8, 2, 2, True),
    (2, 4, 6, 16, 4, 2, True),
    (1, 6, 3, 24, 6, 3, True),
    (2, 3, 7, 16, 8, 1, True),
    (1, 4, 4, 12, 4, 2, False),
]
# float32: o caminho rápido do tpt e o caminho explícito do aluno diferem por ~1e-7.
_FORWARD_ATOL = 1e-5

# Etapas internas de MultiHeadAttention.forward que fariam o exercício pelo aluno.
_MODULE_STEPS = ("_split_heads", "_expand_kv_heads", "_attend")

_ATTENTION_OWNERS = (
    (tpt, "scaled_dot_product_attention"),
    (tpt.attention, "scaled_dot_product_attention"),
    (F, "scaled_dot_product_attention"),
)


@contextlib.contextmanager
def _count_attention_calls(fn: Callable[..., Any]) -> Iterator[list[int]]:
    """Conta as chamadas de atenção (do tpt ou do PyTorch) feitas durante o bloco.

    Conta também apelidos no notebook do aluno (``from tpt import
    scaled_dot_product_attention`` antes da função).
    """
    calls = [0]
    originals = {id(getattr(owner, name)) for owner, name in _ATTENTION_OWNERS}
    patched: list[tuple[Any, str, Any]] = []

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return original(*args, **kwargs)

        return counted

    student = getattr(fn, "__wrapped__", fn)
    student_globals = getattr(student, "__globals__", {})
    cells = [cell for cell in getattr(student, "__closure__", None) or ()
             if _cell_value(cell) is not None and id(_cell_value(cell)) in originals]
    targets: list[tuple[Any, str]] = list(_ATTENTION_OWNERS)
    targets += [
        (student_globals, key) for key, value in list(student_globals.items())
        if id(value) in originals
    ]
    try:
        for owner, name in targets:
            if isinstance(owner, dict):
                original = owner[name]
                owner[name] = wrap(original)
            else:
                original = getattr(owner, name)
                setattr(owner, name, wrap(original))
            patched.append((owner, name, original))
        for cell in cells:  # apelidos capturados por uma função interna
            original = cell.cell_contents
            cell.cell_contents = wrap(original)
            patched.append((cell, "", original))
        yield calls
    finally:
        for owner, name, original in reversed(patched):
            if isinstance(owner, dict):
                owner[name] = original
            elif isinstance(owner, types.CellType):
                owner.cell_contents = original
            else:
                setattr(owner, name, original)


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # célula ainda vazia
        return None


def _module(d: int, h: int, h_kv: int, bias: bool) -> MultiHeadAttention:
    with torch.random.fork_rng(devices=[]):  # não mexe no gerador global do aluno
        torch.manual_seed(100 * d + 10 * h + h_kv)
        return MultiHeadAttention(d, h, h_kv, bias=bias).eval()


def _alternative(query: Tensor, key_value: Tensor, mha: MultiHeadAttention, *, tiled: bool,
                 out_proj: bool) -> Tensor:
    """A conta do aluno com um erro típico: K/V repetidos com ``repeat`` ou sem ``W_O``."""
    b, t, d = query.shape
    s = key_value.shape[1]
    h, h_kv, d_h = mha.num_heads, mha.num_kv_heads, mha.head_dim
    q, k, v = mha.project_qkv(query, key_value)  # (b, t, d), (b, s, d_kv), (b, s, d_kv)
    q = q.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    k = k.view(b, s, h_kv, d_h).transpose(1, 2)  # (b, h_kv, s, d_h)
    v = v.view(b, s, h_kv, d_h).transpose(1, 2)  # (b, h_kv, s, d_h)
    group = h // h_kv
    if tiled:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)  # (b, h, s, d_h)
    else:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out, _ = tpt.attention.scaled_dot_product_attention(q, k, v)  # (b, h, t, d_h)
    out = out.transpose(1, 2).reshape(b, t, d)  # (b, t, d)
    return mha.out_proj(out) if out_proj else out


@exercise("Exercício 2 (atenção com consultas agrupadas)")
def check_gqa_forward(
    gqa_forward: Callable[[Tensor, Tensor, MultiHeadAttention], Tensor],
) -> None:
    """``gqa_forward(query (b, t, d), key_value (b, s, d), mha) -> (b, t, d)``.

    Deve dar o mesmo que ``mha(query, key_value)[0]``, com uma chamada de atenção para
    todas as cabeças, sem laços e sem chamar ``mha`` (nem ``mha.forward``).
    """
    expect(
        not uses_loops(gqa_forward),
        "sua função usa um laço (for, while ou compreensão de lista). O exercício pede o "
        "algoritmo em lote: todas as cabeças de uma vez, com view, transpose e uma chamada "
        "de atenção.",
    )
    for name in ("forward", *_MODULE_STEPS):
        expect(
            not references(gqa_forward, name),
            f"sua função chama mha.{name}: o exercício pede os passos escritos por você "
            "(projeções, divisão em cabeças, repetição de K e V, atenção, junção, out_proj), "
            "não as etapas prontas do módulo.",
        )
    generator = torch.Generator().manual_seed(5)
    rule_module = (
        "o exercício pede os passos escritos por você, sem chamar o módulo pronto "
        "(mha(...), mha.forward ou as etapas internas dele): use mha.project_qkv (ou "
        "mha.qkv_proj) e mha.out_proj."
    )
    for b, t, s, d, h, h_kv, bias in _FORWARD_CASES:
        mha = _module(d, h, h_kv, bias)
        query = torch.randn(b, t, d, generator=generator)
        key_value = query if s == t else torch.randn(b, s, d, generator=generator)
        kind = "autoatenção" if key_value is query else "atenção cruzada"
        where = (
            f"em {kind} com query {(b, t, d)}, key_value {(b, s, d)}, num_heads={h}, "
            f"num_kv_heads={h_kv}" + ("" if bias else ", bias=False")
        )
        with torch.no_grad():
            expected = mha(query, key_value)[0]  # (b, t, d)
            with contextlib.ExitStack() as stack:
                for name in ("forward", *_MODULE_STEPS):
                    if hasattr(MultiHeadAttention, name):
                        stack.enter_context(forbid(MultiHeadAttention, name, rule_module))
                calls = stack.enter_context(_count_attention_calls(gqa_forward))
                try:
                    received = gqa_forward(query, key_value, mha)
                except (NotImplementedError, ExerciseError):
                    raise
                except Exception as err:
                    if h_kv != h:
                        hint = (
                            f"Com num_kv_heads={h_kv}, as projeções de K e V produzem só "
                            f"num_kv_heads · d_h = {h_kv * mha.head_dim} colunas: divida K e V "
                            f"em {h_kv} cabeças, view(b, s, num_kv_heads, d_h), e depois "
                            f"repita cada uma {h // h_kv} vezes no eixo das cabeças."
                        )
                    else:
                        hint = "Confira as formas de cada passo."
                    if t != s:
                        hint += (
                            f" Na atenção cruzada, K e V têm o comprimento deles (s={s}), não o "
                            f"das consultas (t={t})."
                        )
                    raise _explain(err, where, hint) from None
        expect(
            calls[0] == 1,
            f"{where}, sua função chamou a atenção {calls[0]} vezes. O exercício pede uma "
            "chamada de tpt.scaled_dot_product_attention para todas as cabeças de uma vez "
            "(ela trata (b, h) como lote)"
            + (": não uma por cabeça." if calls[0] == h > 1 else "."),
        )
        expect(
            isinstance(received, Tensor),
            f"{where}, esperava um tensor; recebi {type(received).__name__}.",
        )
        expect(
            tuple(received.shape) == (b, t, d),
            f"{where}, esperava a forma {(b, t, d)} = (b, t, d); recebi {_shape(received)}.",
        )
        if torch.allclose(received, expected, atol=_FORWARD_ATOL, rtol=0):
            continue
        with torch.no_grad():
            no_out_proj = _alternative(query, key_value, mha, tiled=False, out_proj=False)
            tiled = _alternative(query, key_value, mha, tiled=True, out_proj=True)
        expect(
            not torch.allclose(received, no_out_proj, atol=_FORWARD_ATOL, rtol=0),
            f"{where}, sua saída é a concatenação das cabeças, mas falta a projeção final "
            "W_O: aplique mha.out_proj no fim.",
        )
        expect(
            not torch.allclose(received, tiled, atol=_FORWARD_ATOL, rtol=0),
            f"{where}, as cabeças de K/V foram repetidas na ordem errada (com repeat, a cabeça "
            "de consulta i usa a de K/V i % h_kv). No GQA, cabeças de consulta vizinhas "
            "compartilham a mesma cabeça de K/V: i usa i // (h / h_kv), como no exercício 1.",
        )
        expect(
            False,
            f"{where}, a saída difere de mha(query, key_value)[0] (diferença máxima "
            f"{_max_diff(received, expected)}, tolerância {fmt(_FORWARD_ATOL, sci=True)}). "
            "Confira: Q de query, K e V de key_value; Q em num_heads cabeças, K e V em "
            "num_kv_heads; repetir K e V; uma chamada de atenção; transpose(1, 2) + reshape "
            "para (b, t, d); mha.out_proj.",
        )


# --------------------------------------------------------------------------------------
# Exercício 3: contar parâmetros sem construir o módulo
# --------------------------------------------------------------------------------------

# (embed_dim, num_heads, num_kv_heads, bias)
_PARAM_CASES: list[tuple[int, int, int | None, bool]] = [
    (16, 4, None, True),
    (512, 8, None, True),
    (512, 1, None, True),
    (32, 4, None, False),
    (64, 8, 2, True),
    (64, 8, 1, True),
    (48, 6, 3, False),
]

_BUILD_RULE = (
    "o exercício pede a conta feita por você, sem construir o módulo nem camadas: "
    "tpt.MultiHeadAttention, nn.Linear e nn.MultiheadAttention ficam de fora. Conte as "
    "entradas de cada matriz e de cada viés."
)


def _reference_count(embed_dim: int, num_heads: int, num_kv_heads: int | None, bias: bool) -> int:
    with torch.random.fork_rng(devices=[]):  # não mexe no gerador global do aluno
        module = MultiHeadAttention(embed_dim, num_heads, num_kv_heads, bias=bias)
    return sum(p.numel() for p in module.parameters())


@exercise("Exercício 3 (número de parâmetros)")
def check_num_parameters(num_parameters: Callable[..., int]) -> None:
    """``num_parameters(embed_dim, num_heads, num_kv_heads=None, bias=True) -> int``."""
    for name in ("MultiHeadAttention", "MultiheadAttention", "Linear", "LazyLinear"):
        expect(not references(num_parameters, name), _BUILD_RULE)
    expected_counts = [_reference_count(*case) for case in _PARAM_CASES]
    for (d, h, h_kv, bias), expected in zip(_PARAM_CASES, expected_counts, strict=True):
        where = f"para embed_dim={d}, num_heads={h}, num_kv_heads={h_kv}, bias={bias}"
        with (
            forbid(MultiHeadAttention, "__init__", _BUILD_RULE),
            forbid(nn.Linear, "__init__", _BUILD_RULE),
            forbid(nn.MultiheadAttention, "__init__", _BUILD_RULE),
        ):
            try:
                received = num_parameters(d, h, num_kv_heads=h_kv, bias=bias)
            except (NotImplementedError, ExerciseError):
                raise
            except Exception as err:
                raise _explain(
                    err,
                    where,
                    "A função recebe num_kv_heads=None quando não há GQA: trate esse caso "
                    "como num_kv_heads = num_heads.",
                ) from None
        expect(
            isinstance(received, numbers.Integral) and not isinstance(received, bool),
            f"{where}, esperava um inteiro; recebi {type(received).__name__} ({received!r}). "
            "Parâmetros se contam: use // (divisão inteira) em vez de /.",
        )
        received = int(received)
        if received == expected:
            continue
        expect(
            received != 4 * h * d * d + (4 * h * d if bias else 0),
            f"{where}, esperava {fmt(expected)}, recebi {fmt(received)}: parece que cada cabeça "
            "ganhou matrizes d x d próprias. As h cabeças dividem as mesmas 4 matrizes (cada "
            "uma usa d/h colunas), então o total não depende de num_heads.",
        )
        d_h = d // h
        kv_dim = (h if h_kv is None else h_kv) * d_h
        full = 4 * d * d + (4 * d if bias else 0)
        formula = "4 d² + 4 d" if bias else "4 d²"
        expect(
            not (h_kv is not None and h_kv != h and received == full),
            f"{where}, esperava {fmt(expected)}, recebi {fmt(received)} = {formula}, que vale só "
            f"com num_kv_heads = num_heads. Com num_kv_heads={h_kv}, as projeções de K e V "
            f"produzem num_kv_heads · d_h = {kv_dim} colunas, não {d}.",
        )
        bias_count = 2 * d + 2 * kv_dim  # vieses de Q e out_proj (d) e de K e V (d_kv)
        expect(
            not (bias and received == expected - bias_count),
            f"{where}, esperava {fmt(expected)}, recebi {fmt(received)}: faltam os vieses "
            f"({fmt(bias_count)} com bias=True).",
        )
        expect(
            not (not bias and received == expected + bias_count),
            f"{where}, esperava {fmt(expected)}, recebi {fmt(received)}: com bias=False não há "
            f"vieses; tire os {fmt(bias_count)}.",
        )
        expect(False, f"{where}, esperava {fmt(expected)}, recebi {fmt(received)}.")
