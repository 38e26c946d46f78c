"""Um laço de treino simples e legível, as losses dos dois modelos e os checkpoints.

Ver notebooks/08_encoder_decoder.ipynb (treino do seq2seq com teacher forcing) e
notebooks/09_geracao.ipynb (modelo de caracteres, agenda da taxa de aprendizado,
salvar e carregar com `weights_only=True`).

Não há hierarquia de classes: `train` é uma função que você pode ler de cima a baixo.
Cada passo é o de sempre em PyTorch:

    loss = loss_fn(model, batch)      # forward + entropia cruzada
    optimizer.zero_grad()
    loss.backward()                   # gradientes
    clip_grad_norm_(...)              # corta gradientes grandes demais
    optimizer.step()                  # AdamW atualiza os pesos

O resto (agenda da taxa de aprendizado, orçamento de tempo, avaliação periódica,
barra de progresso, histórico) é organização em volta desse núcleo.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from tpt.device import host_reads_are_free
from tpt.distributed import is_main_process, unwrap
from tpt.tokenizer import PAD_ID

# Na GPU, `train` lê as losses em blocos deste tamanho (ver o comentário no laço).
_LOSS_READ_EVERY = 50


def _nonfinite_loss(value: float, step: int, lr: float) -> FloatingPointError:
    return FloatingPointError(
        f"a loss virou {value} no passo {step}; tente uma lr menor (lr={lr}) ou confira os dados"
    )

CHECKPOINT_FORMAT = "tpt-checkpoint-v1"
"""Valor da chave "format" de todo checkpoint salvo por `save_checkpoint`."""

Batch = Mapping[str, Any]
LossFn = Callable[[nn.Module, Batch], Tensor]


# ---------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------


def _require_keys(batch: Any, keys: tuple[str, ...], where: str) -> None:
    """Confere que o lote é um dicionário com as chaves esperadas (erro claro, sem KeyError)."""
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"{where} espera um lote em forma de dicionário com as chaves {list(keys)}; "
            f"recebi {type(batch).__name__}"
        )
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(
            f"{where}: faltam as chaves {missing} no lote; chaves recebidas: {list(batch)}"
        )


def seq2seq_loss(model: nn.Module, batch: Batch, *, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy do `Transformer` com teacher forcing (errata 19, 20 e 23).

    O decoder recebe `tgt_in` = `<bos>` + alvo e deve prever, em TODAS as posições
    de uma vez (máscara causal), `tgt_out` = alvo + `<eos>`. A loss é calculada sobre os
    logits (a `F.cross_entropy` já aplica log-softmax) e ignora as posições `<pad>`
    (`ignore_index=PAD_ID`), que não são tokens de verdade.

    `batch` é o dicionário de `tpt.data.numbers.collate_numbers`: `src` (b, s),
    `tgt_in` (b, t), `tgt_out` (b, t) e, opcionais, `src_key_padding_mask` (b, s) e
    `tgt_key_padding_mask` (b, t) (True = `<pad>`). Devolve um escalar.
    """
    _require_keys(batch, ("src", "tgt_in", "tgt_out"), "seq2seq_loss")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing} deve estar em [0, 1)")
    logits = model(
        batch["src"],
        batch["tgt_in"],
        src_key_padding_mask=batch.get("src_key_padding_mask"),
        tgt_key_padding_mask=batch.get("tgt_key_padding_mask"),
    )  # (b, t, V)
    vocab_size = logits.size(-1)
    return F.cross_entropy(
        logits.reshape(-1, vocab_size),  # (b * t, V)
        batch["tgt_out"].reshape(-1),  # (b * t,)
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
    )


