"""Debugging generation: transformers' Llama running greedy ``generate`` with its KV cache, against ports
with another attention kernel (SDPA) and with decode-only bugs; every step compared, from folders, lists
of Traces and Recorders."""

from __future__ import annotations

import inspect
import json

import pytest
import torch

import nbtrace
from nbtrace.cli import main as cli_main
from tests.models.generation import (
    BUG_SITES,
    ROOT,
    Bug,
    build_reference,
    check_planted,
    generate,
    make_own_cache_port,
    make_port,
    make_prompt,
    trace_generate,
)

STEPS = 5  # the prefill and four one-token steps
SOURCES = ["folder", "list", "recorder"]


@pytest.fixture(scope="module")
def reference():
    return build_reference()


@pytest.fixture(scope="module")
def prompt():
    return make_prompt()


@pytest.fixture(scope="module")
def runs(reference, prompt, tmp_path_factory):
    """Traced runs by name ("reference", "clean", each bug), traced on first use: (folder, Recorder)."""
    root = tmp_path_factory.mktemp("runs")
    done: dict[str, tuple] = {}

    def get(name: str, steps: int = STEPS, **options):
        key = f"{name}-{steps}-{sorted(options.items())}"
        if key not in done:
            model = reference if name == "reference" else make_port(reference, None if name == "clean" else name)
            folder = root / key.replace(" ", "").replace("'", "")
            done[key] = (folder, trace_generate(model, prompt, steps, folder, **options))
        return done[key]

    return get


def side(runs, name: str, source: str):
    folder, recorder = runs(name)
    return {"folder": folder, "list": nbtrace.load_traces(folder), "recorder": recorder}[source]


@pytest.mark.parametrize("bug", [None, *Bug], ids=lambda b: b.value if b else "clean")
def test_every_planted_bug_still_changes_what_the_port_computes(reference, prompt, bug):
    # the guard against an upstream release that silently bypasses a planted bug (transformers 5.24 renamed
    # the cache keyword, and the old planting saw two identical runs): its message names transformers' version
    differences = check_planted(reference, prompt, bug)
    assert len(differences) == 3


@pytest.mark.parametrize("source", SOURCES)
def test_a_port_with_another_attention_kernel_agrees_at_every_step(runs, source):
    # the reference runs eager attention (a float mask), the port SDPA (no mask tensor): still paired and agreeing
    c = nbtrace.compare(side(runs, "reference", source), side(runs, "clean", source))
    assert isinstance(c, nbtrace.StepsComparison)
    assert c.agree and c.first_divergence is None, c.summary()
    assert [s.status for s in c.steps] == ["match"] * STEPS
    assert c.counts == (STEPS, STEPS) and c.first_token_step is None
    assert "agree" in c.summary() and "tokens: the same at every step" in c.summary()


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("bug", list(Bug), ids=lambda b: b.value)
def test_a_decode_only_bug_is_named_with_its_step_and_module(runs, bug, source):
    module, step = BUG_SITES[bug]
    c = nbtrace.compare(side(runs, "reference", source), side(runs, bug.value, source))
    first = c.first_divergence
    assert first is not None, c.summary()
    assert (first.step, first.module_path) == (step, module), c.summary()
    assert c.steps[0].status == "match"  # the prefill agrees: invisible to a prefill-only comparison
    assert c.steps[step].status == "first" and not c.agree
    assert f"first diverging step: {step}" in c.summary() and module in c.summary()


@pytest.mark.parametrize("bug", [None, *Bug], ids=lambda b: b.value if b else "clean")
def test_default_traces_of_generate_name_the_module_and_the_step(runs, bug):
    """Traced with nbtrace.trace's defaults (printed values, layer 1 of 3 pruned, the float64 twin), each step's
    twin carries on from the previous step's float64 KV cache: the clean port agrees at every step, and a
    decode-only bug is named at its own module in the step it is born (the rotary embedding whose positions are
    one off, not the first attention that reads them from the cache), inside the pruned layer too."""
    options = {"use_repr": True, "do_prune_layers": True, "measure_rounding": "auto"}
    a = runs("reference", **options)[0]
    c = nbtrace.compare(a, runs("clean" if bug is None else bug.value, **options)[0])
    if bug is None:
        assert c.agree and [s.status for s in c.steps] == ["match"] * STEPS, c.summary()
        return
    module, step = BUG_SITES[bug]
    assert (c.first_divergence.step, c.first_divergence.module_path) == (step, module), c.summary()


