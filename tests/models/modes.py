"""What the tests of other kinds of models share: weights of order one, and a port compared in every mode a user
takes (default folders, full-tensor folders, the live port replayed, both live)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import nbtrace


def unit_gain(model: nn.Module) -> None:
    """Linear and convolution weights with unit gain (activations of order one), small biases, LayerNorms near one:
    weights from the global generator, as a seeded ``build`` draws them."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1)
            elif isinstance(module, nn.LayerNorm):
                module.weight.normal_(1.0, 0.1)
                module.bias.normal_(0.0, 0.1)


def traced(model: nn.Module, args: tuple, folder: Path, **options) -> Path:
    """``folder`` holding a trace of ``model(*args)`` with ``nbtrace.trace``'s ``options``."""
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, **options):
        model(*args)
    return folder


def reference_folders(original: nn.Module, args: tuple, base: Path) -> tuple[Path, Path]:
    """The original traced with nbtrace.trace's defaults, and with full tensors of every layer."""
    return (traced(original, args, base / "original"),
            traced(original, args, base / "original-full", use_repr=False, do_prune_layers=False))


def every_mode(original: nn.Module, port: nn.Module, args: tuple, references: tuple[Path, Path], folder: Path,
               rename: dict[str, str] | None) -> dict[str, object]:
    """The port compared with the original in every mode: mode -> Comparison."""
    default, full = references
    options = {"rename": rename} if rename else {}
    return {
        "default folders": nbtrace.compare(default, traced(port, args, folder), **options),
        "full folders": nbtrace.compare(
            full, traced(port, args, folder.with_name(folder.name + "-full"), use_repr=False, do_prune_layers=False),
            **options),
        "replayed": nbtrace.compare(full, port, **options),
        "both live": nbtrace.compare(original, port, inputs=args, **options),
    }
