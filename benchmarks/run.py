"""Benchmarks do tpt contra as implementações do PyTorch (o alvo `make bench`).

    python benchmarks/run.py                     # CPU, 1 thread, 7 repetições
    python benchmarks/run.py --threads 2         # outra quantidade de threads
    python benchmarks/run.py --device cuda       # linhas de GPU, quando houver CUDA
    python benchmarks/run.py --only a,c          # só algumas linhas
    python benchmarks/run.py --perfil            # também mostra onde o tpt gasta o tempo

Cada linha da tabela é uma RAZÃO medida numa mesma execução: as duas versões rodam
alternadas (A B, depois B A, ...) depois do aquecimento, e a razão de cada repetição
entra na mediana. Assim a carga de outros processos afeta as duas por igual. Além do
relógio (`time.perf_counter`), na CPU guardamos também o tempo de CPU do processo
(`time.process_time`), menos sensível a uma máquina compartilhada.

Linhas:
  a) atenção multicabeça, ida e volta: tpt (caminho fundido e explícito) / nn.MultiheadAttention;
  b) passo de treino de um GPT: tpt.GPT / o mesmo modelo feito de nn.TransformerEncoderLayer;
  c) geração de 512 tokens com e sem cache de K/V (tpt.generate), e o tpt.generate contra
     um laço mínimo com cache (c3), contra o laço sem cache do nanoGPT (c4) e contra o
     generate do Hugging Face no mesmo modelo (c5, quando o transformers está instalado);
  d) atenção explícita (didática) / F.scaled_dot_product_attention em t=1024: tempo e
     pico de memória;
  e) treino: tpt.GPT + tpt.train contra um GPT mínimo escrito com primitivas do PyTorch
     (mesmo número de parâmetros), na configuração do notebook 09 e em 4 × 4 × 128.

A tabela sai na tela e em benchmarks/results/<máquina>-<dispositivo>.md.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

# O profiler de memória escreve linhas de diagnóstico no stderr; 6 = só erros graves.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # roda também sem o pacote instalado (python benchmarks/run.py)
    sys.path.insert(0, str(ROOT))

from tpt.attention import MultiHeadAttention, scaled_dot_product_attention  # noqa: E402
from tpt.generation import generate  # noqa: E402
from tpt.model import GPT, GPTConfig  # noqa: E402

RESULTS_DIR = ROOT / "benchmarks" / "results"
ROW_KEYS = ("a", "b", "c", "d", "e")
MIB = 2**20


# --------------------------------------------------------------------------------------
# Tamanhos
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    """Tamanhos de cada linha. Os padrões são os da tabela; os testes usam `tiny()`."""

    mha_batch: int = 8
    mha_len: int = 256
    mha_dim: int = 256
    mha_heads: int = 8
    gpt_vocab: int = 90  # o vocabulário de caracteres do corpus do curso
    gpt_dim: int = 128
    gpt_layers: int = 4
    gpt_heads: int = 4
    gpt_len: int = 128
    gpt_batch: int = 16
    gen_prompt: int = 16
    gen_tokens: int = 512
    sdpa_batch: int = 1
    sdpa_heads: int = 8
    sdpa_len: int = 1024
    sdpa_head_dim: int = 64
    race_len: int = 64  # linha e: o GPT do tpt contra um GPT mínimo
    race_batch: int = 12
    race_steps: int = 10  # passos de treino por repetição medida
    course_dim: int = 128  # a configuração do GPT de caracteres do notebook 09
    course_layers: int = 3
    course_heads: int = 4
    course_len: int = 64
    course_batch: int = 16

    @classmethod
    def tiny(cls) -> Sizes:
        """Tamanhos minúsculos: percorrem todo o código em menos de um segundo."""
        return cls(
            mha_batch=2, mha_len=8, mha_dim=16, mha_heads=2,
            gpt_vocab=11, gpt_dim=16, gpt_layers=1, gpt_heads=2, gpt_len=8, gpt_batch=2,
            gen_prompt=2, gen_tokens=4,
            sdpa_heads=2, sdpa_len=16, sdpa_head_dim=8,
            race_len=8, race_batch=2, race_steps=2,
            course_dim=16, course_layers=1, course_heads=2, course_len=8, course_batch=2,
        )


# --------------------------------------------------------------------------------------
# Medição
# --------------------------------------------------------------------------------------
@dataclass
class Timing:
    """Tempos de cada repetição, em segundos: relógio e CPU do processo."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int,
    warmup: int,
    device: torch.device,
) -> dict[str, Timing]:
    """Roda as funções alternadas, `repeats` vezes cada, depois de `warmup` rodadas.

    A ordem inverte a cada repetição (A B, B A, ...) para que uma mudança de carga no
    meio da medição não favoreça sempre a mesma versão.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    names = list(fns)
    timings = {name: Timing() for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            _sync(device)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            fns[name]()
            _sync(device)
            timings[name].wall.append(time.perf_counter() - wall0)
            timings[name].cpu.append(time.process_time() - cpu0)
    return timings


def median_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Mediana das razões a[i] / b[i] (cada par medido na mesma repetição)."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """Pico de memória (bytes) alocada pelos operadores do PyTorch durante `fn()`, na CPU.

    Usa `torch.profiler` com `profile_memory=True`: cada alocação fica no operador que a
    fez e cada liberação vira um evento "[memory]" negativo. Somando na ordem do tempo,
    o máximo da soma é o pico acima do que já existia antes (as entradas não contam).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out  # a saída também é liberada: o pico inclui a saída viva no fim
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    current = peak = 0
    for event in events:
        current += event.self_cpu_memory_usage
        peak = max(peak, current)
    return peak


