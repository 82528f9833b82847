"""Several ranks' twins stop together: where one rank's twin fails mid-run, no other rank waits for it in a collective.

Under ``torchrun`` every rank runs its float64 twin together (``ranks.py``), and the model's own collectives (an
all-reduce after a row-parallel projection, a DTensor's redistribution) are the twin's. A twin that raised on one rank
alone (its memory ran out, a float64 kernel missing for a shape only it holds) left the others inside that
collective, and its next forward's collectives met theirs: the user's float32 all-reduce summed with a float64 twin's,
silently wrong, or a wait without end.

So every collective of a twin run is preceded by a meeting of its group (the ranks the collective joins) through the
process group's store, which needs no collective: each rank adds itself to the meeting and waits until the whole
group is there, or until a rank has posted that its twin failed, and then raises ``PeerFailed`` where it stands. A
rank enters a collective only once every rank of its group has reached it, so none ever waits in one that a failed
rank will not join. When the twin's runs end, by success or failure, all ranks meet once more and leave together;
each then knows whether a rank failed, and which, and why (the first failure posted is the one said). Point-to-point
sends and receives are not met (their two ranks only).

The collectives are seen by a torch function mode: ``torch.distributed``'s and the functional ones (a DTensor's
redistribution in a parallel module's hooks) as the model calls them, with next to nothing added to its other
operations (a dispatch mode saw every operation, nbtrace's own among them, and doubled a small model's twin).
nbtrace's own collectives (a partial DTensor made whole to be fingerprinted, the shares gathered at a run's end) are
met by ``Guard.checkpoint``. A collective a DTensor operation makes inside itself, out of any mode's sight, is not
met.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: the collectives' namespaces, and the operations in them that are no collective of a group
_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")
_NOT_MET = {"wait_tensor", "_wrap_tensor_autograd", "send", "recv_", "recv_any_source_", "recv", "isend", "irecv"}
#: ``torch.distributed``'s collectives, by name
_PYTHON_COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce",
    "gather", "scatter", "barrier", "all_reduce_coalesced", "all_gather_coalesced"})
#: how long a rank waits at a meeting for the others before it gives up (the default process group's timeout)
WAIT_SECONDS = 1800.0
#: how often a waiting rank looks whether another rank's twin failed (seconds)
LOOK_SECONDS = 0.05


class PeerFailed(RuntimeError):
    """Another rank's twin failed: this rank's run stops at its next collective instead of waiting in it."""


class _Meetings(TorchFunctionMode):
    """Meets each collective's group before the collective runs (see the module docstring). A torch function mode:
    it sees ``torch.distributed``'s collectives and the functional ones (a DTensor's redistribution) as they are
    called, and none of nbtrace's own operations, which run with torch functions disabled."""

    def __init__(self, store: Any, prefix: str) -> None:
        super().__init__()
        self.store, self.prefix = store, prefix
        self.counts: dict[str, int] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        group = _collective_group(func, args, kwargs)
        if group is not None:
            self.meet(*group)
        return func(*args, **kwargs)

    def meet(self, name: str, size: int) -> None:
        """Meet the ``size`` ranks of the group ``name`` before its next collective."""
        count = self.counts[name] = self.counts.get(name, 0) + 1
        meet(self.store, f"{self.prefix}/group/{name}/{count}", size, f"{self.prefix}/failed")


