"""§5 of Welper, *Universality of Gradient Descent Neural Network Training*: the extended
network ``F(x, (s, t))`` whose least-squares training (2) with the mixed Frank–Wolfe /
gradient update (3) ends, after ``k_t + 1`` steps (Prop. 2.1), with ``F(x) =
f_theta(x)`` for the weights ``theta = TM(x, y)`` a Turing machine computed.

The net (Figure 1), all network-IR ops (``x`` is the whole dataset, ``n`` samples of ``M``
features, one row of the batch; labels ``y`` are ``n`` numbers, ``m = 1``):

* ``z`` (Param, ``n``, starts at 0): §5.2, receives the labels in the first step;
* ``ro`` — the read-only tape: App. B's quantisation of ``x`` and of ``\\z\\``
  (stop-gradient; :func:`.fixed_point.quantise_ops`, any :class:`~.fixed_point.FixedPoint`
  format), then the machine's input encoding (an affine map of the bits, derived from the
  lowering and checked, :meth:`Extended._ro_map`);
* ``s``, ``T``, ``H`` (Params) and ``l_TM`` — the §4.4 loss (21) of the machine in §4.1 form
  (:meth:`TapeSimplex.loss_ops`);
* ``f_TM = sqrt(2 l_TM) f_perp(\\z\\)`` (§5.4) with App. C's orthogonal unit vector;
* ``theta`` — App. B's de-quantisation of the output tape ``\\T\\``
  (:func:`.fixed_point.dequantise_ops`); ``f_theta(x)`` — the primary network the layout
  names (:func:`.layout.primary_shape`: ``theta^T x_i``, ``theta^T x_i + b``, or one hidden ReLU layer ``relu:H``) per sample;
* ``s_net(f, u) = (1 - phi(|u|^2)) f + phi(|u|^2) u`` (§5.3) and ``s_init(u, z) = (1 -
  psi(|z|^2)) u + psi(|z|^2) z`` (§5.2), ``phi``, ``psi`` ReLU cutoffs (nested, so they
  are exactly 0 or 1 off their ramps: :func:`_switch`);
* output ``out = s_init(s_net(f_theta, f_TM), z)``.

Constants (§5.4, option 2, derived in docs/gd_trace.md "§5"): ``B_stop`` bounds the
primary net's training error, ``b = 2 choose_b(d)``, ``gamma = B_stop / (2 (8 b^2 d + 3
d))``, ``c`` in the middle of ``(B_stop, B_stop + (b^3 - 8 b^2 d - 3 d) gamma)``, ``B_lo =
B_stop < B_hi = (B_stop + c) / 2 <= c``; :class:`Constants` checks every inequality, and
:func:`train` checks (23), (29) and (33) at every step (:func:`check_step`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn import emit
from tm2nn.devices import torch_device
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine
from tm2nn.ir.multitape import MConfig
from tm2nn.nets import (
    Activation,
    Affine,
    Concat,
    Mul,
    Net,
    Param,
    Port,
    ReLU,
    Space,
    SparseMatrix,
    StopGradient,
)
from tm2nn.passes.welper_form import to_welper_form

from . import perceptron, sign_sum
from .fixed_point import FixedPoint, dequantise_ops, quantise_ops
from .layout import Layout
from .optimizer import conditional_gradient
from .tape_simplex import TapeSimplex, choose_b


@dataclass(frozen=True)
class Constants:
    """The constants of §5.3/§5.4 (option 2), with the inequalities they must satisfy."""

    B_stop: float
    b: float
    gamma: float
    c: float
    B_lo: float
    B_hi: float
    eps: float   # (5): |y|^2 >= eps
    d: int

    @classmethod
    def choose(cls, B_stop: float, d: int, eps: float) -> "Constants":
        b = 2.0 * choose_b(d)
        K = 8 * b * b * d + 3 * d
        gamma = B_stop / (2 * K)
        c = B_stop + (b ** 3 - K) * gamma / 2
        k = cls(B_stop, b, gamma, c, B_stop, (B_stop + c) / 2, eps, d)
        k.check()
        return k

    @property
    def halting_max(self) -> float:
        """(23): the largest l_TM at a halting vertex."""
        return self.c + (8 * self.b ** 2 * self.d + 3 * self.d - self.b ** 3) * self.gamma

    @property
    def halting_min(self) -> float:
        return self.c - self.b ** 3 * self.gamma

    def check(self) -> None:
        """§5.4 option 2: ``c + 8b^2 d g + 3 d g - b^3 g < B_stop = B_lo < B_hi <= c``, and
        ``l_TM > 0`` everywhere (the square root), i.e. ``c - b^3 g > 0``."""
        if not (self.halting_max < self.B_stop == self.B_lo < self.B_hi <= self.c and self.halting_min > 0
                and self.B_stop > 0 and self.eps > 0):
            raise AssertionError(f"§5.4 constants violate their inequalities: {self}")

    @property
    def phi_ramp(self) -> tuple[float, float]:
        """``phi(t) = 0`` for ``t <= 2 B_lo + delta``, 1 for ``t >= 2 B_hi - delta``."""
        delta = (self.B_hi - self.B_lo) / 2
        return 2 * self.B_lo + delta, 2 * self.B_hi - delta


def _aff(name, inp, w: np.ndarray, out: Space, bias=None, cite: str = "") -> Affine:
    return Affine(name, (inp,), weight=SparseMatrix.from_dense(np.atleast_2d(w)),
                  bias=None if bias is None else np.asarray(bias, dtype=np.float64), out=out, cite=cite)


def _sp(g: str, k: int) -> Space:
    return Space.named(g, range(k))


class Extended:
    """The extended network of §5 for a source machine, its §4.1 lowering and a layout.
    ``constants`` replaces the §5.4 constants (unchecked: the mutation tests break them
    on purpose); by default they are :meth:`Constants.choose`'s for the layout's
    ``B_stop`` and ``eps``."""

    def __init__(self, m: Machine, layout: Layout, B_stop: float | None = None,
                 constants: Constants | None = None, vertices: str = "reachable"):
        self.m, self.layout = m, layout
        bad = [d for d in layout.digits if d not in m.symbol_index]
        if bad:
            raise Tm2nnError(f"the layout's bit symbols (digits) {''.join(layout.digits)!r} must be symbols of "
                             f"{m.name!r} ({' '.join(m.alphabet)}); {bad[0]!r} is not")
        self.low = to_welper_form(m)
        n, M = layout.n, layout.M
        text_len = len(layout.text_of_bits(np.zeros((n, M, layout.x.width)), np.zeros((n, layout.y.width))))
        # within T source steps the head and every written cell stay in [-T, len + T], or
        # in the cells the machine declares (a head leaving them fails Prop. 4.3's check)
        left, tau = self.low.window(*layout.window, text_len)
        self.left, self.tau, self.text_len = left, tau, text_len
        # (4): B_stop bounds |f_theta(x) - y|^2 / 2 over the layout's formats (Layout.B_stop)
        self.k = constants if constants is not None else Constants.choose(
            B_stop if B_stop is not None else layout.B_stop, self.low.machine.tapes, eps=layout.eps)
        self.ro_map = self._ro_map()
        # the vertices a run reaches (tape_simplex.reachable_rounds, reachable_reads, with
        # the read-only cells no data bit changes): the same iterates as the paper's full
        # Qbar x {-1, 1}^d, a third of it for an acyclic learner such as the perceptron,
        # half the edges for sign_sum (docs/gd_trace.md, "Reachable vertices")
        A, a = self.ro_map
        fixed = {left + i: int(a[i]) for i in np.flatnonzero(~A.any(axis=1))}
        self.ts = TapeSimplex(self.low.machine, tau, left, b=self.k.b, gamma=self.k.gamma, c=self.k.c,
                              vertices=vertices, ro_fixed=fixed)
        self.net = self.build()

    # -- the read-only tape as an affine function of the quantised bits ----------------------
    def _ro_vec(self, text: str) -> np.ndarray:
        cells = self.low.lower_input(text)[0]
        v = np.full(self.tau, -1.0)
        for c in cells:
            if not self.left <= c < self.left + self.tau:
                raise Tm2nnError("the encoded dataset does not fit the tape window")
            v[c - self.left] = 1.0
        return v

    @property
    def n_bits(self) -> int:
        """App. B bits of one dataset: every feature's, then every label's."""
        lay = self.layout
        return lay.n * lay.M * lay.x.width + lay.n * lay.y.width

    def _ro_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(A, a)`` with ``ro = a + A q`` for the App. B bits ``q`` (0/1) of the features
        then the labels (:func:`.fixed_point.quantise_ops`' order); derived by setting one
        bit at a time, then checked on random bits (the machine's input encoding of a bit
        must be local and affine)."""
        lay = self.layout
        nx = lay.n * lay.M * lay.x.width

        def ro(q):
            return self._ro_vec(lay.text_of_bits(q[:nx], q[nx:]))
        nb = self.n_bits
        a = ro(np.zeros(nb, dtype=np.int64))
        A = np.zeros((self.tau, nb))
        for i in range(nb):
            q = np.zeros(nb, dtype=np.int64)
            q[i] = 1
            A[:, i] = ro(q) - a
        rng = np.random.default_rng(0)
        for _ in range(8):
            q = rng.integers(0, 2, nb)
            if not np.array_equal(a + A @ q, ro(q)):
                raise Tm2nnError("the machine's input encoding is not an affine function of the data bits")
        return A, a

    # -- the net ----------------------------------------------------------------------------
    def build(self) -> Net:
        lay = self.layout
        n, M = lay.n, lay.M
        k, ts = self.k, self.ts
        x = Port("x", Space(tuple(f"x:{i}.{j}" for i in range(n) for j in range(M))))
        ops: list = [Param("z", ("x",), value=np.zeros(n), out=_sp("z", n), cite="Welper §5.2 z (copy of the labels)"),
                     StopGradient("zg", ("z",))]
        # App. B quantisation of the features and of \z\, then the machine's input encoding
        ops.append(Concat("xz", ("x", "zg")))
        qops, bits = quantise_ops("q/", "xz", [lay.x] * (n * M) + [lay.y] * n,
                                  [f"x{i}.{j}" for i in range(n) for j in range(M)] + [f"y{i}" for i in range(n)])
        ops += qops
        A, a = self.ro_map
        ops.append(_aff("ro", bits, A, ts.labels()["ro"], bias=a, cite="the machine's input encoding (welper_form)"))
        ops += ts.state_ops("x", "ro")
        ops, loss = ts.loss_ops(ops, "s", "tape", "H", "tm/")
        # f_TM = sqrt(2 l_TM) f_perp(z)  (§5.4, App. C)
        ops.append(_aff("two_l", loss, [[2.0]], Space(("2l:0",))))
        ops.append(Activation("sqrt2l", ("two_l",), fn="sqrt", cite="Welper §5.4 sqrt(2 l_TM)"))
        ops += self._f_perp()
        ops.append(_aff("sqrt_rep", "sqrt2l", np.ones((n, 1)), _sp("sqrtrep", n)))
        ops.append(Mul("f_TM", ("sqrt_rep", "f_perp"), out=_sp("fTM", n)))
        # theta = App. B de-quantisation of the output tape \T\; then the primary network
        ops.append(StopGradient("Tg", ("T",)))
        dops, _ = dequantise_ops("theta/", "Tg", self.tau, self._theta_bits(),
                                 [f"theta:{p}" for p in lay.shape.param_names(M)], out="theta")
        ops += dops
        pops, f = lay.shape.ops("x", "theta", n, M)
        ops += pops
        # s_net(f, u): phi ramp on |u|^2 (§5.3)
        lo, hi = k.phi_ramp
        ops += _switch("net", f, "f_TM", n, lo, hi, rising=True)
        # s_init(u, z): psi = 1 below eps/3, 0 above 2 eps/3 (§5.2), z live
        ops += _switch("init", "net_out", "z", n, k.eps / 3, 2 * k.eps / 3, rising=False)
        return Net("welper_extended", (x,), tuple(ops), ("init_out",),
                   {"construction": "Welper §5 extended network (Figure 1)",
                    "primary": f"{lay.primary}: {lay.shape.doc}"})

    def _theta_bits(self) -> list:
        """Per weight: its format and, per bit, ``(index into T, orientation)``: the lowered
        work-tape cell where the codes of the two digit symbols differ, orientation ``+1``
        when bit 1's code has ``+`` there."""
        lay = self.layout
        code = self.low.binary.code
        c0, c1 = code[lay.digits[0]], code[lay.digits[1]]
        k = next(i for i in range(len(c0)) if c0[i] != c1[i])
        w = self.low.width
        orient = 1.0 if c1[k] == "+" else -1.0
        out = []
        for c in lay.theta_cells:
            cells = []
            for i in range(lay.w.width):
                cell = (c + i) * w + k
                if not self.left <= cell < self.left + self.tau:
                    raise Tm2nnError(f"weight cell {c + i} is outside the tape window")
                cells.append((cell - self.left, orient))
            out.append((lay.w, cells))
        return out

    def _f_perp(self) -> list:
        """App. C: ``ybar = v - (z^T v / z^T z) z`` with ``v = e_0``, or with ``w = e_1`` when
        ``v`` is nearly parallel to ``z`` (switch on ``|ybar_v|^2``), normalised.  ``z^T z``
        is guarded below by ``eps/3`` (our addition: at ``z = 0`` in the first step the
        branch is switched off, but ``1/0`` would make it NaN)."""
        n, eps = self.layout.n, self.k.eps
        ops = [Mul("zz2", ("zg", "zg"), out=_sp("zz2", n)),
               _aff("zz_pre", "zz2", np.ones((1, n)), Space(("zz:0",)), bias=[-eps / 3]),
               ReLU("zz_relu", ("zz_pre",)),
               _aff("zz", "zz_relu", [[1.0]], Space(("zzg:0",)), bias=[eps / 3]),
               Activation("inv_zz", ("zz",), fn="reciprocal", cite="Welper App. C division by z^T z"),
               _aff("zvw", "zg", np.eye(2, n), _sp("zvw", 2)),
               _aff("inv_rep2", "inv_zz", np.ones((2, 1)), _sp("inv2", 2)),
               Mul("coef", ("zvw", "inv_rep2"), out=_sp("coef", 2)),          # z^T v / z^T z, z^T w / z^T z
               _aff("coef_rep", "coef", np.kron(np.eye(2), np.ones((n, 1))), _sp("coefrep", 2 * n)),
               _aff("z_rep", "zg", np.vstack([np.eye(n), np.eye(n)]), _sp("zrep", 2 * n)),
               Mul("proj", ("coef_rep", "z_rep"), out=_sp("proj", 2 * n))]
        ev = np.r_[np.eye(n)[0], np.eye(n)[1]]
        ops.append(_aff("ybar", "proj", -np.eye(2 * n), _sp("ybar", 2 * n), bias=ev))  # [ybar_v; ybar_w]
        ops.append(Mul("ybar2", ("ybar", "ybar"), out=_sp("ybar2", 2 * n)))
        ops.append(_aff("sig_pre", "ybar2", np.vstack([np.r_[np.ones(n), np.zeros(n)]] * 2) / 0.05,
                        _sp("sigpre", 2), bias=[-0.45 / 0.05, -0.5 / 0.05]))
        ops.append(ReLU("sig_relu", ("sig_pre",)))
        ops.append(_aff("sig_rep", "sig_relu", np.tile([[1.0, -1.0]], (n, 1)), _sp("sigrep", n)))
        ops.append(_aff("vmw", "ybar", np.hstack([np.eye(n), -np.eye(n)]), _sp("vmw", n)))
        ops.append(Mul("mix", ("sig_rep", "vmw"), out=_sp("mix", n)))
        ops.append(Concat("mix_w", ("mix", "ybar")))
        ops.append(_aff("y_un", "mix_w", np.hstack([np.eye(n), np.zeros((n, n)), np.eye(n)]), _sp("yun", n)))
        ops.append(Mul("y_un2", ("y_un", "y_un"), out=_sp("yun2", n)))
        ops.append(_aff("y_nrm2", "y_un2", np.ones((1, n)), Space(("ynrm2:0",))))
        ops.append(Activation("y_nrm", ("y_nrm2",), fn="sqrt"))
        ops.append(Activation("y_inv", ("y_nrm",), fn="reciprocal"))
        ops.append(_aff("y_inv_rep", "y_inv", np.ones((n, 1)), _sp("yinvrep", n)))
        ops.append(Mul("f_perp", ("y_un", "y_inv_rep"), out=_sp("fperp", n)))
        return ops


