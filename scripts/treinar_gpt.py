"""Treina o GPT de caracteres do curso, num processo ou em vários (torchrun).

    python scripts/treinar_gpt.py --steps 300                      # um processo
    torchrun --nproc_per_node 2 scripts/treinar_gpt.py --steps 300  # dois processos

O laço é o mesmo `tpt.train` dos notebooks. Com `torchrun`, cada processo sorteia lotes
diferentes (semente + número do processo), o `DistributedDataParallel` tira a média dos
gradientes, e só o processo 0 mostra o progresso, avalia e salva o checkpoint. Na CPU o
backend é `gloo`; com GPUs CUDA, `nccl` (uma GPU por processo).

Cada processo usa `--threads` threads na CPU (padrão 1): dois processos numa máquina de
dois núcleos já ocupam os dois.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # roda também sem o pacote instalado
    sys.path.insert(0, str(ROOT))

import tpt  # noqa: E402
from tpt import distributed  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="passos de treino (padrão 300)")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="lote POR PROCESSO (padrão 16); o lote efetivo é isso × processos")
    parser.add_argument("--block", type=int, default=64, help="contexto em caracteres (64)")
    parser.add_argument("--dim", type=int, default=128, help="largura d do modelo (128)")
    parser.add_argument("--layers", type=int, default=3, help="camadas (3)")
    parser.add_argument("--heads", type=int, default=4, help="cabeças (4)")
    parser.add_argument("--lr", type=float, default=3e-3, help="taxa de aprendizado (3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="semente (0)")
    parser.add_argument("--threads", type=int, default=1, help="threads por processo (1)")
    parser.add_argument("--out", type=Path, default=None,
                        help="onde salvar o checkpoint (padrão: não salva)")
    parser.add_argument("--progress", action="store_true", help="barra de progresso")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "block", "dim", "layers", "heads", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} deve ser >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    rank, world, device = distributed.setup()
    try:
        tpt.seed_everything(args.seed)  # o MESMO modelo inicial em todos os processos
        train_text, val_text = tpt.corpus_splits(seed=args.seed)
        tokenizer = tpt.CharTokenizer.fit(train_text)
        train_ids = torch.tensor(tokenizer.encode(train_text))
        val_ids = torch.tensor(tokenizer.encode(val_text))
        config = tpt.GPTConfig(
            vocab_size=tokenizer.vocab_size, max_len=args.block, embed_dim=args.dim,
            num_heads=args.heads, num_layers=args.layers, dropout=0.0, positional="rope",
        )
        model = distributed.wrap(tpt.GPT(config).to(device), device)
        # Lotes diferentes em cada processo: a semente do sorteio inclui o rank.
        batches = tpt.lm_batches(
            train_ids, args.block, args.batch_size,
            generator=torch.Generator().manual_seed(1000 * args.seed + rank),
        )
        if distributed.is_main_process():
            print(f"{world} processo(s) em {device}; lote efetivo {args.batch_size * world}; "
                  f"{tpt.fmt(distributed.unwrap(model).num_parameters())} parâmetros", flush=True)
        start = time.perf_counter()
        history = tpt.train(
            model, batches, loss_fn=tpt.lm_loss, max_steps=args.steps, lr=args.lr,
            warmup_steps=min(100, args.steps // 10), min_lr=args.lr / 10,
            progress=args.progress, seed=args.seed, device=device,
        )
        elapsed = time.perf_counter() - start
        if distributed.is_main_process():
            val_batches = tpt.lm_batches(
                val_ids, args.block, 64, generator=torch.Generator().manual_seed(0),
                num_batches=8,
            )
            val = tpt.evaluate_loss(distributed.unwrap(model), val_batches, loss_fn=tpt.lm_loss)
            tokens = args.steps * args.batch_size * args.block * world
            print(f"perda de treino (último passo): {tpt.fmt(history['train_loss'][-1], 3)}")
            print(f"validação: {tpt.fmt(val, 3)} nats/caractere = "
                  f"{tpt.fmt(val / math.log(2), 3)} bits/caractere")
            print(f"{tpt.fmt(elapsed, 1)} s; {tpt.fmt(tokens / elapsed, 0)} caracteres/s "
                  "(todos os processos)")
        if args.out is not None:
            tpt.save_checkpoint(args.out, model, tokenizer=tokenizer)  # só o processo 0 grava
            if distributed.is_main_process():
                print(f"checkpoint: {args.out}")
    finally:
        distributed.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