def cuda_peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Pico de memória da GPU acima do que já estava alocado (torch.cuda.max_memory_allocated)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return peak


# --------------------------------------------------------------------------------------
# Linhas da tabela
# --------------------------------------------------------------------------------------
@dataclass
class Row:
    """Uma linha da tabela: `ratio` = tpt / referência (ou aceleração, na linha c)."""

    key: str
    description: str
    tpt: str
    reference: str
    ratio: float
    ratio_cpu: float | None
    target: str
    ok: bool | None
    note: str = ""


def _fmt(x: float, digits: int = 2) -> str:
    """Número com vírgula decimal (pt-BR)."""
    return f"{x:,.{digits}f}".replace(",", "_").replace(".", ",").replace("_", ".")


def _size(n_bytes: float) -> str:
    if n_bytes >= MIB:
        return f"{_fmt(n_bytes / MIB, 1)} MiB"
    return f"{_fmt(n_bytes / 2**10, 1)} KiB"


def _ms(seconds: float) -> str:
    return f"{_fmt(seconds * 1e3, 1)} ms"


def _within(ratio: float, limit: float, *, at_most: bool) -> bool:
    return ratio <= limit if at_most else ratio >= limit


def bench_mha(sizes: Sizes, *, device: torch.device, repeats: int, warmup: int) -> list[Row]:
    """a) MHA ida e volta (forward + backward), autoatenção sem máscara, modo treino."""
    b, t, d, h = sizes.mha_batch, sizes.mha_len, sizes.mha_dim, sizes.mha_heads
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d, h, batch_first=True).to(device)
    fused = MultiHeadAttention.from_torch(ref)
    explicit = MultiHeadAttention.from_torch(ref)
    explicit.fused = False
    x = torch.randn(b, t, d, device=device, requires_grad=True)

    def run_ref() -> None:
        # need_weights=False: o caminho rápido do nn.MultiheadAttention (sem a média
        # dos pesos, que o tpt também não calcula).
        out, _ = ref(x, x, x, need_weights=False)
        out.sum().backward()

    def run_fused() -> None:
        out, _ = fused(x)
        out.sum().backward()

    def run_explicit() -> None:
        out, _ = explicit(x)
        out.sum().backward()

    tm = compare(
        {"ref": run_ref, "fused": run_fused, "explicit": run_explicit},
        repeats=repeats, warmup=warmup, device=device,
    )
    cpu = device.type == "cpu"
    shape = f"b={b}, t={t}, d={d}, h={h}"
    ratio = median_ratio(tm["fused"].wall, tm["ref"].wall)
    ratio_ex = median_ratio(tm["explicit"].wall, tm["ref"].wall)
    return [
        Row(
            "a1", f"MHA ida+volta ({shape}): tpt fundido / nn.MultiheadAttention",
            _ms(tm["fused"].median), _ms(tm["ref"].median), ratio,
            median_ratio(tm["fused"].cpu, tm["ref"].cpu) if cpu else None,
            "≤ 1,10", _within(ratio, 1.10, at_most=True),
        ),
        Row(
            "a2", f"MHA ida+volta ({shape}): tpt explícito / nn.MultiheadAttention",
            _ms(tm["explicit"].median), _ms(tm["ref"].median), ratio_ex,
            median_ratio(tm["explicit"].cpu, tm["ref"].cpu) if cpu else None,
            "referência", None,
        ),
    ]


