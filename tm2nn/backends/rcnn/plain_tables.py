"""The tables that let a plain script drive a machine-mode RCNN model (docs/onnx_plain.md).

A model's ``grid`` input is a start grid of B.1.1 cell values, and its ``states`` output
is the grid after every filter step; both are in terms of the *lowered* machine (B.1.2
form: binarise, line -> grid, normal form).  These two tables, written into the input
and output encodings (so into the ONNX metadata, ``.pt`` files and the manifest), say
everything a script needs to go from a source input string to the start grid and from
the grids back to the source machine's run report, with numpy and nothing of tm2nn:

* :func:`start_grid_table` -- the start grid as packed B.1.1 integers: the blank cell,
  each source symbol's block of lowered cells, what the head adds at the start cell, and
  where the input goes.  :func:`fill_start_grids` applies it; it is how
  :func:`.machine_io.start_grids` makes every start grid, so the table is the encoding.
* :func:`decode_table` -- which lowered states end a source step and under which source
  name, which ones mean the source has halted (the normal form's cleanup), the block
  code read backwards, and the step-count convention.

Both are computed from the lowering objects and the cell code, never written by hand.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.rcnn.encoding import (
    COMPUTE,
    HEAD,
    STATE,
    SYMBOL,
    CellCode,
    encode,
    pack,
    to_value,
)
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GridMachine
from tm2nn.passes.binarise import BinaryLowering
from tm2nn.passes.grid_normal_form import NormalFormLowering

#: A B.1.1 digit (−1, 0, +1) as a letter in the tables' keys.
LETTERS = "-0+"


def _letters(digits) -> str:
    return "".join(LETTERS[int(d) + 1] for d in digits)


def _packed(code: CellCode, sym, head=False) -> np.ndarray:
    """Packed B.1.1 values (Goel et al., B.1.1) of one row of compute-phase cells with
    tape digits ``sym``; ``head``: the head on the first, in the start state."""
    sym = np.asarray(sym, dtype=np.int8).reshape(1, 1, -1)
    h = [(0, 0)] if head else [(-1, -1)]
    start = code.states.index(code.start)
    return pack(encode(code, sym, h, [start], COMPUTE))[0, 0]


def start_grid_table(chain, code: CellCode, window, dtype: str = "float32") -> dict:
    """Goel et al., B.1.1 cells of the start grid (issue 5: the input "as after
    memorization", head on the start cell in the start state, compute phase), as a
    table of packed integers ``N = a·3^(D−1)`` (``"scale"`` is ``3^(D−1)``; a value
    is ``N / scale`` in ``dtype``, :func:`.encoding.to_value`):

    ``rows``, ``cols`` (the window, which holds inputs of up to the encoding's
    ``max_input`` symbols), ``origin`` (the start cell's [row, col] in the grid),
    ``blank`` (every cell not written), ``symbols`` (source symbol -> its cells, left to
    right from the origin, one block per input symbol: the binarisation's code word,
    B.1.1 digit 1), ``head`` (added to the origin's value: the head digit, and the start
    state's digits, all 0)."""
    top, left, h, w = (int(x) for x in window)
    blank = int(_packed(code, [0])[0])
    letter = {code.blank: 0, "-": -1, "+": 1}
    symbols = {a: [int(v) for v in _packed(code, [letter[ch] for ch in chain.lower_input(a)])]
               for a in chain.source.alphabet}
    return {"rows": h, "cols": w, "origin": [-top, -left], "scale": 3 ** (code.n_digits - 1), "dtype": dtype,
            "blank": blank, "head": int(_packed(code, [0], head=True)[0]) - blank, "symbols": symbols}


def fill_start_grids(table: dict, texts: list[str], n_digits: int, dtype) -> np.ndarray:
    """``[B, rows, cols]`` start grids from :func:`start_grid_table`'s ``table``: blank
    cells, each input symbol's cells from the origin rightwards, the head added at the
    origin.  The input's symbols must be checked already (:func:`.machine_io.start_grids`)."""
    r0, c0 = table["origin"]
    out = np.full((len(texts), table["rows"], table["cols"]), table["blank"], dtype=np.int64)
    for b, text in enumerate(texts):
        cells = [v for a in text for v in table["symbols"][a]]
        if c0 + len(cells) > table["cols"]:
            raise Tm2nnError(f"input {text!r} needs {len(cells)} grid cells from column {c0}, "
                             f"but the grid has {table['cols']} columns")
        out[b, r0, c0:c0 + len(cells)] = cells
    out[:, r0, c0] += table["head"]
    return to_value(out, n_digits, dtype)


def decode_table(chain, code: CellCode, n_digits: int, tolerance: float) -> dict:
    """How the grids after each filter step give the source machine's run report.

    A grid is read cell by cell: round ``value·3^(D−1)`` (within ``tolerance`` units,
    :func:`.trace_decode.value_tolerance`) to ``digits`` balanced-ternary digits, most
    significant first (B.1.1); ``digit`` says which is the tape letter (1), the head (3)
    and where the head cell's state digits start (4; keys below are those digits as
    letters ``-0+``).

    * ``source_states``: state digits -> source state, for the lowered states that *are*
      a source configuration: binarisation's source states (its ``kind`` "src",
      :meth:`~tm2nn.passes.binarise.BinaryLowering._map` counts a source step at each),
      which the other passes keep.  Source configuration k is the grid of the (k+1)-th
      filter step in such a state (the normal form's preamble comes first).
    * ``halted_states``: the normal form's cleanup and final states (B.1.2, "Halting
      position"): reaching one means the source halted, after its last configuration
      (:meth:`~tm2nn.passes.grid_normal_form.NormalFormLowering._map`).
    * ``block``, ``words``, ``blank_word``: source cell c is the lowered cells
      ``[c·block, c·block + block − 1]`` of the tape row (the origin's), read as a word
      of letters (a ``0`` at offset j, a cell never visited, reads as ``blank_word[j]``).
    * ``halting``, ``missing_rule_counts_step``, ``grid`` (the source is a grid
      machine: its head is [row, col]): the source's conventions (ARCHITECTURE.md)."""
    binary, nf = chain.steps[0], chain.steps[-1]
    if not isinstance(binary, BinaryLowering) or not isinstance(nf, NormalFormLowering):
        raise ValueError("the RCNN form is binarise, [line_to_grid], normal_form")
    names, halted = {}, []
    for q, digits in zip(code.states, code.table):
        key = _letters(digits)
        if q in nf.source.state_index and binary.kind[q][0] == "src":
            names[key] = binary.kind[q][1]
        elif q in nf.cleanup or q in nf.final.values():
            halted.append(key)
    src = chain.source
    digit = {"-": -1, "+": 1}
    words = {_letters(digit[ch] for ch in w): a for a, w in binary.code.items()}
    return {"digits": n_digits, "tolerance": tolerance, "digit": {"symbol": SYMBOL, "head": HEAD, "state": STATE},
            "source_states": names, "halted_states": halted, "block": binary.width,
            "words": words, "blank_word": _letters(digit[ch] for ch in binary.code[src.blank]),
            "blank": src.blank, "halting": dict(src.halting),
            "missing_rule_counts_step": bool(src.missing_rule_counts_step),
            "grid": isinstance(src, GridMachine)}


def description(compiled) -> dict:
    """The manifest's ``decoding`` (the codec's ``describe``): every
    report field reads the ``states`` output's one dimension, the cell value, through the
    decode table (:func:`decode_table`), which the rules name as
    ``encodings.output.decode``."""
    y = compiled.net.outputs[0]
    labels = list(compiled.net.spaces[y].labels)
    t = "encodings.output.decode"
    at = (f"at the report's configuration: source configuration k = the grid of the (k+1)-th filter step whose "
          f"head cell's state digits are a key of {t}.source_states, k = steps")

    def field(rule: str) -> dict:
        return {"value": y, "labels": labels, "rule": rule}

    return {"fields": {
        "state": field(f"{t}.source_states[the head cell's state digits] {at}"),
        "steps": field(f"the number of source configurations after the first, until the head leaves the grid or "
                       f"its state digits are in {t}.halted_states (the normal form's cleanup: the source halted); "
                       f"plus 1 for a halt by a missing rule when {t}.missing_rule_counts_step; at most T = "
                       "encodings.output.source_steps"),
        "halted": field(f"a state in {t}.halted_states was reached; false if steps > T, and at steps = T (not "
                        f"missing_rule_counts_step) only if the state is in {t}.halting"),
        "outcome": field(f"{t}.halting[state] when halted (a missing rule: 'halt'), else null"),
        "head": field(f"(the head's grid column - encodings.input.start_grid.origin[1]) // {t}.block {at}; "
                      f"[0, that] when {t}.grid"),
        "tape": field(f"row encodings.input.start_grid.origin[0] {at}: cells grouped into blocks of {t}.block "
                      f"from the origin, each block's symbol digits as letters -0+ (a 0 at offset j reads as "
                      f"{t}.blank_word[j]) looked up in {t}.words; the span of non-blank ({t}.blank) symbols"),
        "sigma": field("the number of non-blank symbols of the tape above"),
    }, "notes": {
        "cells": f"{y!r} is [batch, L+1, rows, cols]: the grid before and after each filter step.  A cell is "
                 f"round(value * 3^(D-1)) (within {t}.tolerance), D = {t}.digits balanced-ternary digits, most "
                 f"significant first (Goel et al., B.1.1); {t}.digit says which digit is the tape symbol, the head, "
                 "and where the state digits start",
        "start_grid": "the input 'grid' is encodings.input.start_grid: every cell 'blank', the symbols' cells "
                      "from 'origin' rightwards, 'head' added at the origin; value = integer / 'scale' in 'dtype'"}}
