"""Figures and files for :mod:`tm2nn.viz`: an Agg-backed matplotlib ``Figure`` (no global
pyplot state, no display needed) and a checked writer for ``.png`` / ``.svg``."""

from __future__ import annotations

from pathlib import Path

from tm2nn.errors import Tm2nnError

SUFFIXES = (".png", ".svg")
#: Most rows (steps) or columns (cells, dimensions) a picture draws.
MAX_EXTENT = 2000


def check_out(path: str | Path) -> Path:
    """The output path, checked before any work: ``.png`` or ``.svg`` in an existing folder."""
    out = Path(path)
    if out.suffix.lower() not in SUFFIXES:
        raise Tm2nnError(f"-o must name a .png or .svg file, got {out.name!r}")
    if not out.parent.is_dir():
        raise Tm2nnError(f"-o: folder {str(out.parent)!r} does not exist")
    return out


def figure(width: float, height: float):
    """A new figure of ``width`` x ``height`` inches (clamped to something viewable)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(min(max(width, 4.0), 40.0), min(max(height, 3.0), 40.0)), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) atomically."""
    import io

    from tm2nn.fileio import write_atomic

    out = check_out(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=out.suffix.lower()[1:], bbox_inches="tight")
    write_atomic(out, buf.getvalue())
    return out


def refuse_large(what: str, n: int, hint: str) -> None:
    if n > MAX_EXTENT:
        raise Tm2nnError(f"refusing to draw {n:,} {what} (at most {MAX_EXTENT:,}): {hint}")


def thin_ticks(labels: list[str], most: int = 40) -> tuple[list[int], list[str]]:
    """At most ``most`` evenly spread tick positions with their labels."""
    n = len(labels)
    if n <= most:
        return list(range(n)), list(labels)
    step = -(-n // most)
    idx = list(range(0, n, step))
    return idx, [labels[i] for i in idx]
