"""A learning algorithm written as a Turing machine for Welper §5: the perceptron over
fixed-point data (App. B's sign–magnitude format, :mod:`.fixed_point`).

Data: ``n`` samples ``x_i`` of ``M`` features, each a fixed-point number with ``bits``
magnitude bits and ``frac`` fractional bits; labels ``y_i in {-1, 1}``.  The machine runs
``epochs`` passes of the perceptron rule from ``theta = 0``::

    for each sample i (epoch e: i = 1..n if e is odd, n..1 if e is even):
        a = theta^T x_i (+ b)                  # exact fixed-point arithmetic
        if y_i * a <= 0:  theta += y_i x_i (and b += y_i)

and writes ``theta`` (then ``b`` when ``bias``) in the same sign–magnitude format with
``wbits`` magnitude bits (:func:`weight_bits`, enough for any dataset).

The tape: alphabet ``0 1`` (blank ``0``, so a bit ``0`` is a blank cell); the input is,
per sample, the label's sign bit then every feature's sign bit and magnitude bits (most
significant first) (:func:`dataset_text`).  The machine reads the data in one pass per
epoch — left to right, then right to left, and so on, so no step is spent walking back —
holding ``theta`` and the sample read so far in its finite control (the values are
bounded: fixed-point), and writes the weights next to the data: after the input when
``epochs`` is odd, before it when even (:func:`output_cells`).  Every transition moves
the head, so the machine is acyclic; equal futures are merged (:func:`_minimise`), which
keeps the state count small.

:func:`theta_of` computes the same weights in plain integer arithmetic (the reference
the tests compare the machine and the trained network with).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fixed_point import FixedPoint


@dataclass(frozen=True)
class Perceptron:
    """The shape of one perceptron machine (validated here, once)."""

    n: int
    M: int
    bits: int
    frac: int
    bias: bool = True
    epochs: int = 1
    #: a fixed hidden ReLU layer: rows ``(w_1, .., w_M, c)`` of integers; the perceptron
    #: then learns on ``h = relu(W x + c)`` and the machine writes ``W, c`` with ``a, b``
    #: (the ``relu:H`` primary network); ``()``: none
    hidden: tuple = ()

    def __post_init__(self):
        if self.n < 2 or self.M < 1 or self.epochs < 1:
            raise ValueError("perceptron: n >= 2 samples, M >= 1 features and epochs >= 1")
        FixedPoint(self.bits, self.frac)  # checks bits and frac
        if self.bits < 1:
            raise ValueError("perceptron: features need bits >= 1 magnitude bits")
        object.__setattr__(self, "hidden", tuple(tuple(int(v) for v in row) for row in self.hidden))
        if self.hidden and (not self.bias or any(len(row) != self.M + 1 for row in self.hidden)):
            raise ValueError("perceptron: a hidden layer needs bias=True and rows of M weights then c")

    @property
    def H(self) -> int:
        return len(self.hidden)

    @property
    def x_format(self) -> FixedPoint:
        return FixedPoint(self.bits, self.frac)

    @property
    def w_format(self) -> FixedPoint:
        return FixedPoint(weight_bits(self), self.frac)

    @property
    def params(self) -> int:
        if self.hidden:
            return self.H * (self.M + 1) + self.H + 1
        return self.M + (1 if self.bias else 0)

    @property
    def primary(self) -> str:
        """The primary network that reads the machine's weights (:mod:`.layout`)."""
        return f"relu:{self.H}" if self.hidden else "affine" if self.bias else "linear"

    def features(self, xu: list[int]) -> list[int]:
        """What the perceptron learns on, in units of ``2^-frac``: ``x`` itself, or the
        hidden layer ``relu(W x + c)`` (Welper §2: the primary network's hidden layer)."""
        if not self.hidden:
            return list(xu)
        unit = 2 ** self.frac
        return [max(0, sum(w * v for w, v in zip(row[:-1], xu)) + row[-1] * unit) for row in self.hidden]

    @property
    def input_len(self) -> int:
        return self.n * (1 + self.M * (1 + self.bits))

    @property
    def name(self) -> str:
        return (f"perceptron_{self.n}x{self.M}_b{self.bits}f{self.frac}"
                f"{'' if self.bias else '_nobias'}{'' if self.epochs == 1 else f'_e{self.epochs}'}"
                f"{f'_relu{self.H}' if self.hidden else ''}")


