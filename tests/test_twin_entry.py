"""The twin section's entries are built without a ``TwinPrint`` (capture/twin/print_numbers.py: tens of thousands per
forward on a model of many tiny calls); each must be what ``TwinPrint(...).to_dict()`` writes, key for key and in
the same order, so the sidecar's bytes do not depend on which builds it. The reference below is the entry as the
``TwinPrint`` made it: every field computed from the fingerprints' numbers, then ``to_dict``."""

from __future__ import annotations

import json
import math
import random

import pytest

from nbtrace.capture.twin.print_numbers import accumulated, fill_calls, sensitivity, twin_entry
from nbtrace.capture.twin.signs import AXIS_SUMS, KEPT, LEFT_OUT, SUMS, SUMSQ, WIDTH
from nbtrace.core.twin import TwinPrint


def _reference(shape, values, s64, sconst, low, run, bf16) -> dict:
    kept = int(values[KEPT])
    finite = all(math.isfinite(v) for v in values[:LEFT_OUT])
    rms = math.sqrt(values[SUMSQ] / kept) if kept and finite else 0.0
    sums = tuple(float(v) for v in values[:SUMS]) if finite else (0.0,) * SUMS
    left_out = int(values[LEFT_OUT]) if finite else max(int(values[LEFT_OUT]), 1)
    acc, run_rms, run_out = accumulated(values, run)
    rounded = None
    if bf16 is not None and int(bf16[KEPT]) == kept and all(math.isfinite(v) for v in bf16[:SUMS]):
        rounded = tuple(float(v) for v in bf16[:SUMS])

    def layout(numbers):
        found = numbers[WIDTH:WIDTH + AXIS_SUMS]
        ok = len(found) == AXIS_SUMS and all(math.isfinite(v) for v in found)
        return tuple(float(v) for v in found) if ok else None

    return TwinPrint(tuple(shape), sums, kept, rms, left_out, s64, sconst, low, acc, run_out, run_rms, rounded,
                     layout(values) if finite else None, layout(bf16) if rounded is not None else None).to_dict()


def _numbers(rng: random.Random, kept: int, layout: bool) -> list[float]:
    values = [rng.gauss(0.0, 10.0 ** rng.randint(-5, 5)) for _ in range(SUMS)]
    values += [float(kept), rng.random() * kept, float(rng.choice([0, 0, 0, 3]))]
    if layout:
        values += [rng.gauss(0.0, 1.0) for _ in range(AXIS_SUMS)]
    places = [*range(SUMS), SUMSQ, *range(WIDTH, len(values))]  # the counts are always finite
    for _ in range(rng.choice([0, 0, 0, 1, 2])):  # a +inf or NaN among the sums, the sum of squares or the layout
        values[rng.choice(places)] = rng.choice([math.inf, -math.inf, math.nan])
    return values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_entry_is_what_a_twin_print_writes(seed):
    rng = random.Random(seed)
    for _ in range(3000):
        kept = rng.choice([0, 1, 1024, 4096])
        layout = rng.random() < 0.4
        values = _numbers(rng, kept, layout)
        run = _numbers(rng, rng.choice([kept, kept, 7]), False) if rng.random() < 0.6 else None
        bf16 = _numbers(rng, rng.choice([kept, kept, 7]), layout) if rng.random() < 0.6 else None
        s64 = rng.choice([None, 1e-16, 2.5e-9])
        sconst = rng.choice([None, s64, 3e-7])
        low = rng.choice([None, None, "softmax returned float32"])
        shape = rng.choice([(1, 16, 64), (kept,), (2, 4, 8, 16)])
        made = twin_entry(shape, values, s64, sconst, low, run, bf16)
        assert json.dumps(made) == json.dumps(_reference(shape, values, s64, sconst, low, run, bf16))


def test_one_run_standing_for_both_perturbations_gives_what_two_equal_runs_give():
    """The section's calls are the same whether the perturbed numbers of ``"float64"`` and ``"constants"`` are one
    object (one run moved both: each sensitivity computed once) or two equal ones; ``s64`` and ``sconst`` are each
    the sensitivity from their own run's numbers where the runs differ."""
    rng = random.Random(5)
    prints = {f"M.layers.{i}": {"args.0": ((1, 16, 64), _numbers(rng, 1024, False)),
                                "out": ((2, 4, 8, 16), _numbers(rng, 1024, True))} for i in range(50)}
    moved = {key: {place: _numbers(rng, 1024, False) for place in places} for key, places in prints.items()}
    del moved["M.layers.3"]["out"]  # a place the perturbed run did not see
    run = {key: {"out": _numbers(rng, 1024, False)} for key in prints}
    shared: dict = {"calls": {}}
    fill_calls(shared, list(prints)[:40], prints, {"float64": moved, "constants": moved}, run, {}, ["(M", ")M"])
    apart: dict = {"calls": {}}
    twice = json.loads(json.dumps(moved))
    fill_calls(apart, list(prints)[:40], prints, {"float64": moved, "constants": twice}, run, {}, ["(M", ")M"])
    assert json.dumps(shared) == json.dumps(apart)
    assert shared["events"] == ["(M", ")M"] and list(shared["calls"]) == list(prints)
    entry = shared["calls"]["M.layers.7"]["args.0"]
    assert entry.get("s64") == sensitivity(prints["M.layers.7"]["args.0"][1], moved["M.layers.7"]["args.0"])
    assert "s64" not in shared["calls"]["M.layers.3"]["out"]
    other = {key: {place: _numbers(rng, 1024, False) for place in places} for key, places in prints.items()}
    own: dict = {"calls": {}}
    fill_calls(own, list(prints), prints, {"float64": moved, "constants": other}, run, {}, [])
    entry = own["calls"]["M.layers.7"]["args.0"]
    assert entry["sconst"] == sensitivity(prints["M.layers.7"]["args.0"][1], other["M.layers.7"]["args.0"])
    assert entry["sconst"] != entry["s64"] and "s64" not in own["calls"]["M.layers.3"]["out"]
    for key, places in prints.items():
        for place, (_, values) in places.items():
            assert own["calls"][key][place].get("sconst") == sensitivity(values, other[key][place])
