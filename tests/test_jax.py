"""A JAX/Flax original traced by ``nbtrace.jax`` and compared with its PyTorch port.

Two families from code (a decoder with RoPE, grouped-query attention, a fused k/v projection and a fused gate/up
kernel; a ViT with a convolutional patch embedding on NHWC pixels), their ports converted in code, every planted
bug named at its module from folders (the float64 twins both sides measured) and against the live port, in
float32 and bfloat16, with other seeds than the models were written with.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import nbtrace
import nbtrace.jax as ntj
from tests.models import flax_decoder_port, flax_vit

ROOT = Path(__file__).resolve().parent.parent
DECODER_BUGS = {"norm_eps": "layers.0.input_norm", "query_scale": "layers.0.attn", "rope_base": "layers.0.attn",
                "swapped_gate_up": "layers.0.mlp", "transposed_kernel": "layers.0.attn.q_proj"}
VIT_BUGS = {"gelu": "layers.0.mlp", "norm_eps": "layers.0.ln_1", "query_scale": "layers.0.attn",
            "transposed_kernel": "layers.0.attn.query"}


def _pair(family: str, seed: int, dtype: str, bug: str | None):
    bugs = frozenset([bug]) if bug else frozenset()
    if family == "decoder":
        pair = flax_decoder_port.make_decoder_pair(seed=seed, dtype=dtype, bugs=bugs)
        jax_input, torch_input = pair.input_ids_np, pair.input_ids_torch
    else:
        pair = flax_vit.make_vit_pair(seed=seed, dtype=dtype, bugs=bugs)
        jax_input, torch_input = pair.pixels_np, pair.pixels_torch
    params = pair.params
    if dtype == "bfloat16":  # the original stores bfloat16 weights too, and is given the port's bfloat16 pixels
        params = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), params)
        if family == "vit":
            jax_input = jnp.asarray(jax_input).astype(jnp.bfloat16)
    return pair, params, jax_input, torch_input


def _port_call(family: str):
    return None if family == "decoder" else (lambda port, pixels: port(pixels.permute(0, 3, 1, 2)))  # NHWC


def _named(comparison) -> str | None:
    first = comparison.first_divergence
    return None if first is None else first.module_path.split(".", 1)[1]


CASES = [("decoder", 3, "float32"), ("decoder", 4, "bfloat16"), ("vit", 5, "float32"), ("vit", 6, "bfloat16")]


@pytest.mark.parametrize(("family", "seed", "dtype"), CASES)
def test_each_bug_is_named_at_its_module_from_folders_and_against_the_live_port(tmp_path, family, seed, dtype):
    bugs = DECODER_BUGS if family == "decoder" else VIT_BUGS
    for bug in [None, *bugs]:
        pair, params, jax_input, torch_input = _pair(family, seed, dtype, bug)
        original, port = tmp_path / f"{bug}_original", tmp_path / f"{bug}_port"
        recorded = ntj.trace(pair.flax_model, params, jax_input, debug_path=original)
        assert recorded.trace.sidecar["twin"]["calls"], "the float64 twin was recorded"
        with nbtrace.trace(pair.torch_model, debug_path=port):
            pair.torch_model(torch_input)
        from_folders = nbtrace.compare(original, port)
        expected = bugs.get(bug)
        assert _named(from_folders) == expected, (bug, from_folders.first_divergence)
        if bug is None:
            assert from_folders.verdict == "agree"
        if dtype == "float32" or bug is None:
            live = nbtrace.compare(original, pair.torch_model, call=_port_call(family))
            assert _named(live) == expected, (bug, live.first_divergence)


def test_a_bfloat16_port_of_a_float32_original_agrees_and_says_what_its_weights_hide(tmp_path):
    pair, _, jax_input, torch_input = _pair("decoder", 7, "bfloat16", None)
    ntj.trace(pair.flax_model, pair.params, jax_input, debug_path=tmp_path / "original")  # float32 weights
    with nbtrace.trace(pair.torch_model, debug_path=tmp_path / "port"):
        pair.torch_model(torch_input)
    comparison = nbtrace.compare(tmp_path / "original", tmp_path / "port")
    assert comparison.verdict == "agree"
    pair, _, jax_input, torch_input = _pair("decoder", 7, "bfloat16", "query_scale")
    ntj.trace(pair.flax_model, pair.params, jax_input, debug_path=tmp_path / "original_bug")
    assert _named(nbtrace.compare(tmp_path / "original_bug", pair.torch_model)) == "layers.0.attn"


@pytest.fixture(scope="module")
def decoder_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jax") / "original"
    pair, params, jax_input, _ = _pair("decoder", 0, "float32", None)
    recorded = ntj.trace(pair.flax_model, params, jax_input, debug_path=folder)
    return folder, recorded, pair


def test_the_trace_reads_as_a_pytorch_trace_does(decoder_folder):
    folder, _, _ = decoder_folder
    trace = nbtrace.load_trace(folder)
    paths = [node.module_path for node in trace.nodes()]
    assert paths[:4] == ["FlaxDecoder", "FlaxDecoder.embedder.encode", "FlaxDecoder.layers.0",
                         "FlaxDecoder.layers.0.input_norm"]
    assert "FlaxDecoder.layers.1" not in paths and "FlaxDecoder.layers.2" in paths  # pruned as the format prunes
    assert paths[-1] == "FlaxDecoder.embedder.decode"
    norm = trace["FlaxDecoder.layers.0.input_norm"]
    out = norm.outputs
    assert out.shape == (2, 7, 32) and out.dtype == "torch.float32"
    assert out.mean is not None and out.std > 0
    full = json.loads((folder / "FlaxDecoder_debug_tree_FULL_TENSORS.json").read_text())
    logits = full["children"][-1]["outputs"]
    assert logits["value"][0].startswith("tensor([[[") and logits["shape"] == "torch.Size([2, 7, 64])"
    numerics = trace.numerics
    assert numerics["framework"] == "jax" and numerics["jit"] is False and numerics["jax"] == jax.__version__
    weights = trace.sidecar["parameters"]["FlaxDecoder.layers.0.attn.q_proj"]["kernel"]
    assert weights["shape"] == [32, 4, 8]
    frame = nbtrace.to_dataframe(trace)
    assert "FlaxDecoder.layers.0.attn.q_proj" in set(frame["module_path"])


def test_views_and_the_cli_show_a_jax_trace_and_its_comparison(decoder_folder, tmp_path):
    folder, _, pair = decoder_folder
    with nbtrace.trace(pair.torch_model, debug_path=tmp_path / "port"):
        pair.torch_model(pair.input_ids_torch)
    comparison = nbtrace.compare(folder, tmp_path / "port")
    from nbtrace.render.numerics_words import numerics_words

    words = " ".join(numerics_words(comparison.a))
    assert f"JAX {jax.__version__}" in words and "eager" in words
    view = nbtrace.TraceView(comparison)
    assert "kv_proj" in view.payload and f"JAX {jax.__version__}" in view.payload
    import matplotlib

    matplotlib.use("Agg")
    axes = nbtrace.plot_stats(comparison.a, compare=comparison.b)
    assert axes.lines, "mean and std across layers drawn for the JAX trace beside the port's"
    from tests.test_html_file import blocks

    data = " ".join(blocks(nbtrace.save_html(comparison, tmp_path / "page.html").read_text(encoding="utf-8")).values())
    assert "FlaxDecoder.layers.0.attn.q_proj" in data and f"JAX {jax.__version__}" in data
    shown = subprocess.run([sys.executable, "-m", "nbtrace", "show", str(folder)], capture_output=True, text=True,
                           cwd=tmp_path, check=True)
    assert "kv_proj" in shown.stdout and "embedder.decode" in shown.stdout
    assert f"(JAX {jax.__version__} (cpu), flax" in shown.stdout
    told = subprocess.run([sys.executable, "-m", "nbtrace", "diff", str(folder), str(tmp_path / "port")],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert told.returncode == 0 and f"JAX {jax.__version__}" in told.stdout, told.stdout
    diffed = subprocess.run([sys.executable, "-m", "nbtrace", "diff", str(folder), str(tmp_path / "port"), "--json"],
                            capture_output=True, text=True, cwd=tmp_path, check=False)
    assert diffed.returncode == 0, diffed.stderr
    assert json.loads(diffed.stdout)["verdict"] == "agree"


def test_full_tensors_are_written_as_safetensors(tmp_path):
    pair, params, jax_input, torch_input = _pair("vit", 1, "float32", None)
    ntj.trace(pair.flax_model, params, jax_input, debug_path=tmp_path / "original", use_repr=False)
    trace = nbtrace.load_trace(tmp_path / "original")
    patches = trace["FlaxViT.patch_embed"].outputs.load()
    assert isinstance(patches, torch.Tensor) and tuple(patches.shape) == (2, 4, 4, 32)
    with nbtrace.trace(pair.torch_model, debug_path=tmp_path / "port", use_repr=False):
        pair.torch_model(torch_input)
    assert nbtrace.compare(tmp_path / "original", tmp_path / "port").verdict == "agree"


_WITHOUT_TORCH = r"""
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError from here on
import jax
from tests.models import flax_decoder
import nbtrace.jax as ntj
model = flax_decoder.FlaxDecoder(flax_decoder.DecoderConfig())
ids = jax.numpy.asarray([[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]], dtype="int32")
params = {"params": model.init(jax.random.PRNGKey(0), ids)["params"]}
ntj.trace(model, params, ids, debug_path=sys.argv[1])
ntj.trace(model, params, ids, debug_path=sys.argv[1] + "_full", use_repr=False)  # safetensors from numpy
from nbtrace.capture.twin import host_memory
host_memory.available_host_memory = lambda: 1024  # measure_rounding="auto" leaves a twin out that does not fit
assert ntj.trace(model, params, ids, debug_path=sys.argv[1] + "_unfit").trace.sidecar["twin"]["skipped"]
try:
    ntj.trace(model, params, ids[:, :, None], debug_path=sys.argv[1] + "_failed")  # raises: the trace of what ran
