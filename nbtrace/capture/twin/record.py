"""The float64 twin of each recorded forward: its fingerprints, sensitivities and top-level inputs, for the sidecar.

A ``TwinRecorder`` lives as long as a ``nbtrace.trace`` block. When a top-level forward starts it copies the
inputs into float64 once per run kind (the twin, and each perturbation of ``forward.py``), each kind with its own
``known`` objects so a generation's float64 KV caches carry on from step to step; when the forward has returned
it runs the twin (``observe`` lets ``measure_rounding=True`` measure each recorded output against it), then the
perturbed twins, and keeps the numbers in the forward's ``HostBatch`` (they reach the host with the forward's one
transfer). It also keeps the top-level input tensors (``start``) for the sidecar's ``inputs`` section
(``core/kept_inputs.py``). ``section(root)`` gives the sidecar's ``twin`` section (``core/twin.py``) for the calls of the tree as
written. A model that cannot run in float64 leaves the section with ``skipped`` and the reason, never an
exception: measuring never costs the user their forward.
"""

from __future__ import annotations

import copy
import warnings
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...core.collector import collector_paused
from ...core.twin import SUMS, TWIN_VERSION
from ..recorded import named_calls
from ..rounding_numbers import float_leaves
from .. import transfer
from ..transfer import to_host_many
from .exact import unchanged_by_rounding, weights_and_inputs
from .fingerprint import fingerprint
from .forward import ROUNDED, Padding, constants_digest, digest_text, find_valid, rounded_inputs, twin_runs
from .print_numbers import fill_calls, padding_text
from .rank_guard import PeerFailed
from .ranks import RankTwin, decide_together
from .state import CarriedState
from .values import remember, upcast

if TYPE_CHECKING:  # pragma: no cover
    from ..transfer import HostBatch, Slot

#: the top-level inputs are kept in the sidecar up to this many bytes (token ids, masks, small images)
MAX_INPUT_BYTES = 16 * 2**20


@dataclass
class TwinStart:
    """What a top-level forward's twin needs from before the forward ran."""

    inputs: dict[str | None, tuple[tuple, dict[str, Any]]]
    valid: torch.Tensor | None
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # top-level input tensors, by place
    padding: Padding = field(default_factory=Padding)  # where the padding mask was found (``padding.py``)
    problem: str | None = None
    #: call name -> place -> the fingerprint of what the run itself returned, on its way to the host
    run: dict[str, dict[str, Slot]] = field(default_factory=dict)
    seen: dict[int, tuple[Any, Slot, int | None]] = field(default_factory=dict)  # id -> (tensor, slot, version)
    #: the rounded runs (``forward.ROUNDED``) not made because rounding changes nothing: the twin's numbers stand
    same: list[str] = field(default_factory=list)


@dataclass
class TwinNumbers:
    """One forward's twin, its numbers on their way to the host."""

    shapes: dict[str, dict[str, tuple[int, ...]]]
    slots: dict[str, dict[str, Slot]]
    perturbed: dict[str, dict[str, dict[str, Slot]]]  # kind -> call -> place -> slot
    low: dict[str, str]
    padding: tuple[list[int], Slot] | None
    problem: str | None = None
    run: dict[str, dict[str, Slot]] = field(default_factory=dict)  # the run's own outputs (``TwinStart.run``)
    events: list[str] = field(default_factory=list)  # the twin's calls starting and ending, in order
    #: the padding mask's place: its name, or the candidates and the slot of the one chosen on the device
    padding_from: tuple[list[str], Slot | None] = ([], None)


