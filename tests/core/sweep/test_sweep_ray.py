"""The Ray engine (tm2nn/sweep/ray_engine.py): issue 22's acceptance test on a real local
Ray cluster (a head and worker nodes on 127.0.0.1, started and torn down here), and fast
checks of its errors and of how it turns Ray's failures into rows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tm2nn.errors import Tm2nnError
from tm2nn.sweep.spec import Task
from tm2nn.sweep.store import Store
from tm2nn.sweep.tasks import TIMING_COLUMNS

EX = Path(__file__).resolve().parents[3] / "examples"
MARK = "TM2NN_RAY_TEST_CLUSTER"  # every process of a test cluster carries it: teardown kills exactly those


# -- a local Ray cluster ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_pids(token: str, sid: int) -> list[int]:
    """The pids of one node's processes: those in the session of its ``ray start`` (the
    raylet, the agents, ...) and those whose environment holds ``MARK=token`` (its
    workers, which leave the session)."""
    want = f"{MARK}={token}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            text = (d / "stat").read_text()
            stat = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
            if stat[0] == "Z":  # killed already, not yet reaped
                continue
            if int(stat[3]) == sid or want in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Cluster:
    """A Ray head without CPUs and worker nodes, on this machine: each node is one
    ``ray start`` in a session of its own, with a marker in its environment that its
    workers inherit, so a node is killed, and the whole cluster torn down, by pid (see
    :func:`_node_pids`).  Not ``ray stop``: it stops every Ray process of the machine."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="tm2nn-ray-", dir="/tmp"))  # short: Ray's socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[tuple[str, int]] = []  # (marker token, session id)
        self.ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"

    def _start(self, *flags) -> tuple[str, int]:
        token = f"{self.root.name}-{len(self.nodes)}"
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", TM2NN_SWEEP_TEST_HOOKS="1",
                   **{MARK: token},
                   # a dead node is noticed in ~4 s, not Ray's default ~15 s (and a slow one on a busy
                   # machine is not taken for dead: that would end it)
                   RAY_health_check_initial_delay_ms="0", RAY_health_check_period_ms="1000",
                   RAY_health_check_timeout_ms="1000", RAY_health_check_failure_threshold="4")
        ports = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
                 "--runtime-env-agent-port")
        cmd = [self.ray, "start", *flags, "--disable-usage-stats", f"--temp-dir={self.root / 'ray'}",
               "--object-store-memory=100000000", *(f"{p}={_free_port()}" for p in ports)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.nodes.append((token, proc.pid))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{out}\n{err}"
        return self.nodes[-1]

    def start_head(self) -> tuple[str, int]:
        return self._start("--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false",
                           f"--dashboard-port={_free_port()}")

    def add_node(self, cpus: int = 2) -> tuple[str, int]:
        return self._start(f"--address={self.address}", f"--num-cpus={cpus}")

    def kill_node(self, node: tuple[str, int]) -> list[int]:
        """SIGKILL every process of ``node`` (again, while one it spawned meanwhile is left)."""
        killed: list[int] = []
        for _ in range(5):
            pids = _node_pids(*node)
            if not pids:
                break
            _kill(pids)
            killed += pids
            time.sleep(0.1)
        return killed

    def teardown(self) -> None:
        for node in self.nodes:
            self.kill_node(node)
        shutil.rmtree(self.root, ignore_errors=True)


DRIVER = """\
import json, sys
from tm2nn.errors import Tm2nnError
from tm2nn.sweep.ray_engine import RayOptions, run_ray
from tm2nn.sweep.spec import Task
from tm2nn.sweep.store import Store

tasks = [Task.from_json(d) for d in json.load(open(sys.argv[1]))]
calls = []
try:
    run_ray(tasks, Store(sys.argv[2], sweep="ray-test"), address=sys.argv[3],
            progress=lambda *c: calls.append(c), options=RayOptions(head_grace_s=float(sys.argv[4])))
except Tm2nnError as e:
    print(e.render(), file=sys.stderr)
    sys.exit(2)
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
print(json.dumps({"ran": calls[-1][0] if calls else None}))
"""


def _driver(cluster: Cluster, tasks, results: Path, grace: float = 20.0) -> subprocess.Popen:
    """A sweep driver in its own process (so that the test can kill it)."""
    spec = cluster.root / f"tasks-{results.name}.json"
    spec.write_text(json.dumps([t.to_json() for t in tasks]))
    script = cluster.root / "driver.py"
    script.write_text(DRIVER)
    return subprocess.Popen([sys.executable, str(script), str(spec), str(results), cluster.address, str(grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, RAY_AUTH_MODE="disabled"))  # as the cluster (a local test)


def _rows_in(results: Path) -> int:
    return len(list((results / "rows").glob("*.parquet")))


def _wait_for(what, cond, proc=None, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the driver ended (exit {proc.returncode}) before {what}:\n{out}\n{err[-3000:]}")
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _sweep_tasks(root: Path) -> list[Task]:
    """50 cheap tasks: compiles (info) of machines and circuits, interpreter runs, two that
    fail (error rows), sleepers that keep the sweep running while the test kills things, and
    one that kills its worker process on its first run (Ray reruns it)."""
    machines = [EX / f"{m}.tm" for m in ("bb3", "bb4", "binary_increment", "even_ones", "palindrome")]
    circuits = [EX / f"{c}.circ" for c in ("full_adder", "majority5", "comparator4", "ripple_adder4")]
    tasks = []
    for i in range(50):
        if i % 5 == 4 or i >= 40:
            tasks.append(Task("run", str(EX / "bb3.tm"), None, None, "interp", {},
                              {"input": "", "max_steps": 100 + i, "_test_sleep": 0.5}))
        elif i % 5 in (0, 1):
            tasks.append(Task("info", str(machines[i % 5]), None, None, "transformer", {"steps": 8 + i}, {}))
        elif i % 5 == 2:
            tasks.append(Task("info", str(circuits[i % 4]), None, None, "relu-circuit", {}, {"_test_sleep": 0.01 * i}))
        else:
            tasks.append(Task("run", str(EX / "ripple_adder4.circ"), None, None, "interp", {},
                              {"input": format(i, "09b")}))
    tasks[7] = Task("run", str(EX / "full_adder.circ"), None, None, "interp", {}, {"input": "10"})  # an error row
    tasks[12] = Task("info", str(EX / "bb3.tm"), None, None, "relu-circuit", {"steps": 0}, {})    # an error row
    tasks[13] = Task("run", str(EX / "binary_increment.tm"), None, None, "interp", {},
                     {"input": "1011", "max_steps": 1000, "_test_exit": str(root / "exited-once")})
    assert len({t.id for t in tasks}) == 50
    return tasks


def _without_timing(rows) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds a node's processes in /proc (Linux)")
def test_ray_sweep_survives_a_killed_node_driver_and_head(tmp_path, monkeypatch):
    """Issue 22's acceptance: a 50-task sweep on a local cluster (a head and one worker
    node); the worker node is killed mid-sweep and a new one started (Ray reruns the lost
    tasks there), the driver is stopped too (SIGTERM), and a rerun finishes: all 50 rows,
    each task once, the same rows as the local pool's apart from the timing columns.  Then the head
    is killed under a running sweep: a clear error (exit 2), the rows written stay."""
    pytest.importorskip("ray")
    cluster = Cluster()
    try:
        cluster.start_head()
        node_a = cluster.add_node(2)
        tasks = _sweep_tasks(cluster.root)
        results = tmp_path / "ray"

        first = _driver(cluster, tasks, results)
        _wait_for("10 rows", lambda: _rows_in(results) >= 10, first)
        a_pids = {str(p) for p in cluster.kill_node(node_a)}  # the node's raylet, its agents and its workers
        at_kill = _rows_in(results)
        assert at_kill < 50
        cluster.add_node(2)
        # the same driver goes on: Ray reruns the tasks that were running on the dead node on the new one
        _wait_for("30 rows", lambda: _rows_in(results) >= 30, first)
        first.send_signal(signal.SIGTERM)  # and the sweep itself is stopped (Ray stops its job's tasks)
        out, err = first.communicate(timeout=60)
        assert first.returncode == 130 and "interrupted" in err.splitlines(), err[-3000:]
        before = _rows_in(results)
        assert at_kill < before < 50
        rows = Store(results).rows()
        assert any(r["worker"].rsplit(":", 1)[1] not in a_pids for r in rows), "no row from the new node"

        second = _driver(cluster, tasks, results)  # the rerun: only the unfinished tasks
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1])["ran"] == 50 - before
        rows = Store(results).rows()
        assert sorted(r["task_id"] for r in rows) == sorted(t.id for t in tasks)  # all 50, each once
        assert len(list((results / "rows").iterdir())) == 50  # no temporary file left either
        assert (cluster.root / "exited-once").exists()  # a task killed its worker process, and ran again

        from tm2nn.sweep.local import run_local

        monkeypatch.setenv("TM2NN_SWEEP_TEST_HOOKS", "1")
        local = Store(tmp_path / "local", sweep="ray-test")
        run_local(tasks, local, workers=2)
        assert _without_timing(rows) == _without_timing(local.rows())
        assert sum(r["outcome"] == "error" for r in rows) == 2 and all(r["outcome"] in ("ok", "error") for r in rows)

        # the head dies under a running sweep: exit 2 with the message, the finished row kept
        lost = tmp_path / "lost"
        late = [Task("info", str(EX / "bb3.tm"), None, None, "transformer", {"steps": 99}, {}),
                *(Task("run", str(EX / "bb3.tm"), None, None, "interp", {}, {"input": "", "max_steps": 50,
                                                                               "_test_sleep": 60 + k})
                  for k in range(2))]
        third = _driver(cluster, late, lost, grace=1.0)
        _wait_for("the first row", lambda: _rows_in(lost) >= 1, third)
        cluster.kill_node(cluster.nodes[0])
        out, err = third.communicate(timeout=60)
        assert third.returncode == 2, err[-3000:]
        assert f"lost the Ray cluster at {cluster.address}" in err and "rerun to resume" in err
        assert [r["task_id"] for r in Store(lost).rows()] == [late[0].id]
    finally:
        cluster.teardown()


# -- fast checks: no cluster ---------------------------------------------------------------------------
def _tiny(tmp_path) -> tuple[list[Task], Store]:
    return [Task("info", str(EX / "bb3.tm"), None, None, "transformer", {"steps": 22}, {})], Store(tmp_path / "r")


def test_without_ray_a_clear_error(tmp_path, monkeypatch, run_cli):
    """No Ray installed: the error names the extra to install, and the CLI exits 2."""
    from tm2nn.sweep.ray_engine import run_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    tasks, store = _tiny(tmp_path)
    with pytest.raises(Tm2nnError, match=r"--ray needs Ray: pip install 'tm2nn\[ray\]'"):
        run_ray(tasks, store, address="auto")
    spec = tmp_path / "s.toml"
    spec.write_text(f'task = "info"\nbackends = ["transformer"]\nsources = ["{EX / "bb3.tm"}"]\n[grid]\nsteps = [22]\n')
    r = run_cli("sweep", spec, "-o", tmp_path / "out", "--ray", "auto")
    assert r.code == 2 and "pip install 'tm2nn[ray]'" in r.err and "Traceback" not in r.err


def test_nobody_at_the_address(tmp_path):
    """An address where nothing listens is an error at once (ray.init itself would retry
    for many minutes); a finished sweep does not connect at all."""
    pytest.importorskip("ray")
    from tm2nn.sweep.ray_engine import run_ray

    tasks, store = _tiny(tmp_path)
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(Tm2nnError, match=f"cannot connect to the Ray cluster at 127.0.0.1:{port}: nothing accepts"):
        run_ray(tasks, store, address=f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 30
    from tm2nn.sweep.tasks import run_task

    store.append(run_task(tasks[0].to_json()))
    calls = []
    run_ray(tasks, store, address=f"127.0.0.1:{port}", progress=lambda *c: calls.append(c))  # nothing to run
    assert calls == [(0, 0, 0)]


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_dead_head_named_by_ray_address_fails_in_seconds(tmp_path, how):
    """``--ray auto`` with ``RAY_ADDRESS`` naming a closed port (Ray would retry for
    minutes, printing each retry), and ``--ray HOST:PORT`` with ``RAY_ADDRESS`` naming
    another (Ray prefers the variable): one line naming the address, exit 2, in seconds,
    before Ray is imported (``ray`` is blocked here: the probe needs no Ray)."""
    spec = tmp_path / "s.toml"
    spec.write_text(f'task = "info"\nbackends = ["transformer"]\nsources = ["{EX / "bb3.tm"}"]\n[grid]\nsteps = [22]\n')
    port, other = _free_port(), _free_port()
    flag = "auto" if how == "env" else f"127.0.0.1:{other}"
    code = ("import sys\nif sys.argv[1] == 'blocked': sys.modules['ray'] = None\n"
            "from tm2nn.cli import main; sys.exit(main(sys.argv[2:]))")
    env = dict(os.environ, RAY_ADDRESS=f"127.0.0.1:{port}", PYTHONPATH=str(EX.parent))
    for ray in ("blocked", "installed") if how == "env" else ("blocked",):
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, "-c", code, ray, "sweep", str(spec), "-o", str(tmp_path / "out"),
                                "--ray", flag], env=env, capture_output=True, text=True, timeout=40)
        except subprocess.TimeoutExpired:
            pytest.fail(f"--ray {flag} with RAY_ADDRESS at a closed port ran past 40 s")
        assert time.monotonic() - t0 < 30 and r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        want = f"127.0.0.1:{port}" if how == "env" else f"127.0.0.1:{other}"
        assert last.startswith(f"tm2nn: error: cannot connect to the Ray cluster at {flag}") and want in last, last
    if how == "flag":  # the address given is the one ray.init gets, whatever RAY_ADDRESS says
        from tm2nn.sweep import ray_engine

        seen = []

        class FakeRay:
            def is_initialized(self):
                return False

            def init(self, address, **kw):
                seen.append((address, os.environ.get("RAY_ADDRESS")))

        ray_engine._connect(FakeRay(), flag, flag)
        assert seen == [(flag, flag)]


