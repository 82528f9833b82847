"""Byte-for-byte compatibility of nbtrace's debug files with transformers' model_addition_debugger_context.

For every zoo model (tests/zoo.py) and every option combination (do_prune_layers x use_repr) both
implementations trace one forward in subprocesses (tests/compat/run_impl.py); then:

- both JSON files are byte-identical (documented differences: 2nd+ calls' safetensors reference strings,
  and non-tensor "value" keys kept in nbtrace's SUMMARY);
- the safetensors files are transformers' minus the files of pruned layer blocks (plus nbtrace's files for
  2nd+ calls), shared files hold equal tensors, and every nbtrace reference holds the data of its own call
  (checked against a capture of every call's tensors);
- nbtrace leaves no global state behind (print options, grad mode, hooks, ``forward`` in ``__dict__``), also
  when one process traces every model and combination in a row.

Every transformers job runs in its own process (it changes torch's print options for good): by default each
is a child forked from a small server that has imported torch and transformers once (fast); set
NBTRACE_COMPAT_NO_FORK=1 for plain ``python run_impl.py`` subprocesses. Jobs run two at a time.

Environment:
  NBTRACE_COMPAT_CANDIDATE=nbtrace|transformers|auto  (auto: nbtrace if importable, else transformers
                                                       against itself, which checks the harness)
  NBTRACE_COMPAT_OUT=DIR        keep all traces under DIR (default: pytest's tmp dir)
  NBTRACE_COMPAT_NO_FORK=1      one fresh ``python`` per job instead of forked children
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
RUN_IMPL = os.path.join(HERE, "run_impl.py")
from tests.compat import compat_checks as checks  # noqa: E402
from tests.models import zoo  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.model_debugging_utils")
pytest.importorskip("safetensors")

COMBOS = {  # same as run_impl.COMBOS: name -> (do_prune_layers, use_repr)
    "prune-repr": (True, True),
    "noprune-repr": (False, True),
    "prune-st": (True, False),
    "noprune-st": (False, False),
}
JOB_TIMEOUT = 300
WORKERS = 2


def _env() -> dict:
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        "PYTHONWARNINGS": "ignore",
    })
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _detect_candidate() -> tuple[str, str]:
    want = os.environ.get("NBTRACE_COMPAT_CANDIDATE", "auto")
    if want in ("nbtrace", "transformers"):
        return want, f"forced by NBTRACE_COMPAT_CANDIDATE={want}"
    r = subprocess.run(
        [sys.executable, "-c", "import nbtrace; nbtrace.model_addition_debugger_context"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120,
    )
    if r.returncode == 0:
        return "nbtrace", "nbtrace is importable"
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return "transformers", f"nbtrace not usable ({last}): checking the harness with transformers on both sides"


# ---------------------------------------------------------------------------------------------------------
# running jobs
# ---------------------------------------------------------------------------------------------------------


class JobRunner:
    """Runs run_impl.py jobs on ``WORKERS`` threads; each thread owns a fork server (or spawns plain
    subprocesses). ``submit`` returns a Future of ``(rc, secs, log_path)``."""

    def __init__(self, root: str, fork: bool = True):
        self.root = root
        self.fork = fork
        self.logs = os.path.join(root, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="compat-job")
        self.local = threading.local()
        self.servers: list[subprocess.Popen] = []
        self.lock = threading.Lock()
        self.futures: dict[str, Future] = {}
        self.t0 = time.perf_counter()

    def submit(self, job_id: str, argv: list[str]) -> Future:
        with self.lock:
            if job_id not in self.futures:
                self.futures[job_id] = self.pool.submit(self._run, job_id, argv)
            return self.futures[job_id]

    def _server(self) -> subprocess.Popen:
        srv = getattr(self.local, "server", None)
        if srv is None or srv.poll() is not None:
            srv = subprocess.Popen(
                [sys.executable, RUN_IMPL, "--serve"], cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.logs, f"server-{len(self.servers)}.log"), "w"),
                text=True, bufsize=1,
            )
            self.local.server = srv
            with self.lock:
                self.servers.append(srv)
        return srv

    def _run(self, job_id: str, argv: list[str]):
        log = os.path.join(self.logs, f"{job_id}.log")
        t0 = time.perf_counter()
        if not self.fork:
            with open(log, "w") as f:
                try:
                    rc = subprocess.run([sys.executable, RUN_IMPL, *argv], cwd=REPO, env=_env(), stdout=f,
                                        stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            return rc, time.perf_counter() - t0, log
        srv = self._server()
        srv.stdin.write(json.dumps({"id": job_id, "argv": argv, "log": log, "timeout": JOB_TIMEOUT}) + "\n")
        srv.stdin.flush()
        line = srv.stdout.readline()
        if not line:
            raise RuntimeError(f"fork server died running {job_id} (see {self.logs}/server-*.log)")
        reply = json.loads(line)
        assert reply["id"] == job_id, reply
        return reply["rc"], time.perf_counter() - t0, log

    def close(self):
        self.pool.shutdown(wait=True)
        for srv in self.servers:
            try:
                srv.stdin.close()
                srv.wait(timeout=30)
            except Exception:  # noqa: BLE001
                srv.kill()


def _log_tail(path: str, n: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


class Compat:
    """Session state: where each model's outputs go, and the jobs that produce them."""

    def __init__(self, root: str, runner: JobRunner, candidate: str, why: str):
        self.root, self.runner, self.candidate, self.why = root, runner, candidate, why

    # paths
    def a_dir(self, model, combo):
        return os.path.join(self.root, model, "transformers", combo)

    def b_root(self, model):
        return os.path.join(self.root, model, "candidate")

    def b_dir(self, model, combo):
        return os.path.join(self.b_root(model), combo)

    def capture_path(self, model):
        return os.path.join(self.root, model, "capture.pt")

    def all_root(self):
        return os.path.join(self.root, "_all")

    # jobs
    def submit_model(self, model):
        for combo, (prune, use_repr) in COMBOS.items():
            argv = ["--impl", "transformers", "--model", model, "--out", self.a_dir(model, combo)]
            argv += [] if prune else ["--no-prune"]
            argv += [] if use_repr else ["--safetensors"]
            self.runner.submit(f"{model}.transformers.{combo}", argv)
        self.runner.submit(f"{model}.candidate", [
            "--impl", self.candidate, "--model", model, "--out", self.b_root(model), "--all-combos",
            "--capture", self.capture_path(model),
        ])

    def submit_all_in_one(self):
        return self.runner.submit("_all.candidate", [
            "--impl", self.candidate, "--model", "all", "--out", self.all_root(), "--all-combos",
        ])

    def wait(self, job_id):
        rc, secs, log = self.runner.futures[job_id].result(timeout=JOB_TIMEOUT * 4)
        return rc, secs, log

    def results(self, model, combo):
        """Wait for the model's jobs; returns (candidate run record, capture)."""
        rc, _, log = self.wait(f"{model}.transformers.{combo}")
        if rc != 0:
            pytest.fail(f"transformers job failed (rc={rc}) for {model} {combo}; log {log}:\n{_log_tail(log)}")
        rc, _, log = self.wait(f"{model}.candidate")
        meta_path = os.path.join(self.b_root(model), "meta.json")
        if not os.path.exists(meta_path):
            pytest.fail(f"{self.candidate} job wrote no meta.json (rc={rc}) for {model}; log {log}:\n{_log_tail(log)}")
        with open(meta_path) as f:
            meta = json.load(f)
        capture = None
        if os.path.exists(self.capture_path(model)):
            capture = torch.load(self.capture_path(model), weights_only=True)
        return meta["runs"][combo], capture