def _switch(tag: str, a: str, b: str, n: int, lo: float, hi: float, rising: bool) -> list:
    """``out = (1 - r) a + r b`` with the cutoff ``r(|b|^2)`` from 0 at ``lo`` to 1 at
    ``hi`` (``rising``, §5.3's ``phi``: ``s_net(f, u)`` reads ``|u|^2``) or from 1 to 0
    (``not rising``, §5.2's ``psi``: ``s_init(u, z)`` reads ``|z|^2``).

    The ramp is two ReLU units in sequence, ``r = 1 - relu(1 - relu(p))`` with ``p = (t -
    lo) / (hi - lo)`` (= ``min(max(p, 0), 1)``): outside ``[lo, hi]`` it is exactly 0 or 1
    in floating point (``relu(p) - relu(p - 1)``, the paper's two parallel units, can be
    off by one rounding), and with the mix ``(1 - r) a + r b`` the switch passes ``a`` or
    ``b`` bit for bit, so ``F = f_theta`` holds exactly in float64, not up to rounding."""
    t = tag
    ops = [Mul(f"{t}_b2", (b, b), out=_sp(f"{t}b2", n)),
           _aff(f"{t}_nrm", f"{t}_b2", np.ones((1, n)), Space((f"{t}nrm:0",))),
           _aff(f"{t}_pre", f"{t}_nrm", [[1.0 / (hi - lo)]], Space((f"{t}pre:0",)), bias=[-lo / (hi - lo)]),
           ReLU(f"{t}_relu", (f"{t}_pre",)),
           _aff(f"{t}_pre2", f"{t}_relu", [[-1.0]], Space((f"{t}pre2:0",)), bias=[1.0]),
           ReLU(f"{t}_o", (f"{t}_pre2",))]   # o = 1 - r
    # the weights [on a; on b]: rising (phi = r): [o; 1 - o]; falling (psi = 1 - r): [1 - o; o]
    sgn = np.r_[np.ones(n), -np.ones(n)] if rising else np.r_[-np.ones(n), np.ones(n)]
    ops.append(_aff(f"{t}_rep", f"{t}_o", sgn[:, None], _sp(f"{t}rep", 2 * n),
                    bias=np.r_[np.zeros(n), np.ones(n)] if rising else np.r_[np.ones(n), np.zeros(n)],
                    cite="Welper §5.3 phi" if rising else "Welper §5.2 psi"))
    ops.append(Concat(f"{t}_ab", (a, b)))
    ops.append(Mul(f"{t}_mix", (f"{t}_rep", f"{t}_ab"), out=_sp(f"{t}mix", 2 * n)))
    ops.append(_aff(f"{t}_out", f"{t}_mix", np.hstack([np.eye(n), np.eye(n)]), _sp(f"{t}out", n),
                    cite="Welper §5.3 s_net" if rising else "Welper §5.2 s_init"))
    return ops


