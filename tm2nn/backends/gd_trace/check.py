"""Verify the GD-trace backend (Welper §4.4): run the optimizer (22) on the emitted torch
module for every input, decode every iterate and compare

* the decoded §4.1 configurations with the §4.1 machine's interpreter
  (:func:`tm2nn.interp.multitape.run_multitape`) at every optimizer step (state, both
  heads, both tapes),
* the run mapped back through the lowering with the source machine's interpreter at
  every source step (state, head, every cell) and the run report,
* Prop. 4.3's loss bounds (23) at every iterate, and the halting loss below every earlier
  loss.

ONNX models are not differentiated, so the optimizer runs in torch; with ``use_onnx``
the loss net at the first and the last iterate (the trained Params written back with
``NetModule.to_net``) is also emitted to ONNX and its loss compared in onnxruntime.
"""

from __future__ import annotations

import numpy as np

from tm2nn import emit
from tm2nn.devices import torch_device
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.interp.multitape import run_multitape
from tm2nn.verify.check import Checker, InputSpace
from tm2nn.verify.runs import EXHAUSTIVE_CELLS, EXHAUSTIVE_TAPES, compare_runs

from .extended import BoundViolation, train
from .machine_mode import check_text, run_gd, simplex_of
from .optimizer import AmbiguousStep

LOSS_RTOL = 1e-5  # onnxruntime runs float32


def _onnx_loss(net, ro: np.ndarray) -> float:
    sess = emit.onnx_session(emit.to_onnx(net))
    (y,) = sess.run(None, {net.inputs[0].name: ro.astype(np.float32)})
    return float(y[0, 0])


def check_one(compiled, text: str, use_onnx: bool = False, progress=None):
    """``(GDRun, first divergence or None, onnx divergence or None)`` for one input of the
    user's handle ``compiled``; ``progress(k, total)`` after every optimizer step."""
    low, ts = simplex_of(compiled)
    total = int(compiled.output_encoding["lowered_steps"])
    g = run_gd(compiled, text, progress=(lambda k: progress(k, total)) if progress else None)
    lowered = run_multitape(low.machine, low.lower_input(text), len(g.lowered.configs) - 1)
    d = None
    for k, (want, got) in enumerate(zip(lowered.configs, g.lowered.configs)):
        if want != got:
            field = "state" if want.state != got.state else "heads" if want.heads != got.heads else "tapes"
            d = (k, f"§4.1 {field} (optimizer step {k})", getattr(want, field), getattr(got, field))
            break
    if d is None and len(lowered.configs) != len(g.lowered.configs):
        d = (len(lowered.configs), "§4.1 steps", len(lowered.configs) - 1, len(g.lowered.configs) - 1)
    if d is None:
        d = compare_runs(run_machine(compiled.source, text, int(compiled.output_encoding["source_steps"]),
                                     trace=True), g.result)
    if d is None:
        first = next((k for k, h in enumerate(g.halted_at) if h), None)
        for k, (loss, h) in enumerate(zip(g.losses, g.halted_at)):
            lo, hi = ts.bounds23(h)
            if not lo - 1e-9 <= loss <= hi + 1e-9:
                d = (k, "loss bound (23)", f"[{lo:g}, {hi:g}]", loss)
                break
            if first is not None and k < first and loss <= g.losses[first]:
                d = (k, "halting loss below every earlier loss", f"> {g.losses[first]:g}", loss)
                break
    od = None
    if use_onnx:
        ro = g.tracer.ro.numpy()
        got = _onnx_loss(g.tracer.module.to_net(), ro)
        want = g.losses[-1]
        if abs(got - want) > LOSS_RTOL * max(1.0, abs(want)):
            od = (len(g.losses) - 1, "loss (ONNX)", want, got)
    return g, d, od