ALL_MODELS = zoo.names()
PARAMS = [pytest.param(m, c, id=f"{m}-{c}") for m in ALL_MODELS for c in COMBOS]


@pytest.fixture(scope="session")
def compat(request, tmp_path_factory):
    root = os.environ.get("NBTRACE_COMPAT_OUT") or str(tmp_path_factory.mktemp("compat"))
    os.makedirs(root, exist_ok=True)
    candidate, why = _detect_candidate()
    runner = JobRunner(root, fork=os.environ.get("NBTRACE_COMPAT_NO_FORK") != "1" and hasattr(os, "fork"))
    c = Compat(root, runner, candidate, why)
    # submit only what the selected tests need, in the order they run
    wanted, all_in_one = [], False
    for item in request.session.items:
        if os.path.abspath(str(getattr(item, "path", ""))) != os.path.abspath(__file__):
            continue
        cs = getattr(item, "callspec", None)
        model = cs.params.get("model") if cs else None
        if model and model not in wanted:
            wanted.append(model)
        if item.originalname == "test_one_process_all_models":
            all_in_one = True
    for model in wanted:
        c.submit_model(model)
    if all_in_one and candidate == "nbtrace":
        c.submit_all_in_one()
    print(f"\n[compat] candidate: {candidate} ({why}); outputs under {root}")
    yield c
    runner.close()
    print(f"\n[compat] jobs done in {time.perf_counter() - runner.t0:.1f}s wall; outputs under {root}")


