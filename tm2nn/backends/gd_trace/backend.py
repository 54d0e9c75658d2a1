"""The gd-trace backend (Welper) as a construction of the protocol
(:class:`tm2nn.backends.protocol.Backend`).

* compile (§4.4, :mod:`.machine_mode`): a machine's loss (21) as a network-IR net; running
  the model means running the optimizer (22), optimizer step k = step k of the machine
  lowered to §4.1's form (:func:`run`); it runs in torch only (ONNX is not differentiated);
* compile with ``extended`` (§5, :mod:`.extended`): the extended network for a data
  layout (:class:`~.layout.Layout`: App. B number formats, the primary network); the
  trainer (:func:`learn`) trains it by least squares (2)/(3) until criterion (4) and checks
  Prop. 2.1 against the interpreters (:func:`.check.learn_report`).
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.protocol import Backend, Codec, Example, Learned, Model, Stepping, Trainer
from tm2nn.codec import decode_many
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.interp import configurations as run_configurations
from tm2nn.interrupt import Interrupted
from tm2nn.ir import GridMachine, Machine
from tm2nn.options import OptionError
from tm2nn.report import Report
from tm2nn.syntax import gd_layout

from . import portable
from .check import GDChecker, check_one, learn_report
from .codec import encode_features
from .extended import Extended, Layout
from .machine_mode import compile as compile_machine
from .machine_mode import simplex_of
from .options import DEFAULT_MAX_DIM, DEFAULT_STEPS, LearnOptions, Options

NAME = "gd-trace"


def _extended_bounds(ext) -> list:
    k = ext.k
    lay = ext.layout
    return [["primary network f_theta", f"{lay.primary}: {lay.shape.doc}", "docs/gd_trace.md, §5 layouts"],
            ["App. B format of the features x", lay.x.describe(), "App. B, fixed exponent"],
            ["App. B format of the labels y", lay.y.describe(), ""],
            ["App. B format of the weights theta", lay.w.describe(), ""],
            ["simplex dimension |V| (§4.4, tripled)", f"{len(ext.ts.verts):,}", ""],
            ["tape cells τ (2 tapes)", f"{ext.tau:,}", ""],
            ["b, γ, c (§5.4 option 2)", f"{k.b:g}, {k.gamma:.4g}, {k.c:.6g}", "docs/gd_trace.md, Part 4"],
            ["B_stop = B_lo < B_hi", f"{k.B_stop:g} < {k.B_hi:.6g}", "(4), §5.3"]]


# -- compile -----------------------------------------------------------------------------------
def compile(ir, opts: Options) -> Model:
    """§4.4's loss net (:func:`.machine_mode.compile`), or with ``opts.extended`` §5's
    extended network for that data layout."""
    if opts.extended is not None:
        return extended_model(ir, opts.extended)
    return compile_machine(ir, opts)


def extended_model(m, header: dict, net=None, ext=None) -> Model:
    """§5's extended network (trained when ``net`` is given): input the dataset's
    ``n x M`` features (signs, or numbers for a fixed-point layout), output ``F(x)``,
    one value per sample.  ``ext``: the :class:`Extended` already built for ``m``."""
    # a model file records the vertex set it was built with; one written before issue 38
    # (no "vertices" key) has the paper's full set, and is rebuilt with it
    ext = ext if ext is not None else Extended(m, Layout.from_header(header), vertices=header.get("vertices", "all"))
    lay = ext.layout
    net = net if net is not None else ext.net
    info = net.info()
    kind = "signs" if lay.x.bits == 0 else "reals"   # features as + / -, or as numbers
    return Model(NAME, net, m, {"kind": kind, "names": list(net.inputs[0].space.labels)},
                 {"kind": "values", "names": list(net.spaces[net.outputs[0]].labels)},
                 _extended_bounds(ext), {"dtype": "float64", "mode": "extended", "params": info["params_nonzero"]},
                 build={"options": {"extended": dict(header)}})


def check_ir(ir) -> None:
    """Welper §4.1's tapes are lines: a 2D machine is refused."""
    if isinstance(ir, GridMachine):
        raise Tm2nnError(f"the gd-trace backend takes line machines (Welper §4.1 tapes are lines); "
                         f"{ir.name!r} has a 2D tape")