class TorchGPT(nn.Module):
    """O mesmo GPT do tpt feito com peças do PyTorch (a referência da linha b).

    Embedding de tokens (escala sqrt(d)) + posição aprendida -> N camadas
    nn.TransformerEncoderLayer(norm_first=True, gelu, batch_first=True) com máscara
    causal -> LayerNorm final -> cabeça amarrada à embedding. Mesma contagem de
    parâmetros que `tpt.GPT` com `GPTConfig(dropout=0.0)`.
    """

    def __init__(self, vocab_size: int, max_len: int, embed_dim: int, num_heads: int,
                 num_layers: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.tok = nn.Embedding(vocab_size, embed_dim)
        self.pos = nn.Embedding(max_len, embed_dim)
        layer = nn.TransformerEncoderLayer(
            embed_dim, num_heads, 4 * embed_dim, dropout=0.0, activation="gelu",
            batch_first=True, norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers, norm=nn.LayerNorm(embed_dim), enable_nested_tensor=False
        )
        self.head = nn.Linear(embed_dim, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # pesos amarrados, como no tpt
        mask = nn.Transformer.generate_square_subsequent_mask(max_len)  # (T, T), -inf acima
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: Tensor) -> Tensor:
        t = idx.shape[1]
        positions = torch.arange(t, device=idx.device)  # (t,)
        x = self.tok(idx) * math.sqrt(self.embed_dim) + self.pos(positions)  # (b, t, d)
        x = self.encoder(x, mask=self.mask[:t, :t], is_causal=True)  # (b, t, d)
        return self.head(x)  # (b, t, V)


def bench_gpt_step(sizes: Sizes, *, device: torch.device, repeats: int, warmup: int) -> list[Row]:
    """b) Um passo de treino completo: forward, cross-entropy, backward e AdamW."""
    s = sizes
    torch.manual_seed(0)
    ours = GPT(GPTConfig(
        vocab_size=s.gpt_vocab, max_len=s.gpt_len, embed_dim=s.gpt_dim,
        num_heads=s.gpt_heads, num_layers=s.gpt_layers, dropout=0.0,
    )).to(device)
    ref = TorchGPT(s.gpt_vocab, s.gpt_len, s.gpt_dim, s.gpt_heads, s.gpt_layers).to(device)
    n_ours, n_ref = ours.num_parameters(), sum(p.numel() for p in ref.parameters())
    if n_ours != n_ref:
        raise RuntimeError(
            f"os dois modelos da linha b deveriam ter o mesmo número de parâmetros; "
            f"tpt.GPT tem {n_ours} e a referência tem {n_ref}"
        )
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, s.gpt_vocab, (s.gpt_batch, s.gpt_len), generator=gen).to(device)
    targets = torch.randint(0, s.gpt_vocab, (s.gpt_batch, s.gpt_len), generator=gen).to(device)

    def make_step(model: nn.Module) -> Callable[[], None]:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

        def step() -> None:
            logits = model(idx)  # (b, t, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    tm = compare(
        {"ref": make_step(ref), "tpt": make_step(ours)},
        repeats=repeats, warmup=warmup, device=device,
    )
    ratio = median_ratio(tm["tpt"].wall, tm["ref"].wall)
    tokens = s.gpt_batch * s.gpt_len
    return [Row(
        "b", f"Passo de treino GPT (d={s.gpt_dim}, {s.gpt_layers} camadas, {s.gpt_heads} "
        f"cabeças, t={s.gpt_len}, b={s.gpt_batch}): tpt.GPT / nn.TransformerEncoderLayer",
        _ms(tm["tpt"].median), _ms(tm["ref"].median), ratio,
        median_ratio(tm["tpt"].cpu, tm["ref"].cpu) if device.type == "cpu" else None,
        "≤ 1,10", _within(ratio, 1.10, at_most=True),
        note=f"parâmetros: tpt {_fmt(n_ours, 0)} = referência {_fmt(n_ref, 0)}; "
        f"{_fmt(tokens / tm['tpt'].median, 0)} tokens/s (tpt) no treino",
    )]


