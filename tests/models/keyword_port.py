"""``ports.TinyLlamaPort`` called the way another house calls it: its padding mask under another name
(``forward(tokens, keep)``), its positions as an argument (``forward(tokens, positions, keep)``), or a 0/1 segment
argument ahead of the mask (``forward(tokens, segments, keep)``: only a declared ``padding_mask`` tells them apart).
Its bugs are ``ports.BUGS``; ``padded_inputs(seed)`` gives token ids and a padding mask that left-pads a row."""

from __future__ import annotations

import torch

from .ports import VOCAB, TinyLlamaPort


class KeywordPort(TinyLlamaPort):
    """The mask as ``keep``, optional (None: every token is real)."""

    def forward(self, tokens, keep=None):
        return super().forward(tokens, torch.ones_like(tokens) if keep is None else keep)


class PositionsPort(TinyLlamaPort):
    """The positions given, as the original's ``position_ids``: two integer inputs of the mask's shape."""

    def forward(self, tokens, positions, keep):
        x = self.tok(tokens)
        cos, sin = self.rope(positions)
        for block in self.blocks:
            x = block(x, cos, sin, keep)
        return self.head(self.final_norm(x))


class SegmentPort(TinyLlamaPort):
    """A 0/1 segment argument ahead of the mask, which this port ignores."""

    def forward(self, tokens, segments, keep):
        return super().forward(tokens, keep)


def padded_inputs(seed: int, batch: int = 3, length: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a padding mask: one row left-padded by a seeded amount, the others whole."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, : 1 + int(torch.randint(0, length // 2, (1,), generator=generator))] = 0
    return ids, mask