@pytest.mark.parametrize("in_place", [False, True])
def test_a_port_that_keeps_its_own_cache_agrees_and_its_cache_bug_is_named(reference, prompt, tmp_path, in_place):
    """The float64 twin carries the state a port keeps in its own attributes (a reassigned (key, value) pair, or a
    preallocated tensor written in place with a count of filled positions) from step to step in float64, as it
    carries transformers' cache: a correct port agrees from default traces; a decode write one position off is
    named at its attention, in the step it happens."""
    options = {"use_repr": True, "do_prune_layers": True, "measure_rounding": "auto"}
    a = trace_generate(reference, prompt, STEPS, tmp_path / "a", **options)
    clean = trace_generate(make_own_cache_port(reference, in_place), prompt, STEPS, tmp_path / "clean", **options)
    c = nbtrace.compare(a, clean)
    assert c.agree and c.first_token_step is None, c.summary()
    if in_place:
        bug = trace_generate(make_own_cache_port(reference, True, gap_layer=1), prompt, STEPS, tmp_path / "bug",
                             **options)
        found = nbtrace.compare(a, bug).first_divergence
        assert (found.step, found.module_path) == (1, f"{ROOT}.model.layers.1.self_attn")


def test_a_prefill_only_comparison_misses_them(runs):
    for bug in Bug:
        c = nbtrace.compare(runs("reference", steps=1)[0], runs(bug.value, steps=1)[0])
        assert isinstance(c, nbtrace.Comparison) and c.agree, bug


def test_a_cache_left_stale_is_named_in_the_step_it_happens_not_one_later(runs):
    a, b = runs("reference")[0], runs(Bug.KV_STALE.value)[0]
    c = nbtrace.compare(a, b)
    assert c.first_divergence.step == 1 and c.steps[1].kind == "cache"
    assert "layer 1's KV cache was not updated in b" in c.summary()
    assert c.steps[2].status == "diverged"  # where the stale cache is read
    # without the cache check, only its consumer one step later is seen
    late = nbtrace.compare(a, b, check_cache=False)
    assert (late.first_divergence.step, late.first_divergence.module_path) == (2, f"{ROOT}.model.layers.1.self_attn")


def test_a_cache_bug_inside_pruned_layers_is_still_named_by_layer(runs):
    a, _ = runs("reference", do_prune_layers=True)
    b, _ = runs(Bug.KV_STALE.value, do_prune_layers=True)
    first = nbtrace.compare(a, b).first_divergence
    assert (first.step, first.module_path) == (1, f"{ROOT}.model.layers.1.self_attn")  # layer 1 is not in the files


def test_the_tokens_each_side_picked_and_where_they_first_differ(runs, reference, prompt):
    expected = generate(reference, prompt, STEPS)[0, prompt.shape[1]:].tolist()
    c = nbtrace.compare(runs("reference")[0], runs(Bug.KV_STALE.value)[0])
    assert [s.tokens[0] for s in c.steps] == [(t,) for t in expected]
    assert c.first_token_step == 2  # what the user sees comes a step after the cache went stale
    assert c.steps[2].tokens_differ and "tokens: first differ at step 2" in c.summary()
    frame = c.to_dataframe()
    assert list(frame["status"]) == ["match", "first", "diverged", "diverged", "diverged"]
    assert list(frame["input_length"]) == [prompt.shape[1]] + [1] * (STEPS - 1)


