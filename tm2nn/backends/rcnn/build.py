"""Assemble Goel et al.'s RCNN (Definition 5) as a network-IR net.

* the filter ``f_Conv2D(z) = V5 σ(V4 V3 σ(V2 V1 vec(z)))`` as the body of a
  :class:`~tm2nn.nets.PatchMap` with padding p = 1/6 (B.2): five affine maps, ReLU after
  the second and the fourth, each hidden dimension labelled;
* machine mode: the filter applied ``L`` times to an input grid, every state kept
  (a :class:`~tm2nn.nets.Loop` with ``scan``), so every step can be decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.rcnn.bounds import bounds_rows, size_report
from tm2nn.backends.rcnn.filter_net import build_filter
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.nets import Affine, Loop, Net, PatchMap, Port, ReLU, Space, SparseMatrix, patch_space

#: Goel et al., B.2: the padding of the 3x3 windows, outside every B.1.1 cell value.
PAD = 1 / 6
CITE_FILTER = "Goel, Kakade, Kalai & Zhang, Def. 5 and B.2: f_Conv2D = V5 s(V4 V3 s(V2 V1 vec(z))), padding 1/6"
CELL = Space(("cell:value",))
#: What each of Definition 5's five affine maps does in our filter (docs/rcnn.md, "The
#: filter"; :mod:`.filter_net`'s module docstring)
CITE_LAYERS = (
    "Goel, Kakade, Kalai & Zhang, Def. 5 / B.2: V1 copies the cells B.2 reads (centre twice, for the ramps), "
    "shifted by K = 2",
    "Goel, Kakade, Kalai & Zhang, Lemma 5 / B.2: V2, four ReLUs per indicator bump (position, value), one per ramp",
    "Goel, Kakade, Kalai & Zhang, Lemma 5 / B.2: V3, the bumps psi (1 on a value's plateau, else 0) and the ramps",
    "Goel, Kakade, Kalai & Zhang, B.2: V4, one unit per case of B.2 that needs a conjunction of bumps "
    "(and a slope unit where the Jacobian is 1)",
    "Goel, Kakade, Kalai & Zhang, B.2: V5, f(X) = base(x00) + the values of the cases that hold",
)


def filter_body(layers: list[tuple[np.ndarray, np.ndarray]], labels: list[list[str]]) -> Net:
    """The filter net from ``[(V1, b1), ..., (V5, b5)]`` (dense or
    :class:`~tm2nn.nets.SparseMatrix` weights, ``V1`` reads the 9 patch values, ``V5``
    writes the cell) and the labels of the 4 hidden layers."""
    if len(layers) != 5 or len(labels) != 4:
        raise ValueError("Definition 5's filter has five affine maps and four hidden layers")
    spaces = [patch_space()] + [Space(tuple(lab)) for lab in labels] + [CELL]
    ops = []
    prev = "patch"
    for k, (w, b) in enumerate(layers, start=1):
        w = w if isinstance(w, SparseMatrix) else SparseMatrix.from_dense(w)
        if w.shape != (len(spaces[k]), len(spaces[k - 1])):
            raise ValueError(f"V{k} is {w.shape}, expected {(len(spaces[k]), len(spaces[k - 1]))}")
        name = f"V{k}"
        ops.append(Affine(name, (prev,), weight=w, bias=np.asarray(b, dtype=np.float64),
                          out=spaces[k], cite=CITE_LAYERS[k - 1]))
        prev = name
        if k in (2, 4):
            ops.append(ReLU(f"relu{k // 2}", (prev,)))
            prev = f"relu{k // 2}"
    return Net("f_conv2d", (Port("patch", spaces[0]),), tuple(ops), (prev,))


@dataclass(frozen=True)
class Filter:
    """The compiled filter: its net, Definition 5's width ``d_rc`` and the ``info`` rows."""

    body: Net
    width: int
    bounds: list


def body_of(f) -> Net:
    """A built :class:`~.filter_net.FilterNet` as the filter net (its weights and labels)."""
    return filter_body(list(zip(f.sparse, f.biases)), [list(lab) for lab in f.labels[:4]])


def filter_for(g, code) -> Filter:
    """B.2's filter for the machine ``g`` in B.1.2 form (:mod:`.filter_net`), as a net."""
    f = build_filter(machine_table(g))
    return Filter(body_of(f), f.d_rc, bounds_rows(size_report(f)))


def machine_net(body: Net, steps: int, name: str) -> Net:
    """Input grid ``grid`` -> ``states``: the grid before and after each of ``steps``
    applications of the shared filter (one machine step each, B.2's f̄_TM).  The loop may
    stop at a fixed point (``until_fixed``): B.2's filter leaves a halted machine's grid
    unchanged, so the states after it are copies."""
    step = Net("rc_layer", (Port("g", CELL, kind="grid"),),
               (PatchMap("filter", ("g",), body=body, pad=PAD, cite=CITE_FILTER),), ("filter",))
    return Net(name, (Port("grid", CELL, kind="grid"),),
               (Loop("states", ("grid",), body=step, trips=steps, scan=True, until_fixed=True),), ("states",))
