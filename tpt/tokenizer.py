"""Tokenizadores: de texto para inteiros e de volta.

Ver notebooks/01_tokens.ipynb.

Dois tokenizadores, escritos do zero para serem lidos:

* :class:`CharTokenizer`: um token por caractere. O vocabulário sai do CORPUS (e não de
  ``string.printable``, que não tem "ç" nem "ã"), em ordem ORDENADA: os ids não mudam de
  uma execução para outra (um ``set`` mudaria com ``PYTHONHASHSEED``).
* :class:`BPETokenizer`: *byte-pair encoding* sobre caracteres. Começa com um token por
  caractere e aprende, passo a passo, a juntar o par de tokens vizinhos mais frequente.

Os dois compartilham o que não depende da forma de quebrar o texto (classe
:class:`BaseTokenizer`): tokens especiais com ids fixos, normalização Unicode (NFC por
padrão: "ã" vira UM código, mesmo que chegue como "a" + til combinante), tratamento de
caracteres desconhecidos, ``decode``, lotes com preenchimento e ``state_dict``.

Tokens especiais (ids fixos, sempre os primeiros do vocabulário):

====  =========  ==========================================================
 id    token      para que serve
====  =========  ==========================================================
 0     ``<pad>``  enchimento para igualar o comprimento das sequências do lote
 1     ``<bos>``  início de sequência (o primeiro passo da geração)
 2     ``<eos>``  fim de sequência (a geração para quando ele aparece)
 3     ``<unk>``  caractere que não estava no corpus de treino
====  =========  ==========================================================
"""

from __future__ import annotations

import heapq
import numbers
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "SPECIAL_TOKENS",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "BaseTokenizer",
    "CharTokenizer",
    "BPETokenizer",
    "pretokenize",
    "count_pairs",
    "merge_pair",
]

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3

_NORMALIZATIONS = ("NFC", "NFD", "NFKC", "NFKD")
_UNKNOWN_MODES = ("unk", "error")
_STATE_VERSION = 1


# --------------------------------------------------------------------------------------
# Funções auxiliares
# --------------------------------------------------------------------------------------


def _check_normalization(normalization: str | None) -> str | None:
    if normalization is not None and normalization not in _NORMALIZATIONS:
        raise ValueError(
            f"normalization={normalization!r} inválido; use um de {_NORMALIZATIONS} ou None "
            "(sem normalização)."
        )
    return normalization


def _check_unknown(unknown: str) -> str:
    if unknown not in _UNKNOWN_MODES:
        raise ValueError(
            f"unknown={unknown!r} inválido; use 'unk' (troca por <unk>) ou 'error' "
            "(levanta ValueError)."
        )
    return unknown


