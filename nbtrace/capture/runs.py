"""One traced block is one run: its forwards are numbered, and an earlier run's leftovers go first.

When a block records its first forward into a folder, the ``forward_<i>/`` files of the same
model that an earlier block left there are removed: the new forward replaces the folder's
own files anyway (as with transformers), and a shorter new run must not be read together
with the extra forwards of a longer old one. Only files named after the model (and
nbtrace's temporary files) are removed; a ``forward_<i>/`` folder is removed only when
nothing else is left in it. Every forward of a run of several carries the run's id and
its index (``core/run.py``), so whatever remains mixed is refused when it is read.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..core.forwards import forward_folders


def _belongs_to(name: str, class_name: str) -> bool:
    """Is ``name`` a file nbtrace writes for ``class_name`` (its JSON files, its root's and its modules' tensors)?"""
    if name.startswith(".") and name.endswith(".tmp"):
        name = name[1:]
    own = ("_debug_tree_", "_inputs", "_outputs", ".", "@")
    return name.startswith(tuple(class_name + suffix for suffix in own))


def remove_earlier_forwards(folder: Path, class_name: str) -> None:
    """Delete the ``forward_<i>/`` files of ``class_name`` that an earlier block left in ``folder``."""
    for child in forward_folders(folder).values():
        try:
            for file in child.iterdir():
                if (file.is_file() or file.is_symlink()) and _belongs_to(file.name, class_name):
                    file.unlink()
            if not any(child.iterdir()):
                child.rmdir()
        except OSError as exc:
            warnings.warn(
                f"nbtrace could not remove {child} of an earlier run ({exc.strerror or exc}); "
                "reading this folder's forwards will fail until it is gone",
                stacklevel=4,
            )
