"""What a training run prints (issue 38): one row per epoch, the human lines and the
``--json`` summary."""

from __future__ import annotations

import math


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def margin_text(m) -> str:
    return f"{m:.3g}" if isinstance(m, (int, float)) else str(m)


def epoch_json(row) -> dict:
    return {"epoch": row.epoch, "loss": _num(row.loss), "train_error": _num(row.train_error),
            "test_error": _num(row.test_error), "test_step_error": _num(row.test_step_error),
            "l2": row.l2, "max_abs": row.max_abs, "seconds": round(row.seconds, 3),
            "certified_margin": row.margin if isinstance(row.margin, (int, float)) or row.margin is None
            else str(row.margin)}


def epoch_line(row) -> str:
    return (f"  epoch {row.epoch:>4}: loss {row.loss:.4g}  train error {row.train_error:.4f}  test error "
            f"{row.test_error:.4f}  distance L2 {row.l2:.4g} max {row.max_abs:.3g}  certified margin "
            f"{margin_text(row.margin)}")


def lines(facts: dict, rows: list) -> list[str]:
    out = [f"{facts['source']}: trained the {facts['backend']} construction ({facts['what']}), init "
           f"{facts['init']}, {facts['optimizer']} lr {facts['lr']:g}, {facts['samples']:,} training inputs, "
           f"test: {facts['test_inputs']:,} {facts['test_mode']} inputs, seed {facts['seed']}"]
    out += [epoch_line(r) for r in rows]
    best = facts["best"]
    out.append(f"best weights: epoch {best['epoch']}, test error {best['test_error']} on "
               f"{facts['test_inputs']:,} held-out inputs" +
               (f", {facts['space_error']} over all {facts['space_size']:,} inputs" if facts.get("space_error")
                is not None else ""))
    out.append(f"Lemma 2.3's n for the construction's class (eps {facts['lemma23']['eps']}): "
               f"{facts['lemma23']['n']}" if isinstance(facts["lemma23"], dict) else
               f"Lemma 2.3's n: {facts['lemma23']}")
    if facts["interrupted"]:
        out.append("[yellow]interrupted: the best weights so far are kept[/]")
    return out
