"""Example learners, written with the builder (:mod:`tm2nn.learners.builder`).

Each is a learning algorithm *without* phases (a :class:`~tm2nn.ir.learner.BaseLearner`,
Theorem 4's ``A``) passed through :func:`~tm2nn.learners.theorem4.theorem4`, which adds
Theorem 4's learning/computing phases and gives the Lemma 3 learner (h, g) the net
emulates (Abbe & Sandon §4.1; see :mod:`tm2nn.ir.learner`).  The files
``examples/parity8.circ`` and ``examples/majority7.circ`` are :func:`tm2nn.syntax.learner_examples.example_text`
of these learners; a test checks they are equal, so they cannot rot.
"""

from __future__ import annotations

from tm2nn.ir.learner import BaseLearner, Learner
from tm2nn.learners.builder import BaseLearnerBuilder, ge_const, increment, lowest_one, mux
from tm2nn.learners.noisy import parity_learner as noisy_parity
from tm2nn.learners.theorem4 import Theorem4Options, theorem4


def parity_base(n: int = 8, strict: bool = False, name: str | None = None) -> BaseLearner:
    """Example 1's algorithm (§4.1): learn a parity ``y = <s, x> mod 2`` by Gaussian
    elimination -- Theorem 4's ``A``, without phases (:func:`parity_learner` adds them).

    Memory (``n + n + n(n-1)/2`` bits), one *pivot slot* per position i = 0 .. n-1:

    * ``full[i]``: slot i holds a stored sample;
    * ``label[i]``: its label;
    * ``row{i}[k]`` (k = 0 .. n-2-i): bit ``i+1+k`` of its input.  A row stored in
      slot i has its lowest 1 at position i ("distinct pivots"), so bits below i
      (all 0) and bit i (1) are not stored.

    Each step reduces x against the slots, in order i = 0 .. n-1: if slot i is full
    and the running ``z`` has bit i set, ``z ^= row_i`` and ``lab ^= label[i]``.  Then
    ``z = 0`` exactly when x is in the span of the stored inputs, and ``lab`` is the
    label of x there.

    * ``predict`` = ``lab``;
    * ``update`` stores ``(z, y ^ lab)`` in the slot of z's lowest 1, which is empty
      (nothing when z = 0);
    * ``done`` = ``z = 0`` (x is in the span: Example 1 computes there), or with
      ``strict=True`` all n slots full (A'' literally: done is a function of b).
    """
    if n < 1:
        raise ValueError("parity_learner needs n >= 1")
    bb = BaseLearnerBuilder(name or (f"parity{n}" + ("_strict" if strict else "")))
    x = bb.input("x", n)
    y = bb.label()
    full = bb.memory("full", n)
    label = bb.memory("label", n)
    rows = [bb.memory(f"row{i}", n - 1 - i) if i < n - 1 else () for i in range(n)]

    z = list(x)
    lab = bb.zero
    for i in range(n):
        c = full[i] & z[i]
        for k in range(n - 1 - i):
            j = i + 1 + k
            z[j] = z[j] ^ (c & rows[i][k])
        z[i] = z[i] & ~full[i]
        lab = lab ^ (c & label[i])
    in_span = ~bb.or_(*z)

    sel = lowest_one(z)  # all 0 when x is in the span: nothing to store
    new_label = y ^ lab
    for i in range(n):
        bb.update(full[i], full[i] | sel[i])
        bb.update(label[i], mux(sel[i], new_label, label[i]))
        for k in range(n - 1 - i):
            bb.update(rows[i][k], mux(sel[i], z[i + 1 + k], rows[i][k]))
    return bb.build(predict=lab, done=bb.and_(*full) if strict else in_span)


def parity_learner(n: int = 8, strict: bool = False, name: str | None = None) -> Learner:
    """Example 1's parity learner with Theorem 4's phases: ``theorem4(parity_base(...))``.

    * **Computing** (x in the span of the stored samples): ``h`` = the reduced label;
      ``g`` keeps the memory.
    * **Learning** (x outside the span): ``h = r'`` (A''); after a wrong output the
      label is ``y = NOT r'`` and ``g`` stores the reduced sample in the empty slot of
      its lowest 1 (A').  Example 1 phrases the same step as "store (x, y') and return
      NOT y'": equivalent, with y' = NOT r'.

    A sample outside the span is stored with probability 1/2, so about 2n samples
    fill all n slots when x is uniform (Example 1); from then on every x is in the
    span and the learner computes the parity exactly.

    ``strict=True`` uses Theorem 4's A'' literally: it predicts only once the memory
    says it is done (all n slots full) and outputs r' before that, even on inputs
    already in the span (the memory updates are the same).
    """
    return theorem4(parity_base(n, strict, name))