def options_for_inputs(values: dict, texts: list[str]) -> dict:
    """``run``'s compile options: a tape window that holds the longest input."""
    return {"max_input": max((len(t) for t in texts), default=0), **values}


# -- the codec ---------------------------------------------------------------------------------
def _is_machine_mode(compiled) -> bool:
    return compiled.input_encoding.get("kind") == "gd_trace"


def encode(compiled, texts: list[str]):
    """§4.4: the read-only tape ``ro`` of each input (the loss net's input; the
    optimizer's start iterate is set in the Params).  §5: the features, as signs or
    numbers (:func:`.codec.encode_features`)."""
    if not _is_machine_mode(compiled):
        return encode_features(compiled.input_encoding, texts)
    low, ts = simplex_of(compiled)
    return np.stack([ts.start(low.lower_input(t))["ro"] for t in texts]).astype(np.float32)


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """§4.4: run the optimizer on each input, decode every iterate, check it against
    the interpreters (:func:`.check.check_one`; a divergence is the report's
    ``failure``).  §5 models: ``F(x)``, one value per sample."""
    if not _is_machine_mode(compiled):
        y = compiled.runner(engine)(encode(compiled, texts))
        return [Report(r) for r in decode_many(compiled.output_encoding, y)]
    out = []
    for t in texts:
        try:
            g, d, _ = check_one(compiled, t, progress=progress)
        except Interrupted as e:  # Ctrl-C: the run read off the iterates so far
            if e.reports is None and len(texts) == 1 and e.partial is not None:
                e.reports = [Report.of_run(e.partial.result)]
            raise
        r = Report.of_run(g.result)
        r.notes = [f"{len(g.losses) - 1:,} optimizer steps (Welper (22)) on the §4.1 machine "
                   f"({len(g.lowered.machine.states)} states, 2 tapes); "
                   + ("every step matches the interpreter" if d is None else "it diverges")]
        r.failure = None if d is None else f"first divergence at step {d[0]}: {d[1]}: expected {d[2]!r}, got {d[3]!r}"
        out.append(r)
    return out


def describe(compiled) -> dict:
    """§4.4: each run-report field read off the final iterate (Params ``s``, ``T``,
    ``H``); §5: ``F(x)`` (:func:`.portable.decoding`)."""
    return portable.decoding(compiled)


def reference(compiled) -> GDChecker:
    """§4.4: every optimizer iterate against the interpreters (:class:`.check.GDChecker`);
    a §5 network is checked by its trainer (Prop. 2.1), not by verify."""
    if not _is_machine_mode(compiled):
        raise OptionError("a §5 extended network is checked by 'tm2nn learn' (Prop. 2.1), not by verify")
    return GDChecker(compiled)


def configurations(compiled, text: str, engine: str = "torch") -> list:
    """Every source step's ``(state, head, non-blank cells)``, read off the optimizer's
    iterates (for space-time diagrams)."""
    r = run(compiled, [text], engine)[0]
    if r.run is None or r.run.trace is None:
        raise Tm2nnError("the gd-trace backend decodes only the final configuration, not every step")
    return [(q, head, dict(cells)) for _k, q, head, cells in run_configurations(r.run)]