def _as_texts(texts: str | Iterable[str], name: str = "texts") -> list[str]:
    """Aceita um texto ou um iterável de textos e devolve uma lista de ``str``."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
        raise TypeError(
            f"{name} deve ser str ou um iterável de str; recebi {type(texts).__name__}."
        )
    result = list(texts)
    for i, text in enumerate(result):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] deve ser str; recebi {type(text).__name__}.")
    return result


def _describe_char(char: str) -> str:
    """Ex.: ``'ñ' (U+00F1 LATIN SMALL LETTER N WITH TILDE)``."""
    return f"{char!r} (U+{ord(char):04X} {unicodedata.name(char, 'sem nome Unicode')})"


def _check_alphabet(chars: Sequence[str], name: str) -> None:
    """Cada item deve ser UM caractere, sem repetição."""
    seen: set[str] = set()
    for i, char in enumerate(chars):
        if not isinstance(char, str):
            raise TypeError(f"{name}[{i}] deve ser str; recebi {type(char).__name__}.")
        if len(char) != 1:
            raise ValueError(
                f"{name}[{i}]={char!r} tem {len(char)} caracteres; esperava exatamente 1."
            )
        if char in seen:
            raise ValueError(f"{name} tem o caractere {_describe_char(char)} repetido.")
        seen.add(char)


# --------------------------------------------------------------------------------------
# A parte comum aos dois tokenizadores
# --------------------------------------------------------------------------------------


class BaseTokenizer:
    """O que todo tokenizador do tpt faz, qualquer que seja a forma de quebrar o texto.

    As subclasses só precisam dizer como um texto (já normalizado) vira uma lista de
    tokens (``_split``) e o que guardar no ``state_dict``.

    Atributos:
        itos: lista id -> token (os 4 especiais primeiro).
        stoi: dicionário token -> id.
        normalization: forma Unicode aplicada antes de tudo ("NFC", ...) ou ``None``.
        unknown: ``"unk"`` (caractere fora do vocabulário vira ``<unk>``) ou ``"error"``.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        alphabet: Iterable[str],
        *,
        unknown: str = "unk",
        normalization: str | None = "NFC",
    ) -> None:
        self.unknown = _check_unknown(unknown)
        self.normalization = _check_normalization(normalization)
        self.itos: list[str] = [*SPECIAL_TOKENS, *tokens]
        self.stoi: dict[str, int] = {}
        for i, token in enumerate(self.itos):
            if token in self.stoi:
                raise ValueError(
                    f"o token {token!r} aparece duas vezes no vocabulário (ids "
                    f"{self.stoi[token]} e {i})."
                )
            self.stoi[token] = i
        # Caracteres conhecidos: o que não estiver aqui é "desconhecido".
        self._alphabet = frozenset(alphabet)

    # -- tamanho do vocabulário ---------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Número de tokens, incluindo os 4 especiais."""
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab(self) -> list[str]:
        """Cópia da lista de tokens na ordem dos ids (especiais primeiro)."""
        return list(self.itos)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, "
            f"normalization={self.normalization!r}, unknown={self.unknown!r})"
        )

    # -- texto -> tokens ----------------------------------------------------------------

    def normalize(self, text: str) -> str:
        """Aplica a normalização Unicode do tokenizador (NFC por padrão)."""
        if self.normalization is None:
            return text
        return unicodedata.normalize(self.normalization, text)

    def _split(self, text: str) -> list[str]:
        """Quebra um texto JÁ normalizado em tokens (strings). Definido nas subclasses."""
        raise NotImplementedError

    def _raise_on_unknown(self, text: str) -> None:
        """No modo ``unknown="error"``: aponta o primeiro caractere desconhecido."""
        for position, char in enumerate(text):
            if char not in self._alphabet:
                where = f"na posição {position}"
                if self.normalization is not None:
                    where += f" (do texto após a normalização {self.normalization})"
                raise ValueError(
                    f"caractere {_describe_char(char)} {where} não está no vocabulário; "
                    "use unknown='unk' para trocá-lo por <unk>, ou inclua-o no corpus."
                )

    def tokenize(self, text: str) -> list[str]:
        """Texto -> lista de tokens (strings); desconhecidos aparecem como ``"<unk>"``."""
        return [self.itos[i] for i in self.encode(text)]

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Texto -> lista de ids.

        Args:
            text: o texto (é normalizado antes, ex.: NFC).
            add_special_tokens: se ``True``, devolve ``[<bos>, ..., <eos>]``.
        """
        if not isinstance(text, str):
            raise TypeError(
                f"encode espera um str; recebi {type(text).__name__}. Para vários textos "
                "use encode_batch."
            )
        text = self.normalize(text)
        if self.unknown == "error":
            self._raise_on_unknown(text)
        ids = [self.stoi.get(token, UNK_ID) for token in self._split(text)]
        if add_special_tokens:
            ids = [BOS_ID, *ids, EOS_ID]
        return ids

    # -- ids -> texto -------------------------------------------------------------------

    def _as_id_list(self, ids: Sequence[int] | Tensor) -> list[int]:
        """Valida ids (lista, tupla, tensor 1-D ou array 1-D) e devolve ``list[int]``."""
        if isinstance(ids, Tensor):
            if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
                raise TypeError(
                    f"decode espera ids inteiros (torch.long); recebi um tensor {ids.dtype}."
                )
            if ids.dim() != 1:
                raise ValueError(
                    f"decode espera um tensor 1-D (t,); recebi formato {tuple(ids.shape)}. "
                    "Para um lote (b, t) use decode_batch."
                )
            values = ids.tolist()
        elif isinstance(ids, (str, bytes)):
            raise TypeError(f"decode espera uma sequência de ids; recebi {type(ids).__name__}.")
        else:
            if hasattr(ids, "ndim") and ids.ndim != 1:  # ex.: array do numpy
                raise ValueError(
                    f"decode espera ids 1-D; recebi formato {tuple(ids.shape)}. "
                    "Para um lote use decode_batch."
                )
            values = list(ids)
            for position, value in enumerate(values):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise TypeError(
                        f"decode espera ids inteiros; o item {position} é "
                        f"{type(value).__name__} ({value!r})."
                    )
            values = [int(v) for v in values]
        for value in values:
            if not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"id {value} fora do vocabulário (vocab_size={self.vocab_size}; "
                    f"ids válidos vão de 0 a {self.vocab_size - 1})."
                )
        return values

    def decode(self, ids: Sequence[int] | Tensor, *, skip_special_tokens: bool = True) -> str:
        """Lista de ids (ou tensor 1-D) -> texto.

        Com ``skip_special_tokens=True`` somem ``<pad>``, ``<bos>`` e ``<eos>``. O
        ``<unk>`` continua visível: ele ocupa o lugar de um texto que existia, e apagá-lo
        esconderia a perda. Para textos sem desconhecidos vale
        ``decode(encode(x)) == normalize(x)``.
        """
        skipped = (PAD_ID, BOS_ID, EOS_ID) if skip_special_tokens else ()
        return "".join(self.itos[i] for i in self._as_id_list(ids) if i not in skipped)

    def decode_batch(
        self, batch: Tensor | Sequence[Sequence[int]], *, skip_special_tokens: bool = True
    ) -> list[str]:
        """Lote de ids ``(b, t)`` -> lista de ``b`` textos (o preenchimento some)."""
        if isinstance(batch, Tensor) and batch.dim() != 2:
            raise ValueError(
                f"decode_batch espera um tensor 2-D (b, t); recebi {tuple(batch.shape)}."
            )
        return [self.decode(row, skip_special_tokens=skip_special_tokens) for row in batch]

    # -- lotes --------------------------------------------------------------------------

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        padding: str = "longest",
        max_length: int | None = None,
        truncation: bool = False,
        add_special_tokens: bool = False,
        padding_side: str = "right",
    ) -> dict[str, Tensor]:
        """Codifica vários textos num único tensor retangular, preenchido com ``<pad>``.

        Args:
            texts: lista de ``b`` textos.
            padding: ``"longest"`` (t = a maior sequência do lote) ou ``"max_length"``
                (t = ``max_length``).
            max_length: comprimento máximo (contando ``<bos>``/``<eos>``). Um texto mais
                longo é erro, a menos que ``truncation=True``.
            truncation: corta o fim dos textos longos (os especiais são mantidos).
            add_special_tokens: põe ``<bos>`` no início e ``<eos>`` no fim de cada texto.
            padding_side: ``"right"`` (padrão) ou ``"left"`` (útil para gerar em lote).

        Returns:
            Dicionário com:

            * ``input_ids``: ``(b, t)`` ``torch.long``, com ``PAD_ID`` no enchimento;
            * ``lengths``: ``(b,)`` ``torch.long``, quantos tokens reais cada linha tem;
            * ``padding_mask``: ``(b, t)`` ``torch.bool``, ``True`` = ``<pad>``
              (a convenção do tpt: ``True`` = BLOQUEADO).
        """
        if isinstance(texts, str):
            raise TypeError("encode_batch espera uma LISTA de textos; para um só use encode.")
        texts = _as_texts(texts)
        if not texts:
            raise ValueError("encode_batch recebeu uma lista vazia de textos.")
        if padding not in ("longest", "max_length"):
            raise ValueError(f"padding={padding!r} inválido; use 'longest' ou 'max_length'.")
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side={padding_side!r} inválido; use 'right' ou 'left'.")
        num_special = 2 if add_special_tokens else 0
        if max_length is not None:
            if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral):
                raise TypeError(f"max_length deve ser int; recebi {max_length!r}.")
            if max_length < max(num_special, 1):
                raise ValueError(
                    f"max_length={max_length} é pequeno demais (mínimo {max(num_special, 1)}"
                    f"{' por causa de <bos> e <eos>' if num_special else ''})."
                )
        if padding == "max_length" and max_length is None:
            raise ValueError("padding='max_length' precisa de max_length (um inteiro).")
        if truncation and max_length is None:
            raise ValueError("truncation=True precisa de max_length (um inteiro).")

        sequences: list[list[int]] = []
        for index, text in enumerate(texts):
            ids = self.encode(text)
            if max_length is not None and len(ids) + num_special > max_length:
                if not truncation:
                    raise ValueError(
                        f"o texto de índice {index} tem {len(ids) + num_special} tokens, mais "
                        f"que max_length={max_length}; use truncation=True ou aumente "
                        "max_length."
                    )
                ids = ids[: max_length - num_special]
            if add_special_tokens:
                ids = [BOS_ID, *ids, EOS_ID]
            sequences.append(ids)

        lengths = torch.tensor([len(ids) for ids in sequences], dtype=torch.long)  # (b,)
        t = max_length if padding == "max_length" else int(lengths.max())
        input_ids = torch.full((len(sequences), t), PAD_ID, dtype=torch.long)  # (b, t)
        for row, ids in enumerate(sequences):
            if not ids:
                continue
            if padding_side == "right":
                input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            else:
                input_ids[row, t - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        positions = torch.arange(t)  # (t,)
        if padding_side == "right":
            padding_mask = positions[None, :] >= lengths[:, None]  # (b, t)
        else:
            padding_mask = positions[None, :] < (t - lengths)[:, None]  # (b, t)
        return {"input_ids": input_ids, "lengths": lengths, "padding_mask": padding_mask}

    # -- salvar e carregar --------------------------------------------------------------

    def _extra_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Estado num ``dict`` simples (só str, int, listas e None).

        Seguro para ``torch.save`` junto com o modelo e ``torch.load(weights_only=True)``.
        """
        return {
            "type": type(self).__name__,
            "version": _STATE_VERSION,
            "special_tokens": list(SPECIAL_TOKENS),
            "unknown": self.unknown,
            "normalization": self.normalization,
            **self._extra_state(),
        }

    @classmethod
    def _check_state(cls, state: Mapping[str, Any], keys: Sequence[str]) -> None:
        if not isinstance(state, Mapping):
            raise TypeError(f"state deve ser um dict; recebi {type(state).__name__}.")
        if state.get("type") != cls.__name__:
            raise ValueError(
                f"este state_dict é de {state.get('type')!r}, não de {cls.__name__!r}."
            )
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"versão de state_dict {state.get('version')!r} não suportada "
                f"(esperava {_STATE_VERSION})."
            )
        if list(state.get("special_tokens", [])) != list(SPECIAL_TOKENS):
            raise ValueError(
                f"tokens especiais {state.get('special_tokens')!r} diferem dos do tpt "
                f"{list(SPECIAL_TOKENS)!r}."
            )
        missing = [key for key in (*keys, "unknown", "normalization") if key not in state]
        if missing:
            raise ValueError(f"faltam as chaves {missing} no state_dict de {cls.__name__}.")


