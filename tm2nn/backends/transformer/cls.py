"""θ_cls: the linear readout of the proof of Theorem 4.1 (Wei, Chen & Ma, App. C).

"We can now apply a linear weight vector θ_cls on the output to obtain θ_clsᵀ o_T,
where (θ_cls)_z = 1 for accept states z ∈ Z_term and (θ_cls)_z = −1 for reject
states" — so F(x) = θ_clsᵀ o_T ∈ {−1, +1} on machines that halt within T (Theorem
D.6's F(x) = 2G(x) − 1).  Here (θ_cls)_z = 0 for every other state (a plain ``halt``
state, and states that have not halted), so the value is 0 when the machine halted
without an outcome or has not halted.

Where it lives (``compile(..., cls_readout=True)``).  The network IR has no op that
takes the last element of the decoder's output sequence, so θ_cls is applied inside
the decoder, to every o_i, and written as one more tap column ``cls`` (after ``st``,
``sym1``, ``pos2``, ``sym2``): ``trace[:, T', cls]`` is θ_clsᵀ o_{T'}, the paper's
readout, in the torch module and the ONNX model alike; the ONNX model also has it as
an output ``cls`` (:func:`add_cls_output`).  The prologue carries its own copy of
θ_cls (for o_0's column: both taps must have one width).

T' is the decoder's step count: T for a machine without stay moves, 2T when
:mod:`tm2nn.passes.stay` lowered some (App. C's head moves every step).  Halting is
absorbing (:mod:`.transition`), and the lowering's auxiliary states are never halting,
so the state of o_{T'} is the halting state whenever the lowered machine halted within
T' steps.  For a machine with stays that is a little more than "within T source steps":
a run that halts after more than T source steps but within T' lowered ones has its
outcome in ``cls`` while the run report (bound T) says it has not halted.
:class:`tm2nn.backends.transformer.reference.TraceChecker` compares ``cls`` with the interpreter's run of the lowered
machine for T' steps, which is exactly what θ_clsᵀ o_{T'} computes.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.transformer.layout import Layout
from tm2nn.nets import Affine, Op, Slice, Space, SparseMatrix

CITE_CLS = ("Wei, Chen & Ma, proof of Theorem 4.1: theta_cls^T o_T, (theta_cls)_z = +1 for accept "
            "states, -1 for reject states (0 otherwise)")
#: The label of the readout's one output dimension (and of its tap column).
CLS_LABEL = "cls"
OUTCOME_VALUE = {"accept": 1.0, "reject": -1.0}


def theta_cls(states, halting: dict) -> np.ndarray:
    """(θ_cls)_z for each state z: +1 accept, −1 reject, 0 otherwise."""
    return np.array([OUTCOME_VALUE.get(halting.get(q), 0.0) for q in states])


def cls_readout(lay: Layout, halting: dict, o: str, prefix: str) -> tuple[list[Op], str]:
    """The proof of Theorem 4.1's θ_clsᵀ o on the value ``o``: a Slice of its ``st``
    group and an Affine ``<prefix>.cls`` (one output, label ``cls``, no bias)."""
    theta = theta_cls(lay.states, halting)
    cols = np.flatnonzero(theta)
    W = SparseMatrix((1, len(lay.states)), np.zeros(cols.size, dtype=np.int64), cols, theta[cols])
    st = f"{prefix}.cls.st"
    return [Slice(st, (o,), indices=tuple(int(i) for i in lay.idx("st"))),
            Affine(f"{prefix}.cls", (st,), weight=W, bias=np.zeros(1), out=Space((CLS_LABEL,)),
                   cite=CITE_CLS)], f"{prefix}.cls"


def cls_column(enc: dict) -> int | None:
    """The tap column holding θ_clsᵀ o_i, or None (the option is off)."""
    c = enc.get("cls_column")
    return None if c is None else int(c)


def add_cls_output(model, enc: dict, trace: str = "trace"):
    """The ONNX model's output ``cls`` float32 ``[batch]``: θ_clsᵀ o_{T'}, the last
    step's ``cls`` tap column.  Modifies and returns ``model``."""
    from onnx import TensorProto, helper, numpy_helper

    col = cls_column(enc)
    g = model.graph
    consts = {"cls.last": [-1], "cls.end": [2**62], "cls.col": [col], "cls.col_end": [col + 1],
              "cls.axis1": [1], "cls.axis2": [2], "cls.axes12": [1, 2]}
    for name, v in consts.items():
        g.initializer.append(numpy_helper.from_array(np.array(v, dtype=np.int64), name))
    g.node.append(helper.make_node("Slice", [trace, "cls.last", "cls.end", "cls.axis1"], ["cls/last"],
                                   name="cls/last_step"))
    g.node.append(helper.make_node("Slice", ["cls/last", "cls.col", "cls.col_end", "cls.axis2"], ["cls/column"],
                                   name="cls/column"))
    g.node.append(helper.make_node("Squeeze", ["cls/column", "cls.axes12"], ["cls"], name="cls/squeeze"))
    g.output.append(helper.make_tensor_value_info("cls", TensorProto.FLOAT, ["batch"]))
    return model
