"""Verification: run the compiled net (torch, and ONNX in onnxruntime) and the
reference interpreter side by side on the same inputs.

* Circuits: exhaustive when there are at most 16 inputs, otherwise ``samples``
  random inputs from a printed seed; compared bit for bit with the bit-parallel
  evaluator.
* Machines compiled by unrolling: every tape that fits (exhaustive when at most
  2^16 of them), else random tapes; the decoded configuration after T steps is
  compared with the interpreter's run report, field by field.

The first divergence is reported with the input, the field (output bit) and both
values.  Nothing here compares a net with itself.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import asdict, dataclass, field

import numpy as np

from tm2nn.backends.base import Compiled
from tm2nn.codec import decode_many, encode_many, output_bits
from tm2nn.ir import Circuit

EXHAUSTIVE_LIMIT = 1 << 16
REPORT_FIELDS = ("halted", "steps", "state", "outcome", "tape", "head", "sigma")


@dataclass
class Mismatch:
    engine: str
    input: str
    field: str
    expected: object
    got: object
    step: int | None = None  # machines verified step by step: the first divergent step


@dataclass
class VerifyReport:
    backend: str
    mode: str  # "exhaustive" | "random" | "given"
    n_inputs: int
    seed: int | None
    engines: dict[str, int] = field(default_factory=dict)  # engine -> mismatches
    first: Mismatch | None = None
    max_deviation: dict[str, float] = field(default_factory=dict)  # |y - nearest 0/1 value|
    # Unrolled machines: inputs whose run leaves the compiled tape window within T steps.
    # The net must flag them (``overflow``); they are outside the model's domain.
    out_of_window: int = 0

    @property
    def ok(self) -> bool:
        return all(v == 0 for v in self.engines.values())

    def to_json(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def onnx_bytes(compiled: Compiled, tag: str = "verify") -> bytes:
    """The compiled model as ``tm2nn compile`` writes it, serialized."""
    from tm2nn.compiler import onnx_model

    return onnx_model(compiled, tag).SerializeToString()


def engine_runners(compiled: Compiled, use_onnx: bool, progress=None):
    """(name, run(x) -> y) for torch and, optionally, onnxruntime.  ``x`` is a float32
    array, or int64 token ids for a model whose input encoding is ``tokens``."""
    if compiled.input_encoding.get("kind") == "tokens":
        from tm2nn.verify.trace import onnx_runner, torch_runner

        yield "torch", torch_runner(compiled.net, progress)
        if use_onnx:
            yield "onnxruntime", onnx_runner(onnx_bytes(compiled))
        return
    from tm2nn.emit.torch_emit import run_torch, to_torch

    module = to_torch(compiled.net)
    yield "torch", lambda x: run_torch(module, x)
    if use_onnx:
        from tm2nn.emit.onnx_emit import run_onnx

        blob = onnx_bytes(compiled)
        yield "onnxruntime", lambda x: run_onnx(blob, x)


def _deviation(enc: dict, y: np.ndarray) -> float:
    if y.size == 0:
        return 0.0
    if enc.get("threshold", 0.5) == 0.0:  # ±1 outputs
        return float(np.abs(np.abs(y) - 1.0).max())
    return float(np.minimum(np.abs(y), np.abs(y - 1.0)).max())


def verify_compiled(
    compiled: Compiled,
    *,
    inputs: list[str] | None = None,
    samples: int = 10_000,
    seed: int | None = None,
    use_onnx: bool = True,
) -> VerifyReport:
    if compiled.output_encoding.get("kind") == "transformer_trace":
        from tm2nn.verify.trace import verify_trace

        return verify_trace(compiled, inputs, samples, seed, use_onnx)
    if compiled.output_encoding.get("kind") == "gd_trace_loss":
        from tm2nn.verify.gd import verify_gd

        return verify_gd(compiled, inputs, samples, seed, use_onnx)
    if compiled.output_encoding.get("kind") == "rcnn_trace":
        from tm2nn.verify.grid import verify_grid

        return verify_grid(compiled, inputs, samples, seed, use_onnx)
    if isinstance(compiled.source, Circuit):
        return _verify_circuit(compiled, inputs, samples, seed, use_onnx)
    return _verify_unrolled(compiled, inputs, samples, seed, use_onnx)


def _verify_circuit(compiled, inputs, samples, seed, use_onnx) -> VerifyReport:
    from tm2nn.api import parse_bits
    from tm2nn.interp import eval_circuit, exhaustive_inputs, random_inputs

    c: Circuit = compiled.source
    n = len(c.inputs)
    if inputs:
        x = np.stack([parse_bits(s, n) for s in inputs])
        mode = "given"
    elif n <= 16:
        x, mode = exhaustive_inputs(n), "exhaustive"
    else:
        seed = secrets.randbits(32) if seed is None else seed
        x, mode = random_inputs(n, samples, seed), "random"
    want = eval_circuit(c, x)
    rep = VerifyReport(compiled.backend, mode, len(x), seed if mode == "random" else None)
    enc = compiled.output_encoding
    for name, run in engine_runners(compiled, use_onnx):
        y = run(x.astype(np.float32))
        rep.max_deviation[name] = _deviation(enc, y)
        got = output_bits(enc, y)
        bad = np.nonzero((got != want).any(axis=1))[0]
        rep.engines[name] = int(bad.size)
        if bad.size and rep.first is None:
            i = int(bad[0])
            j = int(np.nonzero(got[i] != want[i])[0][0])
            rep.first = Mismatch(
                name, "".join("1" if b else "0" for b in x[i]), f"output {j} ({c.outputs[j]})",
                int(want[i, j]), int(got[i, j]),
            )
    return rep


def machine_inputs(layout: dict, samples: int, seed: int | None):
    """Tapes for an unrolled machine (its layout JSON): all that fit, or a random sample."""
    from tm2nn.passes.unroll import UnrollLayout

    lay = UnrollLayout.from_json(layout)
    room = lay.tape - lay.origin  # cells from the start cell to the window's right end
    return all_or_sample_tapes(lay.alphabet, room, EXHAUSTIVE_LIMIT, samples, seed)


def all_or_sample_tapes(alphabet, max_cells: int, limit: int, samples: int, seed: int | None):
    """Every tape of at most ``max_cells`` cells when there are at most ``limit`` of them
    (``(tapes, "exhaustive", None)``), else ``samples`` random tapes of random length
    (``(tapes, "random", seed)``, the seed drawn when not given, so it can be printed)."""
    alphabet = list(alphabet)
    total = 0
    for k in range(max_cells + 1):  # stop counting once past the limit (max_cells may be large)
        total += len(alphabet) ** k
        if total > limit:
            break
    if total <= limit:
        xs = ["".join(p) for k in range(max_cells + 1) for p in itertools.product(alphabet, repeat=k)]
        return xs, "exhaustive", None
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    xs = []
    for _ in range(samples):
        k = int(rng.integers(0, max_cells + 1))
        xs.append("".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=k)))
    return xs, "random", seed


def _verify_unrolled(compiled, inputs, samples, seed, use_onnx) -> VerifyReport:
    from tm2nn.interp import run_machine

    m = compiled.source
    steps = compiled.options["steps"]
    if inputs is not None:
        xs, mode = list(inputs), "given"
    else:
        xs, mode, seed = machine_inputs(compiled.input_encoding["layout"], samples, seed)
    x = encode_many(compiled.input_encoding, xs)
    lay = compiled.input_encoding["layout"]
    want = []
    for s in xs:
        r = run_machine(m, s, steps, trace=True)
        heads = [0, *r.trace.head]
        inside = lay["origin"] + min(heads) >= 0 and lay["origin"] + max(heads) < lay["tape"]
        want.append(r.report() if inside else {"overflow": True})
    rep = VerifyReport(compiled.backend, mode, len(xs), seed)
    rep.out_of_window = sum(1 for w in want if w.get("overflow"))
    enc = compiled.output_encoding
    for name, run in engine_runners(compiled, use_onnx):
        y = run(x)
        rep.max_deviation[name] = _deviation(enc, y)
        bad = 0
        for s, got, w in zip(xs, decode_many(enc, y), want):
            if w.get("overflow"):  # outside the window: the net must say so, nothing more
                diff = [] if got.get("overflow") else ["overflow"]
            else:
                diff = [f for f in ("overflow",) + REPORT_FIELDS if got.get(f) != w.get(f)]
            if diff:
                bad += 1
                if rep.first is None:
                    f = diff[0]
                    rep.first = Mismatch(name, s, f, w.get(f), got.get(f))
        rep.engines[name] = bad
    return rep
