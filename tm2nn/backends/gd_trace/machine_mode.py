"""Machine mode of the GD-trace backend: an ordinary machine is lowered to Welper §4.1's
form (:func:`tm2nn.passes.welper_form.to_welper_form`: a read-only input tape and a work
tape over ``{-1, 1}``), its §4.4 loss (21) is compiled to a network-IR net
(:class:`~.tape_simplex.TapeSimplex`), and *running* the compiled model means running the
optimizer (22): every iterate is decoded to (state, heads, tapes), mapped back through the
lowering, and reported as the source machine's run (Prop. 4.3: optimizer step k is
step k of the §4.1 machine; a source step takes up to ``3w - 2`` of them, after a copy
phase, docs/gd_trace.md "Optimizer steps and machine steps").

``compile(m, opts)`` fixes the tape window from the source's step bound ``T =
opts.steps`` and the longest input ``n = opts.max_input`` (the head stays within ``[-T -
1, n + T + 1]``: the optimizer stops once source step ``T + 1`` is complete, so no run of
the interpreter is needed); :func:`run_gd` runs one input of the user's handle of such a
model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn import interrupt
from tm2nn.backends.protocol import Model
from tm2nn.errors import Tm2nnError
from tm2nn.interp.multitape import MultiRun
from tm2nn.ir.machine import GridMachine, Machine, check_input
from tm2nn.options import OptionError
from tm2nn.passes.lowering import cut_at, result_from_configurations
from tm2nn.passes.welper_form import WelperLowering, to_welper_form
from tm2nn.syntax import dump

from .optimizer import AmbiguousStep
from .options import Options
from .portable import optimizer_encoding, readback_encoding, start_encoding
from .tape_simplex import TapeSimplex, Tracer44, choose_b, vertex_count


def lowering(m: Machine, enc: dict | None = None):
    """The §4.1 lowering of ``m`` (rebuilt from ``enc['lowering']`` when given, which
    checks it against ``m``)."""
    return WelperLowering.from_json(enc["lowering"], m) if enc else to_welper_form(m)


def window(low, steps: int, max_input: int) -> tuple[int, int]:
    """``(left, tau)`` for ``steps`` source steps on inputs of at most ``max_input`` cells.
    The lowered run is cut after ``low.lowered_steps(steps)`` steps, which can reach into
    source step ``steps + 1`` (its slack covers a halt on a missing rule), so the window
    holds the cells of ``steps + 1`` source steps."""
    reach = steps + 1
    return low.window(-reach, max(max_input, 1) + reach, max_input)


def estimate(m: Machine, steps: int, max_input: int, vertices: str = "all") -> dict:
    """Sizes of the §4.4 net, computed before building it."""
    low = lowering(m)
    left, tau = window(low, steps, max_input)
    d = low.machine.tapes
    n_v = vertex_count(low.machine, vertices)
    return {"vertices": n_v, "edges": n_v * 2 ** d, "tau": tau, "left": left, "tapes": d,
            "states": len(low.machine.states), "lowered_steps": low.lowered_steps(steps, max_input)}


def compile(m: Machine, opts: Options) -> Model:
    """The §4.4 loss net of ``m`` for ``opts.steps`` source steps and inputs of at most
    ``opts.max_input`` cells (default ``steps``); ``b``, ``gamma`` (17) and ``c`` (21) as
    the options give them."""
    if isinstance(m, GridMachine):
        raise Tm2nnError("the gd-trace backend takes line machines (Welper §4.1 tapes are lines)")
    if not isinstance(m, Machine):
        raise Tm2nnError("the gd-trace backend compiles machines, not circuits")
    steps, max_dim = opts.steps, opts.max_dim
    max_input = steps if opts.max_input is None else int(opts.max_input)
    est = estimate(m, steps, max_input, opts.vertices)
    dim = est["vertices"] + 2 * est["tau"] * est["tapes"]
    if dim > max_dim:
        raise OptionError(f"the §4.4 simplex and tape variables of {m.name!r} would have dimension "
                          f"{dim:,} ({est['vertices']:,} vertices, tau = {est['tau']:,} cells x "
                          f"{est['tapes']} tapes; limit {max_dim:,}): lower {{steps}} or {{max_input}}",
                          "steps", "max_input")
    low = lowering(m)
    left, tau = est["left"], est["tau"]
    ts = TapeSimplex(low.machine, tau, left, b=opts.b, gamma=opts.gamma, c=opts.c, max_dim=max_dim,
                     vertices=opts.vertices)
    d = ts.d
    # the start iterate, the update (22) and the readback as tables: a script without
    # tm2nn runs the model from them (examples/plain/gd_trace_torch.py)
    enc_in = {"kind": "gd_trace", "machine": dump(m, "tm"), "lowering": low.to_json(), "tau": tau, "left": left,
              "b": ts.b, "gamma": ts.gamma, "c": ts.c, "max_input": max_input, "vertices": ts.vertices,
              "alphabet": list(m.alphabet), "blank": m.blank,
              "start": start_encoding(low, ts), "optimizer": optimizer_encoding(ts)}
    enc_out = {"kind": "gd_trace_loss", "source_steps": steps,
               "lowered_steps": low.lowered_steps(steps, max_input), "readback": readback_encoding(low, ts)}
    q = len(low.machine.states)
    bounds = [
        (f"simplex dimension |V| = {'3|Q|2^d' if ts.vertices == 'all' else '2^d x reachable [q, r]'} "
         "(tripled, (20))", f"{ts.m:,}",
         f"Cor. 2.3 width 2^d|Q| + 2dτ = {2 ** d * q + 2 * d * tau:,} (|Q| = {q}, d = {d}, τ = {tau})"),
        ("tape variables T, H (2dτ)", f"{2 * d * tau:,}", f"2dτ = {2 * d * tau:,}"),
        ("edge units |E| <= |V| 2^d (only edges carry a weight (17))", f"{len(ts.edges):,}",
         f"(21) sums over all pairs v, w: |V|^2 = {ts.m ** 2:,}"),
        ("layers (affine + ReLU + product) of l_TM", _layers(ts.net), "Cor. 2.3: < 12 extra layers"),
        ("§4.3 full-configuration simplex (Cor. 2.2)", "not built here (config_simplex.py, small runs)",
         f"|Q| 2^(dτ) τ^d = 2^{d * tau} x {q * tau ** d:,}"),
        ("b (18) and b^3 > 8b^2 d + 3d", f"{ts.b:g}", f"smallest: {choose_b(d)}"),
    ]
    return Model("gd-trace", ts.net, m, enc_in, enc_out, bounds,
                 {"steps": steps, "max_input": max_input, "lowered_states": q,
                  "dtype": "float64"}).with_options(opts)  # the optimizer runs the loss in float64


def _layers(net) -> str:
    dep = net.depth()
    return f"{dep['affine']} affine, {dep['relu']} ReLU, {dep['mul']} product (depth)"


@dataclass
class GDRun:
    """One optimizer run: the source ``result`` (a RunResult with trace, mapped back), the
    decoded lowered run, the loss at every iterate and the largest distance of an iterate
    from its integral value."""

    result: object
    lowered: MultiRun
    losses: list[float]
    halted_at: list[bool]
    max_deviation: float
    tracer: Tracer44


def simplex_of(compiled) -> tuple[object, TapeSimplex]:
    enc = compiled.input_encoding
    low = lowering(compiled.source, enc)
    ts = TapeSimplex(low.machine, enc["tau"], enc["left"], b=enc["b"], gamma=enc["gamma"], c=enc["c"],
                     vertices=enc.get("vertices", "all"))
    return low, ts


def check_text(compiled, text: str) -> None:
    """An input the model takes: the machine's symbols, at most ``max_input`` cells."""
    check_input(compiled.source, text)
    if len(text) > compiled.input_encoding["max_input"]:
        raise Tm2nnError(f"input of {len(text)} cells; the model was compiled for at most "
                         f"{compiled.input_encoding['max_input']} (the option max_input)")


