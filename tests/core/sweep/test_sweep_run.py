"""Issue 22: running sweep tasks (tm2nn/sweep/tasks.py), the results store (store.py) and
the local pool (local.py): one row per task with every column, error and crash rows, atomic
idempotent rows, dead workers retried, Ctrl-C keeping the rows, and the same rows from the
pool as from running the tasks one by one (apart from the timing columns)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import tm2nn
from tm2nn.errors import Tm2nnError
from tm2nn.sweep import local, tasks
from tm2nn.sweep.store import COLUMNS, SCHEMA, Store
from tm2nn.sweep.tasks import TIMING_COLUMNS, run_task

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def task(kind, source, backend, options=None, args=None, name=None, fmt=None, tid=None) -> dict:
    """A ``Task.to_json()`` dict (the id is the task's own when ``tid`` is not given)."""
    from tm2nn.sweep.spec import Task

    src = str(source if Path(str(source)).is_absolute() else EXAMPLES / source)
    t = Task(kind, src, name, fmt, backend, dict(options or {}), dict(args or {})).to_json()
    return {**t, "id": tid} if tid else t


def figures(row) -> dict:
    return json.loads(row["figures"])


def untimed(row) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING_COLUMNS}


# -- run_task: one row per kind ------------------------------------------------------------------
def test_verify_row_has_every_column_and_the_figures():
    t = task("verify", "full_adder.circ", "relu-circuit")
    row = run_task(t)
    assert set(row) == set(COLUMNS)
    assert row["task_id"] == t["id"] and row["kind"] == "verify" and row["backend"] == "relu-circuit"
    assert row["outcome"] == "ok" and row["exit_class"] == 0 and row["error"] is None
    assert row["options"] == "{}" and row["args"] == "{}"
    assert row["source"] == str(EXAMPLES / "full_adder.circ")
    assert row["source_sha256"] == hashlib.sha256((EXAMPLES / "full_adder.circ").read_bytes()).hexdigest()
    assert row["tm2nn_version"] == tm2nn.__version__ and row["worker"].endswith(f":{os.getpid()}")
    assert row["seconds"] > 0 and row["peak_rss_mb"] > 10 and row["finished_at"].endswith("+00:00")
    f = figures(row)
    assert f["ok"] is True and f["mode"] == "exhaustive" and f["n_inputs"] == 8 and f["first"] is None
    assert f["engines"] == {"torch": 0, "onnxruntime": 0}
    info = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit").info()["info"]
    assert (f["params_nonzero"], f["depth"], f["max_width"]) == (info["params_nonzero"], info["depth"], info["max_width"])


def test_a_divergence_is_a_mismatch_row_with_the_first_step():
    """Softmax at beta 1 diverges from the interpreter on bb3 (find-beta: beta_min ~ 2.2);
    hard-max attention does not.  The row records the first divergence."""
    opts = {"steps": 22}
    bad = run_task(task("verify", "bb3.tm", "transformer", {**opts, "attention": "softmax", "beta": 1.0},
                        {"inputs": [""], "onnx": False}))
    assert bad["outcome"] == "mismatch" and bad["exit_class"] == 1 and bad["error"] is None
    first = figures(bad)["first"]
    assert set(first) == {"step", "field", "expected", "got"} and isinstance(first["step"], int)
    assert first["expected"] != first["got"] and figures(bad)["engines"] == {"torch": 1}
    good = run_task(task("verify", "bb3.tm", "transformer", opts, {"inputs": [""], "onnx": False}))
    assert good["outcome"] == "ok" and figures(good)["first"] is None


