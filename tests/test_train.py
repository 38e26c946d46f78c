"""Testes de tpt.train: losses, lotes, agenda da lr, laço de treino e checkpoints."""

from __future__ import annotations

import math
import pickle
import sys

import pytest
import torch
import torch.nn.functional as F

from tpt.data.numbers import NumberVocab, collate_numbers, number_batches
from tpt.model import GPT, GPTConfig, Transformer, TransformerConfig
from tpt.tokenizer import PAD_ID, CharTokenizer
from tpt.train import (
    CHECKPOINT_FORMAT,
    _progress_enabled,
    evaluate_loss,
    inverse_sqrt_schedule,
    lm_batches,
    lm_loss,
    load_checkpoint,
    lr_schedule,
    make_optimizer,
    save_checkpoint,
    seq2seq_loss,
    train,
)

TEXT = "o gato viu a lua. a lua viu o gato. " * 20


def tiny_gpt(vocab_size: int = 20, seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=vocab_size, max_len=32, embed_dim=32, num_heads=2, num_layers=2)
    config.update(overrides)
    return GPT(GPTConfig(**config))


def tiny_seq2seq(vocab_size: int, seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = dict(vocab_size=vocab_size, embed_dim=32, num_heads=2, max_len=32, dropout=0.0)
    config.update(overrides)
    return Transformer(TransformerConfig(**config))


def number_batch(numbers=(7, 1234, 100, 56)) -> dict[str, torch.Tensor]:
    vocab = NumberVocab()
    return collate_numbers(
        [(torch.tensor(vocab.encode_source(n)), torch.tensor(vocab.encode_target(n)))
         for n in numbers]
    )


# ---------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------


def test_seq2seq_loss_is_cross_entropy_over_non_pad_positions():
    batch = number_batch()
    model = tiny_seq2seq(NumberVocab().vocab_size).eval()
    loss = seq2seq_loss(model, batch)
    logits = model(batch["src"], batch["tgt_in"])  # (b, t, V)
    keep = batch["tgt_out"] != PAD_ID
    assert (~keep).any()  # o lote tem padding de verdade
    manual = -F.log_softmax(logits, dim=-1)[keep].gather(
        -1, batch["tgt_out"][keep][:, None]
    ).mean()
    torch.testing.assert_close(loss, manual, atol=1e-6, rtol=1e-6)  # float32, mesma soma
    smoothed = seq2seq_loss(model, batch, label_smoothing=0.1)
    assert smoothed.item() != pytest.approx(loss.item(), abs=1e-4)


def test_lm_loss_matches_manual_cross_entropy():
    model = tiny_gpt().eval()
    ids = torch.randint(0, 20, (3, 9))
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}
    logits = model(batch["input_ids"])
    manual = -F.log_softmax(logits, -1).gather(-1, batch["targets"][..., None]).mean()
    torch.testing.assert_close(lm_loss(model, batch), manual, atol=1e-6, rtol=1e-6)  # float32


def test_losses_reject_batches_without_the_keys():
    model = tiny_gpt()
    with pytest.raises(ValueError, match=r"faltam as chaves \['targets'\]"):
        lm_loss(model, {"input_ids": torch.zeros(1, 3, dtype=torch.long)})
    with pytest.raises(TypeError, match="dicionário"):
        lm_loss(model, torch.zeros(1, 3, dtype=torch.long))
    seq = tiny_seq2seq(NumberVocab().vocab_size)
    with pytest.raises(ValueError, match=r"label_smoothing=1.0 deve estar em \[0, 1\)"):
        seq2seq_loss(seq, number_batch(), label_smoothing=1.0)


# ---------------------------------------------------------------------------------------
# lm_batches
# ---------------------------------------------------------------------------------------