def bench_generation(
    sizes: Sizes, *, device: torch.device, repeats: int, warmup: int
) -> list[Row]:
    """c) Geração gulosa de `gen_tokens` tokens com e sem cache de K/V (mesmo modelo)."""
    s = sizes
    torch.manual_seed(0)
    model = GPT(GPTConfig(
        vocab_size=s.gpt_vocab, max_len=s.gen_prompt + s.gen_tokens, embed_dim=s.gpt_dim,
        num_heads=s.gpt_heads, num_layers=s.gpt_layers,
    )).to(device).eval()
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, s.gpt_vocab, (1, s.gen_prompt), generator=gen).to(device)
    n = s.gen_tokens
    outputs: dict[str, Tensor] = {}

    def run(use_cache: bool) -> Callable[[], None]:
        def fn() -> None:
            outputs[str(use_cache)] = generate(model, prompt, n, greedy=True, use_cache=use_cache)

        return fn

    tm = compare(
        {"cache": run(True), "sem_cache": run(False)},
        repeats=repeats, warmup=warmup, device=device,
    )
    same = torch.equal(outputs["True"], outputs["False"])
    speedup = median_ratio(tm["sem_cache"].wall, tm["cache"].wall)
    tps_cache = n / tm["cache"].median
    tps_plain = n / tm["sem_cache"].median
    target_tps = 900.0
    cpu = device.type == "cpu"
    return [Row(
        "c", f"Geração gulosa de {n} tokens (prompt {s.gen_prompt}, b=1, d={s.gpt_dim}, "
        f"{s.gpt_layers} camadas): aceleração do cache de K/V (sem cache / com cache)",
        f"{_fmt(tps_cache, 0)} tokens/s com cache",
        f"{_fmt(tps_plain, 0)} tokens/s sem cache",
        speedup,
        median_ratio(tm["sem_cache"].cpu, tm["cache"].cpu) if device.type == "cpu" else None,
        *(("≥ 5,0×", _within(speedup, 5.0, at_most=False)) if cpu else ("informativo", None)),
        note=f"tokens idênticos com e sem cache: {'sim' if same else 'não'}; "
        f"{_ms(tm['cache'].median / n)} por token com cache"
        + ("" if cpu else "; as metas das linhas c e c2 são para a CPU: com b=1 e d=128, a "
           "GPU espera o Python a cada token, com ou sem cache"),
    ), Row(
        "c2", f"Geração com cache, {n} tokens, b=1 (d={s.gpt_dim}, {s.gpt_layers} camadas): "
        f"vazão / meta de {_fmt(target_tps, 0)} tokens/s",
        f"{_fmt(tps_cache, 0)} tokens/s", f"{_fmt(target_tps, 0)} tokens/s (meta)",
        tps_cache / target_tps, None,
        *(("≥ 1,00×", _within(tps_cache / target_tps, 1.0, at_most=False)) if cpu
          else ("informativo", None)),
        note="meta absoluta do pedido; o que esta CPU permite aparece na linha c3",
    ), *_minimal_decoding_row(s, device=device, repeats=repeats, warmup=warmup)]


def _minimal_decoding_row(
    s: Sizes, *, device: torch.device, repeats: int, warmup: int
) -> list[Row]:
    """c3, c4) tpt.generate (com cache) / laços de geração escritos com primitivas do PyTorch.

    Os modelos têm o mesmo tamanho e o mesmo número de parâmetros (sem viés, como a
    referência da linha e). Todas as versões rodam alternadas na mesma medição, e cada
    razão é tokens/s do tpt ÷ tokens/s da referência (> 1: o tpt é mais rápido):

    - c3: o laço com cache mais enxuto que se escreve em PyTorch (``generate_greedy``);
    - c4: o laço sem cache do nanoGPT: a cada token, o contexto inteiro (cortado em
      ``max_len``) passa pelo modelo de novo (``generate_greedy_uncached``).

    Uma referência nova (por exemplo o ``generate`` da Hugging Face) entra como mais uma
    entrada em ``references`` e mais uma linha em ``targets``.
    """
    n, length = s.gen_tokens, s.gen_prompt + s.gen_tokens
    torch.manual_seed(0)
    ours = GPT(GPTConfig(
        vocab_size=s.gpt_vocab, max_len=length, embed_dim=s.gpt_dim, num_heads=s.gpt_heads,
        num_layers=s.gpt_layers, bias=False, dropout=0.0,
    )).to(device).eval()
    ref = MinimalGPT(s.gpt_vocab, length, s.gpt_dim, s.gpt_heads, s.gpt_layers).to(device).eval()
    n_ours, n_ref = ours.num_parameters(), sum(p.numel() for p in ref.parameters())
    prompt = torch.randint(0, s.gpt_vocab, (1, s.gen_prompt),
                           generator=torch.Generator().manual_seed(1)).to(device)
    # chave: (linha, descrição da referência, função, meta mínima da razão)
    references: dict[str, tuple[str, str, Callable[[], object], float | None]] = {
        "cache": ("c3", "laço mínimo com cache", lambda: ref.generate_greedy(prompt, n), 0.9),
        "crop": ("c4", "laço mínimo sem cache (contexto inteiro a cada token, como o nanoGPT)",
                 lambda: ref.generate_greedy_uncached(prompt, n), 3.0),
    }
    theirs = _hf_twin(ours)
    if theirs is not None:  # c5: o mesmo GPT, convertido por tpt.hf.to_hf, no generate do HF
        references["hf"] = (
            "c5", "generate do Hugging Face (o mesmo modelo, convertido por tpt.hf.to_hf)",
            lambda: theirs.generate(prompt, max_new_tokens=n, do_sample=False), None,
        )
    tm = compare(
        {"tpt": lambda: generate(ours, prompt, n, greedy=True),
         **{name: fn for name, (_, _, fn, _) in references.items()}},
        repeats=repeats, warmup=warmup, device=device,
    )
    cpu = device.type == "cpu"
    rows = []
    for name, (key, label, _, target) in references.items():
        ratio = median_ratio(tm[name].wall, tm["tpt"].wall)  # > 1: o tpt é mais rápido
        rows.append(Row(
            key, f"Geração gulosa de {n} tokens, b=1 (d={s.gpt_dim}, {s.gpt_layers} camadas): "
            f"vazão do tpt.generate com cache / {label}",
            f"{_fmt(n / tm['tpt'].median, 0)} tokens/s",
            f"{_fmt(n / tm[name].median, 0)} tokens/s",
            ratio, median_ratio(tm[name].cpu, tm["tpt"].cpu) if cpu else None,
            *((f"≥ {_fmt(target)}×", _within(ratio, target, at_most=False)) if target
              else ("informativo", None)),
            note=(f"parâmetros: tpt {_fmt(n_ours, 0)}, referência {_fmt(n_ref, 0)}; a referência "
                  "usa uma Linear só para Q, K e V e não confere nada") if name != "hf" else
            f"os mesmos pesos (GPT2LMHeadModel de to_hf), escolha gulosa, lote 1; "
            f"transformers {_hf_version()}",
        ))
    return rows


