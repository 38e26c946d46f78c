"""Exercícios do notebook 10 (Transformers modernos): ``ex = checks("modern")``.

1. :func:`check_rope_half`: o RoPE no arranjo "metade e metade" (``rotate_half`` do
   GPT-NeoX e do Hugging Face): a coordenada ``i`` forma par com a ``i + d/2``.
2. :func:`check_gqa_attention`: a atenção com consultas agrupadas (GQA) sem repetir K e V:
   nenhum tensor do tamanho de K (ou V) repetido ``g`` vezes pode ser criado durante a
   chamada, nem pela resposta nem pelo PyTorch por baixo (um ``matmul`` com broadcast
   copia o operando expandido).
3. :func:`check_rolling_step`: um passo da geração com o cache circular da atenção com
   janela deslizante (Mistral): a chave e o valor da posição ``pos`` vão, no lugar, para
   a vaga ``pos % W`` de um cache de ``W`` vagas, sem copiar o cache (nem em pedaços, nem
   por ``resize_`` ou pelo numpy: :class:`_CacheCopies` procura os valores do cache em
   tudo o que a resposta cria ou exporta), e o token novo atende às vagas preenchidas (o
   lixo das outras tem ``NaN`` e infinitos, como um ``torch.empty``).

As contas dos exercícios 1 e 2 ficam num caminho treinável (consultas e chaves de um
modelo): a conferência passa entradas que pedem gradiente e compara os gradientes com os
da referência. O 3 é um passo de geração, sem gradiente. Há casos fixos e casos
sorteados a cada execução; um diagnóstico só aparece quando a variante errada
correspondente foi calculada e bateu.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from tpt import positional
from tpt.exercises.core import exercise, expect, expect_close, max_abs_diff
from tpt.exercises.guards import call_answer, case_generator, check_gradients
from tpt.exercises.rules import (
    ATTENTION_KERNEL_OPS,
    functions_from_file,
    record_ops,
    record_python_calls,
    record_torch_calls,
)
from tpt.numfmt import fmt

__all__ = ["check_rope_half", "check_gqa_attention", "check_rolling_step"]

_ATOL = 1e-5
_POSITIONAL_FILE = positional.__file__


# --------------------------------------------------------------------------------------
# Exercício 1: RoPE "metade e metade"
# --------------------------------------------------------------------------------------
_ROPE_HINT = (
    "Confira a assinatura, rope_half(x, theta), e as formas: x tem forma (..., t, d), as "
    "posições estão no penúltimo eixo e os pares são (x[..., i], x[..., i + d/2])."
)


def _rope_half(
    x: Tensor,
    theta: float,
    *,
    start: int = 0,
    scale: float = 2.0,
    sign: float = 1.0,
    angles: str = "cat",
) -> Tensor:
    """RoPE metade e metade (ou, com os argumentos, um engano típico). ``(..., t, d)``."""
    t, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freqs = theta ** (-scale * torch.arange(half, dtype=torch.float64) / d)  # (d/2,)
    pos = torch.arange(start, start + t, dtype=torch.float64)[:, None] * freqs  # (t, d/2)
    if angles == "cat":
        pos = torch.cat((pos, pos), dim=-1)  # (t, d): i e i + d/2 com o mesmo ângulo
    else:
        pos = pos.repeat_interleave(2, dim=-1)  # (t, d): ângulos de pares vizinhos
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (..., t, d)
    return x * pos.cos().to(x.dtype) + sign * rotated * pos.sin().to(x.dtype)


def _rope_pairs(x: Tensor, theta: float) -> Tensor:
    """O arranjo do tpt (pares vizinhos), para reconhecer a confusão entre os dois."""
    t, d = x.shape[-2], x.shape[-1]
    freqs = theta ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    pos = torch.arange(t, dtype=torch.float64)[:, None] * freqs  # (t, d/2)
    cos, sin = pos.cos().to(x.dtype), pos.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., t, d/2)
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


_ROPE_VARIANTS: list[tuple[str, Callable[[Tensor, float], Tensor]]] = [
    (
        "você girou pares de coordenadas vizinhas (2i, 2i+1), o arranjo do tpt e do RoFormer. "
        "Aqui os pares são (i, i + d/2): a primeira metade do vetor com a segunda.",
        _rope_pairs,
    ),
    (
        "o ângulo da coordenada j deve ser o mesmo da j + d/2 (as duas formam um par): repita "
        "as frequências com torch.cat((f, f)), não com repeat_interleave, que serve a pares "
        "vizinhos.",
        lambda x, th: _rope_half(x, th, angles="interleave"),
    ),
    (
        "a rotação está no sentido contrário (ângulo -p·ω): o par (x1, x2) vira "
        "(x1 cos - x2 sin, x2 cos + x1 sin).",
        lambda x, th: _rope_half(x, th, sign=-1.0),
    ),
    (
        "o expoente da frequência está errado: ω_i = theta^(-2i/d), com 2i, não i.",
        lambda x, th: _rope_half(x, th, scale=1.0),
    ),
    (
        "as posições começam em 0 (o primeiro token não é girado), não em 1.",
        lambda x, th: _rope_half(x, th, start=1),
    ),
]


def _rope_cases(gen: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...], float]]:
    d = 2 * int(torch.randint(2, 9, (), generator=gen))
    t = int(torch.randint(2, 10, (), generator=gen))
    b = int(torch.randint(1, 4, (), generator=gen))
    theta = float(torch.randint(50, 20000, (), generator=gen))
    return [
        ("x de forma (1, 6, 8), theta=10000", (1, 6, 8), 10000.0),
        ("x de forma (2, 3, 5, 16), theta=10000", (2, 3, 5, 16), 10000.0),
        ("x de forma (7, 4), theta=100", (7, 4), 100.0),
        (
            f"x de forma {(b, t, d)}, theta={fmt(theta, 0)} (caso sorteado, semente {seed})",
            (b, t, d),
            theta,
        ),
    ]


@exercise("Exercício 1 (RoPE metade e metade)")
def check_rope_half(rope_half: Callable[[Tensor, float], Tensor]) -> None:
    """``rope_half(x (..., t, d), theta) -> (..., t, d)`` no arranjo ``rotate_half``."""
    gen, seed = case_generator()
    for description, shape, theta in _rope_cases(gen, seed):
        where = f"Para {description}"
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        with record_python_calls() as codes:
            received = call_answer(rope_half, {"x": x, "theta": theta}, where, _ROPE_HINT)
        # Qualquer função de tpt/positional.py: apply_rope, a construção do RotaryEmbedding
        # (que monta as tabelas de cos e sin), o forward, as frequências, a senoidal.
        used = functions_from_file(codes, _POSITIONAL_FILE)
        expect(
            not used,
            f"{where}, sua função rodou código de posição do tpt ({', '.join(sorted(used))}, "
            "de tpt/positional.py): o exercício pede a rotação metade e metade escrita por "
            "você, sem tpt.apply_rope, tpt.RotaryEmbedding (nem as suas tabelas de cos e sin) "
            "ou outra função de tpt/positional.py.",
        )
        expected = _rope_half(x, theta)
        variants = [(diagnosis, wrong(x, theta)) for diagnosis, wrong in _ROPE_VARIANTS]
        if isinstance(received, Tensor) and received.shape == x.shape:
            norms = received.detach().double().norm(dim=-1)  # (..., t)
            change = max_abs_diff(norms, x.norm(dim=-1))
            expect(
                change <= 1e-4 or not _far_from_all(received, expected, variants),
                f"{where}, a norma de algum vetor mudou (em até {fmt(change, 2, sci=True)}): "
                "uma rotação preserva a norma. Use o cos e o sin do MESMO ângulo nos dois "
                "membros de cada par.",
            )
        expect_close(received, expected, where, atol=_ATOL, variants=variants)
    # float32: o gradiente que volta tem o dtype da saída, o mesmo na resposta e na referência.
    x = torch.randn(2, 5, 6, generator=gen)
    check_gradients(
        rope_half,
        _rope_half,
        {"x": x, "theta": 500.0},
        "No teste de gradiente (x (2, 5, 6), float32)",
        wrt=("x",),
        atol=1e-4,
    )


def _far_from_all(received: Tensor, expected: Tensor, variants: list[tuple[str, Tensor]]) -> bool:
    """A resposta não bate nem com o esperado nem com nenhuma variante calculada?"""
    return all(max_abs_diff(received, ref) > _ATOL for ref in [expected, *(w for _, w in variants)])


# --------------------------------------------------------------------------------------
# Exercício 2: GQA sem repetir K e V
# --------------------------------------------------------------------------------------
_GQA_HINT = (
    "Confira a assinatura, gqa_attention(q, k, v), e as formas: q é (b, h, t, d_h) e k, v "
    "são (b, h_kv, s, d_h); as g = h / h_kv cabeças de um grupo podem virar g·t linhas de "
    "consulta, q.reshape(b, h_kv, g * t, d_h)."
)


def _gqa(
    q: Tensor, k: Tensor, v: Tensor, *, modulo: bool = False, scale: bool = True, dim: int = -1
) -> Tensor:
    """GQA de referência (ou um engano típico): ``(b, h, t, d_h)``."""
    h, h_kv = q.shape[1], k.shape[1]
    heads = torch.arange(h) % h_kv if modulo else torch.arange(h) // (h // h_kv)
    scores = q @ k[:, heads].transpose(-2, -1)  # (b, h, t, s)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=dim) @ v[:, heads]  # (b, h, t, d_h)


def _gqa_softmax_over_rows(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Engano típico: softmax sobre as g·t linhas de consulta do grupo, não sobre as chaves."""
    b, h, t, d_h = q.shape
    grouped = q.reshape(b, k.shape[1], -1, d_h)  # (b, h_kv, g·t, d_h)
    weights = torch.softmax(grouped @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-2)
    return (weights @ v).reshape(b, h, t, d_h)


