"""Inputs in, reports out, for the toy step net (:mod:`.build`).

* :func:`encode`: an input string, written from the start cell rightwards, as the start
  configuration ``x_0`` (head on the origin, the start state, the input's cells);
* :func:`decode`: the net's ``[T + 1, width]`` configurations, read group by group as one-hot
  at threshold 1/2, into ``(state, head, cells)`` per step (a group that is not one-hot is
  an error naming the step);
* :func:`run_of`: those configurations as the source machine's run (a
  :class:`~tm2nn.interp.RunResult` with its trace), cut where the interpreter's run ends:
  the first halted configuration (a halting state at step ``k <= T``, or a ``(state,
  symbol)`` without a rule at ``k < T``, counted as one more step for a machine with
  ``missing_rule_counts_step``), else step ``T``;
* :func:`run`, :func:`describe`: the protocol's codec; :func:`configurations`: every row
  decoded (the ``configurations`` analysis).
"""

from __future__ import annotations

import re

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.interrupt import partial_reports
from tm2nn.ir.machine import check_input
from tm2nn.options import OptionError
from tm2nn.passes.lowering import result_from_configurations
from tm2nn.report import Report

#: the most floats a batch's outputs hold at once
BATCH_FLOATS = 1 << 24


class Malformed(Tm2nnError):
    """A row of the net's output that is not a one-hot configuration (``step``: its row)."""

    def __init__(self, step: int, group: str) -> None:
        super().__init__(f"step {step}: the {group} group of the configuration is not one-hot")
        self.step = step


