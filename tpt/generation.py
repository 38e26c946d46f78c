"""Geração autorregressiva: amostragem, cache de chaves e valores, decodificação gulosa e
busca em feixe (beam search).

Ver notebooks/09_geracao.ipynb.

Só o **decoder** é autorregressivo (errata 19): a cada passo o modelo devolve logits
para o próximo token, escolhemos um token, o acrescentamos à sequência e repetimos.
Há duas maneiras de escolher:

- gulosa (`greedy_next_token`): o token de maior logit. O softmax não muda o argmax,
  então não é preciso calculá-lo (errata 23). Sempre a mesma saída: nenhuma variedade.
- amostragem (`sample_next_token`): sorteia da distribuição softmax(logits / T), depois
  de filtrar os tokens improváveis com top-k e/ou top-p.

O cache de chaves e valores evita recalcular as chaves e os valores do prefixo a cada
passo: o prompt inteiro passa **uma** vez pelo modelo (prefill, com máscara causal,
preenchendo o cache) e depois só o token novo entra, na posição `len(cache)` (errata 34).
Com ou sem cache, os tokens gerados são os mesmos (os testes conferem).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tpt.decode_step import lean_decode_step
from tpt.device import host_reads_are_free
from tpt.model import GPT
from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID

# Fora da CPU, `generate` confere se todas as linhas terminaram a cada tantos passos.
_EOS_CHECK_EVERY = 16

# ---------------------------------------------------------------------------------------
# Validação dos argumentos (mensagens que dizem o valor recebido e o esperado)
# ---------------------------------------------------------------------------------------


def _check_temperature(temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature={temperature!r} deve ser um número > 0")
    if not temperature > 0 or math.isinf(temperature):
        raise ValueError(
            f"temperature={temperature} deve ser um número finito > 0; para escolher sempre "
            "o token mais provável use greedy=True (ou greedy_next_token)"
        )


def _check_top_k(top_k: int | None) -> None:
    if top_k is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"top_k={top_k!r} deve ser None ou um inteiro >= 1")
    if top_k < 1:
        raise ValueError(f"top_k={top_k} deve ser >= 1 (ou None para não filtrar)")


def _check_top_p(top_p: float | None) -> None:
    if top_p is None:
        return
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
        raise TypeError(f"top_p={top_p!r} deve ser None ou um número em (0, 1]")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p} deve estar no intervalo (0, 1] (ou None)")


def _check_count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} deve ser um inteiro >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}={value} deve ser >= {minimum}")


def _check_logits(logits: Any) -> None:
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        kind = logits.dtype if isinstance(logits, Tensor) else type(logits).__name__
        raise TypeError(f"logits deve ser um tensor float (..., V); recebi {kind}")


def _check_ids(idx: Any, name: str) -> None:
    if not isinstance(idx, Tensor) or idx.dim() != 2:
        shape = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(
            f"{name} deve ser um tensor de ids de forma (b, t); recebi {shape} "
            f"(para uma sequência só, use {name}.unsqueeze(0))"
        )
    if idx.is_floating_point() or idx.dtype == torch.bool:
        raise TypeError(f"{name} deve conter ids inteiros (long); recebi {idx.dtype}")


# ---------------------------------------------------------------------------------------
# Filtros de logits (o notebook desenha a distribuição depois de cada um)
# ---------------------------------------------------------------------------------------


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """Divide os logits por `temperature` (..., V).

    T < 1 deixa a distribuição mais concentrada (menos entropia), T > 1 mais espalhada
    (mais entropia); T = 1 não muda nada. T = 0 seria o argmax: use greedy.
    """
    _check_logits(logits)
    _check_temperature(temperature)
    return logits / temperature


def top_k_filter(logits: Tensor, top_k: int) -> Tensor:
    """Mantém os `top_k` maiores logits de cada linha; os demais viram -inf. (..., V).

    Exatamente `top_k` valores continuam finitos (empates são desfeitos pela ordem do
    `topk`). Se `top_k >= V`, nada é filtrado.
    """
    _check_logits(logits)
    _check_top_k(top_k)
    if top_k >= logits.size(-1):
        return logits.clone()
    values, indices = logits.topk(top_k, dim=-1)  # (..., k)
    filtered = torch.full_like(logits, float("-inf"))
    return filtered.scatter(-1, indices, values)  # (..., V)


def top_p_filter(logits: Tensor, top_p: float) -> Tensor:
    """Amostragem de núcleo (nucleus): mantém o MENOR conjunto de tokens cuja
    probabilidade somada é >= `top_p`; os demais viram -inf. (..., V).

    Ordena as probabilidades em ordem decrescente e guarda o token i enquanto a soma
    dos ANTERIORES a ele ainda é < top_p. O mais provável sempre fica. top_p = 1 não
    filtra nada.
    """
    _check_logits(logits)
    _check_top_p(top_p)
    if top_p >= 1.0:
        return logits.clone()
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)  # (..., V)
    probs = F.softmax(sorted_logits.float(), dim=-1)  # (..., V)
    cumulative = probs.cumsum(dim=-1)  # (..., V)
    before = F.pad(cumulative[..., :-1], (1, 0))  # soma dos anteriores, (..., V)
    remove_sorted = before >= top_p
    remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)  # volta à ordem do vocab.
    return logits.masked_fill(remove, float("-inf"))


def greedy_next_token(logits: Tensor) -> Tensor:
    """Escolha gulosa: o id de maior logit em cada linha. `(b, V) -> (b,)`."""
    _check_logits(logits)
    return logits.argmax(dim=-1)


def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Sorteia um token por linha: temperatura, depois top-k, depois top-p. `(b, V) -> (b,)`.

    Passe um `torch.Generator` semeado para sorteios reproduzíveis. Para a escolha
    gulosa use `greedy_next_token` (temperature=0 é recusada de propósito).
    """
    _check_logits(logits)
    if logits.dim() != 2:
        raise ValueError(f"logits deve ter forma (b, V); recebi {tuple(logits.shape)}")
    logits = apply_temperature(logits.float(), temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = F.softmax(logits, dim=-1)  # (b, V)
    if generator is not None and generator.device != probs.device:
        # Gerador de CPU com modelo na GPU: sorteia na CPU. Assim a mesma semente dá a
        # mesma sequência de sorteios em qualquer dispositivo.
        sampled = torch.multinomial(probs.cpu(), num_samples=1, generator=generator)
        return sampled.squeeze(-1).to(probs.device)  # (b,)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (b,)


# ---------------------------------------------------------------------------------------
# GPT: geração com e sem cache
# ---------------------------------------------------------------------------------------


def _model_device(model: nn.Module) -> torch.device:
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    eos_id: int | None = None,
    window_keep: int | None = None,
) -> Tensor:
    """Continua o prompt `idx` (b, t) com até `max_new_tokens` tokens: devolve (b, t + n).

    - `greedy=True`: escolhe o argmax (não aceita temperature/top_k/top_p junto).
    - senão: `sample_next_token` com `temperature`, `top_k`, `top_p` e `generator`.
    - `use_cache=True`: o prompt passa UMA vez pelo modelo (prefill causal que enche o
      cache); depois, um token por passo. `use_cache=False`: a sequência inteira é
      recalculada a cada passo (mais lento, mesmo resultado).
    - `eos_id`: uma linha que gera `<eos>` termina; as posições seguintes dela recebem
      `<pad>` (PAD_ID). Se todas terminarem, a geração para antes (n < max_new_tokens).

    Janela deslizante: o prompt precisa caber no contexto (t <= `model.config.max_len`;
    não o cortamos em silêncio), mas a geração pode ir além dele. Quando a janela de
    contexto ficaria maior que `max_len`, ela recomeça com os últimos `window_keep`
    tokens (padrão `max_len // 2`), que voltam a ocupar as posições 0, 1, ...; com cache,
    esses tokens passam de novo pelo modelo (um novo prefill). A regra é a mesma com e
    sem cache, então os dois geram os mesmos tokens. O modelo roda em modo eval (sem
    dropout) e volta ao modo anterior no fim.
    """
    _check_ids(idx, "idx")
    _check_count("max_new_tokens", max_new_tokens, 0)
    if greedy:
        if temperature != 1.0 or top_k is not None or top_p is not None:
            raise ValueError(
                f"greedy=True escolhe sempre o argmax e não usa temperature={temperature}, "
                f"top_k={top_k} nem top_p={top_p}; tire esses argumentos ou use greedy=False"
            )
    else:
        _check_temperature(temperature)
        _check_top_k(top_k)
        _check_top_p(top_p)
    if idx.size(1) == 0:
        raise ValueError("o prompt idx está vazio (t=0); o modelo precisa de ao menos 1 token")
    max_len = model.config.max_len
    if idx.size(1) > max_len:
        raise ValueError(
            f"o prompt tem {idx.size(1)} tokens, mais que o contexto do modelo "
            f"(max_len={max_len}); encurte o prompt"
        )
    keep = max_len // 2 if window_keep is None else window_keep
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= max_len:
        raise ValueError(
            f"window_keep={window_keep!r} deve ser um inteiro entre 1 e max_len={max_len} "
            "(quantos tokens recentes a janela mantém quando desliza)"
        )

    def choose(logits: Tensor) -> Tensor:  # (b, V) -> (b,)
        if greedy:
            return greedy_next_token(logits)
        return sample_next_token(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )

    was_training = model.training
    model.eval()
    try:
        # inference_mode: como no_grad, e ainda sem a contagem de versões dos tensores, um
        # custo pequeno por operação que, token a token, se soma. A cópia no fim devolve
        # um tensor comum (um "tensor de inferência" não poderia entrar num treino depois).
        with torch.inference_mode():
            out = _decode(model, idx, max_new_tokens, choose, use_cache, eos_id, keep)
        return out.clone()
    finally:
        model.train(was_training)


