"""The fingerprint's constants and its signs, without torch: one definition for the PyTorch capture
(``fingerprint.py``) and the JAX capture (``nbtrace/jax/fingerprint.py``), so their fingerprints compare."""

from __future__ import annotations

import random

SUMS = 16
CHUNK = 4096
SIGN_BLOCK = 1024  # chunk signs drawn per seed
SEED_S, SEED_W = 0x6E627472, 0x7477696E
SENTINEL = 1e30
#: positions in a fingerprint's numbers after the sums
KEPT, SUMSQ, LEFT_OUT = SUMS, SUMS + 1, SUMS + 2
WIDTH = SUMS + 3


def sign_sequence(seed: int, length: int) -> list[float]:
    """``length`` signs (±1.0) from Python's Mersenne Twister seeded with ``seed``: ``random.random()`` keeps its
    sequence for a seed across Python versions (a documented promise), so fingerprints written today compare with
    those of a later version."""
    rng = random.Random(seed)
    return [1.0 if rng.random() < 0.5 else -1.0 for _ in range(length)]


def chunk_signs(chunks: int) -> list[float]:
    """The sign ``W[c]`` of each of the first ``chunks`` chunks (whole blocks of ``SIGN_BLOCK``, one seed each)."""
    blocks = -(-chunks // SIGN_BLOCK)
    return [v for k in range(blocks) for v in sign_sequence(SEED_W + k, SIGN_BLOCK)]


def valid_shape(shape: tuple[int, ...], valid: tuple[int, ...]) -> list[int] | None:
    """The shape the ``(batch, seq)`` padding mask takes to broadcast over a tensor of ``shape``: when its first
    dimension is the batch and a later one the sequence; None when it has no such dimensions."""
    if len(shape) < 2 or len(valid) != 2 or shape[0] != valid[0]:
        return None
    seq = next((d for d in range(1, len(shape)) if shape[d] == valid[1]), None)
    if seq is None:
        return None
    out = [1] * len(shape)
    out[0], out[seq] = valid[0], valid[1]
    return out
