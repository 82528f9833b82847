"""Timing several variants of one case fairly on a noisy machine: every variant once per round, in a shuffled order,
after one warm-up run each; the median of each variant's rounds."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable


def interleaved_medians(run: Callable[[str], float], names: Iterable[str], rounds: int) -> dict[str, float]:
    """``run(name)`` returns one run's seconds; the median per name over ``rounds`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in times:  # warm-up
        run(name)
    for _ in range(rounds):
        order = list(times)
        random.shuffle(order)
        for name in order:
            times[name].append(run(name))
    return {name: statistics.median(values) for name, values in times.items()}
