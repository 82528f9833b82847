"""One backward pass's records, completed and written beside its forward's files (``core/gradients.py``).

The gradients of a pass are recorded as they arrive, by the Serializer the forward uses (stats and printed lines
computed on their device, one transfer at the end; with ``use_repr=False`` a safetensors file each, in the folder
``<Class>_backward_tensors/`` beside the trace, a later pass's files suffixed ``_pass<p>``). When the pass ends,
each forward it reached gets its file written again with every pass recorded for it so far.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...core.gradients import BACKWARD_FORMAT, BACKWARD_VERSION, backward_path, forward_digest
from ..serialize import Serializer
from ..write import TensorStore, write_atomic
from .calls import CallGrads

if TYPE_CHECKING:  # pragma: no cover
    from ..recorded import Recorded
    from ..recorder import Recorder


def tensors_folder(class_name: str) -> str:
    """The name of the folder a backward's safetensors files go into, beside the trace files."""
    return f"{class_name}_backward_tensors"


def move_backward_files(recorded: Recorded, class_name: str) -> None:
    """The forward's files moved into ``forward_<i>/`` (``Recorder._keep_previous_forward``): its backward's follow
    them from the folder above, where they were written."""
    if recorded.source is None or not recorded.source.parent.name.startswith("forward_"):
        return
    above = recorded.source.parent.parent
    for name in (backward_path(recorded.source).name, tensors_folder(class_name)):
        if (above / name).exists() and not (recorded.source.parent / name).exists():
            os.replace(above / name, recorded.source.parent / name)


class PassWriter:
    """The records of one backward pass, per forward it reached, until the pass ends."""

    def __init__(self, recorder: Recorder, passes: dict[int, list[dict[str, Any]]],
                 skeletons: dict[int, Any], use_repr: bool, twins: dict[int, dict[str, Any]]) -> None:
        self.recorder = recorder
        self.passes = passes
        self.skeletons = skeletons
        self.use_repr = use_repr
        self._serializers: dict[int, Serializer] = {}
        self._stores: dict[int, TensorStore] = {}
        self._touched: dict[int, list[CallGrads]] = {}
        self._parameters: list[tuple[str, torch.Tensor]] = []
        #: forward index -> call name -> place -> the norm of its gradient (a layer block pruning left out)
        self._norms: dict[int, dict[str, dict[str, torch.Tensor]]] = {}
        self.twins = twins  # forward index -> its float64 twin's backward (``twin.py``), where it ran

    def _serializer(self, forward: int) -> Serializer | None:
        serializer = self._serializers.get(forward)
        if serializer is None:
            if forward >= len(self.recorder._recorded):
                return None  # a backward run inside its own forward: not recorded
            store = None
            if not self.use_repr:
                folder = self.recorder._recorded[forward].base_dir / tensors_folder(self.recorder.class_name)
                folder.mkdir(parents=True, exist_ok=True)
                store = self._stores[forward] = TensorStore(folder)
            serializer = self._serializers[forward] = Serializer(self.use_repr, store)
        return serializer

    def _name(self, forward: int, name: str) -> str:
        done = len(self.passes.get(forward, ()))
        return name if done == 0 else f"{name}_pass{done}"

    def record(self, forward: int, grad: torch.Tensor, name: str) -> Any:
        """The record of one caught gradient (complete once the pass ends)."""
        serializer = self._serializer(forward)
        if serializer is None:
            return "None"
        if not self.use_repr:
            grad = grad.detach().clone()  # the file is written later; autograd may accumulate into ``grad``
        return serializer(grad.detach(), self._name(forward, name))

    def touched(self, grads: CallGrads) -> None:
        calls = self._touched.setdefault(grads.forward, [])
        if not grads.caught or len(grads.caught) == 1:
            calls.append(grads)

    def norm(self, forward: int, call: str, place: str, grad: torch.Tensor) -> None:
        """Keep the norm of one gradient of a layer block pruning left out (computed where it is, read at the end)."""
        if forward >= len(self.recorder._recorded):
            return
        self._norms.setdefault(forward, {}).setdefault(call, {})[place] = torch.linalg.vector_norm(
            grad.detach(), dtype=torch.float64 if grad.dtype == torch.float64 else torch.float32)
        self._touched.setdefault(forward, [])

    def _read_norms(self, forward: int) -> dict[str, dict[str, float | None]]:
        """The pass's norms of ``forward``'s pruned layer blocks as numbers (one transfer per device)."""
        kept = self._norms.get(forward, {})
        flat = [(call, place, value) for call, places in kept.items() for place, value in places.items()]
        by_device: dict[torch.device, list[int]] = {}
        for i, (_, _, value) in enumerate(flat):
            by_device.setdefault(value.device, []).append(i)
        numbers: list[float | None] = [None] * len(flat)
        for positions in by_device.values():
            values = torch.stack([flat[i][2].double() for i in positions]).cpu().tolist()
            for i, value in zip(positions, values):
                numbers[i] = value if math.isfinite(value) else None
        out: dict[str, dict[str, float | None]] = {}
        for (call, place, _), number in zip(flat, numbers):
            out.setdefault(call, {})[place] = number
        return out

    def parameter(self, name: str, grad: torch.Tensor) -> None:
        self._parameters.append((name, grad.detach().clone() if not self.use_repr else grad.detach()))

    def finish(self, now: float) -> None:
        """Complete every record of the pass and write each forward's backward file."""
        forwards = sorted(self._touched)
        if not forwards and self._parameters and self.recorder._recorded:
            forwards = [len(self.recorder._recorded) - 1]
        if not forwards:
            return
        parameters: dict[str, Any] = {}
        target = forwards[-1]
        serializer = self._serializer(target)
        if serializer is not None:
            for name, grad in self._parameters:
                parameters[name] = serializer(grad, self._name(target, f"{name}_grad"))
        for forward in forwards:
            serializer = self._serializer(forward)
            if serializer is None:
                continue
            serializer.finish()
            store = self._stores.get(forward)
            if store is not None:
                store.flush()
            skeleton = self.skeletons.get(forward)
            tree = _tree(skeleton) if skeleton is not None else {"module_path": self.recorder.class_name}
            one: dict[str, Any] = {"tree": tree, "parameters": parameters if forward == target else {}}
            norms = self._read_norms(forward)
            if norms:
                one["norms"] = norms
            self.passes.setdefault(forward, []).append(one)
            self._write(forward)
        for calls in self._touched.values():
            for grads in calls:
                grads.caught = {}

    def _write(self, forward: int) -> None:
        recorded = self.recorder._recorded[forward]
        if recorded.source is None:
            return
        document = {
            "format": BACKWARD_FORMAT,
            "version": BACKWARD_VERSION,
            "forward": forward_digest(recorded.source),
            "tensors": None if self.use_repr else tensors_folder(self.recorder.class_name),
            "passes": self.passes[forward],
        }
        if forward in self.twins:
            document["twin"] = self.twins[forward]
        text = json.dumps(document, indent=1)
        write_atomic(backward_path(recorded.source), text.encode("utf-8"))


def _tree(skeleton: tuple) -> dict[str, Any]:
    path, grads, children = skeleton
    node: dict[str, Any] = {"module_path": path}
    if grads is not None and grads.caught:
        node["inputs"] = grads.structure("inputs")
        node["outputs"] = grads.structure("outputs")
    if children:
        node["children"] = [_tree(child) for child in children]
    return node