def _decode(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    choose: Any,
    use_cache: bool,
    eos_id: int | None,
    keep: int,
) -> Tensor:
    """O laço de `generate`, já com os argumentos conferidos: (b, t) -> (b, t + n)."""
    max_len = model.config.max_len
    out = idx.to(_model_device(model))
    finished = torch.zeros(out.size(0), dtype=torch.bool, device=out.device)  # (b,)
    if max_new_tokens == 0:
        return out
    # Saber se TODAS as linhas terminaram exige ler `finished` (na GPU, a CPU espera a GPU).
    # Na CPU lemos a cada passo; fora dela, a cada `_EOS_CHECK_EVERY` passos, e no fim
    # cortamos as colunas que sobraram (só <pad>): a saída é a mesma.
    check_every = 1 if host_reads_are_free(out.device) else _EOS_CHECK_EVERY
    start = 0  # a janela de contexto é out[:, start:]
    # O prompt é conferido uma vez (no prefill abaixo); os tokens novos vêm do próprio
    # modelo: o GPT não precisa conferi-los a cada passo.
    trusted = {"validate": False} if isinstance(model, GPT) else {}
    cache = model.new_cache() if use_cache else None
    # Token a token, um GPT sem ganchos nem peças trocadas passa pelo passo enxuto
    # (tpt.decode_step): as mesmas contas, sem a maquinaria de nn.Module em volta.
    lean_step = lean_decode_step(model, cache) if use_cache else None
    # Prefill: o prompt inteiro de uma vez (causal), enchendo o cache.
    logits = model(out, cache=cache)[:, -1, :]  # (b, V)
    for step in range(max_new_tokens):
        next_token = choose(logits)  # (b,)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, PAD_ID)
            finished |= next_token == eos_id
        out = torch.cat([out, next_token[:, None]], dim=1)  # (b, t + 1)
        if step == max_new_tokens - 1:
            break
        if eos_id is not None and (step + 1) % check_every == 0 and bool(finished.all()):
            break
        if out.size(1) - start > max_len:  # a janela não cabe mais: desliza
            start = out.size(1) - keep
            cache = model.new_cache() if use_cache else None
            logits = model(out[:, start:], cache=cache, **trusted)[:, -1, :]  # novo prefill
        elif lean_step is not None:
            logits = lean_step(next_token[:, None], cache)  # só o novo, (b, V)
        elif use_cache:
            logits = model(next_token[:, None], cache=cache, **trusted)[:, -1, :]  # só o novo
        else:
            logits = model(out[:, start:], **trusted)[:, -1, :]  # recalcula a janela inteira
    if eos_id is not None and check_every > 1 and bool(finished.all()):
        out = _drop_padding_columns(out, idx.size(1))
    return out


