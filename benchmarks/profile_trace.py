"""Where the time of a traced forward goes: cProfile of one benchmark case, summarised.

Runs the traced call of a case (``bench_trace.CASES``) many times under cProfile
and prints two tables, in ms per forward: the time split between the model's own
work and nbtrace's parts, and the functions with the most self time. A call
made by nbtrace (a torch op computing a stat, a file write) counts as nbtrace's,
even outside nbtrace's files; the model's forwards, called from nbtrace's
wrappers, count as the model's. cProfile slows Python-heavy code more than
torch ops: read the split, not the absolute numbers.

    python benchmarks/profile_trace.py                      # notebook case, repr, pruned
    python benchmarks/profile_trace.py --case small --unpruned --safetensors
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_trace

#: nbtrace's files, by the part of the work they do
PARTS = {
    "context.py": "wrapping and restoring forwards",
    "recorder.py": "the call stack",
    "prune.py": "the call stack",
    "speculate.py": "pruning speculation",
    "serialize.py": "tensor records (Python)",
    "transfer.py": "tensor records (Python)",
    "printing.py": "printing values and stats (Python)",
    "print_text.py": "printing values and stats (Python)",
    "write.py": "JSON",
    "parameters.py": "parameter fingerprints",
    "numpy_parameters.py": "parameter fingerprints",
    "generation.py": "the generation probe",
    "ranks.py": "ranks",
    "recorded.py": "finished forwards",
    "runs.py": "finished forwards",
}
_TORCH_CALLERS = ("serialize.py", "printing.py", "transfer.py", "parameters.py", "generation.py")
_MODEL_ENTRIES = ("call_module", "call_top", "untraced_top_forward")  # nbtrace functions that call the model


def _nbtrace_file(func: tuple) -> str | None:
    path = Path(func[0])
    return path.name if "nbtrace" in path.parts else None


def _part(func: tuple, caller_file: str | None) -> str:
    """The part a function's self time belongs to, given the nbtrace file that (ultimately) called it."""
    own = _nbtrace_file(func)
    if own is not None:
        return "nbtrace: " + PARTS.get(own, "other")
    name = func[2]
    if caller_file in _TORCH_CALLERS and ("torch" in name or "Tensor" in name):
        return "nbtrace: stats, gathering, checksums (torch ops)"
    if caller_file == "write.py" and any(word in name for word in ("posix", "io.open", "write", "close")):
        return "nbtrace: file writes"
    return "nbtrace: " + PARTS.get(caller_file or "", "other")


def split(stats: pstats.Stats) -> dict[str, float]:
    """Self time (s) by part: every function's self time, shared among its callers by the time each caused."""
    raw = stats.stats  # type: ignore[attr-defined]
    # origin[f]: {nbtrace file or None (the model): share of f's time}
    origin: dict[tuple, dict[str | None, float]] = {}
    for func in raw:
        own = _nbtrace_file(func)
        origin[func] = {own: 1.0} if own is not None else {None: 1.0}
    for _ in range(30):  # settle the shares along the call graph
        for func, (_, _, _, cumulative, callers) in raw.items():
            if _nbtrace_file(func) is not None or not callers:
                continue
            shares: dict[str | None, float] = defaultdict(float)
            total = sum(entry[3] for entry in callers.values()) or 1.0
            for caller, entry in callers.items():
                weight = entry[3] / total
                caller_file = _nbtrace_file(caller)
                if caller_file is not None:
                    shares[None if caller[2] in _MODEL_ENTRIES else caller_file] += weight
                else:
                    for source, share in origin.get(caller, {None: 1.0}).items():
                        shares[source] += weight * share
            origin[func] = dict(shares)
    parts: dict[str, float] = defaultdict(float)
    for func, (_, _, own_time, _, _) in raw.items():
        for source, share in origin[func].items():
            key = "the model's own work" if source is None and _nbtrace_file(func) is None else _part(func, source)
            parts[key] += own_time * share
    return dict(parts)


def top(stats: pstats.Stats, count: int) -> list[tuple[str, float, float]]:
    """The ``count`` functions with the most self time: (name, seconds, calls)."""
    rows = []
    for func, (_, calls, own_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        file, _, name = func
        where = f"{Path(file).name}:{name}" if file != "~" else name
        rows.append((where, own_time, calls))
    rows.sort(key=lambda row: -row[1])
    return rows[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="notebook", choices=list(bench_trace.CASES))
    parser.add_argument("--forwards", type=int, default=40)
    parser.add_argument("--unpruned", action="store_true")
    parser.add_argument("--safetensors", action="store_true")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import nbtrace

    case = bench_trace.CASES[args.case]
    model, inputs = bench_trace.build(args.case)
    scratch = Path(tempfile.mkdtemp())

    profiler = cProfile.Profile()

    def traced(profile: bool) -> None:
        folder = scratch / "run"
        if profile:
            profiler.enable()
        with nbtrace.model_addition_debugger_context(
            model, debug_path=folder, do_prune_layers=not args.unpruned, use_repr=not args.safetensors
        ), bench_trace.grad_mode(case):
            model(**inputs)
        profiler.disable()
        shutil.rmtree(folder)

    for _ in range(3):
        traced(profile=False)
    for _ in range(args.forwards):
        traced(profile=True)
    shutil.rmtree(scratch)
    stats = pstats.Stats(profiler)
    per = 1000 / args.forwards
    variant = f"nbtrace {'safetensors' if args.safetensors else 'repr'} {'unpruned' if args.unpruned else 'pruned'}"
    print(f"### profile: {args.case}, {variant}, {args.forwards} forwards under cProfile, {args.threads} thread(s)")
    print("\n| where the time goes | ms per forward |\n|---|---:|")
    parts = split(stats)
    for key, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"| {key} | {seconds * per:.2f} |")
    print(f"| total | {sum(parts.values()) * per:.2f} |")
    print("\n| top self time | ms per forward | calls per forward |\n|---|---:|---:|")
    for where, seconds, calls in top(stats, args.top):
        print(f"| `{where}` | {seconds * per:.2f} | {calls / args.forwards:.0f} |")


if __name__ == "__main__":
    main()