def test_lm_batches_are_shifted_windows_and_reproducible():
    ids = torch.arange(100, 200)
    batches = lm_batches(ids, 8, 4, generator=torch.Generator().manual_seed(1))
    batch = next(batches)
    x, y = batch["input_ids"], batch["targets"]
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])  # alvo = entrada deslocada de uma posição
    assert torch.equal(x - x[:, :1], torch.arange(8).expand(4, 8))  # janelas contíguas
    assert int(y.max()) <= 199  # nenhuma janela passa do fim
    again = next(lm_batches(ids, 8, 4, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(again["input_ids"], x)
    other = next(lm_batches(ids, 8, 4, generator=torch.Generator().manual_seed(2)))
    assert not torch.equal(other["input_ids"], x)
    assert len(list(lm_batches(ids, 8, 4, num_batches=5))) == 5


def test_lm_batches_cover_the_last_window():
    ids = torch.arange(10)  # block 9: só há um início possível, o 0
    batch = next(lm_batches(ids, 9, 3))
    assert torch.equal(batch["targets"], torch.arange(1, 10).expand(3, 9))


def test_lm_batches_bad_arguments():
    ids = torch.arange(10)
    with pytest.raises(ValueError, match="o texto tem 10 tokens, mas block_size=10"):
        lm_batches(ids, 10, 2)
    with pytest.raises(ValueError, match="batch_size=0 deve ser"):
        lm_batches(ids, 4, 0)
    with pytest.raises(ValueError, match=r"tensor 1-D .* \(2, 5\)"):
        lm_batches(ids.reshape(2, 5), 2, 2)
    with pytest.raises(TypeError, match="inteiros"):
        lm_batches(ids.float(), 2, 2)


# ---------------------------------------------------------------------------------------
# Agenda da taxa de aprendizado
# ---------------------------------------------------------------------------------------


def test_lr_schedule_warmup_then_cosine():
    kw = dict(warmup_steps=10, total_steps=110, base_lr=1e-3, min_lr=1e-4)
    assert lr_schedule(0, **kw) == pytest.approx(1e-4)  # 1/10 de base_lr: não começa em 0
    assert lr_schedule(4, **kw) == pytest.approx(5e-4)  # linear no aquecimento
    assert lr_schedule(9, **kw) == pytest.approx(1e-3)  # fim do aquecimento
    assert lr_schedule(10, **kw) == pytest.approx(1e-3)  # topo do cosseno
    assert lr_schedule(60, **kw) == pytest.approx(5.5e-4)  # metade: (base + min) / 2
    assert lr_schedule(110, **kw) == pytest.approx(1e-4)  # fim = min_lr
    assert lr_schedule(500, **kw) == pytest.approx(1e-4)  # depois do fim, fica em min_lr
    values = [lr_schedule(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # só desce
    assert lr_schedule(0, warmup_steps=0, total_steps=5, base_lr=0.1) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": -1}, "step=-1"),
        ({"warmup_steps": 20}, "warmup_steps=20 deve ser um inteiro entre 0 e total_steps=10"),
        ({"total_steps": 0}, "total_steps=0"),
        ({"base_lr": 0.0}, "base_lr=0.0 deve ser > 0"),
        ({"min_lr": 1.0}, "min_lr=1.0 deve estar entre 0 e base_lr=0.1"),
    ],
)
def test_lr_schedule_bad_arguments(kwargs, match):
    args = dict(step=0, warmup_steps=2, total_steps=10, base_lr=0.1)
    args.update(kwargs)
    step = args.pop("step")
    with pytest.raises(ValueError, match=match):
        lr_schedule(step, **args)


def test_inverse_sqrt_schedule_is_the_papers_formula():
    """Vaswani et al. (2017), seção 5.3: d^-0,5 * min(n^-0,5, n * w^-1,5), n a partir de 1."""
    kw = dict(d_model=512, warmup_steps=4000)
    for step in (0, 1, 99, 3998, 3999, 4000, 10_000, 100_000):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert inverse_sqrt_schedule(step, **kw) == pytest.approx(expected)
    peak = inverse_sqrt_schedule(3999, **kw)  # n = 4000: fim do aquecimento
    assert peak == pytest.approx((512 * 4000) ** -0.5)  # ~7e-4, o pico do artigo
    assert inverse_sqrt_schedule(1999, **kw) == pytest.approx(peak / 2)  # linear antes
    assert inverse_sqrt_schedule(15_999, **kw) == pytest.approx(peak / 2)  # 1/raiz depois
    values = [inverse_sqrt_schedule(s, **kw) for s in range(8000)]
    assert max(values) == pytest.approx(peak)
    assert inverse_sqrt_schedule(0, scale=2.0, **kw) == pytest.approx(
        2 * inverse_sqrt_schedule(0, **kw))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": -1}, "step=-1"),
        ({"d_model": 0}, "d_model=0"),
        ({"warmup_steps": 0}, "warmup_steps=0"),
        ({"scale": 0.0}, "scale=0.0 deve ser > 0"),
    ],
)
def test_inverse_sqrt_schedule_bad_arguments(kwargs, match):
    args = dict(step=0, d_model=64, warmup_steps=10)
    args.update(kwargs)
    step = args.pop("step")
    with pytest.raises(ValueError, match=match):
        inverse_sqrt_schedule(step, **args)


