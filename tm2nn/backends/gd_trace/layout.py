"""How a dataset meets a machine in Welper §5, and the primary network ``f_theta``.

:class:`Layout` is the one place where a §5 configuration is validated: the data shape,
App. B's number formats of the features, labels and weights (:class:`~.fixed_point.FixedPoint`),
the symbols of a bit on the tape, where the machine leaves each weight, and which primary
network reads them (:data:`PRIMARIES`).  A machine file declares it in its
``# gd-trace:`` header (:mod:`tm2nn.syntax.gd_layout`, docs/gd_trace.md).

The machine input (:meth:`Layout.text_of_bits`): per sample, the label's bits then each
feature's bits, every number sign bit first, then its magnitude bits most significant
first; bit ``b`` is the symbol ``digits[b]``.  Weight ``j`` is read from the source
cells ``theta_cells[j] .. theta_cells[j] + w.bits`` in the same order.

The primary networks (Welper §2: "the structure of f_theta is not important"; each op
is labelled ``f_theta:<kind>`` in the network IR):

* ``linear``: ``f_theta(x_i) = theta^T x_i`` (``M`` weights);
* ``affine``: ``f_theta(x_i) = theta^T x_i + b`` (``M + 1`` weights, the bias last);
* ``relu:H``: one hidden ReLU layer, ``f_theta(x_i) = sum_k a_k relu(w_k^T x_i + c_k) + b``
  (``H (M + 1) + H + 1`` weights: ``w_k`` then ``c_k`` per unit, then ``a``, then ``b``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.nets import Affine, Concat, Mul, ReLU, Space, SparseMatrix

from .fixed_point import FixedPoint


def _neuron_ops(pre: str, theta: str, P: int, inp: str, n: int, width: int, units: list[tuple[list[int], int | None]],
                labels: list[str], cite: str, name: str | None = None) -> tuple[list, str]:
    """``n x U`` neurons ``sum_j theta[w_j] inp_{i,j} + theta[c]`` (no activation): per
    sample ``i`` (``inp`` holds ``n`` rows of ``width`` values, sample-major; ``theta``
    holds ``P`` values) and unit
    ``(w, c)`` of ``units`` (``c`` None: no bias).  The weights are a hidden layer (§5:
    "theta [is] read from the output tape ... and not trainable"), so a weight times an
    input is a product node, allowed by Welper (1); the sums are affine maps.  Returns
    ``(ops, output name)``, the output (``name``, default ``<pre>/sum``) labelled ``labels``
    (``n x U``, sample-major)."""
    U = len(units)
    rep = np.zeros((n * U * width, P))
    xrep = np.zeros((n * U * width, n * width))
    for i in range(n):
        for k, (w, _c) in enumerate(units):
            for j, t in enumerate(w):
                r = (i * U + k) * width + j
                rep[r, t] = 1.0
                xrep[r, i * width + j] = 1.0
    lab = tuple(f"{pre}/wx:{i}.{k}.{j}" for i in range(n) for k in range(U) for j in range(width))
    ops = [Affine(f"{pre}/theta_rep", (theta,), weight=SparseMatrix.from_dense(rep),
                  out=Space(tuple(s.replace("/wx:", "/w:") for s in lab))),
           Affine(f"{pre}/x_rep", (inp,), weight=SparseMatrix.from_dense(xrep),
                  out=Space(tuple(s.replace("/wx:", "/x:") for s in lab))),
           Mul(f"{pre}/wx", (f"{pre}/theta_rep", f"{pre}/x_rep"), out=Space(lab)),
           Concat(f"{pre}/wx_theta", (f"{pre}/wx", theta))]
    W = np.zeros((n * U, n * U * width + P))
    for i in range(n):
        for k, (_w, c) in enumerate(units):
            W[i * U + k, (i * U + k) * width:(i * U + k + 1) * width] = 1.0
            if c is not None:
                W[i * U + k, n * U * width + c] = 1.0
    name = name or f"{pre}/sum"
    ops.append(Affine(name, (f"{pre}/wx_theta",), weight=SparseMatrix.from_dense(W),
                      out=Space(tuple(labels)), cite=cite))
    return ops, name


@dataclass(frozen=True)
class PrimaryShape:
    """One primary network: its weight names, its ops, a numpy reference and a bound on
    ``|f_theta(x_i)|`` over the formats (for ``B_stop``).  ``hidden = H > 0``: one hidden
    ReLU layer, ``f_theta(x_i) = sum_k a_k relu(w_k^T x_i + c_k) + b`` (always with the
    biases ``c_k`` and ``b``)."""

    kind: str
    bias: bool
    doc: str
    hidden: int = 0

    def param_names(self, M: int) -> list[str]:
        if self.hidden:
            H = self.hidden
            return ([n for k in range(1, H + 1) for n in [f"w{k}.{j + 1}" for j in range(M)] + [f"c{k}"]]
                    + [f"a{k}" for k in range(1, H + 1)] + ["b"])
        return [f"w{j + 1}" for j in range(M)] + (["b"] if self.bias else [])

    def split(self, theta: np.ndarray, M: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """A hidden-layer network's ``(W (H x M), c, a, b)`` from ``theta`` in
        :meth:`param_names` order."""
        H = self.hidden
        Wc = np.asarray(theta[:H * (M + 1)], dtype=np.float64).reshape(H, M + 1)
        return Wc[:, :M], Wc[:, M], np.asarray(theta[H * (M + 1):H * (M + 2)], dtype=np.float64), \
            float(theta[H * (M + 2)])

    def reference(self, x: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``f_theta(x_i)`` per sample, in float64."""
        x = np.asarray(x, dtype=np.float64)
        theta = np.asarray(theta, dtype=np.float64)
        M = x.shape[1]
        if self.hidden:
            W, c, a, b = self.split(theta, M)
            return np.maximum(x @ W.T + c, 0.0) @ a + b
        return x @ theta[:M] + (theta[M] if self.bias else 0.0)

    def bound(self, M: int, x: FixedPoint, w: FixedPoint) -> float:
        """The largest ``|f_theta(x_i)|`` for features in format ``x`` and weights in ``w``."""
        if self.hidden:   # each hidden unit <= M x_max w_max + w_max, times a_k, plus b
            return self.hidden * w.max * (M * x.max * w.max + w.max) + w.max
        return M * x.max * w.max + (w.max if self.bias else 0.0)

    def ops(self, x: str, theta: str, n: int, M: int) -> tuple[list, str]:
        """The primary network as ops reading the dataset ``x`` (``n*M``) and the weights
        ``theta``; returns ``(ops, output name)`` (``n`` values, output ``f_theta``)."""
        pre = f"f_theta:{self.kind}"
        cite = f"primary network f_theta ({self.kind}): {self.doc}"
        if not self.hidden:
            units = [(list(range(M)), M if self.bias else None)]
            return _neuron_ops(pre, theta, len(self.param_names(M)), x, n, M, units, [f"f:{i}" for i in range(n)],
                               f"{cite}; Welper §2, theta a hidden layer (§5, Figure 1)", name="f_theta")
        H = self.hidden
        units = [([k * (M + 1) + j for j in range(M)], k * (M + 1) + M) for k in range(H)]
        ops, pre_h = _neuron_ops(f"{pre}/hidden", theta, len(self.param_names(M)), x, n, M, units,
                                 [f"{pre}/h:{i}.{k}" for i in range(n) for k in range(H)],
                                 "Welper §2 (1): the primary network's hidden pre-activations "
                                 "w_k^T x_i + c_k, theta a hidden layer (§5, Figure 1)")
        # Welper §2 (1): the primary network's hidden ReLU layer h_ik = relu(w_k^T x_i + c_k)
        ops.append(ReLU(f"{pre}/h", (pre_h,)))
        out_units = [(list(range(H * (M + 1), H * (M + 2))), H * (M + 2))]
        more, out = _neuron_ops(f"{pre}/out", theta, len(self.param_names(M)), f"{pre}/h", n, H, out_units, [f"f:{i}" for i in range(n)],
                                f"{cite}: the output layer a^T h_i + b (Welper §2)", name="f_theta")
        return ops + more, out