# --------------------------------------------------------------------------------------
# Tokenizador de caracteres
# --------------------------------------------------------------------------------------


class CharTokenizer(BaseTokenizer):
    """Um token por caractere (depois da normalização Unicode).

    Ids: ``0..3`` são os especiais; depois vêm os caracteres na ordem dada (``fit``
    os ordena por código Unicode, então os ids não dependem de ``PYTHONHASHSEED``).

    Exemplo::

        tok = CharTokenizer.fit("ação e pão")
        tok.encode("pão")          # [ids de 'p', 'ã', 'o']
        tok.decode(tok.encode("pão")) == "pão"
    """

    def __init__(
        self,
        chars: Iterable[str],
        *,
        unknown: str = "unk",
        normalization: str | None = "NFC",
    ) -> None:
        chars = list(chars)
        _check_alphabet(chars, "chars")
        super().__init__(chars, chars, unknown=unknown, normalization=normalization)

    @classmethod
    def fit(
        cls,
        texts: str | Iterable[str],
        *,
        unknown: str = "unk",
        normalization: str | None = "NFC",
    ) -> CharTokenizer:
        """Constrói o vocabulário com os caracteres do corpus, em ordem ORDENADA."""
        texts = _as_texts(texts)
        _check_normalization(normalization)
        chars: set[str] = set()
        for text in texts:
            if normalization is not None:
                text = unicodedata.normalize(normalization, text)
            chars.update(text)
        # sorted(): a ordem de um set muda com PYTHONHASHSEED; a ordenada, nunca.
        return cls(sorted(chars), unknown=unknown, normalization=normalization)

    @property
    def chars(self) -> list[str]:
        """Os caracteres do vocabulário (sem os especiais), na ordem dos ids."""
        return self.itos[len(SPECIAL_TOKENS) :]

    def _split(self, text: str) -> list[str]:
        return list(text)

    def _extra_state(self) -> dict[str, Any]:
        return {"chars": self.chars}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> CharTokenizer:
        """Reconstrói o tokenizador salvo por :meth:`state_dict`."""
        cls._check_state(state, ["chars"])
        return cls(
            list(state["chars"]), unknown=state["unknown"], normalization=state["normalization"]
        )