class BoundViolation(AssertionError):
    """A quantity the paper proves was violated at an optimizer step of §5 training (a
    broken construction, never bad user input): ``step``, the equation, the bound and
    the value."""

    def __init__(self, step: int, eq: str, want: str, got: float):
        self.step, self.eq, self.want, self.got = step, eq, want, got
        super().__init__(f"{eq} fails at optimizer step {step}: expected {want}, got {got!r}")


#: relative tolerance of (33) (float64 rounding of sqrt and the unit vector f_perp)
TOL33 = 1e-9


def check_step(ext: Extended, k: int, ell: float, f2: float, halted: bool) -> None:
    """Welper's bounds at iterate ``k`` of §5 training (``ell = l_TM``, ``f2 = |f_TM|^2``):

    * (33) ``|f_TM|^2 = 2 l_TM``;
    * (23) ``c <= l_TM <= c + (8b^2 d + 3d) gamma`` before halting, and
      ``c - b^3 gamma <= l_TM <= c + (8b^2 d + 3d - b^3) gamma`` at a halting vertex;
    * (29) for ``k >= 1``: ``|f_TM|^2 > 2 B_hi`` before halting, ``< 2 B_lo`` at the halting
      vertex (so ``s_net`` passes ``f_TM``, then ``f_theta``).

    Raises :class:`BoundViolation` at the first that fails."""
    if abs(f2 - 2 * ell) > TOL33 * max(1.0, 2 * abs(ell)):
        raise BoundViolation(k, "(33) |f_TM|^2 = 2 l_TM", f"{2 * ell!r}", f2)
    lo, hi = ext.ts.bounds23(halted)
    if not lo - 1e-9 <= ell <= hi + 1e-9:
        raise BoundViolation(k, "(23)", f"l_TM in [{lo:.9g}, {hi:.9g}]" + (" (halting)" if halted else ""), ell)
    if k >= 1:
        K = ext.k
        if not halted and not f2 > 2 * K.B_hi:
            raise BoundViolation(k, "(29)", f"|f_TM|^2 > 2 B_hi = {2 * K.B_hi:.9g} before halting", f2)
        if halted and not f2 < 2 * K.B_lo:
            raise BoundViolation(k, "(29)", f"|f_TM|^2 < 2 B_lo = {2 * K.B_lo:.9g} at the halting vertex", f2)


