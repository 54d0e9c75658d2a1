"""§5 of Welper, *Universality of Gradient Descent Neural Network Training*: the extended
network ``F(x, (s, t))`` whose least-squares training (2) with the mixed Frank–Wolfe /
gradient update (3) ends, after ``k_t + 1`` steps (Prop. 2.1), with ``F(x) =
f_theta(x)`` for the weights ``theta = TM(x, y)`` a Turing machine computed.

The net (Figure 1), all network-IR ops (``x`` is the whole dataset, ``n`` samples of ``M``
features, one row of the batch; labels ``y`` are ``n`` numbers, ``m = 1``):

* ``z`` (Param, ``n``, starts at 0): §5.2, receives the labels in the first step;
* ``ro`` — the read-only tape: App. B's quantisation of ``x`` and of ``\\z\\``
  (stop-gradient), then the machine's input encoding (an affine map, derived from the
  lowering and checked, :meth:`Extended.build`);
* ``s``, ``T``, ``H`` (Params) and ``l_TM`` — the §4.4 loss (21) of the machine in §4.1 form
  (:meth:`TapeSimplex.loss_ops`);
* ``f_TM = sqrt(2 l_TM) f_perp(\\z\\)`` (§5.4) with App. C's orthogonal unit vector;
* ``theta`` — App. B's de-quantisation of the output tape ``\\T\\``; ``f_theta(x)`` — the
  primary network, a linear classifier ``theta^T x_i`` per sample;
* ``s_net(f, u) = (1 - phi(|u|^2)) f + phi(|u|^2) u`` (§5.3) and ``s_init(u, z) = (1 -
  psi(|z|^2)) u + psi(|z|^2) z`` (§5.2), ``phi``, ``psi`` ReLU cutoffs;
* output ``out = s_init(s_net(f_theta, f_TM), z)``.

Constants (§5.4, option 2, derived in docs/gd_trace.md "§5"): ``B_stop`` bounds the
primary net's training error, ``b = 2 choose_b(d)``, ``gamma = B_stop / (2 (8 b^2 d + 3
d))``, ``c`` in the middle of ``(B_stop, B_stop + (b^3 - 8 b^2 d - 3 d) gamma)``, ``B_lo =
B_stop < B_hi = (B_stop + c) / 2 <= c``; :class:`Constants` checks every inequality.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

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

from .optimizer import ConditionalGradient
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


@dataclass(frozen=True)
class Layout:
    """How a dataset meets the machine: ``text(x, y)`` is the source input for ±1
    features ``x`` (``n x M``) and labels ``y``; the weights ``theta_j`` are read from
    source cells ``theta_cells[j]``, symbol ``a`` meaning ``theta_value[a]``."""

    n: int
    M: int
    text: object
    theta_cells: tuple[int, ...]
    theta_value: dict = field(default_factory=dict)
    steps: int = 1000  # a bound on the machine's source steps (sizes the tape window)

    @classmethod
    def from_header(cls, h: dict) -> "Layout":
        """The layout a ``# gd-trace:`` header declares (:func:`tm2nn.syntax.gd_layout.parse`):
        every sample's label then its features over ``+``/``-`` (:func:`.sign_sum.dataset_text`),
        ``theta_j`` read from source cell ``theta[j]`` (``+`` = +1, ``-`` = -1)."""
        from .sign_sum import dataset_text

        return cls(h["samples"], h["features"], dataset_text, tuple(h["theta"]), {"+": 1.0, "-": -1.0}, h["steps"])


def _aff(name, inp, w: np.ndarray, out: Space, bias=None, cite: str = "") -> Affine:
    return Affine(name, (inp,), weight=SparseMatrix.from_dense(np.atleast_2d(w)),
                  bias=None if bias is None else np.asarray(bias, dtype=np.float64), out=out, cite=cite)


def _sp(g: str, k: int) -> Space:
    return Space.named(g, range(k))


class Extended:
    """The extended network of §5 for a source machine, its §4.1 lowering and a layout."""

    def __init__(self, m: Machine, layout: Layout, B_stop: float | None = None):
        from tm2nn.passes.welper_form import to_welper_form

        if layout.n < 2:
            raise Tm2nnError("the extended network needs n >= 2 samples (App. C's f_perp uses two "
                             "orthonormal vectors of R^n)")
        self.m, self.layout = m, layout
        self.low = to_welper_form(m)
        n, M = layout.n, layout.M
        text_len = len(layout.text(np.ones((n, M), dtype=int), np.ones(n, dtype=int)))
        # within T source steps the head and every written cell stay in [-T, len + T]
        left, tau = self.low.window(-layout.steps, text_len + layout.steps, text_len)
        self.left, self.tau, self.text_len = left, tau, text_len
        # (2): |f_theta(x) - y|^2 / 2 <= n (M + 1)^2 / 2 for ±1 data and ±1 weights
        self.k = Constants.choose(B_stop if B_stop is not None else n * (M + 1) ** 2 / 2,
                                  self.low.machine.tapes, eps=float(n))
        self.ts = TapeSimplex(self.low.machine, tau, left, b=self.k.b, gamma=self.k.gamma, c=self.k.c)
        self.ro_map = self._ro_map()
        self.net = self.build()

    # -- the read-only tape as an affine function of the quantised bits ----------------------
    def _ro_vec(self, x, y) -> np.ndarray:
        cells = self.low.lower_input(self.layout.text(x, y))[0]
        v = np.full(self.tau, -1.0)
        for c in cells:
            if not self.left <= c < self.left + self.tau:
                raise Tm2nnError("the encoded dataset does not fit the tape window")
            v[c - self.left] = 1.0
        return v

    def _ro_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(A, a)`` with ``ro = a + A q`` for the quantised bits ``q = [x (n*M), y (n)]``;
        derived by flipping one bit at a time, then checked on random bits (the encoding
        of a ±1 datum must be local and affine)."""
        n, M = self.layout.n, self.layout.M
        nb = n * M + n

        def ro(q):
            return self._ro_vec(q[: n * M].reshape(n, M), q[n * M:])
        base = np.ones(nb)
        r0 = ro(base)
        A = np.zeros((self.tau, nb))
        for i in range(nb):
            q = base.copy()
            q[i] = -1.0
            A[:, i] = (r0 - ro(q)) / 2
        a = r0 - A.sum(axis=1)
        rng = np.random.default_rng(0)
        for _ in range(8):
            q = rng.choice([-1.0, 1.0], nb)
            if not np.array_equal(a + A @ q, ro(q)):
                raise Tm2nnError("the machine's input encoding is not an affine function of the data bits")
        return A, a

    # -- the net ----------------------------------------------------------------------------
    def build(self) -> Net:
        n, M = self.layout.n, self.layout.M
        k, ts = self.k, self.ts
        x = Port("x", Space(tuple(f"x:{i}.{j}" for i in range(n) for j in range(M))))
        ops: list = [Param("z", ("x",), value=np.zeros(n), out=_sp("z", n), cite="Welper §5.2 z (copy of the labels)"),
                     StopGradient("zg", ("z",))]
        # App. B quantisation (sign bit): q(u) = 2 psi_e(u) - 1, psi_e(u) = relu(u/e) - relu(u/e - 1)
        e = 0.5
        ops.append(Concat("xz", ("x", "zg")))
        nb = n * M + n
        ops.append(_aff("q_pre", "xz", np.vstack([np.eye(nb) / e, np.eye(nb) / e]), _sp("qpre", 2 * nb),
                        bias=np.r_[np.zeros(nb), -np.ones(nb)], cite="Welper App. B quantisation (sign bit)"))
        ops.append(ReLU("q_relu", ("q_pre",)))
        ops.append(_aff("q", "q_relu", np.hstack([2 * np.eye(nb), -2 * np.eye(nb)]), _sp("q", nb),
                        bias=-np.ones(nb)))
        A, a = self.ro_map
        ops.append(_aff("ro", "q", A, ts.labels()["ro"], bias=a, cite="the machine's input encoding (welper_form)"))
        ops += ts.state_ops("x", "ro")
        ops, loss = ts.loss_ops(ops, "s", "tape", "H", "tm/")
        # f_TM = sqrt(2 l_TM) f_perp(z)  (§5.4, App. C)
        ops.append(_aff("two_l", loss, [[2.0]], Space(("2l:0",))))
        ops.append(Activation("sqrt2l", ("two_l",), fn="sqrt", cite="Welper §5.4 sqrt(2 l_TM)"))
        ops += self._f_perp()
        ops.append(_aff("sqrt_rep", "sqrt2l", np.ones((n, 1)), _sp("sqrtrep", n)))
        ops.append(Mul("f_TM", ("sqrt_rep", "f_perp"), out=_sp("fTM", n)))
        # theta = App. B: quantise the output tape \T\ to its sign bits, then de-quantise
        # (the tape entries are ±1 up to rounding of the gradient steps); f_theta = theta^T x_i
        ops.append(StopGradient("Tg", ("T",)))
        D = np.zeros((M, self.tau))
        cells, bits = self._theta_cells()
        for j, cell in enumerate(cells):
            D[j, cell - self.left] = 1.0
        ops.append(_aff("tq_pre", "Tg", np.vstack([D / e, D / e]), _sp("tqpre", 2 * M),
                        bias=np.r_[np.zeros(M), -np.ones(M)], cite="Welper App. B quantisation of the output tape"))
        ops.append(ReLU("tq_relu", ("tq_pre",)))
        sg = np.array([sign for sign, _off in bits])
        ops.append(_aff("theta", "tq_relu", np.hstack([2 * np.diag(sg), -2 * np.diag(sg)]), _sp("theta", M),
                        bias=[off - sign for sign, off in bits], cite="Welper App. B de-quantisation"))
        rep = np.zeros((n * M, M))
        for i in range(n):
            rep[i * M:(i + 1) * M] = np.eye(M)
        ops.append(_aff("theta_rep", "theta", rep, _sp("threp", n * M)))
        ops.append(Mul("thx", ("theta_rep", "x"), out=_sp("thx", n * M)))
        ops.append(_aff("f_theta", "thx", np.kron(np.eye(n), np.ones((1, M))), _sp("f", n),
                        cite="primary network f_theta(x) = theta^T x"))
        # s_net(f, u): phi ramp on |u|^2 (§5.3)
        lo, hi = k.phi_ramp
        ops += _switch("net", "f_theta", "f_TM", n, lo, hi, rising=True)
        # s_init(u, z): psi = 1 below eps/3, 0 above 2 eps/3 (§5.2), z live
        ops += _switch("init", "net_out", "z", n, k.eps / 3, 2 * k.eps / 3, rising=False)
        return Net("welper_extended", (x,), tuple(ops), ("init_out",),
                   {"construction": "Welper §5 extended network (Figure 1)"})

    def _theta_cells(self):
        """Per weight: the lowered work-tape cell and ``(sign, offset)`` with ``theta_j =
        sign * T[cell] + offset`` (the cell where the two output symbols' codes differ)."""
        lay = self.layout
        code = self.low.binary.code
        (sa, va), (sb, vb) = list(lay.theta_value.items())
        ca, cb = code[sa], code[sb]
        k = next(i for i in range(len(ca)) if ca[i] != cb[i])
        w = self.low.width
        # the cell is +1 for the symbol whose code letter k is '+'
        vp, vm = (va, vb) if ca[k] == "+" else (vb, va)
        return [c * w + k for c in lay.theta_cells], [((vp - vm) / 2, (vp + vm) / 2)] * len(lay.theta_cells)

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
    """``out = a + r(|w|^2) (b - a)`` with the ReLU ramp ``r`` from 0 at ``lo`` to 1 at ``hi``
    (``rising``) or from 1 to 0 (``not rising``), ``w = b`` for s_net (the norm of ``u``)
    and ``w = b`` for s_init (the norm of ``z``): both switches read their second input's
    norm."""
    t = tag
    ops = [Mul(f"{t}_b2", (b, b), out=_sp(f"{t}b2", n)),
           _aff(f"{t}_nrm", f"{t}_b2", np.ones((1, n)), Space((f"{t}nrm:0",))),
           _aff(f"{t}_pre", f"{t}_nrm", np.ones((2, 1)) / (hi - lo), _sp(f"{t}pre", 2),
                bias=[-lo / (hi - lo), -hi / (hi - lo)]),
           ReLU(f"{t}_relu", (f"{t}_pre",))]
    # rising: r = relu(pre0) - relu(pre1);  falling: r = 1 - relu(pre0) + relu(pre1)
    sgn = 1.0 if rising else -1.0
    ops.append(_aff(f"{t}_rep", f"{t}_relu", np.tile([[sgn, -sgn]], (n, 1)), _sp(f"{t}rep", n),
                    bias=np.zeros(n) if rising else np.ones(n),
                    cite="Welper §5.3 phi" if rising else "Welper §5.2 psi"))
    ops.append(Concat(f"{t}_ab", (a, b)))
    ops.append(_aff(f"{t}_diff", f"{t}_ab", np.hstack([-np.eye(n), np.eye(n)]), _sp(f"{t}diff", n)))
    ops.append(Mul(f"{t}_mix", (f"{t}_rep", f"{t}_diff"), out=_sp(f"{t}mix", n)))
    ops.append(Concat(f"{t}_am", (a, f"{t}_mix")))
    ops.append(_aff(f"{t}_out", f"{t}_am", np.hstack([np.eye(n), np.eye(n)]), _sp(f"{t}out", n),
                    cite="Welper §5.3 s_net" if rising else "Welper §5.2 s_init"))
    return ops


