"""Conferências dos exercícios do notebook 03_atencao_produto_escalar (tpt.exercises.attention)."""

from __future__ import annotations

import math

import torch

from tpt.exercises import attention as ex

# --------------------------------------------------------------------------------------
# Soluções de referência (as mesmas do notebook) e respostas erradas típicas
# --------------------------------------------------------------------------------------


def attention_weights(query, key):
    d_k = query.shape[-1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., t, s)
    return torch.softmax(scores, dim=-1)


def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # (..., t)


def attention_memory_bytes(batch_size, num_heads, t, s, bytes_per_element=4):
    return batch_size * num_heads * t * s * bytes_per_element


def stub(*args):
    raise NotImplementedError("Escreva sua solução aqui")


def _run(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Exercício 1
# --------------------------------------------------------------------------------------


def test_weights_reference_passes(capsys):
    result, out = _run(ex.check_attention_weights, attention_weights, capsys)
    assert result is True
    assert "✅ Exercício 1" in out


def test_weights_stub_is_pending(capsys):
    result, out = _run(ex.check_attention_weights, stub, capsys)
    assert result is False
    assert "⏳" in out and "ainda não resolvido" in out


def test_weights_without_scale_fails(capsys):
    def no_scale(query, key):
        return torch.softmax(query @ key.transpose(-2, -1), dim=-1)

    result, out = _run(ex.check_attention_weights, no_scale, capsys)
    assert result is False
    assert "❌" in out and "faltou dividir" in out and "sqrt(d_k)" in out


def test_weights_divided_by_d_k_fails(capsys):
    def by_d_k(query, key):
        return torch.softmax(query @ key.transpose(-2, -1) / query.shape[-1], dim=-1)

    result, out = _run(ex.check_attention_weights, by_d_k, capsys)
    assert result is False
    assert "você dividiu por d_k" in out


def test_weights_softmax_over_queries_fails(capsys):
    def wrong_dim(query, key):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
        return torch.softmax(scores, dim=-2)

    result, out = _run(ex.check_attention_weights, wrong_dim, capsys)
    assert result is False
    assert "COLUNAS que somam 1" in out and "dim=-1" in out


def test_weights_q_transpose_k_fails(capsys):
    def q_t_k(query, key):
        scores = query.transpose(-2, -1) @ key / math.sqrt(query.shape[-1])  # (d_k, d_k)
        return torch.softmax(scores, dim=-1)

    result, out = _run(ex.check_attention_weights, q_t_k, capsys)
    assert result is False
    assert "Q^T K" in out and "(4, 4)" in out  # a forma esperada do primeiro caso


def test_weights_transposed_result_fails(capsys):
    def k_q_t(query, key):
        scores = key @ query.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (s, t)
        return torch.softmax(scores, dim=-1)

    result, out = _run(ex.check_attention_weights, k_q_t, capsys)
    assert result is False
    assert "K Q^T" in out and "transpostas" in out


def test_weights_crash_is_explained(capsys):
    def crashes(query, key):
        return query @ key  # formas incompatíveis

    result, out = _run(ex.check_attention_weights, crashes, capsys)
    assert result is False
    assert "levantou RuntimeError" in out


# --------------------------------------------------------------------------------------
# Exercício 2
# --------------------------------------------------------------------------------------


def test_entropy_reference_passes(capsys):
    result, out = _run(ex.check_attention_entropy, attention_entropy, capsys)
    assert result is True
    assert "✅ Exercício 2" in out


def test_entropy_stub_is_pending(capsys):
    result, out = _run(ex.check_attention_entropy, stub, capsys)
    assert result is False
    assert "⏳" in out


def test_entropy_nan_on_zeros_fails(capsys):
    def naive(weights):
        return -(weights * torch.log(weights)).sum(dim=-1)  # 0 * log 0 = NaN

    result, out = _run(ex.check_attention_entropy, naive, capsys)
    assert result is False
    assert "NaN" in out and "0 ln 0 = 0" in out
    assert "uma linha com zeros" in out  # diz qual entrada falhou


def test_entropy_missing_sign_fails(capsys):
    def positive_sum(weights):
        return torch.special.xlogy(weights, weights).sum(dim=-1)

    result, out = _run(ex.check_attention_entropy, positive_sum, capsys)
    assert result is False
    assert "sinal de menos" in out


def test_entropy_in_bits_fails(capsys):
    def bits(weights):
        return -(torch.special.xlogy(weights, weights) / math.log(2)).sum(dim=-1)

    result, out = _run(ex.check_attention_entropy, bits, capsys)
    assert result is False
    assert "bits" in out


def test_entropy_not_summed_fails(capsys):
    def per_weight(weights):
        return -torch.special.xlogy(weights, weights)

    result, out = _run(ex.check_attention_entropy, per_weight, capsys)
    assert result is False
    assert "dim=-1" in out


def test_entropy_mean_fails(capsys):
    def mean_only(weights):
        return -torch.special.xlogy(weights, weights).sum(dim=-1).mean()

    result, out = _run(ex.check_attention_entropy, mean_only, capsys)
    assert result is False
    assert "uma entropia por consulta" in out


def test_entropy_reference_values():
    # Linha uniforme sobre s chaves: entropia ln(s); linha one-hot: 0.
    uniform = torch.full((1, 4), 0.25)
    one_hot = torch.tensor([[1.0, 0.0, 0.0]])
    torch.testing.assert_close(attention_entropy(uniform), torch.tensor([math.log(4)]),
                               atol=1e-6, rtol=0)  # float32: 1e-6
    assert attention_entropy(one_hot).item() == 0.0


# --------------------------------------------------------------------------------------
# Exercício 3
# --------------------------------------------------------------------------------------


def test_memory_reference_passes(capsys):
    result, out = _run(ex.check_attention_memory, attention_memory_bytes, capsys)
    assert result is True
    assert "✅ Exercício 3" in out


def test_memory_matches_real_tensor():
    # A fórmula é exata: confere com um tensor de pesos de verdade.
    weights = torch.empty(2, 4, 100, 300)
    assert attention_memory_bytes(2, 4, 100, 300, 4) == weights.nelement() * weights.element_size()


def test_memory_stub_is_pending(capsys):
    result, out = _run(ex.check_attention_memory, stub, capsys)
    assert result is False
    assert "⏳" in out


def test_memory_without_heads_fails(capsys):
    def no_heads(batch_size, num_heads, t, s, bytes_per_element=4):
        return batch_size * t * s * bytes_per_element

    result, out = _run(ex.check_attention_memory, no_heads, capsys)
    assert result is False
    assert "num_heads" in out and "não cresce" in out


def test_memory_elements_not_bytes_fails(capsys):
    def elements(batch_size, num_heads, t, s, bytes_per_element=4):
        return batch_size * num_heads * t * s

    result, out = _run(ex.check_attention_memory, elements, capsys)
    assert result is False
    assert "ELEMENTOS" in out


def test_memory_t_squared_fails_when_t_differs_from_s(capsys):
    def t_squared(batch_size, num_heads, t, s, bytes_per_element=4):
        return batch_size * num_heads * t * t * bytes_per_element

    result, out = _run(ex.check_attention_memory, t_squared, capsys)
    assert result is False
    assert "t=100, s=300" in out and "CHAVE" in out


def test_memory_float_answer_is_accepted_when_integral(capsys):
    def as_float(batch_size, num_heads, t, s, bytes_per_element=4):
        return float(batch_size * num_heads * t * s * bytes_per_element)

    result, _ = _run(ex.check_attention_memory, as_float, capsys)
    assert result is True
