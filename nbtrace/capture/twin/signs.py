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
#: the layout sums (``axis_signs``) that follow ``WIDTH`` for a tensor of three or more dimensions longer than one
AXIS_SUMS = 8
AXIS_RANK = 3
SEED_AXES = 0x61786573


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


def axis_signs(size: int) -> list[float]:
    """The signs of an axis of ``size`` in the layout sums: ``size`` rows of ``AXIS_SUMS`` signs, row-major, drawn
    from a seed of the size alone. Element ``(i_0, ..., i_k)`` of a tensor goes to every layout sum ``j`` with the
    sign ``Π_d A_{n_d}[i_d, j]``: the sums are the same for the tensor held with its axes in another order (channels
    last against channels first, heads before or after the sequence), since each axis carries its signs with it.
    Axes of one size share their signs, so the sums cannot tell those axes apart (height against width): they are
    read only where the flat-order fingerprint cannot compare two layouts."""
    return sign_sequence(SEED_AXES + size, size * AXIS_SUMS)


def axis_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes the layout sums run over (those longer than one), or None: fewer than ``AXIS_RANK`` of them (a
    vector, a matrix: no other layout of them is common, and their flat order decides)."""
    axes = tuple(n for n in shape if n != 1)
    return axes if len(axes) >= AXIS_RANK else None


def permutes(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> bool:
    """True when the two shapes hold the same axes in another order (sizes one aside), so the layout sums of one
    tensor compare with the other's."""
    a, b = axis_shape(tuple(shape_a)), axis_shape(tuple(shape_b))
    return a is not None and b is not None and sorted(a) == sorted(b)