def lm_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Cross-entropy do `GPT`: prever o próximo token em cada posição.

    `batch` tem `input_ids` (b, t) e `targets` (b, t), com `targets` = `input_ids`
    deslocado uma posição para a esquerda (ver `lm_batches`). Alvos iguais a -100 são
    ignorados (a convenção da `F.cross_entropy`). Devolve um escalar, em nats por token;
    divida por ln(2) para ter bits por caractere.

    Com mistura de especialistas (`GPTConfig(num_experts=...)`), soma a perda de
    balanceamento `model.aux_loss` só em modo treino (a avaliação mede a entropia cruzada pura).
    """
    _require_keys(batch, ("input_ids", "targets"), "lm_loss")
    logits = model(batch["input_ids"])  # (b, t, V)
    vocab_size = logits.size(-1)
    loss = F.cross_entropy(
        logits.reshape(-1, vocab_size),  # (b * t, V)
        batch["targets"].reshape(-1),  # (b * t,)
    )
    aux = getattr(unwrap(model), "aux_loss", None)
    if model.training and isinstance(aux, Tensor):
        loss = loss + aux
    return loss


# ---------------------------------------------------------------------------------------
# Lotes para o modelo de linguagem
# ---------------------------------------------------------------------------------------


def lm_batches(
    ids: Tensor,
    block_size: int,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    num_batches: int | None = None,
) -> Iterator[dict[str, Tensor]]:
    """Janelas aleatórias de um texto longo já convertido em ids.

    Cada lote tem `input_ids` (b, t) = ids[i : i + t] e `targets` (b, t) =
    ids[i + 1 : i + t + 1], com t = `block_size`, b = `batch_size` e os inícios i
    sorteados com `generator` (um `torch.Generator` semeado; sem ele, usa um novo com
    semente 0, então o resultado é sempre reproduzível). Sem `num_batches` o iterador é
    infinito (quem para é `train(max_steps=...)`); com ele, produz exatamente
    `num_batches` lotes (útil para avaliar sempre nos mesmos lotes).
    """
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids deve ser um tensor 1-D de ids de tokens; recebi {shape}")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids deve ser um tensor de inteiros (long); recebi {ids.dtype}")
    for name, value in (("block_size", block_size), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} deve ser um inteiro >= 1")
    if num_batches is not None and (not isinstance(num_batches, int) or num_batches < 0):
        raise ValueError(f"num_batches={num_batches!r} deve ser None ou um inteiro >= 0")
    if ids.numel() < block_size + 1:
        raise ValueError(
            f"o texto tem {ids.numel()} tokens, mas block_size={block_size} precisa de "
            f"pelo menos {block_size + 1} (a janela mais o alvo deslocado)"
        )
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    ids = ids.long()
    offsets = torch.arange(block_size)  # (t,)

    def windows() -> Iterator[dict[str, Tensor]]:
        count = 0
        while num_batches is None or count < num_batches:
            # Inícios possíveis: 0 .. n - t - 1 (o alvo vai até i + t, inclusive).
            starts = torch.randint(
                0, ids.numel() - block_size, (batch_size,), generator=generator
            )  # (b,)
            positions = starts[:, None] + offsets[None, :]  # (b, t)
            yield {"input_ids": ids[positions], "targets": ids[positions + 1]}
            count += 1

    return windows()


# ---------------------------------------------------------------------------------------
# Agenda da taxa de aprendizado
# ---------------------------------------------------------------------------------------


def lr_schedule(
    step: int,
    *,
    warmup_steps: int,
    total_steps: int,
    base_lr: float,
    min_lr: float = 0.0,
) -> float:
    """Taxa de aprendizado no passo `step` (contado a partir de 0): aquecimento + cosseno.

    - Aquecimento linear: lr = base_lr * (step + 1) / warmup_steps para
      step < warmup_steps. Começa pequena (e não zero: o primeiro passo já anda) e
      chega a base_lr no fim do aquecimento. No início os pesos são aleatórios e as
      estimativas de momento do Adam ainda são ruidosas; passos grandes ali
      desestabilizam o treino.
    - Decaimento em cosseno de base_lr (em step = warmup_steps) até min_lr (em
      step = total_steps): lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2,
      com p = (step - warmup_steps) / (total_steps - warmup_steps).
    - Depois de total_steps, fica em min_lr.

    Função pura (só depende dos argumentos): dá para desenhar a curva no notebook.
    """
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} deve ser um inteiro >= 0")
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} deve ser um inteiro >= 1")
    if not isinstance(warmup_steps, int) or not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"warmup_steps={warmup_steps!r} deve ser um inteiro entre 0 e "
            f"total_steps={total_steps}"
        )
    if not base_lr > 0:
        raise ValueError(f"base_lr={base_lr} deve ser > 0")
    if not 0.0 <= min_lr <= base_lr:
        raise ValueError(f"min_lr={min_lr} deve estar entre 0 e base_lr={base_lr}")
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)  # de 0 a 1
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def inverse_sqrt_schedule(
    step: int, *, d_model: int, warmup_steps: int, scale: float = 1.0
) -> float:
    """Taxa de aprendizado do artigo original (Vaswani et al., 2017, seção 5.3).

    lr = scale * d_model^(-1/2) * min(n^(-1/2), n * warmup_steps^(-3/2)), com n = step + 1
    (o artigo conta os passos a partir de 1; aqui, como em `lr_schedule`, a partir de 0).

    - Aquecimento linear até n = warmup_steps, onde a lr atinge o pico
      scale * (d_model * warmup_steps)^(-1/2).
    - Depois, decai com o inverso da raiz do passo, sem nunca chegar a zero: não há um
      passo final, a agenda não depende de quantos passos o treino vai ter.

    O artigo usa warmup_steps = 4000 e d_model = 512 (pico de ~7e-4). Função pura, como
    `lr_schedule`: passe `lambda step: inverse_sqrt_schedule(step, ...)` como `lr_fn` de
    `train`.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} deve ser um inteiro >= 0")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model={d_model!r} deve ser um inteiro >= 1")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
        raise ValueError(f"warmup_steps={warmup_steps!r} deve ser um inteiro >= 1")
    if not scale > 0:
        raise ValueError(f"scale={scale} deve ser > 0")
    n = step + 1
    return scale * d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)