def split_features(M: int) -> tuple:
    """The hidden layer ``relu(x_j), relu(-x_j)`` per feature (``H = 2M``, ``c = 0``): the
    perceptron on it fits any labels that are a sum of per-feature piecewise-linear
    functions with a kink at 0, e.g. ``y = sign(|x| - t)``, which no affine net fits."""
    return tuple(tuple((s if j == i else 0) for j in range(M)) + (0,) for i in range(M) for s in (1, -1))


def weight_bits(p: Perceptron) -> int:
    """Magnitude bits that hold any weight: ``|theta_j| <= n E (2^bits - 1)`` units and
    ``|b| <= n E 2^frac`` units (each update adds at most one sample)."""
    if p.hidden:   # |a_k| <= n E max h_k, and the fixed W, c themselves
        unit = 2 ** p.frac
        hmax = max(sum(abs(w) for w in row[:-1]) * (2 ** p.bits - 1) + abs(row[-1]) * unit for row in p.hidden)
        most = max(p.n * p.epochs * max(hmax, unit), max(abs(v) for row in p.hidden for v in row) * unit)
        return max(1, int(most).bit_length())
    most = p.n * p.epochs * max(2 ** p.bits - 1, 2 ** p.frac if p.bias else 0)
    return max(1, int(most).bit_length())


def dataset_text(p: Perceptron, x: np.ndarray, y: np.ndarray) -> str:
    """The machine input: per sample the label's sign bit then each feature's bits."""
    fx = p.x_format
    xb = fx.encode(np.asarray(x, dtype=np.float64).reshape(p.n, p.M))
    yb = FixedPoint(0, 0).encode(np.asarray(y, dtype=np.float64).reshape(p.n))
    return "".join(str(int(yb[i, 0])) + "".join(str(int(b)) for b in xb[i].ravel()) for i in range(p.n))


