#!/usr/bin/env python
"""Run one zoo model through one implementation of ``model_addition_debugger_context``.

Single run (one model, one option combination; what every transformers job uses, each in a fresh process,
because transformers changes torch's global print options for good):

    python tests/compat/run_impl.py --impl transformers --model llama --out DIR [--no-prune] [--safetensors]

All four option combinations of a model in ONE process, into DIR/<combo>/ (also proves the implementation
leaks no global state from one run into the next); ``--model all`` does every zoo model, into
DIR/<model>/<combo>/. A ``meta.json`` in DIR records, per run, errors and the state checks (print options,
grad mode, ``forward`` left in a module's ``__dict__``, leftover hooks):

    python tests/compat/run_impl.py --impl nbtrace --model llama --out DIR --all-combos [--capture FILE]

``--capture FILE`` first runs an untraced forward on a fresh copy of the model with transformers' call
semantics (each module's ``forward`` wrapped, submodules under ``no_grad``) and saves the call tree with
cloned input/output tensors of EVERY call (``torch.save``); the tests check safetensors references
against it.

``--serve`` is a fork server for the test harness: it imports torch/transformers once, then reads one JSON
job per line on stdin (``{"id": .., "argv": [..], "log": PATH, "timeout": S}``), runs each job in a freshly
forked child process (a new process per job, so no state carries over between jobs) and answers one JSON
line per job (``{"id": .., "rc": .., "secs": ..}``) on stdout.

Exit status: 0 when every run completed (state-check findings are reported in meta.json, not by the exit
status), 1 when a run raised, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

if __package__:
    from .state_checks import snapshot_state, state_problems
else:  # run as a script: python tests/compat/run_impl.py
    from state_checks import snapshot_state, state_problems  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)

# combo name -> (do_prune_layers, use_repr)
COMBOS: dict[str, tuple[bool, bool]] = {
    "prune-repr": (True, True),
    "noprune-repr": (False, True),
    "prune-st": (True, False),
    "noprune-st": (False, False),
}


def combo_name(prune: bool, use_repr: bool) -> str:
    return f"{'prune' if prune else 'noprune'}-{'repr' if use_repr else 'st'}"


def _setup_paths() -> None:
    if REPO not in sys.path:
        sys.path.insert(0, REPO)  # the nbtrace package of this work tree wins


def _zoo():
    _setup_paths()
    from tests.models import zoo

    return zoo


def get_context(impl: str):
    if impl == "transformers":
        from transformers.model_debugging_utils import model_addition_debugger_context

        return model_addition_debugger_context
    if impl == "nbtrace":
        import nbtrace

        return nbtrace.model_addition_debugger_context
    raise SystemExit(f"unknown --impl {impl!r}")


# ---------------------------------------------------------------------------------------------------------
# traced runs
# ---------------------------------------------------------------------------------------------------------


def run_one(impl: str, entry, out_dir: str, prune: bool, use_repr: bool) -> dict:
    """One traced forward of a freshly built model; returns the run's meta record."""
    import torch

    ref_model, ref_args, ref_kwargs = entry.build()
    with torch.no_grad(), entry.forward_context():
        ref_model(*ref_args, **ref_kwargs)
    baseline = snapshot_state(ref_model)
    del ref_model, ref_args, ref_kwargs

    model, args, kwargs = entry.build()
    ctx = get_context(impl)
    os.makedirs(out_dir, exist_ok=True)
    before = snapshot_state(model)
    t0 = time.perf_counter()
    error = None
    try:
        with entry.forward_context():
            with ctx(model, debug_path=out_dir, do_prune_layers=prune, use_repr=use_repr):
                model(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - reported, never swallowed silently
        error = traceback.format_exc()
    secs = time.perf_counter() - t0
    after = snapshot_state(model)
    problems, notes = state_problems(before, after, baseline)
    return {"ok": error is None, "error": error, "secs": round(secs, 4), "state_problems": problems,
            "notes": notes}


# ---------------------------------------------------------------------------------------------------------
# reference capture (transformers' call semantics, no serialization)
# ---------------------------------------------------------------------------------------------------------

NON_TENSOR = "<non-tensor>"


def _snap(value):
    """Clone a nested io structure the way transformers walks it: lists/tuples -> list, dicts (incl.
    ModelOutput) -> dict of items(), tensors -> detached clones, anything else -> a marker."""
    import torch

    if isinstance(value, (list, tuple)):
        return [_snap(v) for v in value]
    if isinstance(value, dict):
        return {k: _snap(v) for k, v in value.items()}
    if hasattr(value, "_local_tensor"):
        value = value._local_tensor
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return NON_TENSOR


def capture(entry, path: str) -> None:
    """Save the complete (unpruned) call tree of one forward with every call's inputs and outputs."""
    import functools

    import torch

    model, args, kwargs = entry.build()
    cls = type(model).__name__
    stack: list[dict] = []
    counts: dict[str, int] = {}
    root_box: dict = {}

    def new_node(path_, inputs):
        idx = counts.get(path_, 0)
        counts[path_] = idx + 1
        return {"path": path_, "idx": idx, "inputs": inputs, "outputs": None, "children": []}

    def wrap(module, full_path, top):
        orig = module.forward

        @functools.wraps(orig)
        def wrapped(*inps, **kws):
            if top:
                inputs = _snap({"args": inps, "kwargs": kws})
            else:
                d = {"args": inps, "kwargs": kws}
                inputs = _snap({k: v for k, v in d.items() if len(v) > 0})
            node = new_node(full_path, inputs)
            if stack:
                stack[-1]["children"].append(node)
            else:
                root_box["root"] = node
            stack.append(node)
            try:
                if top:
                    out = orig(*inps, **kws)
                else:
                    with torch.no_grad():
                        out = orig(*inps, **kws)
            finally:
                stack.pop()
            node["outputs"] = _snap(out)
            return out

        module.forward = wrapped

    for name, sub in model.named_modules():
        if name:
            wrap(sub, f"{cls}.{name}", top=False)
    wrap(model, cls, top=True)
    with entry.forward_context():
        model(*args, **kwargs)
    root = root_box["root"]
    torch.save({"model": entry.name, "class": cls, "root": root, "counts": counts}, path)


# ---------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["transformers", "nbtrace"])
    p.add_argument("--model", help="zoo model name, or 'all' (with --all-combos)")
    p.add_argument("--out", help="debug_path (with --all-combos: parent of one folder per combo)")
    p.add_argument("--no-prune", action="store_true", help="do_prune_layers=False")
    p.add_argument("--safetensors", action="store_true", help="use_repr=False")
    p.add_argument("--all-combos", action="store_true", help="run the four option combinations in this process")
    p.add_argument("--capture", metavar="FILE", help="also save a reference capture of the model's calls")
    p.add_argument("--meta", metavar="FILE", help="write the run record(s) here (default with --all-combos: "
                                                  "OUT/meta.json)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1: deterministic)")
    p.add_argument("--serve", action="store_true", help="fork server for the test harness (see module doc)")
    p.add_argument("--list", action="store_true", help="print the zoo's model names and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.serve:
        return serve()
    zoo = _zoo()
    if opts.list:
        for name, e in zoo.ZOO.items():
            print(f"{name:18s} {e.description}")
        return 0
    if not (opts.impl and opts.model and opts.out):
        _parser().error("--impl, --model and --out are required")

    import torch

    torch.set_num_threads(opts.threads)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    models = list(zoo.ZOO) if opts.model == "all" else [opts.model]
    if opts.model == "all" and not opts.all_combos:
        _parser().error("--model all needs --all-combos")
    for m in models:
        zoo.get(m)  # fail fast on unknown names

    if opts.capture:
        if len(models) != 1:
            _parser().error("--capture needs a single --model")
        os.makedirs(os.path.dirname(os.path.abspath(opts.capture)), exist_ok=True)
        capture(zoo.get(models[0]), opts.capture)

    meta: dict = {"impl": opts.impl, "runs": {}}
    if opts.all_combos:
        for m in models:
            for combo, (prune, use_repr) in COMBOS.items():
                out = os.path.join(opts.out, m, combo) if opts.model == "all" else os.path.join(opts.out, combo)
                key = f"{m}/{combo}" if opts.model == "all" else combo
                meta["runs"][key] = run_one(opts.impl, zoo.get(m), out, prune, use_repr)
        meta_path = opts.meta or os.path.join(opts.out, "meta.json")
    else:
        prune, use_repr = not opts.no_prune, not opts.safetensors
        meta["runs"][combo_name(prune, use_repr)] = run_one(opts.impl, zoo.get(models[0]), opts.out, prune, use_repr)
        meta_path = opts.meta

    failed = False
    for key, rec in meta["runs"].items():
        if rec["error"]:
            failed = True
            print(f"[{opts.impl} {key}] raised:\n{rec['error']}", file=sys.stderr)
        for p in rec["state_problems"]:
            print(f"[{opts.impl} {key}] state: {p}", file=sys.stderr)
    if meta_path:
        os.makedirs(os.path.dirname(os.path.abspath(meta_path)), exist_ok=True)
        with open(meta_path, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------------------
# fork server
# ---------------------------------------------------------------------------------------------------------


def _preload() -> None:
    """Import everything a job needs, without running any torch op (the children fork from here)."""
    _setup_paths()
    import torch  # noqa: F401

    zoo = _zoo()
    try:
        import transformers.model_debugging_utils  # noqa: F401
        import transformers.utils  # noqa: F401

        for cls in ("LlamaForCausalLM", "GPT2LMHeadModel", "Qwen2ForCausalLM", "MistralForCausalLM", "BertModel",
                    "T5ForConditionalGeneration", "BartForConditionalGeneration", "ViTModel",
                    "MixtralForCausalLM"):
            import transformers

            getattr(transformers, cls)  # loads the modeling module (and its configuration module)
    except ImportError:
        pass
    if os.environ.get("NBTRACE_COMPAT_PRELOAD_NBTRACE") == "1":
        try:
            import nbtrace  # noqa: F401
        except Exception:  # noqa: BLE001 - the job itself will report it
            pass
    del zoo


def _run_child(job: dict) -> None:
    """In the forked child: redirect output to the job's log, run, exit without returning."""
    rc = 1
    try:
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        rc = main(job["argv"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        rc = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def serve() -> int:
    _preload()
    out = sys.stdout
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        job = json.loads(line)
        t0 = time.perf_counter()
        out.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(job)
        deadline = t0 + float(job.get("timeout", 600))
        rc = None
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid == pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                rc = "timeout"
                break
            time.sleep(0.005)
        out.write(json.dumps({"id": job["id"], "rc": rc, "secs": round(time.perf_counter() - t0, 3)}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
