"""A natural port is not a bug: transformers' GPT-2 against a from-scratch port, over seeds.

    PYTHONPATH=. python benchmarks/bench_gpt2_port.py [--seeds 0,1,2] [--dtypes fp32,bf16]

The port (``tests/models/gpt2_port.py``) holds GPT-2's Conv1D weights transposed in nn.Linear, looks
position embeddings up from 1-D ids and takes ``forward(ids)``. For each seed, dtype, bug (and the clean
port), with and without ``rename``, from the two trace folders and replayed (``compare(folder, port)``),
it prints what the verdict names, graded: ok, FALSE ALARM (a module named for the clean port), WRONG
(another module), none (no module named where there is a bug: agreement or unresolved), and the
counts. torch runs on one thread (tiny tensors: threads only contend).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace  # noqa: E402
from tests.models.gpt2_port import BUGS, RENAME, build_original, build_port, make_inputs  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def grade(named: str | None, bug: str | None) -> str:
    if bug is None:
        return "ok" if named is None else "FALSE ALARM"
    if named is None:
        return "none"
    return "ok" if named == BUGS[bug] else "WRONG"


def named_by(comparison) -> str | None:
    first = comparison.first_divergence
    if first is None or getattr(first, "state", None) == "unresolved" or getattr(first, "unresolved", False):
        return None
    return first.module_path


def run(seeds: list[int], dtypes: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    folder = Path(tempfile.mkdtemp(prefix="nbtrace-gpt2-"))
    for seed in seeds:
        for dtype in dtypes:
            original = build_original(DTYPES[dtype], seed=seed)
            inputs = make_inputs(seed)
            a = folder / f"{seed}-{dtype}-ref"
            with torch.no_grad(), nbtrace.trace(original, debug_path=a, use_repr=False, do_prune_layers=False,
                                                measure_rounding=False):
                original(**inputs)
            for bug in (None, *BUGS):
                port = build_port(original, bug)
                b = folder / f"{seed}-{dtype}-{bug}"
                with torch.no_grad(), nbtrace.trace(port, debug_path=b, use_repr=False, do_prune_layers=False,
                                                    measure_rounding=False):
                    port(inputs["input_ids"])
                for mode, other in (("files", b), ("replay", port)):
                    for rename in (RENAME, None):
                        start = time.perf_counter()
                        named = named_by(nbtrace.compare(a, other, rename=rename))
                        mark = grade(named, bug)
                        counts[mark] = counts.get(mark, 0) + 1
                        print(f"seed {seed} {dtype:4} {str(bug):18} {mode:6} {'rename' if rename else 'plain':6} "
                              f"{mark:11} {named or '-'} ({time.perf_counter() - start:.1f} s)", flush=True)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    options = parser.parse_args()
    torch.set_num_threads(1)
    counts = run([int(s) for s in options.seeds.split(",")], options.dtypes.split(","))
    print("  ".join(f"{mark}: {count}" for mark, count in sorted(counts.items())))


if __name__ == "__main__":
    main()