def theta_of(p: Perceptron, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """What the machine computes, in integer units of ``2^-frac`` (then scaled back)."""
    unit = 2 ** p.frac
    xu = np.rint(np.asarray(x, dtype=np.float64).reshape(p.n, p.M) * unit).astype(np.int64)
    yv = np.asarray(y).reshape(p.n).astype(np.int64)
    b = 0
    th = [0] * (p.H or p.M)
    for e in range(p.epochs):
        for i in (range(p.n) if e % 2 == 0 else reversed(range(p.n))):
            th, b = _update(p, th, b, int(yv[i]), [int(v) for v in xu[i]])
    fixed = [v * unit for row in p.hidden for v in row]   # W, c in units
    return np.array(fixed + th + ([b] if p.bias else []), dtype=np.float64) / unit


def _update(p: Perceptron, th, b: int, y: int, xu) -> tuple[list[int], int]:
    """One perceptron step in units: ``a 2^(2 frac) = sum theta_u x_u + b_u 2^frac`` (on
    the hidden layer's output when there is one)."""
    xu = p.features(xu)
    a = sum(t * v for t, v in zip(th, xu)) + (b * 2 ** p.frac if p.bias else 0)
    if y * a <= 0:
        th = [t + y * v for t, v in zip(th, xu)]
        b = b + y * 2 ** p.frac if p.bias else b
    return list(th), b


def output_cells(p: Perceptron) -> list[int]:
    """The first source cell of each weight (its sign bit; the magnitude bits follow)."""
    width = 1 + weight_bits(p)
    start = p.input_len if p.epochs % 2 == 1 else -p.params * width
    return [start + j * width for j in range(p.params)]


def step_bound(p: Perceptron) -> int:
    """Source steps: one per cell read in every epoch, one turn between epochs, one per
    weight bit written."""
    return p.epochs * p.input_len + p.epochs - 1 + p.params * (1 + weight_bits(p))


# -- the machine -------------------------------------------------------------------------------
def _sample_bits(p: Perceptron, reverse: bool) -> list[tuple[str, int, int]]:
    """The cells of one sample in reading order: ``("y", -, -)``, ``("s", j, -)`` (sign of
    feature j), ``("a", j, i)`` (magnitude bit ``i`` of feature ``j``)."""
    cells = [("y", -1, -1)]
    for j in range(p.M):
        cells.append(("s", j, -1))
        cells += [("a", j, i) for i in reversed(range(p.bits))]
    return cells[::-1] if reverse else cells


def _decode_sample(p: Perceptron, order, bits) -> tuple[int, list[int]]:
    """``(y, x in units)`` from the bits read in ``order``."""
    y = 1
    sign = [1] * p.M
    mag = [0] * p.M
    for (kind, j, i), bit in zip(order, bits):
        if kind == "y":
            y = -1 if bit else 1
        elif kind == "s":
            sign[j] = -1 if bit else 1
        else:
            mag[j] += bit << i
    return y, [s * m for s, m in zip(sign, mag)]


def _weight_bits_out(p: Perceptron, th, b) -> list[int]:
    """Every output bit in cell order (sign then magnitude, most significant first)."""
    fw = p.w_format
    fixed = [v * 2 ** p.frac for row in p.hidden for v in row]   # W, c first (relu:H's order)
    vals = np.array(fixed + list(th) + ([b] if p.bias else []), dtype=np.float64) / 2 ** p.frac
    return [int(v) for v in fw.encode(vals).ravel()]


def _minimise(rules: dict, start, halt) -> tuple[dict, object]:
    """Merge states with equal futures (the machine is acyclic: every step moves the head
    the same way within a pass, so each state's class is settled after its successors')."""
    rep: dict = {halt: halt}
    canon: dict = {}
    stack = [start]
    while stack:
        s = stack[-1]
        if s in rep:
            stack.pop()
            continue
        todo = [nxt for (_w, _m, nxt) in rules[s].values() if nxt not in rep]
        if todo:
            stack += todo
            continue
        key = tuple(sorted((a, w, m, rep[nxt]) for a, (w, m, nxt) in rules[s].items()))
        rep[s] = canon.setdefault(key, s)
        stack.pop()
    out = {s: {a: (w, m, rep[nxt]) for a, (w, m, nxt) in rules[s].items()}
           for s in rules if rep.get(s) is s}
    return out, rep[start]


def _build(p: Perceptron) -> tuple[dict, tuple, str]:
    """The rules ``{state key: {read: (write, move, next key)}}`` (reachable states only),
    the start key and the halting key."""
    halt = ("done",)
    rules: dict = {}
    start = ("read", 0, tuple([0] * (p.H or p.M)), 0, ())
    todo = [start]
    orders = {rev: _sample_bits(p, rev) for rev in (False, True)}
    while todo:
        key = todo.pop()
        if key in rules or key == halt:
            continue
        rules[key] = {}
        if key[0] == "read":
            _tag, pos, th, b, got = key   # pos = samples done in total (epoch-major)
            e = pos // p.n
            move = "R" if e % 2 == 0 else "L"
            order = orders[e % 2 == 1]
            for bit in (0, 1):
                sym = str(bit)
                bits = got + (bit,)
                if len(bits) < len(order):
                    nxt = ("read", pos, th, b, bits)
                else:
                    y, xu = _decode_sample(p, order, bits)
                    th2, b2 = _update(p, th, b, y, xu)
                    if pos + 1 == p.n * p.epochs:
                        out = _weight_bits_out(p, th2, b2)
                        nxt = ("write", tuple(out if p.epochs % 2 == 1 else reversed(out)))
                    elif (pos + 1) % p.n == 0:  # end of an epoch: turn on the blank past the data
                        nxt = ("turn", pos + 1, tuple(th2), b2)
                    else:
                        nxt = ("read", pos + 1, tuple(th2), b2, ())
                rules[key][sym] = ("*", move, nxt)
                todo.append(nxt)
        elif key[0] == "turn":
            _tag, pos, th, b = key
            nxt = ("read", pos, th, b, ())
            rules[key]["0"] = ("*", "L" if (pos // p.n) % 2 == 1 else "R", nxt)
            todo.append(nxt)
        else:  # write the remaining bits (in head order) onto blank cells
            _tag, rest = key
            move = "R" if p.epochs % 2 == 1 else "L"
            nxt = ("write", rest[1:]) if len(rest) > 1 else halt
            rules[key]["0"] = (str(rest[0]), move, nxt)
            todo.append(nxt)
    return rules, start, halt


def perceptron_machine(n: int, M: int, bits: int, frac: int, bias: bool = True, epochs: int = 1,
                       hidden: tuple = ()) -> str:
    """The machine (tm DSL text) for the perceptron of the given shape (on the fixed
    hidden ReLU layer ``hidden`` when given)."""
    p = Perceptron(n, M, bits, frac, bias, epochs, hidden)
    rules, start, halt = _build(p)
    rules, start = _minimise(rules, start, halt)
    # names: in order of first visit from the start (deterministic)
    names: dict = {}
    order = [start]
    for key in order:
        if key == halt or key in names:
            continue
        names[key] = f"q{len(names)}"
        for a in sorted(rules[key]):
            order.append(rules[key][a][2])
    names[halt] = "done"
    fw = p.w_format
    cells = output_cells(p)
    lines = []
    for key in sorted((k for k in names if k != halt), key=lambda k: int(names[k][1:])):
        for a, (w, mv, nxt) in sorted(rules[key].items()):
            lines.append(f"  {names[key]} {a} -> {w} {mv} {names[nxt]}")
    shape = f"{n} samples of {M} feature{'s' if M > 1 else ''}"
    what = ("W, c of the hidden layer, then a_1..a_H and the bias b" if hidden
            else "theta_1..theta_M then the bias b" if bias else "theta_1..theta_M")
    ex_x = np.zeros((n, M))
    ex_y = np.ones(n)
    head = [
        f"# {p.name}: the perceptron over fixed-point data, a learning algorithm for Welper §5",
        "# (tm2nn.backends.gd_trace.perceptron).",
        "#",
        f"# It reads {shape}, each its label's sign bit (0: +1, 1: -1) then per feature a sign",
        f"# bit and {bits} magnitude bits, most significant first: the value is",
        f"# (-1)^sign * magnitude / 2^{frac} (App. B's sign-magnitude format, {frac} fractional "
        f"bit{'' if frac == 1 else 's'}).",
        *([f"# It maps each sample to h = relu(W x + c), a fixed hidden layer of {p.H} ReLU units "
           f"(rows w_k, c_k: {' '.join(','.join(map(str, r)) for r in p.hidden)}),",
           "# and runs the perceptron on h: f_theta(x) = a^T relu(W x + c) + b, the relu primary network."]
          if hidden else []),
        f"# It runs {epochs} epoch{'s' if epochs > 1 else ''} of the perceptron rule from theta = 0",
        f"# (a = theta^T x_i{' + b' if bias else ''}; if y_i a <= 0: theta += y_i x_i"
        f"{', b += y_i' if bias else ''}),",
        f"# holding theta in its finite control, and writes {what}, each a sign bit and",
        f"# {fw.bits} magnitude bits, at cells {cells[0]}..{cells[-1] + fw.width - 1}.",
        "# Generated by perceptron_machine(); a test keeps this file equal to it.",
        f"# gd-trace: samples={n} features={M} theta={','.join(map(str, cells))} steps={step_bound(p)}"
        f" primary={p.primary} xbits={bits} wbits={fw.bits} frac={frac} digits=01",
        "#",
        f"# input: {dataset_text(p, ex_x, ex_y)}",
        "# outcome: halt",
        "",
        f"machine {p.name} {{",
        "  alphabet: 0 1",
        "  blank: 0",
        f"  start: {names[start]}",
        "  halt: done",
        "",
    ]
    return "\n".join(head + lines + ["}", ""])


__all__ = ["Perceptron", "dataset_text", "output_cells", "perceptron_machine", "split_features", "step_bound",
           "theta_of", "weight_bits"]
