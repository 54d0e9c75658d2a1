"""The Ray engine (``tm2nn sweep --ray ADDRESS``): a sweep's tasks on an existing Ray cluster.

It uses Ray's own task API and nothing else: one remote function (:func:`_sweep_task`,
``max_retries`` = 3, ``retry_exceptions=False``) runs :func:`tm2nn.sweep.tasks.run_task` in
Ray's worker processes; the driver keeps a bounded number of tasks in flight (2 per CPU of
the cluster), collects them with ``ray.wait`` and appends each row to the store itself, so
only the driver writes rows (docs/sweep.md, "Engines: Ray").

Faults:
- a worker process or a whole node that dies: Ray reruns its tasks (``max_retries``), on
  any node; when Ray gives up, the task gets a ``"crash"`` row and the sweep goes on;
- the head lost (or the connection to it): a :class:`Tm2nnError`, and every row written
  so far stays.  Ray itself ends a driver whose head has been unreachable for 60 s
  (``gcs_rpc_server_reconnect_timeout_s``) from C++, with no Python exception; so while it
  waits the engine checks that the head still accepts connections, and stops first, with
  a message that says how to resume.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from tm2nn.errors import Tm2nnError
from tm2nn.sweep.local import sigterm_as_interrupt, unfinished
from tm2nn.sweep.tasks import failed_row, init_worker, one_line, run_task


@dataclass(frozen=True)
class RayOptions:
    """How the engine drives the cluster.  The defaults suit any cluster; the fault test
    shortens ``head_grace_s``."""

    #: Ray reruns a task whose worker process or node died this many times (then: a crash row)
    max_retries: int = 3
    #: tasks submitted ahead per CPU of the cluster: the workers never wait for the driver,
    #: and a sweep of 10^6 tasks does not sit in Ray's queues (or its memory) at once
    in_flight_per_cpu: int = 2
    #: how long the head may refuse connections before the sweep stops (< Ray's own 60 s)
    head_grace_s: float = 20.0
    #: how long one ``ray.wait`` waits before the loop checks the head again
    poll_s: float = 1.0
    #: how often the cluster's CPU count (hence the number in flight) is read again
    resources_s: float = 10.0


def run_ray(tasks, store, *, address: str, progress=None, options: RayOptions | None = None) -> None:
    """Run the tasks (``Task`` objects or their ``to_json()`` dicts) not yet in ``store``
    on the Ray cluster at ``address`` (``"auto"``, ``"HOST:PORT"`` or any address
    ``ray.init`` takes), appending each finished task's row to ``store`` in this process;
    ``progress(done, failed, remaining)`` is called at the start and after each row, as
    the local pool does.  Connects with ``ray.init`` unless this process is connected
    already (then it uses that connection and leaves it open).  Ctrl-C or SIGTERM cancels
    the tasks in flight and re-raises ``KeyboardInterrupt``; the rows written stay."""

    with store.locked():  # one driver at a time on a results folder
        _run_ray(tasks, store, address, progress, options)


def _run_ray(tasks, store, address: str, progress, options) -> None:
    opts = options or RayOptions()
    todo = unfinished(tasks, store)
    loaded = sys.modules.get("ray")
    target = address
    if todo and not (loaded is not None and loaded.is_initialized()):
        target = _reachable(address)  # before Ray is imported: a dead head is an error in seconds
    ray = _import_ray()
    driver = _Driver(ray, address, store, progress, opts, len(todo))
    driver.report()
    if not todo:
        return
    connected_here = _connect(ray, address, target)
    try:
        with sigterm_as_interrupt():
            driver.run(todo, cancel=not connected_here)
    finally:
        if connected_here:  # (a few seconds when the head is gone; Ray would end the process later)
            ray.shutdown()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise Tm2nnError("--ray needs Ray: pip install 'tm2nn[ray]'") from None
    return ray


def _reachable(address: str) -> str:
    """The address ``ray.init`` is to connect to, checked to accept a TCP connection
    within 5 s (Ray itself retries for minutes, printing each retry): ``address``, or
    for ``auto`` the one ``RAY_ADDRESS`` names, else the cluster Ray finds on this machine
    (its address file, which a dead cluster leaves behind).  Addresses Ray resolves some
    other way are returned as they are."""
    target, why = address, ""
    env = os.environ.get("RAY_ADDRESS", "")
    if address == "auto" and env:
        target, why = env, f" (RAY_ADDRESS={env})"
    elif address == "auto":
        found = _found_by_ray()
        if found is not None:
            target, why = found, f" (the cluster Ray found on this machine, at {found})"
    where = _host_port(target)
    if where is None:
        return target
    if not _accepts(where, PROBE_SECONDS):
        raise Tm2nnError(f"cannot connect to the Ray cluster at {address}{why}: nothing accepts connections at "
                         f"{where[0]}:{where[1]} (start one with 'ray start --head', or give its address)")
    odd = _not_grpc(where, PROBE_SECONDS)
    if odd:
        raise Tm2nnError(f"cannot connect to the Ray cluster at {address}{why}: {where[0]}:{where[1]} accepts "
                         f"connections but is not a Ray cluster ({odd}; Ray's head answers in gRPC, HTTP/2)")
    return target


def _found_by_ray() -> str | None:
    """The address Ray's ``auto`` resolves to (its address file, or a running head), or
    None when it finds none or Ray is not installed (``ray.init`` then says so)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address  # (Ray's own resolution)

        return canonicalize_bootstrap_address("auto")
    except Exception:  # noqa: BLE001 - no cluster, no Ray, or a Ray without this function
        return None


