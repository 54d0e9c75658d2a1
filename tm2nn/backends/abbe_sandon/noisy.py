"""Abbe & Sandon §4.2: the emulation net G_n of Lemma 6, trained by perturbed SGD in mpmath
(Lemma 4's gamma), checked at every step.  Its noise goes up to Lemma 4's eps/t per weight
per step (departure 2 below), not Lemma 6's 1/(n^2 t).

Construction (Lemma 6's proof; every vertex has activation f*, §4.2):

* ``const`` (outputs 1) and n input vertices ``in[i]`` (outputs 2x_i - 1);
* 2 n t copies of M' (Definition 7), labelled ``M'[t0,i,z]`` (0 <= t0 < t, 0 <= i < n --
  the paper counts i from 1 -- and z in {0,1}); every copy's v0 is ``const`` and its v5 the
  output vertex ``out``; an edge of weight 1 from ``const`` to every control vertex vc, vc';
* output control vertices ``oc[t0]``, 0 <= t0 < t: an edge const -> oc[t0] of weight 1 and
  oc[t0] -> out of weight cbrt(4)/4 - 2^-243 3^-29 n; ``oc[t]``: no constant edge, weight
  49/100 to out;
* the computation component (Lemma 5): one read vertex per net input and per copy's v2 and
  vr (:func:`.gates.input_read` with y(0) = 2^-21 3^-3/2, y(1) = 2^-15 3^-3/2), one
  saturating vertex per gate of the schedule circuit (:func:`schedule_circuit`, lowered by
  :func:`tm2nn.passes.basis.to_basis` to 2-input AND/OR, NOT, BUF, constants: fan-in 2 is
  what Lemma 5's margin 3/2 + d/6 <= 2 allows), and an edge of weight 1/2 from the gate
  computing each control value to its control vertex (two gates feed oc[t], weight 1/2
  each: oc[t]'s input is -2, 0 or 2).

Schedule (the circuit's logic, Lemma 6's proof): set(t0,i,z) = [v2 of M'[t0,i,z] reads 1];
step(t0) = set(t0,0,0) or set(t0,0,1); the current step is the first t0 with step(t0) = 0
(``cur[t0] = step(t0-1) and not step(t0)``; ``cur[t] = step(t-1)``).  **Departure 1**: the
paper takes "the smallest t such that no copy with t' >= t is set", over all copies; we test
only the copies of bit 0 and only step(t0-1) -- equivalent while Lemma 4's invariant holds
(exactly the n copies M'[t0, i, x(t0)_i] are set at step t0), and the check after each step
asserts that invariant.  Controls: vc of M'[t0,i,z] is 2 iff it is not set and not being set
(being set: cur[t0] and x_i = z), vc' is 2 iff it is set (Lemma 4's conditions 3-5);
oc[t0] = 2 iff cur[t0] (t0 < t); oc[t] = 4h - 2 if cur[t], else 0, with
x*(t0)_i = set(t0,i,1), y*(t0) = OR_z (set(t0,0,z) and vr of M'[t0,0,z] reads 1).

Numbers: every weight is an ``mpmath.mpf`` at the net's precision ``NoisyNet.dps`` decimal
digits (default :data:`DPS` = 100; docs Finding 2: float64 breaks Lemma 4, >= 27 digits work;
:func:`check_dps` is the one place a precision is validated).  f* is :func:`fstar_mp` (the
paper's pieces in closed form; its smooth blends -- never reached in a correct run -- fall
back to float64).  Lemma 6's correction -2^-243 3^-29 n on oc[t0] -> out
(:func:`oc_out_weight`) is ~1e-87: 50 digits round it away; the default 100 keeps it.

Noise (**departure 2**, :func:`noise_bound`): Lemma 6 allows |delta| <= 1/(n^2 t) per weight
per step, but its proof then needs the per-edge total (t steps) to be at most
eps = min(2^-134 3^-11, ...), i.e. n > 2^67 3^6.  For the small n we can run, we use the bound
Lemma 4 itself needs: |delta| <= eps / t, so the total per edge over the t SGD steps is <= eps
(Lemma 4 hypothesis 6, and < 1/12 for Lemma 5).  :func:`lemma6_bound` gives the paper's value.
Lemma 5's own budget (< 1/12 per edge into the computation component, in total) is exercised
separately by a fixed per-step ``drift`` (:mod:`.lemma5`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import mpmath

from tm2nn.errors import Tm2nnError
from tm2nn.ir.noisy_learner import NoisyLearner
from tm2nn.ir.noisy_learner import ports as h_ports
from tm2nn.learners.builder import CircuitBuilder
from tm2nn.passes.basis import to_basis

from . import activation as act
from .gadgets import MP_PATH, mprime_gadget
from .gates import gate as gate_unit

Number = Any
#: Default mpmath working precision (decimal digits) for G_n's weights and the training run.
#: 100, not less: at 50 digits Lemma 6's correction on oc[t0] -> out (~1e-87 n, relative to
#: ~0.4) and the noise on the read edges (eps/t ~ 1e-47 on weights ~6.9e5) are rounded away;
#: pure-Python mpmath costs the same at 50, 100 or 150 digits (docs/abbe_sandon.md).
DPS = 100
#: Accepted precisions: Lemma 4 needs >= ~27 digits (docs Finding 2), 40 leaves room; above
#: a few hundred digits nothing changes but the speed.
MIN_DPS, MAX_DPS = 40, 1000


def check_dps(dps) -> int:
    """The one validation of a §4.2 working precision (decimal digits)."""
    if isinstance(dps, bool) or not isinstance(dps, int) or not MIN_DPS <= dps <= MAX_DPS:
        raise Tm2nnError(f"the precision of Lemma 6's net must be an integer number of decimal digits in "
                         f"{MIN_DPS}..{MAX_DPS} (Lemma 4 needs about 27, docs/abbe_sandon.md Finding 2), got {dps!r}")
    return dps


def _mp(c, a, b) -> mpmath.mpf:
    """c 2^a 3^b as an mpf (a, b ints or Fractions)."""
    a, b = Fraction(a), Fraction(b)
    return (mpmath.mpf(c) * mpmath.power(2, mpmath.mpf(a.numerator) / a.denominator)
            * mpmath.power(3, mpmath.mpf(b.numerator) / b.denominator))


def fstar_mp(x):
    """f* (§4.2) on an mpf: 0 on |x| <= 2^-121 3^-9, x^3 on [2^-120 3^-9, 1], ±2 beyond C
    (closed forms, exact in mpmath); the smooth blends in float64 (never reached when the
    run follows Lemmas 4-6; reached only when noise breaks it)."""
    a = abs(x)
    A, B, C = _zones()
    if a <= A:
        return mpmath.mpf(0)
    if B <= a <= 1:
        return x**3
    if a >= C:
        return mpmath.mpf(2) if x > 0 else mpmath.mpf(-2)
    return mpmath.mpf(float(act.fstar(float(x))))


def dfstar_mp(x):
    """f*' on an mpf (exact 0 in the dead zone and beyond C; see :func:`fstar_mp`)."""
    a = abs(x)
    A, B, C = _zones()
    if a <= A or a >= C:
        return 0
    if B <= a <= 1:
        return 3 * x**2
    return mpmath.mpf(float(act.dfstar(float(x))))


