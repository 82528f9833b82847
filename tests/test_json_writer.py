"""The trace writer produces the bytes of json.dump(tree, f, indent=2), faster."""

from __future__ import annotations

import json
import random

from nbtrace.capture.write import encode_tree


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