def _connect(ray, address: str, target: str) -> bool:
    """``ray.init`` at ``target`` (:func:`_reachable`'s answer for ``address``), a
    connection failure as a :class:`Tm2nnError`; False when this process is connected
    already.  ``RAY_ADDRESS`` names ``target`` during the call: Ray prefers that
    variable to the address it is given, and the address checked is the one used."""
    if ray.is_initialized():
        return False
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    env = os.environ.get("RAY_ADDRESS")
    try:
        if _host_port(target) is not None:
            os.environ["RAY_ADDRESS"] = target
        # the rows carry every task's messages: the workers' output stays in Ray's logs
        ray.init(address=target, logging_level="warning", log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError, ImportError) as e:  # (ray:// needs ray[client])
        raise Tm2nnError(f"cannot connect to the Ray cluster at {address}: {one_line(e)}") from None
    finally:
        if env is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = env
        if main and sigterm is not None:  # ray.init makes SIGTERM sys.exit(15): SIGTERM stops a sweep as Ctrl-C
            signal.signal(signal.SIGTERM, sigterm)
    return True


def _host_port(address: str):
    """(host, port) of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for the
    addresses Ray resolves itself (``auto``, ``local``)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


#: seconds the probe of an address waits to connect, and then for an HTTP/2 answer
PROBE_SECONDS = 5.0
#: what an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _not_grpc(where, timeout: float) -> str | None:
    """Why ``(host, port)`` is not a gRPC server (the head's GCS, or a Ray client server),
    None when it answers an HTTP/2 preface with a SETTINGS frame within ``timeout``
    seconds, as every HTTP/2 server does.  Something else (a web server, a database, a
    port that accepts and says nothing) would leave ``ray.init`` retrying for minutes."""
    try:
        with socket.create_connection(where, timeout=timeout) as s:
            deadline = time.monotonic() + timeout
            s.sendall(_H2_HELLO)
            head = b""
            while len(head) < 9:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = s.recv(9 - len(head))
                if not chunk:
                    return "it closed the connection without an answer" if not head else "its answer is not HTTP/2"
                head += chunk
    except socket.timeout:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        return f"the connection failed: {e.strerror or e}"
    return None if head[3] == 4 else "its answer is not HTTP/2"


def _accepts(where, timeout: float) -> bool:
    """Whether ``(host, port)`` accepts a TCP connection within ``timeout`` seconds."""
    try:
        socket.create_connection(where, timeout=timeout).close()
        return True
    except OSError:
        return False


def _sweep_task(task: dict) -> dict:
    """One task in a Ray worker process: ``init_worker`` (a no-op after the process's first
    task), then ``run_task``, which never raises for the task (it returns an error or
    crash row).  A module-level function, so Ray ships it by reference: every node runs
    its own installed tm2nn."""

    init_worker()
    return run_task(task)


class _Driver:
    """The submit / wait / append loop of :func:`run_ray` (one per run)."""

    def __init__(self, ray, address, store, progress, opts: RayOptions, total: int):
        self.ray, self.address, self.store, self.progress, self.opts = ray, address, store, progress, opts
        self.total, self.done, self.failed = total, 0, 0
        self._limit, self._limit_at = 0, float("-inf")

    def report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.failed, self.total - self.done)

    def run(self, todo, cancel: bool) -> None:
        """Submit, wait, append, until every job (a task's JSON dict) has a row.  When
        stopped (Ctrl-C, SIGTERM, a failing store), ``cancel`` the tasks in flight: on a
        connection of the caller's; on our own, ``ray.shutdown()`` ends this job, and Ray
        stops its tasks.  (Not ``ray.cancel(force=True)``: in Ray 2.60 a forced cancel that
        races a task's reply can abort the driver, "Tried to complete task that was not
        pending".)"""
        self.remote = self.ray.remote(max_retries=self.opts.max_retries, retry_exceptions=False)(_sweep_task)
        self.head = _head_address(self.ray)
        queue, in_flight = deque(todo), {}
        unreachable_since = None
        try:
            while queue or in_flight:
                limit = self._in_flight_limit()
                while queue and len(in_flight) < limit:
                    job = queue.popleft()
                    in_flight[self.remote.remote(job)] = job
                try:
                    ready, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=self.opts.poll_s)
                except ConnectionError as e:  # a Ray Client connection that dropped
                    raise self._lost(e) from None
                if not ready:  # nothing finished for a while: is the head still there?
                    if self._head_up():
                        unreachable_since = None
                    elif unreachable_since is None:
                        unreachable_since = time.monotonic()
                    elif time.monotonic() - unreachable_since > self.opts.head_grace_s:
                        raise self._lost()
                    continue
                for ref in ready:
                    row = self._row(ref, in_flight.pop(ref))
                    self.store.append(row)
                    self.done += 1
                    self.failed += row["outcome"] != "ok"
                    self.report()
        except _LostCluster:  # nothing to cancel: the cluster is gone
            raise
        except BaseException:  # the rows written stay
            for ref in in_flight if cancel else ():
                try:
                    self.ray.cancel(ref)
                except Exception:  # noqa: BLE001 - finished meanwhile, or the cluster is gone
                    pass
            raise

    def _row(self, ref, job) -> dict:
        """The task's row: the worker's, or a crash row when Ray gave up on the task."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ConnectionError as e:
            raise self._lost(e) from None
        except ray.exceptions.RayError as e:
            if not isinstance(e, ray.exceptions.RayTaskError) and not self._head_up():
                raise self._lost(e) from None
            return failed_row_for(job, e, self.opts.max_retries, ray)

    def _in_flight_limit(self) -> int:
        """``in_flight_per_cpu`` × the cluster's CPUs (at least 2), read again every
        ``resources_s`` as nodes join or leave."""
        now = time.monotonic()
        if now - self._limit_at >= self.opts.resources_s:
            try:
                cpus = int(self.ray.cluster_resources().get("CPU", 0))
            except Exception:  # noqa: BLE001 - the head is slow or gone: keep the last limit
                cpus = 0
            self._limit = max(2, self.opts.in_flight_per_cpu * cpus, self._limit if cpus == 0 else 0)
            self._limit_at = now
        return self._limit

    def _head_up(self) -> bool:
        """Whether the head's GCS port accepts a connection (True when its address is not
        known, as with Ray Client: its lost connection raises ``ConnectionError``)."""
        return self.head is None or _accepts(self.head, min(5.0, self.opts.head_grace_s))

    def _lost(self, cause=None) -> Tm2nnError:
        why = f" ({type(cause).__name__})" if cause is not None else ""
        return _LostCluster(f"lost the Ray cluster at {self.address}{why}: rows so far are kept; rerun to resume")


class _LostCluster(Tm2nnError):
    """The head (or the connection to it) is gone: no task can finish; the sweep stops."""


def _head_address(ray):
    """(host, port) of the head's GCS, or None when Ray does not say (Ray Client)."""
    try:
        return _host_port(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - not every kind of connection has a GCS address
        return None


def failed_row_for(job: dict, exc, max_retries: int, ray) -> dict:
    """The ``"crash"`` row of a task (its JSON dict) that Ray could not finish (``exc``
    from ``ray.get``): the task's own exception when it raised one (a bug: ``run_task``
    catches every task error), else what Ray says, after how many retries ("worker died"
    when the worker process or its node did, as the local pool says).  Workers that cannot
    import tm2nn are no task's fault: a :class:`Tm2nnError` stops the sweep before every
    task gets a crash row."""

    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        if isinstance(cause, ImportError) and str(getattr(cause, "name", "") or "").split(".")[0] == "tm2nn":
            raise Tm2nnError(f"the Ray cluster's workers cannot import tm2nn ({type(cause).__name__}: {cause}): "
                             "install the same tm2nn on every node, in the Python that runs Ray")
        message = f"{type(cause).__name__}: {cause}"
    else:
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        died = tuple(getattr(ray.exceptions, n) for n in _WORKER_DIED if hasattr(ray.exceptions, n))
        message = (f"{'worker died: ' if isinstance(exc, died) else ''}Ray gave up after {max_retries} retries "
                   f"({type(exc).__name__}: {first})")
    return failed_row(job, "crash", message)


#: Ray's errors for a task whose worker process or node died (those a Ray version has)
_WORKER_DIED = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError")
