"""Writing output files so that a failure leaves nothing partial."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tm2nn.errors import Tm2nnError


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, so a failure leaves nothing partial."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as e:
        raise Tm2nnError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise Tm2nnError(f"cannot write {path}: {e.strerror}") from None