# -- the trainer (§5) --------------------------------------------------------------------------
def learn(ir, opts: LearnOptions, *, data: dict, source_path=None, progress=None, models=(), device=None) -> Learned:
    """Welper §5: the extended network of a machine whose file declares its data layout
    (a ``# gd-trace:`` header), trained on ``train``; Prop. 2.1 checked against the
    interpreters (:func:`.check.learn_report`), on ``device`` (default: the CPU)."""
    header = gd_layout.parse(read_input(source_path).decode("utf-8", errors="replace"), str(source_path),
                             validate=Layout.from_header)
    X, Y = data["train"]
    if opts.primary is not None:   # the primary network named on the command line
        header = {**header, "primary": opts.primary}
        try:
            Layout.from_header(header)
        except Tm2nnError as e:
            raise OptionError(f"{{primary}}: {e.message}", "primary") from None
    layout = Layout.from_header(header)
    header = {**header, "vertices": "reachable"}   # the reachable vertices (tape_simplex.reachable_reads)
    if X.shape != (layout.n, layout.M):
        raise OptionError(f"{source_path} is laid out for {layout.n} samples of {layout.M} features; "
                          f"{{train}} has {X.shape[0]} samples of {X.shape[1]}", "train")
    try:
        layout.check_data(X, Y)
    except Tm2nnError as e:
        raise OptionError(f"{{train}}: {e.message}", "train") from None
    ext = Extended(ir, layout, vertices=header["vertices"])
    before = extended_model(ir, header, ext=ext)
    total = ext.low.lowered_steps(layout.steps, ext.text_len) + 1
    rep = learn_report(ext, X, Y, tests=opts.test, seed=opts.seed, device=device,
                       progress=(lambda k, n=total, what=None: progress(k, n, what)) if progress else None)
    r = rep.pop("result")
    after = extended_model(ir, header, r.net, ext) if r is not None else None
    ok = (rep["bounds_23_29_33"] and rep["stopped_at_machine_steps_plus_1"] and rep["trace_matches"]
          and rep["theta_matches"] and rep["z_equals_y"] and rep["F_equals_f_theta_on_train"]
          and rep["test_agreement"] == 1.0)
    if rep["bound_violation"]:
        return Learned(rep, False, [f"the construction broke: {rep['bound_violation']}"], {"before": before})
    lines = [f"{rep['samples']} samples of {rep['features']} feature{'s' if rep['features'] > 1 else ''}: "
             f"stopping criterion (4) after "
             f"{rep['optimizer_steps']} optimizer steps = {rep['machine_steps']} steps of the §4.1 machine + 1 "
             f"({rep['source_steps']} steps of {ir.name})",
             f"  (23), (29), (33) at every step: {'yes' if rep['bounds_23_29_33'] else 'NO'}",
             f"  every iterate = the §4.1 machine's configuration: {'yes' if rep['trace_matches'] else 'NO'}",
             f"  theta = {rep['theta']} (interpreter: {rep['theta_interpreter']})",
             f"  F = f_theta ({layout.primary}) on the training set and on {opts.test} fresh datasets: "
             f"{rep['F_equals_f_theta_on_train']} / {rep['test_agreement']:.4f}"]
    return Learned(rep, ok, lines, {"before": before, "after": after})


BACKEND = Backend(
    name=NAME,
    paper="G. Welper: Universality of Gradient Descent Neural Network Training (§4.3-§5)",
    summary="Welper §4-§5: Frank-Wolfe steps on a crafted ReLU loss trace a machine step by step",
    Options=Options,
    takes=(Machine,),
    takes_what="line machines (Welper §4.1 tapes are lines)",
    compile=compile,
    codec=Codec(encode=encode, run=run, describe=describe),
    reference=reference,
    stepping=Stepping("steps", DEFAULT_STEPS, options_for_inputs),
    dense=("torch",),
    trainer=Trainer(LearnOptions, (Machine,), learn, exports=("before", "after")),
    analyses={"configurations": configurations},
    #: what a model file must hold beyond every model's: the iterate or trained weights
    #: (Params), which rebuild puts back
    model_keys={"tm2nn.trained": "object"},
    check_ir=check_ir,
    examples=(
        Example("bb3.tm", ("compile {ex}/bb3.tm --backend gd-trace --steps 25 --max-input 2 "
                           "-o {out}/bb3_gd_loss.onnx --json",
                           "verify {ex}/bb3.tm --backend gd-trace --steps 25 --max-input 2 --json")),
        Example("sign_sum_3x2.tm", ("learn {ex}/sign_sum_3x2.tm --backend gd-trace --train {ex}/sign_sum_3x2.csv "
                                    "--export-after {out}/sign_sum_trained.onnx --json",),
                label="gd-trace §5",
                expect={"trace_matches": True, "theta_matches": True, "stopped_at_machine_steps_plus_1": True},
                checked="{optimizer_steps} steps, theta ok"),
    ),
)

__all__ = ["BACKEND", "DEFAULT_MAX_DIM", "DEFAULT_STEPS", "LearnOptions", "Options", "check_ir", "compile",
           "configurations", "describe", "encode", "extended_model", "learn", "reference", "run"]