# ---------------------------------------------------------------------------------------
# Otimizador
# ---------------------------------------------------------------------------------------


def make_optimizer(
    model: nn.Module, *, lr: float = 3e-4, weight_decay: float = 0.01
) -> torch.optim.AdamW:
    """AdamW com weight decay SÓ nas matrizes das camadas lineares.

    Weight decay puxa cada peso para zero a cada passo. Isso faz sentido nas matrizes
    das projeções (W_Q, W_K, W_V, W_O, FFN): é uma regularização que prefere mapas
    lineares "pequenos". Não faz sentido em:

    - ganhos e vieses das normalizações (LayerNorm/RMSNorm): o ganho deve ficar perto
      de 1, e puxá-lo para 0 apagaria a escala que a camada aprendeu;
    - vieses: são deslocamentos, poucos números, que não causam sobreajuste;
    - embeddings (tokens e posições aprendidas): cada linha só recebe gradiente quando
      aquele token aparece no lote; o decay, por outro lado, age em TODAS as linhas a
      todo passo, então tokens raros seriam encolhidos até sumir. Com pesos amarrados
      (`lm_head` = embedding) o tensor é o mesmo e fica sem decay.

    Regra usada: decay para parâmetros com 2 ou mais dimensões que não pertencem a um
    módulo de embedding; sem decay para o resto (vetores: vieses e ganhos).
    """
    no_decay_ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding) or "Embedding" in type(module).__name__:
            no_decay_ids.update(id(p) for p in module.parameters())
    decay, no_decay = [], []
    for _, param in model.named_parameters():  # parâmetros amarrados aparecem uma vez só
        if not param.requires_grad:
            continue
        if param.dim() >= 2 and id(param) not in no_decay_ids:
            decay.append(param)
        else:
            no_decay.append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # A versão "fundida" do AdamW atualiza todos os parâmetros num kernel só: a mesma
    # conta, várias vezes mais rápida que o laço padrão por tensor (medido em `make bench`).
    # Ela existe na CPU a partir do torch 2.4; sem ela, ficamos com a padrão.
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr)


# ---------------------------------------------------------------------------------------
# Utilidades do laço
# ---------------------------------------------------------------------------------------


def _progress_enabled(progress: bool) -> bool:
    """Barra de progresso ligada? Desligada com progress=False, em CI, com TPT_PROGRESS=0
    e nos processos que não são o 0 de um treino distribuído."""
    if not progress or not is_main_process():
        return False
    setting = os.environ.get("TPT_PROGRESS")
    if setting is not None:
        return setting.strip().lower() not in ("0", "false", "no", "nao", "não", "")
    return not os.environ.get("CI")


def _to_device(batch: Any, device: torch.device) -> Any:
    """Move tensores (também dentro de dicionários, listas e tuplas) para `device`."""
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _model_device(model: nn.Module) -> torch.device:
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


