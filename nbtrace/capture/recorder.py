"""The Recorder: turns the module calls of each top-level forward into a call tree, files and a Trace.

``context.py`` routes every wrapped ``forward`` here (``call_module``/``call_top``). Submodule calls run under
``torch.no_grad()``; the top-level forward runs in the caller's grad mode.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.collector import older_objects_frozen
from ..core.generation import GENERATION_SECTION
from ..core.measured import NUMERICS_SECTION, ROUNDING_SECTION
from ..core.ranks import SECTION as DISTRIBUTED
from ..core.run import RUN_SECTION, run_section
from ..core.sidecar import sidecar_path
from ..core.kept_inputs import INPUTS_SECTION, inputs_section
from ..core.trace import Trace
from ..core.sketch import SKETCH_SECTION
from ..core.twin import TWIN_SECTION
from .generation import GenerationProbe
from .numerics import model_devices, numerics_section
from .parameters import ParameterFingerprints
from .prune import prune_intermediate_layers, prune_outputs_of_parents
from .ranks import RankPlan, ShardLayouts
from .recorded import Recorded, RecordedTraces
from .repr_text import error_record
from .rounding import Measures, RoundingMeter
from .runs import remove_earlier_forwards
from .call_facts import any_autocast as _any_autocast
from .call_facts import autocast_state
from .backward import enter_top, in_backward
from .serialize import Serializer
from .sketch import RunSketch
from .speculate import Frame, Site, Speculation, numbered_containers
from .write import TensorStore, tree_refs, write_sidecar, write_trace_files
from .writer import drop_refs

_set_grad_enabled = torch._C._set_grad_enabled


class Recorder:
    """What ``nbtrace.trace`` yields: the traces recorded inside the block.

    ``trace`` is the last completed top-level forward (None before one completes); ``traces`` holds every
    top-level forward, in order (earlier ones are read back from their files on access: see ``recorded.py``).
    """

    def __init__(
        self,
        model: nn.Module,
        folder: Path | None,
        do_prune_layers: bool,
        use_repr: bool,
        rank_plan: RankPlan | None = None,
    ) -> None:
        self.model = model
        self.rank_plan = rank_plan  # set when the trace gets a ``distributed`` sidecar section (ranks.py)
        self.class_name = type(model).__name__
        self.folder = folder
        self.do_prune_layers = do_prune_layers
        self.use_repr = use_repr
        self._recorded: list[Recorded] = []
        #: names this block's forwards as one run in their sidecars (``core/run.py``)
        self.run_id = uuid.uuid4().hex
        self._run: _ForwardRun | None = None
        self._previous_store: TensorStore | None = None
        self._containers = numbered_containers(model, self.class_name)
        self._fingerprints = ParameterFingerprints(model, self.class_name)
        self._site = Site(self.class_name, True)  # the model re-entering its own forward
        self._top_site = Site(f"{self.class_name} (top-level)", True)
        #: a module called outside the model's forward recorded as a forward of its own, and a printed forward without
        #: its twin sketched (``sketch.py``): ``nbtrace.trace``'s; neither in the drop-in (transformers' files, cost)
        self.record_outside = self.sketch_runs = True
        #: measures rounding as it records (``measure_rounding``, ``rounding.py``); None when off
        self.rounding: RoundingMeter | None = None
        self._devices: list[str] | None = None  # the model's devices, for the numerics section (first forward)
        self.backward: Any = None  # records the block's backward passes (``backward=True``, ``capture/backward/``)

    @property
    def traces(self) -> RecordedTraces:
        """Every top-level forward recorded so far, in order (a sequence of Traces, each built or read on access)."""
        return RecordedTraces(self._recorded)

    @property
    def trace(self) -> Trace | None:
        return self._recorded[-1].trace() if self._recorded else None

    def __len__(self) -> int:
        """How many top-level forwards have been recorded."""
        return len(self._recorded)

    def __repr__(self) -> str:
        return f"<Recorder {self.class_name}: {len(self._recorded)} forward(s) recorded>"

    # -- one module call -----------------------------------------------------
    def call_module(self, site: Site, forward: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        run = self._run
        if self.backward is not None and (run is not None or in_backward()):  # capture/backward/capture.py
            return self.backward.call_module(run, site, forward, args, kwargs)
        if run is None:  # called outside the traced model's forward
            if self.record_outside:  # a forward of its own (the encoder generate runs before the decoder's steps)
                return self.call_outside(site, forward, args, kwargs)
            with torch.no_grad():  # not recorded, as transformers' debugger does
                return forward(*args, **kwargs)
        path = site.path
        count = run.calls[path] = run.calls.get(path, 0) + 1
        # Later calls get "@n": a first call's file name (transformers' name) never contains it.
        base = path if count == 1 else f"{path}@{count}"
        if kwargs:
            inputs = {"args": args, "kwargs": kwargs} if args else {"kwargs": kwargs}
        else:
            inputs = {"args": args} if args else {}
        node = run.open(site, inputs, f"{base}_inputs")
        if _any_autocast():  # replay runs this call again as it ran (diff/replay)
            run.autocast[id(node)] = autocast_state()
        grad = torch.is_grad_enabled()
        _set_grad_enabled(False)  # torch.no_grad(), without the cost of a context manager per call
        if run.sketch is not None:
            run.sketch.enter(base, args, kwargs, site, forward)
        try:
            try:
                out = forward(*args, **kwargs)
            finally:
                _set_grad_enabled(grad)
        except BaseException as exc:
            run.close(node, error=exc)
            raise
        if run.sketch is not None:
            run.sketch.leave(base, out)
        try:
            if not site.has_children:
                run.record(node, "outputs", out, f"{base}_outputs")
        finally:
            run.close(node)
        return out

    # -- the top-level forward -----------------------------------------------
    def call_top(self, forward: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        if self._run is not None:  # the model re-entered its own forward: record it as a call
            return self.call_module(self._site, forward, args, kwargs)
        with older_objects_frozen():  # the collector's passes over every older object: a third of a large trace
            return self._forward(forward, args, kwargs, self._top_site, self.class_name, self.model)

    def call_outside(self, site: Site, forward: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A module of the model called while none of its forwards runs (the encoder an encoder-decoder's
        ``generate`` runs once before the decoder's steps): recorded as a forward of its own, rooted at that
        module (its path, ``Model.model.encoder``), with its own float64 twin, between the model's forwards."""
        __tracebackhide__ = True
        with torch.set_grad_enabled(self.backward is not None and torch.is_grad_enabled()), older_objects_frozen():
            return self._forward(forward, args, kwargs, Site(site.path, True), site.path,
                                 getattr(forward, "__self__", None))

    def _forward(self, forward: Callable, args: tuple, kwargs: dict[str, Any], top_site: Site, root: str,
                 module: nn.Module | None) -> Any:
        """One forward rooted at ``root``: the model's (``call_top``: its class name, the KV cache and picked token
        probed) or one of its modules' (``call_outside``: its path); ``module`` runs as its float64 twin."""
        __tracebackhide__ = True
        self._begin_forward(root)
        run = self._run
        assert run is not None
        try:
            forward, shown, inputs = enter_top(self.backward, forward, args, kwargs, root)  # capture/backward/
            node = run.open(top_site, inputs, f"{root}_inputs")
            if _any_autocast():
                run.autocast[id(node)] = autocast_state()
            probe = GenerationProbe.start(args, kwargs) if module is self.model else None
            measures = self.rounding.start(run, args, kwargs, module) if self.rounding is not None else None
            if self.rounding is None and self.use_repr and self.sketch_runs:  # printed, no twin (``sketch.py``)
                run.sketch = RunSketch(run.serialize.batch, args, kwargs, run.speculation)
                run.sketch.enter(root, args, kwargs)
            try:
                out = forward(*args, **kwargs)
            except BaseException as exc:
                run.close(node, error=exc)
                self._end_forward(run, node, failed=True)
                raise
            try:
                # The format drops the outputs of a call with children; only their files stay (safetensors).
                if not self.use_repr or not node["children"]:
                    run.record(node, "outputs", shown(out), f"{root}_outputs")
            except BaseException as exc:  # e.g. a full disk: the trace of what ran, marked
                run.close(node, error=exc)
                self._end_forward(run, node, failed=True)
                raise
            if run.sketch is not None:
                run.sketch.leave(root, out)
            run.close(node)
            if measures is not None:
                self.rounding.top_done(measures, out)  # type: ignore[union-attr]
            if probe is not None:
                run.generation_done = probe.finish(out, run.serialize.batch)
            self._end_forward(run, node, failed=False)
            return out
        finally:
            self._run = None

    def _begin_forward(self, root: str) -> None:
        if self._previous_store is not None and self._recorded:
            self._keep_previous_forward()
        if not self._recorded and self.folder is not None:
            remove_earlier_forwards(self.folder, self.class_name)
        store = TensorStore(self.folder or Path(".").resolve())
        serializer = Serializer(self.use_repr, store)
        containers = self._containers if self.do_prune_layers else {}
        self._run = _ForwardRun(serializer, store, containers, root)
        if self._devices is None:
            self._devices = model_devices(self.model)
        self._run.sidecar[NUMERICS_SECTION] = numerics_section(self._devices)
        if self.rank_plan is not None:
            self._run.layouts = ShardLayouts()
            serializer.on_shard = self._run.layouts.note

    def _keep_previous_forward(self) -> None:
        """Move the files of the previous forward into ``forward_<i>/`` so the next one cannot overwrite them."""
        previous = self._recorded[-1]
        store = self._previous_store
        assert store is not None
        if previous.index == 0 and previous.source is not None:  # now a run of several: it gets its sections
            previous.sidecar.update(self._run_sections(previous, previous.durations_in_order()))
            try:
                write_sidecar(store.folder, self.class_name, previous.sidecar)
            except OSError as exc:
                warnings.warn(f"nbtrace could not write the sidecar of forward 0: {exc}", stacklevel=4)
        destination = store.folder / f"forward_{len(self._recorded) - 1}"
        source = previous.source
        json_files = [source, _summary_path(source), sidecar_path(source)] if source is not None else []
        store.move_to(destination, [p for p in json_files if p is not None])
        previous.moved_to(destination)
        previous.release()
        self._previous_store = None

    def _run_sections(self, recorded: Recorded, durations: list[float | None]) -> dict[str, Any]:
        """The sidecar sections a forward of a run of several carries: ``run``, and ``generation`` if any."""
        sections: dict[str, Any] = {RUN_SECTION: run_section(self.run_id, recorded.index, durations)}
        if recorded.generation:
            sections[GENERATION_SECTION] = recorded.generation
        return sections

    def _end_forward(self, run: _ForwardRun, top: dict[str, Any], failed: bool) -> None:
        lost = None
        try:
            run.store.flush()  # every safetensors file of the forward on disk, or the first failure
        except OSError as exc:  # the trace keeps what was written, marked with the error (raised below)
            lost = exc
            top.setdefault("error", error_record(exc))
            drop_refs([top], run.store.failed())
        root: dict[str, Any] = {"module_path": run.root}
        for key in ("inputs", "outputs", "error", "children"):
            if key in top and top[key]:
                root[key] = top[key]
        failed_before, failed = failed, failed or lost is not None
        run.durations[id(root)] = run.durations.get(id(top))
        if id(top) in run.autocast:
            run.autocast[id(root)] = run.autocast[id(top)]
        parameters = self._fingerprint_parameters(run)
        removed = prune_intermediate_layers(root) if self.do_prune_layers else []
        prune_outputs_of_parents(root)
        index = len(self._recorded)
        recorded = Recorded(index, root, None, run.store.folder, run.durations, run.sidecar, None, run.autocast)
        try:
            # The forward's one transfer: every record gets its lines and stats, and the sidecar its numbers.
            run.serialize.finish()
            self._fill_sidecar(run, root, recorded, parameters)
            if removed and not self.use_repr:
                run.store.discard(tree_refs(removed))
            full, _ = write_trace_files(root, run.store.folder, self.class_name)
            write_sidecar(run.store.folder, self.class_name, run.sidecar, run.encoded)
        except Exception as exc:
            if not failed:
                raise
            warnings.warn(f"nbtrace could not write the trace of the failed forward: {exc}", stacklevel=3)
            full = None
        recorded.source = full
        self._recorded.append(recorded)
        if self.backward is not None:
            self.backward.forward_done(index, top, root)
        self._previous_store = run.store
        if lost is not None and failed_before is False:
            raise lost

    def _fill_sidecar(
        self, run: _ForwardRun, root: dict[str, Any], recorded: Recorded, parameters: Callable[[], tuple] | None
    ) -> None:
        """The sidecar's sections, once the forward's numbers are on the host."""
        if parameters is not None:
            try:
                section, text = parameters()
                if section:
                    run.sidecar["parameters"] = section
                    run.encoded["parameters"] = text
            except Exception as exc:  # noqa: BLE001 - a fingerprint must never cost the user their trace
                warnings.warn(f"nbtrace could not fingerprint the parameters of {self.class_name}: {exc}", stacklevel=5)
        if run.rounding is not None:
            if run.rounding.meter.mode != "twin":
                run.sidecar[ROUNDING_SECTION] = run.rounding.section(root)
            run.sidecar[TWIN_SECTION] = run.rounding.twin_section(root)
            kept = run.rounding.twin_start.tensors if run.rounding.twin_start is not None else {}
            if self.use_repr and kept:
                run.sidecar[INPUTS_SECTION] = inputs_section(kept)
        if run.sketch is not None:
            run.sidecar[SKETCH_SECTION] = run.sketch.section()
        if self.rank_plan is not None and run.layouts is not None:
            run.sidecar[DISTRIBUTED] = self.rank_plan.section(root, run.layouts)
        recorded.generation = run.generation_done() if run.generation_done is not None else None
        if recorded.index > 0:  # a run of several forwards (forward 0 gets its sections when the second one starts)
            run.sidecar.update(self._run_sections(recorded, recorded.durations_in_order()))

    def _fingerprint_parameters(self, run: _ForwardRun) -> Callable[[], tuple] | None:
        """Start the sidecar's ``parameters`` section (once per forward; unchanged tensors are not recomputed)."""
        try:
            return self._fingerprints.start(run.serialize.batch)
        except Exception as exc:  # noqa: BLE001 - a fingerprint must never cost the user their trace
            warnings.warn(f"nbtrace could not fingerprint the parameters of {self.class_name}: {exc}", stacklevel=4)
            return None


