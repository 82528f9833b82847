"""An encoder whose embeddings are added in another order than transformers' BERT adds them (word, token type,
position), with BertModel as its port and the same weights: same-shaped sibling calls that call order cannot pair."""

from __future__ import annotations

import copy

import torch
from torch import nn


def _config():
    from transformers import BertConfig

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, type_vocab_size=4, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    return config


class Embeddings(nn.Module):
    """Word, position and segment tables, added in ``order``, then a LayerNorm."""

    def __init__(self, config, order: tuple[str, ...]) -> None:
        super().__init__()
        self.order = order
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        handed = {"word": ids, "position": torch.arange(ids.shape[1])[None].expand_as(ids), "segment": segments}
        total = None
        for name in self.order:
            value = getattr(self, name)(handed[name])
            total = value if total is None else total + value
        return self.norm(total)


class Original(nn.Module):
    def __init__(self, config, order: tuple[str, ...], encoder: nn.Module) -> None:
        super().__init__()
        self.embeddings = Embeddings(config, order)
        self.encoder = encoder

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embeddings(ids, segments)).last_hidden_state


#: the original's (ids, segments) reach the port as its keywords
PORT_ARGUMENTS = {"args.0": "input_ids", "args.1": "token_type_ids"}


def build(seed: int, order: tuple[str, ...]) -> tuple[nn.Module, nn.Module]:
    """``(original, port)`` with the same weights, in eval mode."""
    from transformers import BertModel

    torch.manual_seed(seed)
    config = _config()
    port = BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in port.parameters():
            p.normal_(0, 0.5) if p.dim() > 1 else p.uniform_(-0.1, 0.1)
    original = Original(config, order, copy.deepcopy(port.encoder)).eval()
    mine, theirs = original.embeddings, port.embeddings
    with torch.no_grad():
        mine.word.weight.copy_(theirs.word_embeddings.weight)
        mine.position.weight.copy_(theirs.position_embeddings.weight)
        mine.segment.weight.copy_(theirs.token_type_embeddings.weight)
    mine.norm.load_state_dict(theirs.LayerNorm.state_dict())
    return original, port


def inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 50)
    return torch.randint(0, 64, (2, 9), generator=generator), torch.randint(0, 4, (2, 9), generator=generator)