except ImportError:
    raise
except Exception:
    import pathlib
    assert (pathlib.Path(sys.argv[1] + "_failed") / "FlaxDecoder_debug_tree_SUMMARY.json").exists()
else:
    raise AssertionError("ids of the wrong shape must raise")
assert not any(name == "torch" or name.startswith("torch.") for name, m in sys.modules.items() if m is not None)
print("traced without torch")
"""


def test_the_capture_runs_where_torch_cannot_be_imported(tmp_path):
    folder = tmp_path / "original"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, str(folder)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "traced without torch" in done.stdout
    config = flax_decoder_port.DecoderConfig()
    model = flax_decoder_port.FlaxDecoder(config)
    ids = np.asarray([[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]], dtype=np.int32)
    params = {"params": model.init(jax.random.PRNGKey(0), jnp.asarray(ids))["params"]}
    port = flax_decoder_port.TorchDecoder(config, frozenset())
    port.load_state_dict(flax_decoder_port.convert_decoder(params, config))
    assert nbtrace.compare(folder, port.eval()).verdict == "agree"
    broken = flax_decoder_port.TorchDecoder(config, frozenset({"norm_eps"}))
    broken.load_state_dict(flax_decoder_port.convert_decoder(params, config))
    assert _named(nbtrace.compare(folder, broken.eval())) == "layers.0.input_norm"


def test_without_the_twin_a_jax_folder_says_what_would_decide(tmp_path):
    pair, params, jax_input, torch_input = _pair("decoder", 2, "float32", "query_scale")
    ntj.trace(pair.flax_model, params, jax_input, debug_path=tmp_path / "original", measure_rounding=False)
    with nbtrace.trace(pair.torch_model, debug_path=tmp_path / "port", measure_rounding=False):
        pair.torch_model(torch_input)
    comparison = nbtrace.compare(tmp_path / "original", tmp_path / "port")
    assert comparison.verdict == "unresolved" and "twin" in comparison.unresolved[1]
    assert repr(comparison).endswith(": unresolved at FlaxDecoder.layers.0.attn.o_proj>")


@pytest.mark.parametrize(("bug", "named"), [(None, None), ("swapped_gate_up", "layers.0.mlp"),
                                            ("rms_norm_eps", "layers.0.input_norm"), ("rope_theta", "layers.0.attn")])
def test_transformers_llama_as_the_port_of_the_flax_original(tmp_path, bug, named):
    """A port written by other people: transformers' LlamaForCausalLM, the Flax decoder's weights converted into it,
    a bug in the conversion or in the port's config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    pair = flax_decoder_port.make_decoder_pair(seed=8)
    config = pair.config
    port = LlamaForCausalLM(LlamaConfig(
        vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=config.intermediate,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim, rms_norm_eps=1e-5 if bug == "rms_norm_eps" else config.eps,
        rope_theta=500000.0 if bug == "rope_theta" else config.rope_base, tie_word_embeddings=False,
        attn_implementation="eager"))
    weights = flax_decoder_port.convert_decoder(pair.params, config, frozenset({bug}) & flax_decoder_port.BUGS)
    port.load_state_dict({(k if k.startswith("lm_head") else f"model.{k}"): v for k, v in weights.items()})
    ntj.trace(pair.flax_model, pair.params, pair.input_ids_np, debug_path=tmp_path / "original")
    comparison = nbtrace.compare(tmp_path / "original", port.eval())
    assert _named(comparison) == named, comparison.first_divergence
    assert comparison.verdict == ("agree" if bug is None else "diverge")