class _ForwardRun:
    """The state of one top-level forward: the open calls, their serializer, and the speculation."""

    def __init__(self, serialize: Serializer, store: TensorStore, containers: dict[str, int], root: str) -> None:
        #: the path of the forward's root: the model's class name, or one of its modules called outside its forward
        self.root = root
        self.serialize = serialize
        self.store = store
        self.frames: list[Frame] = []
        self.calls: dict[str, int] = {}
        self.durations: dict[int, float | None] = {}
        self.speculation = Speculation(containers, serialize)
        #: sections of nbtrace's sidecar file that features fill during the forward (see core/sidecar.py)
        self.sidecar: dict[str, Any] = {}
        #: the JSON text of sidecar sections known already (the parameters' fingerprints): see write_sidecar
        self.encoded: dict[str, str] = {}
        #: gives the ``generation`` section (KV cache, picked token) once the forward's numbers are on the host
        self.generation_done: Callable[[], dict[str, Any] | None] | None = None
        #: the layouts of the DTensors recorded in this forward, when the trace describes its rank (ranks.py)
        self.layouts: ShardLayouts | None = None
        #: the rounding measured in this forward (``measure_rounding``), None when off
        self.rounding: Measures | None = None
        #: the run's own sketch of every call's float tensors, where no twin is recorded (``sketch.py``)
        self.sketch: RunSketch | None = None
        #: id(call's dict) -> (device type, dtype) of the autocast it ran under (calls under none are left out)
        self.autocast: dict[int, tuple[str, torch.dtype] | None] = {}

    def record(self, node: dict[str, Any], key: str, value: Any, name: str) -> None:
        """Serialize ``value`` into ``node[key]``, or hold it if its layer block may be pruned."""
        if self.speculation.deferring is not None:
            node[key] = None
            self.speculation.hold(node, key, value, name)
        else:
            node[key] = self.serialize(value, name)

    def open(self, site: Site, inputs: Any, name: str) -> dict[str, Any]:
        node: dict[str, Any] = {"module_path": site.path, "inputs": None, "outputs": None, "children": []}
        frames = self.frames
        parent = frames[-1] if frames else None
        self.speculation.begin(node, parent, site)
        self.record(node, "inputs", inputs, name)
        frame = Frame(node, site)
        frames.append(frame)
        self.speculation.opened(frame, parent, frames[-3] if len(frames) > 2 else None)
        frame.started = time.perf_counter()
        return node

    def close(self, node: dict[str, Any], error: BaseException | None = None) -> None:
        now = time.perf_counter()
        # Pop down to this node: a call that never closed (it cannot happen, but a
        # corrupted stack must not misplace every later call) is closed with it.
        frame = None
        while self.frames:
            frame = self.frames.pop()
            if frame.node is node:
                break
        self.durations[id(node)] = now - frame.started if frame is not None and frame.node is node else 0.0
        children = node.pop("children")
        if error is not None:
            node["error"] = error_record(error)
        if children:
            node["children"] = children
        parent = self.frames[-1] if self.frames else None
        if frame is not None:
            self.speculation.closed(frame, parent)
        if parent is not None:
            parent.node["children"].append(node)


def _summary_path(full: Path | None) -> Path | None:
    if full is None:
        return None
    return full.with_name(full.name.replace("_FULL_TENSORS.json", "_SUMMARY.json"))
