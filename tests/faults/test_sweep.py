"""Issue 40 (the sweep part): rows that are stale, damaged, misnamed or of another spec are
set aside and their tasks run again; one driver at a time on a results folder; workers
that die with a driver killed by SIGKILL, and no temporary folder left; a bounded glob
walk, a probe that knows a port that is not Ray, and a report that prints its tables on a
disk where the plots cannot be written."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tm2nn
from tests.conftest import EXAMPLES
from tm2nn.errors import Tm2nnError
from tm2nn.sweep import local, ray_engine, tasks
from tm2nn.sweep.spec import load_spec
from tm2nn.sweep.store import Store
from tm2nn.sweep.tasks import run_task

ROOT = Path(__file__).resolve().parents[2]
SPEC = """name = "{name}"
task = "run"
backends = ["interp"]
sources = [{sources}]

[grid]
max_steps = [{steps}]

[args]
input = ""
"""


def spec_file(tmp_path, name="s", sources=("bb.tm",), steps="100") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, sources=", ".join(f'"{s}"' for s in sources), steps=steps))
    return path


def machine(tmp_path, name="bb.tm") -> Path:
    """A copy of bb3 (sigma 5) that a test may edit."""
    path = tmp_path / name
    shutil.copy(EXAMPLES / "bb3.tm", path)
    return path


def ran(spec_path, folder, lines=None) -> Store:
    """What an earlier run of the spec left: a row per task (each run in this process)."""
    store = Store(folder, sweep=load_spec(spec_path).name, warn=None if lines is None else lines.append)
    for t in load_spec(spec_path).tasks():
        assert store.append(run_task(t.to_json()))
    return store


def quarantined(folder) -> list[str]:
    q = Path(folder) / "quarantine"
    return sorted(p.name for p in q.iterdir()) if q.is_dir() else []


# -- point 2: an edited source -------------------------------------------------------------------------
def test_an_edited_source_runs_again_and_its_old_row_is_set_aside(tmp_path):
    """Issue 40, point 2: a machine edited after its row was written (sigma 5 -> 4) is
    stale: the rerun sets the old row aside in one line and runs the task again, and the
    new row gives what ``tm2nn run`` gives."""
    src, spec = machine(tmp_path), spec_file(tmp_path)
    ran(spec, tmp_path / "r")
    src.write_text(src.read_text().replace("A 1 -> 1 R Z", "A 1 -> 0 R Z"))  # the halting write: sigma 4
    assert tm2nn.run(str(src), "", 100)["sigma"] == 4
    lines = []
    store = Store(tmp_path / "r", warn=lines.append)
    todo = local.unfinished(load_spec(spec).tasks(), store)
    assert [t["id"] for t in todo] == [load_spec(spec).tasks()[0].id]
    assert len(lines) == 1 and "stale" in lines[0] and f"{src} changed since this row was written" in lines[0]
    assert "its task runs again" in lines[0] and len(quarantined(tmp_path / "r")) == 1
    store.append(run_task(todo[0]))
    assert json.loads(store.rows()[0]["figures"])["sigma"] == 4
    assert local.unfinished(load_spec(spec).tasks(), store) == []  # the new row fits


def test_a_learn_tasks_training_set_is_in_its_hash(tmp_path):
    """Issue 40, point 2 (for a task that reads a dataset too): a row of a learn task is
    stale when its training set changes, though its source did not."""
    data = tmp_path / "train.csv"
    data.write_text("input,output\n0,1\n")
    job = {"id": "l1", "kind": "learn", "source": str(machine(tmp_path)), "name": None, "format": None,
           "backend": "rcnn", "options": {"train": str(data)}, "args": {}}
    store = Store(tmp_path / "r")
    store.append(tasks.failed_row(job, "error", "a row"))
    assert local.unfinished([job], store) == []
    data.write_text("input,output\n0,0\n")
    lines = []
    assert [t["id"] for t in local.unfinished([job], Store(tmp_path / "r", warn=lines.append))] == ["l1"]
    assert len(lines) == 1 and "stale" in lines[0]


# -- point 3: the results folder -----------------------------------------------------------------------
def _wrong_schema(path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), path)


def _null_task_id(path: Path) -> None:
    t = pq.read_table(path)
    pq.write_table(t.set_column(0, pa.field("task_id", pa.string()), pa.array([None], pa.string())), path)


@pytest.mark.parametrize("damage", [
    lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]),  # truncated
    lambda p: p.write_bytes(b""),                                         # empty
    lambda p: p.write_bytes(b"PAR1 garbage PAR1"),                        # garbage
    _wrong_schema,                                                        # another schema
    _null_task_id,                                                        # a row without its id
], ids=["truncated", "empty", "garbage", "schema", "null-id"])
def test_a_damaged_row_is_not_finished(tmp_path, damage):
    """Issue 40, point 3 (a damaged row counts as finished): each damage sets the row
    aside in one line; its task is unfinished again, the other row stays."""
    machine(tmp_path)
    spec = spec_file(tmp_path, steps="5, 100")
    ran(spec, tmp_path / "r")
    ids = [t.id for t in load_spec(spec).tasks()]
    damage(tmp_path / "r" / "rows" / f"{ids[0]}.parquet")
    lines = []
    store = Store(tmp_path / "r", warn=lines.append)
    assert [t["id"] for t in local.unfinished(load_spec(spec).tasks(), store)] == [ids[0]]
    assert len(lines) == 1 and "warning" in lines[0] and "its task runs again" in lines[0]
    assert [r["task_id"] for r in store.rows()] == [ids[1]]


def test_a_row_under_another_tasks_name_is_set_aside(tmp_path, run_cli):
    """Issue 40, point 3 (a row saved under another task's name gave "ok" with a task
    missing): it is set aside, naming both tasks, and the task it stood for runs again."""
    machine(tmp_path)
    spec = spec_file(tmp_path, steps="50, 100")
    ran(spec, tmp_path / "r")
    a, b = (tmp_path / "r" / "rows" / f"{t.id}.parquet" for t in load_spec(spec).tasks())
    shutil.copy(a, b)
    rep = run_cli("sweep", "report", tmp_path / "r", "--json")
    assert rep.code == 0 and json.loads(rep.out)["tasks"] == 1
    assert rep.err.count("warning") == 1 and f"the row of task {a.stem!r} saved under the name of task " \
                                                f"{b.stem!r}" in rep.err
    assert quarantined(tmp_path / "r") == [b.name]
    assert [t["id"] for t in local.unfinished(load_spec(spec).tasks(), Store(tmp_path / "r"))] == [b.stem]


def test_a_second_driver_on_a_folder_stops_at_once(tmp_path, run_cli):
    """Issue 40, point 3 (two drivers on one folder each ran every task): while a driver
    holds the folder, a second one exits 2 at once, naming the first one's pid, and
    writes no row."""
    machine(tmp_path)
    spec, out = spec_file(tmp_path), tmp_path / "r"
    (out / "rows").mkdir(parents=True)
    with open(out / ".lock", "w") as held:  # what a running driver holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{os.getpid()}\n")
        held.flush()
        t0 = time.monotonic()
        r = run_cli("sweep", spec, "-o", out, "--workers", "1")
        assert r.code == 2 and time.monotonic() - t0 < 5
        assert f"is in use by another sweep driver (pid {os.getpid()})" in r.err and "Traceback" not in r.err
        assert list((out / "rows").iterdir()) == []
        with pytest.raises(Tm2nnError, match="in use by another sweep driver"):  # the Python API too
            local.run_local(load_spec(spec).tasks(), Store(out), workers=1)


def test_rows_of_another_spec_are_set_aside(tmp_path, run_cli):
    """Issue 40, point 3 (rows of a different spec gave the title "201 of 1 tasks
    finished"): the driver of the new spec sets them aside, one line each, and the report
    counts only its own tasks."""
    machine(tmp_path)
    machine(tmp_path, "other.tm")
    ran(spec_file(tmp_path, "old", ("other.tm",), "30, 40"), tmp_path / "r")
    new = spec_file(tmp_path, "new", ("bb.tm",), "100")
    r = run_cli("sweep", new, "-o", tmp_path / "r", "--workers", "1", "--json")
    assert r.code == 0 and json.loads(r.out)["ok"] == 1
    assert r.err.count("a row of no task of this sweep") == 2 and len(quarantined(tmp_path / "r")) == 2
    rep = run_cli("sweep", "report", tmp_path / "r")
    assert rep.code == 0 and "new: 1 of 1 tasks finished" in rep.out


def test_many_rows_of_another_spec_are_counted_in_one_line(tmp_path, monkeypatch):
    """Issue 40, point 3: past the first few, the rows of no task of the sweep are set
    aside with one line that counts them (not a line each for 200 rows)."""
    from tm2nn.sweep import store as store_module

    machine(tmp_path)
    monkeypatch.setattr(store_module, "SAY_FOREIGN", 1, raising=False)
    ran(spec_file(tmp_path, "old", steps="30, 40, 50"), tmp_path / "r")
    lines = []
    store = Store(tmp_path / "r", warn=lines.append)
    assert store.settle(load_spec(spec_file(tmp_path, "new")).tasks(), whole=True) == 3
    assert len(lines) == 2 and "2 more rows of no task of this sweep" in lines[1] and store.rows() == []


# -- point 4: SIGKILL of the driver ------------------------------------------------------------------
DRIVER = """
import sys
from tm2nn.sweep.local import run_local
from tm2nn.sweep.spec import Task
from tm2nn.sweep.store import Store

if __name__ == "__main__":
    jobs = [Task("run", sys.argv[2], None, None, "interp", {}, {"input": "", "max_steps": 30 + k,
                 "_test_sleep": float(sys.argv[3])}) for k in range(3)]
    run_local(jobs, Store(sys.argv[1]), workers=2)
"""
SLEEP = 1.0  # each task's: the driver is killed while its workers run them


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_driver_and_the_next_run_cleans_up(tmp_path, monkeypatch):
    """Issue 40, point 4: a driver killed with SIGKILL while its workers run tasks leaves
    no worker and no resource tracker running (they stayed for 15 min), and the next run
    removes its temporary folder and finishes every task, each once."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    (tmp_path / "driver.py").write_text(DRIVER)
    src = machine(tmp_path)
    env = {**os.environ, "TMPDIR": str(temp), tasks.TEST_HOOKS_ENV: "1", "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "r"), str(src), str(SLEEP)],
                              env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(temp.glob("tm2nn-sweep-*/*")):  # a worker has started a task
            assert driver.poll() is None and time.monotonic() < deadline, "the driver started no task"
            time.sleep(0.05)
        procs = _children(driver.pid)
        assert len(procs) >= 3  # two workers and the resource tracker
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 5
        while [p for p in procs if _running(p)] and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in procs if _running(p)]
    finally:
        for p in [p for p in _children(driver.pid) if _running(p)] if driver.poll() is None else []:
            os.kill(p, signal.SIGKILL)
        driver.kill()
    for p in left:  # (the test's own clean-up, so nothing outlives it; the assertion below fails)
        os.kill(p, signal.SIGKILL)
    assert left == [], f"processes of the killed driver still run: {left}"
    assert list(temp.glob("tm2nn-sweep-*"))  # the killed driver could not remove its folder
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    monkeypatch.setenv(tasks.TEST_HOOKS_ENV, "1")
    store = Store(tmp_path / "r")
    local.run_local(_jobs(src), store, workers=2)  # the next run
    assert list(temp.iterdir()) == []
    assert sorted(r["task_id"] for r in store.rows()) == sorted(j.id for j in _jobs(src))  # none lost, each once


def _jobs(src):
    from tm2nn.sweep.spec import Task

    return [Task("run", str(src), None, None, "interp", {}, {"input": "", "max_steps": 30 + k, "_test_sleep": SLEEP})
            for k in range(3)]


WATCHED = """
import os, subprocess, sys, time
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, __file__, "child", str(os.getpid())])
    print(child.pid, flush=True)
    time.sleep(60)
else:
    sys.platform = "darwin"  # no prctl: the fallback, a thread that watches the parent
    from tm2nn.sweep.local import die_with
    die_with(int(sys.argv[2]))
    open(__file__ + ".armed", "w").close()
    time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_without_prctl_a_worker_still_dies_with_its_driver(tmp_path):
    """Issue 40, point 4 (the fallback where there is no parent-death signal): a thread in
    the worker sees its parent gone within about a second and ends the worker."""
    (tmp_path / "w.py").write_text(WATCHED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "w.py"), "parent"], stdout=subprocess.PIPE, env=env)
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "w.py.armed").exists():  # the child has armed its watch
            assert _running(child) and time.monotonic() < deadline
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child)
    finally:
        parent.kill()
        parent.stdout.close()
        if _running(child):
            os.kill(child, signal.SIGKILL)


# -- point 10: smaller holes -------------------------------------------------------------------------
def test_a_glob_that_reads_too_much_is_a_located_error(tmp_path, monkeypatch):
    """Issue 40, point 10 (a spec glob '/**/*.tm' ran past 90 s with no output): the walk
    of a spec's globs is bounded; past the bound the spec is refused at the glob's line."""
    from tm2nn.sweep import walk

    for k in range(12):
        (tmp_path / "deep" / f"d{k}").mkdir(parents=True)
        shutil.copy(EXAMPLES / "bb3.tm", tmp_path / "deep" / f"d{k}" / "m.tm")
    spec = spec_file(tmp_path, sources=("deep/**/*.tm",))
    assert len(load_spec(spec).tasks()) == 12
    seen = []
    monkeypatch.setattr(walk, "EVERY", 10)
    assert len(load_spec(spec, seen=seen.append).tasks()) == 12 and seen[:2] == [10, 20]  # the progress line's count
    monkeypatch.setattr(walk, "MAX_ENTRIES", 20)
    with pytest.raises(Tm2nnError) as e:
        load_spec(spec)
    assert e.value.line == 4 and "the glob 'deep/**/*.tm' reads more than 20 folder entries" in e.value.message


def _server(answer: bytes | None):
    """A port that accepts connections and then says ``answer`` (None: nothing)."""
    srv = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)
            if answer:
                c.sendall(answer)
    threading.Thread(target=serve, daemon=True).start()
    return srv, held


def test_a_port_that_is_not_ray_is_a_quick_error(monkeypatch):
    """Issue 40, point 10 (--ray at a port that accepts connections but is not Ray hung for
    180 s or more): the probe wants an HTTP/2 answer (Ray's head speaks gRPC) and says in
    one line that the port is not a Ray cluster."""
    monkeypatch.setattr(ray_engine, "PROBE_SECONDS", 1.0, raising=False)
    silent, held = _server(None)
    web, held2 = _server(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    h2, held3 = _server(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an HTTP/2 server's SETTINGS frame
    try:
        for srv, why in ((silent, "no answer within 1 s"), (web, "its answer is not HTTP/2")):
            address = f"127.0.0.1:{srv.getsockname()[1]}"
            t0 = time.monotonic()
            with pytest.raises(Tm2nnError) as e:
                ray_engine._reachable(address)
            assert time.monotonic() - t0 < 4
            assert f"cannot connect to the Ray cluster at {address}: {address} accepts connections but is not " \
                   f"a Ray cluster ({why}" in e.value.message
        assert ray_engine._reachable(f"127.0.0.1:{h2.getsockname()[1]}") == f"127.0.0.1:{h2.getsockname()[1]}"
    finally:
        for s in (silent, web, h2, *held, *held2, *held3):
            s.close()


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_the_report_prints_its_tables_when_the_plots_cannot_be_written(tmp_path, run_cli, monkeypatch, fault):
    """Issue 40, point 10 (on a full or read-only disk, sweep report failed, even with
    --json, because it wrote the plots first): the summary comes out, and one line says
    which plots were not written."""
    machine(tmp_path)
    ran(spec_file(tmp_path, steps="5, 100"), tmp_path / "r")
    if fault == "full":
        def full(path, data, *a, **k):
            raise Tm2nnError(f"cannot write {path}: {os.strerror(errno.ENOSPC)}")
        monkeypatch.setattr("tm2nn.viz.render.write_atomic", full)
    else:
        def read_only(self, *a, **k):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        monkeypatch.setattr(Path, "mkdir", read_only)
    rep = run_cli("sweep", "report", tmp_path / "r", "--json")
    assert rep.code == 0 and json.loads(rep.out)["tasks"] == 2 and json.loads(rep.out)["plots"]["files"] == []
    assert rep.err.count("\n") == 1 and "seconds_histogram.png" in rep.err and "not written" in rep.err
    table = run_cli("sweep", "report", tmp_path / "r")
    assert table.code == 0 and "2 tasks finished" in table.out and "not written" in table.out
