"""Theorem 4's learning phase as a transformation (Abbe & Sandon §4.1, proof of
Theorem 4, Remark 10, Example 1; in ``papers/003_*.clean.txt``: Theorem 4 at line 425,
its proof from 435, A' at 442, A'' at 465, Remark 10 at 475, Example 1 at 157).

Lemma 3's net G_n changes its memory only when its output is wrong.  Theorem 4's
proof makes *any* learning algorithm fit that mould: given the algorithm's memory
update ``A(b, x, y, r)`` and prediction ``A(b, x)`` (a
:class:`~tm2nn.ir.learner.BaseLearner`), it runs

* ``A'(b, x, y, r, r') = b if y = r' else A(b, x, y, r)`` -- learn from each sample
  with probability 1/2, independently of the sample, so the learned samples have the
  stream's distribution ("the probability distribution of (b_{i-1}, x_i, F(x_i), r_i)
  is independent of whether or not y_i = r'_i");
* ``A''(b, x, r, r') = A(b, x) if b "results from training on enough samples" else r'``.

:func:`theorem4` builds the Lemma 3 learner (h, g) over ``x ++ r ++ r' ++ b`` that
the net emulates:

* ``h = done ? A(b, x) : r'``.  While learning, h outputs the coin, so it is wrong
  exactly when ``y != r'`` -- then the label is ``y = NOT r'``:
* ``g = done ? b : A(b, x, NOT r', r)``, so the memory follows A' while learning, and
  stays frozen once done (the proof assumes the algorithm "stops learning if it
  receives additional samples"; the gate makes that true for any A, also when a
  label disagrees with the prediction).

``done`` is one of (the :class:`~tm2nn.ir.learner.BaseLearner` has exactly one):

(a) the algorithm's own predicate over (x, r, b): Example 1's parity learner predicts
    once x is in the span of its stored samples (``done`` may read x), or once its
    memory is full (``done`` reads b only, A'' literally);
(b) a sample count T: "results from training on enough samples", the proof's "the
    algorithm counts the samples it has received, learns from the designated number".
    The transformation adds a counter of the learned samples to the memory (first,
    before the algorithm's bits, all 0 at the start), ``done = counter >= T``; the
    counter goes up by one on every update while learning, so it stops at T.

``done`` reads neither y nor r' (its ports are x ++ r ++ b), so whether a sample is
learned is independent of its label -- the proof's argument that the learned samples
have the stream's distribution.  With a uniform coin, about 2T stream samples give T
learned ones (Remark 10: T_n is about twice the samples the algorithm needs).

One departure, an optimisation that changes no bit: the gate on ``g`` is left out
for a memory bit whose update is provably ``b`` already when ``done`` holds (unit
propagation of what ``done = 1`` forces, then constant folding:
:meth:`~tm2nn.learners.builder.CircuitBuilder.cofactor`).  Example 1's update stores
into the slot of x's lowest unreduced 1 and there is none once x is in the span, so
the parity learner needs no gate (Remark 10: the net has Θ(gates) vertices).
"""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.ir.learner import BaseLearner, Learner
from tm2nn.learners.builder import Bit, LearnerBuilder, ge_const, increment, mux
from tm2nn.source import error_at


@dataclass(frozen=True)
class Theorem4Options:
    """Names the transformation gives to what it adds."""

    #: The learner's name (default: the base learner's).
    name: str | None = None
    #: The coin r' (Remark 10's bit "to randomly choose outputs during the learning phase").
    coin: str = "rp"
    #: The learned-sample counter's bits are ``counter[0..w-1]`` (bit 0 least
    #: significant, w = T.bit_length()); only with a sample count T.
    counter: str = "seen"
    #: Drop the gate on g where the update is provably b once done (module doc).
    prune: bool = True


def counter_width(samples: int) -> int:
    """Bits of the learned-sample counter for a sample count T (it counts 0..T)."""
    return samples.bit_length()


def theorem4(base: BaseLearner, options: Theorem4Options | None = None) -> Learner:
    """The Lemma 3 learner (h, g) emulating Theorem 4's A'/A'' for ``base`` (module doc).

    Ports ``x ++ r ++ r' ++ b'`` with ``b' = counter ++ b`` for a sample count, else
    ``b``; initial memory ``0 ++ base.init``."""
    opt = options or Theorem4Options()
    taken = set(base.ports) | {base.label}
    count_names = ([f"{opt.counter}[{i}]" for i in range(counter_width(base.samples))]
                   if base.samples is not None else [])
    for nm in [opt.coin] + count_names:
        if nm in taken:
            raise error_at(base.loc, f"Theorem 4 adds the bit {nm!r}, but the base learner "
                           f"{base.name!r} already has a port of that name")
    lb = LearnerBuilder(opt.name or base.name)
    x = [lb.input(nm) for nm in base.inputs]
    r = [lb.random(nm) for nm in base.random]
    rp = lb.coin(opt.coin)
    count = lb.memory(opt.counter, len(count_names)) if count_names else None
    b = [lb.memory(nm, init=v) for nm, v in zip(base.memory, base.init)]
    ports = dict(zip(base.ports, x + r + b))

    if count is not None:
        done = ge_const(count, base.samples)
    else:
        (done,) = lb.inline(base.done, ports)
    (pred,) = lb.inline(base.predict, ports)
    y = learning_label(rp)
    new = lb.inline(base.update, {**ports, base.label: y})

    # A'': predict once done, else the coin r'.
    h = mux(done, pred, rp)
    # A': after a wrong output while learning, the algorithm's update with y = NOT r'.
    g = gate_update(lb, done, b, new, prune=opt.prune)
    lb.update(b, g)
    if count is not None:
        lb.update(count, increment(count, ~done)[0])
    return lb.build(h)


def learning_label(rp: Bit) -> Bit:
    """The label of a sample the learning phase learns from: h output r' and was
    wrong, so y = NOT r' (proof of Theorem 4: A' applies A exactly when y != r')."""
    return ~rp


def gate_update(lb: LearnerBuilder, done: Bit, b: list[Bit], new: list[Bit], *, prune: bool = True) -> list[Bit]:
    """``g = done ? b : new``, bit by bit, leaving out the gate where ``new`` is
    provably ``b`` whenever ``done`` (module doc)."""
    if not prune:
        return [mux(done, bi, n) for bi, n in zip(b, new)]
    facts = lb.implied(done, 1)
    same = [(u.const, u.name) == (v.const, v.name)
            for u, v in zip(lb.cofactor(new, facts), lb.cofactor(b, facts))]
    return [n if s else mux(done, bi, n) for bi, n, s in zip(b, new, same)]


__all__ = ["Theorem4Options", "theorem4", "counter_width", "learning_label", "gate_update"]
