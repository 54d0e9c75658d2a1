"""Welper App. B: quantisation of numbers to bits and back, for the tapes of §5's
extended network.

App. B writes a number as ``(-1)^sigma (sum_i a_i 2^i) 2^(exponent)`` with a sign bit,
mantissa bits and exponent bits.  We fix the exponent (no exponent bits; departure named
in docs/gd_trace.md): a :class:`FixedPoint` format has a sign bit ``sigma`` and ``bits``
magnitude bits ``a_{bits-1} .. a_0``, value ``(-1)^sigma sum_i a_i 2^i u`` with the unit
``u = 2^-frac``.  ``bits = 0`` is the sign bit alone, value ``(-1)^sigma`` (the ±1 data
of the worked example).  Bits are stored sign first, then the magnitude bits most
significant first.

* :meth:`FixedPoint.encode` is App. B's algorithm itself (``sigma = 0`` if ``x > 0``,
  else 1; then for ``i = bits-1 .. 0``: ``a_i = 1`` and ``r -= 2^i u`` if ``r >= 2^i u``),
  the reference the network is tested against;
* :func:`quantise_ops` is the same algorithm as a ReLU network, the loop unrolled (one
  layer per magnitude bit) and each comparison ``[t >= 0]`` App. B's ramp
  ``psi_eps(t + 3u/4)`` with ``eps = u/2`` (0 below ``-3u/4``, 1 above ``-u/4``): exact
  on the grid, and on values within ``u/4`` of it (``z`` equals the labels up to float
  rounding, docs/gd_trace.md);
* :func:`dequantise_ops` reads bits off tape cells (``±1``, ramps with margin 1/2), adds
  the magnitude bits with weights ``2^i u`` and multiplies by ``1 - 2 sigma`` (a product
  node, allowed by (1)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.nets import Affine, Concat, Mul, ReLU, Slice, Space, SparseMatrix

#: magnitude and fractional bits we accept (float64 holds every value and product exactly)
MAX_BITS = 16
#: the comparison [t >= 0] on the grid is psi_eps(t + RAMP_OFFSET u), eps = u/2: the ramp
#: lies between the grid points -u and 0 (a mutation test moves it)
RAMP_OFFSET = 0.75


@dataclass(frozen=True)
class FixedPoint:
    """App. B's sign–magnitude number format with a fixed exponent ``-frac``."""

    bits: int = 0
    frac: int = 0

    def __post_init__(self):
        if not (isinstance(self.bits, int) and isinstance(self.frac, int)
                and 0 <= self.bits <= MAX_BITS and 0 <= self.frac <= MAX_BITS):
            raise Tm2nnError(f"a fixed-point format needs 0 <= bits <= {MAX_BITS} magnitude bits and "
                             f"0 <= frac <= {MAX_BITS} fractional bits, got bits={self.bits!r} frac={self.frac!r}")
        if self.bits == 0 and self.frac:
            raise Tm2nnError("the sign-only format (bits=0, values ±1) has no fractional bits")

    @property
    def width(self) -> int:
        """Cells (bits) per number: the sign bit and the magnitude bits."""
        return 1 + self.bits

    @property
    def unit(self) -> float:
        """The grid spacing ``u = 2^-frac`` (1 for the sign-only format)."""
        return 2.0 ** -self.frac

    @property
    def max(self) -> float:
        """The largest magnitude."""
        return 1.0 if self.bits == 0 else (2 ** self.bits - 1) * self.unit

    @property
    def min_nonzero(self) -> float:
        return 1.0 if self.bits == 0 else self.unit

    def describe(self) -> str:
        if self.bits == 0:
            return "±1 (sign bit only)"
        return f"sign + {self.bits} magnitude bits, {self.frac} fractional (multiples of 2^-{self.frac} up to ±{self.max:g})"

    def values(self) -> np.ndarray:
        """Every representable value, ascending."""
        if self.bits == 0:
            return np.array([-1.0, 1.0])
        k = np.arange(-(2 ** self.bits - 1), 2 ** self.bits)
        return k * self.unit

    def check(self, values, what) -> np.ndarray:
        """``values`` as float64, or a :class:`Tm2nnError` naming the first one outside the
        format (``what(index)`` names an entry)."""
        v = np.asarray(values, dtype=np.float64)
        ok = np.isin(v, self.values())
        if not ok.all():
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            raise Tm2nnError(f"{what(idx)} = {float(v[idx])!r} is not a number of the format {self.describe()}")
        return v

    def encode(self, values) -> np.ndarray:
        """App. B's quantisation: bits ``[..., 1 + bits]`` (0/1), sign first."""
        v = np.asarray(values, dtype=np.float64)
        out = np.zeros(v.shape + (self.width,), dtype=np.int64)
        out[..., 0] = (v <= 0).astype(np.int64)          # sigma = 0 if x > 0, else 1
        r = np.abs(v)
        for k, i in enumerate(reversed(range(self.bits))):  # i = bits-1 .. 0
            big = r >= 2.0 ** i * self.unit
            out[..., 1 + k] = big
            r = r - big * 2.0 ** i * self.unit
        if self.bits and np.any(r != 0):
            raise Tm2nnError(f"value not on the grid of {self.describe()}")
        return out

    def decode(self, bits) -> np.ndarray:
        """The de-quantisation: values from bits ``[..., 1 + bits]``."""
        b = np.asarray(bits, dtype=np.float64)
        sign = 1.0 - 2.0 * b[..., 0]
        if self.bits == 0:
            return sign
        w = 2.0 ** np.arange(self.bits - 1, -1, -1) * self.unit
        return sign * (b[..., 1:] @ w)


