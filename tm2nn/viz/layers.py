"""Circuit layering (Wei–Chen–Ma §3 assume a strictly layered circuit): the gate count per
layer after :func:`tm2nn.passes.layering.layer_circuit`, carried identity gates shown
apart, and for small circuits the layered DAG itself."""

from __future__ import annotations

from tm2nn.passes.layering import layer_circuit

from .render import SMALL_FONT, figure

MAX_DAG_GATES = 60


def draw_layers(circuit):
    """Bar chart of gates per layer; with at most ``MAX_DAG_GATES`` gates also the DAG,
    nodes placed by layer.  Returns the figure and the per-layer gate counts."""

    lc = layer_circuit(circuit)
    real = [sum(1 for g in layer if g.name in circuit.driver) for layer in lc.layers]
    carried = [len(layer) - r for layer, r in zip(lc.layers, real)]
    n_gates = sum(len(layer) for layer in lc.layers)
    dag = n_gates <= MAX_DAG_GATES
    fig = figure(width=6 + (6 if dag else 0), height=4 + 0.1 * max(real + [0]))
    axes = fig.subplots(1, 2 if dag else 1, squeeze=False)[0]
    ax = axes[0]
    xs = list(range(1, lc.depth + 1))
    ax.bar(xs, real, color="#1f3b73", label="gates")
    ax.bar(xs, carried, bottom=real, color="#f2b134", label="carried (identity) gates")
    ax.set_xticks(xs)
    ax.set_xlabel("layer")
    ax.set_ylabel("gates")
    ax.set_title(f"{circuit.name}: {len(circuit.inputs)} inputs, depth {lc.depth}, "
                 f"{sum(real)} gates + {sum(carried)} carried", fontsize=9)
    ax.legend(fontsize=SMALL_FONT)
    if dag:
        _dag(axes[1], lc)
    return fig, [len(layer) for layer in lc.layers]


def _dag(ax, lc) -> None:
    pos = {}
    columns = [[(x, "in") for x in lc.inputs]] + [[(g.name, g.op) for g in layer] for layer in lc.layers]
    for c, col in enumerate(columns):
        for r, (name, _op) in enumerate(col):
            pos[name] = (c, r - (len(col) - 1) / 2)
    for layer in lc.layers:
        for g in layer:
            for i in g.inputs:
                (x0, y0), (x1, y1) = pos[i], pos[g.name]
                ax.plot([x0, x1], [y0, y1], color="0.7", lw=0.7, zorder=1)
    outs = set(lc.outputs)
    for col in columns:
        for name, op in col:
            x, y = pos[name]
            colour = "#a6cee3" if op == "in" else ("#f2b134" if name in outs else "#ffffff")
            ax.scatter([x], [y], s=420, c=colour, edgecolors="black", zorder=2)
            ax.text(x, y, op if op != "in" else name, ha="center", va="center", fontsize=SMALL_FONT, zorder=3)
    ax.set_xticks(range(len(columns)), ["in"] + [str(i) for i in range(1, len(columns))], fontsize=SMALL_FONT)
    ax.set_yticks([])
    ax.set_xlabel("layer")
    ax.set_title("layered DAG (blue: inputs, orange: outputs)", fontsize=9)
