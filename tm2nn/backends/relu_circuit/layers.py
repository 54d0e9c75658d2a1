"""The builders of Wei, Chen & Ma (2022), §3 and App. B, as network-IR ops.

* :func:`gate_rows` — Proposition B.2: one gate as two ReLU layers
  (``AND(x1,x2) = φ(x1+x2-1)``, ``OR(x1,x2) = 1 - φ(1-x1-x2)``, ``NOT(z) = 1 - z``,
  ``ID(z) = z``; constants by a bias alone, our extension).
* :func:`circuit_layer` — Lemma B.1: a whole circuit layer ``G_i`` as
  ``h ↦ φ(W2 φ(W1 h + b1) + b2)`` with ``W2`` diagonal, entries in {-1, 0, 1}.
* :func:`~tm2nn.nets.round.round_correction` — Proposition 3.4: the correction
  ``round(z) = 3φ(z-1/3) - 3φ(z-2/3)`` elementwise, as two feedforward ReLU layers (a
  gadget of the network IR, shared with the transformer).
* :func:`pm_one_map` — proof of Theorem 3.1: the final map ``z ↦ 2z - 1``.
* :func:`build_net` — puts them together (Lemma 3.2, and Lemma 3.3 with corrections).
* :func:`blocks` — reads a built net back as the parameter groups θ_i (f_i), ξ_i (ζ_i)
  of App. D, for the margin analysis.

Labels: ``in:<input>``, ``pre:<signal>`` (first ReLU layer of a gate), ``g:<signal>``
(gate output), ``rlo:<signal>`` / ``rhi:<signal>`` (the correction's two units),
``out:<output>`` (the net output).  Op names: ``L<i>.pre``, ``L<i>.pre.relu``,
``L<i>.gate``, ``L<i>.gate.relu``, ``L<i>.round_a``, ``L<i>.round_a.relu``,
``L<i>.round_b``, ``L<i>.round_b.relu``, ``out.pm1``, and the output ``y``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tm2nn.ir.circuit import OPS
from tm2nn.ir.levels import csr_rows
from tm2nn.nets import Affine, Net, NetIRError, Op, Port, ReLU, Slice, Space, SparseMatrix
from tm2nn.nets.round import round_correction
from tm2nn.passes.layering import LayeredCircuit

CITE_W1 = "Wei, Chen & Ma, Lemma B.1 / Prop. B.2: first layer W1 h + b1"
CITE_W2 = "Wei, Chen & Ma, Lemma B.1 / Prop. B.2: second layer W2 a + b2 (W2 diagonal, entries in {-1,0,1})"
CITE_PM = "Wei, Chen & Ma, proof of Thm 3.1: final map z -> 2z - 1"


def gate_rows(op: str, fanin: int) -> tuple[tuple[float, ...], float, float, float]:
    """Proposition B.2 (and the ID/NOT cases of Lemma B.1's proof): the two-layer ReLU
    block of one gate, as ``(w1 per input, b1, w2, b2)`` so that on binary inputs
    ``gate(x) = φ(w2 · φ(Σ w1_k x_k + b1) + b2)``.

    * ``AND``: ``φ(x1 + x2 - 1)`` — w1 = (1, 1), b1 = -1, w2 = 1, b2 = 0;
    * ``OR``: ``1 - φ(1 - x1 - x2)`` — w1 = (-1, -1), b1 = 1, w2 = -1, b2 = 1;
    * ``NOT``: ``1 - z`` — w1 = -1, b1 = 1, w2 = 1, b2 = 0;
    * ``BUF`` (ID): w1 = 1, b1 = 0, w2 = 1, b2 = 0;
    * ``CONST1``: bias only, b1 = 1, w2 = 1; ``CONST0``: everything 0 (our extension: the
      paper's circuits have no constants; a zero row is Lemma B.1's padding row).

    ``to_basis`` gives AND/OR exactly two inputs; any other fan-in ``k >= 1`` uses the
    same formulas with ``b1 = -(k-1)`` (AND) and ``b1 = 1`` (OR), still exact on {0,1}.
    """
    if op == "AND":
        if fanin < 1:
            raise NetIRError("AND needs at least one input")
        return (1.0,) * fanin, -float(fanin - 1), 1.0, 0.0
    if op == "OR":
        if fanin < 1:
            raise NetIRError("OR needs at least one input")
        return (-1.0,) * fanin, 1.0, -1.0, 1.0
    if op == "NOT" and fanin == 1:
        return (-1.0,), 1.0, 1.0, 0.0
    if op == "BUF" and fanin == 1:
        return (1.0,), 0.0, 1.0, 0.0
    if op == "CONST1" and fanin == 0:
        return (), 1.0, 1.0, 0.0
    if op == "CONST0" and fanin == 0:
        return (), 0.0, 0.0, 0.0
    raise NetIRError(f"the relu-circuit layers take AND/OR/NOT/BUF/CONST0/CONST1 "
                     f"(run passes.basis.to_basis first), got {op} with {fanin} input(s)")


def circuit_layer(k: int, ops: np.ndarray, ptr: np.ndarray, cols: np.ndarray, n_in: int, x: str,
                  pre_space: Space, gate_space: Space) -> list[Op]:
    """Lemma B.1: circuit layer ``k`` as ``h ↦ φ(W2 φ(W1 h + b1) + b2)``: row ``j`` of
    ``W1, b1, W2, b2`` is gate ``j``'s Proposition B.2 block, and ``W2`` is diagonal with
    entries in {-1, 0, 1}.  Gate ``j`` computes ``OPS[ops[j]]`` of the positions
    ``cols[ptr[j]:ptr[j + 1]]`` of the ``n_in``-wide layer before (a
    :class:`~tm2nn.passes.layering.Layer`'s arrays).  Reads value ``x``; returns the ops
    ``L<k>.pre``, ``L<k>.pre.relu`` (labels ``pre_space``), ``L<k>.gate``,
    ``L<k>.gate.relu`` (labels ``gate_space``).  Inputs a gate reads twice get their
    weights summed."""
    n = ops.size
    fan = np.diff(ptr)
    # One gate_rows call per distinct (op, fan-in), in the order they first appear (so an
    # op outside the basis is reported as before); every gate's weights are a table lookup.
    kinds, first, kid = np.unique(ops.astype(np.int64) * (int(fan.max(initial=0)) + 1) + fan,
                                  return_index=True, return_inverse=True)
    table = np.zeros((max(kinds.size, 1), 4))
    for t in np.argsort(first, kind="stable").tolist():
        w1, table[t, 1], table[t, 2], table[t, 3] = gate_rows(OPS[ops[first[t]]], int(fan[first[t]]))
        table[t, 0] = w1[0] if w1 else 0.0  # every input of a gate has the same weight
    kid = kid.reshape(-1)
    rows = np.repeat(np.arange(n, dtype=np.int64), fan)
    vals = table[kid, 0][rows]
    key = rows * max(n_in, 1) + cols
    if _has_repeats(key):  # a gate reads one signal twice: sum its weights
        uk, inv = np.unique(key, return_inverse=True)
        vals = np.bincount(inv, weights=vals)
        rows, cols = uk // max(n_in, 1), uk % max(n_in, 1)
    W1 = SparseMatrix((n, n_in), rows, cols, vals)
    b1, w2, b2 = table[kid, 1], table[kid, 2], table[kid, 3]
    p = f"L{k}"
    return [
        Affine(f"{p}.pre", (x,), weight=W1, bias=b1, out=pre_space, cite=CITE_W1),
        ReLU(f"{p}.pre.relu", (f"{p}.pre",)),
        Affine(f"{p}.gate", (f"{p}.pre.relu",), weight=SparseMatrix.diagonal(w2), bias=b2,
               out=gate_space, cite=CITE_W2),
        ReLU(f"{p}.gate.relu", (f"{p}.gate",)),
    ]


def _has_repeats(a: np.ndarray) -> bool:
    s = np.sort(a)
    return bool(np.any(s[1:] == s[:-1]))


def pm_one_map(x: str, n: int, out_labels: list[str]) -> Affine:
    """Proof of Theorem 3.1: the last linear layer ``z ↦ 2z - 1`` (0/1 -> ±1)."""
    return Affine("out.pm1", (x,), weight=SparseMatrix.diagonal(np.full(n, 2.0)),
                  bias=np.full(n, -1.0), out=Space(tuple(out_labels)), cite=CITE_PM)


def _unique(labels: list[str]) -> list[str]:
    """Make repeated labels unique by appending ``#2``, ``#3``, ... (repeated outputs)."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        k = seen.get(lab, 0) + 1
        seen[lab] = k
        out.append(lab if k == 1 else f"{lab}#{k}")
    if len(set(out)) != len(out):  # a "#k" collided with a real name: fall back to indices
        out = [f"{lab}#{j}" for j, lab in enumerate(labels)]
    return out


def build_net(lc: LayeredCircuit, *, corrections: bool = True, pm_one_output: bool = False,
              name: str | None = None, output_names: tuple[str, ...] | None = None) -> Net:
    """Lemma 3.2 (and Lemma 3.3 when ``corrections``): one Lemma B.1 block per circuit
    layer, a Proposition 3.4 correction after every layer but the last, and optionally
    the final ``2z - 1``.  The last layer's units are the outputs in declared order (a
    repeated output gets its own unit), so no slice is needed; the output value ``y``
    is an identity :class:`Slice` of the last op, so the net's output is called ``y``."""
    outs = tuple(output_names) if output_names is not None else tuple(lc.outputs)
    in_space = Space.named("in", lc.inputs)
    nodes: list[Op] = []
    cur, space, n_prev = "x", in_space, len(lc.inputs)
    q = lc.depth
    out_labels = _unique([f"out:{o}" for o in outs])
    for k, layer in enumerate(lc.arrays, start=1):
        if k < q:  # labels made from the layer's (distinct) names when first read
            names, ops, ptr, cols = tuple(layer.names), layer.ops, layer.ptr, layer.cols
            pre, gl = Space.prefixed(("pre:",), names), Space.prefixed(("g:",), names)
        else:  # the last layer: one unit per output position, in declared order
            units = lc.output_units
            names = [layer.names[j] for j in units.tolist()]
            ops, fan = layer.ops[units], layer.fan[units]
            ptr = np.concatenate([[0], np.cumsum(fan)])
            cols = layer.cols[csr_rows(layer.ptr, units)]
            pre = Space.of_distinct(_unique([f"pre:{s}" for s in names]))
            gl = Space.of_distinct(_unique([f"g:{s}" for s in names]) if pm_one_output else out_labels)
        block = circuit_layer(k, ops, ptr, cols, n_prev, cur, pre, gl)
        nodes += block
        cur, space, n_prev = block[-1].name, block[-2].out, len(names)
        if corrections and k < q:
            block = round_correction(k, cur, space, signals=names)
            nodes += block
            cur = block[-1].name
    if q and pm_one_output:
        op = pm_one_map(cur, len(space), out_labels)
        nodes.append(op)
        cur, space = op.name, op.out
    nodes.append(Slice("y", (cur,), indices=tuple(range(len(space))) if outs else ()))
    meta = {
        "backend": "relu-circuit",
        "construction": "Wei, Chen & Ma 2022, Lemma 3.2 / B.1 / Prop. B.2"
                        + (" + Prop. 3.4 corrections (Lemma 3.3)" if corrections else ""),
        "circuit_layers": str(q),
        "corrections": str(bool(corrections)).lower(),
        "output_values": "pm1" if pm_one_output else "01",
    }
    return Net(name or lc.source.name, (Port("x", in_space),), tuple(nodes), ("y",), meta)


# -- reading a built net back as App. D's parameter groups -----------------------------------
@dataclass(frozen=True)
class Block:
    """One parameter group of Theorem D.6: ``kind`` is ``"f"`` (θ_i: W1, b1, W2, b2 of
    circuit layer ``layer``), ``"round"`` (ξ_i: the correction after layer ``layer``) or
    ``"out"`` (the final 2z - 1).  ``affines`` are in forward order; each is followed by a
    ReLU except ``out.pm1``."""

    kind: str
    layer: int
    affines: tuple[Affine, ...]

    @property
    def name(self) -> str:
        return {"f": f"f{self.layer}", "round": f"zeta{self.layer}", "out": "out"}[self.kind]


_OP = re.compile(r"^L(\d+)\.(pre|gate|round_a|round_b)$")


def blocks(net: Net) -> list[Block]:
    """The parameter groups of a relu-circuit net, in forward order (see :class:`Block`)."""
    groups: dict[tuple[str, int], list[Affine]] = {}
    order: list[tuple[str, int]] = []
    for op in net.nodes:
        if not isinstance(op, Affine):
            continue
        if op.name == "out.pm1":
            key = ("out", 0)
        else:
            m = _OP.match(op.name)
            if m is None:
                raise NetIRError(f"{op.name!r} is not an op of the relu-circuit construction")
            key = ("f" if m.group(2) in ("pre", "gate") else "round", int(m.group(1)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(op)
    return [Block(kind, layer, tuple(groups[(kind, layer)])) for kind, layer in order]
