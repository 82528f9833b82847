"""Record the golden folder once, from the original: full tensors and the float64 twin, kept with the tests.

    python docs/examples/port_ci/record_golden.py [FOLDER]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import nbtrace
from toy_models import build_original, make_inputs


def record(folder: Path) -> None:
    original = build_original()
    with torch.no_grad(), nbtrace.trace(original, debug_path=folder, use_repr=False, do_prune_layers=False,
                                        measure_rounding=True):
        original(**make_inputs())


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "golden")
