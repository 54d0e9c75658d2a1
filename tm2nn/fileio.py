"""Reading input files safely, and writing output files so that a failure leaves nothing
partial.

:func:`read_input` is how tm2nn reads any file a user names (a source, a training set, an
``--inputs`` list): only regular files (a device such as ``/dev/zero``, a FIFO, a socket
or a folder is refused at once, without blocking), at most a size limit
(:func:`tm2nn.limits.source_limit`, ``--max-source-size``), read in bounded chunks so a
file that grows while it is read cannot run past the limit either.

:func:`write_atomic` is how tm2nn writes any file: :func:`output_target` checks the path
first (a regular file, or none yet, in a folder for files; a symbolic link is written
through), then the data goes to a temporary file renamed over the target.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import re
import stat
import tempfile
from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.limits import human, source_limit

#: Bytes read per ``os.read`` call.
READ_CHUNK = 1 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str:
    for test, what in _KINDS:
        if test(mode):
            return what
    return "not a regular file"


def read_input(path: str | Path, what: str = "", limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (``what`` names it in errors, e.g.
    ``"training set"``), refused when it is not a regular file or is larger than ``limit``
    bytes (default :func:`tm2nn.limits.source_limit`).  Opening never blocks: a FIFO is
    opened non-blocking and refused by its type before anything is read."""

    p = str(path)
    label = f"{what} {p}" if what else p
    how = ": raise it with --max-source-size SIZE (or TM2NN_MAX_SOURCE)" if limit is None else ""
    limit = source_limit() if limit is None else limit
    if "\x00" in p:
        raise Tm2nnError(f"{what + ' ' if what else ''}{p!r}: a file name cannot hold a NUL byte")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise Tm2nnError(f"no such file: {label}") from None
    except IsADirectoryError:
        raise Tm2nnError(f"{label} is a folder, not a file") from None
    except OSError as e:
        raise Tm2nnError(f"cannot read {label}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Tm2nnError(f"{label} is {_not_regular(st.st_mode)}, not a regular file: tm2nn reads only files")
        too_big = f"{label} is larger than the limit of {human(limit)} for a file tm2nn reads{how}"
        if st.st_size > limit:
            raise Tm2nnError(too_big.replace("is larger than", f"is {human(st.st_size)}, larger than"))
        chunks, total = [], 0
        while True:
            try:
                chunk = os.read(fd, min(READ_CHUNK, limit + 1 - total))
            except OSError as e:
                raise Tm2nnError(f"cannot read {label}: {e.strerror or e}") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise Tm2nnError(too_big)
        return b"".join(chunks)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: File systems that hold devices and kernel state, not files: never written into.
SPECIAL_FILESYSTEMS = frozenset({"devtmpfs", "proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs",
                                 "tracefs", "securityfs", "configfs", "pstore", "bpf", "efivarfs", "mqueue",
                                 "hugetlbfs", "fusectl", "binfmt_misc"})


def _filesystem_of(folder: str) -> str | None:
    """The type of the file system ``folder`` (a resolved path) is on, from
    ``/proc/self/mounts`` (the longest mount point that holds it); None if unknown."""
    best, kind = "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount = parts[1].replace("\\040", " ")
                inside = folder == mount or folder.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, parts[2]
    except OSError:
        return None
    return kind


def output_target(path: str | Path, what: str = "") -> Path:
    """The regular file that writing ``path`` replaces (checked before any work).

    The rules (docs/limits.md, "Files"): a symbolic link is written through, to the file it
    points at (the link stays, as with ``cp``); the target must be a regular file or not
    exist yet, in an existing folder that is not on a device or kernel file system
    (``/dev``, ``/proc``, ``/sys``).  Anything else is a :class:`Tm2nnError`."""
    p = Path(path)
    label = f"{what}: {p}" if what else str(p)
    if str(p) == "" or p.name in ("", ".", "..") or "\x00" in str(p):
        raise Tm2nnError(f"{what + ': ' if what else ''}{str(p)!r} is not a file name")
    target = Path(os.path.realpath(p))
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise Tm2nnError(f"cannot write {label}: {e.strerror or e}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise Tm2nnError(f"cannot write {label}: it is {_not_regular(st.st_mode)}, not a regular file "
                         "(tm2nn writes only regular files)")
    if not target.parent.is_dir():
        via = f" (it links to {str(target)!r})" if p.is_symlink() else ""
        raise Tm2nnError(f"{label}: folder {str(target.parent if via else p.parent)!r} does not exist{via}")
    kind = _filesystem_of(str(target.parent))
    if kind in SPECIAL_FILESYSTEMS:
        raise Tm2nnError(f"cannot write {label}: {str(target.parent)!r} is on a {kind} file system "
                         "(devices and kernel state), not a folder for files")
    return target


#: What follows ``.NAME.`` in a temporary file's name: the writer's pid, mkstemp's letters.
_TEMP = re.compile(r"(\d+)\.[a-z0-9_]+\.tmp")


def stale_temps(target: Path) -> None:
    """Remove temporary files an earlier write to ``target`` left behind when its process
    was killed (``.NAME.PID.XXXX.tmp`` whose process no longer runs)."""
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        m = _TEMP.fullmatch(tmp.name[len(target.name) + 2:])
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # alive, another user's
            continue


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, renamed over
    ``path``, so a failure leaves nothing partial (and an old file intact).  ``path`` is
    checked by :func:`output_target` (a symbolic link is written through).  The file gets
    the old file's mode, or the usual ``0o666`` less the umask (not ``mkstemp``'s
    ``0o600``).  The temporary file is ``.NAME.PID.XXXX.tmp``; one left by a killed
    process is removed by the next write to the same file.  When another process
    renamed its own file over ``path`` meanwhile, this write is an error
    (:func:`check_still_ours`)."""
    path = output_target(path)
    stale_temps(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    mine = replace_atomic(path, raw, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~current_umask())
    check_still_ours(path, mine)


def replace_atomic(path: Path, raw: bytes, mode: int, sync_folder: bool = False) -> os.stat_result:
    """:func:`write_atomic`'s write alone (no checks, no scan for stale temporary files):
    ``raw`` to a temporary file beside ``path``, flushed and fsync'ed, renamed over it;
    with ``sync_folder`` the folder is fsync'ed too, so the rename survives a power cut (a
    sweep's rows, :mod:`tm2nn.sweep.store`).  Returns the written file's ``fstat`` (for
    :func:`check_still_ours`)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise Tm2nnError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
            mine = os.fstat(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise Tm2nnError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_folder:
        _sync_folder(path.parent)
    return mine


def check_still_ours(path: Path, mine: os.stat_result) -> None:
    """After a rename over ``path``: the file there is the one this process wrote
    (``mine``, its temporary file's ``fstat``), else another process replaced it in the
    meantime and this write did not last: an error, never a report of success for a
    file this process did not leave (docs/limits.md, "Files tm2nn writes")."""
    try:
        now = os.stat(path)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
        raise Tm2nnError(f"cannot write {path}: another process replaced it while this one was writing it, so "
                         "the file there now is not this one's (write it again, one writer at a time)")


def _sync_folder(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


@contextlib.contextmanager
def folder_lock(folder: Path):
    """Hold an exclusive ``flock`` on ``folder`` while writing files that belong
    together (a ``.safetensors`` and its manifest, :mod:`tm2nn.modelfile.manifest`):
    a second tm2nn process writing there waits for the first to finish.  The kernel
    drops the lock when its holder exits, killed or not.  Where folders cannot be
    locked (some network file systems) the writes go ahead unlocked."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock
