"""Comparison logic of the compatibility harness: transformers' debug files (the oracle, "A") against a
candidate implementation's ("B"), plus a reference capture of every call's tensors.

Pure functions over folders; ``compare_run`` returns a list of failure messages (empty: compatible).
Usable without pytest:

    python tests/compat/compat_checks.py A_DIR B_DIR CLASS --safetensors --capture capture.pt
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

if not __package__:  # run as a script: python tests/compat/compat_checks.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.compat.tree_tools import (  # noqa: E402
    LAYER_SUFFIX_RE,
    dump,
    read_bytes,
    iter_nodes,
    iter_tensor_records,
    iter_non_tensor_value_keys,
    transformers_strip,
    strip_tensor_values,
    first_differences,
    unified_diff,
    json_diffs,
    AlignmentError,
    align,
    lookup,
    tensors_equal,
    load_st,
)


# ---------------------------------------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    failures: list[str] = field(default_factory=list)  # broken promises of the candidate
    harness: list[str] = field(default_factory=list)  # the oracle or the harness itself misbehaves
    notes: list[str] = field(default_factory=list)
    pruned_files: set = field(default_factory=set)
    new_refs: set = field(default_factory=set)  # candidate names of 2nd+ calls' files
    renamed_from: set = field(default_factory=set)  # transformers' names at those places
    summary_kept_value_keys: list = field(default_factory=list)


def _ref_name(ref: Any) -> str | None:
    if isinstance(ref, str) and ref.startswith("./"):
        return ref[2:]
    return None


def _refs(tree: dict) -> list[tuple[dict, str, tuple, str]]:
    out = []
    for node in iter_nodes(tree):
        for io in ("inputs", "outputs"):
            for kp, rec in iter_tensor_records(node.get(io)):
                out.append((node, io, kp, rec.get("value")))
    return out


def _fmt_kp(io: str, kp: tuple) -> str:
    return io + "".join(f"[{k!r}]" for k in kp)


def _is_pruned_block_file(name: str, json_paths: set[str]) -> bool:
    """Does ``name`` start with the path of a layer block (``X.<n>``) that the JSON does not contain?"""
    for m in re.finditer(r"\.(\d+)(?=[._])", name):
        prefix = name[: m.end()]
        if LAYER_SUFFIX_RE.match(prefix) and prefix not in json_paths:
            return True
    return False


def compare_run(a_dir: str, b_dir: str, cls: str, use_repr: bool, capture: dict | None,
                candidate: str = "nbtrace", prune: bool = True) -> RunResult:
    """Compare one option combination. ``candidate`` is "nbtrace" (documented differences apply) or
    "transformers" (harness self-check: everything must be identical)."""
    res = RunResult()
    full_name, sum_name = f"{cls}_debug_tree_FULL_TENSORS.json", f"{cls}_debug_tree_SUMMARY.json"
    a_files, b_files = set(os.listdir(a_dir)), set(os.listdir(b_dir)) if os.path.isdir(b_dir) else set()
    for n in (full_name, sum_name):
        if n not in a_files:
            res.harness.append(f"transformers wrote no {n} in {a_dir} (files: {sorted(a_files)[:10]})")
        if n not in b_files:
            res.failures.append(f"{candidate} wrote no {n} in {b_dir} (files: {sorted(b_files)[:10]})")
    if res.harness or res.failures:
        return res
    sidecar = f"{cls}_debug_tree_NBTRACE.json"  # nbtrace's own documented sidecar (docs/format.md)
    allowed = (full_name, sum_name, sidecar) if candidate == "nbtrace" else (full_name, sum_name)
    if sidecar in b_files and candidate == "nbtrace":
        with open(os.path.join(b_dir, sidecar)) as handle:
            if json.load(handle).get("format") != "nbtrace-sidecar":
                res.failures.append(f"{sidecar} in {b_dir} is not nbtrace's sidecar")
    odd = sorted(f for f in b_files if not f.endswith(".safetensors") and f not in allowed)
    if odd:
        res.failures.append(f"unexpected extra files in {b_dir}: {odd}")

    a_full_b, b_full_b = read_bytes(os.path.join(a_dir, full_name)), read_bytes(os.path.join(b_dir, full_name))
    a_sum_b, b_sum_b = read_bytes(os.path.join(a_dir, sum_name)), read_bytes(os.path.join(b_dir, sum_name))
    a_full = json.loads(a_full_b)
    try:
        b_full = json.loads(b_full_b)
    except ValueError as e:
        res.failures.append(f"{full_name}: not valid JSON ({e})")
        return res

    calls = align_or_report(a_full, capture, prune, res, "transformers FULL", harness=True)
    b_calls = align_or_report(b_full, capture, prune, res, f"{candidate} FULL", harness=False)
    multi = {p for p, n in (capture or {}).get("counts", {}).items() if n > 1}

    # ---- FULL json ---------------------------------------------------------------------------------------
    if a_full_b != b_full_b:
        header = f"{full_name} differs ({'use_repr=True' if use_repr else 'use_repr=False'}):\n"
        diff = first_differences(a_full_b, b_full_b) + unified_diff(
            a_full_b, b_full_b, f"transformers/{full_name}", f"{candidate}/{full_name}")
        if use_repr or candidate != "nbtrace":
            res.failures.append(header + diff)
        else:
            _check_full_value_diffs(a_full, b_full, a_full_b, b_full_b, b_calls, res, header, diff)

    # ---- SUMMARY json ------------------------------------------------------------------------------------
    kept = [(n.get("module_path"), io, kp) for n in iter_nodes(a_full) for io in ("inputs", "outputs")
            for kp in iter_non_tensor_value_keys(n.get(io))]
    res.summary_kept_value_keys = kept
    expected_nb = dump(strip_tensor_values(json.loads(a_full_b)))
    if not kept and expected_nb != a_sum_b:
        res.harness.append(
            "harness: transformers' SUMMARY is not its FULL minus tensor values:\n"
            + unified_diff(a_sum_b, expected_nb, "transformers SUMMARY", "FULL minus tensor values")
        )
    expected = expected_nb if candidate == "nbtrace" else a_sum_b
    if b_sum_b != expected:
        what = ("transformers' SUMMARY" if expected is a_sum_b else
                "transformers' FULL with only tensor records' \"value\" removed (documented difference 2: "
                f"non-tensor 'value' keys are kept: {kept})")
        note = ""
        if b_sum_b == a_sum_b and expected is not a_sum_b:
            note = "\n(the candidate's SUMMARY equals transformers' byte for byte: it strips non-tensor 'value' keys)"
        res.failures.append(
            f"{sum_name} differs from {what}:{note}\n"
            + first_differences(expected, b_sum_b)
            + unified_diff(expected, b_sum_b, f"expected/{sum_name}", f"{candidate}/{sum_name}")
        )
    elif kept and candidate == "nbtrace":
        # and it is exactly transformers' once those kept keys are stripped too
        if dump(transformers_strip(json.loads(b_sum_b))) != a_sum_b:
            res.failures.append(f"{sum_name}: stripping every 'value' key does not give transformers' SUMMARY")

    # ---- safetensors -------------------------------------------------------------------------------------
    a_st = {f for f in a_files if f.endswith(".safetensors")}
    b_st = {f for f in b_files if f.endswith(".safetensors")}
    if use_repr:
        if a_st:
            res.harness.append(f"transformers wrote safetensors files with use_repr=True: {sorted(a_st)[:5]}")
        if b_st:
            res.failures.append(f"{candidate} wrote safetensors files with use_repr=True: {sorted(b_st)[:5]}")
        return res
    _check_safetensors(a_dir, b_dir, cls, a_full, b_full, a_st, b_st, calls, b_calls, multi, capture, res,
                       candidate)
    return res


def align_or_report(tree, capture, prune, res, what, harness):
    if capture is None:
        return None
    try:
        return align(tree, capture["root"], prune)
    except AlignmentError as e:
        (res.harness if harness else res.failures).append(f"{what}: cannot align with the captured calls: {e}")
        return None


def _check_full_value_diffs(a_full, b_full, a_full_b, b_full_b, b_calls, res, header, diff):
    """use_repr=False, nbtrace: only the "value" reference strings of 2nd+ calls of a module may differ."""
    diffs = list(json_diffs(a_full, b_full))
    value_locs = {}  # id(record) -> (node, io, kp)
    for node in iter_nodes(b_full):
        for io in ("inputs", "outputs"):
            for kp, rec in iter_tensor_records(node.get(io)):
                value_locs[id(rec)] = (node, io, kp)
    bad = []
    patched = json.loads(b_full_b)
    allowed = 0
    for path, av, bv in diffs:
        ok = False
        if path and path[-1] == "value" and isinstance(av, str) and isinstance(bv, str):
            rec = lookup(b_full, path[:-1])
            loc = value_locs.get(id(rec))
            if loc is not None and b_calls is not None:
                node, io, kp = loc
                cn = b_calls.get(id(node))
                if cn is not None and cn["idx"] >= 1:
                    ok = True
                    allowed += 1
                    res.new_refs.add(_ref_name(bv) or bv)
                    res.renamed_from.add(_ref_name(av) or av)
                    lookup(patched, path[:-1])["value"] = av
                elif cn is not None:
                    bad.append(f"  {path}: first call ({node['module_path']} call #0) must keep transformers' "
                               f"name {av!r}, got {bv!r}")
                    continue
        if not ok:
            bad.append(f"  {path}: transformers {av!r} vs candidate {bv!r}")
    if bad:
        res.failures.append(header + "differences other than 2nd+ calls' reference strings:\n"
                            + "\n".join(bad[:20]) + ("\n  ..." if len(bad) > 20 else "") + "\n" + diff)
        return
    if dump(patched) != a_full_b:
        res.failures.append(header + "after restoring transformers' names for 2nd+ calls the bytes still differ "
                            "(formatting?):\n" + unified_diff(a_full_b, dump(patched), "transformers", "patched"))
    res.notes.append(f"{allowed} reference string(s) of 2nd+ calls renamed (documented difference 1)")


def _check_safetensors(a_dir, b_dir, cls, a_full, b_full, a_st, b_st, calls, b_calls, multi, capture, res,
                       candidate):
    a_refs = _refs(a_full)
    b_refs = _refs(b_full)
    a_ref_names = {_ref_name(r[3]) for r in a_refs}
    b_ref_names = [_ref_name(r[3]) for r in b_refs]
    json_paths = {n.get("module_path") for n in iter_nodes(a_full)}

    missing_a = sorted(n for n in a_ref_names if n not in a_st)
    if missing_a:
        res.harness.append(f"transformers' FULL references files it did not write: {missing_a[:5]}")
    unref = a_st - a_ref_names
    pruned = {f for f in unref if not f.startswith(f"{cls}_outputs")}
    res.pruned_files = pruned
    not_block = sorted(f for f in pruned if not _is_pruned_block_file(f, json_paths))
    if not_block:
        res.notes.append(f"unreferenced transformers files not under a pruned layer block: {not_block[:5]}")

    # every candidate reference: well formed, unique, present, and the data of its own call
    bad = [r for r, n in zip(b_refs, b_ref_names) if n is None or not n.endswith(".safetensors")]
    for node, io, kp, ref in bad[:5]:
        res.failures.append(f"{node['module_path']} {_fmt_kp(io, kp)}: value {ref!r} is not './<file>.safetensors'")
    seen: dict[str, str] = {}
    for (node, io, kp, _), name in zip(b_refs, b_ref_names):
        where = f"{node['module_path']} {_fmt_kp(io, kp)}"
        if name in seen and candidate == "nbtrace":
            res.failures.append(f"{name} is referenced twice: by {seen[name]} and by {where} (one file per call)")
        seen.setdefault(name, where)
    for f in sorted(set(b_ref_names) - b_st - {None}):
        res.failures.append(f"{candidate} FULL references {f}, which it did not write")

    if capture is not None:
        # transformers as the candidate (harness self-check) overwrites multi-call files: skip those there
        _verify_refs_against_capture(b_dir, b_refs, b_calls, res.failures, candidate,
                                     only_single=candidate != "nbtrace", multi=multi)
        if calls is not None:
            _verify_refs_against_capture(a_dir, a_refs, calls, res.harness, "transformers", only_single=True,
                                         multi=multi)

    # the set of files
    new_refs = {n for n in b_ref_names if n is not None} - a_ref_names
    # transformers' files that only 2nd+ calls referenced (e.g. an arg only the 2nd call passes) are gone
    renamed_away = res.renamed_from - set(b_ref_names)
    expected = (a_st - pruned - renamed_away) | new_refs if candidate == "nbtrace" else a_st
    missing, extra = sorted(expected - b_st), sorted(b_st - expected)
    if missing or extra:
        res.failures.append(
            f"safetensors file set differs from transformers' minus {len(pruned)} pruned-block file(s)"
            f"{' with 2nd+ call files renamed' if new_refs else ''}:\n"
            + (f"  missing ({len(missing)}): {missing[:10]}\n" if missing else "")
            + (f"  extra ({len(extra)}): {extra[:10]}\n" if extra else "")
        )

    # shared files hold the same tensors (except where transformers kept only the last call's data)
    multi_files = {_ref_name(r[3]) for r in a_refs if r[0].get("module_path") in multi}
    for f in sorted(a_st & b_st):
        if f in multi_files and candidate == "nbtrace":
            continue  # transformers: last call's data; nbtrace: first call's (checked against the capture)
        try:
            ta, tb = load_st(os.path.join(a_dir, f)), load_st(os.path.join(b_dir, f))
        except Exception as e:  # noqa: BLE001
            res.failures.append(f"{f}: cannot load ({e})")
            continue
        if list(ta) != list(tb):
            res.failures.append(f"{f}: tensor names {list(ta)} vs {list(tb)}")
            continue
        for k in ta:
            why = tensors_equal(ta[k], tb[k])
            if why:
                res.failures.append(f"{f}[{k!r}]: {why}")


def _verify_refs_against_capture(d, refs, calls, sink, who, only_single, multi=frozenset()):
    if calls is None:
        return
    for node, io, kp, ref in refs:
        name = _ref_name(ref)
        if name is None or not os.path.exists(os.path.join(d, name)):
            continue
        if only_single and node.get("module_path") in multi:
            continue
        cn = calls.get(id(node))
        where = f"{who} {node['module_path']} (call #{cn['idx'] if cn else '?'}) {_fmt_kp(io, kp)} -> {name}"
        try:
            expected = lookup(cn[io], kp)
        except (KeyError, IndexError, TypeError, ValueError):
            sink.append(f"{where}: no tensor at that place in the captured call")
            continue
        try:
            got = load_st(os.path.join(d, name))
        except Exception as e:  # noqa: BLE001
            sink.append(f"{where}: cannot load ({e})")
            continue
        if list(got) != ["data"]:
            sink.append(f"{where}: tensor names {list(got)}, expected ['data']")
            continue
        why = tensors_equal(expected.contiguous(), got["data"])
        if why:
            sink.append(f"{where}: not this call's data: {why}")


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="compare a candidate's debug folder with transformers'")
    p.add_argument("a_dir")
    p.add_argument("b_dir")
    p.add_argument("cls")
    p.add_argument("--safetensors", action="store_true")
    p.add_argument("--capture")
    p.add_argument("--candidate", default="nbtrace")
    p.add_argument("--no-prune", action="store_true")
    o = p.parse_args(argv)
    cap = None
    if o.capture:
        import torch

        cap = torch.load(o.capture, weights_only=True)
    r = compare_run(o.a_dir, o.b_dir, o.cls, not o.safetensors, cap, o.candidate, not o.no_prune)
    for m in r.harness:
        print("HARNESS:", m)
    for m in r.failures:
        print("FAIL:", m)
    for m in r.notes:
        print("note:", m)
    return 1 if (r.failures or r.harness) else 0


if __name__ == "__main__":
    raise SystemExit(main())