def _aff(name, inp, w, out: Space, bias=None, cite: str = "") -> Affine:
    return Affine(name, (inp,), weight=SparseMatrix.from_dense(np.atleast_2d(w)),
                  bias=None if bias is None else np.asarray(bias, dtype=np.float64), out=out, cite=cite)


def quantise_ops(pre: str, src: str, fmts: list[FixedPoint], labels: list[str]) -> tuple[list, str]:
    """App. B's quantisation as network ops: the value ``src`` (one number per entry, entry
    ``k`` in format ``fmts[k]``) to its bits (0/1, ``labels[k]:s``, ``labels[k]:a<i>``);
    returns ``(ops, name of the bits)``.

    Every comparison ``[t >= 0]`` is ``psi_eps(t + 3u/4)``, ``eps = u/2``, built as
    ``1 - relu(1 - relu((t + 3u/4) / eps))`` (= App. B's ``psi_eps``; nested so that it
    is exactly 0 or 1 away from its ramp, in floating point too).  The loop over the
    magnitude bits is unrolled: the remainder ``r`` is affine in the bits found so far, so
    each comparison reads the ReLU outputs of all layers before it."""
    K = len(fmts)
    ops: list = []
    state = {"acc": None, "cols": 0, "n": 0}

    def layer(forms: list, labs: list[str], cite: str) -> int:
        """ReLU units of the affine ``forms`` (``({column: coef}, bias)`` over the ReLU
        outputs so far, or over ``src`` for the first layer); their first column."""
        first_layer = state["acc"] is None
        W = np.zeros((len(forms), K if first_layer else state["cols"]))
        bias = np.zeros(len(forms))
        for r, (coef, b0) in enumerate(forms):
            for c, v in coef.items():
                W[r, c] += v
            bias[r] = b0
        state["n"] += 1
        name = f"{pre}l{state['n']}"
        ops.append(_aff(name + "_pre", src if first_layer else state["acc"], W,
                        Space(tuple(f"{pre}{lab}" for lab in labs)), bias, cite))
        ops.append(ReLU(name, (name + "_pre",)))
        first = state["cols"]
        state["cols"] += len(forms)
        if first_layer:
            state["acc"] = name
        else:
            ops.append(Concat(f"{name}_acc", (state["acc"], name)))
            state["acc"] = f"{name}_acc"
        return first

    def compare(items: list, cite: str) -> list:
        """``[t >= 0]`` for each ``(form of t, unit, label)`` (two ReLU layers); their bit forms."""
        f1 = [({c: v / (u / 2) for c, v in coef.items()}, (b0 + RAMP_OFFSET * u) / (u / 2))
              for (coef, b0), u, _ in items]
        c1 = layer(f1, [f"{lab}.1" for _f, _u, lab in items], cite)
        c2 = layer([({c1 + i: -1.0}, 1.0) for i in range(len(items))], [f"{lab}.2" for _f, _u, lab in items], cite)
        return [({c2 + i: -1.0}, 1.0) for i in range(len(items))]

    # the sign bit sigma = 1 - [x - u >= 0] (sigma = 0 if x > 0, else 1), and |x| = relu(x) + relu(-x);
    # the first layer reads src: column k is entry k
    abs_forms, abs_labs = [], []
    for k, f in enumerate(fmts):
        if f.bits:
            abs_forms += [({k: 1.0}, 0.0), ({k: -1.0}, 0.0)]
            abs_labs += [f"{labels[k]}:abs+", f"{labels[k]}:abs-"]
    sign_items = [(({k: 1.0}, -f.unit), f.unit, f"{labels[k]}:s") for k, f in enumerate(fmts)]
    f1 = [({c: v / (u / 2) for c, v in coef.items()}, (b0 + RAMP_OFFSET * u) / (u / 2))
          for (coef, b0), u, _ in sign_items] + abs_forms
    c1 = layer(f1, [f"{lab}.1" for *_x, lab in sign_items] + abs_labs, "Welper App. B quantisation: sign bit, |x|")
    c2 = layer([({c1 + k: -1.0}, 1.0) for k in range(K)], [f"{lab}.2" for *_x, lab in sign_items],
               "Welper App. B quantisation: sign bit")
    sigma = [({c2 + k: 1.0}, 0.0) for k in range(K)]   # 1 - [x - u >= 0] = relu(1 - relu(.))
    rem: list = [None] * K
    j = c1 + K
    for k, f in enumerate(fmts):
        if f.bits:
            rem[k] = ({j: 1.0, j + 1: 1.0}, 0.0)
            j += 2
    bit_forms: list[list] = [[] for _ in range(K)]
    for step in range(max((f.bits for f in fmts), default=0)):
        items, who = [], []
        for k, f in enumerate(fmts):
            if step < f.bits:
                i = f.bits - 1 - step
                t = 2.0 ** i * f.unit
                coef, b0 = rem[k]
                items.append(((coef, b0 - t), f.unit, f"{labels[k]}:a{i}"))
                who.append((k, t))
        bits = compare(items, "Welper App. B quantisation: magnitude bit (unrolled loop)")
        for (k, t), (bc, bb) in zip(who, bits):
            bit_forms[k].append((bc, bb))
            coef, b0 = rem[k]
            coef = dict(coef)
            for c, v in bc.items():
                coef[c] = coef.get(c, 0.0) - t * v
            rem[k] = (coef, b0 - t * bb)
    # the bits, sign first then a_{bits-1} .. a_0
    rows, bias, labs = [], [], []
    for k, f in enumerate(fmts):
        for j, (coef, b0) in enumerate([sigma[k]] + bit_forms[k]):
            rows.append(coef)
            bias.append(b0)
            labs.append(f"{labels[k]}:" + ("s" if j == 0 else f"a{f.bits - j}"))
    W = np.zeros((len(rows), state["cols"]))
    for r, coef in enumerate(rows):
        for c, v in coef.items():
            W[r, c] += v
    ops.append(_aff(f"{pre}bits", state["acc"], W, Space(tuple(labs)), bias, "Welper App. B: the bits (sigma, a)"))
    return ops, f"{pre}bits"