def _batch_stream(batches: Any, *, one_epoch: bool) -> Iterator[Any]:
    """Uma sequência de lotes, época após época, a partir do que o usuário passou.

    - função (callable): cada chamada devolve um iterador novo = uma época;
    - iterável reiniciável (lista, DataLoader): percorrido de novo a cada época;
    - iterador (gerador, `lm_batches`): uma passada só, termina quando ele acaba.
    Com `one_epoch=True` só a primeira época é produzida.
    """
    if callable(batches) and not isinstance(batches, Iterable):
        new_epoch = batches
    elif isinstance(batches, Iterator):
        yield from batches
        return
    elif isinstance(batches, Iterable):
        def new_epoch() -> Iterable[Any]:
            return batches
    else:
        raise TypeError(
            "batches deve ser um iterável de lotes ou uma função que devolve um iterador "
            f"novo a cada época; recebi {type(batches).__name__}"
        )
    epoch = 0
    while True:
        produced = False
        for batch in new_epoch():
            produced = True
            yield batch
        epoch += 1
        if not produced:
            raise ValueError(f"batches não produziu nenhum lote na época {epoch}")
        if one_epoch:
            return


def _check_positive(name: str, value: Any, *, integer: bool) -> None:
    """None (sem limite) ou um número > 0; inteiro quando `integer`."""
    if value is None:
        return
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        expected = "um inteiro >= 1" if integer else "um número > 0"
        raise ValueError(f"{name}={value!r} deve ser None (sem limite) ou {expected}")


# ---------------------------------------------------------------------------------------
# O laço de treino
# ---------------------------------------------------------------------------------------


