"""What a gd-trace model file must say so that a plain script, without tm2nn, can run
Welper's optimizer on the loss and read the run off the iterates (issue 21;
``examples/plain/gd_trace_torch.py``, docs/gd_trace.md "The model files").

The loss (21) is the network; the optimizer (22) and the decoding are not, because ONNX
and the manifest's ops have no autograd.  So the encodings carry them as tables, each
read off the objects tm2nn itself runs, never restated:

* :func:`start_encoding` (input encoding ``"start"``): the start iterate of an input,
  :meth:`TapeSimplex.start <.tape_simplex.TapeSimplex.start>` of
  :meth:`WelperLowering.lower_input <tm2nn.passes.welper_form.WelperLowering.lower_input>`;
* :func:`optimizer_encoding` (input encoding ``"optimizer"``): update (22), as
  :class:`~.tape_simplex.Tracer44` runs it with :class:`~.optimizer.ConditionalGradient`;
* :func:`readback_encoding` (output encoding ``"readback"``): how an iterate is a §4.1
  configuration (:meth:`TapeSimplex.decode <.tape_simplex.TapeSimplex.decode>`) and how
  that maps back to the source (:meth:`WelperLowering.source_trace
  <tm2nn.passes.welper_form.WelperLowering.source_trace>`);
* :func:`decoding`: the manifest's ``decoding`` (the codec's ``describe``), each
  run-report field in words, naming the
  dimensions it reads.
"""

from __future__ import annotations

from tm2nn.errors import Tm2nnError
from tm2nn.passes.welper_form import RO, WORK

from .optimizer import FW_TOL
from .tape_simplex import VERTEX_LABEL


def start_encoding(low, ts) -> dict:
    """Welper §4.4's start iterate ``x_0`` of an input (:meth:`TapeSimplex.start`):
    ``s = e_v`` at ``v = ([q_0, 0], symbols under the heads at cell 0)``, the writable tape
    ``T`` blank (-1), each head one-hot at cell 0, and the read-only tape ``ro`` (the
    loss's input) +1 exactly at ``fixed`` and at ``i * period + o`` for each ``o`` in
    ``plus[a]`` of input symbol ``i`` = ``a`` (the §4.1 layout; -1 elsewhere).  The table
    is read off ``lower_input`` itself, one symbol at a time."""
    fixed = low.lower_input("")[RO]
    plus = {}
    for a in low.source.alphabet:
        try:
            plus[a] = sorted(low.lower_input(a)[RO] - fixed)
        except Tm2nnError:  # not a symbol an input may hold: the table leaves it out
            continue
    return {"simplex": "s", "tapes": "T", "heads": "H", "read_only": "ro",
            "state": ts.machine.start, "round": 0, "vertex_label": VERTEX_LABEL, "cell": 0,
            "blank": -1.0, "fixed": sorted(fixed), "period": low.period, "plus": plus}


def optimizer_encoding(ts) -> dict:
    """Update (22) as :class:`~.tape_simplex.Tracer44` runs it: ``s`` takes the
    Frank–Wolfe step with ``alpha = 1`` to the vertex of the smallest gradient entry (it
    stays when its own entry is within ``tol`` of the smallest; two candidates within
    ``tol`` are an error: (10), (18) rule ties out), ``T`` and ``H`` plain gradient steps
    at rate ``1 / gamma`` (docs/gd_trace.md, decision 5 for the sign)."""
    lr = 1.0 / ts.gamma
    return {"rule": "Welper (22)", "frank_wolfe": {"param": "s", "alpha": 1.0, "tol": FW_TOL},
            "gradient": {"T": lr, "H": lr}, "dtype": "float64"}


def readback_encoding(low, ts) -> dict:
    """How the iterates are read as the source machine's run (``run_gd``): ``s``'s vertex
    gives the §4.1 state and whether it halts (``halting``: the labels of the halting
    vertices, where the optimizer stops), ``H``'s one-hot cell each head, ``T > 0`` the
    +1 cells of the work tape ``tape``.  A §4.1 configuration in a state of ``boundary``
    is a source configuration (that source state; ``stop``: a state halted on a missing
    rule, read only as the last iterate), with head = work head / ``width`` (a block's
    first cell) and source cell ``b`` = the symbol whose ``code`` word spells work cells
    ``b*width .. b*width + width - 1`` (``+`` where ``T > 0``)."""
    kinds = low.binary.kind
    mapped = [q for q in ts.machine.states if q not in low.copy_states and q not in low.stays.aux]
    verts = ts.labels()["s"].labels
    return {"tape": WORK, "width": low.width, "code": dict(low.binary.code),
            "boundary": {q: kinds[q][1] for q in mapped if low.at_boundary(q)},
            "stop": {q: kinds[q][1] for q in mapped if kinds[q][0] == "stop"},
            "halting": [verts[i] for i, h in enumerate(ts.halting) if h],
            "missing_rule_counts_step": bool(low.source.missing_rule_counts_step)}