class TwinRecorder:
    """The twin of every top-level forward of one ``nbtrace.trace`` block."""

    def __init__(self, model: nn.Module, class_name: str, keep_inputs: bool = True,
                 padding_mask: str | bool | None = None) -> None:
        self.model, self.class_name = model, class_name
        self.padding_mask = padding_mask  # declared by the user (``padding.py``), or None: found
        self.keep_inputs = keep_inputs  # the top-level inputs, for a trace that holds only their printout
        self.known: dict[str | None, dict[int, tuple[Any, Any]]] = {
            None: {}, "float64": {}, "constants": {}, **{kind: {} for kind in ROUNDED}}
        self.carried = CarriedState()  # what the model keeps in its own attributes from forward to forward
        self._constants: list[tuple[str, torch.Tensor]] | None = None  # computed on the device, once per block
        self._rounded: list[str] = []  # the rounded runs (``forward.ROUNDED``) this model's forwards get
        #: rounded runs the twin stood for at an earlier forward of the block (``exact.py``), and those left out
        #: for the rest of the block (their carried state could not be taken from the twin's)
        self._stood_for: set[str] = set()
        self._dropped: set[str] = set()
        self._constant_slots: list[tuple[str, Slot]] | None = None
        self._digests: list[str] | None = None
        #: why no twin is recorded in this block (``measure_rounding="auto"`` and a model too large), or None
        self.skipped: str | None = None
        #: the twin makes each module's float64 weights as it runs (``stream.py``): never a whole float64 copy
        self.stream = True
        #: this rank's part where several ranks run their twins together (``ranks.py``), else None
        self.ranks: RankTwin | None = None

    def kinds(self) -> list[str | None]:
        """The runs of a forward: the twin, the perturbed one (weights and constants moved at once), and the model
        rounded to bfloat16 when it stores float parameters wider than that (``forward.ROUNDED``). Constants held
        narrower than float32 get a perturbed run of their own (``"constants"``): in the one run, their rounding
        would let two sides with the same constants differ by more than float32 rounds (bfloat16's, where the
        semantic differences of a bfloat16 port lie); float32 ones move the twin by about float32's rounding."""
        if self._constants is None:
            self._constants = constants_digest(self.model)
            self._rounded = [kind for kind in ROUNDED if _stores_wider(self.model, getattr(torch, kind))]
        narrow = any(getattr(torch, head.split(":", 1)[0]).itemsize < 4 for head, _ in self._constants)
        return [None, "float64"] + (["constants"] if narrow else []) + self._rounded

    def release(self) -> None:
        """Let go of what carries the twin from one forward to the next (each run's float64 KV cache, the model's
        state), once the block has ended: no forward will continue from it, and a Recorder kept in a notebook would
        hold it."""
        self.known = {kind: {} for kind in self.known}
        self.carried = CarriedState()

    def digests(self) -> list[str]:
        """The constants' digests (sorted), once the forward that computed them has reached the host."""
        if self._digests is None and self._constant_slots is not None:
            self._digests = sorted(digest_text(head, [int(v) for v in slot.values()])
                                   for head, slot in self._constant_slots)
        return self._digests or []

    def start(self, args: tuple, kwargs: dict[str, Any]) -> TwinStart:
        """Copy the top-level inputs for every run, before the forward can change them (a KV cache grows)."""
        kept = _input_tensors(args, kwargs) if self.keep_inputs else {}
        if self.skipped is not None:
            return TwinStart({}, None, kept, problem=f"not recorded: {self.skipped}")
        try:
            kinds = self.kinds()
            same = self._same_as_twin([kind for kind in kinds if kind in ROUNDED], args, kwargs)
            inputs = {kind: upcast(rounded_inputs((args, kwargs), getattr(torch, kind)) if kind in ROUNDED
                                   else (args, kwargs), self.known[kind])
                      for kind in kinds if kind not in same and kind not in self._dropped}
            self.carried.snapshot(self.model)
            padding = self._padding(args, kwargs)
            return TwinStart(inputs, padding.valid, kept, padding=padding, same=same)
        except Exception as exc:  # noqa: BLE001 - an input that cannot be copied leaves the forward without a twin
            return TwinStart({}, None, problem=f"its inputs could not be copied to float64 ({_describe(exc)})")

    def _same_as_twin(self, rounded: list[str], args: tuple, kwargs: dict[str, Any]) -> list[str]:
        """Of the ``rounded`` runs, those this forward need not make: rounding the weights and float inputs into their dtype
        changes no value, so the run would be the twin itself (``exact.py``). Not under several ranks (each rank
        holds a piece; they run their twins together). A rounded run the twin stood for at earlier forwards that
        is needed again starts from a copy of the twin's carried state (a KV cache: the state it would have
        reached, the runs having been the same); where that state cannot be copied, the run is left out for the
        rest of the block (the comparison then allows for the weights' rounding instead)."""
        same = []
        for kind in rounded:
            if kind in self._dropped:
                continue
            if self.ranks is None and _unchanged(self.model, args, kwargs, getattr(torch, kind)):
                same.append(kind)
                self._stood_for.add(kind)
            elif kind in self._stood_for:
                self._stood_for.discard(kind)
                if not self._take_twin_state(kind):
                    self._dropped.add(kind)
        return same

    def _take_twin_state(self, kind: str) -> bool:
        """Give the run ``kind`` a copy of the twin's carried state (``known`` objects, attributes); False where a
        value cannot be copied."""
        try:
            self.known[kind] = {key: (live, copy.deepcopy(twin)) for key, (live, twin) in self.known[None].items()}
            self.carried.known[kind] = {key: (value, copy.deepcopy(twin), versions)
                                        for key, (value, twin, versions) in self.carried.known.get(None, {}).items()}
            return True
        except Exception:  # noqa: BLE001 - an object that cannot be deep-copied
            self.known[kind], self.carried.known[kind] = {}, {}
            return False

    def _padding(self, args: tuple, kwargs: dict[str, Any]) -> Padding:
        """The forward's padding mask and its place (``forward.find_valid``); a declared name that is not among the
        inputs is a warning, never the end of the user's forward."""
        try:
            return find_valid(args, kwargs, self.padding_mask)
        except ValueError as exc:
            warnings.warn(f"nbtrace: {exc}; this forward's float64 twin keeps every position", stacklevel=4)
        except Exception:  # noqa: BLE001 - candidates nbtrace cannot test (meta tensors): no mask
            pass
        return Padding()

    def note_run(self, start: TwinStart | None, key: str, out: Any, batch: HostBatch) -> None:
        """Fingerprint the float outputs a call of the run returned (each tensor once): against the twin's at the
        same call, they measure how far the run's rounding carried it (``acc``)."""
        if start is None or start.problem is not None:
            return
        try:
            found: dict[str, Slot] = {}
            for place, tensor in float_leaves(out):
                if tensor.numel() == 0 or tensor.is_meta or tensor.layout != torch.strided:
                    continue
                entry = start.seen.get(id(tensor))
                version = _version(tensor)  # an in-place operation (x += shortcut; ReLU(inplace=True)) changed it
                if entry is None or entry[0]() is not tensor or entry[2] != version or version is None:
                    entry = (weakref.ref(tensor), batch.add(fingerprint(tensor, start.valid, layout=False)), version)
                    start.seen[id(tensor)] = entry
                found[place] = entry[1]
            if found:
                start.run[key] = found
        except Exception:  # noqa: BLE001 - a tensor that cannot be fingerprinted is left unmeasured
            return

    def done(self, start: TwinStart, out: Any, batch: HostBatch,
             observe: Callable[[str, Any], None] | None = None) -> TwinNumbers:
        """Run the twin and its perturbations after the forward returned ``out``; the numbers join ``batch``."""
        numbers = TwinNumbers({}, {}, {}, {}, _digest(start.valid, batch), start.problem, start.run)
        found = start.padding
        numbers.padding_from = (found.places, batch.add(found.chosen.reshape(1)) if found.chosen is not None else None)
        start.seen = {}
        if self.ranks is not None:  # every rank runs its twin, or none does
            start.problem = numbers.problem = decide_together(start.problem, "its inputs could not be copied")
        if self._constant_slots is None and self._constants is not None:
            self._constant_slots = [(head, batch.add(sums)) for head, sums in self._constants]
        if start.problem is not None:
            return numbers
        guard = self.ranks.guard if self.ranks is not None and self.ranks.guard is not None else None
        try:
            with guard.guarded() if guard is not None else nullcontext():  # ranks stop together (rank_guard.py)
                runs = twin_runs(self.model, start.inputs, self.class_name, start.valid, observe,
                                 carried=self.carried, ranks=self.ranks, stream=self.stream,
                                 keep=lambda kind, wide_out: remember(self.known[kind], out, wide_out))
        except PeerFailed as exc:  # another rank's twin failed: none has it (they run together)
            numbers.problem = f"the float64 twin failed on {exc}; the ranks run it together, so none records it"
            return numbers
        except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 keeps its trace
            numbers.problem = f"the float64 twin of the whole model failed ({_describe(exc)})"
            return numbers
        finally:
            start.inputs = {}
        twin = runs[None][0]
        numbers.low, numbers.events = twin.low, twin.events
        for key, places in twin.calls.items():
            numbers.shapes[key] = {place: shape for place, (shape, _) in places.items()}
        numbers.slots = _add_run(batch, twin)
        for kind, (run, _) in runs.items():
            if kind is not None:
                numbers.perturbed[kind] = _add_run(batch, run)
        for kind in start.same:  # rounding changed nothing: the rounded run would have been the twin
            numbers.perturbed[kind] = numbers.slots
        if self._constants and "float64" in numbers.perturbed and "constants" not in numbers.perturbed:
            numbers.perturbed["constants"] = numbers.perturbed["float64"]  # one run moved both: s64 and sconst
        return numbers

    def section(self, numbers: TwinNumbers | None, root: dict[str, Any]) -> dict[str, Any]:
        """The sidecar's ``twin`` section for the tree as written (``root``, after pruning)."""
        section: dict[str, Any] = {"version": TWIN_VERSION, "sums": SUMS, "padding": None,
                                   "constants": self.digests(), "calls": {}}
        if self.ranks is not None:
            section["ranks"] = self.ranks.describe()
        if numbers is None or numbers.problem is not None:
            section["skipped"] = numbers.problem if numbers is not None else "the forward raised"
            return section
        if numbers.padding is not None:
            shape, slot = numbers.padding
            section["padding"] = padding_text(shape, slot.values())  # None: it left nothing out
            places, chosen = numbers.padding_from
            index = int(chosen.values()[0]) if chosen is not None else 0
            if section["padding"] is not None and 0 <= index < len(places):
                section["padding_from"] = places[index]
        with collector_paused():  # tens of thousands of entries made and kept
            prints = {key: {place: (numbers.shapes[key][place], slot.values()) for place, slot in slots.items()}
                      for key, slots in numbers.slots.items()}
            hosted: dict[int, dict[str, dict[str, list]]] = {}  # a run's numbers standing for another's: one object
            perturbed = {}
            for kind, calls in numbers.perturbed.items():
                if id(calls) not in hosted:
                    hosted[id(calls)] = _on_host(calls)
                perturbed[kind] = hosted[id(calls)]
            written = [key for key, _ in named_calls(root)]
            fill_calls(section, written, prints, perturbed, _on_host(numbers.run), numbers.low, numbers.events)
        return section