def train(
    model: nn.Module,
    batches: Iterable[Any] | Callable[[], Iterable[Any]],
    *,
    loss_fn: LossFn,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    lr: float = 3e-4,
    weight_decay: float = 0.01,
    warmup_steps: int = 100,
    min_lr: float = 0.0,
    grad_clip: float | None = 1.0,
    eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
    eval_every: int = 100,
    device: torch.device | str | None = None,
    progress: bool = True,
    seed: int = 0,
    lr_fn: Callable[[int], float] | None = None,
) -> dict[str, list[float]]:
    """Treina `model` com AdamW e devolve o histórico (para desenhar as curvas).

    Argumentos principais:

    - `batches`: lotes (dicionários de tensores). Pode ser um iterável (lista,
      `DataLoader`: percorrido de novo a cada época), um iterador (uma passada só, ou
      infinito como `lm_batches`) ou uma função que devolve um iterador novo por época.
    - `loss_fn(model, batch) -> loss escalar`: `seq2seq_loss` ou `lm_loss`.
    - Parada: em `max_steps` passos ou `max_seconds` segundos de relógio (o que vier
      primeiro; o tempo inclui as avaliações). Sem nenhum dos dois, treina UMA época.
      O orçamento de tempo é o que permite rodar os notebooks em CPU em ~1 minuto.
    - Taxa de aprendizado: `lr_schedule` com aquecimento de `warmup_steps` passos e
      cosseno até `min_lr` em `max_steps`. Sem `max_steps` (só tempo), fica constante em
      `lr` depois do aquecimento. Se `warmup_steps > max_steps`, o aquecimento é
      encurtado para `max_steps`.
    - `lr_fn(step) -> lr`: outra agenda, que substitui a de cima (`lr`, `warmup_steps` e
      `min_lr` deixam de valer), por exemplo a do artigo original,
      `lambda step: inverse_sqrt_schedule(step, d_model=d, warmup_steps=w)`.
    - `grad_clip`: norma máxima do gradiente (None ou 0 desliga).
    - `eval_fn(model) -> {"nome": valor}`: chamada a cada `eval_every` passos e no fim,
      com o modelo em modo eval e sem gradientes (ex.: `evaluate_loss` na validação).
    - `device`: para onde mover modelo e lotes (padrão: onde o modelo já está).
    - `seed`: semente do gerador global do torch (dropout e afins).

    Treino distribuído: passe um modelo embrulhado em `DistributedDataParallel`
    (`tpt.distributed.wrap`) e, em cada processo, lotes diferentes; o laço é o mesmo, e só
    o processo 0 mostra o progresso (ver `tpt.distributed` e scripts/treinar_gpt.py).

    Devolve um dicionário de listas: "step", "train_loss", "lr", "elapsed" (segundos
    desde o início) por passo; "eval_step" e uma lista por métrica de `eval_fn`.
    No fim o modelo fica em modo eval, pronto para avaliar ou gerar.
    """
    _check_positive("max_steps", max_steps, integer=True)
    _check_positive("max_seconds", max_seconds, integer=False)
    if not lr > 0:
        raise ValueError(f"lr={lr} deve ser > 0")
    if weight_decay < 0:
        raise ValueError(f"weight_decay={weight_decay} deve ser >= 0")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps!r} deve ser um inteiro >= 0")
    if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 1:
        raise ValueError(f"eval_every={eval_every!r} deve ser um inteiro >= 1")
    if grad_clip is not None and grad_clip < 0:
        raise ValueError(f"grad_clip={grad_clip} deve ser > 0 (ou None para não cortar)")
    if lr_fn is not None and not callable(lr_fn):
        raise TypeError(f"lr_fn deve ser uma função step -> lr (ou None); recebi {lr_fn!r}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn deve ser uma função (model, batch) -> loss; recebi {loss_fn!r}")

    torch.manual_seed(seed)
    device = torch.device(device) if device is not None else _model_device(model)
    model.to(device)
    model.train()
    optimizer = make_optimizer(model, lr=lr, weight_decay=weight_decay)
    if max_steps is not None:
        warmup_steps = min(warmup_steps, max_steps)

    def lr_at(step: int) -> float:
        if lr_fn is not None:
            value = lr_fn(step)
            if not value > 0:
                raise ValueError(f"lr_fn({step}) devolveu {value}; a taxa deve ser > 0")
            return value
        if max_steps is not None:
            return lr_schedule(
                step, warmup_steps=warmup_steps, total_steps=max_steps, base_lr=lr,
                min_lr=min_lr,
            )
        return lr * (step + 1) / warmup_steps if step < warmup_steps else lr

    history: dict[str, list[float]] = {
        "step": [], "train_loss": [], "lr": [], "elapsed": [], "eval_step": [],
    }

    stream = _batch_stream(batches, one_epoch=max_steps is None and max_seconds is None)
    show = _progress_enabled(progress)
    bar = tqdm(total=max_steps, desc="treino", unit="passo") if show else None

    def run_eval(step: int) -> None:
        model.eval()
        with torch.no_grad():
            metrics = eval_fn(model)
        model.train()
        if not isinstance(metrics, Mapping):
            raise TypeError(
                "eval_fn deve devolver um dicionário {nome: valor}, por exemplo "
                f"{{'val_loss': 1.23}}; devolveu {type(metrics).__name__}"
            )
        history["eval_step"].append(step)
        for name, value in metrics.items():
            if name in ("step", "train_loss", "lr", "elapsed", "eval_step"):
                raise ValueError(f"eval_fn devolveu a métrica {name!r}, um nome reservado")
            history.setdefault(name, []).append(float(value))
        if bar is not None:
            bar.write(
                f"passo {step}: " + ", ".join(f"{k}={float(v):.4f}" for k, v in metrics.items())
            )

    # Ler a loss (`.item()`, `isfinite`) faz a CPU esperar a GPU terminar o passo. Na CPU
    # isso não custa nada e conferimos a cada passo, ANTES de atualizar os pesos. Na GPU,
    # as losses ficam na GPU e são lidas em blocos de até `_LOSS_READ_EVERY` passos (e
    # antes de cada avaliação e no fim): uma loss não finita é apontada pelo seu passo,
    # mas só quando o bloco é lido.
    check_each_step = host_reads_are_free(device)
    pending: list[Tensor] = []  # losses ainda não lidas (só fora da CPU)

    def read_losses() -> None:
        if not pending:
            return
        values = torch.stack(pending).tolist()  # uma espera só para o bloco inteiro
        first = len(history["train_loss"])
        pending.clear()
        for i, value in enumerate(values):
            if not math.isfinite(value):
                raise _nonfinite_loss(value, first + i, lr)
        history["train_loss"].extend(values)

    start = time.perf_counter()
    step = 0
    try:
        for batch in stream:
            current_lr = lr_at(step)
            for group in optimizer.param_groups:
                group["lr"] = current_lr

            loss = loss_fn(model, _to_device(batch, device))
            if check_each_step and not torch.isfinite(loss):
                raise _nonfinite_loss(loss.item(), step, lr)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            step += 1

            elapsed = time.perf_counter() - start
            history["step"].append(step)
            pending.append(loss.detach())
            history["lr"].append(current_lr)
            history["elapsed"].append(elapsed)
            evaluate_now = eval_fn is not None and step % eval_every == 0
            if check_each_step or evaluate_now or len(pending) >= _LOSS_READ_EVERY:
                read_losses()
            if bar is not None:
                bar.update(1)
                if history["train_loss"]:
                    last = history["train_loss"][-1]
                    bar.set_postfix(loss=f"{last:.4f}", lr=f"{current_lr:.2e}", refresh=False)
            if evaluate_now:
                run_eval(step)
            if max_steps is not None and step >= max_steps:
                break
            if max_seconds is not None and time.perf_counter() - start >= max_seconds:
                break
        read_losses()
    finally:
        if bar is not None:
            bar.close()
    if step == 0:
        raise ValueError("nenhum passo de treino foi dado: batches está vazio?")
    if eval_fn is not None and (not history["eval_step"] or history["eval_step"][-1] != step):
        run_eval(step)  # avaliação final, para a curva terminar no último passo
    model.eval()
    return history


