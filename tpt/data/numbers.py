"""Números por extenso em português do Brasil e a tarefa seq2seq construída sobre eles.

Ver notebooks/08_encoder_decoder.ipynb (treino) e notebooks/09_geracao.ipynb (geração).

A tarefa é traduzir "1234" em "mil duzentos e trinta e quatro". Ela é pequena o bastante
para treinar em CPU em poucos minutos, mas exige o que um tradutor exige: a saída tem
comprimento diferente da entrada, a ordem das palavras depende de regras ("cem" ou
"cento", quando entra o "e") e o modelo precisa saber parar (o token `<eos>`).

Regras de escrita usadas aqui (norma brasileira):

- "cem" para 100 exato e "cento" quando vem algo depois: "cento e um".
- Dentro de um grupo de três algarismos, o "e" liga centenas, dezenas e unidades:
  "trezentos e quarenta e dois".
- "mil" sem "um" na frente; "um milhão", "dois milhões", "um bilhão", "dois bilhões".
- Entre as classes (bilhões, milhões, milhares, unidades) NÃO se usa "e", exceto antes
  da ÚLTIMA classe não nula, quando ela for menor que 100 ou uma centena redonda:
  "mil e um", "mil e cem", "mil duzentos e trinta e quatro", "um milhão e duzentos mil",
  "um milhão cento e um mil", "seis milhões sessenta e nove mil quinhentos e vinte e três".
- Sem vírgulas (a vírgula opcional entre classes não é um token da tarefa).
- 14 se escreve "catorze". "Quatorze" também é correto no Brasil (as duas formas estão no
  VOLP); escolhemos UMA para que o alvo de cada número seja único.

O vocabulário é UM só para entrada e saída (errata 24): os tokens especiais, os dez
algarismos e as palavras, em ordem fixa. Assim o `<eos>` existe na saída e o mesmo
`nn.Embedding` serve ao encoder e ao decoder.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tpt.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

MAX_NUMBER = 10**12
"""Limite superior (exclusivo) de `number_to_words`: vai até 999.999.999.999."""

# fmt: off
_UNITS = (
    "zero", "um", "dois", "três", "quatro", "cinco", "seis", "sete", "oito", "nove",
    "dez", "onze", "doze", "treze", "catorze", "quinze", "dezesseis", "dezessete",
    "dezoito", "dezenove",
)
_TENS = (
    "", "", "vinte", "trinta", "quarenta", "cinquenta", "sessenta", "setenta", "oitenta",
    "noventa",
)
_HUNDREDS = (
    "", "cento", "duzentos", "trezentos", "quatrocentos", "quinhentos", "seiscentos",
    "setecentos", "oitocentos", "novecentos",
)
# fmt: on
# Nome de cada classe de três algarismos: (singular, plural), da menor para a maior.
_SCALES = ((None, None), ("mil", "mil"), ("milhão", "milhões"), ("bilhão", "bilhões"))

WORDS: tuple[str, ...] = tuple(
    sorted(
        {w for w in _UNITS + _TENS + _HUNDREDS if w}
        | {"cem", "e"}
        | {w for pair in _SCALES for w in pair if w}
    )
)
"""As palavras que aparecem nos alvos, na ordem de `sorted` (por código Unicode)."""

DIGITS: tuple[str, ...] = tuple("0123456789")


def _check_number(n: Any, name: str = "n") -> int:
    """Devolve `n` como int ou levanta um erro que diz o que veio e o que se esperava."""
    if isinstance(n, bool):
        raise TypeError(f"{name}={n!r} é um bool; esperava um inteiro entre 0 e {MAX_NUMBER - 1}")
    try:
        value = operator.index(n)  # aceita int, numpy.int64, tensor inteiro 0-d; 3.0 não
    except TypeError:
        raise TypeError(
            f"{name}={n!r} (tipo {type(n).__name__}) não é um inteiro; esperava um "
            f"inteiro entre 0 e {MAX_NUMBER - 1}"
        ) from None
    if not 0 <= value < MAX_NUMBER:
        raise ValueError(
            f"{name}={value} está fora do intervalo válido: esperava 0 <= {name} < 10**12 "
            f"(de 0 a {MAX_NUMBER - 1})"
        )
    return value


def _group_words(g: int) -> list[str]:
    """Palavras de 1 <= g <= 999, com o "e" entre centenas, dezenas e unidades."""
    if g == 100:
        return ["cem"]
    words: list[str] = []
    hundreds, rest = divmod(g, 100)
    if hundreds:
        words.append(_HUNDREDS[hundreds])
    if rest:
        if words:
            words.append("e")
        if rest < 20:
            words.append(_UNITS[rest])
        else:
            tens, units = divmod(rest, 10)
            words.append(_TENS[tens])
            if units:
                words += ["e", _UNITS[units]]
    return words


def number_to_tokens(n: int) -> list[str]:
    """Lista de palavras de `n` por extenso: 1234 -> ["mil", "duzentos", "e", ...].

    É o alvo da tarefa seq2seq; `number_to_words` só junta estas palavras com espaços.
    """
    n = _check_number(n)
    if n == 0:
        return ["zero"]
    # Classes de três algarismos, da menor para a maior: 1234567 -> [567, 234, 1].
    groups = []
    while n:
        n, g = divmod(n, 1000)
        groups.append(g)
    # Cada classe não nula vira palavras, da MAIOR para a menor.
    parts: list[tuple[int, list[str]]] = []
    for scale in reversed(range(len(groups))):
        g = groups[scale]
        if g == 0:
            continue
        singular, plural = _SCALES[scale]
        if scale == 1 and g == 1:
            words = ["mil"]  # "mil", nunca "um mil"
        elif singular is None:
            words = _group_words(g)
        else:
            words = _group_words(g) + [singular if g == 1 else plural]
        parts.append((g, words))
    tokens: list[str] = []
    for i, (g, words) in enumerate(parts):
        is_last = i == len(parts) - 1
        # O "e" entre classes só aparece antes da última classe não nula, e só quando
        # ela é menor que 100 ou uma centena redonda: "mil e oitenta", "mil e trezentos",
        # mas "mil trezentos e quinze".
        if i > 0 and is_last and (g < 100 or g % 100 == 0):
            tokens.append("e")
        tokens += words
    return tokens


def number_to_words(n: int) -> str:
    """Escreve `n` por extenso em português do Brasil, sem vírgulas.

    Aceita inteiros 0 <= n < 10**12. Exemplos: 0 -> "zero", 100 -> "cem",
    1001 -> "mil e um", 1234 -> "mil duzentos e trinta e quatro",
    1000100 -> "um milhão e cem", 2000000000 -> "dois bilhões".
    Levanta TypeError para bool, float (inclusive 3.0) e outros não inteiros, e
    ValueError para negativos ou n >= 10**12.
    """
    return " ".join(number_to_tokens(n))


# ---------------------------------------------------------------------------------------
# Vocabulário compartilhado (entrada = algarismos, saída = palavras)
# ---------------------------------------------------------------------------------------


class NumberVocab:
    """Vocabulário ÚNICO da tarefa números -> palavras (errata 24).

    Ordem fixa: `<pad>`, `<bos>`, `<eos>`, `<unk>` (ids 0 a 3), os algarismos "0".."9"
    (ids 4 a 13) e as palavras na ordem de `sorted` (por código Unicode: "três" vem
    depois de "trinta"). Nada depende da ordem de um `set` nem de sorteio, então os ids
    são os mesmos em toda máquina; mesmo assim, salve `state_dict()` junto do modelo.

    >>> vocab = NumberVocab()
    >>> vocab.decode(vocab.encode_target(1234))
    'mil duzentos e trinta e quatro'
    """

    def __init__(self, tokens: Sequence[str] | None = None) -> None:
        if tokens is None:
            tokens = list(SPECIAL_TOKENS) + list(DIGITS) + list(WORDS)
        tokens = list(tokens)
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != tuple(SPECIAL_TOKENS):
            raise ValueError(
                f"os primeiros tokens devem ser {list(SPECIAL_TOKENS)} (ids 0 a 3); "
                f"recebi {tokens[: len(SPECIAL_TOKENS)]}"
            )
        repeated = sorted({t for t in tokens if tokens.count(t) > 1})
        if repeated:
            raise ValueError(f"tokens repetidos no vocabulário: {repeated}")
        self.tokens: list[str] = tokens
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    @property
    def vocab_size(self) -> int:
        """Número de tokens (é o `vocab_size` do `Transformer`)."""
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"NumberVocab(vocab_size={self.vocab_size})"

    def _ids(self, tokens: list[str], n: int) -> list[int]:
        missing = [t for t in tokens if t not in self.stoi]
        if missing:
            raise ValueError(f"o número {n} usa tokens fora deste vocabulário: {missing}")
        return [self.stoi[t] for t in tokens]

    def encode_source(self, n: int) -> list[int]:
        """Ids da ENTRADA: um token por algarismo, 1234 -> ids de ["1", "2", "3", "4"]."""
        n = _check_number(n)
        return self._ids(list(str(n)), n)

    def encode_target(self, n: int) -> list[int]:
        """Ids do ALVO: as palavras por extenso, sem `<bos>` nem `<eos>` (ver collate)."""
        n = _check_number(n)
        return self._ids(number_to_tokens(n), n)

    def ids_to_tokens(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Converte ids em tokens, sem remover nada. Aceita lista ou tensor 1-D."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode espera uma sequência 1-D de ids; recebi um tensor de forma "
                    f"{tuple(ids.shape)} (para um lote, decodifique linha por linha)"
                )
            if ids.is_floating_point():
                raise TypeError(f"ids devem ser inteiros; recebi um tensor {ids.dtype}")
            ids = ids.tolist()
        out = []
        for i in ids:
            try:
                if isinstance(i, bool):
                    raise TypeError
                i = operator.index(i)
            except TypeError:
                raise TypeError(f"id {i!r} (tipo {type(i).__name__}) não é um inteiro") from None
            if not 0 <= i < len(self.tokens):
                raise ValueError(
                    f"id {i} fora do vocabulário: esperava 0 <= id < {len(self.tokens)}"
                )
            out.append(self.tokens[i])
        return out

    def decode(self, ids: Iterable[int] | torch.Tensor, *, skip_special_tokens: bool = True) -> str:
        """Ids -> texto legível. Algarismos colados ("1234"), palavras com espaço.

        Com `skip_special_tokens=True` (padrão), `<pad>` e `<bos>` somem e a leitura PARA
        no primeiro `<eos>`, como numa saída gerada pelo modelo. `<unk>` é mantido.
        """
        pieces: list[str] = []
        for tok in self.ids_to_tokens(ids):
            if skip_special_tokens and tok == SPECIAL_TOKENS[EOS_ID]:
                break
            if skip_special_tokens and tok in (SPECIAL_TOKENS[PAD_ID], SPECIAL_TOKENS[BOS_ID]):
                continue
            if pieces and tok in DIGITS and pieces[-1][-1:] in DIGITS:
                pieces[-1] += tok  # algarismos seguidos formam um número só
            else:
                pieces.append(tok)
        return " ".join(pieces)

    def decode_batch(
        self, batch: torch.Tensor | Sequence[Sequence[int]], *, skip_special_tokens: bool = True
    ) -> list[str]:
        """Lote de ids `(b, t)` -> lista de `b` textos (cada linha com `decode`)."""
        if isinstance(batch, torch.Tensor) and batch.dim() != 2:
            raise ValueError(
                f"decode_batch espera um tensor 2-D (b, t); recebi a forma {tuple(batch.shape)}"
            )
        return [self.decode(row, skip_special_tokens=skip_special_tokens) for row in batch]

    def state_dict(self) -> dict[str, Any]:
        """O que salvar junto do checkpoint para reconstruir os mesmos ids.

        Só str e listas: seguro para `torch.load(weights_only=True)`.
        """
        return {"type": type(self).__name__, "tokens": list(self.tokens)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> NumberVocab:
        """Reconstrói o vocabulário salvo por `state_dict()`."""
        if not isinstance(state, Mapping) or "tokens" not in state:
            raise ValueError(
                "state deve ser o dicionário de NumberVocab.state_dict(), com a chave "
                f"'tokens'; recebi {type(state).__name__} {state!r:.80}"
            )
        if state.get("type", cls.__name__) != cls.__name__:
            raise ValueError(f"este state_dict é de {state.get('type')!r}, não de {cls.__name__!r}")
        return cls(state["tokens"])


# ---------------------------------------------------------------------------------------
# Divisão treino / validação / teste
# ---------------------------------------------------------------------------------------


def make_number_splits(
    max_value: int = 10**6,
    n_train: int = 20000,
    n_val: int = 1000,
    n_test: int = 1000,
    seed: int = 0,
    *,
    always_train: int = 100,
) -> dict[str, list[int]]:
    """Sorteia números DISTINTOS em [0, max_value) para treino, validação e teste.

    Regras (nesta ordem):

    - Todos os números de 0 a `always_train - 1` (padrão: 0 a 99) vão para o TREINO. São
      poucos e cada um é uma "palavra" que o modelo precisa ver ao menos uma vez ("sete",
      "catorze", "vinte"); se caíssem no teste, o treino não teria nenhum número de um
      algarismo. O resto é sorteado em [always_train, max_value).
    - Mistura pretendida por número de algarismos: metade uniforme no intervalo (quase
      tudo teria 6 algarismos) e metade com o número de algarismos uniforme (sem isso, o
      modelo veria poucos casos como "cento e dois"). Cada faixa (3 algarismos, 4, ...)
      recebe a sua cota desse total, arredondada para inteiros. Uma faixa pequena demais
      para a sua cota (só existem 900 números de 3 algarismos) entra inteira, e a sobra
      é dividida entre as outras faixas na mesma proporção.
    - Estratificação: a cota de cada faixa é repartida entre teste, validação e treino
      na proporção `n_test : n_val : (n_train - always_train)`. Assim os três conjuntos
      têm a mesma distribuição por número de algarismos: em cada faixa, cada conjunto
      recebe a sua parte proporcional arredondada (diferença menor que 2 números). O
      teste é tão difícil quanto o treino: nenhuma faixa rara no treino pesa mais no
      teste. (Fora da comparação ficam só os números de 0 a `always_train - 1`, que
      existem apenas no treino.)
    - Os conjuntos são disjuntos: nenhum número aparece em dois deles.

    Determinístico: as cotas são contas exatas (frações) e os sorteios usam
    `random.Random(seed)`, o mesmo em qualquer máquina. Como as cotas dependem do total
    pedido, mudar `n_train` também muda o teste. Devolve
    `{"train": [...], "val": [...], "test": [...]}` com `n_train`, `n_val` e `n_test`
    números, cada lista embaralhada.

    Levanta TypeError se um tamanho não for inteiro e ValueError se for negativo, se
    `max_value` passar de 10**12, se `n_train < always_train` ou se o intervalo não tiver
    números suficientes.
    """
    max_value = _check_count(max_value, "max_value", minimum=1)
    if max_value > MAX_NUMBER:
        raise ValueError(f"max_value={max_value} passa do limite 10**12 de number_to_words")
    always_train = _check_count(always_train, "always_train")
    n_test = _check_count(n_test, "n_test")
    n_val = _check_count(n_val, "n_val")
    n_train = _check_count(n_train, "n_train")
    if always_train > max_value:
        raise ValueError(
            f"always_train={always_train} não pode passar de max_value={max_value}; "
            f"passe um always_train menor (ou 0)"
        )
    if n_train < always_train:
        raise ValueError(
            f"n_train={n_train} é menor que always_train={always_train}: os números de 0 a "
            f"{always_train - 1} sempre entram no treino (use always_train=0 para desligar)"
        )
    low = always_train
    n_drawn = n_train - always_train  # a parte sorteada do treino
    total = n_test + n_val + n_drawn
    if total > max_value - low:
        raise ValueError(
            f"pedi {total} números distintos sorteados em [{low}, {max_value}) "
            f"(n_train={n_train}, n_val={n_val}, n_test={n_test}, "
            f"always_train={always_train}), mas o intervalo só tem {max_value - low}"
        )
    bands = _digit_bands(low, max_value)
    sizes = [high - band_low for band_low, high in bands]
    # Mistura pretendida: 1/2 uniforme no intervalo + 1/2 uniforme no número de algarismos.
    weights = [
        Fraction(1, 2 * len(bands)) + Fraction(size, 2 * (max_value - low)) for size in sizes
    ]
    quotas = _apportion(weights, total, sizes)  # números de cada faixa
    # Estratificação: cada faixa dividida em teste, validação e treino na mesma proporção.
    test_counts = _apportion(quotas, n_test, quotas)
    rest = [q - k for q, k in zip(quotas, test_counts, strict=True)]
    val_counts = _apportion(rest, n_val, rest)

    rng = random.Random(seed)
    test: list[int] = []
    val: list[int] = []
    train = list(range(always_train))
    for (band_low, band_high), quota, k_test, k_val in zip(
        bands, quotas, test_counts, val_counts, strict=True
    ):
        chosen = rng.sample(range(band_low, band_high), quota)  # distintos, em ordem aleatória
        test += chosen[:k_test]
        val += chosen[k_test : k_test + k_val]
        train += chosen[k_test + k_val :]
    for split in (test, val, train):
        rng.shuffle(split)
    return {"train": train, "val": val, "test": test}


def _digit_bands(low: int, max_value: int) -> list[tuple[int, int]]:
    """Faixas [início, fim) de [low, max_value) com o mesmo número de algarismos."""
    bands = []
    for digits in range(len(str(low)), len(str(max_value - 1)) + 1):
        band_low = max(low, 0 if digits == 1 else 10 ** (digits - 1))
        band_high = min(10**digits, max_value)
        if band_low < band_high:
            bands.append((band_low, band_high))
    return bands


def _apportion(weights: Sequence[Fraction | int], total: int, capacity: Sequence[int]) -> list[int]:
    """Divide `total` em inteiros proporcionais a `weights`, sem passar de `capacity`.

    Quem excede a capacidade recebe a capacidade inteira e a sobra é redividida entre os
    outros (na mesma proporção). No fim, pelo maior resto: cada parte fica a menos de 1
    da sua fração exata. Contas em `Fraction`: o resultado não depende da máquina.
    """
    counts = [0] * len(weights)
    active = [i for i, w in enumerate(weights) if w > 0]
    remaining = total
    while active and remaining > 0:
        weight_sum = sum(Fraction(weights[i]) for i in active)
        full = [i for i in active if weights[i] * remaining >= capacity[i] * weight_sum]
        if not full:
            shares = {i: Fraction(weights[i]) * remaining / weight_sum for i in active}
            for i in active:
                counts[i] = math.floor(shares[i])
            left = remaining - sum(counts[i] for i in active)
            by_remainder = sorted(active, key=lambda i: (counts[i] - shares[i], i))
            for i in by_remainder[:left]:
                counts[i] += 1
            break
        for i in full:
            counts[i] = capacity[i]
            remaining -= capacity[i]
        active = [i for i in active if i not in full]
    return counts


def _check_count(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} deve ser um inteiro")
    if value < minimum:
        raise ValueError(f"{name}={value} deve ser >= {minimum}")
    return value


# ---------------------------------------------------------------------------------------
# Dataset, collate (teacher forcing) e DataLoader
# ---------------------------------------------------------------------------------------


class NumbersDataset(Dataset):
    """Dataset de pares `(src_ids, tgt_ids)` (tensores long 1-D) para os números dados.

    `src_ids` são os algarismos; `tgt_ids` são as palavras, SEM `<bos>`/`<eos>`: quem
    monta a entrada e o rótulo do decoder é `collate_numbers`.
    """

    def __init__(self, numbers: Iterable[int], vocab: NumberVocab | None = None) -> None:
        self.vocab = vocab if vocab is not None else NumberVocab()
        self.numbers = [_check_number(n, "número") for n in numbers]
        self._src = [torch.tensor(self.vocab.encode_source(n)) for n in self.numbers]
        self._tgt = [torch.tensor(self.vocab.encode_target(n)) for n in self.numbers]

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._src[index], self._tgt[index]


def _pad(seqs: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Empilha sequências 1-D com preenchimento à direita; devolve (ids (b, t), máscara (b, t))."""
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)  # (b, t)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = s
    lengths = torch.tensor([len(s) for s in seqs])
    mask = torch.arange(length)[None, :] >= lengths[:, None]  # (b, t), True = <pad>
    return ids, mask


