"""Models for the tensor-parallel tests: one tiny decoder, single-process or split over ranks, same weights.

- ``build_reference``: plain ``nn.Linear`` projections, one process.
- ``build_dtensor_tp``: the reference split with ``parallelize_module`` (``ColwiseParallel`` on
  q/k/v/gate/up, ``RowwiseParallel`` on o/down); attention runs on this rank's heads.
- ``build_megatron_tp``: the reference split by hand: each projection is a plain ``nn.Linear`` holding
  this rank's slice, and the parent all-reduces the row-parallel outputs (plain tensors throughout).

Module paths are the same in all three, so their traces line up call for call. ``damage_shard`` scales
one rank's slice of a split weight; ``damage_replica`` one rank's copy of a weight every rank holds whole.
``Pair`` hands a RowwiseParallel output straight to a module (an AsyncCollectiveTensor); ``LayoutProbe``
hands one tensor to a module under many DTensor layouts on a 2-D mesh (4 ranks).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

HIDDEN, HEADS, INTERMEDIATE, LAYERS = 64, 8, 128, 2
COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


class RMSNorm(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class CoreAttention(nn.Module):
    """Causal attention on ``[batch, heads, seq, head_dim]``: with tensor parallelism, this rank's heads."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = HEADS  # heads this process computes
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))
        self.core = CoreAttention()
        self.reduce: Callable[[torch.Tensor], torch.Tensor] = _same  # the hand split's all-reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, HIDDEN // HEADS).transpose(1, 2)

        out = self.core(heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)))
        return self.reduce(self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1)))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()
        self.reduce: Callable[[torch.Tensor], torch.Tensor] = _same

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.norm(hidden_states)


def build_reference() -> TinyDecoder:
    """The single-process model; its weights depend on a fixed seed only (the same in every process)."""
    model = TinyDecoder()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator) / param.shape[1] ** 0.5)
    return model.eval()


def make_input() -> torch.Tensor:
    return torch.randn(2, 16, HIDDEN, generator=torch.Generator().manual_seed(1))


def _local_heads(model: TinyDecoder, world: int) -> None:
    for layer in model.layers:
        layer.self_attn.heads = HEADS // world


def build_dtensor_tp(reference: TinyDecoder, mesh: object) -> TinyDecoder:
    """A copy of ``reference`` split over the 1-D ``mesh`` with ``parallelize_module``."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model = copy.deepcopy(reference)
    plan: dict[str, object] = {}
    for i in range(LAYERS):
        plan.update({f"layers.{i}.{name}": ColwiseParallel() for name in COLWISE})
        plan.update({f"layers.{i}.{name}": RowwiseParallel() for name in ROWWISE})
    parallelize_module(model, mesh, plan)  # type: ignore[arg-type]
    _local_heads(model, mesh.size())  # type: ignore[attr-defined]
    return model


def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x


def build_megatron_tp(reference: TinyDecoder) -> TinyDecoder:
    """A copy of ``reference`` split by hand: this rank's weight slices, an explicit all-reduce."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = copy.deepcopy(reference)
    for layer in model.layers:
        for name in COLWISE + ROWWISE:
            owner, child = name.split(".")
            full = getattr(getattr(layer, owner), child).weight.detach()
            piece = full.chunk(world, dim=0 if name in COLWISE else 1)[rank].clone()
            linear = nn.Linear(piece.shape[1], piece.shape[0], bias=False)
            linear.weight = nn.Parameter(piece)
            setattr(getattr(layer, owner), child, linear)
        layer.self_attn.reduce = _all_reduce
        layer.mlp.reduce = _all_reduce
    _local_heads(model, world)
    return model


def damage_shard(model: nn.Module, param: str, rank: int, factor: float = 1.5) -> None:
    """Scale ``rank``'s slice of a split weight (DTensor or hand split); call it on every rank."""
    if dist.get_rank() == rank:
        weight = model.get_parameter(param)
        with torch.no_grad():
            (weight.to_local() if hasattr(weight, "to_local") else weight).mul_(factor)


def damage_replica(model: nn.Module, param: str, rank: int, factor: float = 1.5) -> None:
    """Scale ``rank``'s copy of a weight every rank holds whole (a norm); call it on every rank."""
    if dist.get_rank() == rank:
        with torch.no_grad():
            model.get_parameter(param).mul_(factor)


class Keep(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t


class Pair(nn.Module):
    """``keep(b(a(x)))``: split colwise/rowwise, ``keep`` is handed b's output as the caller gets it."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(2)
        self.a, self.b = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
        with torch.no_grad():
            self.a.weight.copy_(torch.randn(8, 8, generator=generator))
            self.b.weight.copy_(torch.randn(8, 8, generator=generator))
        self.keep = Keep()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.keep(self.b(self.a(x)))


def split_pair(model: Pair, mesh: object) -> Pair:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(model, mesh, {"a": ColwiseParallel(), "b": RowwiseParallel()})  # type: ignore[arg-type]
    return model


PROBES = ("s0_s1", "s0_s0", "r_s1", "s1_partial", "partial_r", "submesh_s1", "uneven_s0")


class LayoutProbe(nn.Module):
    """Hands one 6x10 tensor to a pass-through module per DTensor layout (plain, without meshes)."""

    def __init__(self, mesh2d: object | None = None, world: object | None = None) -> None:
        super().__init__()
        self.probes = nn.ModuleDict({name: Keep() for name in PROBES})
        self.mesh2d, self.world = mesh2d, world

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in PROBES:
            self.probes[name](self._layout(name, x) if self.mesh2d is not None else x)
        return x

    def _layout(self, name: str, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

        mesh = self.mesh2d
        dp, tp = mesh.get_coordinate()  # type: ignore[attr-defined]
        if name == "s1_partial":  # the tp ranks of a dp row hold a quarter and three quarters of its columns
            local = x.chunk(2, dim=1)[dp] * (0.25, 0.75)[tp]
            return DTensor.from_local(local, mesh, [Shard(1), Partial()], run_check=False)  # type: ignore[arg-type]
        if name == "partial_r":
            return DTensor.from_local(x * (0.25, 0.75)[dp], mesh, [Partial(), Replicate()], run_check=False)  # type: ignore[arg-type]
        if name == "submesh_s1":
            return distribute_tensor(x, mesh["tp"], [Shard(1)])  # type: ignore[index]
        if name == "uneven_s0":  # 6 rows on 4 ranks: 2, 2, 2, 0
            return distribute_tensor(x, self.world, [Shard(0)])  # type: ignore[arg-type]
        placements = {"s0_s1": [Shard(0), Shard(1)], "s0_s0": [Shard(0), Shard(0)], "r_s1": [Replicate(), Shard(1)]}
        return distribute_tensor(x, mesh, placements[name])  # type: ignore[arg-type]


def probe_input() -> torch.Tensor:
    return torch.randn(6, 10, generator=torch.Generator().manual_seed(7))
