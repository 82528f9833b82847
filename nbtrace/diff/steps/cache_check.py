"""Did both sides update their KV cache alike in one step? The check behind a cache divergence.

A layer whose cache is not updated computes the right output in the step where it forgets
to store (it attends to what it just computed) and goes wrong one step later, where it
reads the stale cache. The trace shows the second; the ``generation`` section of the
sidecar (``core/generation.py``) shows the first: how many positions each layer's cache
grew by in the step, and the mean, std and largest magnitude of the keys and values it
appended. Those stats do not depend on how a port lays its cache out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.generation import CACHE_ARGUMENTS, CacheFacts
from ...core.node import Node
from ...core.paths import role
from ...core.trace import Trace
from ..measure.metrics import default_tolerance

#: relative tolerance of the appended keys'/values' stats, against their largest magnitude: at least this,
#: and twice the default of the cache's dtype (``metrics.TOLERANCE``)
CACHE_STATS_RTOL = 1e-3
_STAT_NAMES = ("mean", "std", "absmax")


@dataclass
class CacheDivergence:
    """A step whose trace agrees but whose KV cache update does not: the first divergence of a run.

    ``layer`` is the cache layer; ``module_path`` the call of a that reads and writes it (its
    attention), ``b_path`` the same in b. ``reason`` says what differs.
    """

    step: int
    layer: int
    module_path: str
    b_path: str | None
    reason: str
    exact: bool = True

    def __str__(self) -> str:
        b = f" (b: {self.b_path})" if self.b_path and self.b_path != self.module_path else ""
        return f"first divergence: {self.module_path}{b}\n  {self.reason}"


def cache_difference(a: CacheFacts, b: CacheFacts) -> tuple[int, str, bool] | None:
    """The first layer whose cache update differs between ``a`` and ``b``, how, and whether it is in the
    number of positions appended (True) rather than in what was appended; None when they agree.

    Only the update of this step counts (positions appended, their keys' and values' stats):
    a cache that was already longer or shorter before the step was reported when it happened.
    """
    if len(a.length) != len(b.length):
        return None  # different depths: the trace's own comparison has something to say
    for layer, (grew_a, grew_b) in enumerate(zip(a.appended, b.appended)):
        if grew_a != grew_b:
            what = "was not updated" if grew_b == 0 else f"grew by {grew_b}"
            return layer, (
                f"layer {layer}'s KV cache {what} in b (a appended {grew_a} position{'s' if grew_a != 1 else ''}): "
                f"after this step it holds {b.length[layer]} positions in b, {a.length[layer]} in a; the step's own "
                "outputs can still agree, the next step reads the difference"
            ), True
    rtol = max(CACHE_STATS_RTOL, 2 * default_tolerance(a.dtype or "float32", b.dtype or "float32")[0])
    for layer in range(len(a.length)):
        for kind, rows_a, rows_b in (("keys", a.new_keys, b.new_keys), ("values", a.new_values, b.new_values)):
            x, y = rows_a[layer], rows_b[layer]
            if x is None or y is None:
                continue
            scale = max(abs(x[2]), abs(y[2]), 1e-30)
            worst = max(range(3), key=lambda i: abs(x[i] - y[i]))
            if abs(x[worst] - y[worst]) > rtol * scale:
                return layer, (
                    f"the {kind} layer {layer} appended to its KV cache in this step differ: {_STAT_NAMES[worst]} "
                    f"{y[worst]:.4g} in b, {x[worst]:.4g} in a"
                ), False
    return None


def _takes_cache(node: Node) -> bool:
    kwargs = node.inputs.get("kwargs") if isinstance(node.inputs, dict) else None
    if not isinstance(kwargs, dict):
        return False
    return any(isinstance(kwargs.get(name), str) and kwargs.get(name) != "None" for name in CACHE_ARGUMENTS)


def cache_user(trace: Trace, layer: int) -> str | None:
    """The module that reads and writes ``layer`` of the KV cache, or None when none is found.

    Among the innermost calls given the cache (attention modules), the one in layer block
    ``layer``; when pruning left that block out, the same module of another block with its
    layer number replaced; for calls outside any layer stack, the ``layer``-th of them.
    """
    users = [node for node in trace.nodes() if _takes_cache(node)]
    inner = [node for node in users if not any(_takes_cache(child) for child in node.children)]
    for node in inner:
        if node.layer == layer:
            return node.module_path
    for node in inner:
        where = role(node.module_path)
        if where is not None:
            return where.replace("#", str(layer), 1)
    return inner[layer].module_path if layer < len(inner) else None
