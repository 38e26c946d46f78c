"""Classificação com um GPT: a cabeça no estado oculto do último token que não é ``<pad>``.

Ver notebooks/12_ajuste_fino.ipynb.

Um modelo só-decoder lê da esquerda para a direita: com a atenção causal, o estado
oculto da posição ``i`` só viu os tokens ``0..i``. O único vetor que viu a sequência
inteira é o do **último** token real; é nele que a cabeça de classificação lê, como o
``LlamaForSequenceClassification`` e o ``GPT2ForSequenceClassification`` do
``transformers`` (a regra do ``pad_token_id``).

- Preenchimento à direita (``texto <pad> <pad>``): o último token real fica no meio da
  linha, e a máscara causal já o impede de ver os ``<pad>`` que vêm depois.
- Preenchimento à esquerda (``<pad> <pad> texto``): o último token real é sempre o da
  posição ``t - 1``, mas os ``<pad>`` ficam **antes** dele, à vista da atenção; passe
  ``key_padding_mask=(ids == pad_id)`` para escondê-los. As posições continuam contando
  a partir da primeira coluna, então o mesmo texto cai em posições diferentes conforme o
  tamanho do preenchimento.

Num modelo de **caracteres**, o último token é uma letra ou um espaço: o estado oculto
dele serve para prever o próximo caractere e guarda sobretudo as últimas letras. Para
uma propriedade do texto inteiro (o gênero de um parágrafo), a média dos estados
ocultos dos tokens reais (``pool_mean``, ``GPTClassifier(..., pooling="mean")``) lê
todas as posições; o ``transformers`` não tem essa opção no
``LlamaForSequenceClassification``, então só a regra do último token se converte.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tpt.model import GPT
from tpt.tokenizer import PAD_ID

__all__ = ["GPTClassifier", "last_token_index", "pool_last_token", "pool_mean", "POOLINGS"]

#: As regras de leitura do ``GPTClassifier``: o último token real ou a média dos reais.
POOLINGS = ("last", "mean")


def _check_pad_id(pad_id: object) -> int:
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or pad_id < 0:
        raise ValueError(f"pad_id={pad_id!r} deve ser um inteiro >= 0 (o id de <pad>)")
    return pad_id


def last_token_index(ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """Posição ``(b,)`` do último token que não é ``pad_id`` em cada linha de ``ids (b, t)``.

    A mesma regra do ``transformers`` com ``pad_token_id``: a maior posição ``j`` com
    ``ids[i, j] != pad_id``. À direita, é a do último token do texto; à esquerda,
    ``t - 1``. Uma linha só de ``<pad>`` não tem token para ler: ``ValueError``.
    """
    _check_pad_id(pad_id)
    if not isinstance(ids, Tensor):
        raise TypeError(f"ids deve ser um torch.Tensor de ids; recebi {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"ids deve conter ids inteiros (torch.long); recebi dtype {ids.dtype}")
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(f"ids deve ter forma (b, t) com t >= 1; recebi forma {tuple(ids.shape)}")
    real = ids != pad_id  # (b, t): True nos tokens do texto
    empty = ~real.any(dim=1)  # (b,)
    if bool(empty.any()):
        rows = empty.nonzero().flatten().tolist()
        raise ValueError(
            f"as linhas {rows} de ids só têm <pad> (pad_id={pad_id}): não há último token "
            "para classificar"
        )
    columns = torch.arange(1, ids.shape[1] + 1, device=ids.device)  # (t,): 1 + j
    positions = real.long() * columns  # (b, t): 1 + j nos tokens reais, 0 nos <pad>
    return positions.argmax(dim=1)  # (b,): o j do último token real


def _check_hidden(hidden: object, ids: Tensor) -> None:
    if not isinstance(hidden, Tensor) or hidden.dim() != 3:
        shape = tuple(hidden.shape) if isinstance(hidden, Tensor) else type(hidden).__name__
        raise ValueError(f"hidden deve ter forma (b, t, d); recebi {shape}")
    if tuple(hidden.shape[:2]) != tuple(ids.shape):
        raise ValueError(
            f"hidden {tuple(hidden.shape)} e ids {tuple(ids.shape)} devem ter os mesmos (b, t)"
        )


def pool_last_token(hidden: Tensor, ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """``hidden (b, t, d)`` -> ``(b, d)``: o vetor do último token real de cada linha.

    ``ids (b, t)`` diz onde está o preenchimento (ver ``last_token_index``).
    """
    index = last_token_index(ids, pad_id)  # (b,)
    _check_hidden(hidden, ids)
    rows = torch.arange(hidden.shape[0], device=hidden.device)  # (b,)
    return hidden[rows, index.to(hidden.device)]  # (b, d)


def pool_mean(hidden: Tensor, ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """``hidden (b, t, d)`` -> ``(b, d)``: a média dos vetores dos tokens reais de cada linha.

    Os ``<pad>`` (``ids == pad_id``) ficam de fora da soma e da contagem, então o
    resultado não depende do lado nem do tamanho do preenchimento (com preenchimento à
    esquerda, os estados dos tokens reais só são os mesmos com ``key_padding_mask``).
    Uma linha só de ``<pad>`` não tem média: ``ValueError`` (como ``last_token_index``).
    """
    last_token_index(ids, pad_id)  # as mesmas conferências de ids e pad_id
    _check_hidden(hidden, ids)
    real = (ids != pad_id).to(device=hidden.device, dtype=hidden.dtype)  # (b, t): 1 nos reais
    total = (hidden * real[:, :, None]).sum(dim=1)  # (b, d)
    return total / real.sum(dim=1, keepdim=True)  # (b, d)


class GPTClassifier(nn.Module):
    """Um ``tpt.GPT`` com uma cabeça de classificação no último token real.

    ``ids (b, t)`` -> logits ``(b, num_classes)``: ``score`` (``nn.Linear(d, C)`` sem viés,
    como o ``LlamaForSequenceClassification``) aplicada a
    ``pool_last_token(gpt.hidden_states(ids), ids, pad_id)`` (a regra do ``transformers``)
    ou, com ``pooling="mean"``, ``pool_mean(...)``.

    Args:
        gpt: o corpo (pré-treinado ou não). É usado como está, **sem cópia**: para
            comparar variantes a partir do mesmo modelo, passe ``copy.deepcopy(gpt)``.
            A ``lm_head`` do corpo fica sem uso.
        num_classes: número de classes ``C`` (>= 2).
        pad_id: o id de ``<pad>`` (padrão ``tpt.PAD_ID``), que decide o último token.
        pooling: ``"last"`` (padrão: o último token real, como o
            ``LlamaForSequenceClassification``) ou ``"mean"`` (a média dos tokens reais;
            sem equivalente no ``transformers``: ``tpt.hf.to_hf`` a recusa).

    Submódulos: ``gpt`` e ``score``. A perda fica com quem treina:
    ``F.cross_entropy(clf(ids), labels)``.
    """

    def __init__(
        self, gpt: GPT, num_classes: int, *, pad_id: int = PAD_ID, pooling: str = "last"
    ) -> None:
        super().__init__()
        if not isinstance(gpt, GPT):
            raise TypeError(f"GPTClassifier espera um tpt.GPT; recebi {type(gpt).__name__}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes={num_classes!r} deve ser um inteiro >= 2")
        _check_pad_id(pad_id)
        if pooling not in POOLINGS:
            raise ValueError(
                f"pooling={pooling!r} deve ser 'last' (o último token real) ou 'mean' (a média)"
            )
        if pad_id >= gpt.config.vocab_size:
            raise ValueError(
                f"pad_id={pad_id} fora do vocabulário do GPT [0, {gpt.config.vocab_size - 1}]"
            )
        self.gpt = gpt
        self.num_classes = num_classes
        self.pad_id = pad_id
        self.pooling = pooling
        ref = gpt.embedding.weight
        self.score = nn.Linear(
            gpt.config.embed_dim, num_classes, bias=False, device=ref.device, dtype=ref.dtype
        )
        self.train(gpt.training)

    def forward(self, ids: Tensor, *, key_padding_mask: Tensor | None = None) -> Tensor:
        """ids ``(b, t)`` -> logits ``(b, num_classes)``.

        ``key_padding_mask`` ``(b, t)`` (True = ``<pad>``) esconde os ``<pad>`` da
        atenção; o padrão ``None`` não esconde nada (o mesmo que o ``transformers`` sem
        ``attention_mask``). À direita ela não muda o resultado; à esquerda, muda.
        """
        hidden = self.gpt.hidden_states(ids, key_padding_mask=key_padding_mask)  # (b, t, d)
        pool = pool_mean if self.pooling == "mean" else pool_last_token
        return self.score(pool(hidden, ids, self.pad_id))  # (b, C)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Número de parâmetros (pesos amarrados contam uma vez só)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def extra_repr(self) -> str:
        text = f"num_classes={self.num_classes}, pad_id={self.pad_id}"
        return text if self.pooling == "last" else f"{text}, pooling={self.pooling!r}"