def collate_numbers(
    batch: Sequence[tuple[torch.Tensor, torch.Tensor]], pad_id: int = PAD_ID
) -> dict[str, torch.Tensor]:
    """Monta um lote para treino com teacher forcing (errata 19).

    Devolve um dicionário com:

    - `src` (b, s): algarismos, com `<pad>` à direita;
    - `tgt_in` (b, t): `<bos>` + alvo (o que o decoder **lê**);
    - `tgt_out` (b, t): alvo + `<eos>` (o que ele deve PREVER em cada posição);
    - `src_key_padding_mask` (b, s) e `tgt_key_padding_mask` (b, t): bool, True = `<pad>`
      (a convenção de todo o tpt e do `nn.Transformer`).

    Na loss, use `ignore_index=PAD_ID` para não cobrar as posições de preenchimento.
    """
    if len(batch) == 0:
        raise ValueError("collate_numbers recebeu um lote vazio")
    src = [s for s, _ in batch]
    bos = torch.tensor([BOS_ID])
    eos = torch.tensor([EOS_ID])
    tgt_in = [torch.cat([bos, t]) for _, t in batch]  # <bos> w1 ... wn
    tgt_out = [torch.cat([t, eos]) for _, t in batch]  # w1 ... wn <eos>
    src_ids, src_mask = _pad(src, pad_id)
    tgt_in_ids, tgt_mask = _pad(tgt_in, pad_id)
    tgt_out_ids, _ = _pad(tgt_out, pad_id)  # mesmos comprimentos de tgt_in
    return {
        "src": src_ids,
        "tgt_in": tgt_in_ids,
        "tgt_out": tgt_out_ids,
        "src_key_padding_mask": src_mask,
        "tgt_key_padding_mask": tgt_mask,
    }


def number_batches(
    numbers: Iterable[int],
    batch_size: int,
    *,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    vocab: NumberVocab | None = None,
    drop_last: bool = False,
) -> DataLoader:
    """Atalho: um `DataLoader` de lotes de `collate_numbers` para os números dados.

    Com `shuffle=True`, passe um `torch.Generator` semeado para que a ordem dos lotes
    seja reproduzível. Cada lote é o dicionário descrito em `collate_numbers`.
    """
    batch_size = _check_count(batch_size, "batch_size", minimum=1)
    return DataLoader(
        NumbersDataset(numbers, vocab),
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        drop_last=drop_last,
        collate_fn=collate_numbers,
    )
