"""Palavras do corpus e pseudopalavras: a tarefa "palavra real ou pseudopalavra".

Ver notebooks/12_ajuste_fino.ipynb (seção 3).

Uma **pseudopalavra** é uma palavra com as letras de dentro embaralhadas (a primeira e a
última ficam): "caminho" -> "cmianho". Ela tem as mesmas letras e o mesmo tamanho, mas
não a grafia do português. Quem leu muito português (um modelo de linguagem
pré-treinado) sabe separar as duas; quem só viu alguns rótulos, não.

Para medir isso com honestidade, as palavras de teste são as que **nunca** aparecem no
texto de pré-treino (``unseen_words``): o modelo não pode ter decorado nenhuma delas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch

__all__ = ["pseudoword", "pseudowords", "text_words", "unseen_words", "word_candidates"]

# Uma palavra: letras seguidas (com acentos), sem algarismos nem "_".
_WORD = re.compile(r"[^\W\d_]+")
_MAX_TRIES = 100


def text_words(text: str) -> set[str]:
    """Todas as palavras de ``text``, em minúsculas (``"Mãe, a mãe"`` -> ``{"mãe", "a"}``)."""
    if not isinstance(text, str):
        raise TypeError(f"text deve ser uma str; recebi {type(text).__name__}")
    return {w.lower() for w in _WORD.findall(text)}


def _check_min_letters(min_letters: object) -> None:
    if isinstance(min_letters, bool) or not isinstance(min_letters, int) or min_letters < 4:
        raise ValueError(
            f"min_letters={min_letters!r} deve ser um inteiro >= 4 (a pseudopalavra embaralha "
            "as letras de dentro, e precisa de pelo menos duas)"
        )


def word_candidates(text: str, min_letters: int = 5) -> list[str]:
    """As palavras de ``text`` que servem à tarefa, em ordem alfabética, sem repetição.

    Só as escritas em minúsculas no texto (nomes próprios e começos de frase ficam de
    fora), com pelo menos ``min_letters`` letras e com letras de dentro que não são todas
    iguais (senão não há como embaralhá-las).
    """
    _check_min_letters(min_letters)
    if not isinstance(text, str):
        raise TypeError(f"text deve ser uma str; recebi {type(text).__name__}")
    return sorted(
        {
            w
            for w in _WORD.findall(text)
            if w == w.lower() and len(w) >= min_letters and len(set(w[1:-1])) > 1
        }
    )


def unseen_words(seen_text: str, new_text: str, min_letters: int = 5) -> list[str]:
    """As palavras candidatas de ``new_text`` (``word_candidates``) que não aparecem nenhuma
    vez em ``seen_text``, em nenhuma grafia de maiúsculas e nem como pedaço de outra
    palavra: ``"acerto"`` conta como vista num texto com ``"acertou"``."""
    if not isinstance(seen_text, str):
        raise TypeError(f"seen_text deve ser uma str; recebi {type(seen_text).__name__}")
    seen = seen_text.lower()
    return [w for w in word_candidates(new_text, min_letters) if w not in seen]


def pseudoword(word: str, generator: torch.Generator, avoid: Iterable[str] = ()) -> str:
    """``word`` com as letras de dentro embaralhadas (a primeira e a última ficam).

    O resultado é sempre diferente de ``word`` e nunca está em ``avoid`` (por exemplo, as
    palavras reais do corpus: ``text_words``). O sorteio usa ``generator`` (um
    ``torch.Generator``): a mesma semente dá as mesmas pseudopalavras.
    """
    if not isinstance(word, str) or len(word) < 4:
        raise ValueError(f"word={word!r} deve ser uma palavra com pelo menos 4 letras")
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator deve ser um torch.Generator; recebi {type(generator).__name__}"
        )
    inner = word[1:-1]
    if len(set(inner)) < 2:
        raise ValueError(
            f"as letras de dentro de {word!r} são todas iguais: não há como embaralhar"
        )
    avoid = avoid if isinstance(avoid, (set, frozenset, dict)) else set(avoid)
    for _ in range(_MAX_TRIES):
        order = torch.randperm(len(inner), generator=generator).tolist()
        candidate = word[0] + "".join(inner[i] for i in order) + word[-1]
        if candidate != word and candidate not in avoid:
            return candidate
    raise ValueError(
        f"nenhum embaralhamento de {word!r} em {_MAX_TRIES} tentativas ficou fora de avoid"
    )


def pseudowords(
    words: Sequence[str], generator: torch.Generator, avoid: Iterable[str] = ()
) -> list[str]:
    """Uma pseudopalavra para cada palavra de ``words``, na mesma ordem (ver ``pseudoword``)."""
    avoid = avoid if isinstance(avoid, (set, frozenset, dict)) else set(avoid)
    return [pseudoword(w, generator, avoid) for w in words]
