"""TraceView at scale: a 20,000-call trace gives a small initial payload, quickly, and details only on demand."""

from __future__ import annotations

import json
import time

from tests.models.widget_models import synthetic_trace

from nbtrace.notebook import payload as P
from nbtrace.notebook.view import TraceView


def test_twenty_thousand_calls_payload_is_small_and_fast():
    trace = synthetic_trace(nan_layer=321)
    assert len(trace) >= 20_000
    started = time.perf_counter()
    view = TraceView(trace)
    seconds = time.perf_counter() - started
    size = len(view.payload.encode())
    print(f"\n{len(trace)} calls: payload {size / 1024:.0f} KiB, built in {seconds:.2f} s")
    assert size < 600 * 1024  # about 22 bytes per call
    assert seconds < 5  # ~0.5 s here; generous for a loaded CI machine
    rows = view.rows
    first = rows["first_nonfinite"]
    assert view._row_nodes[first].module_path == "BigMoE.layers.321.mlp.experts.3.down_proj"
    # the detail of one call is asked for separately and is small
    detail = view.detail(first)
    assert detail["tensors"][1]["nonfinite"] is True
    assert len(json.dumps(detail)) < 2000


def test_payload_columns_line_up():
    trace = synthetic_trace(layers=3)
    payload, row_nodes = P.tree_payload(trace)
    columns = ("depth", "seg", "flags", "output", "mean", "std")
    assert {len(payload[c]) for c in columns} == {len(row_nodes)} == {len(trace)}
    assert all(isinstance(x, int) for c in ("depth", "seg", "flags", "output") for x in payload[c])