def majority_base(T: int = 7, n: int = 1, name: str | None = None) -> BaseLearner:
    """Majority vote of the labels of T learned samples, ignoring x (n input bits) --
    Theorem 4's ``A``, without phases (:func:`majority_learner` adds them).

    Memory ``ones[w]`` (how many learned labels were 1, unsigned, bit 0 least
    significant, ``w = T.bit_length()``); ``update``: ``ones += y``; ``predict``:
    ``2 ones > T``; done after T learned samples (a sample count: Theorem 4's counter).
    """
    if T < 1:
        raise ValueError("majority_learner needs T >= 1")
    bb = BaseLearnerBuilder(name or f"majority{T}")
    bb.input("x", n)
    y = bb.label()
    ones = bb.memory("ones", T.bit_length())
    bb.update(ones, increment(ones, y)[0])
    return bb.build(predict=ge_const(ones, T // 2 + 1), samples=T)


def majority_learner(T: int = 7, n: int = 1, name: str | None = None) -> Learner:
    """``theorem4(majority_base(...))``: memory ``seen[w]`` (Theorem 4's counter of
    learned samples), then ``ones[w]``.

    * **Learning** (``seen < T``): ``h = r'``; after a wrong output (y = NOT r'),
      ``seen += 1`` and ``ones += y``.  Each sample is learned with probability 1/2,
      independently of its label, so the learned labels have the stream's
      distribution (the point of A' in Theorem 4's proof).
    * **Computing** (``seen = T``): ``h = [2 ones > T]``; ``g`` keeps the memory.
    """
    return theorem4(majority_base(T, n, name), Theorem4Options(counter="seen"))


#: file name in ``examples/`` -> (builder call, header comment)
EXAMPLES = {
    "parity8.circ": (lambda: parity_learner(8), """\
parity8: learns a parity y = <s, x> mod 2 over 8 bits by Gaussian elimination
(Abbe & Sandon, Example 1), with Theorem 4's learning/computing phases added by
the transformation tm2nn.learners.theorem4.theorem4.
Generated by tm2nn.learners.examples.parity_learner(8); do not edit by hand.

Ports of h and g, in order: x[0..7] (data), rp (the coin r'), then the memory.
Memory (44 bits, all 0 at the start), one pivot slot per position i = 0..7:
  full[i]   slot i holds a stored sample
  label[i]  its label
  rowI[k]   bit I+1+k of its input (its lowest 1 is at I, so lower bits aren't kept)
Each step reduces x against the full slots (z ^= row_i when z has bit i set).
The algorithm A: predict the reduced label; update = store the reduced z and its
label y in the slot of z's lowest 1; done = (z = 0, x is in the span).
Theorem 4's phases:
  done (computing):       h = A's prediction; g keeps the memory.
  not done (learning):    h = rp; after a wrong output (y = NOT rp) g = A's update.
About 2n = 16 uniform samples fill all 8 slots; then h is the parity everywhere.

target: parity:10110010
samples: 64
"""),
    "majority7.circ": (lambda: majority_learner(7), """\
majority7: the majority vote of the labels of 7 learned samples (x is ignored).
The algorithm A: ones += y; predict 1 if ones >= 4; done after T = 7 learned
samples.  Theorem 4's phases (Abbe & Sandon, section 4.1) and the counter of
learned samples are added by the transformation tm2nn.learners.theorem4.theorem4.
Generated by tm2nn.learners.examples.majority_learner(7); do not edit by hand.

Ports of h and g, in order: x[0] (data, unused), rp (the coin r'), then the memory.
Memory (6 bits, all 0 at the start), unsigned, bit 0 least significant:
  seen[0..2]  samples learned so far (0..7), Theorem 4's counter
  ones[0..2]  how many of them had label 1
  seen < 7 (learning):   h = rp; after a wrong output (y = NOT rp)
                         seen += 1, ones += y.
  seen = 7 (computing):  h = 1 if ones >= 4 else 0; g keeps the memory.

target: const:1
samples: 40
"""),
}


def _noisy_parity3():
    return noisy_parity(3, 10)


#: §4.2 (Lemma 6) learners in ``examples/``: file name -> (builder call, header comment)
NOISY_EXAMPLES = {
    "noisy_parity3.circ": (_noisy_parity3, """\
noisy_parity3: a learner for Lemma 6's net (Abbe & Sandon, section 4.2): learns a
parity y = <s, x> mod 2 over n = 3 bits from t = 10 stored samples by Gaussian
elimination over GF(2), as one circuit h of the samples and the test input.
Generated by tm2nn.learners.noisy.parity_learner(3, 10); do not edit by hand.

Ports of h, in order: x0[0..2] y0 x1[0..2] y1 ... x9[0..2] y9 (the 10 training
samples, each input then its label), then x[0..2] (the input to answer for).
h reduces the augmented rows [x(k) | y(k)] to reduced row echelon form, reads off
s (free variables 0) and outputs <x, s> mod 2.  If x(0..9) span GF(2)^3 then s is
the target's secret: for 10 uniform samples that happens with probability
(1 - 2^-10)(1 - 2^-9)(1 - 2^-8) > 0.99 (the stream of seed 0 below spans).
'tm2nn learn' trains Lemma 6's net G_n (2nt = 60 copies of M') on the first t
samples of the stream, with noise, and tests it on fresh inputs.

target: parity:101
samples: 10
"""),
}


__all__ = ["parity_base", "parity_learner", "majority_base", "majority_learner", "EXAMPLES", "NOISY_EXAMPLES"]