@dataclass
class TrainResult:
    """One training run of (2)/(3): the optimizer steps until (4) held, the loss (2) at
    every iterate, the decoded §4.1 configuration at iterates 1..K, the weights ``theta``
    read from the trained net and the module itself."""

    steps: int
    losses: list[float]
    configs: list[MConfig]
    halted: list[bool]
    theta: np.ndarray
    module: object
    z: np.ndarray


def train(ext: Extended, x: np.ndarray, y: np.ndarray, max_steps: int = 100_000, progress=None) -> TrainResult:
    """Least squares (2), update (3) (``s``: Frank–Wolfe; ``T``, ``H``: rate ``1/gamma``;
    ``z``: rate 1), stopping criterion (4) checked from the first step on (at iterate 0
    the loss is ``|y|^2 / 2``, which may already be below ``B_stop``: the paper's count
    ``k_t + 1`` starts with the step that reads the labels)."""
    from tm2nn.emit import to_torch

    n, M = ext.layout.n, ext.layout.M
    x = np.asarray(x, dtype=np.float64).reshape(n, M)
    y = np.asarray(y, dtype=np.float64).reshape(n)
    if float(y @ y) < ext.k.eps:
        raise Tm2nnError(f"(5): |y|^2 = {float(y @ y):g} is below eps = {ext.k.eps:g}")
    mod = to_torch(ext.net, torch.float64)
    st = ext.ts.start(ext.low.lower_input(ext.layout.text(x.astype(int), y.astype(int))))
    with torch.no_grad():
        for name in ("s", "T", "H"):
            mod.op(name).value.copy_(torch.from_numpy(st[name]))
    g = ext.k.gamma
    opt = ConditionalGradient([
        {"params": [mod.op("s").value], "kind": "simplex"},
        {"params": [mod.op("T").value, mod.op("H").value], "kind": "gd", "lr": 1.0 / g},
        {"params": [mod.op("z").value], "kind": "gd", "lr": 1.0},
    ])
    X = torch.from_numpy(x.reshape(1, -1))
    Y = torch.from_numpy(y)
    losses, configs, halted = [], [], []
    steps = 0
    for k in range(max_steps + 1):
        opt.zero_grad()
        out = mod(X)[0]
        loss = 0.5 * ((out - Y) ** 2).sum()
        losses.append(float(loss.detach()))
        if k >= 1:
            vals = {name: mod.op(name).value.detach().numpy() for name in ("s", "T", "H")}
            if k == 1:  # z = y from here on, so the read-only tape no longer changes
                with torch.no_grad():
                    ro = mod.trace(X)["ro"][0].numpy()
            cfg, h = ext.ts.decode(vals["s"], vals["T"], vals["H"], ro)
            configs.append(cfg)
            halted.append(h)
            if losses[-1] <= ext.k.B_stop:  # (4)
                break
        if k == max_steps:
            raise Tm2nnError(f"the stopping criterion (4) did not hold within {max_steps} steps")
        loss.backward()
        opt.step()
        steps = k + 1
        if progress:
            progress(steps)
    with torch.no_grad():
        theta = mod.trace(X)["theta"][0].numpy().copy()
    return TrainResult(steps, losses, configs, halted, theta, mod, mod.op("z").value.detach().numpy().copy())


def sign_sum_layout(n: int, M: int) -> Layout:
    """The layout of :mod:`.sign_sum`'s machine."""
    from .sign_sum import dataset_text, output_cells, step_bound

    return Layout(n, M, dataset_text, tuple(output_cells(n, M)), {"+": 1.0, "-": -1.0}, step_bound(n, M))


__all__ = ["Constants", "Extended", "Layout", "TrainResult", "train", "sign_sum_layout"]