def batch(enc: dict) -> int:
    return max(1, BATCH_FLOATS // ((enc["steps"] + 1) * enc["width"]))


def check_inputs(compiled, texts: list[str]) -> None:
    """Every input is the machine's symbols (the interpreter's check, its message) and fits
    the window: from the origin, at most ``T + 1`` cells."""
    enc = compiled.input_encoding
    for t in texts:
        check_input(compiled.source, t)
        if len(t) > enc["steps"] + 1:
            raise OptionError(f"input {t!r} has {len(t)} cells; the window of a {enc['steps']}-step net holds "
                              f"{enc['steps'] + 1} from the start cell (compile with a larger {{steps}})", "steps")


def encode(compiled, texts: list[str]) -> np.ndarray:
    """The start configurations ``[len(texts), width]``, float32 (module doc)."""
    check_inputs(compiled, texts)
    enc = compiled.input_encoding
    cells, origin, n_states = enc["cells"], enc["origin"], len(enc["states"])
    sym = {a: k for k, a in enumerate(enc["alphabet"])}
    x = np.zeros((len(texts), enc["width"]), np.float32)
    x[:, origin] = 1.0
    x[:, cells + enc["states"].index(enc["start"])] = 1.0
    base = cells + n_states
    blank = sym[enc["blank"]]
    for r, t in enumerate(texts):
        symbols = [blank] * cells
        for k, ch in enumerate(t):
            symbols[origin + k] = sym[ch]
        x[r, base + np.arange(cells) * len(sym) + np.array(symbols)] = 1.0
    return x


def decode(enc: dict, y: np.ndarray) -> list[tuple[str, int, dict]]:
    """Every step's ``(state, head relative to the start cell, non-blank cells)`` of one
    input's output ``y`` ``[T + 1, width]``."""
    cells, origin, states, alphabet = enc["cells"], enc["origin"], enc["states"], enc["alphabet"]
    on = np.asarray(y) > 0.5
    groups = {"head": on[:, :cells], "st": on[:, cells:cells + len(states)],
              "cells": on[:, cells + len(states):].reshape(len(on), cells, len(alphabet))}
    bad = []
    for name, g in groups.items():
        good = (g.sum(-1) == 1).reshape(len(on), -1).all(-1)
        if not good.all():
            bad.append((int(np.flatnonzero(~good)[0]), name))
    if bad:
        raise Malformed(*min(bad))
    heads, st, sym = groups["head"].argmax(-1), groups["st"].argmax(-1), groups["cells"].argmax(-1)
    blank = alphabet.index(enc["blank"])
    out = []
    for k in range(len(on)):
        nb = np.flatnonzero(sym[k] != blank)
        out.append((states[st[k]], int(heads[k]) - origin, {int(i) - origin: alphabet[sym[k, i]] for i in nb}))
    return out


def halted_at(enc: dict, config: tuple[str, int, dict], k: int) -> bool:
    """Whether configuration ``k`` ends the interpreter's run (module doc)."""
    state, head, cells = config
    if state in enc["halting"]:
        return True
    return k < enc["steps"] and [state, cells.get(head, enc["blank"])] in enc["no_rule"]


def run_of(compiled, configs: list[tuple[str, int, dict]], text: str):
    """The run the configurations show, cut where the interpreter's ends (module doc)."""
    enc = compiled.output_encoding
    m = compiled.source
    end, halted = enc["steps"], False
    for k, c in enumerate(configs):
        if halted_at(enc, c, k):
            halted = True
            no_rule = c[0] not in enc["halting"]
            end = k + 1 if no_rule and enc["missing_rule_counts_step"] else k
            break
    end = min(end, len(configs) - 1)  # the rows an interrupted run computed
    return result_from_configurations(m, text, [(k, *configs[k]) for k in range(end + 1)], halted)


def outputs(compiled, texts: list[str], engine: str) -> np.ndarray:
    """The net's ``[len(texts), T + 1, width]`` configurations on ``engine``."""
    x = encode(compiled, texts)
    return np.asarray(compiled.runner(engine)(x, batch_size=batch(compiled.output_encoding)))


def report(compiled, y: np.ndarray, text: str) -> Report:
    return Report.of_run(run_of(compiled, decode(compiled.output_encoding, y), text))


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """One run report each, decoded from every step's configuration (a Ctrl-C reports the
    steps computed so far)."""
    with partial_reports(texts, lambda y, t: report(compiled, y, t)):
        y = outputs(compiled, texts, engine)
    return [report(compiled, row, t) for row, t in zip(y, texts)]


def _group(label: str) -> str:
    """``head``, ``st`` or ``cell`` (``cell3:a`` is in group ``cell``)."""
    return re.sub(r"\d+$", "", label.split(":", 1)[0])


def configurations(compiled, text: str, engine: str = "torch") -> list[tuple[str, int, dict]]:
    """Every step's ``(state, head, non-blank cells)``, rows 0..T, decoded from the net (the
    ``configurations`` analysis: space-time pictures)."""
    return decode(compiled.output_encoding, outputs(compiled, [text], engine)[0])


def describe(compiled) -> dict:
    """How each report field is read from the output's dimensions (a model's manifest)."""
    y = compiled.net.outputs[0]
    labels = list(compiled.net.spaces[y].labels)
    t = "encodings.output"

    def field(rule: str, *groups: str) -> dict:
        return {"value": y, "labels": [lab for lab in labels if _group(lab) in groups], "rule": rule}

    at = "in the report's row r (see 'steps')"
    return {"fields": {
        "halted": field(f"some row k is halted: its state (st) is in {t}.halting (k <= T), or its state and the "
                        f"symbol of the cell under its head are a pair of {t}.no_rule (k < T)", "st", "head", "cell"),
        "steps": field(f"r = the first halted row k (k + 1 for a no_rule pair when {t}.missing_rule_counts_step), "
                       f"else T = {t}.steps", "st", "head", "cell"),
        "state": field(f"the st dimension above 1/2 {at}", "st"),
        "outcome": field(f"{t}.halting[state] when halted ('halt' for a no_rule pair), else null", "st"),
        "head": field(f"i - {t}.origin for the head:p<i> dimension above 1/2 {at}", "head"),
        "tape": field(f"cell i holds the symbol a of its cell<i>:<a> dimension above 1/2 {at}, at position "
                      f"i - {t}.origin; the span from the leftmost to the rightmost non-blank cell", "cell"),
        "sigma": field(f"the number of cells above holding a symbol other than {t}.blank", "cell"),
    }, "notes": {
        "rows": f"{y!r} is [batch, T+1, width]: row k is the configuration after k steps (row 0 the input's, "
                "a Loop's scan); each group (head, st, each cell<i>) is read as one-hot at threshold 1/2, and a "
                "row where one is not is malformed (verify reports its step)",
        "absorbing": "a halted configuration maps to itself, so the rows after the report's row repeat it"}}
