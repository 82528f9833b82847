"""Tree helpers of the compatibility harness: canonical JSON, walking records and diffs, and matching
the JSON tree to the reference capture of every call."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Iterator

TENSOR_KEYS = {"shape", "dtype", "value", "mean", "std", "min", "max"}
LAYER_SUFFIX_RE = re.compile(r"(.*)\.(\d+)$")
MAX_DIFF_LINES = 40


# ---------------------------------------------------------------------------------------------------------
# JSON helpers
# ---------------------------------------------------------------------------------------------------------


def dump(obj: Any) -> bytes:
    """Bytes exactly as transformers writes them: ``json.dump(obj, f, indent=2)`` into a utf-8 text file."""
    return json.dumps(obj, indent=2).encode("utf-8")


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def is_tensor_record(d: Any) -> bool:
    return isinstance(d, dict) and "shape" in d and "dtype" in d and set(d) <= TENSOR_KEYS


def iter_nodes(node: dict) -> Iterator[dict]:
    """Pre-order (= call order) over a JSON call tree."""
    yield node
    for child in node.get("children", []) or []:
        yield from iter_nodes(child)


def iter_tensor_records(io: Any, keypath: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    if is_tensor_record(io):
        yield keypath, io
    elif isinstance(io, dict):
        for k, v in io.items():
            yield from iter_tensor_records(v, keypath + (k,))
    elif isinstance(io, list):
        for i, v in enumerate(io):
            yield from iter_tensor_records(v, keypath + (i,))


def iter_non_tensor_value_keys(io: Any, keypath: tuple = ()) -> Iterator[tuple]:
    """Key paths of dict keys named "value" that are NOT a tensor record's own "value" (e.g. a kwarg)."""
    if is_tensor_record(io):
        return
    if isinstance(io, dict):
        for k, v in io.items():
            if k == "value":
                yield keypath + (k,)
            yield from iter_non_tensor_value_keys(v, keypath + (k,))
    elif isinstance(io, list):
        for i, v in enumerate(io):
            yield from iter_non_tensor_value_keys(v, keypath + (i,))


def transformers_strip(tree: dict) -> dict:
    """transformers' SUMMARY: drop every dict key named "value" anywhere in inputs/outputs (in place)."""

    def clean(val):
        if isinstance(val, dict):
            val.pop("value", None)
            for v in val.values():
                clean(v)
        elif isinstance(val, list):
            for item in val:
                clean(item)

    for node in iter_nodes(tree):
        clean(node.get("inputs", {}))
        clean(node.get("outputs", {}))
    return tree


def strip_tensor_values(tree: dict) -> dict:
    """nbtrace's SUMMARY: drop "value" from tensor records only (in place)."""
    for node in iter_nodes(tree):
        for io in ("inputs", "outputs"):
            for _, rec in iter_tensor_records(node.get(io)):
                rec.pop("value", None)
    return tree


def describe_json_path(tree: dict, path: tuple) -> str:
    """('children', 2, 'inputs', 'args', 0, 'value') -> "Cls.sub inputs['args'][0]['value']"."""
    node, i = tree, 0
    while i + 1 < len(path) and path[i] == "children" and isinstance(path[i + 1], int):
        try:
            node = node["children"][path[i + 1]]
        except (KeyError, IndexError, TypeError):
            break
        i += 2
    rest = path[i:]
    where = (rest[0] if rest else "") + "".join(f"[{k!r}]" for k in rest[1:])
    return f"{node.get('module_path', '?')} {where}".strip()


def first_differences(a_bytes: bytes, b_bytes: bytes, limit: int = 8) -> str:
    """The first differing places of two JSON trees, by module path (empty if either is not JSON)."""
    try:
        a, b = json.loads(a_bytes), json.loads(b_bytes)
    except ValueError:
        return ""
    lines = []
    for path, av, bv in json_diffs(a, b):
        if len(lines) == limit:
            lines.append("  ...")
            break
        short = lambda v: (repr(v)[:100] + "...") if len(repr(v)) > 100 else repr(v)  # noqa: E731
        lines.append(f"  {describe_json_path(a, path)}: {short(av)} -> {short(bv)}")
    return ("first differing places (transformers -> candidate):\n" + "\n".join(lines) + "\n") if lines else ""