def test_a_flax_nnx_original_is_traced_and_compared(tmp_path):
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, width: int, rngs: nnx.Rngs) -> None:
            self.norm = nnx.RMSNorm(width, rngs=rngs)
            self.fc = nnx.Linear(width, width, rngs=rngs)  # square: its kernel is the weight transposed

        def __call__(self, x):
            return x + self.fc(self.norm(x))

    class Stack(nnx.Module):
        def __init__(self, rngs: nnx.Rngs, layers: int = 3, width: int = 16) -> None:
            self.layers = nnx.List([Block(width, rngs) for _ in range(layers)])
            self.head = nnx.Linear(width, 5, rngs=rngs)

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    class TorchNorm(torch.nn.Module):
        def __init__(self, width: int, eps: float) -> None:
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(torch.ones(width)), eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class TorchBlock(torch.nn.Module):
        def __init__(self, eps: float) -> None:
            super().__init__()
            self.norm, self.fc = TorchNorm(16, eps), torch.nn.Linear(16, 16)

        def forward(self, x):
            return x + self.fc(self.norm(x))

    class TorchStack(torch.nn.Module):
        def __init__(self, eps: float) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(TorchBlock(eps) for _ in range(3))
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    def port(eps: float) -> torch.nn.Module:
        model = TorchStack(eps)
        weights = {}
        for path, variable in nnx.to_flat_state(nnx.state(original)):
            name, value = ".".join(map(str, path)), torch.from_numpy(np.array(variable.get_value()))
            if name.endswith("kernel"):
                name, value = name[: -len("kernel")] + "weight", value.T.contiguous()
            weights[name.replace("norm.scale", "norm.weight")] = value
        model.load_state_dict(weights)
        return model.eval()

    original = Stack(nnx.Rngs(3))
    x = np.random.RandomState(3).randn(2, 6, 16).astype(np.float32)
    recorded = ntj.trace(original, x, debug_path=tmp_path / "original")
    assert [n.module_path for n in recorded.trace.nodes()][:4] == ["Stack", "Stack.layers.0", "Stack.layers.0.norm",
                                                                    "Stack.layers.0.fc"]
    assert recorded.trace.sidecar["parameters"]["Stack.layers.0.fc"]["kernel"]["shape"] == [16, 16]
    assert nnx.state(original)["layers"][0]["fc"]["kernel"].get_value().dtype == jnp.float32  # untouched
    for eps, named in ((1e-6, None), (1e-5, "layers.0.norm")):
        candidate = port(eps)
        with nbtrace.trace(candidate, debug_path=tmp_path / f"port_{eps}"):
            candidate(torch.from_numpy(x))
        assert _named(nbtrace.compare(tmp_path / "original", tmp_path / f"port_{eps}")) == named
        assert _named(nbtrace.compare(tmp_path / "original", candidate)) == named