# ---------------------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------------------


def _report(model, combo, res: checks.RunResult, compat: Compat) -> str:
    parts = [f"{model} [{combo}]  transformers: {compat.a_dir(model, combo)}  {compat.candidate}: "
             f"{compat.b_dir(model, combo)}"]
    parts += [f"HARNESS/ORACLE PROBLEM: {m}" for m in res.harness]
    parts += [f"FAIL: {m}" for m in res.failures]
    return "\n\n".join(parts)


@pytest.mark.parametrize("model,combo", PARAMS)
def test_files_compatible(compat: Compat, model, combo):
    entry = zoo.get(model)
    prune, use_repr = COMBOS[combo]
    run, capture = compat.results(model, combo)
    if not run["ok"]:
        pytest.fail(f"{compat.candidate} raised for {model} [{combo}]:\n{run['error']}")
    assert capture is not None, "no capture"
    cls = capture["class"]
    res = checks.compare_run(compat.a_dir(model, combo), compat.b_dir(model, combo), cls, use_repr, capture,
                             compat.candidate, prune)
    if res.harness or res.failures:
        pytest.fail(_report(model, combo, res, compat), pytrace=False)

    # the zoo's flags hold (so the documented differences really are exercised)
    if entry.calls_twice:
        assert any(n > 1 for n in capture["counts"].values()), f"{model}: flagged calls_twice, but no module is"
    if entry.value_kwarg:
        assert res.summary_kept_value_keys, f"{model}: flagged value_kwarg, but no non-tensor 'value' key"
        if compat.candidate == "nbtrace":
            with open(os.path.join(compat.b_dir(model, combo), f"{cls}_debug_tree_SUMMARY.json")) as f:
                b_sum = json.load(f)
            kwargs_with_value = [n["module_path"] for n in checks.iter_nodes(b_sum)
                                 if isinstance((n.get("inputs") or {}).get("kwargs"), dict)
                                 and "value" in n["inputs"]["kwargs"]]
            assert kwargs_with_value, f"{model}: nbtrace's SUMMARY lost the kwarg named 'value'"
            with open(os.path.join(compat.a_dir(model, combo), f"{cls}_debug_tree_SUMMARY.json")) as f:
                assert f.read().encode() != checks.dump(b_sum), "SUMMARY should differ from transformers' here"
    if entry.grad_fn_top and use_repr:
        with open(os.path.join(compat.a_dir(model, combo), f"{cls}_debug_tree_FULL_TENSORS.json")) as f:
            assert "grad_fn=" in f.read(), f"{model}: flagged grad_fn_top, but no grad_fn= in the FULL json"
    if entry.prunes and prune and not use_repr:
        assert res.pruned_files, f"{model}: flagged prunes, but transformers wrote no unreferenced block files"
    if (not use_repr and not prune and compat.candidate == "nbtrace"
            and any(n > 1 for n in capture["counts"].values())):
        # a leaf called twice with tensor io shows up as renamed references
        leaf_multi = [p for p, n in capture["counts"].items() if n > 1 and _is_leaf_with_tensors(capture, p)]
        if leaf_multi:
            assert res.new_refs, f"{model}: {leaf_multi} called more than once but no distinct file names"