def _hf_version() -> str:
    import transformers

    return transformers.__version__


def _hf_twin(model: GPT) -> nn.Module | None:
    """O mesmo GPT no transformers (``tpt.hf.to_hf``), sem parar no ``<eos>``; ou None."""
    try:
        from tpt.hf import to_hf

        twin = to_hf(model)
    except ImportError:
        return None
    twin.generation_config.eos_token_id = None  # gera sempre os n tokens, como o tpt
    return twin


def bench_sdpa(sizes: Sizes, *, device: torch.device, repeats: int, warmup: int) -> list[Row]:
    """d) Atenção causal, só a ida (sem gradiente): explícita do tpt / a fundida do PyTorch."""
    s = sizes
    b, h, t, dh = s.sdpa_batch, s.sdpa_heads, s.sdpa_len, s.sdpa_head_dim
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, dh, generator=gen).to(device) for _ in range(3))

    @torch.no_grad()
    def run_explicit() -> Tensor:
        return scaled_dot_product_attention(q, k, v, is_causal=True)[0]

    @torch.no_grad()
    def run_fused() -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    tm = compare(
        {"fused": run_fused, "explicit": run_explicit},
        repeats=repeats, warmup=warmup, device=device,
    )
    cpu = device.type == "cpu"
    ratio = median_ratio(tm["explicit"].wall, tm["fused"].wall)
    if cpu:
        mem_explicit, mem_fused = cpu_peak_bytes(run_explicit), cpu_peak_bytes(run_fused)
        method = "torch.profiler(profile_memory=True): pico da soma alocações − liberações"
    else:
        mem_explicit = cuda_peak_bytes(run_explicit, device)
        mem_fused = cuda_peak_bytes(run_fused, device)
        method = "torch.cuda.max_memory_allocated (acima do já alocado)"
    scores = b * h * t * t * q.element_size()  # uma matriz (b, h, t, s) de scores
    out_bytes = b * h * t * dh * q.element_size()
    shape = f"b={b}, h={h}, t={t}, d_h={dh}, causal, só ida"
    return [
        Row(
            "d1", f"Atenção ({shape}): tempo, tpt explícito / F.scaled_dot_product_attention",
            _ms(tm["explicit"].median), _ms(tm["fused"].median), ratio,
            median_ratio(tm["explicit"].cpu, tm["fused"].cpu) if cpu else None,
            "informativo", None,
        ),
        Row(
            "d2", f"Atenção ({shape}): pico de memória, tpt explícito / fundido",
            _size(mem_explicit), _size(mem_fused),
            mem_explicit / max(mem_fused, 1), None, "informativo", None,
            note=f"medido com {method}; fórmula: cada matriz (b, h, t, s) de scores/pesos "
            f"float32 = b·h·t²·4 B = {_size(scores)} (a explícita materializa várias em "
            f"sequência); a saída (b, h, t, d_h) = {_size(out_bytes)}",
        ),
    ]