def test_without_full_tensors_tokens_come_from_the_next_input(reference, prompt, tmp_path):
    """A hand-written decoding loop, one traced block per step (no run sidecar), printed values only."""

    def loop(model, folder):
        ids, paths = prompt, []
        for step in range(3):
            with nbtrace.trace(model, debug_path=folder / f"step{step}") as rec, torch.no_grad():
                token = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            paths.append(rec.trace.source)
            ids = torch.cat([ids, token], dim=-1)
        return paths, ids[0, prompt.shape[1]:].tolist()

    a, tokens = loop(reference, tmp_path / "a")
    b, _ = loop(make_port(reference), tmp_path / "b")
    c = nbtrace.compare(a, b)
    assert [s.tokens[0] for s in c.steps] == [(tokens[0],), (tokens[1],), None]
    assert c.steps[0].token_source == ("next input", "next input")
    assert "unknown at step(s) 2" in c.summary() and c.first_divergence is None


def test_runs_of_different_lengths_pair_in_order_and_say_so(runs):
    c = nbtrace.compare(runs("reference")[0], runs("clean", steps=3)[0])
    assert c.counts == (STEPS, 3) and len(c) == 3 and not c.agree
    assert "a has 5 forwards, b has 3: only the first 3 are compared" in c.summary()


def test_a_single_forward_diverges_at_step_zero(runs):
    traces = nbtrace.load_traces(runs("reference")[0])
    c = nbtrace.compare(traces[0], nbtrace.load_traces(runs(Bug.POSITION_IDS.value)[0])[1])
    assert isinstance(c, nbtrace.Comparison) and c.first_divergence.step == 0


@pytest.mark.parametrize("name, status", [("clean", 0), (Bug.MASK.value, 1)])
def test_nbtrace_diff_compares_every_step_and_names_the_first(runs, capsys, name, status):
    assert cli_main(["diff", str(runs("reference")[0]), str(runs(name)[0])]) == status
    out = capsys.readouterr().out
    assert "a: 5 forwards  b: 5 forwards" in out
    if status:
        assert "first diverging step: 1" in out and "model.layers.1.self_attn" in out and "\nstep 1:\n" in out
    else:
        assert out.count(" match") == STEPS


@pytest.mark.parametrize("name, verdict", [("clean", "agree"), (Bug.MASK.value, "diverge")])
def test_the_steps_verdict_as_json_follows_the_schema(runs, capsys, name, verdict):
    import jsonschema

    assert cli_main(["diff", str(runs("reference")[0]), str(runs(name)[0]), "--json"]) == (verdict == "diverge")
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, nbtrace.verdict_schema())
    assert data["kind"] == "steps" and data["verdict"] == verdict and data["steps"]["counts"] == [STEPS, STEPS]
    assert [row["step"] for row in data["steps"]["each"]] == list(range(STEPS))
    if verdict == "diverge":
        assert data["steps"]["first_step"] == 1 == data["first_divergence"]["step"]
        assert data["first_divergence"]["module"].endswith("model.layers.1.self_attn")


def test_nbtrace_show_picks_a_step_and_says_which(runs, capsys):
    folder = str(runs("reference")[0])
    assert cli_main(["show", folder, "--depth", "1", "--step", "0"]) == 0
    out = capsys.readouterr().out
    assert "lm_head  [1, 1, 256]" in out and "(step 0 of the 5 forwards in" in out
    assert cli_main(["show", folder, "--depth", "1"]) == 0
    assert "(step 4 of the 5 forwards in" in capsys.readouterr().out
    assert cli_main(["show", folder, "--step", "5"]) == 2
    assert "holds 5 forward(s): steps 0…4" in capsys.readouterr().err


def test_generate_still_sees_the_model_signature(reference, prompt, tmp_path):
    """generate inspects forward's parameters (logits_to_keep, position_ids); the traced forward keeps them."""
    before = inspect.signature(reference.forward)
    with nbtrace.trace(reference, debug_path=tmp_path, use_repr=False) as rec:
        assert inspect.signature(reference.forward) == before
        generate(reference, prompt, 2)
    prefill = rec.traces[0]
    assert prefill[f"{ROOT}.lm_head"].output_tensors()[0].shape == (1, 1, 256)  # logits_to_keep=1 reached it


