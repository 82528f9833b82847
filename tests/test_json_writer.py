"""The trace writer produces the bytes of json.dump(tree, f, indent=2), faster."""

from __future__ import annotations

import json
import random

from nbtrace.capture.write import encode_tree, encode_trees, summary_tree


def random_value(rng: random.Random, depth: int = 0):
    kinds = ["str", "none", "list_str"] + (["dict", "list"] if depth < 5 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return "".join(rng.choice('ab "\\\n\t\u00e9\u4e2d/\x00\U0001f600') for _ in range(rng.randrange(6)))
    if kind == "none":
        return None
    if kind == "list_str":
        return ["x" * rng.randrange(3) + "é" for _ in range(rng.randrange(4))]
    if kind == "dict":
        keys = ["k", "module_path", "é", "a\"b", 1, 2.5, True, None]
        return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_same_bytes_as_json_dump_with_indent_2():
    rng = random.Random(0)
    for _ in range(2000):
        tree = {"module_path": "M", "inputs": random_value(rng), "children": [random_value(rng)]}
        assert encode_tree(tree) == json.dumps(tree, indent=2).encode("utf-8")


def test_numbers_and_booleans_are_written_as_json_writes_them():
    tree = {"a": [1, 2.5, True, False, None, float("nan")], "b": {}, "c": [], "d": {"e": []}}
    assert encode_tree(tree) == json.dumps(tree, indent=2).encode("utf-8")


def random_record(rng: random.Random) -> dict:
    record = {"shape": "torch.Size([2])", "dtype": "torch.float32"}
    extra = [("value", ["tensor([1., 2.])"] if rng.random() < 0.7 else "./a.safetensors"), ("mean", "tensor(1.5)")]
    rng.shuffle(extra)
    items = list(record.items()) + extra[: rng.randrange(3)]
    if rng.random() < 0.1:  # contrived: "value" first
        items = [("value", "x")] + items
    return dict(items)


def test_one_walk_writes_the_full_file_and_the_summary_of_summary_tree():
    rng = random.Random(1)
    shared = ["tensor([1., 2.])", "line two"]  # lines shared by records, as reused tensors share them
    for _ in range(1000):
        records = [random_record(rng) for _ in range(rng.randrange(4))]
        for record in records:
            if "value" in record and rng.random() < 0.3:
                record["value"] = shared
        tree = {"module_path": "M", "inputs": {"args": records, "value": random_value(rng)},
                "children": [{"module_path": "M.a", "outputs": random_record(rng)}, random_value(rng)]}
        full, summary = encode_trees(tree)
        assert full == json.dumps(tree, indent=2).encode("utf-8")
        assert summary == json.dumps(summary_tree(tree), indent=2).encode("utf-8")