def test_a_float32_original_from_bfloat16_weights_makes_no_rounded_run_and_judges_the_port_alike(tmp_path,
                                                                                                monkeypatch):
    """Weights published in bfloat16, loaded in float32: the run rounded to bfloat16 would be the twin bit for bit,
    so it is not made (one float64 run fewer), the folder is byte for byte the one it would have written, and the
    bfloat16 port is judged as before."""
    jax_trace = importlib.import_module("nbtrace.jax.trace")  # the module (the package's ``trace`` is the function)
    made: list[bool] = []
    original_run = jax_trace.run_twin
    monkeypatch.setattr(jax_trace, "run_twin", lambda *a, **k: made.append(k.get("rounded", False))
                        or original_run(*a, **k))

    def traced(folder: Path, bug: str | None) -> object:
        pair, _, jax_input, _ = _pair("decoder", 8, "bfloat16", bug)
        params = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16).astype(a.dtype), pair.params)
        ntj.trace(pair.flax_model, params, jax_input, debug_path=folder)
        return pair

    pair = traced(tmp_path / "skipped", None)
    assert made == [False, False]  # the twin and the perturbed run
    with nbtrace.trace(pair.torch_model, debug_path=tmp_path / "port"):
        pair.torch_model(pair.input_ids_torch)
    assert nbtrace.compare(tmp_path / "skipped", tmp_path / "port").verdict == "agree"
    bugged = traced(tmp_path / "bug", "query_scale")
    assert _named(nbtrace.compare(tmp_path / "bug", bugged.torch_model)) == "layers.0.attn"

    monkeypatch.setattr(jax_trace, "rounding_changes_nothing", lambda *a: False)
    made.clear()
    traced(tmp_path / "made", None)
    assert made == [False, False, True]

    def files(folder: Path) -> dict[str, object]:
        found = {}
        for path in sorted(folder.iterdir()):
            if path.name.endswith("_NBTRACE.json"):
                sections = json.loads(path.read_text())["sections"]
                sections.pop("run", None)
                found[path.name] = sections
            else:
                found[path.name] = path.read_bytes()
        return found

    assert files(tmp_path / "skipped") == files(tmp_path / "made")
