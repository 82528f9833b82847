"""Recording the backward passes run inside ``nbtrace.trace(model, ..., backward=True)``.

With the option, the model's calls keep the caller's grad mode (the forward builds its graph; without it they run
under ``no_grad``, as transformers' debugger runs them), and what they record is what a ``no_grad`` forward records:
tensors with a ``grad_fn`` are written as their detached aliases, so the forward's files are the same bytes. Each
recorded call's gradients are caught by hooks (``calls.py``) and each parameter's by a hook on the parameter (the
gradient of one pass, a tied weight's summed over its uses). A pass begins at the first gradient caught while no
pass is open and ends when autograd's engine finishes that backward (a callback queued on it); its records are
then completed (one transfer, as a forward's) and written beside the forward's files (``files.py``).

A module called while autograd runs a backward (gradient checkpointing recomputing its forward) is not a forward of
its own: it runs as it would without nbtrace. Every hook is removed when the block ends, even on an exception.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...core.paths import is_layer_block_call
from ..call_facts import any_autocast, autocast_state
from ..twin.ranks import several_ranks
from .calls import CallGrads, alias_inputs, detached, hook_all, output_slots
from .files import PassWriter, move_backward_files
from .twin import random_state, twin_backward

if TYPE_CHECKING:  # pragma: no cover
    from ..recorder import Recorder, _ForwardRun
    from ..speculate import Site


def in_backward() -> bool:
    """True while autograd's engine runs a backward pass on this thread."""
    return torch._C._current_graph_task_id() != -1


SEVERAL_RANKS = ("under several ranks the float64 twin does not run the backward: the model's collectives would run "
                 "on the recording ranks alone (the forward's twin runs, with every rank)")


NO_PASS = ("nbtrace: backward=True, but no backward pass ran inside the block: its {n} forward(s) are recorded "
           "without gradients (generate, and a forward under torch.no_grad or inference_mode, builds no graph; run "
           "loss.backward() inside the block)")