def dequantise_ops(pre: str, tape: str, tape_width: int, params: list[tuple[FixedPoint, list[tuple[int, float]]]],
                   labels: list[str], out: str | None = None) -> tuple[list, str]:
    """App. B's de-quantisation: ``params[j] = (format, [(tape index, orientation)] per bit)``
    (orientation ``+1``: the bit is 1 where the cell holds ``+1``; ``-1``: where it holds
    ``-1``); each bit is ``psi_1(o T + 1/2)`` (1 at ``o T = 1``, 0 at ``-1``, margin 1/2,
    nested as in :func:`quantise_ops`),
    then ``value = (sum_i a_i 2^i u) (1 - 2 sigma)``, named ``out`` (default
    ``pre + "value"``).  Returns ``(ops, name of the values)``."""
    nb = sum(f.width for f, _ in params)
    P = len(params)
    W = np.zeros((nb, tape_width))
    r = 0
    for _f, cells in params:
        for cell, o in cells:
            W[r, cell] = o
            r += 1
    bit_labels = [f"{labels[j]}:{'s' if i == 0 else f'a{f.bits - i}'}" for j, (f, _c) in enumerate(params)
                  for i in range(f.width)]
    # bit = 1 - relu(1 - relu(o T + 1/2)): 1 for o T >= 1/2, 0 for o T <= -1/2, exactly
    ops = [_aff(f"{pre}pre", tape, W, Space(tuple(f"{pre}{b}.1" for b in bit_labels)), np.full(nb, 0.5),
                "Welper App. B: bits read off the output tape"),
           ReLU(f"{pre}relu", (f"{pre}pre",)),
           _aff(f"{pre}pre2", f"{pre}relu", -np.eye(nb), Space(tuple(f"{pre}{b}.2" for b in bit_labels)),
                np.ones(nb)),
           ReLU(f"{pre}relu2", (f"{pre}pre2",))]   # = 1 - bit
    # magnitude (P) and 1 - 2 sigma (P) from 1 - bit
    M2 = np.zeros((2 * P, nb))
    b2 = np.zeros(2 * P)
    r = 0
    for j, (f, _cells) in enumerate(params):
        for i in range(f.width):
            if i == 0:   # 1 - 2 sigma = 2 (1 - sigma) - 1
                M2[P + j, r] = 2.0
                b2[P + j] -= 1.0
            else:        # a 2^i u = 2^i u - (1 - a) 2^i u
                wgt = 2.0 ** (f.bits - i) * f.unit
                M2[j, r] = -wgt
                b2[j] += wgt
            r += 1
        if f.bits == 0:
            b2[j] = 1.0
    ops.append(_aff(f"{pre}ms", f"{pre}relu2", M2,
                    Space(tuple(f"{pre}mag:{lab}" for lab in labels) + tuple(f"{pre}sgn:{lab}" for lab in labels)),
                    b2, "Welper App. B de-quantisation: magnitude and sign"))
    ops.append(Slice(f"{pre}mag", (f"{pre}ms",), indices=range(P)))
    ops.append(Slice(f"{pre}sgn", (f"{pre}ms",), indices=range(P, 2 * P)))
    out = out or f"{pre}value"
    ops.append(Mul(out, (f"{pre}mag", f"{pre}sgn"), out=Space(tuple(labels))))  # App. B: (-1)^sigma |value|
    return ops, out


__all__ = ["FixedPoint", "dequantise_ops", "quantise_ops"]
