"""The transformer in finite precision (Wei, Chen & Ma's W8: "log log T bits of precision
suffice"; issue 38, experiment d).

* :func:`round_mantissa` — round-to-nearest (ties to even) to ``p`` mantissa bits (the
  bits after the leading one, as IEEE counts them: float32 has 23, bfloat16 7), exponent
  unbounded: a float with a ``p``-bit significand and no overflow.
* :func:`with_rounded_weights` — the model with every parameter rounded so (E, h_0, every
  affine's W and b, every attention's Wq, bq, Wk, bk, Wv, bv, K_0, V_0).
* :func:`exact_at` — the forward pass with every value an op produces rounded too
  (:meth:`.perturbed_decode.PerturbedTransformer.run`'s ``rounding``: after each affine map,
  ReLU, slice, concatenation and attention, and inside an attention after Q, K, the scores
  and the mixed value; a matrix product accumulates in float64 before it is rounded), each
  decoded step compared with the interpreter's trace (:class:`.reference.TraceChecker`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tm2nn.backends.transformer.perturbed_decode import (
    PerturbedTransformer,
    net_of,
    transformer_parts,
)
from tm2nn.backends.transformer.reference import TraceChecker
from tm2nn.backends.transformer.runtime import encode
from tm2nn.nets import Affine, Attention, SparseMatrix


def round_mantissa(x, p: int):
    """``x`` (numpy or torch) rounded to ``p`` mantissa bits, to nearest, ties to even."""
    if isinstance(x, np.ndarray) or np.isscalar(x):
        m, e = np.frexp(np.asarray(x, dtype=np.float64))
        return np.ldexp(np.round(m * 2.0 ** (p + 1)) / 2.0 ** (p + 1), e)
    m, e = x.frexp()  # a torch tensor: its own methods, so this module does not load torch
    return ((m * 2.0 ** (p + 1)).round() / 2.0 ** (p + 1)).ldexp(e)


def _round_op(op, p: int):
    r = lambda a: round_mantissa(np.asarray(a, dtype=np.float64), p)  # noqa: E731
    rm = lambda w: SparseMatrix(w.shape, w.rows, w.cols, r(w.vals))  # noqa: E731
    if isinstance(op, Affine):
        return dataclasses.replace(op, weight=rm(op.weight), bias=r(op.bias))
    if isinstance(op, Attention):
        return dataclasses.replace(op, wq=rm(op.wq), wk=rm(op.wk), wv=rm(op.wv), bq=r(op.bq), bk=r(op.bk),
                                   bv=r(op.bv), null_key=r(op.null_key), null_value=r(op.null_value))
    return op


def with_rounded_weights(compiled, p: int):
    """``compiled`` with every parameter rounded to ``p`` mantissa bits."""
    net = net_of(compiled)
    embed, dec = transformer_parts(net)
    sub = lambda n: dataclasses.replace(n, nodes=tuple(_round_op(o, p) for o in n.nodes))  # noqa: E731
    embed2 = dataclasses.replace(embed, table=round_mantissa(np.asarray(embed.table, dtype=np.float64), p))
    dec2 = dataclasses.replace(dec, prologue=sub(dec.prologue), body=sub(dec.body),
                               init=round_mantissa(np.asarray(dec.init, dtype=np.float64), p))
    nodes = tuple(embed2 if o is embed else dec2 if o is dec else o for o in net.nodes)
    return dataclasses.replace(compiled, net=dataclasses.replace(net, nodes=nodes))


def ties_at(compiled, texts: list[str], p: int | None) -> set:
    """The ``(attention, step)`` pairs where the ``p``-bit forward pass (None: float64 as
    built) had a hard-max tie (several winners, averaged).  The construction ties on
    purpose in places (Lemma C.4 averages); a tie that appears only at some ``p`` is two
    scores that rounding made equal."""
    model = compiled if p is None else with_rounded_weights(compiled, p)
    P = PerturbedTransformer(model)
    P.ties = []
    with P.torch.no_grad():
        P.run(encode(model, texts), rounding=None if p is None else (lambda t: round_mantissa(t, p)))
    return {(key, step) for key, step, _ in P.ties}


def exact_at(compiled, texts: list[str], p: int | None) -> list:
    """Per input: None when every decoded step of the ``p``-bit forward pass (weights and
    activations rounded; None: float64 as built) equals the interpreter's, else the first
    divergence ``(step, field, expected, got)``."""
    model = compiled if p is None else with_rounded_weights(compiled, p)
    P = PerturbedTransformer(model)
    rnd = None if p is None else (lambda t: round_mantissa(t, p))
    with P.torch.no_grad():
        taps = P.run(encode(model, texts), rounding=rnd).numpy()
    checker = TraceChecker(compiled)
    return checker.compare(taps, texts, checker.prepare(texts))[0]

