"""Writing trace files: atomic JSON in the format's exact bytes, safetensors files with safe names.

Every write goes to a temporary file in the same folder and is then moved into
place with ``os.replace``, so a crash never leaves a truncated file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

from ..core.load import FULL_SUFFIX, SUMMARY_SUFFIX
from ..core.sidecar import SIDECAR_SUFFIX, sidecar_document
from ..core.tensor import is_tensor_record
from .writer import FileWriter, link_file, size_text, write_file

_UNSAFE = {"/": "%2F", "\\": "%5C", "\0": "%00"}
_MAX_NAME_BYTES = 200


def _temp_name(name: str) -> str:
    """The hidden temporary name a file is written under before it is moved into place.

    It ends in ``.<pid>.tmp`` so ``remove_stale_temp_files`` can tell a dead writer's leftovers.
    """
    return f".{name}.{os.getpid()}.tmp"


def _temp_path(path: Path) -> Path:
    return path.with_name(_temp_name(path.name))


def remove_stale_temp_files(folder: Path) -> None:
    """Delete temporary files left by a writer process that died mid-write."""
    for tmp in folder.glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, so it is whole or absent."""
    tmp = _temp_path(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def summary_tree(tree: Any) -> Any:
    """A copy of the tree without the ``value`` of each tensor record (the SUMMARY file).

    Unlike transformers, only tensor records lose ``value``: a kwarg or dict key
    that happens to be named ``value`` stays.
    """
    if isinstance(tree, dict):
        if is_tensor_record(tree):
            return {key: item for key, item in tree.items() if key != "value"}
        return {key: summary_tree(item) for key, item in tree.items()}
    if isinstance(tree, list):
        return [summary_tree(item) for item in tree]
    return tree


def encode_tree(tree: dict[str, Any]) -> bytes:
    """The bytes transformers writes for a tree: those of ``json.dump(tree, f, indent=2)``."""
    return encode_trees(tree)[0]


def encode_trees(tree: dict[str, Any]) -> tuple[bytes, bytes]:
    """The bytes of the FULL file of ``tree`` and of its SUMMARY (``summary_tree``), in one walk.

    Python's indented JSON encoder is pure Python; this one knows the tree holds
    dicts, lists, strings and None, escapes strings with json's C escaper, and
    writes a list of strings (a tensor's printed lines) in one join. The SUMMARY
    is the FULL text without the ``"value"`` entries of tensor records: the walk
    notes where each one is.
    """
    writer = _Writer()
    writer.encode(tree, "\n")
    parts = writer.parts
    full = "".join(parts).encode("ascii")
    if writer.first_value:  # a record that starts with "value": no separator to cut with it
        return full, encode_tree(summary_tree(tree))
    if not writer.cuts:
        return full, full
    kept, start = [], 0
    for cut_start, cut_stop in writer.cuts:
        kept.append("".join(parts[start:cut_start]))
        start = cut_stop
    kept.append("".join(parts[start:]))
    return full, "".join(kept).encode("ascii")


_escape = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


class _Writer:
    """The parts of one indented JSON text, and where tensor records' values lie among them."""

    __slots__ = ("_keys", "_lines", "cuts", "first_value", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.cuts: list[tuple[int, int]] = []  # [start, stop) of each record's ``,\n  "value": …`` parts
        self.first_value = False
        self._lines: dict[tuple[int, str], str] = {}  # a list of lines shared by records: escaped once
        self._keys: dict[str, str] = {}  # '"key": ' of each string key met

    def _strings(self, value: list[str], newline: str) -> str:
        """A non-empty list of strings; the same list (lines shared by records) is escaped once per indent."""
        key = (id(value), newline)
        text = self._lines.get(key)
        if text is None:
            inner = newline + "  "
            text = self._lines[key] = "[" + inner + ("," + inner).join(map(_escape, value)) + newline + "]"
        return text

    def encode(self, value: Any, newline: str) -> None:
        parts = self.parts
        kind = type(value)
        if kind is str:
            parts.append(_escape(value))
        elif kind is dict or isinstance(value, dict):
            if not value:
                parts.append("{}")
                return
            inner = newline + "  "
            record = is_tensor_record(value)
            keys = self._keys
            separator = "{" + inner
            for key, item in value.items():
                start = len(parts)
                if type(key) is str:
                    name = keys.get(key)
                    if name is None:
                        name = keys[key] = _escape(key) + ": "
                else:
                    name = (_escape(key) if isinstance(key, str) else _key(key)) + ": "
                kind = type(item)
                if kind is str:
                    parts.append(separator + name + _escape(item))
                elif item is None:
                    parts.append(separator + name + "null")
                elif kind is list and item and type(item[0]) is str and _all_str(item):  # printed lines
                    parts.append(separator + name + self._strings(item, inner))
                else:
                    parts.append(separator + name)
                    self.encode(item, inner)
                if record and key == "value":
                    if separator[0] == "{":
                        self.first_value = True
                    self.cuts.append((start, len(parts)))
                separator = "," + inner
            parts.append(newline + "}")
        elif kind is list or isinstance(value, (list, tuple)):
            if not value:
                parts.append("[]")
                return
            if _all_str(value):
                parts.append(self._strings(value, newline))
                return
            inner = newline + "  "
            separator = "[" + inner
            for item in value:
                parts.append(separator)
                self.encode(item, inner)
                separator = "," + inner
            parts.append(newline + "]")
        elif isinstance(value, str):
            parts.append(_escape(value))
        elif value is None:
            parts.append("null")
        else:  # numbers, booleans: exactly as json writes them
            parts.append(json.dumps(value))


def _all_str(items: list | tuple) -> bool:
    return set(map(type, items)) == {str}


def _key(key: Any) -> str:
    """A non-string dict key as json writes it (``1`` -> ``"1"``, ``True`` -> ``"true"``)."""
    return _escape(json.dumps(key) if isinstance(key, (bool, float)) or key is None else str(key))


def write_trace_files(tree: dict[str, Any], folder: Path, class_name: str) -> tuple[Path, Path]:
    """Write the FULL and SUMMARY files of ``tree`` into ``folder``; returns their paths."""
    full = folder / f"{class_name}{FULL_SUFFIX}"
    summary = folder / f"{class_name}{SUMMARY_SUFFIX}"
    full_bytes, summary_bytes = encode_trees(tree)
    wrote_full = False
    try:
        write_atomic(full, full_bytes)
        wrote_full = True
        write_atomic(summary, summary_bytes)
    except OSError as exc:  # both files or neither: a new FULL file alone would claim a trace that failed
        if wrote_full:
            full.unlink(missing_ok=True)
        needed = f"{exc.strerror or exc} (they needed {size_text(len(full_bytes) + len(summary_bytes))})"
        raise OSError(exc.errno, f"nbtrace could not write the trace files into {folder}: {needed}") from exc
    return full, summary


def write_sidecar(
    folder: Path, class_name: str, sections: dict[str, Any], encoded: dict[str, str] | None = None
) -> Path | None:
    """Write nbtrace's sidecar (``core/sidecar.py``) beside the trace files; nothing when ``sections`` is empty.

    ``encoded``: sections whose JSON text is known already (``json.dumps(section, indent=1, sort_keys=True)``),
    spliced in rather than encoded again; the file is the same bytes either way.
    """
    if not sections:
        return None
    path = folder / f"{class_name}{SIDECAR_SUFFIX}"
    marks = {name: f"\0nbtrace:{name}\0" for name in (encoded or {}) if name in sections}
    document = sidecar_document({name: marks.get(name, value) for name, value in sections.items()})
    text = json.dumps(document, indent=1, sort_keys=True)
    for name, mark in marks.items():  # a section is two levels deep in the document
        assert encoded is not None
        text = text.replace(json.dumps(mark), encoded[name].replace("\n", "\n  "), 1)
    write_atomic(path, text.encode("utf-8"))
    return path


def safe_file_name(name: str) -> str:
    """A single path component for ``name``: separators escaped, long names shortened.

    Names that are already safe (every normal module path) are returned unchanged,
    so references stay identical to transformers'.
    """
    if any(ch in name for ch in _UNSAFE):
        for ch, escaped in _UNSAFE.items():
            name = name.replace(ch, escaped)
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:12]
        name = name.encode("utf-8")[: _MAX_NAME_BYTES - 13].decode("utf-8", "ignore") + "-" + digest
    return name


def unique_file_name(name: str, used: set[str]) -> str:
    """The safe file name (with ``.safetensors``) for ``name`` that is not in ``used`` yet (``~2``, ``~3``, … when
    two names make the same one), added to ``used``."""
    if not name.endswith(".safetensors"):
        name += ".safetensors"
    stem = safe_file_name(name[: -len(".safetensors")])
    candidate, n = f"{stem}.safetensors", 1
    while candidate in used:
        n += 1
        candidate = f"{stem}~{n}.safetensors"
    used.add(candidate)
    return candidate


class TensorStore:
    """Writes the safetensors files of one forward into one folder.

    Each name is used once per forward (a module called twice gets a file per
    call); files can be discarded again (pruned layer blocks) or moved away.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._dir = str(folder)
        self.written: list[str] = []
        self._used: set[str] = set()
        self.writer = FileWriter(self._dir)

    def file_name(self, name: str) -> str:
        """The unique, safe file name (with ``.safetensors``) for ``name``."""
        return unique_file_name(name, self._used)

    def save(self, name: str, tensor: torch.Tensor, ready: Callable[[], None] | None = None, private: bool = False) -> str:
        """Save ``tensor`` under ``name``; returns the reference the JSON holds (``./file``); ``writer.py`` writes it
        (``private``: ``tensor`` is a host copy no one else changes, which may wait for the writer's thread)."""
        from .transfer import to_host
        file_name = self.file_name(name)
        target = os.path.join(self._dir, file_name)
        tmp = os.path.join(self._dir, _temp_name(file_name))
        try:
            data = tensor.detach().contiguous()
            if data.device.type != "cpu":
                data, private = to_host(data), True
            self.writer.submit(file_name, data, lambda host: write_file(host, tmp, target, ready), private)
        except BaseException:
            self._used.discard(file_name)
            raise
        self.written.append(file_name)
        return f"./{file_name}"

    def link(self, name: str, existing: str, tensor: torch.Tensor, private: bool = False) -> str:
        """Store the same data as ``existing`` (a file of this forward) under ``name``: a hard link, or written."""
        file_name = self.file_name(name)
        target = os.path.join(self._dir, file_name)
        source = os.path.join(self._dir, existing)
        tmp = os.path.join(self._dir, _temp_name(file_name))
        data = tensor.detach().contiguous()
        failed = self.writer.failed

        def write(host: torch.Tensor) -> int:
            if existing in failed:
                raise OSError(errno.ENOENT, f"{existing} was not written")
            return link_file(source, tmp, target, host)

        try:
            self.writer.submit(file_name, data, write, private or not tensor.is_cpu)
        except BaseException:
            self._used.discard(file_name)
            raise
        self.written.append(file_name)
        return f"./{file_name}"

    def flush(self) -> None:
        """Wait for every file handed to the writer; raises (an OSError naming the folder) if one failed."""
        self.writer.flush()

    def failed(self) -> set[str]:
        """References (``./file``) of files this forward handed over that never reached the disk."""
        return {f"./{name}" for name in self.writer.failed}

    def discard(self, refs: Iterable[str]) -> None:
        """Delete files this forward wrote for references that the JSON no longer holds."""
        self.writer.wait()
        gone = {ref[2:] if ref.startswith("./") else ref for ref in refs}
        for file_name in gone:
            if file_name in self._used:
                (self.folder / file_name).unlink(missing_ok=True)
        self.written = [name for name in self.written if name not in gone]

    def move_to(self, destination: Path, extra: Iterable[Path] = ()) -> None:
        """Move every file of this forward (and ``extra`` files) into ``destination``."""
        self.writer.wait()
        destination.mkdir(parents=True, exist_ok=True)
        for file_name in self.written:
            source = self.folder / file_name
            if source.exists():
                os.replace(source, destination / file_name)
        for path in extra:
            if path.exists():
                os.replace(path, destination / path.name)
        self.folder = destination
        self._dir = self.writer.folder = str(destination)


def tree_refs(trees: Iterable[dict[str, Any]]) -> list[str]:
    """Every safetensors reference held by tensor records in ``trees``."""
    refs: list[str] = []
    stack: list[Any] = list(trees)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if is_tensor_record(item):
                value = item.get("value")
                if isinstance(value, str):
                    refs.append(value)
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return refs
