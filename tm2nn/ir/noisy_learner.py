"""The learner form of Abbe & Sandon §4.2 (Lemma 6 / Theorem 5): one circuit ``h_n``.

Lemma 6 emulates *any* polynomial-time function

    h_n : {0,1}^{(n+1) t_n + n} -> {0,1},   h_n(x(0), y(0), x(1), y(1), ..., x(t_n-1), y(t_n-1), x)

of the ``t_n`` training samples ``(x(i), y(i))`` and the final input ``x`` (the paper writes
the last argument ``x(t_n)``).  Unlike §4.1's learner (h, g, memory updated after each
mistake) nothing is updated here: the net stores every sample once (Lemma 4, one copy of
M' per (step, bit, value)) and evaluates h once, at the end.  Theorem 5 adds t_n random bits
b_i as extra input bits; that is the same form with the coins as part of x, so it is not a
separate class.

A :class:`NoisyLearner` is ``h`` (a :class:`~tm2nn.ir.circuit.Circuit` with exactly the ports
of :func:`ports`, in that order, and one output) plus ``n`` and ``t``.  Constructors are in
:mod:`tm2nn.learners.noisy`; the abbe-sandon backend compiles and trains it (Lemma 6's
net, :mod:`tm2nn.backends.abbe_sandon.noisy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.errors import Loc
from tm2nn.interp.circuit import eval_circuit
from tm2nn.ir.circuit import Circuit
from tm2nn.ir.learner import port_mismatch
from tm2nn.source import error_at


def ports(n: int, t: int) -> tuple[str, ...]:
    """Lemma 6's argument order: ``x0[0..n-1], y0, ..., x{t-1}[..], y{t-1}, x[0..n-1]``."""
    out: list[str] = []
    for k in range(t):
        out += [f"x{k}[{i}]" for i in range(n)] + [f"y{k}"]
    return tuple(out + [f"x[{i}]" for i in range(n)])


#: Largest n * t a file may declare (h reads (n + 1) t + n ports; G_n has 2 n t copies of M').
MAX_PORTS = 1 << 16


@dataclass(frozen=True)
class NoisyLearner:
    """h_n of Lemma 6 over :func:`ports` (n, t), one output bit."""

    name: str
    n: int
    t: int
    h: Circuit
    loc: Loc | None = field(default=None, compare=False, repr=False)
    #: Where each item was written (keys ``input`` ``samples`` ``h``), for error messages.
    locs: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate_noisy_learner(self)

    @property
    def ports(self) -> tuple[str, ...]:
        return ports(self.n, self.t)

    def summary(self) -> dict:
        return {
            "kind": "noisy learner",
            "name": self.name,
            "inputs": self.n,
            "samples": self.t,
            "h": self.h.name,
            "h_ports": (self.n + 1) * self.t + self.n,
            "h_gates": len(self.h.gates),
            "h_depth": self.h.depth,
            "mprime_copies": 2 * self.n * self.t,
        }

    def __call__(self, xs, ys, x) -> int:
        """Reference value h(x(0), y(0), ..., x(t-1), y(t-1), x) (bits 0/1)."""
        xs = np.asarray(xs, dtype=bool).reshape(self.t, self.n)
        row: list[bool] = []
        for k in range(self.t):
            row += list(xs[k]) + [bool(ys[k])]
        row += list(np.asarray(x, dtype=bool).reshape(self.n))
        return int(eval_circuit(self.h, np.array([row]))[0, 0])


def validate_noisy_learner(lr: NoisyLearner) -> None:
    """All structural checks for a §4.2 learner (the circuit validated itself); errors
    carry the file position of the item at fault when the learner came from a file."""
    where = lr.loc
    if not lr.name:
        raise error_at(where, "noisy learner has an empty name")
    for key, v, what in (("input", lr.n, "input bits n"), ("samples", lr.t, "samples t")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise error_at(lr.locs.get(key, where), f"noisy learner {lr.name!r}: the number of {what} "
                           f"must be an integer >= 1, got {v!r}")
    if lr.n * lr.t > MAX_PORTS:
        raise error_at(lr.locs.get("samples", where), f"noisy learner {lr.name!r}: n * t = {lr.n * lr.t} "
                       f"is too large (at most {MAX_PORTS})")
    at = lr.locs.get("h", where)
    if not isinstance(lr.h, Circuit):
        raise error_at(at, f"h must be a Circuit, got {type(lr.h).__name__}")
    want, got = ports(lr.n, lr.t), tuple(lr.h.inputs)
    notes = (f"{lr.h.loc}: note: circuit {lr.h.name!r} is defined here",) if lr.h.loc else ()
    if got != want:
        detail = port_mismatch(got, want, "ports(n, t) has")
        raise error_at(at, f"the output circuit {lr.h.name!r} of noisy learner {lr.name!r} must read "
                       f"x0[0..n-1], y0, ..., x{{t-1}}[..], y{{t-1}}, x[0..n-1] with n = {lr.n}, t = {lr.t} "
                       f"({len(want)} bits, in that order): {detail}", notes=notes)
    if len(lr.h.outputs) != 1:
        raise error_at(at, f"the output circuit {lr.h.name!r} must have exactly one output "
                       f"(Lemma 6: h_n -> {{0,1}}), it has {len(lr.h.outputs)}", notes=notes)


__all__ = ["MAX_PORTS", "NoisyLearner", "ports", "validate_noisy_learner"]