def _collective_group(func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[str, int] | None:
    """The name and size of the group ``func`` (called with ``args``, ``kwargs``) joins as a collective; None for
    anything else: a ``torch.distributed`` collective (its ``group``, the default one where None), a functional
    collective or a ``c10d`` operation (the group's name, or the group, among its arguments)."""
    dist = torch.distributed
    operator = _operator(func)
    if operator is not None:  # torch.ops._c10d_functional.all_reduce, c10d.allreduce_.default, ...
        namespace, name = operator
        if namespace not in _NAMESPACES or name in _NOT_MET:
            return None
        return _group(args, kwargs)
    if getattr(func, "__module__", None) != "torch.distributed.distributed_c10d" or \
            getattr(func, "__name__", None) not in _PYTHON_COLLECTIVES:
        return None
    group = kwargs.get("group", next((a for a in args if isinstance(a, dist.ProcessGroup)), None))
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return group.group_name, dist.get_world_size(group)


def _operator(func: Any) -> tuple[str, str] | None:
    """``(namespace, name)`` of an operator (``("_c10d_functional", "all_reduce")`` for the packet
    ``torch.ops._c10d_functional.all_reduce`` and its overloads), or None for anything else."""
    qualified = getattr(func, "_qualified_op_name", None)  # an OpOverloadPacket
    if qualified is None:
        qualified = getattr(getattr(func, "_schema", None), "name", None)  # an OpOverload
    if not isinstance(qualified, str) or "::" not in qualified:
        return None
    namespace, name = qualified.split("::", 1)
    return namespace, name


def _group(args: tuple, kwargs: dict[str, Any]) -> tuple[str, int] | None:
    """The name and size of the process group a collective operation joins: a ``ProcessGroup`` argument (``c10d``'s
    operations), or the group's name (the last string argument of the functional collectives)."""
    dist = torch.distributed
    values = list(args) + list(kwargs.values())
    for value in values:
        if isinstance(value, dist.ProcessGroup):
            return value.group_name, value.size()
        if type(value).__name__ == "ScriptObject":
            try:
                group = dist.ProcessGroup.unbox(value)
            except (RuntimeError, AttributeError):
                continue
            return group.group_name, group.size()
    names = [v for v in values if isinstance(v, str)]
    if names:
        try:
            group = dist.distributed_c10d._resolve_process_group(names[-1])
        except (RuntimeError, ValueError, KeyError, AttributeError):
            return None
        return group.group_name, group.size()
    return None


def meet(store: Any, key: str, size: int, failed: str | None) -> None:
    """Add this rank to the meeting ``key`` and wait until ``size`` ranks are there; ``failed``: the key a failed
    rank posts, which ends the wait with ``PeerFailed`` (None: a meeting every rank comes to, failed or not).

    The last rank to arrive sets ``<key>/all``, which the others wait for in the store (no polling: they go on the
    moment it is set), looking for ``failed`` every ``LOOK_SECONDS`` of their wait."""
    done = f"{key}/all"
    if store.add(key, 1) >= size:
        store.set(done, "1")
        return
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            store.wait([done], timedelta(seconds=LOOK_SECONDS))
            return
        except RuntimeError:  # not yet (the store's timeout): has a rank failed?
            pass
        if failed is not None and store.check([failed]):
            raise PeerFailed(store.get(failed).decode(errors="replace"))
        if time.monotonic() > deadline:
            raise RuntimeError(f"nbtrace: the ranks' float64 twins waited {WAIT_SECONDS:g} s for each other at {key}")


class Guard:
    """One block's meetings: ``guarded()`` around each forward's twin runs, on every rank in the same order."""

    def __init__(self, store: Any, block: str, rank: int, world: int) -> None:
        self.store, self.block, self.rank, self.world = store, block, rank, world
        self.sections = 0
        self.meetings: _Meetings | None = None  # those of the section under way
        self._spent: list[list[str]] = []  # the keys of earlier sections, deleted two sections later

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Run the twin's runs inside: its collectives met first; a failure here posted for the others, one there
        raised here (``PeerFailed``, at this rank's next collective). Every rank leaves together; a failure of any
        rank is raised on every rank (this rank's own as it was, another's as ``PeerFailed`` with its text)."""
        self.sections += 1
        prefix = f"nbtrace/twin/guard/{self.block}/{self.sections}"
        failed = f"{prefix}/failed"
        meetings = _Meetings(self.store, prefix)
        self.meetings = meetings
        try:
            with meetings:
                yield
        except PeerFailed:
            self.meetings = None
            meet(self.store, f"{prefix}/end", self.world, None)
            raise
        except BaseException as exc:
            self.meetings = None
            self.store.compare_set(failed, "", f"rank {self.rank}: {type(exc).__name__}: {exc}"[:500])
            meet(self.store, f"{prefix}/end", self.world, None)
            raise
        self.meetings = None
        meet(self.store, f"{prefix}/end", self.world, None)
        if self.store.check([failed]):  # a rank failed after its last collective: every rank says so
            raise PeerFailed(self.store.get(failed).decode(errors="replace"))
        self._forget(prefix, meetings)

    def checkpoint(self, group: Any = None) -> None:
        """Meet the ranks of ``group`` (every rank where None) before one of nbtrace's own collectives in a run (a
        partial DTensor made whole to be fingerprinted, the pieces' shares gathered at its end), as before the
        model's; they run with torch functions disabled, out of the meetings' sight. A no-op outside ``guarded``."""
        if self.meetings is not None:
            if group is None:
                self.meetings.meet("nbtrace", self.world)
            else:
                self.meetings.meet(group.group_name, torch.distributed.get_world_size(group))

    def _forget(self, prefix: str, meetings: _Meetings) -> None:
        """Delete the keys of the section before the last (every rank has left it: they all reached the last one's
        end), so a long generation does not fill the store."""
        keys = [f"{prefix}/end", f"{prefix}/end/all", f"{prefix}/failed"]
        keys += [f"{prefix}/group/{name}/{n}{end}" for name, count in meetings.counts.items()
                 for n in range(1, count + 1) for end in ("", "/all")]
        self._spent.append(keys)
        if len(self._spent) > 2:
            old = self._spent.pop(0)
            if self.rank == 0:
                for key in old:
                    try:
                        self.store.delete_key(key)
                    except (RuntimeError, AttributeError):  # a store that keeps every key: left as it is
                        break


def default_store() -> Any:
    """The default process group's store, or None where there is none to meet by."""
    try:
        return torch.distributed.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store: the ranks' twins run unguarded, as before
        return None