_ZONES: dict[int, tuple] = {}


def _zones() -> tuple:
    """f*'s breakpoints (A = 2^-121 3^-9, B = 2A, C = cbrt 2) at the working precision."""
    prec = mpmath.mp.prec
    z = _ZONES.get(prec)
    if z is None:
        A = mpmath.mpf(2) ** -121 * mpmath.mpf(3) ** -9
        z = _ZONES[prec] = (A, 2 * A, mpmath.cbrt(2))
    return z


def saturation() -> mpmath.mpf:
    """Where our f* reaches ±2 (f*' = 0 beyond): cbrt 2 (the paper only fixes 3/2)."""
    return _zones()[2]


def eps42() -> mpmath.mpf:
    """Lemma 4's noise budget eps = 2^-134 3^-11 (total per edge over training)."""
    return mpmath.mpf(2) ** -134 * mpmath.mpf(3) ** -11


def eps_prime42() -> mpmath.mpf:
    """Lemma 4's output slack eps' = 2^-123 3^-11."""
    return mpmath.mpf(2) ** -123 * mpmath.mpf(3) ** -11


def gamma42() -> mpmath.mpf:
    """Lemma 4 / Lemma 6's learning rate gamma = 2^(716/3) 3^24."""
    return mpmath.power(2, mpmath.mpf(716) / 3) * mpmath.mpf(3) ** 24


