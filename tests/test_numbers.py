"""Testes de tpt.data.numbers: escrita por extenso, vocabulário, divisões e lotes."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from num2words import CONVERTER_CLASSES, num2words

from tpt.data.numbers import (
    BOS_ID,
    DIGITS,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    WORDS,
    NumbersDataset,
    NumberVocab,
    collate_numbers,
    make_number_splits,
    number_batches,
    number_to_tokens,
    number_to_words,
)

# ---------------------------------------------------------------------------------------
# Escrita por extenso
# ---------------------------------------------------------------------------------------

EXAMPLES = {
    0: "zero",
    1: "um",
    14: "catorze",
    16: "dezesseis",
    21: "vinte e um",
    100: "cem",
    101: "cento e um",
    110: "cento e dez",
    200: "duzentos",
    342: "trezentos e quarenta e dois",
    1000: "mil",
    1001: "mil e um",
    1019: "mil e dezenove",
    1080: "mil e oitenta",
    1100: "mil e cem",
    1300: "mil e trezentos",
    1315: "mil trezentos e quinze",
    1234: "mil duzentos e trinta e quatro",
    2000: "dois mil",
    100000: "cem mil",
    100100: "cem mil e cem",
    101000: "cento e um mil",
    1000000: "um milhão",
    1000001: "um milhão e um",
    1000100: "um milhão e cem",
    1001000: "um milhão e mil",
    1200000: "um milhão e duzentos mil",
    1101000: "um milhão cento e um mil",
    2000000: "dois milhões",
    6069523: "seis milhões sessenta e nove mil quinhentos e vinte e três",
    1000000000: "um bilhão",
    2000000000: "dois bilhões",
    2300000000: "dois bilhões e trezentos milhões",
    999999999999: "novecentos e noventa e nove bilhões novecentos e noventa e nove milhões "
    "novecentos e noventa e nove mil novecentos e noventa e nove",
}


@pytest.mark.parametrize(("n", "words"), sorted(EXAMPLES.items()))
def test_examples(n, words):
    assert number_to_words(n) == words
    assert number_to_tokens(n) == words.split()


def test_accepts_integer_like_values():
    # operator.index: tensores inteiros 0-d também servem (mas não floats, ver abaixo).
    assert number_to_words(torch.tensor(1234)) == "mil duzentos e trinta e quatro"


@pytest.mark.parametrize(
    ("bad", "error", "pattern"),
    [
        (-1, ValueError, r"n=-1 .*0 <= n < 10\*\*12"),
        (10**12, ValueError, r"n=1000000000000 .*intervalo"),
        (True, TypeError, r"n=True .*bool"),
        (3.0, TypeError, r"n=3\.0 .*float.*inteiro"),
        ("12", TypeError, r"n='12' .*str"),
        (None, TypeError, r"n=None"),
    ],
)
def test_bad_input(bad, error, pattern):
    with pytest.raises(error, match=pattern):
        number_to_words(bad)


# --- Oráculo independente: num2words(lang="pt_BR") (dependência só dos testes) ----------


# num2words(n, lang="pt_BR") só busca este conversor e chama to_cardinal(n); chamá-lo
# direto corta ~40% do tempo do teste que percorre 0..100000.
_PT_BR = CONVERTER_CLASSES["pt_BR"]


def _n2w(n: int) -> str:
    # num2words põe vírgulas entre classes (não são tokens da tarefa) e escreve
    # "catorze" hoje, mas "quatorze" é igualmente correto: normalizamos os dois.
    return _PT_BR.to_cardinal(n).replace(",", "").replace("quatorze", "catorze")


def test_oracle_is_num2words():
    assert _n2w(1234) == num2words(1234, lang="pt_BR").replace(",", "")


def _classes(n: int) -> list[tuple[int, int]]:
    """Classes NÃO nulas de n como (valor, escala), da maior para a menor."""
    out, scale = [], 0
    while n:
        n, g = divmod(n, 1000)
        if g:
            out.append((g, scale))
        scale += 1
    return out[::-1]


def _num2words_disagrees_with_norm(n: int) -> bool:
    """Os DOIS casos em que num2words 0.5.x foge da norma (documentados).

    (A) Ele aplica a regra do "e" em TODA fronteira entre classes, não só antes da
        última: 1.001.001 sai "um milhão e mil e um" e 44.756.014.165 sai
        "... setecentos e cinquenta e seis milhões e catorze mil ...". A norma
        (Cegalla; Abreu, "Gramática Mínima"; o exemplo clássico "seis milhões sessenta
        e nove mil quinhentos e vinte e três") só põe "e" entre classes antes da ÚLTIMA,
        quando ela é menor que 100 ou centena redonda. Em parte desses casos uma
        expressão regular interna do num2words apaga o "e" e ele concorda conosco; por
        isso só exigimos que a classe intermediária exista, não que ele erre sempre.
    (B) Um defeito da mesma expressão regular: o lookahead `(?=.*e)` casa com a letra
        "e" DENTRO de "milhões", e 2.300.000.000 sai "dois bilhões, trezentos milhões"
        (sem o "e"), incoerente com o próprio "dois milhões e trezentos mil" dele.
        Acontece quando a última classe é uma centena redonda (>= 200) de milhões
        precedida de bilhões.
    """
    classes = _classes(n)
    case_a = any(g < 100 or g % 100 == 0 for g, _ in classes[1:-1])
    last_g, last_scale = classes[-1] if classes else (0, 0)
    case_b = len(classes) > 1 and last_scale == 2 and last_g % 100 == 0 and last_g >= 200
    return case_a or case_b


def _norm_from_num2words_pieces(n: int) -> str:
    """Oráculo para os casos (A)/(B): palavras de cada classe vindas do num2words,
    unidas pela regra da norma ("e" só antes da última classe < 100 ou centena redonda).
    """
    classes = _classes(n)
    pieces = [_n2w(g * 1000**scale) for g, scale in classes]
    last_g = classes[-1][0]
    if len(pieces) > 1 and (last_g < 100 or last_g % 100 == 0):
        pieces[-1] = "e " + pieces[-1]
    return " ".join(pieces)


def test_matches_num2words_every_number_up_to_100000():
    wrong = [n for n in range(100001) if number_to_words(n) != _n2w(n)]
    assert wrong == []


def test_matches_num2words_random_sample_up_to_10_12():
    rng = random.Random(2024)
    numbers = [rng.randrange(10**12) for _ in range(20000)]
    exceptions = 0
    for n in numbers:
        ours = number_to_words(n)
        if ours == _n2w(n):
            continue
        # Toda divergência tem de ser um dos dois casos documentados acima, e mesmo
        # nesses casos as palavras de cada classe vêm do num2words.
        assert _num2words_disagrees_with_norm(n), (n, ours, _n2w(n))
        assert ours == _norm_from_num2words_pieces(n), n
        exceptions += 1
    # Sanidade: a amostra exercita as exceções, mas a maioria concorda literalmente.
    assert 0 < exceptions < len(numbers) // 2


def test_documented_disagreements_follow_the_norm():
    assert number_to_words(1_001_001) == "um milhão mil e um"
    assert number_to_words(44_756_014_165) == (
        "quarenta e quatro bilhões setecentos e cinquenta e seis milhões catorze mil "
        "cento e sessenta e cinco"
    )
    assert number_to_words(2_300_000_000) == "dois bilhões e trezentos milhões"
    assert number_to_words(2_300_000) == "dois milhões e trezentos mil"


def test_target_length_is_short():
    # Cada classe tem no máximo 5 palavras ("setecentos e setenta e sete"); abaixo de
    # 10**6 há no máximo 2 classes + "mil" + um "e" entre classes.
    assert max(len(number_to_tokens(g)) for g in range(1000)) == 5
    lengths = [len(number_to_tokens(n)) for n in range(0, 10**6, 7)]
    assert max(lengths) <= 11
    assert len(number_to_tokens(777_777)) == 11
    assert len(number_to_tokens(777_777)) + 1 <= 20  # + <eos>
    assert len(number_to_tokens(777_777_777_777)) == 23


# ---------------------------------------------------------------------------------------
# Vocabulário
# ---------------------------------------------------------------------------------------


def test_vocab_layout():
    vocab = NumberVocab()
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert vocab.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert vocab.tokens[4:14] == list("0123456789")
    assert vocab.tokens[14:] == sorted(vocab.tokens[14:])
    assert vocab.vocab_size == len(vocab) == 4 + 10 + len(WORDS) == 58
    assert all(vocab.stoi[t] == i for i, t in enumerate(vocab.tokens))


def test_vocab_words_are_exactly_the_words_used():
    used = set()
    for n in list(range(2000)) + [10**6, 2 * 10**6, 10**9, 2 * 10**9]:
        used.update(number_to_tokens(n))
    assert used == set(WORDS)


def test_vocab_matches_tokenizer_constants_when_available():
    tokenizer = pytest.importorskip("tpt.tokenizer")
    assert (tokenizer.PAD_ID, tokenizer.BOS_ID, tokenizer.EOS_ID, tokenizer.UNK_ID) == (
        PAD_ID,
        BOS_ID,
        EOS_ID,
        UNK_ID,
    )
    assert tuple(NumberVocab().tokens[:4]) == tuple(tokenizer.SPECIAL_TOKENS)


def test_encode_and_decode():
    vocab = NumberVocab()
    src = vocab.encode_source(1234)
    assert [vocab.tokens[i] for i in src] == ["1", "2", "3", "4"]
    assert vocab.encode_source(0) == [vocab.stoi["0"]]
    tgt = vocab.encode_target(1234)
    assert [vocab.tokens[i] for i in tgt] == "mil duzentos e trinta e quatro".split()
    assert vocab.decode(src) == "1234"
    assert vocab.decode(tgt) == "mil duzentos e trinta e quatro"
    # Como sai de um gerador: <bos> ... <eos> e lixo depois; para no primeiro <eos>.
    generated = [BOS_ID, *tgt, EOS_ID, vocab.stoi["sete"], PAD_ID]
    assert vocab.decode(generated) == "mil duzentos e trinta e quatro"
    assert vocab.decode(torch.tensor(generated)) == "mil duzentos e trinta e quatro"
    assert vocab.decode([BOS_ID, EOS_ID], skip_special_tokens=False) == "<bos> <eos>"
    batch = collate_numbers(NumbersDataset([7, 1234], vocab))
    assert vocab.decode_batch(batch["tgt_out"]) == ["sete", "mil duzentos e trinta e quatro"]
    assert vocab.decode_batch(batch["src"]) == ["7", "1234"]
    with pytest.raises(ValueError, match=r"2-D \(b, t\); recebi a forma \(3,\)"):
        vocab.decode_batch(torch.tensor([1, 2, 3]))
    assert vocab.decode([UNK_ID, vocab.stoi["mil"]]) == "<unk> mil"


def test_roundtrip_many_numbers():
    vocab = NumberVocab()
    for n in [0, 7, 100, 1001, 123456, 999999, 10**9 + 7]:
        assert vocab.decode(vocab.encode_source(n)) == str(n)
        assert vocab.decode(vocab.encode_target(n)) == number_to_words(n)


@pytest.mark.parametrize(
    ("ids", "error", "pattern"),
    [
        ([5, 58], ValueError, r"id 58 fora do vocabulário.*< 58"),
        ([-1], ValueError, r"id -1 fora do vocabulário"),
        ([2.5], TypeError, r"id 2\.5 .*float.*não é um inteiro"),
        ([True], TypeError, r"id True"),
        (torch.zeros(2, 3, dtype=torch.long), ValueError, r"1-D.*\(2, 3\)"),
        (torch.zeros(3), TypeError, r"inteiros.*float32"),
    ],
)
def test_decode_bad_ids(ids, error, pattern):
    with pytest.raises(error, match=pattern):
        NumberVocab().decode(ids)


def test_encode_out_of_range():
    vocab = NumberVocab()
    with pytest.raises(ValueError, match=r"n=-5 .*fora do intervalo"):
        vocab.encode_source(-5)
    with pytest.raises(TypeError, match=r"n=1\.5"):
        vocab.encode_target(1.5)


def test_state_dict_roundtrip():
    vocab = NumberVocab()
    state = vocab.state_dict()
    assert state == {"type": "NumberVocab", "tokens": vocab.tokens}
    copy = NumberVocab.from_state_dict(state)
    assert copy.tokens == vocab.tokens
    assert copy.encode_target(987654) == vocab.encode_target(987654)
    state["tokens"].append("x")  # o dicionário devolvido é uma cópia
    assert "x" not in vocab.tokens


def test_state_dict_survives_torch_load_weights_only(tmp_path):
    path = tmp_path / "vocab.pt"
    torch.save({"vocab": NumberVocab().state_dict()}, path)
    loaded = torch.load(path, weights_only=True)["vocab"]
    assert NumberVocab.from_state_dict(loaded).tokens == NumberVocab().tokens


def test_bad_vocabularies():
    with pytest.raises(ValueError, match=r"primeiros tokens devem ser"):
        NumberVocab(["<bos>", "<pad>", "<eos>", "<unk>", "0"])
    with pytest.raises(ValueError, match=r"repetidos.*'mil'"):
        NumberVocab(["<pad>", "<bos>", "<eos>", "<unk>", "mil", "mil"])
    with pytest.raises(ValueError, match=r"chave 'tokens'"):
        NumberVocab.from_state_dict({"itos": []})
    with pytest.raises(ValueError, match=r"é de 'CharTokenizer'"):
        NumberVocab.from_state_dict({"type": "CharTokenizer", "tokens": []})
    small = NumberVocab(["<pad>", "<bos>", "<eos>", "<unk>", *DIGITS, "mil"])
    with pytest.raises(ValueError, match=r"número 1001 usa tokens fora.*\['e', 'um'\]"):
        small.encode_target(1001)


# ---------------------------------------------------------------------------------------
# Divisões
# ---------------------------------------------------------------------------------------


def _digit_share(numbers: list[int]) -> dict[int, float]:
    """Fração de cada número de algarismos em `numbers`."""
    counts = Counter(len(str(n)) for n in numbers)
    return {d: c / len(numbers) for d, c in counts.items()}


@pytest.mark.parametrize(
    ("max_value", "n_train", "n_val", "n_test", "seed"),
    [(10**6, 5000, 500, 500, 3), (10**6, 20000, 1000, 1000, 0), (10**9, 3000, 300, 700, 1)],
)
def test_splits_sizes_disjoint_and_deterministic(max_value, n_train, n_val, n_test, seed):
    splits = make_number_splits(max_value, n_train, n_val, n_test, seed=seed)
    assert {k: len(v) for k, v in splits.items()} == {
        "train": n_train,
        "val": n_val,
        "test": n_test,
    }
    train, val, test = (set(splits[k]) for k in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (n_train, n_val, n_test)  # sem repetidos
    assert not train & val and not train & test and not val & test
    assert all(0 <= n < max_value for s in splits.values() for n in s)
    assert make_number_splits(max_value, n_train, n_val, n_test, seed=seed) == splits
    other = make_number_splits(max_value, n_train, n_val, n_test, seed=seed + 1)
    assert other["test"] != splits["test"] and other["train"] != splits["train"]


def test_splits_known_values_do_not_change():
    # As mesmas divisões em qualquer máquina: as cotas são frações exatas e o sorteio é o
    # random.Random(seed). Se isto mudar, os resultados guardados dos notebooks mudam.
    splits = make_number_splits(10**6, 2000, 100, 100, seed=0)
    assert splits["test"][:5] == [7590, 314191, 588, 844485, 159758]
    assert splits["val"][:3] == [197, 331706, 25932]
    assert splits["train"][:5] == [950, 974442, 970469, 276329, 312638]
    assert sum(splits["test"]) == 30221198


def test_splits_small_numbers_go_to_training():
    splits = make_number_splits(10**6, 2000, 300, 300, seed=0)
    assert set(range(100)) <= set(splits["train"])
    assert min(splits["val"] + splits["test"]) >= 100
    none_kept = make_number_splits(10**4, 500, 100, 100, seed=0, always_train=0)
    assert min(none_kept["val"] + none_kept["test"]) < 100  # sem always_train, há curtos


@pytest.mark.parametrize(
    ("max_value", "n_train", "n_val", "n_test", "always_train"),
    [
        (10**6, 20000, 1000, 1000, 100),  # o padrão do curso
        (10**6, 10000, 1000, 1000, 100),  # o notebook 08
        (10**6, 100000, 1000, 1000, 100),  # faixa de 3 algarismos esgotada
        (10**5, 3000, 200, 500, 100),
        (10**4, 2000, 500, 500, 0),
    ],
)
def test_test_set_is_as_hard_as_training_by_digit_count(
    max_value, n_train, n_val, n_test, always_train
):
    # A estratificação: em cada faixa de algarismos, cada conjunto tem a sua parte
    # proporcional arredondada (menos de 2 números de diferença). Então a fração de
    # cada faixa no teste e na validação difere da do treino sorteado por menos de
    # 2/n_teste + 2/n_sorteados; contando os 0..always_train-1 (só no treino), por
    # mais always_train/n_train no máximo.
    splits = make_number_splits(
        max_value, n_train, n_val, n_test, seed=5, always_train=always_train
    )
    drawn = [n for n in splits["train"] if n >= always_train]
    train_all = _digit_share(splits["train"])
    train_drawn = _digit_share(drawn)
    for name, size in (("test", n_test), ("val", n_val)):
        share = _digit_share(splits[name])
        tolerance = 2 / size + 2 / len(drawn)
        for digits in set(share) | set(train_drawn):
            gap = abs(share.get(digits, 0) - train_drawn.get(digits, 0))
            assert gap < tolerance, (name, digits, share, train_drawn)
            gap_all = abs(share.get(digits, 0) - train_all.get(digits, 0))
            assert gap_all < tolerance + always_train / n_train, (name, digits)


def test_old_bias_is_gone():
    # Antes, o teste era sorteado primeiro e levava 11% de números de 3 algarismos,
    # enquanto o treino (20.000) ficava com 3%. Agora as duas frações coincidem (< 1 p.p.).
    splits = make_number_splits(10**6, 20000, 1000, 1000, seed=0)
    test, train = _digit_share(splits["test"]), _digit_share(splits["train"])
    assert abs(test[3] - train[3]) < 0.01
    assert test[3] < 0.06


def test_splits_cover_every_digit_length():
    # A metade "uniforme no número de algarismos" da mistura: sem ela, só 0,1% teria 3
    # algarismos. A faixa de 3 algarismos (900 números) é pequena para a sua cota e
    # entra INTEIRA, repartida entre os três conjuntos; as outras têm >= 5% cada.
    splits = make_number_splits(10**6, 20000, 1000, 1000, seed=0)
    union = splits["train"] + splits["val"] + splits["test"]
    assert set(range(100, 1000)) <= set(union)
    for name in ("train", "val", "test"):
        counts = Counter(len(str(n)) for n in splits[name])
        assert counts[3] >= 0.03 * len(splits[name]), (name, counts)
        for digits in (4, 5, 6):
            assert counts[digits] >= 0.05 * len(splits[name]), (name, counts)
    train_counts = Counter(len(str(n)) for n in splits["train"])
    assert train_counts[1] == 10 and train_counts[2] == 90


def test_intended_mixture_when_no_band_is_exhausted():
    # Com poucos números, nenhuma faixa se esgota e cada uma recebe exatamente a sua cota
    # da mistura 1/2 uniforme + 1/2 por número de algarismos (arredondada).
    splits = make_number_splits(10**6, 1100, 500, 400, seed=2)
    union = splits["train"] + splits["val"] + splits["test"]
    counts = Counter(len(str(n)) for n in union if n >= 100)  # 1.900 sorteados
    range_size = 10**6 - 100
    for digits, size in ((3, 900), (4, 9000), (5, 90000), (6, 900000)):
        expected = 1900 * (1 / 8 + size / (2 * range_size))
        assert abs(counts[digits] - expected) < 1, (digits, counts[digits], expected)


def test_splits_dense_case_uses_almost_everything():
    splits = make_number_splits(1000, 700, 100, 100, seed=0)
    everything = splits["train"] + splits["val"] + splits["test"]
    assert len(set(everything)) == 900 and max(everything) < 1000
    full = make_number_splits(1000, 800, 100, 100, seed=0)  # o intervalo inteiro
    assert sorted(full["train"] + full["val"] + full["test"]) == list(range(1000))


def test_splits_edge_sizes():
    only_train = make_number_splits(10**4, 500, 0, 0, seed=0)
    assert only_train["val"] == only_train["test"] == [] and len(set(only_train["train"])) == 500
    no_drawn_train = make_number_splits(10**4, 100, 50, 50, seed=0)
    assert sorted(no_drawn_train["train"]) == list(range(100))
    assert len(set(no_drawn_train["val"] + no_drawn_train["test"])) == 100


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        (dict(max_value=1000, n_train=900, n_val=100, n_test=100), ValueError, r"só tem 900"),
        (dict(n_train=50), ValueError, r"n_train=50 é menor que always_train=100"),
        (dict(max_value=10**13), ValueError, r"max_value=10000000000000"),
        (dict(max_value=50), ValueError, r"always_train=100 não pode passar de max_value=50"),
        (dict(n_val=-1), ValueError, r"n_val=-1 deve ser >= 0"),
        (dict(n_test=1.5), TypeError, r"n_test=1\.5 deve ser um inteiro"),
        (dict(seed=0, always_train=True), TypeError, r"always_train=True deve ser um inteiro"),
    ],
)
def test_splits_bad_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        make_number_splits(**kwargs)


# ---------------------------------------------------------------------------------------
# Dataset, collate e DataLoader
# ---------------------------------------------------------------------------------------


def test_dataset_items():
    vocab = NumberVocab()
    ds = NumbersDataset([5, 1234], vocab)
    assert len(ds) == 2
    src, tgt = ds[1]
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == vocab.encode_source(1234)
    assert tgt.tolist() == vocab.encode_target(1234)
    with pytest.raises(ValueError, match=r"número=-3"):
        NumbersDataset([1, -3])


def test_collate_teacher_forcing_and_masks():
    vocab = NumberVocab()
    numbers = [7, 1234, 100000]
    batch = collate_numbers(NumbersDataset(numbers, vocab))
    src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
    t = max(len(number_to_tokens(n)) for n in numbers) + 1
    assert src.shape == (3, 6) and tgt_in.shape == tgt_out.shape == (3, t)
    assert batch["src_key_padding_mask"].dtype == torch.bool
    assert torch.equal(batch["src_key_padding_mask"], src == PAD_ID)
    assert torch.equal(batch["tgt_key_padding_mask"], tgt_in == PAD_ID)
    assert torch.equal(batch["tgt_key_padding_mask"], tgt_out == PAD_ID)
    for row, n in enumerate(numbers):
        target = vocab.encode_target(n)
        k = len(target)
        # Entrada do decodificador = <bos> + alvo; rótulo = alvo + <eos> (errata 19).
        assert tgt_in[row, : k + 1].tolist() == [BOS_ID, *target]
        assert tgt_out[row, : k + 1].tolist() == [*target, EOS_ID]
        assert (tgt_in[row, k + 1 :] == PAD_ID).all() and (tgt_out[row, k + 1 :] == PAD_ID).all()
        # O rótulo da posição i é a entrada da posição i + 1 (o deslocamento).
        assert torch.equal(tgt_in[row, 1 : k + 1], tgt_out[row, :k])
        assert vocab.decode(src[row]) == str(n)
    with pytest.raises(ValueError, match=r"lote vazio"):
        collate_numbers([])


def test_number_batches_reproducible_and_complete():
    numbers = list(range(100, 137))

    def order(seed):
        loader = number_batches(
            numbers, 8, shuffle=True, generator=torch.Generator().manual_seed(seed)
        )
        vocab = NumberVocab()
        seen = []
        for batch in loader:
            assert batch["src"].shape[0] <= 8
            seen += [int(vocab.decode(row)) for row in batch["src"]]
        return seen

    first = order(0)
    assert sorted(first) == numbers  # cada número exatamente uma vez
    assert order(0) == first  # mesma semente, mesma ordem
    assert order(1) != first
    assert len(number_batches(numbers, 8, drop_last=True)) == 4
    with pytest.raises(ValueError, match=r"batch_size=0"):
        number_batches(numbers, 0)
