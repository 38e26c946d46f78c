"""Resultados reproduzíveis do curso, na CPU, com 1 thread e sementes fixas.

    python scripts/resultados.py numeros   # números -> palavras: acerto exato x tempo
    python scripts/resultados.py gpt       # GPT de caracteres no corpus: bits/caractere
    python scripts/resultados.py tudo      # os dois

Cada experimento imprime o que mediu e atualiza a sua seção em
benchmarks/results/resultados_cpu.md (a seção do outro experimento é mantida).

- numeros: o `tpt.Transformer` (2 + 2 camadas, d=128, 4 cabeças, dropout 0.1) aprende a
  escrever por extenso os números 0 <= n < 10^6 com `tpt.train(..., max_seconds=60)`.
  A cada ~10 s, a decodificação gulosa (`tpt.greedy_decode`) traduz os 1.000 números de
  teste (nunca vistos no treino) e contamos os acertos EXATOS (a frase inteira certa).
  Os 60 s são de relógio e incluem essas avaliações.
- gpt: um GPT de caracteres treina 120 s no corpus do curso; medimos a loss de
  validação em nats e bits por caractere, os tokens/s do treino e sorteamos 3 amostras
  (temperatura 0.8, sementes fixas).

Os tempos dependem da máquina e da carga: o script mostra a carga (`uptime`) antes e
depois. Numa máquina compartilhada, rode de novo quando ela estiver livre.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # roda também sem o pacote instalado
    sys.path.insert(0, str(ROOT))

import tpt  # noqa: E402
from tpt.train import lm_loss, seq2seq_loss  # noqa: E402

# As mesmas utilidades de formatação e de descrição da máquina do make bench.
sys.path.insert(0, str(ROOT / "benchmarks"))
from run import _cpu_model, _fmt, _load  # noqa: E402

RESULTS_FILE = ROOT / "benchmarks" / "results" / "resultados_cpu.md"
MAX_WORDS = 11
"""Maior número de palavras de um n < 10^6 ("cento e vinte e um mil cento e vinte e um")."""


# --------------------------------------------------------------------------------------
# Utilidades
# --------------------------------------------------------------------------------------
def _header() -> list[str]:
    return [
        f"- CPU: {_cpu_model()} ({os.cpu_count()} núcleos lógicos), "
        f"{torch.get_num_threads()} thread do torch",
        f"- PyTorch {torch.__version__}, Python {platform.python_version()}, "
        f"tpt {tpt.__version__}",
        f"- Data: {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
    ]


class EvalClock:
    """Chama `measure(model)` a cada `every` segundos de treino, dentro do `eval_fn`.

    O `tpt.train` chama `eval_fn` a cada `eval_every` passos; com `eval_every=1`, este
    relógio decide se já é hora de avaliar. Guarda a curva (segundos, passo, métricas) e
    o tempo gasto avaliando, que o orçamento `max_seconds` também conta.
    """

    def __init__(self, every: float, measure: Callable[[torch.nn.Module], dict[str, float]]):
        self.every = every
        self.measure = measure
        self.start = 0.0
        self.next_at = every
        self.steps = 0
        self.eval_seconds = 0.0
        self.curve: list[dict[str, float]] = []

    def begin(self) -> None:
        self.start = time.perf_counter()

    def evaluate(self, model: torch.nn.Module, *, step: int) -> dict[str, float]:
        began = time.perf_counter()
        metrics = self.measure(model)
        done = time.perf_counter()
        self.eval_seconds += done - began
        point = {"segundos": began - self.start, "passo": step,
                 "treino_s": began - self.start - (self.eval_seconds - (done - began))}
        point.update(metrics)
        self.curve.append(point)
        return metrics

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        self.steps += 1
        if time.perf_counter() - self.start >= self.next_at:
            self.next_at += self.every
            return self.evaluate(model, step=self.steps)
        return {}


def update_results(section: str, text: str, path: Path = RESULTS_FILE) -> Path:
    """Troca a seção `section` de `path` por `text`, mantendo as outras seções."""
    begin, end = f"<!-- {section}:inicio -->", f"<!-- {section}:fim -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text(encoding="utf-8") if path.exists() else (
        "# Resultados do curso na CPU\n\n"
        "Gerado por `python scripts/resultados.py numeros` e "
        "`python scripts/resultados.py gpt` (1 thread, sementes fixas).\n\n"
    )
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(old):
        new = pattern.sub(lambda _: block, old)
    else:
        new = old.rstrip() + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------
# Números -> palavras
# --------------------------------------------------------------------------------------
def exact_match(model: tpt.Transformer, src: torch.Tensor, targets: list[list[int]],
                *, max_len: int, batch_size: int = 1000) -> float:
    """Fração de fontes cuja tradução gulosa é IGUAL ao alvo, palavra por palavra."""
    hits = 0
    for i in range(0, src.size(0), batch_size):
        chunk = src[i : i + batch_size]
        chunk = chunk[:, : int((chunk != tpt.PAD_ID).sum(dim=1).max())]  # (b, s) sem sobra
        outputs = tpt.greedy_decode(model, chunk, max_len=max_len)
        expected = targets[i : i + batch_size]
        hits += sum(out == tgt for out, tgt in zip(outputs, expected, strict=True))
    return hits / len(targets)


def _sources(vocab: tpt.NumberVocab, numbers: Sequence[int]) -> torch.Tensor:
    """Algarismos de cada número, com <pad> à direita: `(b, s)` (o alvo não é usado)."""
    pairs = [(torch.tensor(vocab.encode_source(n)), torch.tensor([tpt.EOS_ID])) for n in numbers]
    return tpt.collate_numbers(pairs)["src"]


def run_numbers(args: argparse.Namespace) -> str:
    tpt.seed_everything(args.seed)
    vocab = tpt.NumberVocab()
    splits = tpt.make_number_splits(
        max_value=10**6, n_train=args.n_train, n_val=1000, n_test=1000, seed=args.seed
    )
    test = splits["test"]
    test_src = _sources(vocab, test)  # (1000, s)
    test_targets = [vocab.encode_target(n) for n in test]
    decode_len = MAX_WORDS + 4  # folga para o modelo gerar o <eos>

    config = tpt.TransformerConfig(
        vocab_size=vocab.vocab_size, embed_dim=args.dim, num_heads=args.heads,
        num_encoder_layers=args.layers, num_decoder_layers=args.layers,
        ff_dim=args.ff_dim, dropout=args.dropout, norm_first=args.norm_first, max_len=64,
    )
    model = tpt.Transformer(config)
    train_numbers = splits["train"]
    if args.repeat_short > 1:
        # Só há 900 números de 3 algarismos: com n_train grande essa faixa se esgota e
        # fica rara no treino (e, pela estratificação de make_number_splits, no teste).
        short = [n for n in train_numbers if n < 1000]
        train_numbers = train_numbers + short * (args.repeat_short - 1)
    loader = tpt.number_batches(
        train_numbers, args.batch_size, shuffle=True,
        generator=torch.Generator().manual_seed(args.seed), vocab=vocab, drop_last=True,
    )
    loss_fn = functools.partial(seq2seq_loss, label_smoothing=args.label_smoothing)
    clock = EvalClock(
        args.eval_every,
        lambda m: {"acerto": exact_match(m, test_src, test_targets, max_len=decode_len)},
    )
    print(f"Números -> palavras: {_fmt(model.num_parameters(), 0)} parâmetros; "
          f"{_fmt(len(train_numbers), 0)} números de treino; lote {args.batch_size}; "
          f"lr {args.lr}; aquecimento {args.warmup} passos; até {args.max_steps} passos "
          f"ou {args.seconds:g} s", flush=True)
    load_before = _load()
    clock.begin()
    history = tpt.train(
        model, loader, loss_fn=loss_fn, max_seconds=args.seconds,
        max_steps=args.max_steps or None, lr=args.lr, warmup_steps=args.warmup,
        min_lr=args.lr * args.min_lr_ratio, weight_decay=args.weight_decay,
        grad_clip=1.0, eval_fn=clock, eval_every=1, progress=False, seed=args.seed,
    )
    steps = history["step"][-1]
    train_seconds = history["elapsed"][-1] - clock.eval_seconds
    final = clock.evaluate(model, step=steps)["acerto"]
    load_after = _load()
    shown = [7, 100, 1001, 21_021, 100_100, 999_999, 580_017]
    shown_out = tpt.greedy_decode(model, _sources(vocab, shown), max_len=decode_len)
    examples = [
        (n, vocab.decode(out), vocab.decode(out) == tpt.number_to_words(n))
        for n, out in zip(shown, shown_out, strict=True)
    ]
    test_out = tpt.greedy_decode(model, test_src, max_len=decode_len)
    wrong = [
        (n, vocab.decode(out))
        for n, out, tgt in zip(test, test_out, test_targets, strict=True)
        if out != tgt
    ]

    lines = [
        "## Números -> palavras (Transformer encoder-decoder)",
        "",
        *_header(),
        f"- Carga da máquina (1/5/15 min): antes {load_before}; depois {load_after}",
        f"- Comando: `python scripts/resultados.py numeros{_cli_suffix(args, 'numeros')}`",
        f"- Modelo: `TransformerConfig(embed_dim={args.dim}, num_heads={args.heads}, "
        f"num_encoder_layers={args.layers}, num_decoder_layers={args.layers}, "
        f"ff_dim={config.ff_dim}, dropout={args.dropout}, norm_first={args.norm_first})`, "
        f"{_fmt(model.num_parameters(), 0)} parâmetros, pesos amarrados, escala sqrt(d)",
        f"- Dados: {_fmt(len(splits['train']), 0)} números de treino, 1.000 de teste "
        f"(disjuntos), 0 <= n < 10^6, `make_number_splits(seed={args.seed})`",
        f"- Receita: AdamW lr={args.lr}, aquecimento de {args.warmup} passos, lote "
        f"{args.batch_size}, label smoothing {args.label_smoothing}, weight decay "
        f"{args.weight_decay}, clip 1,0"
        + (f", cosseno até {args.max_steps} passos" if args.max_steps else ", lr constante"),
        f"- Treino: {_fmt(steps, 0)} passos em {_fmt(history['elapsed'][-1], 1)} s de relógio "
        f"({_fmt(train_seconds, 1)} s de treino + {_fmt(clock.eval_seconds, 1)} s avaliando), "
        f"{_fmt(steps / train_seconds, 1)} passos/s",
        "",
        "Acerto exato (decodificação gulosa) nos 1.000 números de teste:",
        "",
        "| Segundos (relógio) | Segundos de treino | Passo | Acerto exato |",
        "|---|---|---|---|",
    ]
    for p in clock.curve:
        lines.append(f"| {_fmt(p['segundos'], 1)} | {_fmt(p['treino_s'], 1)} | "
                     f"{_fmt(p['passo'], 0)} | {_fmt(100 * p['acerto'], 1)}% |")
    goal = "atingida" if final >= 0.995 else "NÃO atingida"
    lines += [
        "",
        f"**Acerto exato final: {_fmt(100 * final, 1)}%** ({round(final * 1000)} de 1.000; "
        f"meta >= 99,5% em <= 60 s: {goal}).",
        "",
        "Exemplos:",
        "",
        *(f"- {n} -> \"{text}\" ({'certo' if ok else 'errado'})" for n, text, ok in examples),
    ]
    if wrong:
        lines += ["", f"Erros no teste ({len(wrong)}; até 10):", ""]
        lines += [f"- {n}: \"{text}\" (certo: \"{tpt.number_to_words(n)}\")"
                  for n, text in wrong[:10]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# GPT de caracteres
# --------------------------------------------------------------------------------------
def val_loss(model: tpt.GPT, ids: torch.Tensor, block: int, batch_size: int = 32) -> float:
    """Loss média (nats/caractere) em TODAS as janelas disjuntas do texto de validação."""
    n = (ids.numel() - 1) // block
    starts = torch.arange(n) * block  # (n,)
    offsets = torch.arange(block)  # (t,)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, batch_size):
            pos = starts[i : i + batch_size, None] + offsets[None, :]  # (b, t)
            batch = {"input_ids": ids[pos], "targets": ids[pos + 1]}
            total += lm_loss(model, batch).item() * pos.numel()
            count += pos.numel()
    return total / count


def run_gpt(args: argparse.Namespace) -> str:
    tpt.seed_everything(args.seed)
    train_text, val_text = tpt.corpus_splits(seed=args.seed)
    tok = tpt.CharTokenizer.fit(train_text)
    train_ids = torch.tensor(tok.encode(train_text))
    val_ids = torch.tensor(tok.encode(val_text))
    config = tpt.GPTConfig(
        vocab_size=tok.vocab_size, max_len=args.block, embed_dim=args.dim,
        num_heads=args.heads, num_layers=args.layers, dropout=args.dropout,
        positional=args.positional,
    )
    model = tpt.GPT(config)
    batches = tpt.lm_batches(
        train_ids, args.block, args.batch_size,
        generator=torch.Generator().manual_seed(args.seed),
    )
    clock = EvalClock(args.eval_every, lambda m: {"val": val_loss(m, val_ids, args.block)})
    print(f"GPT de caracteres: {_fmt(model.num_parameters(), 0)} parâmetros; vocabulário "
          f"{tok.vocab_size}; {_fmt(train_ids.numel(), 0)} caracteres de treino; "
          f"{_fmt(val_ids.numel(), 0)} de validação; {args.seconds:g} s", flush=True)
    load_before = _load()
    clock.begin()
    history = tpt.train(
        model, batches, loss_fn=lm_loss, max_seconds=args.seconds, max_steps=args.max_steps or None,
        lr=args.lr, warmup_steps=args.warmup, min_lr=args.lr * args.min_lr_ratio,
        weight_decay=args.weight_decay, grad_clip=1.0, eval_fn=clock, eval_every=1,
        progress=False, seed=args.seed,
    )
    steps = history["step"][-1]
    train_seconds = history["elapsed"][-1] - clock.eval_seconds
    final = clock.evaluate(model, step=steps)["val"]
    tokens_per_s = steps * args.batch_size * args.block / train_seconds
    load_after = _load()

    known_words = set(re.findall(r"\w+", train_text.lower()))
    samples = []
    for i, prompt in enumerate(("O ", "A cidade", "Naquela manhã")):
        # tpt.generate não desliza a janela: prompt + novos <= max_len (= block).
        n_new = min(args.sample_chars, args.block - len(prompt))
        text = tpt.generate_text(
            model, tok, prompt, n_new, temperature=0.8,
            generator=torch.Generator().manual_seed(args.seed + i),
        )
        words = re.findall(r"\w+", text[len(prompt):].lower())
        real = sum(w in known_words for w in words)
        samples.append((prompt, text, real, len(words)))

    ln2 = math.log(2)
    lines = [
        "## GPT de caracteres no corpus do curso",
        "",
        *_header(),
        f"- Carga da máquina (1/5/15 min): antes {load_before}; depois {load_after}",
        f"- Comando: `python scripts/resultados.py gpt{_cli_suffix(args, 'gpt')}`",
        f"- Modelo: `GPTConfig(embed_dim={args.dim}, num_heads={args.heads}, "
        f"num_layers={args.layers}, max_len={args.block}, dropout={args.dropout}, "
        f"positional={args.positional!r})` (pré-norma, GELU, pesos amarrados), "
        f"{_fmt(model.num_parameters(), 0)} parâmetros, vocabulário de {tok.vocab_size} "
        f"(`CharTokenizer.fit` no texto de treino)",
        f"- Dados: `corpus_splits(seed={args.seed})`: {_fmt(train_ids.numel(), 0)} caracteres "
        f"de treino, {_fmt(val_ids.numel(), 0)} de validação (textos inteiros separados)",
        f"- Receita: AdamW lr={args.lr}, aquecimento de {args.warmup} passos, lote "
        f"{args.batch_size} x {args.block} caracteres, weight decay {args.weight_decay}, "
        f"clip 1,0" + (f", cosseno até {args.max_steps} passos" if args.max_steps
                       else ", lr constante"),
        f"- Treino: {_fmt(steps, 0)} passos em {_fmt(history['elapsed'][-1], 1)} s de relógio "
        f"({_fmt(train_seconds, 1)} s de treino + {_fmt(clock.eval_seconds, 1)} s avaliando)",
        f"- **Velocidade de treino: {_fmt(tokens_per_s, 0)} tokens/s** (caracteres por "
        "segundo, só os passos de treino)",
        "",
        "| Segundos (relógio) | Passo | Loss de validação (nats/caractere) | Bits/caractere |",
        "|---|---|---|---|",
    ]
    for p in clock.curve:
        lines.append(f"| {_fmt(p['segundos'], 1)} | {_fmt(p['passo'], 0)} | "
                     f"{_fmt(p['val'], 3)} | {_fmt(p['val'] / ln2, 3)} |")
    lines += [
        "",
        f"**Validação final: {_fmt(final, 3)} nats/caractere = {_fmt(final / ln2, 3)} "
        f"bits/caractere** (todas as janelas disjuntas de {args.block} caracteres do texto "
        "de validação).",
        "",
        f"Amostras (temperatura 0,8, até {args.block} caracteres com o início, sementes "
        f"{args.seed}, {args.seed + 1} e {args.seed + 2}):",
        "",
    ]
    for i, (prompt, text, real, total) in enumerate(samples, start=1):
        lines += [
            f"{i}. Início {prompt!r}: {real} de {total} palavras existem no texto de treino",
            "",
            "```text",
            text,
            "```",
            "",
        ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Linha de comando
# --------------------------------------------------------------------------------------
DEFAULTS = {
    # Receita escolhida medindo 6 sementes (ver benchmarks/README.md): sem dropout (custa
    # ~20% do tempo e nada regulariza em < 1 minuto), lr alta com cosseno até 600 passos,
    # lote 64 e 10.000 números de treino (a faixa de 3 algarismos pesa mais; ver abaixo).
    "numeros": dict(seconds=60.0, eval_every=10.0, dim=128, heads=4, layers=2, ff_dim=None,
                    dropout=0.0, norm_first=False, batch_size=64, lr=3e-3, warmup=100,
                    label_smoothing=0.0, weight_decay=0.01, n_train=10_000, max_steps=600,
                    min_lr_ratio=0.0, repeat_short=1),
    # GPT: RoPE em vez da posição aprendida (com a aprendida o treino fica ~300 passos
    # parado no nível de bigramas, ~2,28 nats, igual ao modelo feito com
    # nn.TransformerEncoderLayer), 3 camadas e lote 16 para caber mais passos em 120 s.
    "gpt": dict(seconds=120.0, eval_every=30.0, dim=128, heads=4, layers=3, dropout=0.0,
                block=128, batch_size=16, lr=3e-3, warmup=100, weight_decay=0.1,
                max_steps=750, min_lr_ratio=0.0, sample_chars=300, positional="rope"),
}


def _cli_suffix(args: argparse.Namespace, command: str) -> str:
    """As opções que diferem do padrão, para o comando impresso ser reproduzível."""
    parts = []
    for key, default in DEFAULTS[command].items():
        value = getattr(args, key)
        if value != default:
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                parts.append(flag if value else f"--no-{key.replace('_', '-')}")
            else:
                parts.append(f"{flag} {value}")
    if args.seed != 0:
        parts.append(f"--seed {args.seed}")
    if args.threads != 1:
        parts.append(f"--threads {args.threads}")
    return "".join(" " + p for p in parts)


def _add_common(p: argparse.ArgumentParser, command: str) -> None:
    d = DEFAULTS[command]
    p.add_argument("--seed", type=int, default=0, help="semente (padrão: 0)")
    p.add_argument("--threads", type=int, default=1, help="threads do torch (padrão: 1)")
    p.add_argument("--seconds", type=float, default=d["seconds"],
                   help=f"orçamento de relógio do treino (padrão: {d['seconds']:g})")
    p.add_argument("--eval-every", type=float, default=d["eval_every"],
                   help=f"segundos entre avaliações (padrão: {d['eval_every']:g})")
    p.add_argument("--max-steps", type=int, default=d["max_steps"],
                   help="a lr cai em cosseno até este passo, onde o treino para "
                   f"(padrão: {d['max_steps']}; 0 = sem limite, lr constante)")
    p.add_argument("--min-lr-ratio", type=float, default=0.0,
                   help="lr final do cosseno, como fração da lr (padrão: 0)")
    for name in ("dim", "heads", "layers", "batch_size", "warmup"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=d[name])
    for name in ("dropout", "lr", "weight_decay"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=d[name])
    p.add_argument("--no-save", action="store_true",
                   help="não grava benchmarks/results/resultados_cpu.md")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Resultados reproduzíveis do curso na CPU.")
    sub = parser.add_subparsers(dest="command", required=True)
    numbers = sub.add_parser("numeros", help="números -> palavras (acerto exato x tempo)")
    _add_common(numbers, "numeros")
    numbers.add_argument("--ff-dim", type=int, default=None)
    numbers.add_argument("--label-smoothing", type=float, default=0.0)
    numbers.add_argument("--n-train", type=int, default=DEFAULTS["numeros"]["n_train"])
    numbers.add_argument("--repeat-short", type=int, default=DEFAULTS["numeros"]["repeat_short"],
                         help="repete cada número de treino < 1000 este número de vezes")
    numbers.add_argument("--norm-first", action=argparse.BooleanOptionalAction, default=False)
    gpt = sub.add_parser("gpt", help="GPT de caracteres no corpus (bits/caractere)")
    _add_common(gpt, "gpt")
    gpt.add_argument("--block", type=int, default=DEFAULTS["gpt"]["block"])
    gpt.add_argument("--positional", choices=tpt.model.GPT_POSITIONALS,
                     default=DEFAULTS["gpt"]["positional"])
    gpt.add_argument("--sample-chars", type=int, default=DEFAULTS["gpt"]["sample_chars"])
    everything = sub.add_parser("tudo", help="os dois, com as opções padrão")
    everything.add_argument("--no-save", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    commands = ["numeros", "gpt"] if args.command == "tudo" else [args.command]
    for command in commands:
        if args.command == "tudo":
            run_args = parse_args([command] + (["--no-save"] if args.no_save else []))
        else:
            run_args = args
        torch.set_num_threads(run_args.threads)
        text = run_numbers(run_args) if command == "numeros" else run_gpt(run_args)
        print()
        print(text)
        if not run_args.no_save:
            print(f"Seção gravada em {update_results(command, text)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