def test_train_with_lr_fn_uses_it_at_every_step():
    model = tiny_gpt()
    ids = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(0))

    def schedule(step):
        return inverse_sqrt_schedule(step, d_model=32, warmup_steps=4)

    history = train(model, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_steps=12, lr_fn=schedule,
                    progress=False)
    seen = history["lr"]
    assert seen == pytest.approx([schedule(s) for s in range(12)])
    # A mesma agenda com o LambdaLR do PyTorch (fator sobre lr=1) dá as mesmas taxas.
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    torch_lrs = []
    for _ in range(12):
        torch_lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx(torch_lrs)
    with pytest.raises(TypeError, match="lr_fn deve ser uma função"):
        train(model, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_steps=1, lr_fn=0.1,
              progress=False)
    with pytest.raises(ValueError, match=r"lr_fn\(0\) devolveu 0.0"):
        train(model, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_steps=1, lr_fn=lambda s: 0.0,
              progress=False)


# ---------------------------------------------------------------------------------------
# Otimizador
# ---------------------------------------------------------------------------------------


def test_weight_decay_only_on_matrices():
    model = tiny_gpt()
    decay, no_decay = make_optimizer(model, weight_decay=0.1).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decay_ids = {id(p) for p in decay["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.dim() == 2 for p in decay["params"])
    assert id(model.layers[0].self_attn.qkv_proj.weight) in decay_ids
    assert id(model.layers[0].ffn.linear1.weight) in decay_ids
    # embeddings (e o lm_head amarrado a elas), normas e vieses: sem decay
    assert id(model.embedding.embedding.weight) not in decay_ids
    assert id(model.lm_head.weight) not in decay_ids
    assert not any("norm" in names[i] or names[i].endswith("bias") for i in decay_ids)
    assert not any("positional" in names[i] for i in decay_ids)
    n_params = len(decay["params"]) + len(no_decay["params"])
    assert n_params == len(list(model.parameters()))  # cada parâmetro num grupo só


# ---------------------------------------------------------------------------------------
# Laço de treino
# ---------------------------------------------------------------------------------------


def test_tiny_gpt_overfits_tiny_text():
    # Depois do espaço vem "p" ou "a": só olhando DOIS caracteres para trás (atenção) o
    # modelo acerta tudo. Piso da loss: a 1ª posição de cada janela, ~0.01 nat.
    text = "ação! pé? " * 40
    tokenizer = CharTokenizer.fit(text)
    ids = torch.tensor(tokenizer.encode(text))
    model = tiny_gpt(tokenizer.vocab_size)
    batches = lm_batches(ids, 16, 8, generator=torch.Generator().manual_seed(0))
    history = train(
        model, batches, loss_fn=lm_loss, max_steps=60, lr=1e-2, warmup_steps=10,
        progress=False,
    )
    assert history["step"] == list(range(1, 61))
    first, last = history["train_loss"][0], sum(history["train_loss"][-10:]) / 10
    assert first > math.log(tokenizer.vocab_size) - 0.5  # começa sem saber nada
    assert last < 0.2  # o texto repetido é decorado
    assert not model.training  # train deixa o modelo em modo eval no fim


def test_seq2seq_training_reduces_loss():
    numbers = list(range(0, 2000, 37))
    loader = number_batches(numbers, 16, shuffle=True, generator=torch.Generator().manual_seed(0))
    model = tiny_seq2seq(NumberVocab().vocab_size)
    before = evaluate_loss(model, loader, seq2seq_loss)
    history = train(model, loader, loss_fn=seq2seq_loss, max_steps=60, lr=2e-3,
                    warmup_steps=5, progress=False)
    after = evaluate_loss(model, loader, seq2seq_loss)
    assert len(history["train_loss"]) == 60  # 4 lotes por época: o DataLoader é reiniciado
    assert after < 0.6 * before


def test_history_has_the_documented_keys_and_eval_steps():
    model = tiny_gpt()
    ids = torch.randint(0, 20, (200,))
    calls = []

    def eval_fn(m):
        calls.append(m.training)
        val = evaluate_loss(m, lm_batches(ids, 8, 4, num_batches=2), lm_loss)
        return {"val_loss": val, "ppl": math.exp(val)}

    history = train(
        model, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_steps=25, eval_fn=eval_fn,
        eval_every=10, warmup_steps=5, progress=False,
    )
    assert set(history) == {"step", "train_loss", "lr", "elapsed", "eval_step", "val_loss", "ppl"}
    assert history["eval_step"] == [10, 20, 25]  # a cada 10 passos e no último
    assert len(history["val_loss"]) == len(history["ppl"]) == 3
    assert calls == [False, False, False]  # eval_fn roda em modo eval
    assert len(history["lr"]) == len(history["elapsed"]) == 25
    assert history["elapsed"] == sorted(history["elapsed"])
    expected = [lr_schedule(s, warmup_steps=5, total_steps=25, base_lr=3e-4) for s in range(25)]
    assert history["lr"] == pytest.approx(expected)


def test_max_seconds_stops_training():
    model = tiny_gpt()
    ids = torch.randint(0, 20, (200,))
    history = train(model, lm_batches(ids, 8, 4), loss_fn=lm_loss, max_seconds=0.5,
                    progress=False)
    steps = len(history["step"])
    assert steps >= 1
    assert history["elapsed"][-1] >= 0.5  # parou por causa do tempo...
    assert history["elapsed"][-2] < 0.5 if steps > 1 else True  # ...no primeiro passo após 0.5 s


def test_batches_as_list_iterator_or_callable():
    model = tiny_gpt()
    ids = torch.randint(0, 20, (100,))
    fixed = list(lm_batches(ids, 8, 2, num_batches=3))
    assert len(train(model, fixed, loss_fn=lm_loss, progress=False)["step"]) == 3  # 1 época
    assert len(train(model, fixed, loss_fn=lm_loss, max_steps=7, progress=False)["step"]) == 7
    assert len(train(model, iter(fixed), loss_fn=lm_loss, max_steps=7, progress=False)["step"]) == 3
    epochs = []

    def new_epoch():
        epochs.append(1)
        return iter(fixed)

    assert len(train(model, new_epoch, loss_fn=lm_loss, max_steps=7, progress=False)["step"]) == 7
    assert len(epochs) == 3


def test_training_is_seeded():
    ids = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(0))

    def run():
        model = tiny_gpt(dropout=0.1)
        batches = lm_batches(ids, 8, 4, generator=torch.Generator().manual_seed(0))
        return train(model, batches, loss_fn=lm_loss, max_steps=5, progress=False, seed=3)

    assert run()["train_loss"] == run()["train_loss"]  # mesmo processo: idêntico


def test_progress_bar_switches(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("TPT_PROGRESS", raising=False)
    assert _progress_enabled(True) and not _progress_enabled(False)
    monkeypatch.setenv("CI", "true")
    assert not _progress_enabled(True)
    monkeypatch.setenv("TPT_PROGRESS", "1")  # força a barra mesmo em CI
    assert _progress_enabled(True)
    monkeypatch.delenv("CI")
    monkeypatch.setenv("TPT_PROGRESS", "0")
    assert not _progress_enabled(True)


def test_train_bad_arguments():
    model = tiny_gpt()
    batches = [{"input_ids": torch.zeros(1, 4, dtype=torch.long),
                "targets": torch.zeros(1, 4, dtype=torch.long)}]
    with pytest.raises(ValueError, match="max_steps=0 deve ser None"):
        train(model, batches, loss_fn=lm_loss, max_steps=0)
    with pytest.raises(ValueError, match="max_seconds=-1 deve ser None"):
        train(model, batches, loss_fn=lm_loss, max_seconds=-1)
    with pytest.raises(ValueError, match="lr=0 deve ser > 0"):
        train(model, batches, loss_fn=lm_loss, lr=0)
    with pytest.raises(ValueError, match="eval_every=0"):
        train(model, batches, loss_fn=lm_loss, eval_every=0)
    with pytest.raises(ValueError, match="batches não produziu nenhum lote"):
        train(model, [], loss_fn=lm_loss, max_steps=3, progress=False)
    with pytest.raises(TypeError, match="eval_fn deve devolver um dicionário"):
        train(model, batches, loss_fn=lm_loss, eval_fn=lambda m: 1.0, progress=False)
    with pytest.raises(FloatingPointError, match="a loss virou nan no passo 0"):
        train(model, batches, loss_fn=lambda m, b: torch.tensor(float("nan")), progress=False)


def test_evaluate_loss_restores_mode_and_averages():
    model = tiny_gpt().train()
    ids = torch.randint(0, 20, (100,))
    fixed = list(lm_batches(ids, 8, 2, num_batches=4))
    value = evaluate_loss(model, fixed, lm_loss)
    model.eval()
    with torch.no_grad():
        expected = sum(lm_loss(model, b).item() for b in fixed) / 4
    assert value == pytest.approx(expected, rel=1e-6)
    model.train()
    assert evaluate_loss(model, fixed, lm_loss, max_batches=1) == pytest.approx(
        evaluate_loss(model, fixed[:1], lm_loss)
    )
    assert model.training
    with pytest.raises(ValueError, match="nenhum lote"):
        evaluate_loss(model, [], lm_loss)


# ---------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------


def test_gpt_checkpoint_round_trip(tmp_path):
    tokenizer = CharTokenizer.fit(TEXT)
    model = tiny_gpt(tokenizer.vocab_size, positional="rope", num_kv_heads=1).eval()
    path = save_checkpoint(tmp_path / "sub" / "gpt.pt", model, tokenizer=tokenizer,
                           extra={"step": 10, "history": {"loss": [2.5, 1.0]}})
    raw = torch.load(path, weights_only=True)  # só dados: carrega com weights_only
    assert raw["format"] == CHECKPOINT_FORMAT and raw["model_class"] == "GPT"
    assert raw["config"]["positional"] == "rope" and raw["tokenizer"]["kind"] == "CharTokenizer"

    loaded, tok, extra = load_checkpoint(path)
    assert isinstance(loaded, GPT) and not loaded.training
    assert loaded.config == model.config
    ids = torch.tensor([tokenizer.encode("a lua viu")])
    torch.testing.assert_close(loaded(ids), model(ids), atol=0, rtol=0)  # pesos idênticos
    assert loaded.lm_head.weight is loaded.embedding.embedding.weight  # amarração mantida
    assert tok.encode("gato") == tokenizer.encode("gato") and tok.vocab == tokenizer.vocab
    assert extra == {"step": 10, "history": {"loss": [2.5, 1.0]}}

    other = tiny_gpt(tokenizer.vocab_size, seed=1, positional="rope", num_kv_heads=1)
    same, _, _ = load_checkpoint(path, other)  # carrega dentro de um modelo existente
    assert same is other
    torch.testing.assert_close(other(ids), model(ids), atol=0, rtol=0)


def test_seq2seq_checkpoint_round_trip_with_number_vocab(tmp_path):
    vocab = NumberVocab()
    model = tiny_seq2seq(vocab.vocab_size).eval()
    path = save_checkpoint(tmp_path / "numeros.pt", model, tokenizer=vocab)
    loaded, tok, extra = load_checkpoint(path)
    assert isinstance(loaded, Transformer) and isinstance(tok, NumberVocab) and extra == {}
    batch = number_batch()
    torch.testing.assert_close(
        loaded(batch["src"], batch["tgt_in"]), model(batch["src"], batch["tgt_in"]),
        atol=0, rtol=0,  # mesmos pesos, mesmas contas
    )
    assert tok.tokens == vocab.tokens


def test_load_checkpoint_mismatched_config_names_the_fields(tmp_path):
    path = save_checkpoint(tmp_path / "gpt.pt", tiny_gpt(embed_dim=32))
    with pytest.raises(ValueError, match="embed_dim: checkpoint=32, modelo=16") as info:
        load_checkpoint(path, tiny_gpt(embed_dim=16, num_layers=3))
    assert "num_layers: checkpoint=2, modelo=3" in str(info.value)
    with pytest.raises(ValueError, match="é de um GPT, mas o modelo dado é um Transformer"):
        load_checkpoint(path, tiny_seq2seq(20))


def test_load_checkpoint_rejects_files_that_are_not_checkpoints(tmp_path):
    junk = tmp_path / "lixo.pt"
    junk.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="não é um checkpoint do tpt"):
        load_checkpoint(junk)
    plain = tmp_path / "pesos.pt"
    torch.save(tiny_gpt().state_dict(), plain)  # só o state_dict, sem config
    with pytest.raises(ValueError, match="não é um checkpoint do tpt: esperava format="):
        load_checkpoint(plain)
    unsafe = tmp_path / "pickle.pt"
    with open(unsafe, "wb") as f:
        pickle.dump({"format": CHECKPOINT_FORMAT, "obj": complex(1, 2)}, f, protocol=2)
    with pytest.raises(ValueError, match="weights_only=True"):  # pickle arbitrário: recusado
        load_checkpoint(unsafe)
    with pytest.raises(FileNotFoundError, match="checkpoint não encontrado"):
        load_checkpoint(tmp_path / "nao_existe.pt")


def test_save_checkpoint_rejects_unsafe_extra(tmp_path):
    with pytest.raises(TypeError, match=r"extra\['fn'\] tem um valor do tipo function"):
        save_checkpoint(tmp_path / "x.pt", tiny_gpt(), extra={"fn": lambda: 0})
    with pytest.raises(TypeError, match="sabe salvar"):
        save_checkpoint(tmp_path / "x.pt", torch.nn.Linear(2, 2))


def test_make_optimizer_uses_fused_adamw_with_the_same_numbers():
    """O AdamW fundido (quando o torch o tem) dá os mesmos passos que o padrão."""
    from tpt.train import make_optimizer

    torch.manual_seed(0)
    a = torch.nn.Linear(6, 4)
    b = torch.nn.Linear(6, 4)
    b.load_state_dict(a.state_dict())
    fused = make_optimizer(a, lr=1e-2)
    plain = torch.optim.AdamW(
        [{"params": [b.weight], "weight_decay": 0.01}, {"params": [b.bias], "weight_decay": 0.0}],
        lr=1e-2,
    )
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4):
        assert fused.defaults["fused"] is True  # o AdamW fundido existe na CPU desde o 2.4
    x = torch.randn(5, 6)
    for _ in range(3):
        for model, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
    torch.testing.assert_close(a.weight, b.weight, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a.bias, b.bias, atol=1e-6, rtol=1e-5)