def lemma6_bound(n: int, t: int) -> mpmath.mpf:
    """Lemma 6's per-weight per-step noise bound 1/(n^2 t_n)."""
    return mpmath.mpf(1) / (n * n * t)


def noise_bound(n: int, t: int) -> mpmath.mpf:
    """The per-step bound we use: min(1/(n^2 t), eps/t) (module doc, departure 2)."""
    return min(lemma6_bound(n, t), eps42() / t)


def oc_out_weight(n: int) -> mpmath.mpf:
    """Lemma 6's weight of oc[t0] -> out (t0 < t): cbrt(4)/4 - 2^-243 3^-29 n.  On step t0
    oc[t0] outputs 2 and each of the n copies being set adds 2^-242 3^-29 (Lemma 4), so the
    correction cancels them: the output vertex's input is exactly :func:`lemma6_center`."""
    return mpmath.cbrt(4) / 4 - _mp(n, -243, -29)


def lemma6_center() -> mpmath.mpf:
    """cbrt(4)/2: the output vertex's input on every learning step without noise (f* of it
    is 1/2, Lemma 6's claim 3); with noise Lemma 6's proof keeps it within eps'/3."""
    return mpmath.cbrt(4) / 2


# ---------------------------------------------------------------- the schedule circuit
def schedule_circuit(lr: NoisyLearner):
    """Lemma 6's computation component as one Boolean circuit (module doc "Schedule").

    Ports: ``in[i]``, ``v2[t0,i,z]``, ``vr[t0,i,z]``.  Outputs (labels returned alongside):
    per copy ``M'[t0,i,z].vc``, ``.vc'``; ``oc[t0]`` for t0 < t; ``oc[t].a``, ``oc[t].b``."""
    n, t = lr.n, lr.t
    cb = CircuitBuilder(prefix="s")
    keys = [(t0, i, z) for t0 in range(t) for i in range(n) for z in (0, 1)]
    names = [f"in[{i}]" for i in range(n)]
    names += [f"v2[{k}]" for k in keys] + [f"vr[{k}]" for k in keys]
    p = {nm: cb.port(nm) for nm in names}
    x = [p[f"in[{i}]"] for i in range(n)]
    st = {k: p[f"v2[{k}]"] for k in keys}
    step = [st[(t0, 0, 0)] | st[(t0, 0, 1)] for t0 in range(t)]
    cur = [~step[0]] + [step[t0 - 1] & ~step[t0] for t0 in range(1, t)] + [step[t - 1]]
    hp = {}
    for t0 in range(t):
        for i in range(n):
            hp[f"x{t0}[{i}]"] = st[(t0, i, 1)]
        hp[f"y{t0}"] = (st[(t0, 0, 0)] & p[f"vr[{(t0, 0, 0)}]"]) | (st[(t0, 0, 1)] & p[f"vr[{(t0, 0, 1)}]"])
    for i in range(n):
        hp[f"x[{i}]"] = x[i]
    assert set(hp) == set(h_ports(n, t))
    (h,) = cb.inline(lr.h, hp)
    outs, labels = [], []
    for (t0, i, z) in keys:
        now = cur[t0] & (x[i] if z else ~x[i])
        outs += [~st[(t0, i, z)] & ~now, st[(t0, i, z)]]
        labels += [f"M'[{t0},{i},{z}].vc", f"M'[{t0},{i},{z}].vc'"]
    for t0 in range(t):
        outs.append(cur[t0])
        labels.append(f"oc[{t0}]")
    outs += [~cur[t] | h, cur[t] & h]
    labels += [f"oc[{t}].a", f"oc[{t}].b"]
    return to_basis(cb.circuit(f"{lr.name}_schedule", names, outs)), labels


