"""Learner — a learning algorithm given as two circuits, the IR the Abbe–Sandon
emulation net (Abbe & Sandon, §4.1, Lemma 3 and Theorem 4) is built from.

Groups and ports
----------------
A learner has four named groups of bits:

* ``inputs`` ``x`` (n >= 1 bits): the sample's input;
* ``random`` ``r`` (k >= 0 bits): the algorithm's own coins (Theorem 4's ``r``;
  Remark 10: "another [bit] to supply randomness in order to emulate randomized
  algorithms");
* ``coin`` ``r'`` (0 or 1 bit): the learning-phase coin of Theorem 4's ``A'``
  (Remark 10: "one in order to randomly choose outputs during the learning phase");
* ``memory`` ``b`` (m >= 1 bits): the algorithm's memory, initially ``init``
  (default all 0, Lemma 3's ``b_0 = (0, ..., 0)``; Theorem 4 allows any ``b^0``).

Both circuits read the *ports* ``x ++ r ++ r' ++ b``, with exactly these names in
exactly this order (the order of the net's inputs ``(2x-1, 2r-1, 2r'-1)`` in
Theorem 4, followed by the memory):

* ``h`` has one output: the learner's output ``y*`` (Lemma 3's ``h_n``);
* ``g`` has m outputs, in memory order: the memory after a *wrong* output
  (Lemma 3's ``g_n``).

Semantics (exactly Lemma 3)
---------------------------
Write ``z_t = (x_t, r_t, r'_t)`` for the whole input of step ``t`` (Lemma 3's
``x_t``: the net cannot tell a random input bit from a data bit).  With
``b_0 = init`` and labels ``y_t`` in {0, 1}, for t = 1, 2, ...::

    y*_t = h(z_t, b_{t-1})
    b_t  = b_{t-1}             if y*_t == y_t
           g(z_t, b_{t-1})     otherwise

So ``g`` does **not** read the label: it is applied only when the output was wrong,
when ``y_t = 1 - h(z_t, b_{t-1})``; a ``g`` that needs the label recomputes ``h``
(or the part of it it needs).  This is the one thing the Lemma 3 net can do: SGD
moves the memory weights only on a wrong output ("the values these components are
storing can only change when the net gets the output wrong", §4.1).

Learning and computing phases (Theorem 4)
-----------------------------------------
The phases are written *in* h and g, so that the net builder implements Lemma 3's
``h_n``/``g_n`` and nothing else.  They are not written by hand: a learning algorithm
is given as a :class:`BaseLearner` -- Theorem 4's ``A(b, x, y, r)`` (the memory
update, which reads the label) and ``A(b, x)`` (its prediction), plus a rule saying
when the memory "results from training on enough samples" -- and
:func:`tm2nn.learners.theorem4.theorem4` turns it into the :class:`Learner` of the
proof's

* ``A'(b, x, y, r, r') = b if y = r' else A(b, x, y, r)`` and
* ``A''(b, x, r, r') = A(b, x) if b "results from training on enough samples" else r'``.

That is: a ``done`` bit (the algorithm's own predicate over (x, r, b), or a saturating
counter of learned samples reaching T); ``h = done ? A(b, x) : r'``; and
``g = done ? b : A(b, x, NOT r', r)`` -- while learning, ``h`` outputs ``r'``, so it
is wrong exactly when ``y != r'``, and then ``y = NOT r'`` is the label ``g`` feeds
to ``A``.  A ``g`` that returns ``b`` in the computing phase keeps the memory frozen
even if a (noisy) label disagrees.  The example learners
(:mod:`tm2nn.learners.examples`) are base learners passed through it; in a ``.circ``
file, a ``learner`` block with the item ``phases theorem4`` is a base learner (the
block's ``predict``/``update``/``done`` or ``samples`` items), loaded as its
transformation.  A :class:`Learner` can still be written directly (the builder's
``LearnerBuilder``, or a plain ``learner`` block) for schemes other than Theorem 4's.

For the noise-tolerant variant (§4.2, Lemma 6 / Theorem 5) a learner is instead a
function of the whole stored sample sequence; that variant needs only ``h`` and the
bound t_n on the samples, and is not what this IR describes.

Validation lives in :func:`validate_learner` and :func:`validate_base_learner`, called
from ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tm2nn.errors import Loc
from tm2nn.ir.circuit import Circuit
from tm2nn.source import error_at

#: Largest memory a learner may declare (the net has a memory component per bit).
MAX_MEMORY = 1 << 20


@dataclass(frozen=True, eq=False)
class Learner:
    """A learner: output circuit ``h``, memory-update circuit ``g`` (see the module doc)."""

    name: str
    inputs: tuple[str, ...]
    memory: tuple[str, ...]
    h: Circuit
    g: Circuit
    random: tuple[str, ...] = ()
    coin: tuple[str, ...] = ()
    #: Initial memory b_0, one 0/1 per memory bit; ``None`` means all 0.
    init: tuple[int, ...] | None = None
    loc: Loc | None = field(default=None, compare=False, repr=False)
    #: Where each group/item was written (keys ``input`` ``random`` ``coin`` ``memory``
    #: ``init`` ``h`` ``g``, and ``port:NAME``), for error messages; optional.
    locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for k in ("inputs", "memory", "random", "coin"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        init = (0,) * len(self.memory) if self.init is None else tuple(int(v) if v in (0, 1) else v
                                                                         for v in self.init)
        object.__setattr__(self, "init", init)
        validate_learner(self)

    # ---------------------------------------------------------------- shape

    @property
    def n(self) -> int:
        """Number of data input bits."""
        return len(self.inputs)

    @property
    def m(self) -> int:
        """Number of memory bits."""
        return len(self.memory)

    @property
    def k(self) -> int:
        """Number of random bits (``r`` plus ``r'``), the extra net inputs of Theorem 4."""
        return len(self.random) + len(self.coin)

    @property
    def ports(self) -> tuple[str, ...]:
        """The inputs of ``h`` and ``g``: ``x ++ r ++ r' ++ b``."""
        return self.inputs + self.random + self.coin + self.memory

    @property
    def net_inputs(self) -> tuple[str, ...]:
        """The net's input vector, in order: ``x ++ r ++ r'`` (each fed as 2v-1)."""
        return self.inputs + self.random + self.coin

    def summary(self) -> dict:
        return {
            "kind": "learner",
            "name": self.name,
            "inputs": self.n,
            "random": len(self.random),
            "coin": len(self.coin),
            "memory": self.m,
            "memory_init_ones": sum(self.init),
            "h": self.h.name,
            "h_gates": len(self.h.gates),
            "h_depth": self.h.depth,
            "g": self.g.name,
            "g_gates": len(self.g.gates),
            "g_depth": self.g.depth,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Learner):
            return NotImplemented
        return (
            self.name == other.name
            and self.inputs == other.inputs
            and self.memory == other.memory
            and self.random == other.random
            and self.coin == other.coin
            and self.init == other.init
            and self.h == other.h
            and self.g == other.g
        )

    __hash__ = None  # type: ignore[assignment]


def _group_where(lr: Learner, key: str) -> Loc | None:
    return lr.locs.get(key, lr.loc)


def validate_learner(lr: Learner) -> None:
    """All structural checks for learners (the circuits validated themselves)."""
    where = lr.loc
    if not lr.name:
        raise error_at(where, "learner has an empty name")
    if not lr.inputs:
        raise error_at(_group_where(lr, "input"), f"learner {lr.name!r} has no input bits")
    if not lr.memory:
        raise error_at(_group_where(lr, "memory"),
                       f"learner {lr.name!r} has no memory bits (a learner without memory cannot learn)")
    if len(lr.memory) > MAX_MEMORY:
        raise error_at(_group_where(lr, "memory"),
                       f"learner {lr.name!r} has {len(lr.memory)} memory bits (at most {MAX_MEMORY})")
    if len(lr.coin) > 1:
        raise error_at(_group_where(lr, "coin"),
                       f"a learner has at most one coin bit (Theorem 4's r'), got {len(lr.coin)}")
    seen: dict[str, str] = {}
    for group, names in (("input", lr.inputs), ("random", lr.random), ("coin", lr.coin),
                         ("memory", lr.memory)):
        for nm in names:
            if not isinstance(nm, str) or not nm:
                raise error_at(_group_where(lr, group), f"{group} bit names must be non-empty strings")
            if nm in seen:
                raise error_at(lr.locs.get("port:" + nm, _group_where(lr, group)),
                               f"bit {nm!r} is in the {group} group and already in the {seen[nm]} group"
                               if seen[nm] != group else f"{group} bit {nm!r} is declared twice")
            seen[nm] = group
    for key, c, outs in (("h", lr.h, 1), ("g", lr.g, len(lr.memory))):
        if not isinstance(c, Circuit):
            raise error_at(_group_where(lr, key), f"{key} must be a Circuit, got {type(c).__name__}")
        _check_ports(lr, key, c)
        if len(c.outputs) != outs:
            what = ("one output (the learner's output y*)" if key == "h"
                    else f"{outs} outputs (the next memory, one per memory bit)")
            raise error_at(_group_where(lr, key),
                           f"{key} circuit {c.name!r} must have {what}, it has {len(c.outputs)}")
    if len(lr.init) != len(lr.memory):
        raise error_at(_group_where(lr, "init"),
                       f"initial memory has {len(lr.init)} bits, the memory has {len(lr.memory)}")
    bad = [v for v in lr.init if v not in (0, 1)]
    if bad:
        raise error_at(_group_where(lr, "init"), f"initial memory bits must be 0 or 1, got {bad[0]!r}")


def port_mismatch(got, want, where: str) -> str:
    """How the port list ``got`` differs from ``want``: the first differing input, or
    the missing or extra one (``where`` names whose list ``want`` is)."""
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"its input {i} is {a!r} where {where} {b!r}"
    return (f"it has {len(got)} inputs; "
            + (f"missing {want[len(got)]!r}" if len(got) < len(want) else f"extra {got[len(want)]!r}"))


def _check_ports(lr: Learner, key: str, c: Circuit) -> None:
    want = lr.ports
    got = c.inputs
    if got == want:
        return
    role = "h (output)" if key == "h" else "g (memory update)"
    head = (f"the {role} circuit {c.name!r} must read the learner's ports in order "
            f"x ++ r ++ r' ++ b ({len(want)} bits)")
    detail = port_mismatch(got, want, "the learner has")
    notes = (f"{c.loc}: note: circuit {c.name!r} is defined here",) if c.loc else ()
    raise error_at(_group_where(lr, key), f"{head}: {detail}", notes=notes)


# ---------------------------------------------------------------- base learners (Theorem 4's A)

#: Largest sample count T a base learner may ask the transformation to count to.
MAX_SAMPLES = 1 << 40


@dataclass(frozen=True, eq=False)
class BaseLearner:
    """A learning algorithm *without* phases: Theorem 4's ``A`` (Abbe & Sandon §4.1,
    proof of Theorem 4), the input of :func:`tm2nn.learners.theorem4.theorem4`.

    * ``predict``: ``A(b, x)``, the answer for ``x`` (may read the random bits r too),
      ports ``x ++ r ++ b``, one output;
    * ``update``: ``A(b, x, y, r)``, the memory after learning from the sample (x, y),
      ports ``x ++ r ++ (label,) ++ b``, one output per memory bit (memory order);
    * when the memory "results from training on enough samples" (A''), either
      ``done``: a predicate over ``x ++ r ++ b`` (one output) supplied by the algorithm,
      such as Example 1's "x is in the span of the stored samples"; or ``samples``: the
      number T of learned samples after which it is done (the proof's "the algorithm
      counts the samples it has received, learns from the designated number, and then
      stops learning") -- the transformation adds the counter.  Exactly one is given.
    """

    name: str
    inputs: tuple[str, ...]
    memory: tuple[str, ...]
    predict: Circuit
    update: Circuit
    done: Circuit | None = None
    samples: int | None = None
    random: tuple[str, ...] = ()
    #: The name of the label port of ``update`` (Theorem 4's y).
    label: str = "y"
    #: Initial memory b^0, one 0/1 per memory bit; ``None`` means all 0.
    init: tuple[int, ...] | None = None
    loc: Loc | None = field(default=None, compare=False, repr=False)
    #: Where each item was written (keys ``input`` ``random`` ``label`` ``memory``
    #: ``init`` ``predict`` ``update`` ``done`` ``samples``, ``port:NAME``); optional.
    locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for k in ("inputs", "memory", "random"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        init = (0,) * len(self.memory) if self.init is None else tuple(self.init)
        object.__setattr__(self, "init", init)
        validate_base_learner(self)

    @property
    def m(self) -> int:
        """Number of memory bits."""
        return len(self.memory)

    @property
    def ports(self) -> tuple[str, ...]:
        """The inputs of ``predict`` and ``done``: ``x ++ r ++ b``."""
        return self.inputs + self.random + self.memory

    @property
    def update_ports(self) -> tuple[str, ...]:
        """The inputs of ``update``: ``x ++ r ++ (y,) ++ b``."""
        return self.inputs + self.random + (self.label,) + self.memory

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BaseLearner):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k)
                   for k in ("name", "inputs", "memory", "random", "label", "init", "samples",
                             "predict", "update", "done"))

    __hash__ = None  # type: ignore[assignment]


