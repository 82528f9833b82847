"""The precision case set by every path a user takes: false alarms, wrong modules and bugs named, per dtype.

    PYTHONPATH=. python benchmarks/bench_precision_set.py [--dtypes bf16,fp16,fp32] [--seeds 0,1] [--out FILE]

Cases (``tests/models/precision.py``): transformers' Llama (4 layers × 64, eager attention, padded batch) against
an sdpa port with the same weights and at most one of eight classic bugs. Paths:

- ``default``: both traced with ``nbtrace.trace``'s defaults (printed values, pruned layers, the float64 twin);
- ``measured``: both traced with full tensors and ``measure_rounding=True`` (the twin and every call's rounding);
- ``files``: both traced with full tensors and nothing measured (``measure_rounding=False``);
- ``plain``: both traced with the defaults but the twin (printed values, pruned layers, ``measure_rounding=False``);
- ``port``: a default folder of the reference against the live port (its twin run on the inputs the folder kept);
- ``replay``: a full-tensor folder without the twin against the live port, replayed call by call;
- ``live``: both modules live.

A case is graded ``ok`` (agrees without a bug, names the bug's module), ``unresolved`` (no module named),
``FALSE ALARM`` (a module named without a bug), ``WRONG`` (another module named), ``bracketed`` (pruned layer blocks
in between, the module holding them named) or ``miss`` (a bug that changes the function, not named); a bug that
only rounds more (an RMSNorm without its float32 upcast: the same function) is ``ok`` when nothing is named.
Prints a table, then counts per path and dtype.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace  # noqa: E402
from tests.models.precision import CASES, DTYPES, build_reference, make_inputs  # noqa: E402

PATHS = ("default", "measured", "files", "plain", "port", "replay", "live")
#: bugs that compute the same function as the reference and only round more: the verdict must agree
SAME_FUNCTION = {"norm_no_upcast"}
_TRACING = {"default": {}, "port": {}, "plain": {"measure_rounding": False},
            "measured": {"use_repr": False, "do_prune_layers": False, "measure_rounding": True},
            "files": {"use_repr": False, "do_prune_layers": False, "measure_rounding": False},
            "replay": {"use_repr": False, "do_prune_layers": False, "measure_rounding": False}}


def _trace(model, inputs, folder: Path, path: str) -> Path:
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, **_TRACING[path]):
        model(**inputs, use_cache=False)
    return folder


def grade(expected: str | None, same_function: bool, verdict: str, named: str | None,
          pruned: tuple[str, str] | None = None) -> str:
    if same_function:
        return "ok" if named is None else "FALSE ALARM"
    if named is None:
        if expected is None or verdict == "unresolved":
            return "ok" if verdict == "agree" else "unresolved"
        return "miss"
    if expected is None:
        return "FALSE ALARM"
    if named == expected:
        return "ok"
    if pruned is not None and expected.startswith(named + "."):
        return "bracketed"  # pruned layer blocks in between, held by the module named: not a wrong module
    return "WRONG"


def run(dtype: str, seed: int, tmp: Path, paths: list[str]) -> list[tuple[str, str, str, str]]:
    rows = []
    for case in CASES:
        if case.seed != 0:
            continue
        reference = build_reference(DTYPES[dtype], seed)
        inputs = make_inputs(seed + 1, padded=True)
        port = case.make_port(reference)
        expected = case.expected(dtype)
        same = case.bug is not None and case.bug.name in SAME_FUNCTION
        for path in paths:
            folder = tmp / f"{dtype}-{seed}-{case.name}-{path}"
            if path == "live":
                c = nbtrace.compare(reference, port, inputs=({}, dict(inputs, use_cache=False)))
            elif path in ("port", "replay"):
                c = nbtrace.compare(_trace(reference, inputs, folder / "a", path), port)
            else:
                c = nbtrace.compare(_trace(reference, inputs, folder / "a", path),
                                    _trace(port, inputs, folder / "b", path))
            first = c.first_divergence
            named = first.module_path if first is not None else None
            pruned = first.pruned if first is not None else None
            rows.append((case.name, path, grade(expected, same, c.verdict, named, pruned), named or c.verdict))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,fp16,fp32")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    paths = args.paths.split(",")
    lines = ["| dtype | seed | case | " + " | ".join(paths) + " |", "|" + "---|" * (3 + len(paths))]
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            for seed in map(int, args.seeds.split(",")):
                table: dict[str, list[str]] = defaultdict(list)
                for name, path, mark, named in run(dtype, seed, Path(tmp), paths):
                    counts[(path, dtype)][mark] += 1
                    counts[(path, dtype)]["cases"] += 1
                    shown = mark if mark in ("ok", "miss", "unresolved", "bracketed") else f"{mark} {named}"
                    table[name].append(shown)
                for name, cells in table.items():
                    line = f"| {dtype} | {seed} | {name} | " + " | ".join(cells) + " |"
                    print(line, flush=True)
                    lines.append(line)
    lines += ["", "| path | dtype | false alarms | wrong module | missed | unresolved | ok | cases |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (path, dtype), c in sorted(counts.items()):
        lines.append(f"| {path} | {dtype} | {c['FALSE ALARM']} | {c['WRONG']} | {c['miss']} | {c['unresolved']} | "
                     f"{c['ok']} | {c['cases']} |")
    text = "\n".join(lines)
    print("\n".join(lines[lines.index(""):]))
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if any(c["FALSE ALARM"] + c["WRONG"] for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
