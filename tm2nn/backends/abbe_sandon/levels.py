"""The level engine: SGD on Abbe & Sandon's §4.1 net G_n (Lemma 3) in exact arithmetic,
evaluated level by level over arrays instead of vertex by vertex.

It computes exactly the numbers of the reference engine :class:`.train.Engine` (the
module doc of :mod:`.train` gives the forward pass, the loss, the backward pass and the
update of every weight) -- tests compare the two weight for weight, output for output and
gradient for gradient at every step -- but organises the work differently:

* **Numbers** are ids into :class:`.values.Values` (ints, Fractions and
  :class:`.exact.Mono` ``c 2^a 3^b s^k``, each distinct number once); a product, sum,
  ``f``, ``f'`` or update of an id array is one numpy gather in a memo table whose
  entries are computed by the exact Python arithmetic the first time they are needed.
* **Forward by levels**: a vertex's level is the length of the longest path to it from
  the clamped vertices (constant, inputs), so the vertices of one level depend only on
  lower levels.  Per level, ``z_v = sum k(u,v) w(u,v) y_u`` is a gather of the in-edges
  (padded to the level's largest in-degree with a weight-0 edge, which adds exactly 0)
  and an exact row sum; ``y_v = f(z_v)``.  A vertex with many in-edges (the output
  vertex: two per copy of M_s) or with a block of identical copies behind an edge
  (``k > 1``, :mod:`.net` departure 1) is one exact weighted sum over its distinct terms.
* **Backward, sparse**: ``delta_v = f'(z_v) sum k'(v,w) w(v,w) delta_w`` is nonzero only
  where f'(z_v) != 0 -- decided from the actual z_v, by the generic rule, as the
  reference does.  By Lemma 1 every gate sits where f' = 0 and by Lemma 2 only the
  active copies of M_s carry a delta, so the engine pushes deltas from the output
  vertex down the in-edges of vertices whose delta is nonzero, level by level, and
  never visits the rest of the net.  Gradients ``y_u delta_v`` and updates
  ``w - gamma y_u delta_v`` are then taken on the in-edges of those vertices only (every
  other gradient is exactly 0, as in the reference).
* **Training streams in batches** (:meth:`LevelEngine.stream`): the *per-step part* Q of
  the net -- the copies' vertices v2 .. v5', the output vertex, and whatever else only
  feeds Q -- is evaluated every step; everything else (the computation section, the
  controls, v0 and the memory reads v1) is a function of the inputs and of weights
  outside Q, so it is evaluated for the next K samples at once, with the weights of the
  moment.  As soon as a step updates a weight into a vertex outside Q (a memory bit
  flips: w(v0, v1) of a memory copy), the rest of the batch is dropped and recomputed:
  every step still sees exactly the values a full forward pass would give.
* **Checks, vectorised**: the memory decoded from the first m copies (``ms_bit``: the
  sign of w(v0, v1) against its bit-0 sign), the edges updated outside the copies of
  M_s, and every weight outside them against its value at load.

The net's weights are read at construction; the engine then holds them (as ids) and
writes them back to ``net.w`` on :meth:`LevelEngine.sync` (``train`` calls it at the end).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .net import Net
from .values import Values

Number = object

#: in-degree above which a vertex is summed by :meth:`.values.Values.weighted_sum`
_WIDE = 8
#: vertex values held at once by a batched pass (ids, 4 bytes each; z and y)
_BATCH_IDS = 1 << 24
#: the most samples whose forward pass outside Q is computed ahead (:meth:`LevelEngine.stream`)
_AHEAD = 256


class LevelEngine:
    """Forward / backward / SGD over a :class:`.net.Net` by levels (module doc); the same
    interface as :class:`.train.Engine` (``forward``, ``backward``, ``step``,
    ``predict``) plus the batched :meth:`stream`, :meth:`predict_rows` and the vectorised
    checks."""

    def __init__(self, net: Net, gamma: Number | None = None):
        self.net = net
        self.gamma = net.sec.gamma if gamma is None else gamma
        self.vals = vals = Values(self.gamma)
        V, E = len(net.names), len(net.src)
        self.V, self.E = V, E
        # the edge arrays, with one extra weight-0 edge (id E) from the constant for padding
        self.src = np.array(net.src + [net.const], dtype=np.int64)
        self.dst = np.array(net.dst + [net.out], dtype=np.int64)
        if (self.src[:E] >= self.dst[:E]).any():  # pragma: no cover - build_net sorts them
            raise ValueError("the net's vertices are not in topological order")
        self.W = np.append(vals.ids(net.w), np.int32(vals.ZERO))
        self.W0 = self.W.copy()
        self.W_net = self.W.copy()  # the ids of net.w as last written (sync)
        mult = net.mult
        mu, mv = [mult[u] for u in net.src], [mult[v] for v in net.dst]
        self.kf = {e: a // b for e, (a, b) in enumerate(zip(mu, mv)) if a > b}
        self.kb = {e: b // a for e, (a, b) in enumerate(zip(mu, mv)) if b > a}
        self.kb_mask = np.zeros(E + 1, bool)
        self.kb_mask[list(self.kb)] = True
        for a, b in zip(mu, mv):
            if (a > b and a % b) or (b > a and b % a):  # pragma: no cover - blocks are 1 or K
                raise ValueError("multiplicities must divide each other")
        self.clamped = np.array([k in ("const", "input") for k in net.kind])
        self.inputs = np.array(net.inputs, dtype=np.int64)
        # in-edges by destination (CSR)
        order = np.argsort(self.dst[:E], kind="stable")
        self.in_edges = order
        self.in_ptr = np.searchsorted(self.dst[:E][order], np.arange(V + 1))
        self.level = self._levels(np.ones(V, bool))
        self.plan = self._plan(~self.clamped, self.level)
        # the per-step part Q (module doc) and the rest, evaluated ahead in batches
        self.q = self._per_step_part()
        self.q_level = self._levels(self.q)
        self.plan_ahead = self._plan(~self.clamped & ~self.q, self.level)
        self.plan_q = self._plan(self.q, self.q_level)
        self.feeds_ahead = ~self.q[self.dst]  # an update of such an edge invalidates the batch
        self.feeds_ahead[E] = False
        # checks
        gadget = np.zeros(E + 1, bool)
        gadget[list(net.gadget_edges())] = True
        self.frozen = ~gadget
        self.frozen[E] = False
        self.gadget = gadget
        self.mem_edge = np.array([c.edge[("v0", "v1")] for c in net.memory_copies], dtype=np.int64)
        self.mem_pos0 = vals.op1("pos", vals.ids([c.template.initial[("v0", "v1")] for c in net.memory_copies]))
        self.updated, self._grads = np.zeros(0, np.int64), np.zeros(0, np.int32)
        self.Z = np.zeros(V, np.int32)
        self.Y = np.zeros(V, np.int32)
        self.delta = np.zeros(V, np.int32)
        self.batches = 0  # batched passes run by stream (for the benchmark)

    # ------------------------------------------------------------ structure
    def _levels(self, within: np.ndarray) -> np.ndarray:
        """Longest-path depth of the vertices ``within``, counting only paths inside it
        (vertices are in topological order; every other vertex has depth 0)."""
        lvl = [0] * self.V
        src = self.src[:self.E].tolist()
        ptr = self.in_ptr.tolist()
        edges = self.in_edges.tolist()
        inside = (within & ~self.clamped).tolist()
        for v in range(self.V):
            lo, hi = ptr[v], ptr[v + 1]
            if inside[v]:
                lvl[v] = 1 + max((lvl[src[e]] for e in edges[lo:hi]), default=-1)
        return np.array(lvl, dtype=np.int64)

    def _per_step_part(self) -> np.ndarray:
        """Q: the destinations of M_s edges whose successors are all in Q (the output
        vertex and each copy's v2 .. v5'; a memory copy's v1 feeds the gates, so not it)."""
        seed = np.zeros(self.V, bool)
        seed[self.dst[list(self.net.gadget_edges())]] = True
        seed[self.net.out] = True
        q = seed.tolist()
        succ: list[list[int]] = [[] for _ in range(self.V)]
        for u, v in zip(self.src[:self.E].tolist(), self.dst[:self.E].tolist()):
            succ[u].append(v)
        for v in range(self.V - 1, -1, -1):
            if q[v] and not all(q[w] for w in succ[v]):
                q[v] = False
        return np.array(q, bool)

    def _plan(self, vertices: np.ndarray, level: np.ndarray) -> list:
        """Per level of ``level`` (from 1), for the ``vertices`` on it: the narrow ones and
        their padded in-edge matrix and sources, and the wide ones with their in-edges."""
        deg = np.diff(self.in_ptr)
        wide = deg > _WIDE
        wide[self.dst[list(self.kf)]] = True
        plan = []
        by_level = np.argsort(level, kind="stable")
        bounds = np.searchsorted(level[by_level], np.arange(int(level.max(initial=0)) + 2))
        for lv in range(1, len(bounds) - 1):
            vs = by_level[bounds[lv]:bounds[lv + 1]]
            vs = vs[vertices[vs]]
            narrow, wides = vs[~wide[vs]], vs[wide[vs]]
            d = int(deg[narrow].max(initial=0))
            pad = np.full((len(narrow), max(d, 1)), self.E, np.int64)
            for j in range(d):
                has = deg[narrow] > j
                pad[has, j] = self.in_edges[self.in_ptr[narrow[has]] + j]
            wide_in = []
            for v in wides.tolist():
                es = self.in_edges[self.in_ptr[v]:self.in_ptr[v + 1]]
                ones = np.array([int(e) not in self.kf for e in es], bool)
                wide_in.append((v, es, ones, [self.kf[int(e)] for e in es[~ones]]))
            if len(narrow) or wide_in:
                plan.append((narrow, pad, self.src[pad], wide_in))
        return plan

    # ------------------------------------------------------------ forward
    def _run(self, plan: list, Z: np.ndarray | None, Y: np.ndarray, checked: bool) -> None:
        """Evaluate ``plan``'s vertices into ``Z`` / ``Y`` (ids, [V] or batch-major
        [B, V]) in place; ``checked=False`` uses the unchecked table lookups (-1 where
        unknown).  Each vertex is written before it is read, so a rerun overwrites a
        failed one completely."""
        vals, W, src = self.vals, self.W, self.src
        mul, f = (vals.op2, vals.op1) if checked else (vals.raw2, vals.raw1)
        add = vals.op2 if checked else vals.raw2
        for narrow, pad, srcs, wide_in in plan:
            if len(narrow):
                t = mul("mul", W[pad], Y[..., srcs])
                z = t[..., 0]
                for j in range(1, t.shape[-1]):
                    z = add("add", z, t[..., j])
                if Z is not None:
                    Z[..., narrow] = z
                Y[..., narrow] = f("f", z)
            for v, es, ones, ks in wide_in:
                terms = mul("mul", W[es], Y[..., src[es]]).reshape(-1, len(es))
                zv = np.array([vals.weighted_sum(r[ones], r[~ones], ks) for r in terms], np.int32)
                if Z is not None:
                    Z[..., v] = zv.reshape(Z.shape[:-1])
                Y[..., v] = f("f", zv).reshape(Y.shape[:-1])

    def _pass(self, plan: list, Z: np.ndarray | None, Y: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Run ``plan`` on (Z, Y) in place, unchecked; again checked (filling the tables)
        if an unknown entry (-1) is left."""
        self._run(plan, Z, Y, False)
        if Y.min() < 0 or (Z is not None and Z.min() < 0):
            self._run(plan, Z, Y, True)
        return Z, Y

    def _inputs(self, rows: np.ndarray, keep_z: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """Fresh (Z, Y) ([V] for one row, else [B, V]) with the clamped vertices set and
        every other vertex 0 (so a vertex with no in-edges has z = f(z) = 0)."""
        vals = self.vals
        assert vals.ZERO == 0
        B = rows.shape[0]
        shape = (self.V,) if B == 1 else (B, self.V)
        Y = np.zeros(shape, np.int32)
        Y2 = Y.reshape(B, self.V)
        Y2[:, self.net.const] = vals.ONE
        u, inv = np.unique(rows, return_inverse=True)
        Y2[:, self.inputs] = vals.ids(u.tolist())[inv.reshape(B, len(self.inputs))]
        return (np.zeros(shape, np.int32) if keep_z else None), Y

    def _forward(self, rows: np.ndarray, keep_z: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """z and y (ids; [V] for one row, else [B, V]) for net input rows [B, n_in]."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        return self._pass(self.plan, *self._inputs(rows, keep_z))

    def forward(self, inputs) -> Number:
        """Outputs of all vertices for one net input vector (±1 entries); the net's output."""
        self.Z, self.Y = self._forward(np.asarray(inputs).reshape(1, -1))
        return self.vals.vals[int(self.Y[self.net.out])]

    @property
    def z(self) -> list[Number]:
        """The last forward pass's vertex inputs (exact numbers), like :attr:`.train.Engine.z`."""
        return [self.vals.vals[i] for i in self.Z.tolist()]

    @property
    def y(self) -> list[Number]:
        return [self.vals.vals[i] for i in self.Y.tolist()]

    # ------------------------------------------------------------ backward and update
    def _backward(self, label: Number) -> tuple[np.ndarray, np.ndarray]:
        """(edges, gradient ids) of every edge with a nonzero dL/dw (module doc)."""
        vals, src, dst = self.vals, self.src, self.dst
        Z, Y = self.Z, self.Y
        out = self.net.out
        yo = vals.vals[int(Y[out])]
        d_out = vals.id(vals.vals[int(vals.op1("df", Z[out:out + 1])[0])] * 2 * (yo - label))
        if d_out == vals.ZERO:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        delta = self.delta
        delta[out] = d_out
        done = [np.array([out])]
        pending: dict[int, list] = {}
        self._push(np.array([out]), pending)
        while pending:
            lv = max(pending)
            us = np.concatenate([p[0] for p in pending[lv]])
            ts = np.concatenate([p[1] for p in pending.pop(lv)])
            us, sums = vals.segment_sums(us, ts)
            d = vals.op2("mul", vals.op1("df", Z[us]), sums)
            nz = d != vals.ZERO
            us, d = us[nz], d[nz]
            if len(us):
                delta[us] = d
                done.append(us)
                self._push(us, pending)
        vs = np.concatenate(done)
        es = self._in_edges_of(vs)
        g = vals.op2("mul", Y[src[es]], delta[dst[es]])
        nz = g != vals.ZERO
        delta[vs] = vals.ZERO
        return es[nz], g[nz]

    def _in_edges_of(self, vs: np.ndarray) -> np.ndarray:
        cnt = self.in_ptr[vs + 1] - self.in_ptr[vs]
        starts = np.repeat(self.in_ptr[vs] - np.cumsum(cnt) + cnt, cnt)
        return self.in_edges[starts + np.arange(int(cnt.sum()))]

    def _push(self, vs: np.ndarray, pending: dict) -> None:
        """Queue ``k' w(u, v) delta_v`` for every in-edge (u, v) of ``vs`` whose source can
        carry a delta (not clamped, f'(z_u) != 0), by the source's level."""
        vals = self.vals
        es = self._in_edges_of(vs)
        us = self.src[es]
        keep = ~self.clamped[us]
        es, us = es[keep], us[keep]
        keep = vals.op1("df", self.Z[us]) != vals.ZERO
        es, us = es[keep], us[keep]
        if not len(es):
            return
        t = vals.op2("mul", self.W[es], self.delta[self.dst[es]])
        for j in np.flatnonzero(self.kb_mask[es]).tolist():  # an edge into a block: K copies' deltas
            t[j] = vals.scaled(self.kb[int(es[j])], t[j:j + 1])[0]
        keep = t != vals.ZERO
        es, us, t = es[keep], us[keep], t[keep]
        lv = self.level[us]
        for level in np.unique(lv).tolist():
            sel = lv == level
            pending.setdefault(level, []).append((us[sel], t[sel]))

    def _update(self, label: Number) -> tuple[np.ndarray, np.ndarray]:
        """Backward from the current forward pass, then ``w <- w - gamma dL/dw``."""
        es, g = self._backward(label)
        if len(es):
            self.W[es] = self.vals.op2("upd", self.W[es], g)
        self.updated, self._grads = es, g
        return es, g

    def backward(self, label: Number) -> dict[int, Number]:
        """dL/dw for every edge with a nonzero gradient (all others are exactly 0)."""
        es, g = self._backward(label)
        return {int(e): self.vals.vals[int(i)] for e, i in zip(es, g)}

    def last_grads(self) -> dict[int, Number]:
        """The last SGD step's nonzero gradients, by edge (as :meth:`step` returns them)."""
        return {int(e): self.vals.vals[int(i)] for e, i in zip(self.updated, self._grads)}

    def step(self, inputs, label: Number) -> tuple[Number, dict[int, Number]]:
        """One SGD step: forward, backward, ``w <- w - gamma dL/dw``.  Returns (output, grads)."""
        out = self.forward(inputs)
        self._update(label)
        return out, self.last_grads()

    def stream(self, rows, labels) -> Iterator[Number]:
        """SGD on the samples ``(rows[t], labels[t])`` in order, lazily: yields the net's
        output of each step after its update (the caller checks, and may stop).  The part
        of the forward pass outside Q is computed ahead for up to K samples (module doc);
        K doubles while batches run to the end and shrinks to the length of the last run
        when a step invalidates the batch."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        T, t, K = len(rows), 0, 4
        cap = max(1, min(_AHEAD, _BATCH_IDS // (2 * self.V)))
        while t < T:
            k = min(K, T - t, cap)
            try:
                Zb, Yb = self._pass(self.plan_ahead, *self._inputs(rows[t:t + k]))
            except Exception:  # a later sample's error (f's inexact blend) is not this step's
                if k == 1:
                    raise
                K = 1
                continue
            Zb, Yb = Zb.reshape(k, self.V), Yb.reshape(k, self.V)
            self.batches += 1
            ran = 0
            for j in range(k):
                self.Z, self.Y = self._pass(self.plan_q, Zb[j], Yb[j])
                out = self.vals.vals[int(self.Y[self.net.out])]
                es, _ = self._update(labels[t])
                t += 1
                ran += 1
                yield out
                if self.feeds_ahead[es].any():
                    break
            K = min(2 * K, cap) if ran == k else max(1, ran)

    # ------------------------------------------------------------ prediction
    def predict(self, inputs) -> int:
        """The net's answer (0/1) for one input vector, without training."""
        return int(self.predict_rows(np.asarray(inputs).reshape(1, -1))[0])

    def predict_rows(self, rows) -> np.ndarray:
        """The net's answers (0/1, int [B]) for input rows [B, n_in], in batched passes of
        at most ``_BATCH_IDS / V`` rows (the vertex values of a pass are [V, rows] ids)."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        step = max(1, _BATCH_IDS // self.V)
        out = [self.vals.op1("pos", self._forward(rows[i:i + step], keep_z=False)[1].reshape(-1, self.V)[:, self.net.out])
               for i in range(0, len(rows), step)]
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)

    # ------------------------------------------------------------ checks and state
    def memory_bits(self) -> list[int]:
        """The memory decoded from the first m copies (:func:`.gadgets.ms_bit`, vectorised)."""
        pos = self.vals.op1("pos", self.W[self.mem_edge])
        return (pos != self.mem_pos0).astype(int).tolist()

    def changed_outside_gadgets(self) -> list[int]:
        """Edges outside the copies of M_s updated by the last step or differing from their
        value at load (the reference's two checks, :func:`.train.train`)."""
        bad = self.updated[~self.gadget[self.updated]]
        moved = np.flatnonzero((self.W != self.W0) & self.frozen)
        return sorted(set(bad.tolist()) | set(moved.tolist()))

    def weight(self, e: int) -> Number:
        return self.vals.vals[int(self.W[e])]

    def sync(self) -> None:
        """Write the engine's weights back to ``net.w`` (the edges that changed)."""
        w = self.net.w
        for e in np.flatnonzero(self.W[:self.E] != self.W_net[:self.E]).tolist():
            w[e] = self.vals.vals[int(self.W[e])]
        self.W_net = self.W.copy()


__all__ = ["LevelEngine"]