@dataclass
class TrainResult:
    """One training run of (2)/(3): the optimizer steps until (4) held, the loss (2), the
    loss ``l_TM`` and ``|f_TM|^2`` at every iterate, the decoded §4.1 configuration at
    iterates 1..K, the weights ``theta`` read from the trained net, the trained net and a
    torch module of it."""

    steps: int
    losses: list[float]
    configs: list[MConfig]
    halted: list[bool]
    theta: np.ndarray
    module: object
    z: np.ndarray
    ell: list[float] = field(default_factory=list)
    f_tm2: list[float] = field(default_factory=list)
    net: Net | None = None   # the trained net (the Params' final values)


def train(ext: Extended, x: np.ndarray, y: np.ndarray, max_steps: int = 100_000, progress=None,
          device=None) -> TrainResult:
    """Least squares (2), update (3) (``s``: Frank–Wolfe; ``T``, ``H``: rate ``1/gamma``;
    ``z``: rate 1), stopping criterion (4) checked from the first step on (at iterate 0
    the loss is ``|y|^2 / 2``, which may already be below ``B_stop``: the paper's count
    ``k_t + 1`` starts with the step that reads the labels).  (23), (29) and (33) are
    checked at every iterate (:func:`check_step`; a violation raises
    :class:`BoundViolation` at once).  The module trains on ``device`` (default: the CPU;
    the checks read its values back); the trained module is returned there too."""
    import torch

    device = torch_device(device)

    x, y = ext.layout.check_data(x, y)
    if float(y @ y) < ext.k.eps:
        raise Tm2nnError(f"(5): |y|^2 = {float(y @ y):g} is below eps = {ext.k.eps:g}")
    # the training module reads the values the checks need as extra outputs (one pass)
    watched = ("init_out", "tm/loss", "f_TM", "ro", "theta")
    mod = emit.to_torch(Net(ext.net.name, ext.net.inputs, ext.net.nodes, watched, dict(ext.net.metadata)), torch.float64,
                        device)
    st = ext.ts.start(ext.low.lower_input(ext.layout.text(x, y)))
    with torch.no_grad():
        for name in ("s", "T", "H"):
            mod.op(name).value.copy_(torch.from_numpy(st[name]).to(device))
    g = ext.k.gamma
    opt = conditional_gradient([
        {"params": [mod.op("s").value], "kind": "simplex"},
        {"params": [mod.op("T").value, mod.op("H").value], "kind": "gd", "lr": 1.0 / g},
        {"params": [mod.op("z").value], "kind": "gd", "lr": 1.0},
    ])
    X = torch.from_numpy(x.reshape(1, -1)).to(device)
    Y = torch.from_numpy(y).to(device)
    losses, configs, halted, ells, f2s = [], [], [], [], []
    steps = 0
    for k in range(max_steps + 1):
        opt.zero_grad()
        out, ell_t, f_tm, ro, theta_t = mod(X)
        loss = 0.5 * ((out[0] - Y) ** 2).sum()
        losses.append(float(loss.detach()))
        ell = float(ell_t[0, 0].detach())
        f2 = float((f_tm[0].detach() ** 2).sum())
        ells.append(ell)
        f2s.append(f2)
        h = False
        if k >= 1:
            v = {name: mod.op(name).value.detach().cpu().numpy() for name in ("s", "T", "H")}
            try:
                cfg, h = ext.ts.decode(v["s"], v["T"], v["H"], ro[0].detach().cpu().numpy())
            except ValueError as e:   # Prop. 4.3: every iterate is a vertex with ±1 tapes
                where = (f" (did the head leave the declared cells={','.join(map(str, ext.layout.cells))}?)"
                         if ext.layout.cells is not None else "")
                raise BoundViolation(k, "Prop. 4.3 (the iterate is a configuration)", "a vertex",
                                     str(e) + where) from None
            configs.append(cfg)
            halted.append(h)
        check_step(ext, k, ell, f2, h)
        if k >= 1 and losses[-1] <= ext.k.B_stop:  # (4)
            break
        if k == max_steps:
            raise Tm2nnError(f"the stopping criterion (4) did not hold within {max_steps} optimizer steps "
                             f"(does the machine halt within the layout's steps={ext.layout.steps}?)")
        loss.backward()
        opt.step()
        steps = k + 1
        if progress:
            progress(steps)
    theta = theta_t[0].detach().cpu().numpy() + 0.0   # App. B's sigma = 1 on 0 gives -0: report 0
    t = mod.to_net()
    net = Net(t.name, t.inputs, t.nodes, ext.net.outputs, dict(t.metadata))
    return TrainResult(steps, losses, configs, halted, theta, emit.to_torch(net, torch.float64, device),
                       mod.op("z").value.detach().cpu().numpy().copy(), ells, f2s, net)


def sign_sum_layout(n: int, M: int) -> Layout:
    """The layout of :mod:`.sign_sum`'s machine (±1 data and weights, ``linear``)."""
    return Layout(n, M, tuple(sign_sum.output_cells(n, M)), sign_sum.step_bound(n, M),
                  cells=sign_sum.cell_bound(n, M))


def perceptron_layout(p) -> Layout:
    """The layout of a :class:`.perceptron.Perceptron` machine."""
    return Layout(p.n, p.M, tuple(perceptron.output_cells(p)), perceptron.step_bound(p), p.primary,
                  p.x_format, FixedPoint(), p.w_format, ("0", "1"))


__all__ = ["BoundViolation", "Constants", "Extended", "Layout", "TrainResult", "check_step", "perceptron_layout",
           "sign_sum_layout", "train"]