def evaluate_loss(
    model: nn.Module,
    batches: Iterable[Any] | Callable[[], Iterable[Any]],
    loss_fn: LossFn,
    *,
    max_batches: int | None = None,
) -> float:
    """Loss média em `batches`, em modo eval e sem gradientes.

    É a média simples das losses dos lotes (lotes de tamanhos diferentes pesam igual).
    Com um iterador infinito (como `lm_batches` sem `num_batches`), passe `max_batches`.
    O modo (train/eval) do modelo é restaurado no fim.
    """
    if max_batches is not None and (not isinstance(max_batches, int) or max_batches < 1):
        raise ValueError(f"max_batches={max_batches!r} deve ser None ou um inteiro >= 1")
    if callable(batches) and not isinstance(batches, Iterable):
        batches = batches()
    device = _model_device(model)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                if max_batches is not None and count >= max_batches:
                    break
                total += loss_fn(model, _to_device(batch, device)).item()
                count += 1
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("evaluate_loss não recebeu nenhum lote")
    return total / count


# ---------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------

# Tokenizadores que um checkpoint sabe reconstruir: "kind" -> (módulo, classe).
_TOKENIZER_KINDS = {
    "CharTokenizer": ("tpt.tokenizer", "CharTokenizer"),
    "BPETokenizer": ("tpt.tokenizer", "BPETokenizer"),
    "NumberVocab": ("tpt.data.numbers", "NumberVocab"),
}
# Modelos que um checkpoint sabe reconstruir: "model_class" -> (modelo, config).
_MODEL_KINDS = {
    "GPT": ("tpt.model", "GPT", "GPTConfig"),
    "Transformer": ("tpt.model", "Transformer", "TransformerConfig"),
}


def _import(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), name)