def test_losses_read_in_blocks_off_cpu_match_the_per_step_reading(monkeypatch):
    """Na GPU as losses são lidas em blocos (sem esperar a GPU a cada passo): mesmo histórico."""
    train_module = sys.modules["tpt.train"]  # `tpt.train` é também o nome da função

    ids = torch.randint(0, 20, (300,), generator=torch.Generator().manual_seed(0))

    def run(loss_fn=lm_loss):
        torch.manual_seed(0)
        model = tiny_gpt()
        batches = list(lm_batches(ids, 8, 2, num_batches=12,
                                  generator=torch.Generator().manual_seed(1)))
        return train(model, batches, loss_fn=loss_fn, max_steps=12, progress=False, seed=0,
                     eval_fn=lambda m: {"val": evaluate_loss(m, batches[:2], lm_loss)},
                     eval_every=5)

    per_step = run()
    monkeypatch.setattr(train_module, "host_reads_are_free", lambda device: False)
    monkeypatch.setattr(train_module, "_LOSS_READ_EVERY", 4)
    in_blocks = run()
    for key in ("step", "train_loss", "lr", "eval_step", "val"):
        assert in_blocks[key] == per_step[key], key

    calls = []

    def nan_from_step_6(model, batch):
        calls.append(1)
        loss = lm_loss(model, batch)
        return loss * float("nan") if len(calls) > 6 else loss

    with pytest.raises(FloatingPointError, match="a loss virou nan no passo 6"):
        run(nan_from_step_6)