def test_info_run_margin_and_learn_rows():
    info = run_task(task("info", "full_adder.circ", "relu-circuit"))
    assert info["outcome"] == "ok"
    assert figures(info) == json.loads(json.dumps(tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit").info()))

    interp = run_task(task("run", "bb3.tm", "interp", args={"input": ""}))
    net = run_task(task("run", "bb3.tm", "transformer", args={"input": "", "max_steps": 22}))
    assert interp["outcome"] == net["outcome"] == "ok"
    assert figures(interp) == figures(net) == dict(tm2nn.run(EXAMPLES / "bb3.tm", ""))
    cut = run_task(task("run", "bb3.tm", "interp", args={"input": "", "max_steps": 5}))
    assert cut["outcome"] == "mismatch" and cut["exit_class"] == 1 and figures(cut)["halted"] is False

    learned = run_task(task("learn", "parity8.circ", "abbe-sandon",
                            {"target": "parity:10110010", "steps": 16, "test": 10}))
    assert learned["outcome"] == "ok" and figures(learned)["ok"] is True and figures(learned)["mismatches"] == 0


def test_margin_row(tmp_path):
    and2 = tmp_path / "and2.circ"
    and2.write_text("input a b\noutput y\ny = a & b\n")
    row = run_task(task("margin", and2, "relu-circuit", args={"samples": 2, "trials": 1}))
    assert row["outcome"] == "ok", row["error"]
    f = figures(row)
    assert set(f) == {"title", "columns", "rows", "json"} and len(f["rows"]) == len(f["json"]) == 2
    assert {r["corrections"] for r in f["json"]} == {True, False}  # the relu-circuit margin measures both
    assert all(0 < r["certified"] <= r["eps_random"] for r in f["json"])  # certified lower <= attack upper


def test_find_beta_row(monkeypatch):
    row = run_task(task("find-beta", "bb3.tm", "transformer", {"steps": 22}, {"inputs": [""], "seed": 0}))
    assert row["outcome"] == "ok"
    f = figures(row)
    assert f["below"] < f["beta"] < 4 and f["n_inputs"] == 1  # beta 1 and 2 fail on bb3, 4 verifies
    spec = tm2nn.backends.get("transformer")  # no beta up to the search's cap: exit class 1, as the CLI's
    monkeypatch.setitem(spec.analyses, "find_beta", lambda ir, values, **kw: {"beta": None, "below": 1e4})
    none = run_task(task("find-beta", "bb3.tm", "transformer", {"steps": 22}, {"inputs": [""]}))
    assert none["outcome"] == "mismatch" and none["exit_class"] == 1


# -- run_task: errors and crashes ------------------------------------------------------------------
@pytest.mark.parametrize("t, words", [
    (task("verify", "full_adder.circ", "relu-circuit", {"corrections": "yes"}), "corrections"),
    (task("verify", "full_adder.circ", "relu-circuit", {"bogus": 1}), "no option bogus"),
    (task("verify", "full_adder.circ", "relu-circuit", args={"budget": -1}), "budget"),
    (task("info", "missing.circ", "relu-circuit"), "no such file"),
    (task("info", "full_adder.circ", "no-such-backend"), "unknown backend"),
    (task("info", "bb3.tm", "relu-circuit", args={"samples": 3}), "takes no argument 'samples'"),
    (task("verify", "bb3.tm", "transformer", args={"_test_sleep": 0}), "takes no argument '_test_sleep'"),
    (task("frobnicate", "bb3.tm", "transformer"), "unknown task kind"),
])
def test_bad_input_is_an_error_row(t, words, monkeypatch):
    monkeypatch.delenv(tasks.TEST_HOOKS_ENV, raising=False)  # the test hooks are unknown arguments without it
    row = run_task(t)
    assert row["outcome"] == "error" and row["exit_class"] == 2 and words in row["error"], row["error"]
    assert set(row) == set(COLUMNS) and row["figures"] == "{}"


def test_a_located_error_keeps_its_place(tmp_path):
    bad = tmp_path / "bad.circ"
    bad.write_text("input a\noutput y\ny = a & q\n")
    row = run_task(task("info", bad, "relu-circuit"))
    assert row["outcome"] == "error" and row["error"].startswith(f"{bad}:3:"), row["error"]


def test_a_missing_source_has_no_hash():
    row = run_task(task("info", "missing.circ", "relu-circuit"))
    assert row["source_sha256"] is None


@pytest.mark.parametrize("exc, words", [(RuntimeError("boom"), "RuntimeError: boom"),
                                        (MemoryError(), "MemoryError"),
                                        (ValueError("a\n" * 2000), "ValueError: a a a")])
def test_any_other_exception_is_a_crash_row(monkeypatch, exc, words):
    def broken(*a, **k):
        raise exc
    monkeypatch.setattr(tm2nn, "compile", broken)
    row = run_task(task("info", "full_adder.circ", "relu-circuit"))
    assert row["outcome"] == "crash" and row["exit_class"] == 70 and row["error"].startswith(words)
    assert "\n" not in row["error"] and len(row["error"]) <= tasks.ERROR_CHARS


def test_ctrl_c_is_not_swallowed(monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(tm2nn, "compile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_task(task("info", "full_adder.circ", "relu-circuit"))


def test_peak_rss_is_the_tasks_own():
    """The peak is reset before each task: a task that allocates 200 MB shows it, the next
    one does not.  In a fresh process, as a pool's worker is: a test worker that has run
    many tests keeps freed memory resident, which a 200 MB allocation may reuse."""
    if not tasks._reset_peak():
        pytest.skip("/proc/self/clear_refs is not writable here")
    code = """
import json, sys
import numpy as np
import tm2nn
from tm2nn.sweep.spec import Task
from tm2nn.sweep.tasks import run_task
job = Task("info", sys.argv[1], None, None, "relu-circuit", {}, {}).to_json()
real = tm2nn.compile
def hungry(*a, **k):
    x = np.ones(25_000_000)  # 200 MB, touched
    raise RuntimeError(f"done {x[-1]}")
tm2nn.compile = hungry
big = run_task(job)
tm2nn.compile = real
small = run_task(job)
print(json.dumps([big["peak_rss_mb"], small["peak_rss_mb"], big["outcome"], small["outcome"]]))
"""
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "full_adder.circ")], capture_output=True,
                         text=True, check=True)
    big, small, big_outcome, small_outcome = json.loads(out.stdout.splitlines()[-1])
    assert (big_outcome, small_outcome) == ("crash", "ok")
    assert big > small + 150, (big, small)


def test_init_worker_sets_one_thread(monkeypatch):
    import torch

    from tm2nn import threads as policy

    for var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", policy.ENV):
        monkeypatch.setenv(var, "7")
    monkeypatch.setattr(tasks, "_initialised", False)
    monkeypatch.setattr(policy, "DEFAULTS", {policy.STEP: 2, policy.BULK: 2})  # a policy of more threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        tasks.init_worker()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert os.environ["OMP_NUM_THREADS"] == os.environ["NUMBA_NUM_THREADS"] == "1"
    # onnxruntime's sessions and the fused engines get one too, after a task's --threads reset
    policy.set_threads(None)
    assert policy.ort_threads() == policy.count(policy.BULK) == 1


# -- the store ----------------------------------------------------------------------------------------
def row_of(tid: str, **kw) -> dict:
    r = tasks.failed_row({"id": tid, "kind": "info", "source": str(EXAMPLES / "bb3.tm"), "backend": "transformer",
                          "options": {"steps": 22}, "args": {}}, "error", "an error")
    return {**r, **kw}


def test_store_appends_reads_back_sorted(tmp_path):
    st = Store(tmp_path / "res", sweep="demo")
    for tid in ("c", "a", "b"):
        assert st.append(row_of(tid))
    assert st.finished() == {"a", "b", "c"}
    t = st.table()
    assert t.schema.equals(SCHEMA) and t.column("task_id").to_pylist() == ["a", "b", "c"]
    rows = st.rows()
    assert rows[0] == {**row_of("a"), "sweep": "demo", "finished_at": rows[0]["finished_at"]}
    assert Store(tmp_path / "res", create=False).rows() == rows  # a second reader sees the same


def test_store_is_idempotent(tmp_path):
    st = Store(tmp_path / "res")
    assert st.append(row_of("a", outcome="ok", exit_class=0))
    assert not st.append(row_of("a", outcome="crash", exit_class=70))
    assert [r["outcome"] for r in st.rows()] == ["ok"]
    assert sorted(p.name for p in (tmp_path / "res" / "rows").iterdir()) == ["a.parquet"]


def test_a_half_written_temp_file_is_ignored_and_cleaned(tmp_path):
    st = Store(tmp_path / "res")
    st.append(row_of("a"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: a driver killed while writing
    rows = tmp_path / "res" / "rows"
    stale = rows / f".b.parquet.{dead.pid}.x1y2.tmp"
    stale.write_bytes(b"PAR1 half a row")
    live = rows / f".c.parquet.{os.getppid()}.x1y2.tmp"  # another driver, still writing
    live.write_bytes(b"PAR1 half")
    assert st.finished() == {"a"} and st.table().num_rows == 1
    import pyarrow.parquet as pq

    assert pq.read_table(rows).num_rows == 1  # other readers skip them too
    st2 = Store(tmp_path / "res")  # the next run
    assert not stale.exists() and live.exists() and st2.finished() == {"a"}


def test_the_sweep_column_comes_from_sweep_json(tmp_path):
    st = Store(tmp_path / "res")
    (tmp_path / "res" / "sweep.json").write_text(json.dumps({"name": "bb-transformer"}))
    st.append(row_of("a"))
    assert st.rows()[0]["sweep"] == "bb-transformer"


def test_the_schema_is_stable():
    """Readers (the report, people's notebooks) depend on these columns and types:
    changing them needs a new format version (SCHEMA.metadata)."""
    assert [(f.name, str(f.type), f.nullable) for f in SCHEMA] == [
        ("task_id", "string", False), ("sweep", "string", False), ("kind", "string", False),
        ("source", "string", False), ("name", "string", True), ("format", "string", True),
        ("backend", "string", False), ("options", "string", False), ("args", "string", False),
        ("outcome", "string", False), ("exit_class", "int32", False), ("error", "string", True),
        ("figures", "string", False), ("seconds", "double", False), ("peak_rss_mb", "double", False),
        ("tm2nn_version", "string", False), ("source_sha256", "string", True), ("worker", "string", False),
        ("finished_at", "string", False)]
    assert SCHEMA.metadata == {b"tm2nn.results": b"1"}
    assert set(COLUMNS) == set(tasks.failed_row({"id": "a"}, "crash", "x"))


def test_store_refuses_bad_rows_and_folders(tmp_path):
    st = Store(tmp_path / "res")
    with pytest.raises(ValueError, match="missing"):
        st.append({k: v for k, v in row_of("a").items() if k != "figures"})
    with pytest.raises(ValueError, match="outcome"):
        st.append(row_of("a", outcome=None))
    with pytest.raises(ValueError, match="not a task id"):
        st.append(row_of("../a"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(Tm2nnError, match="is a file"):
        Store(tmp_path / "file")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(Tm2nnError, match="not a results folder"):
        Store(tmp_path / "other")
    with pytest.raises(Tm2nnError, match="does not exist"):
        Store(tmp_path / "nowhere", create=False)
    st.append(row_of("a"))
    lines = []
    st = Store(tmp_path / "res", warn=lines.append)
    for name, data in (("z", b"not parquet"), ("y", b""), ("x", (st.rows_dir / "a.parquet").read_bytes()[:-9])):
        (st.rows_dir / f"{name}.parquet").write_bytes(data)
    assert st.finished() == {"a"} and st.table().column("task_id").to_pylist() == ["a"]  # damaged rows: quarantined
    assert sorted(p.name for p in (tmp_path / "res" / "quarantine").iterdir()) == ["x.parquet", "y.parquet", "z.parquet"]
    assert len(lines) == 3 and all(": warning: not a row of a tm2nn results table (" in ln and "its task runs again" in ln
                                   for ln in lines)


def test_export_parquet_and_csv(tmp_path):
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    st = Store(tmp_path / "res", sweep="s")
    for tid in ("b", "a"):
        st.append(row_of(tid))
    st.export(tmp_path / "all.parquet")
    assert pq.read_table(tmp_path / "all.parquet").to_pylist() == st.rows()
    st.export(tmp_path / "all.csv")
    assert pcsv.read_csv(tmp_path / "all.csv").column("task_id").to_pylist() == ["a", "b"]
    with pytest.raises(Tm2nnError, match="parquet or a .csv"):
        st.export(tmp_path / "all.xlsx")
    assert pq.read_table(tmp_path / "res" / "rows").num_rows == 2  # pyarrow reads the folder (skips .tmp files)


def test_an_empty_store_has_the_schema(tmp_path):
    t = Store(tmp_path / "res").table()
    assert t.num_rows == 0 and t.schema.equals(SCHEMA) and isinstance(t, pa.Table)


# -- the local pool -----------------------------------------------------------------------------------
def pool_tasks(marker: Path | None = None, *, sleep: float = 0.0) -> list[dict]:
    """Cheap tasks (interpreter runs, a circuit, an error), none needing torch."""
    out = [task("run", "bb3.tm", "interp", args={"input": "", "max_steps": 10 * k + 5, "_test_sleep": sleep})
           for k in range(5)]
    out += [task("run", "full_adder.circ", "interp", args={"input": "110"}),
            task("run", "binary_increment.tm", "interp", args={"input": "1011"}),
            task("run", "missing.tm", "interp", args={"input": ""})]
    if marker is not None:
        out[2]["args"]["_test_exit"] = str(marker)
        out[2] = task("run", "bb3.tm", "interp", args=out[2]["args"])
    return out


@pytest.fixture
def hooks(monkeypatch):
    monkeypatch.setenv(tasks.TEST_HOOKS_ENV, "1")


def test_pool_runs_every_task_once_keeps_rows_on_ctrl_c_and_skips_finished(tmp_path, hooks, monkeypatch):
    jobs = pool_tasks(sleep=0.2)
    st = Store(tmp_path / "res", sweep="t")
    monkeypatch.setattr(local, "AHEAD", 1)  # one task per worker submitted at a time: the window refills
    seen = []

    def interrupt_at_3(done, failed, remaining):
        seen.append((done, failed, remaining))
        if done == 3:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        local.run_local(jobs, st, workers=2, progress=interrupt_at_3)
    first = st.finished()
    assert len(first) == 3 and seen[0] == (0, 0, 8)  # the rows written stay
    for _ in range(50):  # the workers were stopped, not left running
        if not multiprocessing.active_children():
            break
        time.sleep(0.1)
    assert not multiprocessing.active_children()

    seen.clear()
    local.run_local(jobs, st, workers=2, progress=lambda *a: seen.append(a))
    rows = st.rows()
    assert sorted(r["task_id"] for r in rows) == sorted(t["id"] for t in jobs)  # 8 rows, each once
    assert seen[0] == (0, 0, 5) and seen[-1][0] == 5 and seen[-1][2] == 0
    assert seen[-1][1] == sum(r["outcome"] != "ok" for r in rows if r["task_id"] not in first)  # this run's
    by_id = {r["task_id"]: r for r in rows}
    for t in jobs:  # the pool computes what run_task computes in this process
        assert untimed(by_id[t["id"]]) == {**untimed(run_task(t)), "sweep": "t"}
    assert {r["outcome"] for r in rows} == {"ok", "mismatch", "error"}

    def no_pool(*a, **k):
        raise AssertionError("a finished sweep started a pool")
    monkeypatch.setattr(local, "_pool_round", no_pool)
    local.run_local(jobs, st, workers=2, progress=lambda *a: seen.append(a))
    assert seen[-1] == (0, 0, 0) and st.rows() == rows


def test_a_killed_worker_is_retried_and_a_deadly_task_gets_a_crash_row(tmp_path, hooks):
    """Task 2 kills its worker once (then runs normally); a deadly task kills it every time:
    every other task still has its row, exactly once, and the deadly one a crash row."""
    jobs = pool_tasks(tmp_path / "killed-once", sleep=0.3)[:6]
    deadly = task("run", "bb3.tm", "interp", args={"input": "1", "_test_exit": True})
    st = Store(tmp_path / "res", sweep="t")
    local.run_local([*jobs, deadly], st, workers=2)
    rows = {r["task_id"]: r for r in st.rows()}
    assert len(st.rows()) == len(rows) == 7 and set(rows) == {t["id"] for t in [*jobs, deadly]}
    assert (tmp_path / "killed-once").exists()
    for t in jobs:
        assert untimed(rows[t["id"]]) == {**untimed(run_task(t)), "sweep": "t"}
    dead = rows[deadly["id"]]
    assert dead["outcome"] == "crash" and dead["exit_class"] == 70
    assert dead["error"] == f"worker died (signal SIGKILL) on {local.MAX_RETRIES + 1} runs of this task"


def die_on_start(started: str) -> None:
    """A worker initializer that exits at once (the workers import it from this module)."""
    os._exit(3)


def test_workers_that_die_before_any_task_stop_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_init_local", die_on_start)
    monkeypatch.setattr(local, "MAX_BARREN_POOLS", 1)
    st = Store(tmp_path / "res")
    with pytest.raises(Tm2nnError, match=r"die before running a task \(exit code 3\); 1 task not run"):
        local.run_local([task("run", "bb3.tm", "interp", args={"input": ""})], st, workers=1)
    assert st.finished() == set()


def test_sigterm_stops_the_driver_like_ctrl_c():
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("SIGTERM is handled by the test runner here")
    with pytest.raises(KeyboardInterrupt), local.sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(Tm2nnError, match="workers"):
        local.run_local([], Store(tmp_path / "res"), workers=0)


def test_a_damaged_row_on_a_read_only_folder_is_skipped_in_place(tmp_path, monkeypatch):
    """Where the damaged row cannot be moved, it is left, skipped and named."""
    import errno

    from tm2nn.sweep import store as store_module

    st = Store(tmp_path / "res")
    st.append(row_of("a"))
    (st.rows_dir / "z.parquet").write_bytes(b"garbage")

    def refuse(*_):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(store_module.os, "replace", refuse)
    lines = []
    st = Store(tmp_path / "res", warn=lines.append)
    assert st.rows() and [r["task_id"] for r in st.rows()] == ["a"] and st.finished() == {"a"}
    assert (st.rows_dir / "z.parquet").exists()
    assert len(lines) == 1 and lines[0].endswith("left in place and skipped (it cannot be moved: Read-only file system)")
