"""Attention: which past decoder step each attention layer attended to at a chosen step,
as the model's backend records it (its ``pictures["attention"]``: the transformer's binary
search, Wei–Chen–Ma App. C)."""

from __future__ import annotations

import numpy as np

from tm2nn import backends
from tm2nn.errors import Tm2nnError

from .render import SMALL_FONT, figure, refuse_large


def attention_weights(compiled, text: str) -> dict[str, list[np.ndarray]]:
    """Op name -> one weight vector ``[1 + n]`` (null first) per decoder step, for every
    attention layer the model's backend shows (its ``pictures["attention"]``)."""
    data = compiled.spec.pictures.get("attention")
    if data is None:
        have = ", ".join(b.name for b in backends.all() if "attention" in b.pictures) or "none"
        raise Tm2nnError(f"attention pictures are for --backend {have}, not {compiled.backend!r}")
    return data(compiled, text)


def draw_attention(compiled, text: str, step: int | None = None):
    """Heatmap: one row per self-attention layer, one column per past decoder step (and
    the null key) at decoder step ``step`` (default: the last); the attended step is
    marked.  Returns the figure and ``{layer: attended step or None (null)}``."""
    w = attention_weights(compiled, text)
    names = list(w)
    n_steps = len(w[names[0]])
    k = n_steps - 1 if step is None else step
    if not 0 <= k < n_steps:
        raise Tm2nnError(f"--step must be in 0..{n_steps - 1} (decoder steps of this model), got {step}")
    rows = np.stack([w[n][k] for n in names])
    refuse_large("past steps", rows.shape[1], "pick an earlier --step")
    fig = figure(width=3 + 0.3 * rows.shape[1], height=1.5 + 0.4 * len(names))
    ax = fig.subplots()
    ax.imshow(rows, cmap="Greys", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    attended = {}
    for r, name in enumerate(names):
        j = int(np.argmax(rows[r]))
        attended[name] = None if j == 0 else j - 1
        ax.plot(j, r, marker="o", ms=5, mfc="none", mec="#d62728")
    labels = ["null"] + [str(i) for i in range(rows.shape[1] - 1)]
    step_t = max(1, len(labels) // 30)
    ax.set_xticks(range(0, len(labels), step_t), labels[::step_t], fontsize=SMALL_FONT)
    ax.set_yticks(range(len(names)), names, fontsize=SMALL_FONT)
    ax.set_xlabel("past decoder step attended to (slot 0: the null key)")
    ax.set_title(f"{compiled.source.name}, input {text!r}: attention at decoder step {k} "
                 "(red: the step each layer attends to)", fontsize=9)
    return fig, attended