class MinimalGPT(nn.Module):
    """Um GPT mínimo escrito só com primitivas do PyTorch (a referência da linha e).

    O desenho mais enxuto que se costuma usar: uma única Linear produz Q, K e V juntas,
    ``F.scaled_dot_product_attention(is_causal=True)``, ``F.layer_norm`` só com ganho,
    MLP com GELU, cabeça amarrada à embedding, nenhum viés. Com o mesmo número de
    parâmetros que ``tpt.GPT(GPTConfig(bias=False))``.
    """

    def __init__(self, vocab_size: int, max_len: int, embed_dim: int, num_heads: int,
                 num_layers: int) -> None:
        super().__init__()
        d = embed_dim
        self.num_heads = num_heads
        self.tok = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(_MinimalBlock(d, num_heads) for _ in range(num_layers))
        self.ln_f = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: Tensor) -> Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))  # (b, t, d)
        for block in self.blocks:
            x = block(x)
        x = F.layer_norm(x, x.shape[-1:], self.ln_f)
        return self.head(x)  # (b, t, V)

    @torch.inference_mode()
    def generate_greedy(self, idx: Tensor, n: int) -> Tensor:
        """Geração gulosa com cache de K/V no estilo mínimo (a referência da linha c3).

        Sem conferência de argumentos, sem janela deslizante: o prompt e os ``n`` tokens
        precisam caber em ``max_len``. ``(b, t) -> (b, t + n)``.
        """
        caches: list[tuple[Tensor, Tensor] | None] = [None] * len(self.blocks)
        out, new, offset = idx, idx, 0
        for _ in range(n):
            t = new.shape[1]
            x = self.tok(new) + self.pos.weight[offset : offset + t]  # (b, t, d)
            for i, block in enumerate(self.blocks):
                x, caches[i] = block.step(x, caches[i])
            x = F.layer_norm(x[:, -1:], x.shape[-1:], self.ln_f)  # (b, 1, d)
            new = self.head(x).argmax(dim=-1)  # (b, 1)
            out, offset = torch.cat([out, new], dim=1), offset + t
        return out

    @torch.inference_mode()
    def generate_greedy_uncached(self, idx: Tensor, n: int) -> Tensor:
        """Geração gulosa sem cache, como o ``generate`` do nanoGPT (a referência da linha c4).

        A cada token, o contexto inteiro (cortado nas últimas ``max_len`` posições) passa
        pelo modelo de novo. ``(b, t) -> (b, t + n)``.
        """
        max_len = self.pos.num_embeddings
        for _ in range(n):
            logits = self(idx[:, -max_len:])  # (b, t, V)
            idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        return idx