class BackwardCapture:
    """The backward side of one ``nbtrace.trace`` block (``recorder.backward``)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.use_repr = recorder.use_repr
        self._handles: list[Any] = []
        self._calls: dict[int, CallGrads] = {}  # id(call's dict) -> its slots, during its forward
        self._detached: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._skeletons: dict[int, Any] = {}  # forward index -> its pruned tree of CallGrads
        self._pass: PassWriter | None = None
        self._passes: dict[int, list[dict[str, Any]]] = {}  # forward index -> the passes written for it
        self._closed = False
        self._parameters = self._hook_parameters(recorder.model)
        meter = recorder.rounding
        #: whether each forward's float64 twin runs its backward too (where the forward's twin runs: ``twin.py``)
        self.twin = meter is not None and getattr(getattr(meter, "twin", None), "skipped", None) is None
        #: why it does not, where it would: under several ranks the twin's backward would run the model's collectives
        #: on the recording ranks alone, where the others never join them
        self.twin_apart = SEVERAL_RANKS if self.twin and several_ranks() else None
        if self.twin_apart is not None:
            self.twin = False
        self._twins: dict[int, dict[str, Any]] = {}  # forward index -> the twin's backward section
        #: module path -> calls of the last forward that ran under ``no_grad``, waiting for their recomputation
        self._waiting: dict[str, list[CallGrads]] = {}

    # -- the forward -----------------------------------------------------------
    def call_module(self, run: _ForwardRun, site: Site, forward: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``Recorder.call_module`` with grad kept on, values recorded detached, and the call's gradients hooked."""
        __tracebackhide__ = True
        if run is None:  # gradient checkpointing recomputing a forward in the backward
            return self._recompute(site.path, forward, args, kwargs)
        path = site.path
        count = run.calls[path] = run.calls.get(path, 0) + 1
        base = path if count == 1 else f"{path}@{count}"
        if torch.is_grad_enabled():
            args, kwargs, views, template = alias_inputs(args, kwargs)
        else:  # no gradient flows through this run (inside a reentrant checkpoint: ``_recompute`` hooks its rerun)
            views, template = [], None
        if kwargs:
            inputs = {"args": args, "kwargs": kwargs} if args else {"kwargs": kwargs}
        else:
            inputs = {"args": args} if args else {}
        node = run.open(site, detached(inputs, self._detached), f"{base}_inputs")
        if any_autocast():
            run.autocast[id(node)] = autocast_state()
        sketch = getattr(run, "sketch", None)  # the run's own sketch, where no twin is recorded (``sketch.py``)
        if sketch is not None:
            sketch.enter(base, args, kwargs)
        try:
            out = forward(*args, **kwargs)
        except BaseException as exc:
            run.close(node, error=exc)
            raise
        if sketch is not None:
            sketch.leave(base, out)
        try:
            self.watch(node, base, views, template, out)
            if not site.has_children:
                run.record(node, "outputs", detached(out, self._detached), f"{base}_outputs")
        finally:
            run.close(node)
        return out

    def enter_top(self, forward: Any, args: tuple, kwargs: dict[str, Any], root: str) -> tuple[Any, Any, Any]:
        """A top-level forward begins: the forward to run instead (its arguments aliased, its call hooked), what
        the recorder records of its output and of its arguments (as a ``no_grad`` forward made them)."""
        args, kwargs, views, template = alias_inputs(args, kwargs)

        def watched(*_: Any, **__: Any) -> Any:
            __tracebackhide__ = True
            self._waiting = {}  # an earlier forward's calls are not recomputed for this one
            state = random_state() if self.twin and root == self.recorder.class_name else None
            out = forward(*args, **kwargs)
            run = self.recorder._run
            if run is not None and run.frames:
                self.watch(run.frames[0].node, root, views, template, out)  # the top-level call, open
            if state is not None:
                self._run_twin(args, kwargs, state)
            elif self.twin_apart is not None and root == self.recorder.class_name:
                self._twins[len(self.recorder)] = {"skipped": self.twin_apart}
            return out

        return watched, self.recordable, self.recordable({"args": args, "kwargs": kwargs})

    def recordable(self, value: Any) -> Any:
        """``value`` as a ``no_grad`` forward would have made it (tensors with a ``grad_fn`` detached)."""
        return detached(value, self._detached)

    def _run_twin(self, args: tuple, kwargs: dict[str, Any], state: Any) -> None:
        """The float64 twin's forward and backward of the forward that just ran (``twin.py``)."""
        try:
            self._twins[len(self.recorder)] = twin_backward(self.recorder.model, self.recorder.class_name, args,
                                                            kwargs, state)
        except Exception as exc:  # noqa: BLE001 - measuring must never cost the user their forward
            problem = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            self._twins[len(self.recorder)] = {"skipped": f"the twin's backward failed: {type(exc).__name__}: {problem}"}

    def watch(self, node: dict[str, Any], base: str, views: list[torch.Tensor], template: Any, out: Any) -> None:
        """Hook the call's input views and outputs; its gradients are caught under ``base``. A call that ran
        under ``no_grad`` (inside a reentrant checkpoint) waits for its recomputation (``_recompute``)."""
        grads = CallGrads(base, len(self.recorder))
        grads.inputs = template
        tensors, grads.outputs = output_slots(out)
        if not torch.is_grad_enabled():
            self._waiting.setdefault(_path(base), []).append(grads)
        hook_all(views, "inputs", grads, self._catch, self._handles)
        hook_all(tensors, "outputs", grads, self._catch, self._handles)
        self._calls[id(node)] = grads

    def _recompute(self, path: str, forward: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A module called while autograd runs a backward: checkpointing recomputing its forward. As without
        nbtrace, unless the call's first run was under ``no_grad`` (a reentrant checkpoint, whose backward runs
        the recomputed graph): then its recomputation is hooked in its place, the calls of each path in order."""
        waiting = self._waiting.get(path)
        if not waiting or not torch.is_grad_enabled() or self._closed:
            return forward(*args, **kwargs)
        grads = waiting.pop(0)
        args, kwargs, views, grads.inputs = alias_inputs(args, kwargs)
        out = forward(*args, **kwargs)
        tensors, grads.outputs = output_slots(out)
        hook_all(views, "inputs", grads, self._catch, self._handles)
        hook_all(tensors, "outputs", grads, self._catch, self._handles)
        return out

    def forward_done(self, index: int, top: dict[str, Any], root: dict[str, Any]) -> None:
        """The forward ``index`` is written: keep its pruned tree of calls; calls pruning left out stop listening."""
        calls, self._calls = self._calls, {}
        self._detached = {}
        if id(top) in calls:
            calls[id(root)] = calls.pop(id(top))
        kept: set[int] = set()

        def skeleton(raw: dict[str, Any]) -> tuple:
            grads = calls.get(id(raw))
            if grads is not None:
                kept.add(id(grads))
            return (raw["module_path"], grads, [skeleton(child) for child in raw.get("children") or ()])

        self._skeletons[index] = skeleton(root)
        stacks = _layer_stacks(self._skeletons[index])
        if index > 0:  # the previous forward's files moved into forward_<i>/: its backward files follow them
            move_backward_files(self.recorder._recorded[index - 1], self.recorder.class_name)
        for grads in calls.values():
            grads.active = id(grads) in kept
            stack, _, number = _path(grads.name).rpartition(".")
            if not grads.active and stack in stacks and number.isdigit():  # a layer block pruning left out
                grads.active = grads.norms_only = True

    # -- the backward ----------------------------------------------------------
    def _catch(self, grads: CallGrads, io: str, number: int, grad: torch.Tensor) -> None:
        if self._closed or not grads.active or grad is None:
            return
        writer = self._open_pass()
        if writer is None:
            return
        if grads.norms_only:
            writer.norm(grads.forward, grads.name, f"{io}.{number}", grad)
            return
        name = f"{grads.name}_grad_{io}_{number}"
        grads.caught[(io, number)] = writer.record(grads.forward, grad, name)
        writer.touched(grads)

    def _hook_parameters(self, model: nn.Module) -> list[Any]:
        handles = []
        prefix = self.recorder.class_name
        for name, parameter in model.named_parameters():  # a tied weight once, under its first name
            if parameter.requires_grad:
                def hook(grad: torch.Tensor, name: str = f"{prefix}.{name}") -> None:
                    if self._closed or grad is None:
                        return
                    writer = self._open_pass()
                    if writer is not None:
                        writer.parameter(name, grad)

                handles.append(parameter.register_hook(hook))
        return handles

    def _open_pass(self) -> PassWriter | None:
        if self._pass is not None:
            return self._pass
        if not in_backward():
            return None
        self._pass = PassWriter(self.recorder, self._passes, self._skeletons, self.use_repr, self._twins)
        torch.autograd.Variable._execution_engine.queue_callback(self._end_pass)
        return self._pass

    def _end_pass(self) -> None:
        writer, self._pass = self._pass, None
        if writer is None:
            return
        try:
            writer.finish(time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - recording must never cost the user their backward
            warnings.warn(f"nbtrace could not write the backward pass: {exc}", stacklevel=2)

    def close(self, clean: bool = True) -> None:
        """The block ends: every hook removed, the pass still open (a backward that raised) dropped. A block that
        ended ``clean`` (it did not raise), recorded forwards and ran no backward pass is told so in a warning: a
        ``generate``, or a forward under ``no_grad``, builds no graph to run one on."""
        if clean and not self._closed and not self._passes and len(self.recorder):
            warnings.warn(NO_PASS.format(n=len(self.recorder)), stacklevel=4)
        self._closed = True
        self._pass = None
        for handle in self._handles + self._parameters:
            handle.remove()
        self._handles, self._parameters = [], []
        self._calls, self._detached = {}, {}


def _layer_stacks(skeleton: tuple) -> set[str]:
    """The layer stacks whose blocks the pruned tree holds (``Llama.model.layers``): a block of one of them that
    pruning left out keeps its gradients' norms."""
    stacks: set[str] = set()

    def walk(node: tuple) -> None:
        path, _, children = node
        if is_layer_block_call(path, [child[0] for child in children]):
            stacks.add(path.rpartition(".")[0])
        for child in children:
            walk(child)

    walk(skeleton)
    return stacks


def _path(name: str) -> str:
    """A call's module path from its name (``<path>@<n>``)."""
    head, at, count = name.rpartition("@")
    return head if at and count.isdigit() else name


def enter_top(capture: BackwardCapture | None, forward: Any, args: tuple, kwargs: dict[str, Any], root: str) -> tuple:
    """``BackwardCapture.enter_top``, and what a top-level forward does without ``backward=True``."""
    if capture is None:
        return forward, _unchanged, {"args": args, "kwargs": kwargs}
    return capture.enter_top(forward, args, kwargs, root)


def _unchanged(out: Any) -> Any:
    return out
