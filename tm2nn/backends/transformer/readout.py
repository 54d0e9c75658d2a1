"""The decoded run as ONNX outputs: the final configuration and the halted flag
computed inside the model from the per-step taps, so a user needs no tm2nn code to read
the answer (issue 4: "input tape in, decoded final configuration and halted flag out").

It computes what :class:`~tm2nn.backends.transformer.decoding.TraceDecoder` computes,
vectorised over steps (a test checks the two agree); everything is read off the taps of
Wei, Chen & Ma's o_i (state, symbol read, head position) and the written symbol:

* ``state`` int64 ``[B]``: index into ``layout.states`` (the source machine's states
  come first; a reported state is never a stay-lowering auxiliary one);
* ``halted`` bool ``[B]``, ``steps`` int64 ``[B]`` (source steps, ARCHITECTURE.md's
  conventions), ``head`` int64 ``[B]`` (relative to the start cell);
* ``final_tape`` int64 ``[B, 2·offset + 1]``: symbol ids (``layout.alphabet``) of cells
  ``-offset .. offset``, every cell a run of T steps can reach.

The configuration is the one at the first halting step, or after the last source step.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tm2nn.backends.transformer.layout import Layout

OUTPUTS = ("state", "halted", "steps", "head", "final_tape")


class _Graph:
    """Nodes and initializers appended to a graph, under the ``readout/`` prefix."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.g = graph
        self.n = 0
        self.consts: dict[str, np.ndarray] = {}

    def const(self, name: str, value) -> str:
        full = f"readout.{name}"
        value = np.asarray(value)
        if full in self.consts:  # one initializer per name (and the same value)
            assert np.array_equal(self.consts[full], value) and self.consts[full].dtype == value.dtype, name
            return full
        self.consts[full] = value
        self.g.initializer.append(numpy_helper.from_array(value, full))
        return full

    def node(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self.n += 1
        out = out or f"readout/{self.n}.{op.lower()}"
        self.g.node.append(helper.make_node(op, inputs, [out], name=f"readout/{self.n}.{op}", **attrs))
        return out


def add_readout(model: onnx.ModelProto, enc: dict, trace: str = "trace", tokens: str = "tape") -> onnx.ModelProto:
    """Append the readout of ``enc`` (a ``transformer_trace`` output encoding) to
    ``model``, whose output ``trace`` is ``[B, S+1, tap_w]`` and input ``tokens`` the
    tape's token ids.  Modifies and returns ``model``."""
    lay = Layout.from_json(enc["layout"])
    aux = {a for a, _t in enc.get("lowering", {}).get("aux", [])}
    halting = dict(enc["halting"])
    no_rule = {(q, a) for q, a in enc["no_rule"]}
    k_max = int(enc["source_steps"])
    n_sym = len(lay.alphabet)
    n_cells = 2 * lay.offset + 1
    ti = lay.tap_indices
    g = _Graph(model.graph)
    i64 = lambda name, v: g.const(name, np.array(v, dtype=np.int64))  # noqa: E731

    def group(name: str) -> str:
        sl = ti[name]
        return g.node("Slice", [trace, i64(f"{name}.start", [sl.start]), i64(f"{name}.end", [sl.stop]),
                                i64(f"{name}.axis", [2])])

    def argmax(x: str) -> str:
        return g.node("ArgMax", [x], axis=2, keepdims=0)                                  # [B, S+1]

    def at(x: str, idx: str) -> str:  # x[b, idx[b]] for x [B, S+1], idx [B]
        col = g.node("Unsqueeze", [idx, i64("axis1", [1])])
        return g.node("Squeeze", [g.node("GatherElements", [x, col], axis=1), i64("axis1", [1])])

    one_i = i64("one", 1)
    st, sym, wr = argmax(group("st")), argmax(group("sym1")), argmax(group("sym2"))
    bits = g.node("Cast", [g.node("Greater", [group("pos2"), g.const("half", np.float32(0.5))])], to=TensorProto.FLOAT)
    weights = np.array([1 << k for k in lay.bits_msb_first], dtype=np.float32)
    loc = g.node("Cast", [g.node("MatMul", [bits, g.const("bit_weights", weights)])], to=TensorProto.INT64)

    # Source steps: lowered step 0 and every step that does not end in an auxiliary state.
    not_aux = np.array([0 if q in aux else 1 for q in lay.states], dtype=np.int64)
    keep = g.node("Gather", [i64("not_aux", not_aux), st])                               # [B, S+1]
    shape = g.node("Shape", [keep])
    first_col = g.node("Slice", [keep, i64("zero1", [0]), i64("one1", [1]), i64("axis1", [1])])
    keep = g.node("Concat", [g.node("Max", [first_col, g.node("Sub", [one_i, first_col])]),
                             g.node("Slice", [keep, i64("one1", [1]), i64("end", [2**62]), i64("axis1", [1])])],
                  axis=1)                                                                  # keep[:, 0] = 1
    src = g.node("Sub", [g.node("CumSum", [keep, i64("axis0d", 1)]), one_i])              # source step of i
    valid = g.node("Mul", [keep, g.node("Cast", [g.node("LessOrEqual", [src, i64("k_max", k_max)])],
                                        to=TensorProto.INT64)])
    n_steps = g.node("Gather", [shape, i64("one_s", 1)])
    index = g.node("Range", [i64("zero_s", 0), n_steps, one_i])                           # [S+1]
    last = g.node("ArgMax", [g.node("Mul", [valid, g.node("Add", [index, one_i])])], axis=1, keepdims=0)

    # The first kept step in a halting configuration (a halting state, or no rule).
    table = np.zeros(len(lay.states) * n_sym, dtype=np.int64)
    for qi, q in enumerate(lay.states):
        for ai, a in enumerate(lay.alphabet):
            table[qi * n_sym + ai] = int(q in halting or (q, a) in no_rule)
    cfg = g.node("Add", [g.node("Mul", [st, i64("n_sym", n_sym)]), sym])
    stops = g.node("Mul", [g.node("Gather", [i64("halting", table), cfg]), valid])
    first = g.node("ArgMax", [stops], axis=1, keepdims=0)                                # first max
    any_stop = g.node("ReduceMax", [stops, i64("axis1", [1])], keepdims=0)               # [B] 0/1
    row = g.node("Where", [g.node("Cast", [any_stop], to=TensorProto.BOOL), first, last])
    state = g.node("Identity", [at(st, row)], out="state")
    missing = np.array([0 if q in halting else 1 for q in lay.states], dtype=np.int64)
    extra = g.node("Mul", [any_stop, g.node("Gather", [i64("missing", missing), state])])
    if not enc.get("missing_rule_counts_step", False):
        extra = g.node("Mul", [extra, i64("zero_s", 0)])
    steps = g.node("Add", [at(src, row), extra])
    halted_b = g.node("And", [g.node("Cast", [any_stop], to=TensorProto.BOOL),
                              g.node("LessOrEqual", [steps, i64("k_max", k_max)])])
    g.node("Identity", [halted_b], out="halted")
    g.node("Min", [steps, i64("k_max", k_max)], out="steps")
    g.node("Sub", [at(loc, row), i64("offset", lay.offset)], out="head")

    # The tape: the input (cells 0..L-1 at offset..), overlaid with the last write to each
    # cell among decoder steps 1..last (step i writes wr[i] at loc[i-1]).
    toks = g.node("Slice", [tokens, i64("zero1", [0]), i64("max_len", [lay.offset + 1]), i64("axis1", [1])])
    length = g.node("Gather", [g.node("Shape", [toks]), i64("one1", [1])])
    right = g.node("Sub", [i64("cells_after", [n_cells - lay.offset]), length])
    pads = g.node("Concat", [i64("pads_left", [0, lay.offset, 0]), right], axis=0)
    blank = lay.alphabet.index(lay.blank)
    start = g.node("Pad", [toks, pads, i64("blank", blank)], mode="constant")           # [B, n_cells]
    writer = g.node("Slice", [index, i64("one1", [1]), i64("end", [2**62]), i64("axis0", [0])])   # 1..S
    live = g.node("LessOrEqual", [g.node("Unsqueeze", [writer, i64("axis0", [0])]),
                                  g.node("Unsqueeze", [last, i64("axis1", [1])])])        # [B, S]
    stamp = g.node("Where", [live, writer, i64("zero_s", 0)])
    where = g.node("Slice", [loc, i64("zero1", [0]), i64("minus1", [-1]), i64("axis1", [1])])  # loc[0..S-1]
    zeros = g.node("Mul", [start, i64("zero_s", 0)])
    last_write = g.node("ScatterElements", [zeros, where, stamp], axis=1, reduction="max")
    written = g.node("GatherElements", [wr, last_write], axis=1)
    g.node("Where", [g.node("Greater", [last_write, i64("zero_s", 0)]), written, start], out="final_tape")

    b = "batch"
    model.graph.output.extend([
        helper.make_tensor_value_info("state", TensorProto.INT64, [b]),
        helper.make_tensor_value_info("halted", TensorProto.BOOL, [b]),
        helper.make_tensor_value_info("steps", TensorProto.INT64, [b]),
        helper.make_tensor_value_info("head", TensorProto.INT64, [b]),
        helper.make_tensor_value_info("final_tape", TensorProto.INT64, [b, n_cells]),
    ])
    return model
