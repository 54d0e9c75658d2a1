"""G_n (Abbe & Sandon §4.1, Lemma 3) with the float64 dyadic gadgets as a network-IR net.

The graph is Lemma 3's, built by :func:`.net.build_net` (same vertices, edges, parts and
r circuit); what changes is the **float64 parametrisation** of docs/abbe_sandon.md
("float64 parametrisation", :mod:`.float64`).  Every departure from §4.1, named:

1. **activation** ``fpl`` (:func:`.float64.fpl`, the IR's ``Activation("abbe_sandon_fpl")``)
   instead of f: x on the working range, a dead zone around 0, ±2 beyond 3/2;
2. **M_s weights** :func:`.float64.ms_fpl_gadget`: path edges ±s, control edges -s**4,
   ``s = 2**-k`` with ``k`` from :meth:`.float64.Dyadic.for_m` (not Lemma 3's irrational s);
3. **m' = 2**(6k-1)** (32 at k = 1, 2048 at k = 2) instead of ~1.3e79, so the always-active
   extraneous copies are **real copies** ``ext[m+1] .. ext[m']`` (no multiplicity;
   :mod:`.net` departure 1 does not apply);
4. **memory read** v1 outputs ``±2s`` (not ±s'), so a read edge gets weight ``(-1/s) w``
   (instead of ``(-2/s') w``);
5. **learning rate** ``gamma = 2**(4k-2)`` (:attr:`.float64.Dyadic.gamma`; the loss is the
   exact engine's ``(y_out - label)**2``).

Departures 2-4 of :mod:`.net` (gate lowering, reading the encodings, initial memory,
the unread h unit) carry over unchanged.

Layering (ours: the IR is a sequence of layers, G_n a DAG with long edges)
---------------------------------------------------------------------------
The input port ``z`` is Theorem 4's ±1 vector ``(2x - 1, 2r - 1, 2r' - 1)``, labelled
``in:<port>``.  A vertex's *depth* is its layer: the output's is its longest path from the
inputs (edges from the constant vertex are biases, so ``const`` is no dimension), every
other vertex is placed as late as its readers allow (fewest carries).  Layer ``d`` computes every
vertex of depth ``d`` and **carries** every earlier vertex that a later layer reads
(a skip unit: weight 1 from its previous-layer copy, bias 0 -- not in G_n).  Carried
values are fixed points of ``fpl`` (±1 inputs, ±2 gates, 0/2 controls, ±2s**t path
values on the identity piece, where fpl' = 1), so a carry changes no value and
passes gradients unchanged.  Each layer is::

    L{d}.carry = Affine(L{d-1}; the carries)                        fixed (not G_n edges)
    L{d}.gates = Affine(L{d-1}; gate/read/control edges, const biases)  trainable
    L{d}.const = Param(the const edge of each unit reading nothing else: v0, CONST0/1)
    L{d}.train = Affine(L{d-1}; the M_s edges into gadget vertices)  trainable, no bias
    L{d}.z     = Concat(L{d}.carry, L{d}.gates, L{d}.const, L{d}.train)   (those present)
    L{d}       = Activation(L{d}.z, fn="abbe_sandon_fpl")

Every dimension is labelled with :mod:`.net`'s vertex name (``mem[0].v3'``, ``gate:r12``,
``out``).  Every edge of G_n is a trainable weight, as in the paper, where SGD runs on all
of them.  The ``.train`` affines (``train_bias=False``) hold the M_s edges: SGD flips them
(Lemma 2).  The ``.gates`` affines (``train_bias=True``) and ``.const`` params hold every
other edge of G_n (a ``Param`` for the units whose only in-edge is from the constant vertex,
since a trainable affine without stored entries would train absent edges): they are
**frozen by the construction, not by the IR** -- each of their units has input |z| >= 2
(a gate, a read: Lemma 1) or 0 / 2 (vc, vc', v0 = f(2)), where fpl' = 0, so SGD's gradient is
exactly 0 (:meth:`IRNet.frozen_ops`; ``tests/backends/abbe_sandon/test_abbe_sandon_torch.py`` trains all
parameters and checks them bitwise, and moves a gate into fpl's linear zone to see them
move).  The carries stay fixed: a carried v1 (fpl' = 1, on an active path) would get a
gradient.  A sparse trainable weight has the ``scatter`` form, whose Parameter is the
``[nnz]`` vector of existing edges (an absent edge has no parameter, hence no update).
**Departure (named):** a ``.gates`` unit without a constant edge in G_n (NOT, BUF) still has
a trainable bias entry, 0 -- an edge of weight 0 from the constant vertex, frozen by the
same argument.  Every vertex's in-edges are all M_s edges (v1..v5, v3'..v5', out) or none
(v0, vc, vc', gates), which is what lets each layer split.  The net's output is ``out``'s
activation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from tm2nn.ir.learner import Learner
from tm2nn.nets import Activation, Affine, Concat, Net, Param, Port, SparseMatrix
from tm2nn.nets.space import Space

from . import net as gn
from .float64 import CITE, Dyadic, ms_fpl_gadget
from .gadgets import ms_bit

FN = "abbe_sandon_fpl"


@dataclass
class IRNet:
    """G_n as an IR net plus the maps needed to train and decode it (module doc)."""

    graph: gn.Net  # Lemma 3's graph (the ext* block still a block)
    dyadic: Dyadic
    net: Net
    names: list[str]  # expanded vertices
    kind: list[str]
    src: list[int]
    dst: list[int]
    w: list[float]
    part: list[str]
    depth: list[int]
    #: edge -> (op name, "weight", index into the op's weight.vals) or, for an edge from
    #: the constant vertex, (op name, "bias", row) or (``.const`` param, "value", row);
    #: every edge has exactly one
    slot: list[tuple[str, str, int]] = field(default_factory=list)
    #: per memory copy i: M_s edge -> expanded edge id
    mem_edges: list[dict] = field(default_factory=list)
    gadget: set[int] = field(default_factory=set)  # expanded edge ids of M_s edges
    layers: int = 0
    carries: int = 0

    @property
    def learner(self) -> Learner:
        return self.graph.learner

    @property
    def gamma(self) -> float:
        return self.dyadic.gamma

    def trainable_ops(self) -> list[str]:
        """Every trainable affine (``.train`` and ``.gates``; the ``.const`` params are
        trainable too, :meth:`frozen_ops`)."""
        return [op.name for op in self.net.nodes if isinstance(op, Affine) and op.trainable]

    def gadget_ops(self) -> list[str]:
        """The ``.train`` affines: the M_s edges (their weights flip, Lemma 2)."""
        return [n for n in self.trainable_ops() if n.endswith(".train")]

    def frozen_ops(self) -> list[str]:
        """The ``.gates`` affines and ``.const`` params: trainable, but frozen by the
        construction (module doc): every other edge of G_n, whose gradient is exactly 0
        while Lemma 1 holds."""
        return [op.name for op in self.net.nodes
                if (isinstance(op, Affine) and op.trainable and op.name.endswith(".gates")) or isinstance(op, Param)]

    def size_report(self) -> list[tuple[str, str, str]]:
        """(quantity, this net, paper) rows for ``tm2nn info --engine float64``."""
        lr, d = self.learner, self.dyadic
        info = self.net.info()
        n_gates = sum(1 for k in self.kind if k == "gate")
        return [
            ("net inputs (x, r, r')", f"{len(self.net.inputs[0].space)}", "n (+2 random bits, Theorem 4)"),
            ("memory bits m", f"{lr.m}", "m_n"),
            ("copies of M_s", f"m + m' = {lr.m} + {d.m_prime} (all real)", "m + m' (Lemma 3)"),
            ("m'", f"{d.m_prime}", "2^(6k-1) (float64: 1/P)"),
            ("k (s = 2^-k)", f"{d.k}", "-"),
            ("gate units (r circuit)", f"{n_gates}", "<= gates of r (Lemma 1)"),
            ("vertices", f"{len(self.names)}", "n + 1 + gates + 10(m + m') + 2"),
            ("edges", f"{len(self.src)}", "-"),
            ("  M_s edges (trainable, SGD flips them)", f"{len(self.gadget)}", "12(m + m')"),
            ("  other edges (trainable, frozen by construction)", f"{len(self.src) - len(self.gadget)}",
             "gradient 0 (Lemma 1)"),
            ("distinct weights", f"{len(set(self.w))}", "-"),
            ("s", f"2^-{d.k}", "(2^-243 3^-1641/2 / m')^(1/364)"),
            ("gamma", f"{d.gamma:g} = 2^{4 * d.k - 2}", "2^-244 3^-1643/2 s^-362 (Lemma 2)"),
            ("P = 1/m' (per active copy)", f"2^{1 - 6 * d.k}", "2^243 3^1641/2 s^364"),
            ("IR layers", f"{self.layers}", "-"),
            ("  carried (skip) units", f"{self.carries}", "- (ours: the IR's layering)"),
            ("IR max width", f"{info['max_width']}", "-"),
            ("IR stored weights", f"{info['params_nonzero']}", "-"),
        ]

    def info(self) -> dict:
        return {k.strip(): v for k, v, _ in self.size_report()}


def _float(w) -> float:
    q = Fraction(w)
    f = float(q)
    if Fraction(f) != q:  # pragma: no cover - the parametrisation is dyadic
        raise ValueError(f"weight {w} is not a float64")
    return f


def build_ir_net(lr: Learner, k: int | None = None) -> IRNet:
    """G_n for ``lr`` with the float64 dyadic gadgets as an IR net (module doc).
    ``k`` defaults to :meth:`Dyadic.for_m` of the learner's m."""
    d = Dyadic.for_m(lr.m) if k is None else Dyadic(k)
    if d.m_prime < lr.m:
        raise ValueError(f"k = {d.k} gives m' = {d.m_prime} < m = {lr.m}")
    g = gn.build_net(lr, m_prime=d.m_prime, gadget=lambda s: ms_fpl_gadget(d.k, num=Fraction),
                     read_value=2 * Fraction(d.s))

    # ---- expand the ext* block into real copies ext[m+1..m']
    m = lr.m
    names: list[str] = []
    kind: list[str] = []
    ids: list[list[int]] = []  # graph vertex -> expanded ids (one, or mult)
    for v, name in enumerate(g.names):
        K = g.mult[v]
        if K == 1:
            ids.append([len(names)])
            names.append(name)
            kind.append(g.kind[v])
        else:
            assert name.startswith("ext*."), name
            ids.append(list(range(len(names), len(names) + K)))
            for j in range(K):
                names.append(f"ext[{m + 1 + j}]." + name[len("ext*."):])
                kind.append(g.kind[v])
    src, dst, w, part, gadget = [], [], [], [], set()
    gadget_graph = g.gadget_edges()
    edge_ids: list[list[int]] = []
    for e, (u, v) in enumerate(zip(g.src, g.dst)):
        us, vs = ids[u], ids[v]
        if len(us) == len(vs):
            pairs = list(zip(us, vs))
        elif len(us) == 1:
            pairs = [(us[0], b) for b in vs]
        elif len(vs) == 1:
            pairs = [(a, vs[0]) for a in us]
        else:  # pragma: no cover
            raise ValueError("block sizes differ")
        edge_ids.append([])
        for a, b in pairs:
            edge_ids[-1].append(len(src))
            if e in gadget_graph:
                gadget.add(len(src))
            src.append(a)
            dst.append(b)
            w.append(_float(g.w[e]))
            part.append(g.part[e])
    const = ids[g.const][0]
    inputs = [ids[v][0] for v in g.inputs]
    out = ids[g.out][0]
    mem_edges = [{me: edge_ids[e][0] for me, e in c.edge.items()} for c in g.memory_copies]

    # ---- depths (const edges are biases)
    V = len(names)
    in_edges: list[list[int]] = [[] for _ in range(V)]
    for e, v in enumerate(dst):
        in_edges[v].append(e)
    depth = [0] * V
    order = sorted(range(V))  # graph ids are topological and expansion keeps blocks in place
    for v in order:
        if v == const or v in inputs:
            continue
        depth[v] = 1 + max((depth[src[e]] for e in in_edges[v] if src[e] != const), default=0)
    # as late as possible (fewest carries: the copies' v1..v3 wait next to their v4, not
    # from depth 1); a vertex nobody reads (r's h unit) stays as early as possible
    D = depth[out]
    out_edges: list[list[int]] = [[] for _ in range(V)]
    for e, u in enumerate(src):
        out_edges[u].append(e)
    for v in reversed(order):
        if v == const or v in inputs or v == out or not out_edges[v]:
            continue
        depth[v] = min(depth[dst[e]] for e in out_edges[v]) - 1
    last_use = [-1] * V
    for u, v in zip(src, dst):
        if u != const:
            last_use[u] = max(last_use[u], depth[v])
    if any(depth[v] >= D for v in range(V) if v != out):  # pragma: no cover - out is last
        raise ValueError("the output vertex is not the deepest")

    # ---- layers
    trainable_v = [kind[v] in ("gadget", "out") for v in range(V)]
    for v in range(V):
        parts = {e in gadget for e in in_edges[v]}
        if parts and parts != {trainable_v[v]}:  # pragma: no cover - the construction
            raise ValueError(f"vertex {names[v]} mixes M_s and other in-edges")
    n_const = [0] * V
    for e in range(len(src)):
        if src[e] == const:
            n_const[dst[e]] += 1
    assert max(n_const) <= 1  # one bias entry per const edge
    slot: list[tuple[str, str, int] | None] = [None] * len(src)
    prev = list(inputs)  # vertex ids of the previous layer's dimensions, in order
    port = Port("z", Space(tuple(names[v] for v in inputs)))
    nodes = []
    carries = 0
    by_depth: dict[int, list[int]] = {}
    for v in range(V):
        if v != const and v not in inputs:
            by_depth.setdefault(depth[v], []).append(v)
    x = "z"
    cites = {"carry": "ours: the IR's layering (skip units, not G_n edges; fixed)",
             "gates": "Abbe & Sandon Lemma 1 / Lemma 3 (gates, reads, controls): trainable, frozen by "
                      "construction (|z| >= 2 or z in {0, 2}: fpl' = 0)",
             "const": "Abbe & Sandon Lemma 3 (v0 = f(2)) / net.py departure 2 (CONST0/1): trainable, frozen by "
                      "construction (|z| = 2: fpl' = 0)",
             "train": CITE}
    for dd in range(1, D + 1):
        pos = {v: i for i, v in enumerate(prev)}
        carried = [v for v in prev if last_use[v] > dd]
        new = by_depth.get(dd, [])
        bias_only = {v for v in new if all(src[e] == const for e in in_edges[v])}
        groups = (("carry", carried), ("gates", [v for v in new if not trainable_v[v] and v not in bias_only]),
                  ("const", [v for v in new if v in bias_only]), ("train", [v for v in new if trainable_v[v]]))
        carries += len(carried)
        parts_out = []
        for role, rows in groups:
            if not rows:
                continue
            name = f"L{dd}.{role}"
            out_space = Space(tuple(names[v] for v in rows))
            if role == "const":
                assert not any(trainable_v[v] for v in rows)
                value = np.zeros(len(rows))
                for i, v in enumerate(rows):
                    for e in in_edges[v]:
                        value[i] += w[e]
                        slot[e] = (name, "value", i)
                nodes.append(Param(name, (x,), value=value, out=out_space, cite=cites[role]))
                parts_out.append(name)
                continue
            ent, bias, eids = [], np.zeros(len(rows)), []
            for i, v in enumerate(rows):
                if role == "carry":
                    ent.append((i, pos[v], 1.0))
                    continue
                for e in in_edges[v]:
                    if src[e] == const:
                        bias[i] += w[e]
                        slot[e] = (name, "bias", i)
                    else:
                        ent.append((i, pos[src[e]], w[e]))
                        eids.append((e, i, pos[src[e]]))
            sm = SparseMatrix.from_entries((len(rows), len(prev)), ent)
            if role != "carry" and sm.nnz == 0:  # pragma: no cover - every unit reads a vertex
                raise ValueError(f"{name}: a trainable affine with no stored entry would train absent edges")
            where = {(int(r), int(c)): j for j, (r, c) in enumerate(zip(sm.rows, sm.cols))}
            for e, r, c in eids:
                slot[e] = (name, "weight", where[(r, c)])
            nodes.append(Affine(name, (x,), weight=sm, bias=bias, out=out_space,
                                trainable=role != "carry", train_bias=role == "gates", cite=cites[role]))
            parts_out.append(name)
        if len(parts_out) > 1:
            nodes.append(Concat(f"L{dd}.z", tuple(parts_out)))
            zname = f"L{dd}.z"
        else:
            zname = parts_out[0]
        nodes.append(Activation(f"L{dd}", (zname,), fn=FN, cite=CITE))
        x = f"L{dd}"
        prev = [v for _, rows in groups for v in rows]
    assert prev == [out]
    assert all(sl is not None for sl in slot), [e for e, sl in enumerate(slot) if sl is None][:3]
    assert not any(src[e] == const for e in gadget)
    meta = {"tm2nn.backend": "abbe-sandon", "tm2nn.abbe_sandon.engine": "float64",
            "tm2nn.abbe_sandon.learner": lr.name, "tm2nn.abbe_sandon.k": str(d.k),
            "tm2nn.abbe_sandon.m_prime": str(d.m_prime), "tm2nn.abbe_sandon.gamma": repr(d.gamma),
            "tm2nn.abbe_sandon.activation": FN, "tm2nn.abbe_sandon.cite": CITE}
    ir = Net(f"{lr.name}_G_n_float64", (port,), tuple(nodes), (x,), meta)
    return IRNet(g, d, ir, names, kind, src, dst, w, part, depth, slot, mem_edges, gadget, D, carries)


def decode_memory(ir: IRNet, value) -> list[int]:
    """The memory bits from the M_s weights of the first m copies (:func:`.gadgets.ms_bit`:
    the sign of w(v0, v1) against the bit-0 copy); ``value(e)`` is edge e's current weight."""
    out = []
    for c, edges in zip(ir.graph.memory_copies, ir.mem_edges):
        gg = c.template.copy()
        gg.weights = {me: value(e) for me, e in edges.items()}
        out.append(ms_bit(gg))
    return out


__all__ = ["IRNet", "build_ir_net", "decode_memory", "FN"]