def _check_safe(value: Any, where: str) -> None:
    """Só tipos que `torch.load(weights_only=True)` aceita: falha AGORA, não ao carregar."""
    if value is None or isinstance(value, (bool, int, float, str, Tensor)):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_safe(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where}: chave {key!r} ({type(key).__name__}) não é str/int")
            _check_safe(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} tem um valor do tipo {type(value).__name__}, que torch.load("
        "weights_only=True) recusa; use só números, strings, listas, dicionários e tensores"
    )


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    tokenizer: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Salva modelo, config, tokenizador e extras num arquivo que carrega com segurança.

    O arquivo guarda só dados (tensores, números, strings, listas, dicionários):
    {"format", "model_class", "config", "state_dict", "tokenizer", "extra",
    "tpt_version"}. Por isso `load_checkpoint` pode usar `torch.load(weights_only=True)`,
    que NÃO executa código do arquivo (um pickle comum pode executar qualquer coisa).
    O tokenizador vai junto porque os ids só fazem sentido com o MESMO vocabulário
    (errata 3). Devolve o caminho salvo.

    Num treino distribuído, só o processo 0 grava (os outros devolvem o mesmo caminho sem
    gravar), e um modelo embrulhado em ``DistributedDataParallel`` é salvo sem o
    embrulho, pronto para carregar num processo só.
    """
    from tpt.version import __version__

    model = unwrap(model)
    model_class = type(model).__name__
    if model_class not in _MODEL_KINDS:
        raise TypeError(
            f"save_checkpoint sabe salvar {sorted(_MODEL_KINDS)}; recebi {model_class}"
        )
    if not dataclasses.is_dataclass(getattr(model, "config", None)):
        raise TypeError(f"{model_class} não tem um atributo `config` (dataclass) para salvar")
    config = dataclasses.asdict(model.config)
    _check_safe(config, "config")
    tokenizer_entry = None
    if tokenizer is not None:
        kind = type(tokenizer).__name__
        if kind not in _TOKENIZER_KINDS or not hasattr(tokenizer, "state_dict"):
            raise TypeError(
                f"não sei salvar um tokenizador {kind}; esperava um de {sorted(_TOKENIZER_KINDS)}"
            )
        tokenizer_entry = {"kind": kind, "state": tokenizer.state_dict()}
        _check_safe(tokenizer_entry, "tokenizer")
    extra = dict(extra) if extra is not None else {}
    _check_safe(extra, "extra")
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "model_class": model_class,
        "config": config,
        "state_dict": model.state_dict(),
        "tokenizer": tokenizer_entry,
        "extra": extra,
        "tpt_version": __version__,
    }
    path = Path(path)
    if not is_main_process():
        return path
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


def _config_diff(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    keys = list(saved) + [k for k in current if k not in saved]
    missing = object()
    lines = []
    for key in keys:
        a, b = saved.get(key, missing), current.get(key, missing)
        if a != b:
            a = "(ausente)" if a is missing else repr(a)
            b = "(ausente)" if b is missing else repr(b)
            lines.append(f"{key}: checkpoint={a}, modelo={b}")
    return lines


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    *,
    map_location: str | torch.device = "cpu",
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """Carrega um checkpoint de `save_checkpoint` SEMPRE com `weights_only=True`.

    - Sem `model`: reconstrói o modelo (GPT ou Transformer) a partir do config salvo.
    - Com `model`: confere se o config dele é igual ao salvo; se não for, levanta
      ValueError listando os campos diferentes ("embed_dim: checkpoint=128, modelo=64").
    O modelo volta em modo eval (chame `model.train()` para continuar treinando).
    Devolve `(model, tokenizer ou None, extra)`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint não encontrado: {str(path)!r}")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        raise ValueError(
            f"{str(path)!r} não é um checkpoint do tpt que possa ser lido com "
            f"weights_only=True (arquivo corrompido, de outro formato ou com objetos "
            f"Python arbitrários): {exc}"
        ) from exc
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        found = checkpoint.get("format") if isinstance(checkpoint, dict) else None
        raise ValueError(
            f"{str(path)!r} não é um checkpoint do tpt: esperava format="
            f"{CHECKPOINT_FORMAT!r}, encontrei {found!r} (em {type(checkpoint).__name__}); "
            "salve com tpt.train.save_checkpoint"
        )
    model_class = checkpoint.get("model_class")
    if model_class not in _MODEL_KINDS:
        raise ValueError(
            f"model_class={model_class!r} desconhecido; esperava um de {sorted(_MODEL_KINDS)}"
        )
    module, model_name, config_name = _MODEL_KINDS[model_class]
    saved_config = checkpoint.get("config")
    if not isinstance(saved_config, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ValueError(f"{str(path)!r} está incompleto: faltam 'config' ou 'state_dict'")

    if model is None:
        config_cls = _import(module, config_name)
        known = {f.name for f in dataclasses.fields(config_cls)}
        unknown = sorted(set(saved_config) - known)
        if unknown:
            raise ValueError(
                f"o config salvo tem campos que esta versão do tpt não conhece: {unknown} "
                f"(checkpoint salvo com tpt {checkpoint.get('tpt_version')})"
            )
        model = _import(module, model_name)(config_cls(**saved_config))
        if isinstance(map_location, (str, torch.device)):
            model.to(map_location)
    else:
        if type(model).__name__ != model_class:
            raise ValueError(
                f"o checkpoint é de um {model_class}, mas o modelo dado é um "
                f"{type(model).__name__}"
            )
        current = dataclasses.asdict(model.config)
        diff = _config_diff(saved_config, current)
        if diff:
            raise ValueError(
                "o config do modelo não bate com o do checkpoint; campos diferentes:\n  "
                + "\n  ".join(diff)
            )
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as exc:
        raise ValueError(f"os pesos de {str(path)!r} não cabem no modelo: {exc}") from exc
    model.eval()

    tokenizer = None
    entry = checkpoint.get("tokenizer")
    if entry is not None:
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind not in _TOKENIZER_KINDS:
            raise ValueError(
                f"tokenizador do tipo {kind!r} desconhecido; esperava um de "
                f"{sorted(_TOKENIZER_KINDS)}"
            )
        tokenizer = _import(*_TOKENIZER_KINDS[kind]).from_state_dict(entry["state"])
    return model, tokenizer, dict(checkpoint.get("extra") or {})