def test_rows_when_ray_gives_up(tmp_path):
    """Ray's failures become crash rows naming the cause (a worker that died on every
    retry, an exception that escaped the task); workers without tm2nn stop the sweep."""
    ray = pytest.importorskip("ray")
    from ray.exceptions import RayTaskError, WorkerCrashedError

    from tm2nn.sweep.ray_engine import failed_row_for
    from tm2nn.sweep.store import COLUMNS

    job = _tiny(tmp_path)[0][0].to_json()
    row = failed_row_for(job, WorkerCrashedError(), 3, ray)
    assert set(row) == set(COLUMNS) and row["task_id"] == job["id"]
    assert (row["outcome"], row["exit_class"]) == ("crash", 70)
    assert row["error"].startswith("worker died: Ray gave up after 3 retries (WorkerCrashedError: ")
    row = failed_row_for(job, ray.exceptions.ObjectLostError("ab" * 14, None, ""), 3, ray)  # not a death
    assert row["error"].startswith("Ray gave up after 3 retries (ObjectLostError: Failed to retrieve object ab")
    row = failed_row_for(job, RayTaskError("_sweep_task", "Traceback ...", ValueError("bad")), 3, ray)
    assert (row["outcome"], row["error"]) == ("crash", "ValueError: bad")
    missing = ModuleNotFoundError("No module named 'tm2nn'", name="tm2nn")
    with pytest.raises(Tm2nnError, match="workers cannot import tm2nn"):
        failed_row_for(job, RayTaskError("_sweep_task", "Traceback ...", missing), 3, ray)
    other = ModuleNotFoundError("No module named 'scipy'", name="scipy")  # a task's own problem: its row
    assert failed_row_for(job, RayTaskError("_sweep_task", "", other), 3, ray)["outcome"] == "crash"