# --------------------------------------------------------------------------------------
# Byte-pair encoding (BPE) sobre caracteres
# --------------------------------------------------------------------------------------

# Pré-tokenização: o texto é quebrado em "palavras" e o BPE nunca junta tokens de
# palavras diferentes. O espaço fica GRUDADO no início da palavra seguinte (" trem"),
# então juntar os pedaços devolve o texto exato. Alternativas, nesta ordem:
#   " ?[^\W\d_]+"      letras (com acentos), com um espaço opcional antes
#   " ?\d+"            dígitos
#   " ?(?:[^\w\s]|_)+" pontuação e símbolos
#   "\s+(?!\S)"        espaços em excesso (deixa o último para a palavra seguinte)
#   "\s+"              quebras de linha e espaços finais
_PRETOKEN_RE = re.compile(r" ?[^\W\d_]+| ?\d+| ?(?:[^\w\s]|_)+|\s+(?!\S)|\s+")


def pretokenize(text: str) -> list[str]:
    """Quebra o texto em palavras; ``"".join(pretokenize(x)) == x`` sempre.

    Exemplo: ``"Oi, João!"`` -> ``["Oi", ",", " João", "!"]``.
    """
    return _PRETOKEN_RE.findall(text)


def count_pairs(words: Mapping[tuple[str, ...], int]) -> Counter[tuple[str, str]]:
    """Conta os pares de tokens vizinhos, cada palavra pesada pela sua frequência.

    Versão explícita (recontagem completa), usada para ensinar e nos testes; o treino
    rápido de :meth:`BPETokenizer.train` atualiza só as palavras afetadas.
    """
    pairs: Counter[tuple[str, str]] = Counter()
    for symbols, count in words.items():
        for pair in pairwise(symbols):
            pairs[pair] += count
    return pairs