def _is_leaf_with_tensors(capture, path) -> bool:
    def walk(n):
        yield n
        for c in n["children"]:
            yield from walk(c)

    return any(n["path"] == path and not n["children"] and any(True for _ in _tensors(n["inputs"]))
               for n in walk(capture["root"]))


def _tensors(struct):
    if isinstance(struct, torch.Tensor):
        yield struct
    elif isinstance(struct, dict):
        for v in struct.values():
            yield from _tensors(v)
    elif isinstance(struct, list):
        for v in struct:
            yield from _tensors(v)


@pytest.mark.parametrize("model,combo", PARAMS)
def test_state_restored(compat: Compat, model, combo):
    """After the context exits: print options, grad mode, hooks as before; no ``forward`` in any ``__dict__``."""
    run, _ = compat.results(model, combo)
    if compat.candidate != "nbtrace":
        pytest.skip("transformers is the candidate (harness self-check); it changes print options by design")
    if not run["ok"]:
        pytest.fail(f"nbtrace raised:\n{run['error']}")
    assert not run["state_problems"], "\n".join(run["state_problems"])


def test_one_process_all_models(compat: Compat):
    """Every model x combination traced in a row in ONE nbtrace process gives the same files as one process
    per model: nothing leaks from one run into the next."""
    if compat.candidate != "nbtrace":
        pytest.skip("only meaningful for nbtrace")
    fut = compat.runner.futures.get("_all.candidate") or compat.submit_all_in_one()
    rc, _, log = fut.result(timeout=JOB_TIMEOUT * 4)
    meta_path = os.path.join(compat.all_root(), "meta.json")
    assert os.path.exists(meta_path), f"no meta.json (rc={rc}); log {log}:\n{_log_tail(log)}"
    with open(meta_path) as f:
        meta = json.load(f)
    problems = []
    for key, run in meta["runs"].items():
        if not run["ok"]:
            problems.append(f"{key}: raised: {run['error'].strip().splitlines()[-1]}")
        problems += [f"{key}: {p}" for p in run["state_problems"]]
    for model in ALL_MODELS:
        for combo in COMBOS:
            if not os.path.isdir(compat.b_dir(model, combo)):
                continue  # that model's own job was deselected
            if f"{model}.candidate" in compat.runner.futures:
                compat.wait(f"{model}.candidate")
            one, alone = os.path.join(compat.all_root(), model, combo), compat.b_dir(model, combo)
            f1, f2 = set(os.listdir(one)) if os.path.isdir(one) else set(), set(os.listdir(alone))
            if f1 != f2:
                problems.append(f"{model}/{combo}: file sets differ: only in one-process run "
                                f"{sorted(f1 - f2)[:5]}, only in per-model run {sorted(f2 - f1)[:5]}")
            for name in sorted(f1 & f2):
                a, b = os.path.join(alone, name), os.path.join(one, name)
                if name.endswith(".json"):
                    ab, bb = checks.read_bytes(a), checks.read_bytes(b)
                    if ab != bb:
                        problems.append(f"{model}/{combo}/{name} differs:\n" + checks.unified_diff(
                            ab, bb, "per-model", "one-process", max_lines=15))
                elif name.endswith(".safetensors"):
                    ta, tb = checks.load_st(a), checks.load_st(b)
                    for k in ta:
                        why = checks.tensors_equal(ta[k], tb[k]) if k in tb else "missing"
                        if why:
                            problems.append(f"{model}/{combo}/{name}[{k}]: {why}")
    assert not problems, "\n".join(problems[:60])


def test_candidate_is_nbtrace(compat: Compat):
    """Visible reminder when the suite only checked the harness (transformers against itself)."""
    if compat.candidate != "nbtrace":
        pytest.skip(compat.why)