def _add_run(batch: HostBatch, run: Any) -> dict[str, dict[str, Slot]]:
    """Call -> place -> the slot of each fingerprint of one twin run (``forward.TwinRun``). In host memory they are
    read in one go (one ``tolist`` of them all, as ``HostBatch.add`` reads each: tens of thousands of calls on a large
    model), else each joins the batch's one transfer. The collector is paused: the slots and their lists are tens of
    thousands of new objects, and each collection they set off would walk the whole trace's."""
    with collector_paused():
        return _slots_of_run(batch, run)


def _slots_of_run(batch: HostBatch, run: Any) -> dict[str, dict[str, Slot]]:
    pieces = [values for places in run.calls.values() for _, values in places.values()]
    if not pieces or not all(p.dtype == torch.float64 and p.dim() == 1 and transfer.host_readable(p) for p in pieces):
        return {key: {place: batch.add(values) for place, (_, values) in places.items()}
                for key, places in run.calls.items()}
    read = torch.cat(pieces).tolist()
    found: dict[str, dict[str, Slot]] = {}
    start = 0
    for key, places in run.calls.items():
        found[key] = {}
        for place, (_, values) in places.items():
            length = values.numel()
            found[key][place] = transfer.Slot(None, 0, length, read[start:start + length])
            start += length
    return found