def _drop_padding_columns(out: Tensor, prompt_len: int) -> Tensor:
    """Corta as colunas geradas do fim que só têm `<pad>` (depois que todas terminaram)."""
    generated = out[:, prompt_len:]  # (b, n)
    keep = (generated != PAD_ID).any(dim=0).nonzero()  # colunas com algum token de verdade
    last = int(keep.max()) + 1 if keep.numel() else 0
    return out[:, : prompt_len + last]


def generate_text(
    model: nn.Module,
    tokenizer: Any,
    prompt: str,
    max_new_tokens: int,
    **kwargs: Any,
) -> str:
    """Atalho: texto -> ids -> `generate` -> texto (prompt + continuação).

    Caracteres que o tokenizador não conhece levantam o erro do próprio tokenizador.
    `kwargs` vão para `generate` (temperature, top_k, top_p, greedy, generator, ...).
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt deve ser uma str; recebi {type(prompt).__name__}")
    if prompt == "":
        raise ValueError(
            "prompt vazio: o modelo precisa de ao menos um caractere para continuar"
        )
    ids = tokenizer.encode(prompt)
    idx = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)  # (1, t)
    out = generate(model, idx, max_new_tokens, **kwargs)  # (1, t + n)
    return tokenizer.decode(out[0].tolist())


# ---------------------------------------------------------------------------------------
# Transformer (seq2seq): decodificação gulosa e busca em feixe
# ---------------------------------------------------------------------------------------


def _padding_or_none(src: Tensor, pad_id: int) -> Tensor | None:
    """Máscara `src == pad_id` (b, s), ou None quando não há `<pad>` (como o modelo faz)."""
    mask = src == pad_id  # (b, s), True = <pad>
    return mask if bool(mask.any()) else None


def _next_log_probs(logits: Tensor, pad_id: int, bos_id: int) -> Tensor:
    """log P(próximo token) do ÚLTIMO passo, `(b, t, V) -> (b, V)`, sem `<pad>` e `<bos>`.

    `<pad>` não é um token de verdade e `<bos>` só abre a frase: nenhum dos dois pode ser
    gerado, então recebem -inf. Não renormalizamos: as log-probs continuam as do modelo
    (o argmax é o mesmo de antes se ele não era um desses dois).
    """
    log_probs = F.log_softmax(logits[:, -1, :].float(), dim=-1)  # (b, V)
    log_probs[:, [pad_id, bos_id]] = float("-inf")
    return log_probs


def _check_seq2seq_len(model: nn.Module, max_len: int) -> None:
    _check_count("max_len", max_len, 1)
    if max_len > model.config.max_len:
        raise ValueError(
            f"max_len={max_len} passa do contexto do modelo (config.max_len="
            f"{model.config.max_len})"
        )


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: Tensor,
    *,
    max_len: int,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
    src_key_padding_mask: Tensor | None = None,
) -> list[list[int]]:
    """Tradução gulosa com o `Transformer`: uma lista de ids por fonte de `src` (b, s).

    O encoder roda **uma** vez por fonte (errata 19); o decoder começa em `<bos>`
    e acrescenta o argmax a cada passo até gerar `<eos>` ou `max_len` tokens. Cada
    sequência para no seu próprio `<eos>`; a lista devolvida não inclui `<bos>` nem
    `<eos>`. `<pad>` e `<bos>` nunca são gerados. `src_key_padding_mask` (b, s),
    True = `<pad>`, padrão `src == pad_id`.
    """
    _check_ids(src, "src")
    _check_seq2seq_len(model, max_len)
    if src_key_padding_mask is None:
        src_key_padding_mask = _padding_or_none(src, model.config.pad_id)  # (b, s) ou None
    was_training = model.training
    model.eval()
    try:
        device = _model_device(model)
        src = src.to(device)
        if src_key_padding_mask is not None:
            src_key_padding_mask = src_key_padding_mask.to(device)
        memory = model.encode(src, src_key_padding_mask=src_key_padding_mask)  # (b, s, d)
        b = src.size(0)
        tgt = torch.full((b, 1), bos_id, dtype=torch.long, device=device)  # (b, 1)
        finished = torch.zeros(b, dtype=torch.bool, device=device)  # (b,)
        cache = model.new_cache() if use_cache else None
        for _ in range(max_len):
            if use_cache:
                logits = model.decode(
                    tgt[:, -1:], memory, memory_key_padding_mask=src_key_padding_mask,
                    cache=cache,
                )  # (b, 1, V)
            else:
                logits = model.decode(
                    tgt, memory, memory_key_padding_mask=src_key_padding_mask
                )  # (b, t, V)
            log_probs = _next_log_probs(logits, model.config.pad_id, bos_id)  # (b, V)
            next_token = greedy_next_token(log_probs)  # (b,)
            # Linhas que já terminaram repetem <eos> (nunca <pad>, que seria mascarado).
            next_token = next_token.masked_fill(finished, eos_id)
            finished |= next_token == eos_id
            tgt = torch.cat([tgt, next_token[:, None]], dim=1)  # (b, t + 1)
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    results = []
    for row in tgt[:, 1:].tolist():
        results.append(row[: row.index(eos_id)] if eos_id in row else row)
    return results


class Hypothesis(NamedTuple):
    """Uma hipótese da busca em feixe: ids (sem `<bos>`/`<eos>`), nota normalizada e log-prob."""

    tokens: list[int]
    score: float
    log_prob: float


def length_penalty_gnmt(length: int, alpha: float) -> float:
    """Penalidade de comprimento do GNMT (Wu et al., 2016): ((5 + |Y|) / 6) ** alpha.

    A nota de uma hipótese é log P(Y) / lp(Y). Sem ela (alpha = 0) a busca em feixe prefere
    frases curtas, porque cada token a mais só soma log-probabilidades negativas.
    """
    return ((5.0 + length) / 6.0) ** alpha


def _reorder_cache(cache: list[Any], beam_idx: Tensor) -> None:
    """Reordena (e replica) as linhas de todos os caches de chaves e valores segundo `beam_idx`."""
    for layer_cache in cache:
        parts = layer_cache if isinstance(layer_cache, (tuple, list)) else (layer_cache,)
        for kv in parts:
            if kv.k is not None:
                kv.k = kv.k.index_select(0, beam_idx)  # (n_beams, h_kv, s, d_h)
                kv.v = kv.v.index_select(0, beam_idx)  # (n_beams, h_kv, s, d_h)


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    *,
    beam_size: int = 4,
    max_len: int,
    length_penalty: float = 0.6,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
    return_all: bool = False,
) -> list[int] | list[Hypothesis]:
    """Beam search com o `Transformer` para UMA fonte `src` (1, s) ou (s,).

    Mantém as `beam_size` melhores continuações parciais (por log-prob somada). A cada
    passo, cada feixe propõe tokens; dos 2 * beam_size melhores candidatos, os que
    terminam em `<eos>` (se estiverem entre os beam_size primeiros) viram hipóteses
    prontas e os demais continuam. Para quando há beam_size hipóteses prontas e a
    log-prob atual do melhor feixe vivo (sem `<eos>`), dividida pela penalidade do
    comprimento atual, não passa da nota da beam_size-ésima pronta, ou após `max_len`
    tokens (as inacabadas entram na disputa como estão). Com `length_penalty=0` a parada
    é exata: cada token a mais soma uma log-prob <= 0, então a log-prob atual é um teto
    para tudo o que o feixe ainda pode virar; com penalidade, é uma aproximação.

    As prontas são comparadas pela nota log P(Y) / lp(Y), com a penalidade de comprimento
    do GNMT lp(Y) = ((5 + |Y|) / 6) ** length_penalty (|Y| conta o `<eos>`);
    `length_penalty=0` compara log-probs puras. O artigo original usou beam 4.
    `<pad>` e `<bos>` nunca são gerados; `log_prob` é a log-probabilidade que o modelo
    dá à hipótese (com o `<eos>`, quando ela terminou).
    Com beam_size=1 o resultado é o da decodificação gulosa. É uma busca aproximada:
    não garante a sequência mais provável (nem uma melhor que a gulosa), embora quase
    sempre encontre uma hipótese pelo menos tão provável quanto ela.

    Devolve os ids da melhor hipótese (sem `<bos>`/`<eos>`) ou, com `return_all=True`,
    a lista de `Hypothesis(tokens, score, log_prob)` da melhor para a pior.
    """
    if not isinstance(src, Tensor):
        raise TypeError(f"src deve ser um tensor de ids; recebi {type(src).__name__}")
    if src.dim() == 1:
        src = src.unsqueeze(0)  # (1, s)
    _check_ids(src, "src")
    if src.size(0) != 1:
        raise ValueError(
            f"beam_search traduz UMA fonte por vez: src deve ter forma (1, s) ou (s,); "
            f"recebi {tuple(src.shape)}"
        )
    _check_count("beam_size", beam_size, 1)
    _check_seq2seq_len(model, max_len)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise TypeError(f"length_penalty={length_penalty!r} deve ser um número >= 0")
    if length_penalty < 0:
        raise ValueError(f"length_penalty={length_penalty} deve ser >= 0")

    was_training = model.training
    model.eval()
    try:
        device = _model_device(model)
        src = src.to(device)
        src_mask = _padding_or_none(src, model.config.pad_id)  # (1, s) ou None
        memory = model.encode(src, src_key_padding_mask=src_mask)  # (1, s, d): UMA vez
        tokens = torch.full((1, 1), bos_id, dtype=torch.long, device=device)  # (n, t)
        scores = torch.zeros(1, device=device)  # log-prob de cada feixe, (n,)
        cache = model.new_cache() if use_cache else None
        finished: list[Hypothesis] = []

        def finish(ids: list[int], log_prob: float, length: int) -> None:
            score = log_prob / length_penalty_gnmt(length, length_penalty)
            finished.append(Hypothesis(ids, score, log_prob))

        for step in range(max_len):
            n = tokens.size(0)
            mem = memory.expand(n, -1, -1)  # (n, s, d), sem copiar
            mem_mask = None if src_mask is None else src_mask.expand(n, -1)  # (n, s)
            if use_cache:
                logits = model.decode(
                    tokens[:, -1:], mem, memory_key_padding_mask=mem_mask, cache=cache
                )  # (n, 1, V)
            else:
                logits = model.decode(tokens, mem, memory_key_padding_mask=mem_mask)  # (n, t, V)
            log_probs = _next_log_probs(logits, model.config.pad_id, bos_id)  # (n, V)
            vocab_size = log_probs.size(-1)
            total = scores[:, None] + log_probs  # (n, V)
            num_candidates = min(2 * beam_size, total.numel())
            cand_scores, flat = total.reshape(-1).topk(num_candidates)  # (2k,)
            cand_beams = flat // vocab_size  # de qual feixe veio, (2k,)
            cand_tokens = flat % vocab_size  # qual token, (2k,)

            keep_beams, keep_tokens, keep_scores = [], [], []
            for rank in range(num_candidates):
                beam, token = int(cand_beams[rank]), int(cand_tokens[rank])
                if token == eos_id:
                    if rank < beam_size:  # só <eos> entre os beam_size melhores conta
                        finish(tokens[beam, 1:].tolist(), float(cand_scores[rank]), step + 1)
                    continue
                keep_beams.append(beam)
                keep_tokens.append(token)
                keep_scores.append(cand_scores[rank])
                if len(keep_beams) == beam_size:
                    break
            if not keep_beams:
                break
            if len(finished) >= beam_size:
                # Para só quando a log-prob atual do melhor feixe vivo (sem somar o <eos>),
                # dividida pela penalidade do comprimento atual, não passa da beam_size-ésima
                # melhor pronta. Com length_penalty=0 isso é exato: cada token a mais, o <eos>
                # inclusive, soma uma log-prob <= 0, então a log-prob atual é um teto (com o
                # <eos> somado ela não seria). Com penalidade, lp cresce com o comprimento e o
                # teto falha: é a regra usual, aproximada (a mesma ideia do Hugging Face).
                # Parar na beam_size-ésima pronta, sem essa conta, deixava escapar hipóteses
                # bem mais prováveis que ainda estavam no feixe.
                kth_best = sorted((h.score for h in finished), reverse=True)[beam_size - 1]
                alive_best = float(max(keep_scores)) / length_penalty_gnmt(step + 1, length_penalty)
                if alive_best <= kth_best:
                    break
            beam_idx = torch.tensor(keep_beams, device=device)  # (n_novo,)
            tokens = torch.cat(
                [tokens[beam_idx], torch.tensor(keep_tokens, device=device)[:, None]], dim=1
            )  # (n_novo, t + 1)
            scores = torch.stack(keep_scores)  # (n_novo,)
            if use_cache:
                _reorder_cache(cache, beam_idx)
        else:
            # max_len atingido: as hipóteses inacabadas também concorrem.
            for row, log_prob in zip(tokens[:, 1:].tolist(), scores.tolist(), strict=True):
                finish(row, log_prob, max_len)
    finally:
        model.train(was_training)

    ranked = sorted(finished, key=lambda h: h.score, reverse=True)
    return ranked if return_all else ranked[0].tokens
