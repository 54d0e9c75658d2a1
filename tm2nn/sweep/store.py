"""The results folder of a sweep: one Parquet file per finished task, written atomically.

``RESULTS/rows/<task_id>.parquet`` holds one row (:data:`SCHEMA`, the columns of
docs/sweep.md, "Results").  A row goes to a temporary file in the same folder, flushed and
fsync'ed, then renamed over its name (:func:`tm2nn.fileio.write_atomic`) and the folder
fsync'ed: a row is there whole or not at all, whenever the driver is killed.  A temporary
file a killed driver left is never read, and is removed by the next run.  Only the driver
writes rows (workers return them), so killing a worker cannot leave a partial one.

:class:`Store` is the folder: :meth:`~Store.finished` (the task ids with a row, what a
rerun skips), :meth:`~Store.append` (idempotent: the first row of an id is kept),
:meth:`~Store.table` / :meth:`~Store.rows` (every row, sorted by task id) and
:meth:`~Store.export` (the whole table as one ``.parquet`` or ``.csv`` file).

A row file that does not read as a row (truncated, garbage, another schema: a disk or a
hand that damaged it) is never counted as finished: :meth:`~Store.finished` and
:meth:`~Store.table` move it into ``RESULTS/quarantine/`` and say so in one line on
standard error, so its task runs again and every other row is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path

import pyarrow as pa

from tm2nn.errors import Tm2nnError, render_located
from tm2nn.fileio import replace_atomic, stale_temps, write_atomic
from tm2nn.sweep.spec import canonical
from tm2nn.sweep.tasks import one_line, reads_sha256

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock (one driver per folder is then the user's care)
    fcntl = None

#: The results table's columns (docs/sweep.md, "Results"); ``name``, ``format``, ``error``
#: and ``source_sha256`` (a source that could not be read) may be null.
SCHEMA = pa.schema(
    [pa.field("task_id", pa.string(), nullable=False),
     pa.field("sweep", pa.string(), nullable=False),
     pa.field("kind", pa.string(), nullable=False),
     pa.field("source", pa.string(), nullable=False),
     pa.field("name", pa.string()),
     pa.field("format", pa.string()),
     pa.field("backend", pa.string(), nullable=False),
     pa.field("options", pa.string(), nullable=False),
     pa.field("args", pa.string(), nullable=False),
     pa.field("outcome", pa.string(), nullable=False),
     pa.field("exit_class", pa.int32(), nullable=False),
     pa.field("error", pa.string()),
     pa.field("figures", pa.string(), nullable=False),
     pa.field("seconds", pa.float64(), nullable=False),
     pa.field("peak_rss_mb", pa.float64(), nullable=False),
     pa.field("tm2nn_version", pa.string(), nullable=False),
     pa.field("source_sha256", pa.string()),
     pa.field("worker", pa.string(), nullable=False),
     pa.field("finished_at", pa.string(), nullable=False)],
    metadata={"tm2nn.results": "1"},  # the format's version: a later change of columns bumps it
)
COLUMNS = tuple(SCHEMA.names)
#: a row file's mode: what ``open`` would give (0o666 less the umask), not mkstemp's 0o600
_UMASK = os.umask(0o022)
os.umask(_UMASK)
_MODE = 0o666 & ~_UMASK
#: where row files that do not read as rows are moved (beside ``rows/``)
QUARANTINE = "quarantine"
#: the lock file a driver holds (``fcntl.flock``) while it runs, with its pid in it
LOCK = ".lock"
#: quarantine lines said one by one for rows of other tasks; the rest in one line
SAY_FOREIGN = 10
#: the task's columns a row must match (the columns the task id hashes)
TASK_COLUMNS = ("kind", "source", "name", "format", "backend", "options", "args")
#: a task id as a file name (the contract's ids are 16 hex digits)
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Store:
    """The results folder ``folder`` (see the module doc).  ``sweep`` names the sweep in
    the rows' ``sweep`` column; default: the ``name`` in ``folder/sweep.json`` (the driver
    writes it), else the folder's name.  ``create`` makes the folder when it is missing;
    an existing folder must be empty or hold results already."""

    def __init__(self, folder, *, sweep: str | None = None, create: bool = True, warn=None):
        self.folder = Path(folder)
        self.rows_dir = self.folder / "rows"
        self._sweep = sweep
        #: ``warn(line)`` for a row moved into quarantine (default: the line on standard error)
        self._warn = warn or (lambda line: print(line, file=sys.stderr))
        #: the rows read so far: file name -> ((size, mtime), table), read again when the file changes
        self._read: dict[str, tuple[tuple, pa.Table]] = {}
        self._skipped: set[str] = set()  # damaged rows that could not be moved aside
        # file -> sha256 of what the tasks read, hashed once per Store (one driver run): the
        # driver's settle and run_local's settle compare the rows with the same hashes
        self._sums: dict = {}
        self._lock_fd: int | None = None
        self._lock_depth = 0
        if self.folder.exists() and not self.folder.is_dir():
            raise Tm2nnError(f"the results folder {str(self.folder)!r} is a file, not a folder")
        if self.folder.is_dir() and not self.rows_dir.is_dir() and not (self.folder / "sweep.json").exists() \
                and any(self.folder.iterdir()):
            raise Tm2nnError(f"{str(self.folder)!r} is not a results folder (it holds other files and no rows/): "
                             "name a new or empty folder")
        if create:
            try:
                self.rows_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise Tm2nnError(f"cannot create the results folder {str(self.rows_dir)!r}: {e.strerror or e}") from None
        elif not self.rows_dir.is_dir():
            why = "no rows/ in it" if self.folder.is_dir() else "it does not exist"
            raise Tm2nnError(f"{str(self.folder)!r} is not a results folder ({why})")
        self._clean_temps()

    @property
    def sweep(self) -> str:
        """The sweep's name, for the rows' ``sweep`` column."""
        if self._sweep is None:
            try:
                self._sweep = str(json.loads((self.folder / "sweep.json").read_text())["name"])
            except (OSError, ValueError, KeyError, TypeError):
                return self.folder.resolve().name
        return self._sweep

    def _path(self, task_id: str) -> Path:
        if not isinstance(task_id, str) or not _ID.fullmatch(task_id):
            raise ValueError(f"not a task id: {task_id!r}")
        return self.rows_dir / f"{task_id}.parquet"

    def _row_files(self) -> list[Path]:
        if not self.rows_dir.is_dir():
            return []
        return [p for p in self.rows_dir.iterdir() if p.suffix == ".parquet" and not p.name.startswith(".")]

    def _clean_temps(self) -> None:
        """Remove temporary row files left by a driver that was killed while writing."""

        if self.rows_dir.is_dir():
            for tmp in self.rows_dir.glob(".*.parquet.*.tmp"):
                stale_temps(self.rows_dir / tmp.name[1:tmp.name.index(".parquet.") + len(".parquet")])

    def finished(self) -> set[str]:
        """The ids of the tasks with a row that reads (one that does not is quarantined)."""
        return {p.stem for p, _ in self._tables()}

    def _tables(self) -> list[tuple[Path, pa.Table]]:
        """``(file, table)`` of every row file that reads as a row; the others are moved
        into :data:`QUARANTINE` (:meth:`quarantine`)."""
        out = []
        for p in self._row_files():
            if p.name in self._skipped:  # set aside in place (a read-only folder): not a finished row
                continue
            try:
                st = p.stat()
                key = (st.st_size, st.st_mtime_ns)
                if self._read.get(p.name, (None,))[0] != key:
                    self._read[p.name] = (key, _read_row(p))
                out.append((p, self._read[p.name][1]))
            except FileNotFoundError:  # removed meanwhile (forget)
                self._read.pop(p.name, None)
            except Tm2nnError as e:
                self._read.pop(p.name, None)
                self.quarantine(p, e.message)
        return out

    def quarantine(self, path: Path, why: str, say: bool = True) -> bool:
        """Move the row file ``path`` into ``RESULTS/quarantine/`` (its task then runs
        again), saying so in one line (unless not ``say``); where it cannot be moved (a
        read-only folder) it is left in place and skipped.  True when it was moved."""
        dest_dir = self.folder / QUARANTINE
        dest = dest_dir / path.name
        try:
            dest_dir.mkdir(exist_ok=True)
            k = 1
            while dest.exists():  # an earlier one of the same name stays
                dest, k = dest_dir / f"{path.stem}.{k}{path.suffix}", k + 1
            os.replace(path, dest)
            done, moved = f"moved to {dest}; its task runs again", True
        except FileNotFoundError:  # another reader moved it meanwhile
            self._read.pop(path.name, None)
            return False
        except OSError as e:
            if path.name in self._skipped:  # said once
                return False
            self._skipped.add(path.name)
            done, moved = f"left in place and skipped (it cannot be moved: {e.strerror or e})", False
        self._read.pop(path.name, None)
        if say:
            self._warn(render_located("warning", f"{why}: {done}", str(path), None, None, None))
        return moved

    def settle(self, tasks, *, whole: bool = False) -> int:
        """Set aside (:meth:`quarantine`, one line each) the rows that do not fit ``tasks``
        (``Task`` objects or their JSON): a row whose task columns differ from its task's
        (a row of another task under its id), a stale row (the files the task reads, its
        source or training set, changed since the row was written: its ``source_sha256``
        is not theirs now), and with ``whole`` (``tasks`` is the whole sweep) a row of no
        task of them (a row of another spec, or of an earlier version of this one).
        Their tasks run again.  Returns how many rows were set aside."""
        by_id = {}
        for t in tasks:
            job = t.to_json() if hasattr(t, "to_json") else t
            by_id.setdefault(job["id"], job)
        moved = foreign = 0
        for p, table in self._tables():
            job = by_id.get(p.stem)
            if job is None:
                if whole:
                    foreign += 1
                    say = foreign <= SAY_FOREIGN
                    if self.quarantine(p, "a row of no task of this sweep (another spec's, or an earlier version's "
                                          "of this one)", say=say):
                        moved += 1
                continue
            row = table.to_pylist()[0]
            want = {"kind": job.get("kind"), "source": job.get("source"), "name": job.get("name"),
                    "format": job.get("format"), "backend": job.get("backend"),
                    "options": _canonical(job.get("options")), "args": _canonical(job.get("args"))}
            differ = [c for c in TASK_COLUMNS if row[c] != want[c]]
            if differ:
                why = f"a row of another task under this task's id (its {', '.join(differ)} differ)"
            else:
                now = reads_sha256(job, self._sums)
                if row["source_sha256"] == now:
                    continue
                why = (f"stale: {row['source']} changed since this row was written (sha256 "
                       f"{(row['source_sha256'] or 'none')[:12]} then, {(now or 'unreadable')[:12]} now)")
            moved += self.quarantine(p, why)
        if foreign > SAY_FOREIGN:
            self._warn(f"{self.rows_dir}: warning: {foreign - SAY_FOREIGN:,} more rows of no task of this sweep: "
                       f"moved to {self.folder / QUARANTINE} (or left where they could not be moved)")
        return moved

    @contextlib.contextmanager
    def locked(self):
        """Hold the folder's lock (``RESULTS/.lock``, ``fcntl.flock``) for the block: one
        driver at a time writes a results folder.  A second one gets a
        :class:`Tm2nnError` at once, naming the holder's pid.  Re-entrant on this Store."""
        self.lock()
        self._lock_depth += 1
        try:
            yield self
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                self.unlock()

    def lock(self) -> None:
        """Take the folder's lock until :meth:`unlock` or this process's end (see :meth:`locked`)."""
        if fcntl is None or self._lock_fd is not None:
            return
        path = self.folder / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), _MODE)
        except OSError as e:
            raise Tm2nnError(f"cannot lock the results folder {str(self.folder)!r} ({path}: {e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Tm2nnError(f"the results folder {str(self.folder)!r} is in use by another sweep driver (pid "
                             f"{holder}): wait for it to end, or give another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the file releases the lock
            self._lock_fd = None

    def append(self, row: dict) -> bool:
        """Write ``row`` (every column; ``sweep`` is filled in when missing or None)
        atomically.  Idempotent: when the task has a row already, that row is kept and
        this returns False."""
        row = dict(row)
        if row.get("sweep") is None:
            row["sweep"] = self.sweep
        missing = [c for c in COLUMNS if c not in row]
        extra = [c for c in row if c not in COLUMNS]
        if missing or extra:
            raise ValueError(f"a results row has the columns {', '.join(COLUMNS)}; missing: {missing}, "
                             f"unknown: {extra}")
        nulls = [f.name for f in SCHEMA if not f.nullable and row[f.name] is None]
        if nulls:
            raise ValueError(f"a results row needs a value in {', '.join(nulls)}")
        path = self._path(row["task_id"])
        if path.exists():
            return False
        from pyarrow import parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist([row], schema=SCHEMA), sink)
        _write_row(path, sink.getvalue().to_pybytes())
        return True

    def forget(self, task_ids) -> int:
        """Remove the rows of ``task_ids`` (those present), so a rerun runs those tasks again
        (``tm2nn sweep --retry-failed``); returns how many were removed.  Each removal is one
        unlink: a row is there whole or gone."""
        gone = 0
        for task_id in task_ids:
            try:
                self._path(task_id).unlink()
                gone += 1
            except FileNotFoundError:
                pass
        return gone

    def table(self) -> pa.Table:
        """Every row (one per task id), sorted by task id, with :data:`SCHEMA`."""
        tables = [t for _, t in self._tables()]
        if not tables:
            return SCHEMA.empty_table()
        return pa.concat_tables(tables).sort_by("task_id")

    def rows(self) -> list[dict]:
        """:meth:`table` as a list of dicts."""
        return self.table().to_pylist()

    def export(self, path) -> Path:
        """Write the whole table to one file: ``.csv`` when ``path`` says so, else Parquet
        (atomic, as every file tm2nn writes)."""

        path = Path(path)
        sink = pa.BufferOutputStream()
        if path.suffix.lower() == ".csv":
            from pyarrow import csv

            csv.write_csv(self.table(), sink)
        elif path.suffix.lower() in (".parquet", ".pq"):
            from pyarrow import parquet as pq

            pq.write_table(self.table(), sink)
        else:
            raise Tm2nnError(f"{path}: export writes a .parquet or a .csv file")
        write_atomic(path, sink.getvalue().to_pybytes())
        return path


def _read_row(path: Path) -> pa.Table:
    """One row file, with :data:`SCHEMA` (``ParquetFile.read``: a quarter of
    ``read_table``'s time on one-row files)."""
    from pyarrow import parquet as pq

    try:
        table = pq.ParquetFile(path).read(use_threads=False).select(list(COLUMNS)).cast(SCHEMA)
    except (pa.ArrowException, KeyError, OSError, ValueError) as e:
        raise Tm2nnError(f"not a row of a tm2nn results table ({one_line(e)})", file=str(path)) from None
    if table.num_rows != 1:
        raise Tm2nnError(f"not a row of a tm2nn results table ({table.num_rows} rows, not 1)", file=str(path))
    nulls = [f.name for f in SCHEMA if not f.nullable and table.column(f.name).null_count]
    if nulls:
        raise Tm2nnError(f"not a row of a tm2nn results table (no value in {', '.join(nulls)})", file=str(path))
    tid = table.column("task_id")[0].as_py()
    if tid != path.stem:
        raise Tm2nnError(f"the row of task {one_line(tid)[:64]!r} saved under the name of task {path.stem!r}",
                         file=str(path))
    return table


def _canonical(d) -> str:
    """``options`` / ``args`` as a row holds them (:func:`tm2nn.sweep.tasks.failed_row`)."""
    try:
        return canonical(d or {})
    except (TypeError, ValueError):
        return ""


def _write_row(path: Path, data: bytes) -> None:
    """Write a row file atomically, the folder fsync'ed after the rename
    (:func:`tm2nn.fileio.replace_atomic`).  Not ``write_atomic`` itself: it scans the folder
    for stale temporary files at every write, which costs time linear in the rows
    (quadratic over a sweep); the store cleans them once, when it opens the folder."""

    replace_atomic(path, data, _MODE, sync_folder=True)
