"""Weights of a published library's model as the port fixtures set them: drawn where its initialiser leaves them
trivial, and converted into another house's model in order.

A library's fresh BatchNorm holds weight 1, bias 0, mean 0 and variance 1, and its convolutions' biases often 0: a
norm or a bias planted wrong would then change nothing. ``draw_batch_norms`` draws them from the global generator
(seed it first), module by module in ``modules()`` order, so a fixture's weights depend only on its seed;
``flax_batch_norm`` draws a Flax model's BatchNorm leaves the same way from a numpy generator.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def flax_batch_norm(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray | None:
    """A Flax BatchNorm leaf drawn from ``rng`` by its path ``name`` (``jax.tree_util.keystr``): scale, bias, mean
    and variance as ``draw_batch_norms`` draws them (a scale of any layer too); None for any other leaf, which the
    fixture draws by its own rule."""
    if "'scale'" in name or "'var'" in name:
        return np.asarray(rng.uniform(0.5, 1.5, shape), np.float32)
    if "'bias'" in name and "BatchNorm" in name or "'mean'" in name:
        return np.asarray(rng.normal(0.0, 0.1, shape), np.float32)
    return None


def draw_batch_norms(model: nn.Module, biased: tuple[type[nn.Module], ...] = ()) -> None:
    """Every ``BatchNorm2d``'s affine parameters and running statistics drawn, and the bias of every module of a
    type in ``biased`` that has one."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
            elif isinstance(module, biased) and module.bias is not None:
                module.bias.normal_(0.0, 0.1)


def load_in_order(model: nn.Module, reference: nn.Module, reshape: bool = False) -> None:
    """``reference``'s state into ``model``, entry by entry in the order both list them (``num_batches_tracked``
    left out), for two houses whose state_dicts hold the same tensors under other names. Each pair must have one
    shape, or with ``reshape`` one size (a linear head's weight as a 1x1 kernel)."""
    theirs = [(k, v) for k, v in reference.state_dict().items() if not k.endswith("num_batches_tracked")]
    mine = [(k, v) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")]
    assert len(theirs) == len(mine)
    converted = {}
    for (name, target), (their_name, value) in zip(mine, theirs):
        if reshape:
            assert target.numel() == value.numel(), (name, their_name)
            value = value.reshape(target.shape)
        else:
            assert target.shape == value.shape, (name, their_name)
        converted[name] = value
    model.load_state_dict(converted, strict=False)