def _unchanged(model: nn.Module, args: tuple, kwargs: dict[str, Any], dtype: torch.dtype) -> bool:
    """``exact.py``'s answer; False (the run is made) where the test itself fails."""
    try:
        return unchanged_by_rounding(weights_and_inputs(model, args, kwargs, dtype), dtype)
    except Exception:  # noqa: BLE001 - a tensor that cannot be viewed or rounded: make the run
        return False


def _stores_wider(model: nn.Module, dtype: torch.dtype) -> bool:
    """True when ``model`` holds a float parameter wider than ``dtype`` (what a port may have rounded into it)."""
    return any(p.is_floating_point() and p.dtype.itemsize > dtype.itemsize for p in model.parameters())


def _on_host(calls: dict[str, dict[str, Slot]]) -> dict[str, dict[str, list]]:
    """Call -> place -> the numbers of each slot (once the forward's transfer has run)."""
    return {key: {place: slot.values() for place, slot in places.items()} for key, places in calls.items()}


def _digest(valid: torch.Tensor | None, batch: HostBatch) -> tuple[list[int], Slot] | None:
    """The padding mask's shape and two sums of it (plain and weighted by position), on their way to the host."""
    if valid is None:
        return None
    flags = valid.detach().reshape(-1).to(torch.int64)
    weights = torch.arange(flags.numel(), device=flags.device) % 65521 + 1
    return list(valid.shape), batch.add(torch.stack([flags.sum(), (flags * weights).sum()]))