# ---------------------------------------------------------------- G_n
@dataclass
class NoisyNet:
    """G_n of Lemma 6: labelled vertices, edges (src, dst, weight, part), in topological order.

    ``part`` of an edge: ``mprime`` (inside a copy of M'), ``control`` (into vc / vc'),
    ``oc`` (into an output control vertex), ``oc_out`` (output control -> out), ``read``,
    ``gate``.  ``comp``: the computation component's vertices (Lemma 5's new vertices: the
    reads and the gates, whose in-edges are the ``read`` and ``gate`` edges).  ``dps``: the
    precision of the weights and of every pass (:func:`check_dps`)."""

    lr: NoisyLearner
    dps: int = DPS
    names: list[str] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    w: list[Number] = field(default_factory=list)
    part: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    copies: dict[tuple[int, int, int], dict[str, int]] = field(default_factory=dict)
    copy_edges: dict[tuple[int, int, int], dict[tuple[str, str], int]] = field(default_factory=dict)
    oc_out: dict[int, int] = field(default_factory=dict)  # t0 -> edge oc[t0] -> out
    gates: int = 0
    comp: list[int] = field(default_factory=list)

    def vertex(self, name: str) -> int:
        self.index[name] = len(self.names)
        self.names.append(name)
        return self.index[name]

    def edge(self, u: int, v: int, w: Number, part: str) -> int:
        self.src.append(u)
        self.dst.append(v)
        self.w.append(w)
        self.part.append(part)
        return len(self.w) - 1

    def sizes(self) -> dict[str, int]:
        from collections import Counter

        return {"vertices": len(self.names), "edges": len(self.w), "copies": len(self.copies),
                "schedule_gates": self.gates, **{f"edges_{k}": v for k, v in Counter(self.part).items()}}


def build_noisy_net(lr: NoisyLearner, dps: int = DPS) -> NoisyNet:
    """G_n for h_n = ``lr`` (Lemma 6's proof; module doc).  Weights are mpf at ``dps``
    decimal digits (:func:`check_dps`)."""
    with mpmath.workdps(check_dps(dps)):
        return _build(lr, dps)


def _build(lr: NoisyLearner, dps: int) -> NoisyNet:
    n, t = lr.n, lr.t
    net = NoisyNet(lr, dps)
    const = net.vertex("const")
    for i in range(n):
        net.vertex(f"in[{i}]")
    one = mpmath.mpf(1)
    half = mpmath.mpf(1) / 2
    tmpl = mprime_gadget(_mp)
    keys = [(t0, i, z) for t0 in range(t) for i in range(n) for z in (0, 1)]
    # reads and gates need v2 / vr, which need v1, which needs only const: create copies'
    # v1, vr, v2 first, then the computation component, then vc/vc', v3, v4 (topological order)
    for k in keys:
        lab = f"M'{list(k)}".replace(" ", "")
        net.copies[k] = {"v0": const}
        for vn in ("v1", "vr", "v2"):
            net.copies[k][vn] = net.vertex(f"{lab}.{vn}")
    y0, y1 = _mp(1, -21, Fraction(-3, 2)), _mp(1, -15, Fraction(-3, 2))
    rw, rb = 4 / (y1 - y0), -2 * (y1 + y0) / (y1 - y0)  # Lemma 5's input read (gates.input_read)
    circ, labels = schedule_circuit(lr)
    net.gates = len(circ.gates)
    src_of: dict[str, int] = {}
    for nm in circ.inputs:
        if nm.startswith("in["):
            u = net.index[nm]
        else:
            kind, key = nm[:2], tuple(int(s) for s in nm[3:-1].strip("()").split(","))
            u = net.copies[key][kind]
        v = net.vertex(f"read:{nm}")
        net.comp.append(v)
        net.edge(u, v, rw, "read")
        net.edge(const, v, rb, "read")
        src_of[nm] = v
    for g in circ.topo:
        v = net.vertex(f"gate:{g.name}")
        net.comp.append(v)
        if g.op in ("CONST0", "CONST1"):
            net.edge(const, v, mpmath.mpf(2 if g.op == "CONST1" else -2), "gate")
        else:
            unit = gate_unit("AND", 1) if g.op == "BUF" else gate_unit(g.op, len(g.inputs))
            for s, wt in zip(g.inputs, unit.weights):
                net.edge(src_of[s], v, mpmath.mpf(wt), "gate")
            if unit.bias:
                net.edge(const, v, mpmath.mpf(unit.bias), "gate")
        src_of[g.name] = v
    ctl_src: dict[str, int] = {}
    for lab, sig in zip(labels, circ.outputs):
        if sig not in src_of or sig in circ.inputs:  # an output that is a port: a BUF gate reads it
            v = net.vertex(f"gate:buf:{sig}")
            net.comp.append(v)
            net.edge(src_of[sig], v, one, "gate")
            src_of[sig] = v
            net.gates += 1
        ctl_src[lab] = src_of[sig]
    # the rest of each copy, its controls, and the output control vertices
    for k in keys:
        lab = f"M'{list(k)}".replace(" ", "")
        for vn in ("vc", "vc'"):
            v = net.vertex(f"{lab}.{vn}")
            net.copies[k][vn] = v
            net.edge(const, v, one, "control")
            net.edge(ctl_src[f"M'[{k[0]},{k[1]},{k[2]}].{vn}"], v, half, "control")
        for vn in ("v3", "v4"):
            net.copies[k][vn] = net.vertex(f"{lab}.{vn}")
    ocs = []
    for t0 in range(t + 1):
        v = net.vertex(f"oc[{t0}]")
        ocs.append(v)
        if t0 < t:
            net.edge(const, v, one, "oc")
            net.edge(ctl_src[f"oc[{t0}]"], v, half, "oc")
        else:
            net.edge(ctl_src[f"oc[{t}].a"], v, half, "oc")
            net.edge(ctl_src[f"oc[{t}].b"], v, half, "oc")
    out = net.vertex("out")
    for k in keys:
        net.copies[k]["v5"] = out
        net.copy_edges[k] = {e: net.edge(net.copies[k][e[0]], net.copies[k][e[1]], tmpl.weights[e], "mprime")
                             for e in tmpl.weights}
    w_oc = oc_out_weight(n)
    for t0 in range(t):
        net.oc_out[t0] = net.edge(ocs[t0], out, w_oc, "oc_out")
    net.oc_out[t] = net.edge(ocs[t], out, mpmath.mpf(49) / 100, "oc_out")
    return net


