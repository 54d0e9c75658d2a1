"""Space-time diagram: rows are steps, columns are tape cells, colour is the symbol; the
head is outlined and the state written on each row.  The interpreter's run and a compiled
network's decoded run are drawn side by side, and every difference is outlined in red in
the network's panel (the first one is named in the title)."""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.ir import GridMachine
from tm2nn.syntax import load

from .render import SMALL_FONT, check_out, figure, refuse_large, save
from .runs import (
    Config,
    aligned,
    default_steps,
    divergences,
    interpreter_run,
    machine_backend,
    net_run,
)

DIFF = "#d62728"


def _extent(runs: list[list[Config]], text: str) -> tuple[int, int]:
    lo, hi = 0, max(len(text), 1) - 1
    for run in runs:
        for _q, head, cells in run:
            lo, hi = min(lo, head, *cells), max(hi, head, *cells)
    return lo, hi


def _panel(ax, m, run: list[Config], lo: int, hi: int, title: str, diff: dict | None) -> None:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    symbols = list(m.alphabet)
    grid = np.zeros((max(len(run), 1), hi - lo + 1), dtype=int)  # index into symbols
    blank = symbols.index(m.blank)
    grid[:] = blank
    for k, (_q, _h, cells) in enumerate(run):
        for p, a in cells.items():
            grid[k, p - lo] = symbols.index(a)
    base = ["#ffffff", "#1f3b73", "#f2b134", "#4daf4a", "#984ea3", "#a6cee3", "#ff7f00", "#999999"]
    colours = [base[1:][i % (len(base) - 1)] for i in range(len(symbols))]
    colours[blank] = base[0]
    ax.imshow(grid, cmap=ListedColormap(colours), vmin=-0.5, vmax=len(symbols) - 0.5,
              aspect="auto", interpolation="nearest")
    n = len(run)
    ax.scatter([h - lo for _q, h, _c in run], range(n), s=max(6, min(40, 4000 / max(n, 1))), c="black",
               marker="o", zorder=3)
    for k, (q, _head, _cells) in enumerate(run):
        if n <= 60:
            ax.text(hi - lo + 0.8, k, q, va="center", fontsize=SMALL_FONT, clip_on=False)
    for k, d in (diff or {}).items():
        if k >= n:
            continue
        if d["state"] or d["missing"]:
            ax.add_patch(Rectangle((-0.5, k - 0.5), hi - lo + 1, 1, fill=False, lw=2, ec=DIFF))
        if d["head"]:
            ax.add_patch(Rectangle((run[k][1] - lo - 0.5, k - 0.5), 1, 1, fill=False, lw=2.5, ec=DIFF))
        for p in d["cells"]:
            ax.add_patch(Rectangle((p - lo - 0.5, k - 0.5), 1, 1, fill=False, lw=2, ec=DIFF))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("tape cell")
    ax.set_ylabel("step")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    step = max(1, (hi - lo + 1) // 20)
    ticks = list(range(0, hi - lo + 1, step))
    ax.set_xticks(ticks, [str(lo + t) for t in ticks], fontsize=SMALL_FONT)
    from matplotlib.transforms import ScaledTranslation

    # half an inch under the axes whatever their height (an axes fraction drifts on tall runs)
    below = ax.transAxes + ScaledTranslation(0, -0.5, ax.figure.dpi_scale_trans)
    ax.legend(handles=[Patch(fc=colours[i], ec="black", label=repr(a)) for i, a in enumerate(symbols)],
              loc="upper left", bbox_to_anchor=(0, 0), bbox_transform=below, ncol=min(8, len(symbols)), fontsize=SMALL_FONT,
              title="symbol (black dot: head; right: state)", title_fontsize=SMALL_FONT, frameon=False)


def draw_spacetime(m, text: str, want: list[Config], got: list[Config] | None = None,
                   got_label: str = "network"):
    """The figure and the first divergent step (None when the runs agree, or when only
    the interpreter's run is drawn)."""

    if isinstance(m, GridMachine):
        raise Tm2nnError("space-time diagrams are drawn for line machines; a grid machine's tape is 2D "
                         "(see docs/viz.md)")
    runs = [want] + ([got] if got is not None else [])
    refuse_large("steps", max(len(r) for r in runs), "lower the step bound (steps)")
    lo, hi = _extent(runs, text)
    refuse_large("tape cells", hi - lo + 1, "lower the step bound (steps)")
    first, diff = (None, {}) if got is None else divergences(want, got)
    rows = max(len(r) for r in runs)
    fig = figure(width=len(runs) * (3.5 + 0.25 * (hi - lo + 1)), height=2.5 + 0.18 * rows, layout="constrained")
    fig.get_layout_engine().set(wspace=0.1)
    axes = fig.subplots(1, len(runs), squeeze=False)[0]
    _panel(axes[0], m, want, lo, hi, f"interpreter: {m.name}, input {text!r}", None)
    if got is not None:
        _panel(axes[1], m, got, lo, hi, f"{got_label} (decoded)", diff)
    if got is None:
        fig.suptitle(f"{m.name}: {len(want) - 1} steps", fontsize=10)
    elif first is None:
        fig.suptitle(f"{m.name}: the {got_label} run equals the interpreter's at every step 0..{len(want) - 1}",
                     fontsize=10)
    else:
        what = ", ".join(k for k in ("state", "head") if diff[first][k]) or "tape"
        fig.suptitle(f"{m.name}: FIRST DIVERGENCE at step {first} ({what}), outlined in red", fontsize=10,
                     color=DIFF)
    return fig, first


def spacetime_png(source, text: str, out, backend: str | None = "", steps: int | None = None):
    """Load a machine (path or IR), run it in the interpreter and, with ``backend`` (default:
    :func:`~.runs.machine_backend`; None: the interpreter alone), as a compiled network;
    write the space-time diagram to ``out`` (.png or .svg)."""
    out = check_out(out)
    m = load(source) if not hasattr(source, "alphabet") else source
    steps = default_steps(m, text) if steps is None else steps
    want = interpreter_run(m, text, steps)
    backend = machine_backend() if backend == "" else backend
    got = net_run(m, text, steps, backend) if backend else None
    want, got = aligned(m, want, got)  # past halting: the absorbing configuration
    fig, _first = draw_spacetime(m, text, want, got, backend or "network")
    return save(fig, out)
