"""Writing output files so that a failure leaves nothing partial."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tm2nn.errors import Tm2nnError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, renamed over
    ``path``, so a failure leaves nothing partial (and an old file intact).  The file gets
    the old file's mode, or the usual ``0o666`` less the umask (not ``mkstemp``'s ``0o600``)."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as e:
        raise Tm2nnError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise Tm2nnError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