# ---------------------------------------------------------------- perturbed SGD
class NoisyEngine:
    """Forward / backward / perturbed SGD over a :class:`NoisyNet` in mpmath (f* everywhere;
    L(x) = x^2 on (output - label); w <- w - gamma y_u delta_v + noise, every edge, every step).
    A small reverse mode of its own: train.Engine is tied to §4.1's Net (f, Mono numbers)."""

    def __init__(self, net: NoisyNet, gamma: Number | None = None):
        self.net = net
        self.dps = check_dps(net.dps)
        with mpmath.workdps(self.dps):
            self.gamma = gamma42() if gamma is None else gamma
        V = len(net.names)
        self.ins = [[] for _ in range(V)]
        self.outs = [[] for _ in range(V)]
        for e, (u, v) in enumerate(zip(net.src, net.dst)):
            self.ins[v].append(e)
            self.outs[u].append(e)
        self.n_in = net.lr.n
        self.z: list[Number] = [mpmath.mpf(0)] * V
        self.y: list[Number] = [mpmath.mpf(0)] * V

    def forward(self, x) -> Number:
        """One forward pass on net input 2x - 1 (x bits) at the net's precision; returns the
        output vertex's output."""
        with mpmath.workdps(self.dps):
            return self._forward(x)

    def _forward(self, x) -> Number:
        net, w, src, z, y = self.net, self.net.w, self.net.src, self.z, self.y
        y[0] = mpmath.mpf(1)
        for i in range(self.n_in):
            y[1 + i] = mpmath.mpf(2 * int(x[i]) - 1)
        for v in range(1 + self.n_in, len(net.names)):
            acc = mpmath.mpf(0)
            for e in self.ins[v]:
                yu = y[src[e]]
                if yu:
                    acc += w[e] * yu
            z[v] = acc
            y[v] = fstar_mp(acc)
        return y[-1]

    def backward(self, label: int) -> dict[int, Number]:
        """dL/dw for every edge with a nonzero gradient (after :meth:`forward`)."""
        with mpmath.workdps(self.dps):
            return self._backward(label)

    def _backward(self, label: int) -> dict[int, Number]:
        net, w, dst, z, y = self.net, self.net.w, self.net.dst, self.z, self.y
        V = len(net.names)
        delta: list[Number] = [0] * V
        delta[V - 1] = dfstar_mp(z[V - 1]) * 2 * (y[V - 1] - label)
        grads: dict[int, Number] = {}
        for v in range(V - 1, 0, -1):
            if v < V - 1:
                d = 0
                for e in self.outs[v]:
                    dv = delta[dst[e]]
                    if dv:
                        d += w[e] * dv
                if not d:
                    continue
                fp = dfstar_mp(z[v])
                if not fp:
                    continue
                delta[v] = fp * d
            if delta[v]:
                for e in self.ins[v]:
                    yu = y[net.src[e]]
                    if yu:
                        grads[e] = yu * delta[v]
        return grads


