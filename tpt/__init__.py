"""tpt — o pacote de apoio do curso "Transformers do zero".

Um módulo por conceito, na ordem dos notebooks:

=======================  ===============================================
módulo                   notebook
=======================  ===============================================
``tpt.device``           todos (``get_device``, ``seed_everything``)
``tpt.tokenizer``        01_tokens
``tpt.embedding``        02_embeddings
``tpt.attention``        03_atencao_produto_escalar, 04_atencao_multicabeca
``tpt.positional``       05_codificacao_posicional (RoPE e ALiBi: 10)
``tpt.masks``            06_mascaras
``tpt.norms``            07_blocos (LayerNorm; RMSNorm: 10)
``tpt.feedforward``      07_blocos (SwiGLU: 10)
``tpt.moe``              10_transformers_modernos (mistura de especialistas)
``tpt.layers``           07_blocos, 08_encoder_decoder
``tpt.model``            08_encoder_decoder, 09_geracao
``tpt.train``            08_encoder_decoder, 09_geracao
``tpt.generation``       09_geracao
``tpt.kv_cache``         09_geracao (``KVCache``, ``kv_cache_bytes``), 10_transformers_modernos
``tpt.data``             dados do curso (números por extenso, corpus; o texto de
                         pré-treino e os pares de instrução dos números: 12_ajuste_fino)
``tpt.plot``             figuras de todos os notebooks
``tpt.numfmt``           números em pt-BR (``fmt``) e ``compare`` (todos)
``tpt.hf``               11_do_tpt_ao_hugging_face (``to_hf``, ``from_hf``; só ele
                         importa o ``transformers`` e o ``peft``, e só quando chamado),
                         12_ajuste_fino (``to_peft``, ``from_peft``, o classificador)
``tpt.classifier``       12_ajuste_fino (``GPTClassifier``, ``last_token_index``)
``tpt.lora``             12_ajuste_fino (``LoRALinear``, ``add_lora``, ``merge_lora``)
``tpt.scoring``          12_ajuste_fino (``sequence_loss``, ``fit_threshold``,
                         ``balanced_accuracy``, ``linear_probe``,
                         ``bootstrap_interval``)
=======================  ===============================================

Convenções: tensores com o lote primeiro ``(b, t, d)``; máscaras booleanas com
``True`` = posição BLOQUEADA (a mesma de ``nn.MultiheadAttention``).
"""

from __future__ import annotations

from tpt import hf, plot, version
from tpt.attention import MultiHeadAttention, scaled_dot_product_attention
from tpt.classifier import GPTClassifier, last_token_index, pool_last_token, pool_mean
from tpt.data import (
    NumbersDataset,
    NumberVocab,
    collate_numbers,
    corpus_splits,
    corpus_stats,
    download_text,
    instruction_batch,
    instruction_pair,
    instruction_vocab,
    load_corpus,
    make_number_splits,
    number_batches,
    number_to_words,
    pretraining_batch,
    pretraining_sequence,
    write_numbers,
)
from tpt.device import get_device, seed_everything
from tpt.embedding import TokenEmbedding
from tpt.feedforward import FeedForward
from tpt.generation import beam_search, generate, generate_text, greedy_decode
from tpt.kv_cache import KVCache, kv_cache_bytes
from tpt.layers import DecoderLayer, EncoderLayer
from tpt.lora import LoRALinear, add_lora, lora_parameters, merge_lora, unmerge_lora
from tpt.masks import causal_mask, merge_masks, padding_mask, sliding_window_mask
from tpt.model import GPT, Decoder, Encoder, GPTConfig, Transformer, TransformerConfig
from tpt.moe import MoEFeedForward, load_balancing_loss
from tpt.norms import LayerNorm, RMSNorm
from tpt.numfmt import compare, fmt, fmt_bytes, fmt_count, fmt_tolerance
from tpt.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    pe_rotation,
    sinusoidal_encoding,
)
from tpt.scoring import (
    balanced_accuracy,
    bootstrap_interval,
    fit_threshold,
    linear_probe,
    sequence_loss,
)
from tpt.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
)
from tpt.train import (
    evaluate_loss,
    inverse_sqrt_schedule,
    lm_batches,
    lm_loss,
    load_checkpoint,
    lr_schedule,
    save_checkpoint,
    seq2seq_loss,
    train,
)
from tpt.version import __version__, check_version

__all__ = [
    "__version__",
    "check_version",
    "version",
    "plot",
    "hf",
    # números em pt-BR e conferências de igualdade
    "fmt",
    "fmt_bytes",
    "fmt_count",
    "fmt_tolerance",
    "compare",
    # dispositivo
    "get_device",
    "seed_everything",
    # tokens e embeddings
    "SPECIAL_TOKENS",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "CharTokenizer",
    "BPETokenizer",
    "TokenEmbedding",
    # atenção e máscaras
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "KVCache",
    "kv_cache_bytes",
    "causal_mask",
    "sliding_window_mask",
    "padding_mask",
    "merge_masks",
    # posições
    "sinusoidal_encoding",
    "pe_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "apply_rope",
    "alibi_slopes",
    "alibi_bias",
    # blocos e modelos
    "LayerNorm",
    "RMSNorm",
    "FeedForward",
    "MoEFeedForward",
    "load_balancing_loss",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "TransformerConfig",
    "Transformer",
    "GPTConfig",
    "GPT",
    # ajuste fino: classificação e LoRA
    "GPTClassifier",
    "last_token_index",
    "pool_last_token",
    "pool_mean",
    "LoRALinear",
    "add_lora",
    "merge_lora",
    "unmerge_lora",
    "lora_parameters",
    "sequence_loss",
    "fit_threshold",
    "balanced_accuracy",
    "linear_probe",
    "bootstrap_interval",
    # dados, treino e geração
    "number_to_words",
    "NumberVocab",
    "NumbersDataset",
    "make_number_splits",
    "collate_numbers",
    "number_batches",
    "load_corpus",
    "corpus_splits",
    "corpus_stats",
    "download_text",
    # os números como texto de um só-decoder: pré-treino e instruções (notebook 12)
    "pretraining_sequence",
    "pretraining_batch",
    "instruction_vocab",
    "instruction_pair",
    "instruction_batch",
    "write_numbers",
    "train",
    "evaluate_loss",
    "seq2seq_loss",
    "lm_loss",
    "lm_batches",
    "lr_schedule",
    "inverse_sqrt_schedule",
    "save_checkpoint",
    "load_checkpoint",
    "generate",
    "generate_text",
    "greedy_decode",
    "beam_search",
]
