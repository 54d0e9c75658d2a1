"""The ONNX emitters of the readouts (:mod:`tm2nn.nets.ops`), one table entry each
(:func:`~tm2nn.emit.onnx_graph.onnx_emitter`).  A readout is emitted after the network's
graph outputs and reads them batch-major (:func:`tm2nn.emit.onnx_model.to_onnx`).

``RunReadout`` (Wei, Chen & Ma §4.1 / App. C: the run read off the taps): the ops of one
run (the same taps, tokens and tables) share one set of nodes, named ``readout/<n>.<Op>``
with initializers ``readout.<name>``, emitted up to the field each op asks for, in the
order state, halted, steps, head, final_tape:

* each group of tap columns is a ``Slice`` on axis 2 (``readout.<group>.start`` ..; a
  ``Gather`` of ``readout.<group>.columns`` where the columns are not a range), and its id
  an ``ArgMax``; the head's position is ``Cast(Greater(pos2, 1/2)) · readout.bit_weights``;
* ``readout.not_aux`` (``source_step``) gathered per row marks the source steps (row 0
  always), whose ``CumSum`` counts them; the rows of source step ``<= readout.k_max`` are
  valid, and the last valid one is an ``ArgMax`` of ``valid · (index + 1)``;
* ``readout.halting`` (``halts``, per state and symbol) marks the halting rows, the first
  of them an ``ArgMax``; the report row is the first halting row, else the last valid
  one, and each field is gathered there (``GatherElements``);
* the final tape pads the tokens with the blank to cells ``-offset .. offset`` and
  overwrites each cell with the symbol of the last step ``<= row`` that wrote it
  (``ScatterElements`` with ``max`` of the step numbers, then ``GatherElements``).

``Pick`` ``X``: two ``Slice`` nodes (the step on axis 1, the index on axis 2) and a
``Squeeze`` (initializers ``X.last`` (or ``X.step``), ``X.end``, ``X.col``, ``X.col_end``,
``X.axis1``, ``X.axis2``, ``X.axes12``).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tm2nn.emit.onnx_graph import _DecodeCtx, _Emitter, onnx_emitter
from tm2nn.nets import Pick, RunReadout

#: the order the fields of one run are emitted in (each needs the ones before it)
_STAGES = ("state", "halted", "steps", "head", "final_tape")
_END = 2**62  # a Slice's open end


def _spec(op: RunReadout) -> tuple:
    """What makes two run readouts read the same run (all but the field)."""
    return (op.st, op.sym1, op.sym2, op.pos2, op.bit_values, op.source_step, op.halts, op.halting,
            op.missing_rule_counts_step, op.max_steps, op.offset, op.blank)


class _RunGraph:
    """The nodes of one run's readout, shared by its ops (the module doc), appended to the
    list ``out`` stage by stage as the ops ask for their fields."""

    def __init__(self, em: _Emitter, out: list, op: RunReadout, taps: str, tokens: str, prefix: str) -> None:
        self.em, self.out, self.op = em, out, op
        self.taps, self.tokens, self.prefix = taps, tokens, prefix
        self.n = 0
        self.consts: dict[str, tuple[np.ndarray, str]] = {}
        self.v: dict[str, str] = {}  # the values of the stages emitted so far
        self.done = 0

    def const(self, name: str, value) -> str:
        """One initializer ``<prefix>.<name>`` per name (and value)."""
        value = np.asarray(value)
        if name in self.consts:
            old, made = self.consts[name]
            assert old.dtype == value.dtype and np.array_equal(old, value), name
            return made
        made = self.em.init(f"{self.prefix}.{name}", value)
        self.consts[name] = (value, made)
        return made

    def i64(self, name: str, value) -> str:
        return self.const(name, np.array(value, dtype=np.int64))

    def node(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self.n += 1
        out = out or self.em.values.fresh(f"{self.prefix}/{self.n}.{op_type.lower()}")
        name = self.em.nodes.fresh(f"{self.prefix}/{self.n}.{op_type}")
        self.out.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def value(self, field: str, final: str) -> None:
        """Emit the stages up to ``field``'s, its value written to ``final``."""
        k = _STAGES.index(field)
        if k < self.done:  # emitted for an earlier op already
            self.node("Identity", [self.v[field]], out=final)
            return
        stages = (self._state, self._halted, self._steps, self._head, self._final_tape)
        while self.done <= k:
            self.v[_STAGES[self.done]] = stages[self.done](final if self.done == k else None)
            self.done += 1

    # -- the stages, each after the ones before it ---------------------------------------
    def _group(self, name: str) -> str:
        cols = getattr(self.op, name)
        if cols == tuple(range(cols[0], cols[0] + len(cols))):
            return self.node("Slice", [self.taps, self.i64(f"{name}.start", [cols[0]]),
                                       self.i64(f"{name}.end", [cols[0] + len(cols)]), self.i64(f"{name}.axis", [2])])
        return self.node("Gather", [self.taps, self.i64(f"{name}.columns", cols)], axis=2)

    def _argmax(self, x: str) -> str:
        return self.node("ArgMax", [x], axis=2, keepdims=0)                        # [B, S+1]

    def _at(self, x: str, idx: str) -> str:
        """``x[b, idx[b]]`` for ``x`` ``[B, S+1]``, ``idx`` ``[B]``."""
        col = self.node("Unsqueeze", [idx, self.i64("axis1", [1])])
        return self.node("Squeeze", [self.node("GatherElements", [x, col], axis=1), self.i64("axis1", [1])])

    def _state(self, final: str | None) -> str:
        op, em, i64, node, v = self.op, self.em, self.i64, self.node, self.v
        v["one"] = one = i64("one", 1)
        v["st"], v["sym"], v["wr"] = (self._argmax(self._group("st")), self._argmax(self._group("sym1")),
                                      self._argmax(self._group("sym2")))
        bits = node("Cast", [node("Greater", [self._group("pos2"), self.const("half", em.scalar(0.5))])], to=em.elem)
        v["loc"] = node("Cast", [node("MatMul", [bits, self.const("bit_weights", em.floats(op.bit_values))])],
                        to=TensorProto.INT64)
        # the source steps: step 0 and every step that does not end in an auxiliary state
        keep = node("Gather", [i64("not_aux", op.source_step), v["st"]])                      # [B, S+1]
        shape = node("Shape", [keep])
        first_col = node("Slice", [keep, i64("zero1", [0]), i64("one1", [1]), i64("axis1", [1])])
        keep = node("Concat", [node("Max", [first_col, node("Sub", [one, first_col])]),
                               node("Slice", [keep, i64("one1", [1]), i64("end", [_END]), i64("axis1", [1])])],
                    axis=1)                                                                   # keep[:, 0] = 1
        v["src"] = node("Sub", [node("CumSum", [keep, i64("axis0d", 1)]), one])              # source step of i
        valid = node("Mul", [keep, node("Cast", [node("LessOrEqual", [v["src"], i64("k_max", op.max_steps)])],
                                        to=TensorProto.INT64)])
        n_steps = node("Gather", [shape, i64("one_s", 1)])
        v["index"] = node("Range", [i64("zero_s", 0), n_steps, one])                         # [S+1]
        v["last"] = node("ArgMax", [node("Mul", [valid, node("Add", [v["index"], one])])], axis=1, keepdims=0)
        # the first kept step in a halting configuration (a halting state, or no rule)
        cfg = node("Add", [node("Mul", [v["st"], i64("n_sym", len(op.sym1))]), v["sym"]])
        stops = node("Mul", [node("Gather", [i64("halting", op.halts), cfg]), valid])
        first = node("ArgMax", [stops], axis=1, keepdims=0)                                  # first max
        axis1 = i64("axis1", [1])
        v["any_stop"] = (node("ReduceMax", [stops, axis1], keepdims=0) if em.opset >= 18 else
                         node("ReduceMax", [stops], axes=[1], keepdims=0))                  # [B] 0/1
        v["row"] = node("Where", [node("Cast", [v["any_stop"]], to=TensorProto.BOOL), first, v["last"]])
        return node("Identity", [self._at(v["st"], v["row"])], out=final)

    def _halted(self, final: str | None) -> str:
        op, i64, node, v = self.op, self.i64, self.node, self.v
        missing = np.array([1 - h for h in op.halting], dtype=np.int64)  # a halt by a missing rule
        extra = node("Mul", [v["any_stop"], node("Gather", [i64("missing", missing), v["state"]])])
        if not op.missing_rule_counts_step:
            extra = node("Mul", [extra, i64("zero_s", 0)])
        v["steps_all"] = node("Add", [self._at(v["src"], v["row"]), extra])
        halted = node("And", [node("Cast", [v["any_stop"]], to=TensorProto.BOOL),
                              node("LessOrEqual", [v["steps_all"], i64("k_max", op.max_steps)])])
        return node("Identity", [halted], out=final)

    def _steps(self, final: str | None) -> str:
        return self.node("Min", [self.v["steps_all"], self.i64("k_max", self.op.max_steps)], out=final)

    def _head(self, final: str | None) -> str:
        return self.node("Sub", [self._at(self.v["loc"], self.v["row"]), self.i64("offset", self.op.offset)],
                         out=final)

    def _final_tape(self, final: str | None) -> str:
        """The input (cells 0..L-1 at offset..), overwritten by the last write to each cell
        among decoder steps 1..last (step i writes wr[i] at loc[i-1])."""
        op, i64, node, v = self.op, self.i64, self.node, self.v
        toks = node("Slice", [self.tokens, i64("zero1", [0]), i64("max_len", [op.offset + 1]), i64("axis1", [1])])
        length = node("Gather", [node("Shape", [toks]), i64("one1", [1])])
        right = node("Sub", [i64("cells_after", [op.cells - op.offset]), length])
        pads = node("Concat", [i64("pads_left", [0, op.offset, 0]), right], axis=0)
        start = node("Pad", [toks, pads, i64("blank", op.blank)], mode="constant")         # [B, cells]
        writer = node("Slice", [v["index"], i64("one1", [1]), i64("end", [_END]), i64("axis0", [0])])  # 1..S
        live = node("LessOrEqual", [node("Unsqueeze", [writer, i64("axis0", [0])]),
                                    node("Unsqueeze", [v["last"], i64("axis1", [1])])])          # [B, S]
        stamp = node("Where", [live, writer, i64("zero_s", 0)])
        where = node("Slice", [v["loc"], i64("zero1", [0]), i64("minus1", [-1]), i64("axis1", [1])])  # loc[0..S-1]
        zeros = node("Mul", [start, i64("zero_s", 0)])
        last_write = node("ScatterElements", [zeros, where, stamp], axis=1, reduction="max")
        written = node("GatherElements", [v["wr"], last_write], axis=1)
        return node("Where", [node("Greater", [last_write, i64("zero_s", 0)]), written, start], out=final)