@dataclass
class Violation:
    step: int
    what: str


@dataclass
class NoisyReport:
    outputs: list[Number]           # the net's output on each training step (Lemma 6 claim 3)
    final: Number                   # the output on the test input
    expected: int                   # h(x(0), y(0), ..., x) in {0,1}
    noise_max: Number               # max |delta| actually injected into one edge in one step
    steps: int
    seconds: float
    violations: list[Violation]
    #: the net's output on each of ``tests`` (after training, weights as left), and h there
    test_outputs: list[Number] = field(default_factory=list)
    test_expected: list[int] = field(default_factory=list)
    #: the output vertex's input on each training step (:func:`lemma6_center` without noise)
    z_out: list[Number] = field(default_factory=list)
    #: Lemma 5's hypothesis on each pass (t training steps, then the test input): the
    #: smallest |input| - 3/2 over the computation component's vertices, and that vertex
    slack: list[tuple[Number, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Lemma 6's conclusion (|final - (2h - 1)| < 1/2) and every per-step check."""
        return not self.violations and abs(self.final - (2 * self.expected - 1)) < mpmath.mpf(1) / 2


def comp_slack(eng: NoisyEngine) -> tuple[Number, str]:
    """Lemma 5 on the last pass: min over the computation component's vertices (reads and
    gates) of |input| - 3/2, and where.  >= 0 is the lemma's requirement (f* = ±2 and
    f*' = 0 there for any f* the paper allows); ours saturates from cbrt 2 < 3/2."""
    net, z = eng.net, eng.z
    with mpmath.workdps(eng.dps):
        v = min(net.comp, key=lambda u: abs(z[u]))
        return abs(z[v]) - mpmath.mpf(3) / 2, net.names[v]


def _check_gates(eng: NoisyEngine, step: int) -> list[Violation]:
    """Every vertex of the computation component outputs ±2 with f*' = 0 (Lemma 5, claim 1:
    nothing backpropagates through it): its input is at least :func:`saturation` in size."""
    net, z = eng.net, eng.z
    with mpmath.workdps(eng.dps):
        c = saturation()
        return [Violation(step, f"Lemma 5: {net.names[v]} has input {mpmath.nstr(z[v], 8)}, inside "
                                f"(-cbrt 2, cbrt 2): not saturated, f*' != 0")
                for v in net.comp if abs(z[v]) < c]


def decode(eng: NoisyEngine) -> tuple[dict, list[str]]:
    """Read the memory from the last forward pass: per copy (set?, label bit) from v2 / vr
    (Lemma 4's intervals; a value in the gap [2^-21, 2^-15] 3^-3/2 is an error) and, as the
    net itself sees it, from the read vertices (±2)."""
    net, y = eng.net, eng.y
    r = mpmath.mpf(3) ** (-mpmath.mpf(3) / 2)
    lo, hi = mpmath.mpf(2) ** -21 * r, mpmath.mpf(2) ** -15 * r
    mem, errs = {}, []
    for k, vid in net.copies.items():
        v2, vr = y[vid["v2"]], y[vid["vr"]]
        if lo <= v2 <= hi:
            errs.append(f"v2 of M'{k} = {mpmath.nstr(v2, 5)} in the read gap")
        if abs(vr) != 2:
            errs.append(f"vr of M'{k} = {mpmath.nstr(vr, 5)} is not ±2")
        s, lab = int(v2 > hi), int(vr > 0)
        seen = (int(y[net.index[f'read:v2[{k}]']] > 0), int(y[net.index[f'read:vr[{k}]']] > 0))
        if seen != (s, lab):
            errs.append(f"read vertices of M'{k} see {seen}, memory holds {(s, lab)}")
        mem[k] = (s, lab)
    return mem, errs


def _check_memory(eng: NoisyEngine, step: int, xs, ys) -> list[Violation]:
    """The decoded samples equal the stream x(0..step-1), y(0..step-1) (module doc)."""
    mem, errs = decode(eng)
    out = [Violation(step, e) for e in errs]
    for (t0, i, z), (s, lab) in mem.items():
        want = int(t0 < step and int(xs[t0][i]) == z)
        if s != want:
            out.append(Violation(step, f"M'[{t0},{i},{z}] set={s}, stream says {want}"))
        if s and i == 0 and lab != int(ys[t0]):
            out.append(Violation(step, f"label of step {t0} decoded {lab}, stream {ys[t0]}"))
    return out


def train_noisy(lr: NoisyLearner, xs, ys, x_test, *, noise: float | Number = 1.0, seed: int = 0,
                bound: Number | None = None, net: NoisyNet | None = None, check: bool = True,
                mode: str = "uniform", tests=(), progress=None, dps: int | None = None,
                drift: Mapping[int, Number] | None = None) -> NoisyReport:
    """Lemma 6: perturbed SGD on G_n over (2x(k) - 1, 2y(k) - 1), k < t, then run on 2x - 1.

    Noise: every edge, every step, delta = noise * bound * u with u uniform in [-1, 1]
    (``mode="uniform"``) or u = ±1 (``mode="max"``: the bound attained); ``bound`` defaults to
    :func:`noise_bound`.  ``noise = 0`` is plain SGD; ``noise > 1`` leaves Lemma 6.
    ``drift``: edge -> a fixed change added at every step on top of that (Lemma 5's
    adversary, :func:`.lemma5.adversarial_drift`).
    Checks (``check``): before each step and at the test input, the memory decoded from v2 / vr
    and from the read vertices equals the stream so far; the output on step k is within eps'
    of 1/2; every vertex of the computation component is saturated (Lemma 5); every edge
    outside the copies of M' (except oc[k] -> out on step k, which Lemma 6's proof lets move)
    has gradient exactly 0 and, after each step, weight = initial + the sum of the noise
    injected into it (up to 10^(10 - dps) relative rounding).

    ``dps``: the precision of a net built here (default :data:`DPS`); a given ``net`` runs at
    its own.  ``tests``: more inputs to run the trained net on (no training on them; the
    memory is checked after each, and Lemma 6's |output - (2h - 1)| < 1/2 is a violation when
    it fails); ``progress(k)`` is called after each of the t steps and each test (k = 1, 2, ...)."""
    if net is None:
        net = build_noisy_net(lr, DPS if dps is None else dps)
    elif dps is not None and dps != net.dps:
        raise Tm2nnError(f"dps {dps} given for a net built at {net.dps} digits")
    with mpmath.workdps(net.dps):
        return _train(lr, xs, ys, x_test, noise, seed, bound, net, check, mode, tests, progress, drift or {})


def _train(lr, xs, ys, x_test, noise, seed, bound, net, check, mode, tests, progress, drift) -> NoisyReport:
    n, t = lr.n, lr.t
    eng = NoisyEngine(net)
    rng = random.Random(seed)
    scale = mpmath.mpf(noise) * (noise_bound(n, t) if bound is None else bound)
    half, epsp = mpmath.mpf(1) / 2, eps_prime42()
    outputs, z_out, slack, viol, nmax = [], [], [], [], mpmath.mpf(0)
    w0, nsum, moved = list(net.w), [mpmath.mpf(0)] * len(net.w), set()
    tol = mpmath.mpf(10) ** (10 - net.dps)
    t_start = time.perf_counter()
    for k in range(t):
        yk = eng.forward(xs[k])
        outputs.append(yk)
        z_out.append(eng.z[-1])
        slack.append(comp_slack(eng))
        if check:
            viol += _check_memory(eng, k, xs, ys) + _check_gates(eng, k)
            if abs(yk - half) > epsp:
                viol.append(Violation(k, f"output {mpmath.nstr(yk, 8)} not within eps' of 1/2"))
        grads = eng.backward(2 * int(ys[k]) - 1)
        if check:
            for e, g in grads.items():
                if net.part[e] != "mprime" and e != net.oc_out[k]:
                    viol.append(Violation(k, f"edge {net.names[net.src[e]]}->{net.names[net.dst[e]]} "
                                             f"({net.part[e]}) has gradient {mpmath.nstr(g, 5)}"))
        for e, g in grads.items():
            net.w[e] -= eng.gamma * g
        moved.add(net.oc_out[k])
        if scale or drift:
            for e in range(len(net.w)):
                d = 0
                if scale:
                    d = scale * (rng.choice((-1, 1)) if mode == "max" else rng.uniform(-1.0, 1.0))
                d += drift.get(e, 0)
                net.w[e] += d
                nsum[e] += d
                nmax = max(nmax, abs(d))
        if check:  # outside M' (and the used oc -> out edges): w = w0 + sum of the noise
            for e in range(len(net.w)):
                if net.part[e] != "mprime" and e not in moved and \
                        abs(net.w[e] - w0[e] - nsum[e]) > tol * max(1, abs(w0[e])):
                    viol.append(Violation(k, f"edge {net.names[net.src[e]]}->{net.names[net.dst[e]]} "
                                             f"moved by more than its noise"))
        if progress is not None:
            progress(k + 1)
    final = eng.forward(x_test)
    slack.append(comp_slack(eng))
    if check:
        viol += _check_memory(eng, t, xs, ys) + _check_gates(eng, t)
    secs = time.perf_counter() - t_start
    expected = lr(xs, ys, x_test)
    touts, texp = [], []
    for j, x in enumerate(tests):
        touts.append(eng.forward(x))
        texp.append(lr(xs, ys, x))
        if check:
            viol += _check_memory(eng, t, xs, ys) + _check_gates(eng, t)
            if abs(touts[-1] - (2 * texp[-1] - 1)) >= half:
                viol.append(Violation(t, f"test input {j}: output {mpmath.nstr(touts[-1], 8)}, "
                                         f"h = {texp[-1]} (Lemma 6: within 1/2 of {2 * texp[-1] - 1})"))
        if progress is not None:
            progress(t + j + 1)
    return NoisyReport(outputs, final, expected, nmax, t, secs, viol, touts, texp, z_out, slack)


def size_report(net: NoisyNet) -> list[tuple[str, str, str]]:
    """(quantity, this net, paper) rows for ``tm2nn info --backend abbe-sandon`` on a §4.2
    learner (Lemma 6's G_n)."""
    lr = net.lr
    sz = net.sizes()
    with mpmath.workdps(net.dps):
        distinct = len({mpmath.nstr(w, net.dps) for w in net.w})
        gamma, nb = mpmath.nstr(gamma42(), 8), mpmath.nstr(noise_bound(lr.n, lr.t), 6)
        l6 = mpmath.nstr(lemma6_bound(lr.n, lr.t), 6)
    return [
        ("net inputs x", f"{lr.n}", "n"),
        ("samples t", f"{lr.t}", "t_n"),
        ("h gates", f"{len(lr.h.gates)}", "-"),
        ("copies of M'", f"{sz['copies']}", "2 n t (Lemma 6)"),
        ("schedule gates", f"{sz['schedule_gates']}", "gates of h + the schedule (Lemma 5)"),
        ("vertices", f"{sz['vertices']}", "-"),
        ("edges", f"{sz['edges']}", "-"),
        ("distinct weights", f"{distinct}", "-"),
        ("gamma", gamma, "2^(716/3) 3^24 (Lemma 4)"),
        ("noise bound per step", nb, f"1/(n^2 t) = {l6} (Lemma 6); min with eps/t (Lemma 4)"),
    ]


__all__ = ["DPS", "MAX_DPS", "MIN_DPS", "MP_PATH", "NoisyEngine", "NoisyNet", "NoisyReport", "build_noisy_net",
           "check_dps", "comp_slack", "decode", "dfstar_mp", "eps42", "eps_prime42", "fstar_mp", "gamma42",
           "lemma6_bound", "lemma6_center", "noise_bound", "oc_out_weight", "saturation", "schedule_circuit",
           "size_report", "train_noisy"]