PRIMARIES = {
    "linear": PrimaryShape("linear", False, "theta^T x_i"),
    "affine": PrimaryShape("affine", True, "theta^T x_i + b"),
}
#: ``relu:H``: one hidden ReLU layer of ``H`` units (:func:`primary_shape`)
HIDDEN = "relu:"


def primary_shape(name: str) -> PrimaryShape:
    """The primary network called ``name``: ``linear``, ``affine`` or ``relu:H`` (a hidden
    ReLU layer of ``H >= 1`` units; theta is ``w_k, c_k`` per unit, then ``a``, then ``b``)."""
    if name in PRIMARIES:
        return PRIMARIES[name]
    if name.startswith(HIDDEN) and name[len(HIDDEN):].isdigit() and int(name[len(HIDDEN):]) >= 1:
        H = int(name[len(HIDDEN):])
        return PrimaryShape(name, True, f"sum_k a_k relu(w_k^T x_i + c_k) + b, k = 1..{H}", H)
    raise Tm2nnError(f"unknown primary network {name!r}: one of {', '.join(PRIMARIES)}, relu:H "
                     "(one hidden ReLU layer of H >= 1 units)")


@dataclass(frozen=True)
class Layout:
    """A §5 data layout (validated in ``__post_init__``; see the module doc)."""

    n: int
    M: int
    theta_cells: tuple[int, ...]
    steps: int = 1000   # a bound on the machine's source steps (sizes the tape window)
    primary: str = "linear"
    x: FixedPoint = field(default_factory=FixedPoint)
    y: FixedPoint = field(default_factory=FixedPoint)
    w: FixedPoint = field(default_factory=FixedPoint)
    digits: tuple[str, str] = ("+", "-")
    #: the source cells ``(lo, hi)`` that hold the head and every written cell during the
    #: run, when the machine declares them (``cells=LO,HI``); default ``[-steps, len +
    #: steps]``, which the step bound alone guarantees.  Sizes the tape window ``tau``.
    cells: tuple[int, int] | None = None

    def __post_init__(self):
        object.__setattr__(self, "theta_cells", tuple(int(c) for c in self.theta_cells))
        object.__setattr__(self, "digits", tuple(self.digits))
        if self.n < 2:
            raise Tm2nnError("the extended network needs n >= 2 samples (App. C's f_perp uses two "
                             "orthonormal vectors of R^n)")
        if self.M < 1 or self.steps < 1:
            raise Tm2nnError("a §5 layout needs features >= 1 and steps >= 1")
        primary_shape(self.primary)   # a clear error for an unknown name
        P = len(self.shape.param_names(self.M))
        if len(self.theta_cells) != P:
            raise Tm2nnError(f"the {self.primary} primary network has {P} weights "
                             f"({', '.join(self.shape.param_names(self.M))}): theta must list {P} cells, "
                             f"got {len(self.theta_cells)}")
        if len(self.digits) != 2 or self.digits[0] == self.digits[1]:
            raise Tm2nnError(f"digits must be two different symbols (bit 0, bit 1), got {''.join(self.digits)!r}")
        cells = [c + i for c in self.theta_cells for i in range(self.w.width)]
        if len(set(cells)) != len(cells):
            raise Tm2nnError("the weights' cells overlap (each weight takes 1 + wbits cells)")
        if self.cells is not None:
            object.__setattr__(self, "cells", tuple(int(c) for c in self.cells))
            if len(self.cells) != 2 or not self.cells[0] <= min(0, *cells) or \
                    not self.cells[1] >= max(self.text_len - 1, *cells):
                raise Tm2nnError(f"cells must be LO,HI with LO <= 0 and HI >= {max(self.text_len - 1, *cells)} "
                                 f"(the input and the weights' cells), got {','.join(map(str, self.cells))}")

    @classmethod
    def from_header(cls, h: dict) -> "Layout":
        """The layout a ``# gd-trace:`` header declares (:func:`tm2nn.syntax.gd_layout.parse`)."""
        frac = h.get("frac", 0)
        fmt = lambda bits: FixedPoint(bits, frac if bits else 0)  # noqa: E731
        return cls(h["samples"], h["features"], tuple(h["theta"]), h["steps"], h.get("primary", "linear"),
                   fmt(h.get("xbits", 0)), fmt(h.get("ybits", 0)), fmt(h.get("wbits", 0)),
                   tuple(h.get("digits", "+-")), tuple(h["cells"]) if "cells" in h else None)

    @property
    def text_len(self) -> int:
        """Source cells of the machine input: per sample the label's bits and every feature's."""
        return self.n * (self.y.width + self.M * self.x.width)

    @property
    def window(self) -> tuple[int, int]:
        """The source cells the tape window must hold (``cells``, or what ``steps`` bounds)."""
        return self.cells if self.cells is not None else (-self.steps, self.text_len + self.steps)

    @property
    def shape(self) -> PrimaryShape:
        return primary_shape(self.primary)

    @property
    def params(self) -> int:
        return len(self.theta_cells)

    def check_data(self, X, Y) -> tuple[np.ndarray, np.ndarray]:
        """``(X, Y)`` as float64 arrays of the layout's shape and formats, or a clear error."""
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64).reshape(-1)
        if X.shape != (self.n, self.M) or Y.shape != (self.n,):
            raise Tm2nnError(f"the machine is laid out for {self.n} samples of {self.M} features; the training "
                             f"set has {X.shape[0]} of {X.shape[1] if X.ndim == 2 else 0}")
        return (self.x.check(X, lambda i: f"sample {i[0] + 1}'s feature {i[1] + 1}"),
                self.y.check(Y, lambda i: f"sample {i[0] + 1}'s label"))

    def text_of_bits(self, xb: np.ndarray, yb: np.ndarray) -> str:
        """The machine input for feature bits ``xb`` (``n x M x (1 + xbits)``) and label
        bits ``yb`` (``n x (1 + ybits)``)."""
        d = self.digits
        xb = np.asarray(xb).reshape(self.n, self.M * self.x.width)
        yb = np.asarray(yb).reshape(self.n, self.y.width)
        return "".join("".join(d[int(b)] for b in yb[i]) + "".join(d[int(b)] for b in xb[i]) for i in range(self.n))

    def text(self, X, Y) -> str:
        """The machine input for a dataset (App. B's quantisation, then the symbols)."""
        X, Y = self.check_data(X, Y)
        return self.text_of_bits(self.x.encode(X), self.y.encode(Y))

    def theta_from_cells(self, cells: dict, blank: str) -> np.ndarray:
        """The weights a source tape (``{cell: symbol}``) holds, App. B's de-quantisation;
        NaN for a weight whose cells hold anything but the two digits."""
        out = []
        for c in self.theta_cells:
            syms = [cells.get(c + i, blank) for i in range(self.w.width)]
            if any(s not in self.digits for s in syms):
                out.append(np.nan)
                continue
            out.append(float(self.w.decode(np.array([self.digits.index(s) for s in syms]))))
        return np.array(out) + 0.0   # App. B writes 0 with sigma = 1: report 0, not -0

    def random_x(self, rng: np.random.Generator) -> np.ndarray:
        """A random dataset's features (uniform over the format's values)."""
        return rng.choice(self.x.values(), (self.n, self.M))

    def random_y(self, rng: np.random.Generator) -> np.ndarray:
        """Random labels with ``|y|^2 >= eps`` ((5): not all zero)."""
        while True:
            y = rng.choice(self.y.values(), self.n)
            if np.any(y != 0):
                return y

    @property
    def eps(self) -> float:
        """(5)'s ``eps``: ``n`` for ±1 labels, else the smallest nonzero ``|y|^2``."""
        return float(self.n) if self.y.bits == 0 else self.y.min_nonzero ** 2

    @property
    def B_stop(self) -> float:
        """A bound on the primary net's training error ``|f_theta(x) - y|^2 / 2`` over every
        dataset and weights of the formats (§5.4: ``B_stop``)."""
        return self.n * (self.shape.bound(self.M, self.x, self.w) + self.y.max) ** 2 / 2


__all__ = ["Layout", "PRIMARIES", "PrimaryShape", "primary_shape"]