def _run_readout_bytes(op: RunReadout, batch: int) -> int:
    return 8 * (len(op.halts) + 2 * len(op.source_step)) + 4 * len(op.bit_values) + 8 * 64  # + the small constants


@onnx_emitter(RunReadout, weight_bytes=_run_readout_bytes)
def emit_run_readout(em: _Emitter, op: RunReadout, out: list, ins: list[str], base: str, final: str,
                     ctx: _DecodeCtx | None) -> None:
    key = ("run_readout", *ins, _spec(op))
    run = em.shared.get(key)
    if run is None:
        runs = sum(1 for k in em.shared if k[0] == "run_readout")
        run = em.shared[key] = _RunGraph(em, out, op, ins[0], ins[1], "readout" + (f"{runs + 1}" if runs else ""))
    run.value(op.field, final)


@onnx_emitter(Pick, weight_bytes=lambda op, batch: 7 * 16)
def emit_pick(em: _Emitter, op: Pick, out: list, ins: list[str], base: str, final: str,
              ctx: _DecodeCtx | None) -> None:
    tag = "last" if op.step == -1 else "step"
    c = {name: em.init(f"{base}.{name}", np.array(v, dtype=np.int64)) for name, v in (
        (tag, [op.step]), ("end", [_END if op.step == -1 else op.step + 1]), ("col", [op.index]),
        ("col_end", [op.index + 1]), ("axis1", [1]), ("axis2", [2]), ("axes12", [1, 2]))}
    row = em.values.fresh(f"{base}/{tag}")
    column = em.values.fresh(f"{base}/column")
    out.append(helper.make_node("Slice", [ins[0], c[tag], c["end"], c["axis1"]], [row],
                                name=em.nodes.fresh(f"{base}/{tag}_step")))
    out.append(helper.make_node("Slice", [row, c["col"], c["col_end"], c["axis2"]], [column],
                                name=em.nodes.fresh(f"{base}/column")))
    out.append(helper.make_node("Squeeze", [column, c["axes12"]], [final], name=em.nodes.fresh(f"{base}/squeeze")))