def _gqa_cases(gen: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    """(descrição, (b, h, h_kv, t, s, d_h)). Com t < s e t < d_h, nenhum tensor legítimo da
    conta (q, pontuações, saída) chega ao tamanho de K repetido g vezes."""
    h_kv = int(torch.randint(1, 4, (), generator=gen))
    g = int(torch.randint(2, 4, (), generator=gen))
    t = int(torch.randint(1, 4, (), generator=gen))
    s = t + int(torch.randint(1, 6, (), generator=gen))
    d_h = t + int(torch.randint(1, 6, (), generator=gen))
    b = int(torch.randint(1, 3, (), generator=gen))
    random = (b, g * h_kv, h_kv, t, s, d_h)
    return [
        ("h=4, h_kv=2 (grupos de 2)", (2, 4, 2, 3, 5, 8)),
        ("h=6, h_kv=3 (grupos de 2)", (1, 6, 3, 2, 4, 5)),
        ("h=4, h_kv=1 (MQA)", (2, 4, 1, 1, 7, 4)),
        ("h=3, h_kv=3 (MHA: grupos de 1)", (1, 3, 3, 2, 6, 4)),
        (f"h={g * h_kv}, h_kv={h_kv} (caso sorteado, semente {seed})", random),
    ]


_ATTENTION_FUNCTIONS = {"scaled_dot_product_attention", "multi_head_attention_forward"}


@exercise("Exercício 2 (GQA sem repetir K e V)")
def check_gqa_attention(gqa_attention: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """``gqa_attention(q (b, h, t, d_h), k, v (b, h_kv, s, d_h)) -> (b, h, t, d_h)``."""
    gen, seed = case_generator()
    for description, (b, h, h_kv, t, s, d_h) in _gqa_cases(gen, seed):
        g = h // h_kv
        where = f"Para q {(b, h, t, d_h)} e k, v {(b, h_kv, s, d_h)}, {description}"
        q, k, v = (
            torch.randn(*shape, generator=gen, dtype=torch.float64)
            for shape in ((b, h, t, d_h), (b, h_kv, s, d_h), (b, h_kv, s, d_h))
        )
        with record_ops() as ops, record_torch_calls() as calls:
            received = call_answer(gqa_attention, {"q": q, "k": k, "v": v}, where, _GQA_HINT)
        # O núcleo fundido pelo nome ATen, ou a função do PyTorch por qualquer caminho (no
        # torch 2.6, o F.scaled_dot_product_attention com GQA na CPU vira contas comuns).
        fused = ops.used(ATTENTION_KERNEL_OPS) | (calls & _ATTENTION_FUNCTIONS)
        expect(
            not fused,
            f"{where}, sua função usou a atenção fundida do PyTorch ({', '.join(sorted(fused))}): "
            "o exercício pede a conta escrita por você.",
        )
        copies = [(op, shape) for op, shape in ops.outputs if math.prod(shape) >= g * k.numel()]
        expect(
            g == 1 or not copies,
            f"{where}, durante a chamada foi criado um tensor {copies[0][1] if copies else ''} "
            f"(pela operação {copies[0][0] if copies else ''}) com {g} vezes os elementos de K: "
            "K ou V foram repetidos, por você ou pelo PyTorch por baixo (um matmul entre "
            "(b, h_kv, g, t, d_h) e (b, h_kv, 1, d_h, s) copia K expandido). Junte as g "
            "cabeças de um grupo como g·t linhas de consulta.",
        )
        if isinstance(received, Tensor) and tuple(received.shape) == (b, h_kv, g * t, d_h):
            expect(
                g == 1,
                f"{where}, recebi a forma (b, h_kv, g·t, d_h) = {tuple(received.shape)}: falta "
                f"desfazer o agrupamento e voltar a (b, h, t, d_h) = {(b, h, t, d_h)}.",
            )
        variants = [
            (
                "a cabeça de consulta j usou a cabeça de K/V j % h_kv (o que .repeat daria); "
                "ela usa j // g, porque as g cabeças de um grupo são vizinhas.",
                _gqa(q, k, v, modulo=True),
            ),
            ("faltou dividir as pontuações por sqrt(d_h).", _gqa(q, k, v, scale=False)),
            (
                "o softmax foi tirado sobre as consultas; ele é sobre as chaves (dim=-1).",
                _gqa(q, k, v, dim=-2),
            ),
            (
                "o softmax foi tirado sobre as g·t linhas de consulta do grupo; ele é sobre as "
                "chaves (dim=-1).",
                _gqa_softmax_over_rows(q, k, v),
            ),
        ]
        expect_close(received, _gqa(q, k, v), where, atol=_ATOL, variants=variants)
    q, k, v = (
        torch.randn(*shape, generator=gen, dtype=torch.float64)
        for shape in ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5))
    )
    check_gradients(
        gqa_attention,
        _gqa,
        {"q": q, "k": k, "v": v},
        "No teste de gradiente (h=4, h_kv=2)",
        atol=1e-6,
    )