def _input_tensors(args: tuple, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The top-level input tensors by place (``args.0``, ``kwargs.input_ids``), on the host (one transfer), up to
    ``MAX_INPUT_BYTES``; empty when they are more or cannot be copied (a meta tensor)."""
    found: dict[str, torch.Tensor] = {}

    def walk(value: Any, place: str, depth: int) -> None:
        if type(value) is torch.Tensor:
            found[place] = value.detach()
        elif type(value) in (list, tuple) and depth < 8:
            for i, item in enumerate(value):
                walk(item, f"{place}.{i}", depth + 1)
        elif type(value) is dict and depth < 8:
            for key, item in value.items():
                walk(item, f"{place}.{key}", depth + 1)

    for i, value in enumerate(args):
        walk(value, f"args.{i}", 0)
    for key, value in kwargs.items():
        walk(value, f"kwargs.{key}", 0)
    if not found or any(t.is_meta for t in found.values()) or \
            sum(t.numel() * t.element_size() for t in found.values()) > MAX_INPUT_BYTES:
        return {}
    try:
        return dict(zip(found, (t.clone() for t in to_host_many(list(found.values())))))
    except (RuntimeError, TypeError, NotImplementedError):  # a tensor with no data of its own to copy
        return {}


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "…"


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's count of in-place changes, or None where it keeps none (a tensor made in inference mode)."""
    try:
        return tensor._version
    except RuntimeError:
        return None
