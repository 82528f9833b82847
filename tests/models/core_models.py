"""Small models, built from code, that exercise the capture's awkward cases."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, size: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(size, size)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.proj(x))


class Stack(nn.Module):
    """Embedding-free stack of blocks: ``layers.N`` are layer blocks the format prunes."""

    def __init__(self, layers: int = 5, size: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(size) for _ in range(layers))
        self.head = nn.Linear(size, 3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class CalledTwice(nn.Module):
    """``act`` runs twice per forward, on different data."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.second(self.act(self.first(x))))


class Boom(RuntimeError):
    pass


class FailingLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.error = Boom("layer two exploded at object at 0xdeadbeef")

    def forward(self, x):
        self.inner(x)
        raise self.error


class Failing(nn.Module):
    """Its second layer raises after its own submodule ran."""

    def __init__(self) -> None:
        super().__init__()
        self.ok = nn.Linear(4, 4)
        self.bad = FailingLayer()
        self.never = nn.Linear(4, 4)

    def forward(self, x):
        return self.never(self.bad(self.ok(x)))


class OddOutputs(nn.Module):
    """A leaf that returns every kind of tensor that must not crash a trace."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 2))

    def forward(self, x):
        return {
            "empty": torch.zeros(0, 3),
            "empty_half": torch.zeros(0, dtype=torch.float16),
            "nan_inf": torch.tensor([1.0, float("nan"), float("inf"), -float("inf")]),
            "complex": torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64),
            "int": torch.arange(6).reshape(2, 3),
            "bool": torch.tensor([True, False]),
            "double": torch.tensor([1.5, 2.5], dtype=torch.float64),
            "meta": torch.empty(2, 3, device="meta"),
            "scalar": torch.tensor(3.0),
            "one": torch.tensor([7.0]),
            "lin": x @ self.weight,
        }


class OddWrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.odd = OddOutputs()

    def forward(self, x):
        return self.odd(x)


class UnsafeKeys(nn.Module):
    """A leaf whose output dict has keys that would escape the debug folder if used as paths."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 2))

    def forward(self, x):
        y = x @ self.weight
        return {"../escape": y, "/abs": y + 1, "a/b": y + 2, "..": y + 3, "ok": y + 4}


class UnsafeWrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = UnsafeKeys()

    def forward(self, x):
        return self.inner(x)


class ScaledTop(nn.Module):
    """Its top-level forward multiplies by a parameter itself (so the output has a grad_fn)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return self.lin(x) * self.scale


def seeded(model_class, *args, seed: int = 0, **kwargs) -> nn.Module:
    torch.manual_seed(seed)
    return model_class(*args, **kwargs).eval()