# --------------------------------------------------------------------------------------
# Exercício 3: o cache circular da janela deslizante (um passo da geração)
# --------------------------------------------------------------------------------------
_ROLLING_HINT = (
    "Confira a assinatura, rolling_step(cache_k, cache_v, q, k_new, v_new, pos), e as formas: "
    "q, k_new e v_new são (b, h, 1, d_h), o token da posição pos; cache_k e cache_v são "
    "(b, h, W, d_h), com W = cache_k.shape[-2]; devolva a atenção (b, h, 1, d_h)."
)


def _attend(q: Tensor, k: Tensor, v: Tensor, *, scale: bool = True) -> Tensor:
    """Atenção sem máscara de ``q (b, h, 1, d_h)`` sobre ``k, v (b, h, n, d_h)``."""
    scores = q @ k.transpose(-2, -1)  # (b, h, 1, n)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v  # (b, h, 1, d_h)


def _window_reference(q: Tensor, keys: Tensor, values: Tensor, pos: int, window: int) -> Tensor:
    """A atenção da posição ``pos`` com janela deslizante, a partir da sequência inteira.

    ``keys``, ``values`` ``(b, h, L, d_h)``: a consulta vê as posições
    ``pos - window + 1 .. pos`` (a máscara de ``tpt.sliding_window_mask``, linha ``pos``).
    """
    first = max(0, pos - window + 1)
    return _attend(q, keys[:, :, first : pos + 1], values[:, :, first : pos + 1])