class _MinimalBlock(nn.Module):
    def __init__(self, d: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.Parameter(torch.ones(d))
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.fc_out = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.step(x, None)[0]

    def step(
        self, x: Tensor, cache: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``x`` (b, t, d) depois das posições do ``cache`` (K, V de (b, h, s, d_h))."""
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(F.layer_norm(x, (d,), self.ln1)).split(d, dim=2)  # 3 x (b, t, d)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))  # (b, h, t, d_h)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        # Um token novo vê todas as chaves; um prompt inteiro (sem cache) é causal.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and t > 1)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))  # (b, t, d)
        return x + self.fc_out(F.gelu(self.fc(F.layer_norm(x, (d,), self.ln2)))), (k, v)


def _race_rows(
    key: str, label: str, *, vocab: int, dim: int, layers: int, heads: int, length: int,
    batch: int, steps: int, device: torch.device, repeats: int, warmup: int,
) -> Row:
    """Um pedaço de treino de ``steps`` passos: ``tpt.train`` com ``tpt.GPT`` / laço mínimo."""
    from tpt.train import lm_loss, train

    torch.manual_seed(0)
    ours = GPT(GPTConfig(
        vocab_size=vocab, max_len=length, embed_dim=dim, num_heads=heads, num_layers=layers,
        bias=False, dropout=0.0,
    )).to(device)
    ref = MinimalGPT(vocab, length, dim, heads, layers).to(device)
    n_ours, n_ref = ours.num_parameters(), sum(p.numel() for p in ref.parameters())
    if n_ours != n_ref:
        raise RuntimeError(
            f"os dois modelos da linha {key} deveriam ter o mesmo número de parâmetros; "
            f"tpt.GPT tem {n_ours} e a referência tem {n_ref}"
        )
    gen = torch.Generator().manual_seed(0)
    batches = [
        {
            "input_ids": torch.randint(0, vocab, (batch, length), generator=gen).to(device),
            "targets": torch.randint(0, vocab, (batch, length), generator=gen).to(device),
        }
        for _ in range(steps)
    ]
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=3e-4, weight_decay=0.01)
    losses: dict[str, float] = {}

    def run_tpt() -> None:
        history = train(ours, batches, loss_fn=lm_loss, max_steps=steps, warmup_steps=0,
                        progress=False)
        losses["tpt"] = history["train_loss"][-1]

    def run_ref() -> None:
        ref.train()
        for bt in batches:
            logits = ref(bt["input_ids"])  # (b, t, V)
            loss = F.cross_entropy(logits.reshape(-1, vocab), bt["targets"].reshape(-1))
            ref_opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            ref_opt.step()
        losses["ref"] = loss.item()

    tm = compare({"ref": run_ref, "tpt": run_tpt}, repeats=repeats, warmup=warmup, device=device)
    ratio = median_ratio(tm["ref"].wall, tm["tpt"].wall)  # > 1: o tpt é mais rápido
    tokens = batch * length * steps
    return Row(
        key, f"Treino do GPT {label} ({layers} camadas × {heads} cabeças × {dim}, bloco "
        f"{length}, lote {batch}): vazão do tpt.GPT + tpt.train / GPT mínimo",
        f"{_fmt(tokens / tm['tpt'].median, 0)} tokens/s",
        f"{_fmt(tokens / tm['ref'].median, 0)} tokens/s",
        ratio,
        median_ratio(tm["ref"].cpu, tm["tpt"].cpu) if device.type == "cpu" else None,
        "≥ 1,05×", _within(ratio, 1.05, at_most=False),
        note=f"parâmetros: tpt {_fmt(n_ours, 0)} = referência {_fmt(n_ref, 0)}; razão = "
        f"tokens/s do tpt ÷ tokens/s da referência ({steps} passos por medida, com AdamW e "
        f"corte do gradiente em 1 nos dois); perda no último passo, depois dos mesmos "
        f"{steps * (warmup + repeats)} passos: tpt {_fmt(losses['tpt'])}, referência "
        f"{_fmt(losses['ref'])}",
    )


def bench_race(sizes: Sizes, *, device: torch.device, repeats: int, warmup: int) -> list[Row]:
    """e) tpt.GPT treinado por tpt.train contra um GPT mínimo, nas duas configurações."""
    s = sizes
    common = dict(vocab=s.gpt_vocab, steps=s.race_steps, device=device, repeats=repeats,
                  warmup=warmup)
    return [
        _race_rows("e1", "do notebook 09", dim=s.course_dim, layers=s.course_layers,
                   heads=s.course_heads, length=s.course_len, batch=s.course_batch, **common),
        _race_rows("e2", "de referência", dim=s.gpt_dim, layers=s.gpt_layers,
                   heads=s.gpt_heads, length=s.race_len, batch=s.race_batch, **common),
    ]


BENCHES: dict[str, Callable[..., list[Row]]] = {
    "a": bench_mha,
    "b": bench_gpt_step,
    "c": bench_generation,
    "d": bench_sdpa,
    "e": bench_race,
}


def run_benchmarks(
    sizes: Sizes,
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
    only: Sequence[str] = ROW_KEYS,
    log: Callable[[str], None] = print,
) -> list[Row]:
    """Roda as linhas pedidas (`only`, subconjunto de "abcde") e devolve as linhas da tabela."""
    rows: list[Row] = []
    for key in only:
        if key not in BENCHES:
            raise ValueError(f"linha {key!r} desconhecida; use algumas de {', '.join(ROW_KEYS)}")
        start = time.perf_counter()
        rows += BENCHES[key](sizes, device=device, repeats=repeats, warmup=warmup)
        log(f"linha {key}: {time.perf_counter() - start:.1f} s")
    return rows


# --------------------------------------------------------------------------------------
# Tabela e informações da máquina
# --------------------------------------------------------------------------------------
def machine_name() -> str:
    """Nome da máquina para o arquivo de resultados (hostname; se vazio, o modelo da CPU)."""
    name = socket.gethostname() or _cpu_model()
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "maquina"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    try:
        return " / ".join(_fmt(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):  # getloadavg não existe no Windows
        return "indisponível"


def machine_info(device: torch.device) -> dict[str, str]:
    info = {
        "Máquina": machine_name(),
        "CPU": f"{_cpu_model()} ({os.cpu_count()} núcleos lógicos)",
        "PyTorch": torch.__version__,
        "Python": platform.python_version(),
        "Dispositivo": str(device),
        "Threads do torch": str(torch.get_num_threads()),
    }
    if device.type == "cuda":
        info["GPU"] = torch.cuda.get_device_name(device)
    return info


def render_markdown(rows: Sequence[Row], info: dict[str, str]) -> str:
    """A tabela em Markdown, com as informações da máquina e as notas de cada linha."""
    any_cpu = any(r.ratio_cpu is not None for r in rows)
    header = ["Linha", "Medida", "tpt", "Referência", "Razão (relógio)"]
    if any_cpu:
        header.append("Razão (CPU)")
    header += ["Meta", "Situação"]
    lines = [
        "# Benchmarks do tpt contra o PyTorch",
        "",
        *(f"- **{k}:** {v}" for k, v in info.items()),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for r in rows:
        status = "—" if r.ok is None else ("atingida" if r.ok else "**não atingida**")
        ratio = f"{_fmt(r.ratio, 2)}×"
        cells = [r.key, r.description, r.tpt, r.reference, ratio]
        if any_cpu:
            cells.append("—" if r.ratio_cpu is None else f"{_fmt(r.ratio_cpu, 2)}×")
        cells += [r.target, status]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- **{r.key}:** {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", "Notas:", "", *notes]
    lines += [
        "",
        "Razão = mediana, entre as repetições, de (tempo do tpt / tempo da referência) "
        "medidos na mesma repetição; na linha c é (sem cache / com cache). Tempos nas "
        "colunas tpt e Referência: medianas do relógio. Razão (CPU): o mesmo com o tempo "
        "de CPU do processo.",
        "",
    ]
    return "\n".join(lines)


def results_path(out_dir: Path, device: torch.device, threads: int) -> Path:
    suffix = "cuda" if device.type == "cuda" else f"cpu-{threads}t"
    return Path(out_dir) / f"{machine_name()}-{suffix}.md"


def write_results(text: str, path: Path) -> Path:
    """Grava num .tmp e renomeia: uma execução interrompida não deixa tabela pela metade."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------
# Perfil (opcional): onde o tpt gasta o tempo em cada linha
# --------------------------------------------------------------------------------------
def print_profiles(sizes: Sizes, device: torch.device, only: Sequence[str]) -> None:
    from torch.profiler import ProfilerActivity, profile

    s = sizes
    torch.manual_seed(0)
    jobs: list[tuple[str, Callable[[], object]]] = []
    if "a" in only:
        mha = MultiHeadAttention(s.mha_dim, s.mha_heads).to(device)
        x = torch.randn(s.mha_batch, s.mha_len, s.mha_dim, device=device, requires_grad=True)
        jobs.append(("a: MHA fundida do tpt, ida+volta", lambda: mha(x)[0].sum().backward()))
    if "b" in only or "c" in only:
        model = GPT(GPTConfig(
            vocab_size=s.gpt_vocab, max_len=s.gen_prompt + max(s.gen_tokens, s.gpt_len),
            embed_dim=s.gpt_dim, num_heads=s.gpt_heads, num_layers=s.gpt_layers,
        )).to(device)
        idx = torch.randint(0, s.gpt_vocab, (s.gpt_batch, s.gpt_len), device=device)
        if "b" in only:
            jobs.append(("b: passo do tpt.GPT (ida+volta)", lambda: model(idx).sum().backward()))
        if "c" in only:
            prompt = idx[:1, : s.gen_prompt]
            jobs.append((
                "c: geração com cache do tpt",
                lambda: generate(model, prompt, s.gen_tokens, greedy=True),
            ))
    if device.type == "cuda":
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        sort = "self_cuda_time_total"
    else:
        activities = [ProfilerActivity.CPU]
        sort = "self_cpu_time_total"
    for title, fn in jobs:
        fn()  # aquecimento
        with profile(activities=activities) as prof:
            fn()
            _sync(device)
        print(f"\n## Perfil {title}\n")
        print(prof.key_averages().table(sort_by=sort, row_limit=15))


# --------------------------------------------------------------------------------------
# Linha de comando
# --------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmarks do tpt contra as implementações do PyTorch."
    )
    parser.add_argument("--threads", type=int, default=1,
                        help="threads do torch na CPU (padrão: 1, como nos notebooks)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="dispositivo (padrão: cpu); cuda exige uma GPU com CUDA")
    parser.add_argument("--repeats", type=int, default=7,
                        help="repetições medidas de cada versão (padrão: 7; mínimo 5)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="rodadas de aquecimento antes de medir (padrão: 2)")
    parser.add_argument("--only", default=",".join(ROW_KEYS),
                        help="linhas a rodar, separadas por vírgula (padrão: a,b,c,d,e)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR,
                        help="pasta da tabela gravada (padrão: benchmarks/results)")
    parser.add_argument("--perfil", action="store_true",
                        help="mostra também o perfil (torch.profiler) dos caminhos do tpt")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # testes
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads={args.threads} deve ser >= 1")
    if args.warmup < 0:
        parser.error(f"--warmup={args.warmup} deve ser >= 0")
    if args.repeats < 1 or (args.repeats < 5 and not args.tiny):
        parser.error(f"--repeats={args.repeats} deve ser >= 5 (a mediana precisa de repetições)")
    args.only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in args.only if k not in ROW_KEYS]
    if unknown or not args.only:
        parser.error(f"--only={','.join(args.only)!r}: use linhas entre {', '.join(ROW_KEYS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda pedido, mas o torch não encontrou nenhuma GPU com CUDA.",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = Sizes.tiny() if args.tiny else Sizes()
    info = machine_info(device)
    info["Repetições"] = f"{args.repeats} medidas (mediana), depois de {args.warmup} de aquecimento"
    info["Data"] = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load_before = _load()
    print(f"Carga da máquina antes (1/5/15 min): {load_before}", flush=True)

    rows = run_benchmarks(
        sizes, device=device, repeats=args.repeats, warmup=args.warmup, only=args.only,
        log=lambda msg: print(msg, flush=True),
    )
    info["Carga (1/5/15 min)"] = f"antes {load_before}; depois {_load()}"
    cores = os.cpu_count() or 1
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if device.type == "cpu" and load1 > cores:
        info["Aviso"] = (
            f"máquina carregada (carga acima de {cores} núcleos): os tempos absolutos são "
            "ruidosos; as razões, medidas alternadamente, sofrem menos. Rode de novo com a "
            "máquina livre para números definitivos."
        )
    text = render_markdown(rows, info)
    print()
    print(text)
    path = write_results(text, results_path(args.out, device, args.threads))
    print(f"Tabela gravada em {path}")
    if args.perfil:
        print_profiles(sizes, device, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