class GDChecker(Checker):
    """Welper §4.4: the optimizer run on the torch module, every iterate decoded and
    checked (see the module doc); onnxruntime computes the loss at the last iterate."""

    compares = ("every optimizer iterate (the §4.1 configuration), the source configuration at every step, "
                "the loss bounds (23)")
    unchecked = {"onnxruntime": (
        "the ONNX model is the loss (21) only, and ONNX has no gradients, so the optimizer (22) with its step "
        "1/gamma and every iterate are checked in torch alone; onnxruntime only recomputes the loss at torch's "
        "last iterate")}

    def space(self):
        m = self.compiled.source
        cells = min(EXHAUSTIVE_CELLS, int(self.compiled.input_encoding["max_input"]))
        return InputSpace([a for a in m.alphabet if a != m.blank], 0, cells, EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return 8

    def prepare(self, texts: list[str]) -> list:
        """The optimizer runs (torch), checked, with the ONNX loss when onnxruntime is
        among the engines: :func:`check_one` for each input.  An iterate that does not
        decode, or an update (22) whose Frank–Wolfe vertex is not unique (a broken net:
        weights (17) without their margins), is that input's divergence at the optimizer
        step where it happens, not an error."""
        out = []
        for t in texts:
            check_text(self.compiled, t)  # a bad input is the user's error, not a divergence
            try:
                out.append(check_one(self.compiled, t, use_onnx="onnxruntime" in self.engines))
            except AmbiguousStep as e:
                out.append((None, (e.step, f"update (22) (optimizer step {e.step})",
                                   "a unique conditional-gradient vertex", str(e)), None))
            except (ValueError, Tm2nnError) as e:
                out.append((None, (None, "decoding an iterate", "a §4.1 configuration", str(e)), None))
        return out

    def check(self, engine: str, texts: list[str], runs):
        if engine == "torch":
            dev = max((g.max_deviation for g, _d, _od in runs if g is not None), default=0.0)
            return [d for _g, d, _od in runs], dev, {}
        return [od for _g, _d, od in runs], 0.0, {}


# -- Welper §5: the extended network's training against the interpreters -------------------
def lowered_run(ext, x, y, max_steps: int = 100_000):
    """The §4.1 machine's interpreter run on the encoded dataset (the reference)."""
    return run_multitape(ext.low.machine, ext.low.lower_input(ext.layout.text(x, y)), max_steps)


def learn_report(ext, X, Y, tests: int = 20, seed: int = 0, progress=None, onnx: bool = False,
                 device=None) -> dict:
    """Train on ``(X, Y)`` and check Prop. 2.1 against the interpreters: the stopping
    criterion after ``k_t + 1`` steps (``k_t`` = the §4.1 machine's steps), every iterate
    ``k >= 1`` equal to the machine's configuration ``k - 1``, (23), (29) and (33) at every
    iterate (:func:`.extended.check_step`), ``theta`` equal to what
    the source machine writes (App. B's de-quantisation of its output cells), and ``F =
    f_theta`` (the layout's primary network, in numpy) exactly on the training data and on
    ``tests`` fresh random datasets of the same formats; with ``onnx``, the trained net is
    also emitted to ONNX (float64) and run in onnxruntime on the same datasets.  The net
    trains and is checked on ``device`` (default: the CPU; onnxruntime on the CPU)."""
    import torch

    lay = ext.layout
    X, Y = lay.check_data(X, Y)
    bound = ext.low.lowered_steps(lay.steps, ext.text_len) + 1   # the layout's step bound, lowered, + 1
    try:
        r = train(ext, X, Y, max_steps=bound, progress=progress, device=device)
        violation = None
    except BoundViolation as e:
        r, violation = None, str(e)
    ref = lowered_run(ext, X, Y, max_steps=ext.low.lowered_steps(lay.steps, ext.text_len))
    src = run_machine(ext.m, lay.text(X, Y), lay.steps)
    theta_ref = lay.theta_from_cells(src.cells, ext.m.blank)
    base = {"samples": lay.n, "features": lay.M, "primary": lay.primary, "machine_steps": ref.steps,
            "source_steps": src.steps, "halted": bool(ref.halted and src.halted),
            "theta_interpreter": theta_ref.tolist(), "B_stop": ext.k.B_stop,
            "bounds_23_29_33": violation is None, "bound_violation": violation}
    if r is None:
        return {**base, "optimizer_steps": None, "stopped_at_machine_steps_plus_1": False, "trace_matches": False,
                "first_divergence": None, "theta": None, "theta_matches": False, "F_equals_f_theta_on_train": False,
                "test_datasets": tests, "test_agreement": 0.0, "z_deviation": None, "z_equals_y": False,
                "final_loss": None, "result": None}
    first = next((k for k, (a, b) in enumerate(zip(r.configs, ref.configs)) if a != b), None)
    same_trace = first is None and len(r.configs) == len(ref.configs)
    rng = np.random.default_rng(seed)
    fresh = [lay.random_x(rng) for _ in range(tests)]
    sets = np.stack([X] + fresh).reshape(len(fresh) + 1, -1)
    want = np.stack([lay.shape.reference(x.reshape(lay.n, lay.M), theta_ref) for x in sets])
    got = np.empty_like(want)
    with torch.no_grad():
        for i in range(0, len(sets), 256):  # batched: every row is one dataset
            got[i:i + 256] = r.module(torch.from_numpy(sets[i:i + 256]).to(torch_device(device))).cpu().numpy()
            if progress is not None and tests >= 256:
                progress(min(i + 256, len(sets)) - 1, tests, "checking F = f_theta on fresh datasets")
    agree = [bool(np.array_equal(a, b)) for a, b in zip(got, want)]
    out = {
        **base, "optimizer_steps": r.steps,
        "stopped_at_machine_steps_plus_1": r.steps == ref.steps + 1,
        "trace_matches": same_trace, "first_divergence": None if same_trace else (first or len(ref.configs)),
        "theta": r.theta.tolist(),
        "theta_matches": bool(np.array_equal(r.theta, theta_ref)),
        "F_equals_f_theta_on_train": agree[0],
        "test_datasets": tests, "test_agreement": float(np.mean(agree[1:])) if tests else 1.0,
        "z_deviation": float(np.abs(r.z - Y).max()),
        "z_equals_y": bool(np.abs(r.z - Y).max() <= 1e-9),
        "final_loss": r.losses[-1], "result": r,
    }
    if onnx:
        o = emit.run_onnx(emit.to_onnx(r.net, dtype="float64"), sets)
        ok = [bool(np.array_equal(a, b)) for a, b in zip(o, want)]
        out["onnx_F_equals_f_theta_on_train"] = ok[0]
        out["onnx_test_agreement"] = float(np.mean(ok[1:])) if tests else 1.0
    return out
