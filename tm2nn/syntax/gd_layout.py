"""The ``# gd-trace: samples=N features=M theta=C1,..,CM steps=T`` header comment: how a
machine for Welper §5 (``tm2nn learn --backend gd-trace``) reads a dataset and where it
leaves the weights (docs/formats.md).  Parsed here; the backend builds its
:class:`~tm2nn.backends.gd_trace.extended.Layout` from the fields."""

from __future__ import annotations

from tm2nn.errors import Tm2nnError

HEADER = "# gd-trace:"


def parse(text: str, path: str = "<source>") -> dict:
    """``{"samples", "features", "theta", "steps"}`` from the first ``# gd-trace:`` line
    of a machine file; located errors for a bad line or none."""
    for ln, line in enumerate(text.splitlines(), start=1):
        if not line.startswith(HEADER):
            continue
        fields, col = {}, len(HEADER) + 1
        for tok in line[len(HEADER):].split():
            col = line.index(tok, col - 1) + 1
            key, eq, val = tok.partition("=")
            if not eq or key not in ("samples", "features", "theta", "steps") or key in fields:
                raise Tm2nnError(f"gd-trace header: expected samples=N features=M theta=C1,C2,.. steps=T, "
                                 f"got {tok!r}", file=path, line=ln, col=col, snippet=line)
            try:
                fields[key] = [int(v) for v in val.split(",")] if key == "theta" else int(val)
            except ValueError:
                raise Tm2nnError(f"gd-trace header: {key} must be {'integers' if key == 'theta' else 'an integer'}",
                                 file=path, line=ln, col=col + len(key) + 1, snippet=line) from None
        missing = [k for k in ("samples", "features", "theta", "steps") if k not in fields]
        if missing:
            raise Tm2nnError(f"gd-trace header: missing {', '.join(missing)}", file=path, line=ln, col=1, snippet=line)
        if len(fields["theta"]) != fields["features"] or fields["samples"] < 2 or fields["steps"] < 1:
            raise Tm2nnError("gd-trace header: theta must list one cell per feature, samples must be >= 2 "
                             "and steps >= 1", file=path, line=ln, col=1, snippet=line)
        return fields
    raise Tm2nnError("learning with the gd-trace backend needs a machine whose file declares its data layout in a "
                     "'# gd-trace: samples=N features=M theta=C1,C2,.. steps=T' comment "
                     "(see examples/sign_sum_3x2.tm)", file=path, line=1, col=1, snippet=text.splitlines()[0] if text else "")
