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

import json
import os
import re
import sys
from pathlib import Path

import pyarrow as pa

from tm2nn.errors import Tm2nnError, render_located
from tm2nn.fileio import replace_atomic, stale_temps, write_atomic
from tm2nn.sweep.tasks import one_line

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

    def quarantine(self, path: Path, why: str) -> None:
        """Move the row file ``path`` into ``RESULTS/quarantine/`` (its task then runs
        again), saying so in one line; where it cannot be moved (a read-only folder) it is
        left in place and skipped."""
        dest_dir = self.folder / QUARANTINE
        dest = dest_dir / path.name
        try:
            dest_dir.mkdir(exist_ok=True)
            k = 1
            while dest.exists():  # an earlier one of the same name stays
                dest, k = dest_dir / f"{path.stem}.{k}{path.suffix}", k + 1
            os.replace(path, dest)
            done = f"moved to {dest}; its task runs again"
        except OSError as e:
            if path.name in self._skipped:  # said once
                return
            self._skipped.add(path.name)
            done = f"left in place and skipped (it cannot be moved: {e.strerror or e})"
        self._warn(render_located("warning", f"{why}: {done}", str(path), None, None, None))

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
    return table


def _write_row(path: Path, data: bytes) -> None:
    """Write a row file atomically, the folder fsync'ed after the rename
    (:func:`tm2nn.fileio.replace_atomic`).  Not ``write_atomic`` itself: it scans the folder
    for stale temporary files at every write, which costs time linear in the rows
    (quadratic over a sweep); the store cleans them once, when it opens the folder."""

    replace_atomic(path, data, _MODE, sync_folder=True)
