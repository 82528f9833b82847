"""nbtrace.jax's capture on its own: how calls are named (modules sharing their caller's scope among them), how
their arguments are recorded, lifted transforms, apply's options, a forward that raises, the twin's memory budget,
bad inputs, and JAX's configuration left as it was."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbtrace
import nbtrace.jax as ntj
from tests.test_jax import _pair


def test_calls_are_named_as_the_pytorch_capture_names_them(tmp_path):
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.LayerNorm(name="ln_2")(nn.LayerNorm(name="ln_1")(nn.Dense(4)(x)))

    class Head(nn.Module):
        def setup(self):
            self.table = self.param("table", nn.initializers.normal(), (4, 3))

        def project(self, x):
            return x @ self.table

    class Model(nn.Module):
        def setup(self):
            self.layers = [Block()]  # one item of a list attribute: Flax names it layers_0
            self.head = Head()

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            for block in self.extra:  # a list attribute whose items the model names: a stack of two
                x = block(x)
            return self.head.project(x)

    class Stacked(Model):
        def setup(self):
            super().setup()
            self.extra = [Block(name=f"block_{i}") for i in range(2)]

    model = Stacked()
    x = np.ones((2, 4), np.float32)
    variables = model.init(jax.random.PRNGKey(0), x)
    trace = ntj.trace(model, variables, x, debug_path=tmp_path, do_prune_layers=False).trace
    paths = [node.module_path for node in trace.nodes()]
    assert paths == ["Stacked", "Stacked.layers.0", "Stacked.layers.0.Dense_0", "Stacked.layers.0.ln_1",
                     "Stacked.layers.0.ln_2", "Stacked.block.0", "Stacked.block.0.Dense_0", "Stacked.block.0.ln_1",
                     "Stacked.block.0.ln_2", "Stacked.block.1", "Stacked.block.1.Dense_0", "Stacked.block.1.ln_1",
                     "Stacked.block.1.ln_2", "Stacked.head.project"]
    assert set(trace.sidecar["parameters"]) >= {"Stacked.block.1.Dense_0", "Stacked.head", "Stacked.layers.0.ln_1"}
    assert set(trace.sidecar["twin"]["calls"]) >= {"Stacked.block.1.ln_2", "Stacked.head.project"}


def test_a_rematerialised_stack_is_recorded_and_a_vmapped_call_is_said_not_recorded(tmp_path):
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + nn.Dense(4)(nn.LayerNorm()(x))

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i in range(2):
                x = nn.remat(Block)(name=f"layers_{i}")(x)
            x = nn.vmap(Block, variable_axes={"params": None}, split_rngs={"params": False})(name="per_row")(x)
            return nn.Dense(3)(x)

    x = np.random.RandomState(0).randn(2, 4).astype(np.float32)
    model = Model()
    trace = ntj.trace(model, model.init(jax.random.PRNGKey(0), x), x, debug_path=tmp_path).trace
    paths = [node.module_path for node in trace.nodes()]
    assert paths[:4] == ["Model", "Model.layers.0", "Model.layers.0.LayerNorm_0", "Model.layers.0.Dense_0"]
    assert trace["Model.layers.1.Dense_0"].outputs.std > 0  # remat ran as it is: values recorded
    inside = trace["Model.per_row.Dense_0"].outputs
    assert isinstance(inside, str) and "traced by a JAX transform" in inside


def _einsum_mlp():
    """gemma's FeedForward, written again: two Einsum projections sharing the feed-forward's scope."""
    import flax.linen as nn

    class Einsum(nn.Module):
        shape: tuple
        weight_name: str = "w"

        @nn.compact
        def __call__(self, eqn, x):
            return jnp.einsum(eqn, x, self.param(self.weight_name, nn.initializers.normal(1.0), self.shape))

    class FeedForward(nn.Module):
        @nn.compact
        def __call__(self, x):
            gating = Einsum((4, 2, 8), weight_name="gating_einsum")
            nn.share_scope(self, gating)  # its kernel lives at mlp/gating_einsum, as the checkpoints have it
            gate = gating("...F,FNH->...NH", x)
            linear = Einsum((8, 4), weight_name="linear")
            nn.share_scope(self, linear)
            return nn.LayerNorm()(linear("...H,HF->...F", nn.gelu(gate[..., 0, :]) * gate[..., 1, :]))

    return FeedForward


def test_a_module_sharing_its_callers_scope_is_a_call_of_its_own(tmp_path):
    import flax.linen as nn

    FeedForward = _einsum_mlp()

    class Adapter(nn.Module):  # share_scope from setup, the child a named attribute; reads a parameter of its own
        def setup(self):
            self.child = nn.Dense(4)
            nn.share_scope(self, self.child)

        @nn.compact
        def __call__(self, x):
            return self.child(x) + x @ self.param("lora", nn.initializers.normal(1.0), (4, 4))

    class Wrapper(nn.Module):  # the other direction: the wrapper takes over the scope of the module it wraps
        base: nn.Module

        def setup(self):
            nn.share_scope(self, self.base)

        def __call__(self, x):
            return 2 * self.base(x)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _=None):
            return x + FeedForward(name="mlp")(x), None

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x, _ = Block(name="block")(x)
            x, _ = nn.remat(Block)(name="remat_block")(x)
            x, _ = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=2)(name="scan")(x, None)
            return Wrapper(nn.Dense(4, name="head"))(Adapter(name="adapter")(x))

    x = np.random.RandomState(0).randn(2, 4).astype(np.float32)
    model = Model()
    variables = model.init(jax.random.PRNGKey(0), x)
    trace = ntj.trace(model, variables, x, debug_path=tmp_path, do_prune_layers=False).trace
    paths = [node.module_path for node in trace.nodes()]
    for block in ("Model.block", "Model.remat_block", "Model.scan"):  # plain, rematerialised, scanned (eager pass)
        assert [p for p in paths if p.startswith(block + ".mlp.")][-3:] == [
            f"{block}.mlp.gating_einsum", f"{block}.mlp.linear", f"{block}.mlp.LayerNorm_0"]  # by the weight it owns
    for call, index in (("Model.block", 0), ("Model.remat_block", 0), ("Model.scan", 1)):  # scan: its eager pass
        outputs = trace.get(f"{call}.mlp.gating_einsum", index).outputs
        assert outputs.shape == (2, 2, 8) and outputs.std > 0
    assert paths[-4:] == ["Model.adapter", "Model.adapter.child", "Model.head", "Model.head.head"]
    parameters = trace.sidecar["parameters"]
    assert set(parameters["Model.block.mlp.gating_einsum"]) == {"gating_einsum"}
    assert parameters["Model.scan.mlp.linear"]["linear"]["shape"] == [2, 8, 4]
    assert set(parameters["Model.block.mlp.LayerNorm_0"]) == {"scale", "bias"}  # a compact module inside: its own
    assert "Model.block.mlp" not in parameters
    assert set(parameters["Model.adapter"]) == {"lora"} and set(parameters["Model.adapter.child"]) == {"kernel", "bias"}
    assert set(parameters["Model.head.head"]) == {"kernel", "bias"}
    assert {"Model.block.mlp.linear", "Model.scan.mlp.gating_einsum@3", "Model.head.head"} <= set(
        trace.sidecar["twin"]["calls"])  # the float64 twin names its calls as the forward did


def test_arguments_are_recorded_by_their_parameter_names(tmp_path):
    import json

    import flax.linen as nn

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x, positions, mask=None, *extra, scale=1.0):
            return nn.Dense(4)(x) * scale + positions[..., None] + mask.sum() + sum(extra)

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, positions):
            return Attention(name="attn")(x, positions, jnp.ones((2, 3, 3), bool), 1.0, scale=0.5)

    x = np.random.RandomState(0).randn(2, 3, 4).astype(np.float32)
    positions = np.tile(np.arange(3, dtype=np.int32), (2, 1))
    model = Model()
    ntj.trace(model, model.init(jax.random.PRNGKey(0), x, positions), x, positions, debug_path=tmp_path)
    tree = json.loads((tmp_path / "Model_debug_tree_FULL_TENSORS.json").read_text())
    assert list(tree["inputs"]["args"]) and tree["inputs"]["kwargs"] == {}  # the root as passed to apply
    attn = tree["children"][0]
    assert list(attn["inputs"]["kwargs"]) == ["x", "positions", "mask", "scale"]  # in the signature's order
    assert attn["inputs"]["args"] == ["1.0"]  # a *args value has no name: positional
    dense = attn["children"][0]
    assert list(dense["inputs"]) == ["kwargs"] and list(dense["inputs"]["kwargs"]) == ["inputs"]


def test_auto_leaves_the_twin_out_where_its_float64_copy_does_not_fit(tmp_path, monkeypatch):
    from nbtrace.capture.twin import host_memory

    pair, params, jax_input, _ = _pair("decoder", 0, "float32", None)
    monkeypatch.setattr(host_memory, "available_host_memory", lambda: 4096)
    twin = ntj.trace(pair.flax_model, params, jax_input, debug_path=tmp_path / "auto").trace.sidecar["twin"]
    assert twin["calls"] == {} and "more than half the" in twin["skipped"]
    forced = ntj.trace(pair.flax_model, params, jax_input, debug_path=tmp_path / "forced", measure_rounding="twin")
    assert forced.trace.sidecar["twin"]["calls"]


def test_a_forward_that_raises_leaves_the_trace_of_what_ran(tmp_path):
    import flax.linen as nn

    class Fails(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(4, name="first")(x)
            return nn.Dense(4, name="second")(x.reshape(3, -1))  # 8 values do not make rows of 3

    x = np.random.RandomState(0).randn(2, 4).astype(np.float32)
    model = Fails()
    variables = {"params": {"first": {"kernel": np.ones((4, 4), np.float32), "bias": np.zeros(4, np.float32)}}}
    with pytest.raises(TypeError, match="reshape"):
        ntj.trace(model, variables, x, debug_path=tmp_path)
    trace = nbtrace.load_trace(tmp_path)
    assert [n.module_path for n in trace.nodes()] == ["Fails", "Fails.first"]
    assert trace["Fails.first"].outputs.shape == (2, 4)
    assert "reshape" in trace.root.error["message"]


def test_apply_options_pass_on_and_are_not_inputs(tmp_path):
    import flax.linen as nn

    class Normed(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False)(nn.Dense(4)(x))

    x = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    model = Normed()
    variables = model.init(jax.random.PRNGKey(0), x)
    recorded = ntj.trace(model, variables, x, debug_path=tmp_path, mutable=["batch_stats"])
    output, state = recorded.output
    assert output.shape == (3, 4) and "batch_stats" in state
    assert "mutable" not in recorded.trace.root.inputs["kwargs"]
    assert set(recorded.trace.sidecar["parameters"]["Normed.BatchNorm_0"]) == {"bias", "scale", "mean", "var"}
    assert recorded.trace.sidecar["twin"]["calls"]["Normed.BatchNorm_0"]["out"]["acc"] < 1e-5


def test_nothing_of_jax_is_left_changed(tmp_path):
    from flax.core.scope import Scope
    from jax._src import core, dtypes

    pair, _, _, _ = _pair("decoder", 0, "float32", None)
    bind, asked, read = core.Primitive.bind, dtypes.check_and_canonicalize_user_dtype, Scope.get_variable
    ntj.trace(pair.flax_model, pair.params, pair.input_ids_np, debug_path=tmp_path)
    assert core.Primitive.bind is bind and dtypes.check_and_canonicalize_user_dtype is asked
    assert Scope.get_variable is read
    assert not jax.config.jax_enable_x64
    assert jnp.ones(2).astype(jnp.float32).dtype == jnp.float32


def test_bad_inputs_are_named(tmp_path):
    pair, params, jax_input, _ = _pair("decoder", 0, "float32", None)
    with pytest.raises(ValueError, match="measure_rounding must be one of"):
        ntj.trace(pair.flax_model, params, jax_input, debug_path=tmp_path, measure_rounding="sometimes")
    with pytest.raises(TypeError, match="flax.linen or flax.nnx Module"):
        ntj.trace(pair.torch_model, params, jax_input, debug_path=tmp_path)