def decoding(compiled) -> dict:
    """The manifest's ``decoding`` of a gd-trace model: §4.4 models, each run-report
    field read from the iterate (Params ``s``, ``T``, ``H`` and the input ``ro``) after
    the optimizer's last step; §5 models, ``F(x)``."""
    net = compiled.net
    if compiled.input_encoding.get("kind") != "gd_trace":  # §5: the extended network's F
        y = net.outputs[0]
        return {"fields": {"outputs": {
            "value": y, "labels": list(net.spaces[y].labels),
            "rule": "output i is F(x_i), the extended network's value for sample i (Welper §5; Prop. 2.1: "
                    "f_theta(x_i) once training has stopped), reported as a number rounded to 1e-6"}}}
    rb = compiled.output_encoding["readback"]
    w = rb["width"]
    mapped = set(rb["boundary"]) | set(rb["stop"])
    s = [x for x in net.spaces["s"].labels if _state(x) in mapped]
    work_T = [x for x in net.spaces["T"].labels if x.startswith(f"T{rb['tape']}:")]
    work_H = [x for x in net.spaces["H"].labels if x.startswith(f"H{rb['tape']}:")]
    run = ("the optimizer (22) runs from the start iterate (input encoding 'start') until s sits on a vertex "
           "listed in readback 'halting', or for output encoding 'lowered_steps' steps, or once source_steps + 1 "
           "iterates have had a readback 'boundary' state")
    where = (f"read at the last iterate whose s-vertex state is in readback 'boundary' (or in 'stop', when it "
             f"halts there on a missing rule); {run}")
    return {"fields": {
        "state": {"value": "s", "labels": s,
                  "rule": f"s is one-hot e_v; its label {VERTEX_LABEL} names the §4.1 state, and readback "
                          f"'boundary' / 'stop' maps it to the source state; {where}"},
        "head": {"value": "H", "labels": work_H,
                 "rule": f"the cell c of the label H{rb['tape']}:c of the one-hot dimension of H on the work "
                         f"tape, divided by the block width {w} (c is a block's first cell); {where}"},
        "tape": {"value": "T", "labels": work_T,
                 "rule": f"cells c with T{rb['tape']}:c > 0 hold +1; source cell b is the symbol whose readback "
                         f"'code' word spells cells {w}b .. {w}b + {w - 1} ('+' for +1, '-' for -1); the tape is "
                         f"the span of non-blank source cells; {where}"},
        "sigma": {"value": "T", "labels": work_T, "rule": f"the number of non-blank source cells of 'tape'; {where}"},
        "halted": {"value": "s", "labels": rb["halting"] or s,
                   "rule": "true when the last iterate's s-vertex is one of these halting vertices (a halting "
                           "state, or no rule for the symbols under the heads), unless the run was cut at "
                           "source_steps"},
        "outcome": {"value": "s", "labels": [x for x in rb["halting"] if _state(x) in compiled.source.halting]
                    or rb["halting"] or s,
                    "rule": "the halting state's outcome (the source's 'halt' table) when halted in one of these "
                            "vertices, 'halt' when halted on a missing rule, null when not halted"},
        "steps": {"value": "s", "labels": s,
                  "rule": "the number of iterates whose s-vertex state is in readback 'boundary', minus 1 "
                          "(plus 1 for a halt on a missing rule when readback 'missing_rule_counts_step'), at "
                          "most source_steps"},
    }, "notes": ("The network is the loss (21) only; the iterate is its Params s, T, H and its input ro (the "
                 "read-only tape). Optimizer step k is step k of the source machine lowered to Welper §4.1's "
                 "form (docs/gd_trace.md); examples/plain/gd_trace_torch.py runs it from this manifest alone.")}


def _state(vertex_label: str) -> str:
    """The §4.1 state of a vertex label (:data:`VERTEX_LABEL`)."""
    return vertex_label[2:].rsplit("|", 2)[0]