def test_the_sidecar_records_each_steps_kv_cache(runs, prompt):
    folder, _ = runs("reference")
    files = [folder / f"forward_{i}" / f"{ROOT}_debug_tree_NBTRACE.json" for i in range(STEPS - 1)]
    sections = [json.loads(f.read_text())["sections"] for f in files + [folder / f"{ROOT}_debug_tree_NBTRACE.json"]]
    cached = prompt.shape[1]
    for step, section in enumerate(sections):
        cache = section["generation"]["cache"]
        assert cache["past"] == [0 if step == 0 else cached + step - 1] * 3
        assert cache["length"] == [cached + step] * 3
        assert section["run"]["forward"] == step and len(cache["new_keys"]) == 3


def test_two_generate_calls_in_one_block_are_one_run_with_a_note(reference, prompt, tmp_path):
    with nbtrace.trace(reference, debug_path=tmp_path / "a", use_repr=False) as rec_a:
        generate(reference, prompt, 2)
        generate(reference, prompt, 2)
    assert len(nbtrace.load_traces(tmp_path / "a")) == len(rec_a) == 4
    c = nbtrace.compare(rec_a, tmp_path / "a")
    assert c.agree and any("forward 2 starts with an empty KV cache" in note for note in c.notes)


def test_a_run_recorded_per_rank_loads_and_compares_step_by_step(reference, prompt, runs, tmp_path):
    trace_generate(make_port(reference, Bug.MASK), prompt, STEPS, tmp_path, ranks="all")  # rank_0/forward_<i>/
    assert len(nbtrace.load_traces(tmp_path)) == len(nbtrace.load_traces(tmp_path, rank=0)) == STEPS
    c = nbtrace.compare(runs("reference")[0], tmp_path)
    assert (c.first_divergence.step, c.first_divergence.module_path) == BUG_SITES[Bug.MASK][::-1]


class TiedLM(torch.nn.Module):
    """A language model without an lm_head module: its logits come from the embedding matrix, in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.mix = torch.nn.Linear(8, 8)

    def forward(self, input_ids):
        return {"logits": self.mix(self.embed(input_ids)) @ self.embed.weight.T}


def test_tokens_of_a_model_without_an_lm_head_come_from_its_logits_output(tmp_path):
    torch.manual_seed(0)
    model, ids = TiedLM(), torch.randint(0, 50, (2, 5))
    with nbtrace.trace(model, debug_path=tmp_path / "run", use_repr=False) as rec, torch.no_grad():
        expected = [model(ids[:, : n + 3])["logits"][:, -1].argmax(-1).tolist() for n in range(3)]
    c = nbtrace.compare(rec, tmp_path / "run")
    assert [list(s.tokens[0]) for s in c.steps] == expected and c.agree  # one token per sequence of the batch
    with nbtrace.trace(model, debug_path=tmp_path / "one", use_repr=False) as single, torch.no_grad():
        model(ids)
    # a single forward has no run record, and its last module (mix) does not make logits: no guess
    assert nbtrace.compare([single.trace], [single.trace]).steps[0].tokens == (None, None)


def test_a_traced_generation_keeps_one_float64_cache_per_run_not_every_steps_output(reference, prompt, tmp_path):
    """The twin carries each run's float64 KV cache from step to step; the steps' outputs (their float64 logits) are
    not kept for the rest of the block: a long generation's memory stays flat."""
    with nbtrace.trace(reference, tmp_path / "run") as rec, torch.no_grad():
        reference.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=True)
        held = {kind: [type(twin).__name__ for _, twin in found.values()]
                for kind, found in rec.rounding.twin.known.items()}  # before the block ends (then released)
    assert len(rec.traces) == 6
    for kind in (None, "float64", "bfloat16"):
        assert held[kind] == ["DynamicCache"], (kind, held[kind])


def test_a_recorder_kept_after_its_block_holds_no_float64_cache(reference, prompt, tmp_path):
    """Once the block has ended no forward continues from the twins' caches: a Recorder kept in a notebook does not
    hold three float64 KV caches for the rest of the session."""
    with nbtrace.trace(reference, tmp_path / "run") as rec, torch.no_grad():
        reference(prompt, use_cache=True)
        during = {kind: len(found) for kind, found in rec.rounding.twin.known.items() if found}
    assert set(during) == {None, "float64", "bfloat16"}  # the twin, the perturbed and the rounded run's caches
    assert not any(rec.rounding.twin.known.values()) and rec.traces
