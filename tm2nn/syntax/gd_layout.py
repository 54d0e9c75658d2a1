"""The ``# gd-trace: samples=N features=M theta=C1,.. steps=T [primary=P xbits=B ybits=B
wbits=B frac=F digits=AB cells=LO,HI]`` header comment: how a machine for Welper §5 (``tm2nn learn
--backend gd-trace``) reads a dataset and where it leaves the weights (docs/gd_trace.md,
"§5 layouts").  Parsed here; the backend builds its
:class:`~tm2nn.backends.gd_trace.layout.Layout` from the fields and validates them there
(``validate``), and its errors are located at the header line."""

from __future__ import annotations

from tm2nn.errors import Tm2nnError

HEADER = "# gd-trace:"
REQUIRED = ("samples", "features", "theta", "steps")
INTS = ("samples", "features", "steps", "xbits", "ybits", "wbits", "frac")
WORDS = ("primary", "digits")
LISTS = ("theta", "cells")


def parse(text: str, path: str = "<source>", validate=None) -> dict:
    """``{"samples", "features", "theta", "steps"}`` and any optional fields from the first
    ``# gd-trace:`` line of a machine file; located errors for a bad line or none.
    ``validate(fields)`` (the backend's layout check) may raise a :class:`Tm2nnError`,
    which is located at the header line."""
    for ln, line in enumerate(text.splitlines(), start=1):
        if not line.startswith(HEADER):
            continue
        fields: dict = {}
        col = len(HEADER) + 1
        for tok in line[len(HEADER):].split():
            col = line.index(tok, col - 1) + 1
            key, eq, val = tok.partition("=")
            if not eq or key not in REQUIRED + INTS + WORDS + LISTS or key in fields:
                raise Tm2nnError(f"gd-trace header: expected samples=N features=M theta=C1,C2,.. steps=T "
                                 f"[primary=P xbits=B ybits=B wbits=B frac=F digits=AB cells=LO,HI], got {tok!r}",
                                 file=path, line=ln, col=col, snippet=line)
            if key in WORDS:
                fields[key] = val
                continue
            try:
                fields[key] = [int(v) for v in val.split(",")] if key in LISTS else int(val)
            except ValueError:
                raise Tm2nnError(f"gd-trace header: {key} must be {'integers' if key in LISTS else 'an integer'}",
                                 file=path, line=ln, col=col + len(key) + 1, snippet=line) from None
        missing = [k for k in REQUIRED if k not in fields]
        if missing:
            raise Tm2nnError(f"gd-trace header: missing {', '.join(missing)}", file=path, line=ln, col=1, snippet=line)
        if fields["samples"] < 2 or fields["steps"] < 1:
            raise Tm2nnError("gd-trace header: samples must be >= 2 and steps >= 1",
                             file=path, line=ln, col=1, snippet=line)
        if validate is not None:
            try:
                validate(fields)
            except Tm2nnError as e:
                raise Tm2nnError(f"gd-trace header: {e.message}", file=path, line=ln, col=1, snippet=line) from None
        return fields
    raise Tm2nnError("learning with the gd-trace backend needs a machine whose file declares its data layout in a "
                     "'# gd-trace: samples=N features=M theta=C1,C2,.. steps=T' comment "
                     "(see examples/sign_sum_3x2.tm)", file=path, line=1, col=1, snippet=text.splitlines()[0] if text else "")