def merge_pair(symbols: Sequence[str], pair: tuple[str, str]) -> list[str]:
    """Junta, da esquerda para a direita, toda ocorrência de ``pair`` em ``symbols``.

    Exemplo: ``merge_pair(["c", "ã", "o"], ("ã", "o")) == ["c", "ão"]``.
    """
    first, second = pair
    merged: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
            merged.append(first + second)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


class BPETokenizer(BaseTokenizer):
    """Byte-pair encoding sobre CARACTERES (texto normalizado em NFC).

    O vocabulário é: os 4 especiais, o alfabeto (caracteres do corpus, ordenados) e um
    token novo por fusão, na ordem em que as fusões foram aprendidas.

    Para codificar uma palavra, partimos dos caracteres e aplicamos as fusões NA ORDEM
    do treino (a fusão 0, depois a 1, ...), exatamente como no treino.

    Atributos:
        alphabet: os caracteres iniciais.
        merges: lista ordenada de pares ``(a, b)`` fundidos em ``a + b``.
        history: depois de :meth:`train`, lista ``((a, b), frequência)`` de cada fusão.
    """

    _CACHE_LIMIT = 100_000

    def __init__(
        self,
        alphabet: Iterable[str],
        merges: Iterable[tuple[str, str]],
        *,
        unknown: str = "unk",
        normalization: str | None = "NFC",
    ) -> None:
        alphabet = list(alphabet)
        _check_alphabet(alphabet, "alphabet")
        tokens = list(alphabet)
        known = set(alphabet)
        self.merges: list[tuple[str, str]] = []
        for rank, pair in enumerate(merges):
            if len(pair) != 2 or not all(isinstance(part, str) for part in pair):
                raise ValueError(f"merges[{rank}]={pair!r} deveria ser um par (str, str).")
            first, second = pair
            if first not in known or second not in known:
                raise ValueError(
                    f"merges[{rank}]=({first!r}, {second!r}) usa um token que ainda não "
                    "existe nesse ponto (nem no alfabeto nem em fusões anteriores)."
                )
            self.merges.append((first, second))
            # Duas fusões diferentes podem gerar a mesma string ("a"+"bc" e "ab"+"c"):
            # o token só entra uma vez no vocabulário.
            if first + second not in known:
                tokens.append(first + second)
                known.add(first + second)
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, pair in enumerate(self.merges):
            if pair in self.ranks:
                raise ValueError(f"a fusão {pair!r} aparece duas vezes em merges.")
            self.ranks[pair] = rank
        super().__init__(tokens, alphabet, unknown=unknown, normalization=normalization)
        self.alphabet = alphabet
        self.history: list[tuple[tuple[str, str], int]] = []
        self._cache: dict[str, tuple[str, ...]] = {}

    @classmethod
    def train(
        cls,
        text: str | Iterable[str],
        num_merges: int,
        *,
        min_frequency: int = 2,
        unknown: str = "unk",
        normalization: str | None = "NFC",
    ) -> BPETokenizer:
        """Aprende até ``num_merges`` fusões no texto.

        A cada passo, funde o par de tokens vizinhos mais frequente (empate: o menor par
        em ordem lexicográfica, para ser determinístico). Para antes se a frequência do
        melhor par ficar abaixo de ``min_frequency``.

        Para ser rápido, contamos as palavras UMA vez (``Counter`` das palavras) e, a cada
        fusão, só atualizamos as contagens das palavras que contêm o par fundido (um
        índice par -> palavras e uma fila de prioridade). O resultado é o mesmo da
        versão explícita: recontar tudo com :func:`count_pairs` e aplicar
        :func:`merge_pair` em todas as palavras.
        """
        if isinstance(num_merges, bool) or not isinstance(num_merges, numbers.Integral):
            raise TypeError(f"num_merges deve ser int; recebi {num_merges!r}.")
        if num_merges < 0:
            raise ValueError(f"num_merges={num_merges} deve ser >= 0.")
        if isinstance(min_frequency, bool) or not isinstance(min_frequency, numbers.Integral):
            raise TypeError(f"min_frequency deve ser int; recebi {min_frequency!r}.")
        if min_frequency < 1:
            raise ValueError(f"min_frequency={min_frequency} deve ser >= 1.")
        texts = _as_texts(text, "text")
        _check_normalization(normalization)
        if normalization is not None:
            texts = [unicodedata.normalize(normalization, t) for t in texts]

        # 1. Frequência de cada palavra; cada palavra começa como lista de caracteres.
        word_counts: Counter[str] = Counter()
        for t in texts:
            word_counts.update(pretokenize(t))
        alphabet = sorted({char for word in word_counts for char in word})
        words = [list(word) for word in word_counts]
        counts = list(word_counts.values())

        # 2. Contagem inicial dos pares e índice par -> palavras onde ele aparece.
        pair_counts: Counter[tuple[str, str]] = Counter()
        where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
        for index, symbols in enumerate(words):
            for pair in pairwise(symbols):
                pair_counts[pair] += counts[index]
                where[pair].add(index)
        # Fila de prioridade com (-frequência, par): o topo é o mais frequente e, no
        # empate, o menor par. Entradas velhas (frequência mudou) são descartadas.
        heap = [(-count, pair) for pair, count in pair_counts.items()]
        heapq.heapify(heap)

        merges: list[tuple[str, str]] = []
        history: list[tuple[tuple[str, str], int]] = []
        merged: set[tuple[str, str]] = set()
        while len(merges) < num_merges and heap:
            negative, best = heapq.heappop(heap)
            if best in merged or pair_counts.get(best, 0) != -negative:
                continue  # entrada desatualizada
            frequency = -negative
            if frequency < min_frequency:
                break
            merges.append(best)
            history.append((best, frequency))
            merged.add(best)

            # 3. Aplica a fusão só nas palavras que contêm o par.
            touched: set[tuple[str, str]] = set()
            for index in where.pop(best):
                old = words[index]
                new = merge_pair(old, best)
                if len(new) == len(old):
                    continue  # o índice estava velho: o par já não está nesta palavra
                count = counts[index]
                for pair in pairwise(old):
                    if pair not in merged or pair == best:
                        pair_counts[pair] -= count
                        touched.add(pair)
                for pair in pairwise(new):
                    if pair not in merged:  # um par já fundido não volta a ser candidato
                        pair_counts[pair] += count
                        where[pair].add(index)
                        touched.add(pair)
                words[index] = new
            for pair in touched:
                if pair_counts[pair] <= 0:
                    del pair_counts[pair]
                else:
                    heapq.heappush(heap, (-pair_counts[pair], pair))

        tokenizer = cls(alphabet, merges, unknown=unknown, normalization=normalization)
        tokenizer.history = history
        return tokenizer

    def _encode_word(self, word: str) -> tuple[str, ...]:
        """Aplica as fusões, na ordem do treino, a uma palavra (com cache)."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        symbols = list(word)
        last_rank = -1
        while len(symbols) > 1:
            # A próxima fusão a aplicar: a de menor posição (rank) presente na palavra
            # e posterior à última aplicada. Pular as ausentes equivale a testar uma a uma.
            next_rank = None
            for pair in pairwise(symbols):
                rank = self.ranks.get(pair)
                if (
                    rank is not None
                    and rank > last_rank
                    and (next_rank is None or rank < next_rank)
                ):
                    next_rank = rank
            if next_rank is None:
                break
            symbols = merge_pair(symbols, self.merges[next_rank])
            last_rank = next_rank
        result = tuple(symbols)
        if len(self._cache) < self._CACHE_LIMIT:
            self._cache[word] = result
        return result

    def _split(self, text: str) -> list[str]:
        tokens: list[str] = []
        for word in pretokenize(text):
            tokens.extend(self._encode_word(word))
        return tokens

    def _extra_state(self) -> dict[str, Any]:
        return {"alphabet": list(self.alphabet), "merges": [list(pair) for pair in self.merges]}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> BPETokenizer:
        """Reconstrói o tokenizador salvo por :meth:`state_dict`."""
        cls._check_state(state, ["alphabet", "merges"])
        return cls(
            list(state["alphabet"]),
            [tuple(pair) for pair in state["merges"]],
            unknown=state["unknown"],
            normalization=state["normalization"],
        )
