"""tpt.data.words: palavras do corpus e pseudopalavras."""

from __future__ import annotations

import pytest
import torch

from tpt.data import pseudoword, pseudowords, text_words, unseen_words, word_candidates


def test_text_words_are_lowercase_letters_only():
    assert text_words("Mãe, a mãe-d'água tem 3 gatos_pretos.") == {
        "mãe", "a", "d", "água", "tem", "gatos", "pretos"}


def test_candidates_skip_capitalized_short_and_unshuffleable_words():
    text = "Carlos caminhava devagar; o caminho era longo, muito longo. Passsso, Ana."
    assert word_candidates(text) == ["caminhava", "caminho", "devagar", "longo", "muito"]
    assert word_candidates("assss abcde", min_letters=5) == ["abcde"]
    assert word_candidates(text, min_letters=8) == ["caminhava"]


def test_unseen_words_never_appear_in_the_seen_text_in_any_case_nor_inside_a_word():
    seen = "O Caminho era longo, e as Estradas, compridas."
    new = "o caminho, a estrada e a trilha eram longas; longo demais"
    # "estrada" está dentro de "Estradas": conta como vista.
    assert unseen_words(seen, new) == ["demais", "longas", "trilha"]
    for word in unseen_words(seen, new):
        assert word not in seen.lower()


def test_pseudoword_keeps_the_ends_and_the_letters_and_changes_the_word():
    g = torch.Generator().manual_seed(0)
    for word in ["caminho", "estrada", "abcd", "passarinho", "ação"]:
        fake = pseudoword(word, g)
        assert fake != word and len(fake) == len(word)
        assert fake[0] == word[0] and fake[-1] == word[-1]
        assert sorted(fake) == sorted(word)


def test_pseudoword_avoids_real_words_and_is_reproducible():
    # "abcd" só tem um outro arranjo: "acbd".
    assert pseudoword("abcd", torch.Generator().manual_seed(3)) == "acbd"
    with pytest.raises(ValueError, match="nenhum embaralhamento de 'abcd'"):
        pseudoword("abcd", torch.Generator().manual_seed(3), avoid={"acbd"})
    words = ["caminho", "estrada", "passarinho"]
    first = pseudowords(words, torch.Generator().manual_seed(7), avoid=["cmianho"])
    assert first == pseudowords(words, torch.Generator().manual_seed(7), avoid=["cmianho"])
    assert "cmianho" not in first


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: pseudoword("casa"[:3], torch.Generator()), ValueError, "pelo menos 4 letras"),
        (lambda: pseudoword("assa", torch.Generator()), ValueError, "todas iguais"),
        (lambda: pseudoword("caminho", 0), TypeError, "torch.Generator"),
        (lambda: word_candidates("abc", min_letters=3), ValueError, "min_letters=3"),
        (lambda: word_candidates(["abc"]), TypeError, "str"),
        (lambda: text_words(None), TypeError, "str"),
    ],
)
def test_bad_inputs_raise_in_portuguese(call, error, match):
    with pytest.raises(error, match=match):
        call()