def run_gd(compiled, text: str, progress=None) -> GDRun:
    """Run the conditional-gradient updates (22) from the start iterate of ``text`` until
    one step after the iterate reaches a halting vertex, or for the compiled number of
    lowered steps; decode every iterate and map the run back to the source machine.
    ``compiled``: the user's handle (the optimizer runs its own torch module)."""
    m = compiled.source
    check_text(compiled, text)
    low, ts = simplex_of(compiled)
    tapes = low.lower_input(text)
    tr = Tracer44(ts, tapes, module=compiled.torch())  # the model's own net, not a rebuilt one
    total = int(compiled.output_encoding["lowered_steps"])
    steps = int(compiled.output_encoding["source_steps"])
    configs, losses, halted, dev, done = [], [], [], 0.0, -1
    for k in range(total + 1):
        dev = max(dev, _deviation(tr))
        cfg, h = tr.decode()
        configs.append(cfg)
        halted.append(h)
        done += low.at_boundary(cfg.state)
        # ``total`` bounds the slowest lowering of ``steps`` source steps; a faster one
        # would run past the window, so stop once source step ``steps + 1`` is done.
        if h or k == total or done > steps or interrupt.requested():
            losses.append(tr.loss_value())
            break
        try:
            losses.append(tr.step())
        except AmbiguousStep as e:  # a broken (17): verify reports it at this step
            e.step = k
            raise
        if progress:
            progress(k + 1)
    run = MultiRun(low.machine, tuple(configs), halted[-1])
    mapped = low.source_trace(run)
    src = [(k, *conf) for k, (_t, conf) in enumerate(mapped)]
    stopped = interrupt.requested() and not (h or k == total or done > steps)
    if stopped and not src:  # Ctrl-C before the first source configuration was read off
        raise interrupt.Interrupted(k, total, what="optimizer steps")
    if not src:  # e.g. edited weights: the iterates trace no run of the source machine
        raise Tm2nnError(f"no iterate of the optimizer's {k + 1} steps reads back as a configuration of "
                         f"{m.name!r} (the §4.1 run does not map back to a source run)")
    n, run_halted = cut_at(m, len(src) - 1, run.halted, steps, lambda k: src[k][1])
    result = result_from_configurations(m, text, src[: n + 1], run_halted)
    g = GDRun(result, run, losses, halted, dev, tr)
    if stopped:  # Ctrl-C: the run read off the iterates so far
        raise interrupt.Interrupted(k, total, partial=g, what="optimizer steps")
    return g


def _deviation(tr: Tracer44) -> float:
    v = tr.values()
    s = v["s"]
    return float(max(np.abs(s - np.round(s)).max(), np.abs(np.abs(v["T"]) - 1).max(),
                     np.abs(v["H"] - np.round(v["H"])).max()))


def run_report(compiled, text: str, progress=None) -> dict:
    """The ``--json`` run report of the source machine, read off the optimizer's iterates."""
    return run_gd(compiled, text, progress).result.report()