def validate_base_learner(bl: BaseLearner) -> None:
    """All structural checks for base learners (the circuits validated themselves)."""
    def where(key: str) -> Loc | None:
        return bl.locs.get(key, bl.loc)

    if not bl.name:
        raise error_at(bl.loc, "base learner has an empty name")
    if not bl.inputs:
        raise error_at(where("input"), f"base learner {bl.name!r} has no input bits")
    if not bl.memory:
        raise error_at(where("memory"), f"base learner {bl.name!r} has no memory bits "
                       "(a learner without memory cannot learn)")
    if len(bl.memory) > MAX_MEMORY:
        raise error_at(where("memory"), f"base learner {bl.name!r} has {len(bl.memory)} memory bits "
                       f"(at most {MAX_MEMORY})")
    seen: dict[str, str] = {}
    for group, names in (("input", bl.inputs), ("random", bl.random), ("label", (bl.label,)),
                         ("memory", bl.memory)):
        for nm in names:
            if not isinstance(nm, str) or not nm:
                raise error_at(where(group), f"{group} bit names must be non-empty strings")
            if nm in seen:
                raise error_at(bl.locs.get("port:" + nm, where(group)),
                               f"bit {nm!r} is in the {group} group and already in the {seen[nm]} group"
                               if seen[nm] != group else f"{group} bit {nm!r} is declared twice")
            seen[nm] = group
    if (bl.done is None) == (bl.samples is None):
        raise error_at(bl.loc, f"base learner {bl.name!r} needs exactly one rule for when it is done "
                       "learning (Theorem 4's A''): a 'done' circuit or a sample count T"
                       + (", not both" if bl.done is not None else ""))
    if bl.samples is not None and (isinstance(bl.samples, bool) or not isinstance(bl.samples, int)
                                   or not 1 <= bl.samples <= MAX_SAMPLES):
        raise error_at(where("samples"), f"the sample count T must be an integer in 1..{MAX_SAMPLES}, "
                       f"got {bl.samples!r}")
    for key, c, ports, outs in (("predict", bl.predict, bl.ports, 1), ("update", bl.update, bl.update_ports, bl.m),
                                ("done", bl.done, bl.ports, 1)):
        if c is None:
            continue
        if not isinstance(c, Circuit):
            raise error_at(where(key), f"{key} must be a Circuit, got {type(c).__name__}")
        if c.inputs != ports:
            spell = "x ++ r ++ y ++ b" if key == "update" else "x ++ r ++ b"
            notes = (f"{c.loc}: note: circuit {c.name!r} is defined here",) if c.loc else ()
            raise error_at(where(key), f"the {key} circuit {c.name!r} must read the base learner's ports "
                           f"in order {spell} ({len(ports)} bits): "
                           + port_mismatch(c.inputs, ports, "the base learner has"), notes=notes)
        if len(c.outputs) != outs:
            what = (f"{outs} outputs (the next memory, one per memory bit)" if key == "update"
                    else "one output")
            raise error_at(where(key), f"{key} circuit {c.name!r} must have {what}, it has {len(c.outputs)}")
    if len(bl.init) != len(bl.memory):
        raise error_at(where("init"), f"initial memory has {len(bl.init)} bits, the memory has {len(bl.memory)}")
    bad = [v for v in bl.init if v not in (0, 1)]
    if bad:
        raise error_at(where("init"), f"initial memory bits must be 0 or 1, got {bad[0]!r}")
    object.__setattr__(bl, "init", tuple(int(v) for v in bl.init))