def unified_diff(a: bytes, b: bytes, a_name: str, b_name: str, max_lines: int = MAX_DIFF_LINES) -> str:
    """A unified diff cut after ``max_lines`` differing lines, with a count of the rest."""
    a_lines = a.decode("utf-8", "replace").splitlines()
    b_lines = b.decode("utf-8", "replace").splitlines()
    out, changed, total = [], 0, 0
    for line in difflib.unified_diff(a_lines, b_lines, a_name, b_name, n=2, lineterm=""):
        is_change = line[:1] in "+-" and not line.startswith(("+++", "---"))
        total += is_change
        if changed < max_lines:
            out.append(line)
            changed += is_change
    if total > changed:
        out.append(f"... ({total - changed} more differing lines; {len(a_lines)} vs {len(b_lines)} lines in all)")
    return "\n".join(out)


def json_diffs(a: Any, b: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any, Any]]:
    """Structural differences (key order counts: it shows in the bytes)."""
    if type(a) is not type(b):
        yield path, a, b
    elif isinstance(a, dict):
        if list(a) != list(b):
            yield path + ("<keys>",), list(a), list(b)
        for k in a:
            if k in b:
                yield from json_diffs(a[k], b[k], path + (k,))
    elif isinstance(a, list):
        if len(a) != len(b):
            yield path + ("<len>",), len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            yield from json_diffs(x, y, path + (i,))
    elif a != b:
        yield path, a, b


# ---------------------------------------------------------------------------------------------------------
# capture alignment and tensor lookup
# ---------------------------------------------------------------------------------------------------------


class AlignmentError(Exception):
    pass


def _capture_is_layer_block(cn: dict) -> bool:
    m = LAYER_SUFFIX_RE.match(cn["path"])
    if not m or not cn["children"]:
        return False
    return any(f".{m.group(2)}." in c["path"] for c in cn["children"])


def _kept_children(cn: dict, prune: bool) -> list[dict]:
    """The calls under ``cn`` that the JSON keeps: transformers' prune_intermediate_layers on the capture."""
    children = cn["children"]
    if not prune:
        return children
    blocks = [i for i, c in enumerate(children) if _capture_is_layer_block(c)]
    drop = set(blocks[1:-1]) if len(blocks) > 2 else set()
    return [c for i, c in enumerate(children) if i not in drop]


def align(jroot: dict, croot: dict, prune: bool) -> dict[int, dict]:
    """Map id(json node) -> capture node (a call, with its call index). The JSON tree must be exactly the
    captured call tree with transformers' layer pruning applied (when ``prune``)."""
    mapping: dict[int, dict] = {}

    def rec(jn, cn):
        if jn.get("module_path") != cn["path"]:
            raise AlignmentError(f"json node {jn.get('module_path')!r} vs call {cn['path']!r}")
        mapping[id(jn)] = cn
        jch = jn.get("children", []) or []
        cch = _kept_children(cn, prune)
        if [j.get("module_path") for j in jch] != [c["path"] for c in cch]:
            raise AlignmentError(
                f"children of {cn['path']!r}: json {[j.get('module_path') for j in jch]} vs expected calls "
                f"{[c['path'] for c in cch]}"
            )
        for j, c in zip(jch, cch):
            rec(j, c)

    rec(jroot, croot)
    return mapping


def _json_key(k: Any) -> str:
    return next(iter(json.loads(json.dumps({k: 0}))))


def lookup(struct: Any, keypath: tuple) -> Any:
    cur = struct
    for k in keypath:
        if isinstance(cur, list):
            cur = cur[int(k)]
        elif isinstance(cur, dict):
            if k in cur:
                cur = cur[k]
            else:  # json turned a non-str key (int, float, bool, None) into str
                matches = [v for kk, v in cur.items() if _json_key(kk) == k]
                if not matches:
                    raise KeyError(k)
                cur = matches[0]
        else:
            raise KeyError(k)
    return cur


def tensors_equal(a, b) -> str | None:
    """None if equal (dtype, shape, values; NaNs in the same places), else why not."""
    import torch

    if a.dtype != b.dtype:
        return f"dtype {a.dtype} != {b.dtype}"
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    if torch.equal(a, b):
        return None
    if a.is_floating_point() and torch.equal(torch.isnan(a), torch.isnan(b)):
        mask = ~torch.isnan(a)
        if torch.equal(a[mask], b[mask]):
            return None
    diff = (a.double() - b.double()).abs()
    return f"values differ (max abs diff {diff.nan_to_num(nan=float('inf')).max().item():.3e})"


def load_st(path: str) -> dict:
    from safetensors.torch import load_file

    return load_file(path)