def _rolling_cases(gen: torch.Generator, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    """(descrição, (b, h, W, d_h, L)): L passos de geração com um cache de W vagas."""
    window = int(torch.randint(2, 7, (), generator=gen))
    shape = (
        int(torch.randint(1, 3, (), generator=gen)),
        int(torch.randint(1, 4, (), generator=gen)),
        window,
        int(torch.randint(2, 9, (), generator=gen)),
        2 * window + int(torch.randint(1, window + 1, (), generator=gen)),
    )
    return [
        ("W=4, 11 passos", (1, 2, 4, 8, 11)),
        ("W=3, 10 passos, lote 2", (2, 3, 3, 4, 10)),
        ("W=2, 7 passos", (1, 1, 2, 5, 7)),
        ("W=8, só 5 passos (o cache nunca enche)", (1, 2, 8, 4, 5)),
        (f"W={window}, {shape[-1]} passos (caso sorteado, semente {seed})", shape),
    ]


def _garbage(gen: torch.Generator, b: int, h: int, window: int, d_h: int) -> tuple[Tensor, Tensor]:
    """Dois caches ``(b, h, W, d_h)`` com lixo, como um ``torch.empty``: valores quaisquer,
    longe dos tokens, e ``NaN``, ``+inf`` e ``-inf`` nas vagas 1, 2, 3... (a vaga 0 é a
    primeira escrita). Atenção com peso 0 sobre essas vagas ainda dá ``NaN`` (0 · NaN)."""
    caches = []
    for _ in range(2):
        cache = 5 + 3 * torch.randn(b, h, window, d_h, generator=gen, dtype=torch.float64)
        for slot in range(1, window):
            cache[:, :, slot, slot % d_h] = (math.nan, math.inf, -math.inf)[(slot - 1) % 3]
        caches.append(cache)
    return caches[0], caches[1]


def _same_bits(a: Tensor, b: Tensor) -> bool:
    """Mesma forma, mesmo dtype e os mesmos bits (``NaN`` do lixo igual a si mesmo)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() and a.element_size() == 8:
        return torch.equal(a.contiguous().view(torch.int64), b.contiguous().view(torch.int64))
    return torch.equal(a, b)


# Saídas de um tensor para o numpy ou o Python: levam os valores do cache para fora.
_EXPORTS = frozenset({"numpy", "tolist", "__array__", "__dlpack__", "item", "__float__"})


class _CacheCopies:
    """Quais elementos de cada cache apareceram fora dele durante a chamada da resposta.

    Todo tensor novo que uma operação produz (fora da memória dos caches, inclusive um
    tensor redimensionado com ``resize_`` e preenchido com ``copy_``) e todo tensor levado
    para o numpy ou o Python é comparado, valor a valor, com o conteúdo dos caches antes e
    depois da escrita: os valores do lixo e dos tokens são sorteados em float64, e um valor
    igual é uma cópia. Vagas com ``NaN`` ou infinito não entram na conta.
    """

    def __init__(self, caches: dict[str, tuple[Tensor, Tensor, Tensor]]) -> None:
        # nome -> (o cache, o conteúdo antes da chamada, o esperado depois dela)
        self.storages = {_storage(cache) for cache, _, _ in caches.values()}
        # Por cache, os dois conteúdos lado a lado (2, n): um valor achado em qualquer um
        # dos dois marca a posição.
        self.tables = {
            name: torch.stack((before.reshape(-1), after.reshape(-1)))
            for name, (_, before, after) in caches.items()
        }
        self.converted: dict[tuple[str, torch.dtype], tuple[Tensor, Tensor]] = {}
        # Os valores finitos de todos os conteúdos, para descartar depressa uma saída que
        # não tem nenhum deles (pontuações, pesos, a própria atenção).
        self.known = {float(x) for t in self.tables.values() for x in t[torch.isfinite(t)].tolist()}
        self.covered = {
            name: torch.zeros(t.shape[1], dtype=torch.bool) for name, t in self.tables.items()
        }
        self.sources: dict[str, list[str]] = {name: [] for name in caches}

    def _table(self, name: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Os conteúdos do cache no dtype da saída, e onde eles são finitos."""
        key = (name, dtype)
        if key not in self.converted:
            table = self.tables[name].to(dtype)
            self.converted[key] = (table, torch.isfinite(table))
        return self.converted[key]

    def see(self, source: str, tensor: Any, *, export: bool = False) -> None:
        if not isinstance(tensor, Tensor) or not tensor.is_floating_point():
            return
        if not export and _storage(tensor) in self.storages:
            return  # o próprio cache (uma vista dele, ou a escrita no lugar): não é cópia
        with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad():
            values = tensor.detach().reshape(-1).cpu()
            if values.dtype == torch.float64 and self.known.isdisjoint(values.tolist()):
                return
            values = values[torch.isfinite(values)]
            if values.numel() == 0:
                return
            for name, covered in self.covered.items():
                table, finite = self._table(name, values.dtype)
                hit = (torch.isin(table, values) & finite).any(dim=0)  # (n,)
                if bool((hit & ~covered).any()):
                    covered |= hit
                    if source not in self.sources[name]:
                        self.sources[name].append(source)

    def whole(self, name: str) -> bool:
        """Todos os elementos finitos do cache ``name`` foram copiados?"""
        relevant = torch.isfinite(self.tables[name]).any(dim=0)
        return bool(relevant.any()) and bool(self.covered[name][relevant].all())


def _storage(tensor: Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensores sem memória própria
        return None


def _outputs(out: Any) -> Iterator[Any]:
    if isinstance(out, (tuple, list)):
        for item in out:
            yield from _outputs(item)
    else:
        yield out


class _CopyOps(TorchDispatchMode):
    def __init__(self, watch: _CacheCopies) -> None:
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        if not _is_view(func):  # uma vista não cria dados (a de uma cópia já foi vista)
            for tensor in _outputs(out):
                self.watch.see(func.overloadpacket.__name__, tensor)
        return out


def _is_view(func: Any) -> bool:
    return any(a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns)


class _CopyExports(TorchFunctionMode):
    def __init__(self, watch: _CacheCopies) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = getattr(func, "__name__", "")
        if name in _EXPORTS and args:
            self.watch.see(name, args[0], export=True)
        return func(*args, **(kwargs or {}))


def _cache_message(where: str, before: Tensor, after: Tensor, new: Tensor, slot: int) -> str:
    """O que a resposta fez com o cache (já se sabe que ele não ficou como esperado)."""
    slots = range(after.shape[2])
    changed = [s for s in slots if not _same_bits(after[:, :, s], before[:, :, s])]
    if not changed:
        return (
            f"{where}, o cache não mudou: a chave e o valor novos precisam ficar guardados, no "
            f"lugar, na vaga pos % W = {slot} (os passos seguintes vão precisar deles)."
        )
    if (
        len(changed) == 1
        and changed[0] != slot
        and _same_bits(after[:, :, changed[0]], new[:, :, 0])
    ):
        return (
            f"{where}, o token novo foi para a vaga {changed[0]}; a vaga da posição pos é "
            f"pos % W = {slot}."
        )
    if len(changed) > 1:
        return (
            f"{where}, mudaram as vagas {', '.join(map(str, changed))}: no cache circular só a "
            f"vaga pos % W = {slot} muda; nada se move, a posição i fica na vaga i % W até ser "
            "sobrescrita pela posição i + W."
        )
    return (
        f"{where}, o cache não ficou como esperado: só a vaga pos % W = {slot} muda, e recebe "
        "k_new[:, :, 0] (em cache_k) e v_new[:, :, 0] (em cache_v)."
    )


@exercise("Exercício 3 (cache circular da janela deslizante)")
def check_rolling_step(rolling_step: Callable[..., Tensor]) -> None:
    """``rolling_step(cache_k, cache_v (b, h, W, d_h), q, k_new, v_new (b, h, 1, d_h), pos)``.

    Devolve ``(b, h, 1, d_h)`` e escreve, no lugar, a vaga ``pos % W`` dos dois caches.
    """
    gen, seed = case_generator()
    for description, (b, h, window, d_h, steps) in _rolling_cases(gen, seed):
        queries, keys, values = (
            torch.randn(b, h, steps, d_h, generator=gen, dtype=torch.float64) for _ in range(3)
        )
        # O cache começa com lixo (como um torch.empty), com NaN e infinitos.
        cache_k, cache_v = _garbage(gen, b, h, window, d_h)
        for pos in range(steps):
            where = f"Para b={b}, h={h}, d_h={d_h}, {description}, no passo pos={pos}"
            q, k_new, v_new = (x[:, :, pos : pos + 1].clone() for x in (queries, keys, values))
            before_k, before_v = cache_k.clone(), cache_v.clone()
            slot = pos % window
            expected_k, expected_v = before_k.clone(), before_v.clone()
            expected_k[:, :, slot] = k_new[:, :, 0]
            expected_v[:, :, slot] = v_new[:, :, 0]
            watch = _CacheCopies(
                {
                    "cache_k": (cache_k, before_k, expected_k),
                    "cache_v": (cache_v, before_v, expected_v),
                }
            )

            # Os caches vão na frente, fora de call_answer: eles devem mudar (no lugar). A
            # vigia das cópias liga só em volta da resposta (não das cópias de call_answer).
            def step(
                q: Tensor,
                k_new: Tensor,
                v_new: Tensor,
                pos: int,
                _caches: tuple[Tensor, Tensor] = (cache_k, cache_v),
                _watch: _CacheCopies = watch,
            ) -> Tensor:
                with _CopyExports(_watch), _CopyOps(_watch):
                    return rolling_step(*_caches, q, k_new, v_new, pos)

            with record_ops() as ops:
                received = call_answer(
                    step, {"q": q, "k_new": k_new, "v_new": v_new, "pos": pos}, where, _ROLLING_HINT
                )
            # Operações no lugar (nome terminado em "_") devolvem o próprio cache: não contam.
            copies = [
                (op, shape)
                for op, shape in ops.outputs
                if not op.endswith("_") and math.prod(shape) >= cache_k.numel()
            ]
            expect(
                not copies,
                f"{where}, durante a chamada foi criado um tensor {copies[0][1] if copies else ''}"
                f" (pela operação {copies[0][0] if copies else ''}) com tantos elementos quanto "
                "o cache: o cache foi copiado (um torch.cat, um torch.roll, um clone, um "
                "torch.where sobre o cache inteiro...). No cache circular nada se move: escreva "
                "só a vaga pos % W, no lugar, e atenda às vagas como estão.",
            )
            for name in ("cache_k", "cache_v"):
                expect(
                    not watch.whole(name),
                    f"{where}, o cache foi copiado: durante a chamada, todos os valores de "
                    f"`{name}` apareceram fora dele, em tensores novos ou levados para o numpy "
                    f"ou o Python (pelas operações {', '.join(watch.sources[name])}). Cópias em "
                    "partes (duas metades), num tensor redimensionado com resize_ ou pelo "
                    "numpy também contam: escreva só a vaga pos % W, no lugar, e "
                    "atenda às vagas como estão.",
                )
            for name, cache, before, expected, new in (
                ("cache_k", cache_k, before_k, expected_k, k_new),
                ("cache_v", cache_v, before_v, expected_v, v_new),
            ):
                expect(
                    _same_bits(cache, expected),
                    _cache_message(f"{where}, em `{name}`", before, cache, new, slot)
                    if cache.shape == expected.shape
                    else f"{where}, `{name}` mudou de forma: {tuple(cache.shape)}.",
                )
            filled = min(pos + 1, window)
            old = slice(0, min(pos, window))  # as vagas preenchidas antes deste passo
            empty = torch.arange(window) >= filled  # (W,): vagas ainda sem token
            scores = q @ cache_k.transpose(-2, -1) / math.sqrt(d_h)  # (b, h, 1, W)
            weights = scores.masked_fill(empty, -math.inf).softmax(dim=-1)  # (b, h, 1, W)
            variants = [
                (
                    "o lixo das vagas que ainda não receberam nenhum token entrou nas "
                    "pontuações: o token atendeu a todas as W vagas, ou a máscara foi somada "
                    "(o lixo pode ter NaN, como um torch.empty, e NaN + (-inf) dá NaN). "
                    "Enquanto pos < W - 1, só as vagas 0..pos valem: use só elas, ou "
                    "masked_fill, que troca a pontuação em vez de somar.",
                    _attend(q, cache_k, cache_v),
                ),
                (
                    "as vagas sem token receberam peso 0, mas entraram na multiplicação pelos "
                    "valores: o lixo de um cache novo pode ter NaN ou infinito (como um "
                    "torch.empty), e 0 · NaN e 0 · ∞ dão NaN. Use só as vagas preenchidas "
                    "(cache_v[:, :, :pos + 1] enquanto pos < W).",
                    weights @ cache_v,
                ),
                (
                    "o token atendeu ao cache de antes da escrita e à chave nova: são W + 1 "
                    "chaves, e a da posição pos - W já saiu da janela. Escreva a vaga pos % W "
                    "antes de calcular a atenção.",
                    _attend(
                        q,
                        torch.cat((before_k[:, :, old], k_new), dim=2),
                        torch.cat((before_v[:, :, old], v_new), dim=2),
                    ),
                ),
                (
                    "faltou dividir as pontuações por sqrt(d_h).",
                    _attend(q, cache_k[:, :, :filled], cache_v[:, :, :filled], scale=False),
                ),
            ]
            expect_close(
                received,
                _window_reference(q, keys, values, pos, window),
                where,
                atol=_ATOL,
                variants=variants,
            )
