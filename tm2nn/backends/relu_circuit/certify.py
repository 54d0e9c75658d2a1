"""A certificate for any weights of the relu-circuit construction's shape (issue 38, Deliver 2).

:func:`.margin.certified_radius`'s tight bound reads the construction's invariants off its
weights (every circuit layer's unperturbed output is an exact bit vector, λ from the
hypercube).  A trained or edited net of the same shape keeps none of them, so here:

* :func:`input_space` — the inputs the certificate covers and their labels from the
  reference interpreter: every input when the circuit has at most 16 (2^16 rows), else a
  seeded sample; a line machine's unrolled circuit (its inputs are the encoded tapes of the
  verifier's input space).
* :func:`forward` — the net's actual forward pass over those inputs (every value kept).
* :func:`check_correct` — the precondition: the decoded outputs equal the labels on every
  input of the space, else "not certified: wrong on k of n inputs".
* :func:`general_radius` — the largest ε for which Lipschitz propagation of per-block
  perturbations through the *actual* weights, from the *actual* reference run, keeps every
  output on its side of the threshold on every input of the space (derivation:
  docs/relu_circuit.md, "A certificate for any weights").  A Prop. 3.4 correction whose
  weights still make it coordinatewise exact (Definition D.1, :func:`.margin.correction_radius`)
  restarts the error, as in Theorem D.6; otherwise errors run through every later layer.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from tm2nn.backends.protocol import Model
from tm2nn.backends.relu_circuit.build import unroll_machine
from tm2nn.backends.relu_circuit.codec import encode_tapes, encoding
from tm2nn.backends.relu_circuit.layers import blocks
from tm2nn.backends.relu_circuit.options import Options
from tm2nn.interp import eval_circuit, exhaustive_inputs, random_inputs
from tm2nn.ir import Circuit
from tm2nn.limits import check_memory
from tm2nn.nets import Affine, ReLU, Slice
from tm2nn.verify.check import EXHAUSTIVE_LIMIT, InputSpace
from tm2nn.verify.margin_toolkit import Coordinatewise, sparse_apply, spectral_norm, sup_log_decades

#: at most this many inputs are enumerated (2^16, the verifier's exhaustive limit); above, a sample
EXHAUSTIVE_INPUTS = 16
#: the size of the seeded sample of a larger input space
SAMPLES = 4096


def options_of(compiled: Model) -> Options:
    """The backend Options a compiled model was built with (its options minus the facts)."""
    names = {f.name for f in fields(Options)}
    return Options(**{k: v for k, v in compiled.options.items() if k in names})


def input_space(compiled: Model, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """(inputs 0/1 [n, n_in], labels 0/1 [n, n_out] from the reference interpreter, a
    description).  A circuit: every input up to 16 of them, else ``SAMPLES`` seeded random
    ones.  A line machine: its unrolled circuit (:func:`.build.unroll_machine`, verified
    against the machine interpreter by the backend's tests) on the encoded tapes of the
    verifier's input space over the tape window."""
    src = compiled.source
    if isinstance(src, Circuit):
        circuit, m = src, len(src.inputs)
        if m <= EXHAUSTIVE_INPUTS:
            return exhaustive_inputs(m), eval_circuit(circuit, exhaustive_inputs(m)), f"all {2 ** m} inputs"
        check_memory(2 * SAMPLES * m, f"{SAMPLES:,} random inputs of {m} bits", ())
        x = random_inputs(m, SAMPLES, seed)
        return x, eval_circuit(circuit, x), f"{len(x)} random inputs (seed {seed})"
    circuit, layout = unroll_machine(src, options_of(compiled))
    tapes, kind, _ = InputSpace(layout.alphabet, 0, layout.tape - layout.origin, EXHAUSTIVE_LIMIT).pick(SAMPLES, seed)
    x = encode_tapes(encoding(layout), tapes[:SAMPLES]) > 0.5
    return x, eval_circuit(circuit, x), f"{len(x)} tapes ({'all of them' if kind == 'exhaustive' else f'seed {seed}'})"


def forward(net, x: np.ndarray) -> dict:
    """Every value of the chain net on the batch ``x`` (float64), by name."""
    vals = {net.inputs[0].name: np.asarray(x, dtype=np.float64)}
    for op in net.nodes:
        h = vals[op.inputs[0]]
        if isinstance(op, Affine):
            vals[op.name] = sparse_apply(op.weight, op.bias, h)
        elif isinstance(op, ReLU):
            vals[op.name] = np.maximum(h, 0.0)
        elif isinstance(op, Slice):
            vals[op.name] = h[:, list(op.indices)]
        else:
            raise ValueError(f"op {op.name!r} ({op.kind}) is not one of the relu-circuit construction's")
    return vals


def threshold(compiled: Model) -> float:
    """The decoding threshold of an output (0.5 for 0/1 outputs, 0 for ±1)."""
    return 0.0 if compiled.output_encoding.get("values") == "pm1" else float(
        compiled.output_encoding.get("threshold", 0.5))


def check_correct(compiled: Model, x: np.ndarray, labels: np.ndarray, vals: dict | None = None):
    """(wrong: a bool per input, the forward values): the decoded outputs against the labels."""
    vals = forward(compiled.net, x) if vals is None else vals
    y = vals[compiled.net.outputs[0]]
    return np.any((y > threshold(compiled)) != np.asarray(labels, dtype=bool), axis=1), vals


def general_radius(compiled: Model, x: np.ndarray, vals: dict) -> dict:
    """The general certified radius on the inputs ``x`` (the net must be right on them):
    every parameter block (App. D's groups, :func:`.layers.blocks`) moving by ≤ ε in ℓ2
    (dense) changes no decoded output.

    Per input, with e the ℓ2 distance of a value from its reference run: an affine layer
    ``W h + b`` whose (W, b) moves by ≤ ε gives ``e' ≤ ‖W‖_op e + ε sqrt((‖h‖ + e)² + 1)``
    (its own budget is ≤ the block's); ReLUs are 1-Lipschitz.  A correction block that acts
    coordinatewise (:class:`~tm2nn.verify.margin_toolkit.Coordinatewise`: Prop. 3.4's round,
    with any weights of its sparsity) gives ``e' ≤ ‖osc(g, e)‖₂ + ε (‖B‖ X_a + X_b)``: the
    unperturbed block moves by at most its oscillation over the input's error interval (0
    for the construction's round within 1/3 of bits: Definition D.1's reset), plus its own
    perturbation.  The output passes when ``e < min_j |y_j − thr|``."""
    net = compiled.net
    bl = blocks(net)
    n = len(x)
    norm = {op.name: np.sqrt((vals[op.inputs[0]] ** 2).sum(1)) for b in bl for op in b.affines}
    om = {op.name: spectral_norm(op.weight) for b in bl for op in b.affines}
    cw = {}
    for i, b in enumerate(bl):
        if b.kind == "round" and len(b.affines) == 2:
            A, B = b.affines
            form = Coordinatewise.of(A.weight, A.bias, B.weight, B.bias)
            if form is not None:
                cw[i] = (form, vals[A.inputs[0]], np.sqrt((vals[f"{A.name}.relu"] ** 2).sum(1)), vals[f"{B.name}.relu"])
    gap = np.abs(vals[net.outputs[0]] - threshold(compiled)).min(1) if n else np.zeros(0)

    def passes(eps: float) -> bool:
        e = np.zeros(n)
        for i, b in enumerate(bl):
            if i in cw:
                A, B = b.affines
                form, g, nr, ref = cw[i]
                xa = np.hypot(norm[A.name] + e, 1.0)
                xb = np.hypot(nr + om[A.name] * e + eps * xa, 1.0)
                e = np.sqrt((form.oscillation(g, e, ref) ** 2).sum(1)) + eps * (om[B.name] * xa + xb)
                continue
            for op in b.affines:
                e = om[op.name] * e + eps * np.hypot(norm[op.name] + e, 1.0)
        return bool(np.all(e < gap))

    radius = sup_log_decades(passes) if n else math.inf
    return {"radius": radius, "min_output_gap": float(gap.min(initial=math.inf)), "corrections_used": len(cw)}
