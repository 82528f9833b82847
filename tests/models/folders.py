"""Editing a trace folder the way another situation would have written it (for tests of the other paths)."""

from __future__ import annotations

import json
from pathlib import Path

from nbtrace.core.sidecar import sidecar_path
from nbtrace.core.twin import TWIN_SECTION


def without_twin(folder: Path) -> Path:
    """The folder as if its float64 twin had been skipped (the model's float64 copy did not fit in memory): the
    sidecar without the twin section, so that what else the folder holds (measured rounding) decides."""
    [path] = list(Path(folder).glob("*_SUMMARY.json"))
    sidecar = sidecar_path(path)
    document = json.loads(sidecar.read_text())
    assert document["sections"].pop(TWIN_SECTION)["calls"], "the folder recorded no twin to take out"
    sidecar.write_text(json.dumps(document))
    return Path(folder)
