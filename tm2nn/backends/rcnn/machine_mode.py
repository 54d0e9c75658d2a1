"""rcnn machine mode (Goel, Kakade, Kalai & Zhang, Def. 5 / App. B): the machine brought to
B.1.2 form (:func:`tm2nn.passes.rcnn_form.to_rcnn_form`), its cells encoded as B.1.1 numbers
(:mod:`.encoding`), and a net that applies B.2's filter (:mod:`.build`) L times to a start
grid (:mod:`.machine_io`), keeping every state so that each step can be decoded and checked.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.protocol import Model
from tm2nn.backends.rcnn.build import filter_for, machine_net
from tm2nn.backends.rcnn.encoding import cell_code
from tm2nn.backends.rcnn.filter_net import MAX_DIGITS_FLOAT32, MAX_DIGITS_FLOAT64, net_dtype
from tm2nn.backends.rcnn.plain_tables import decode_table, start_grid_table
from tm2nn.backends.rcnn.trace_decode import value_tolerance
from tm2nn.backends.rcnn.window import head_window, source_columns
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Machine
from tm2nn.limits import human
from tm2nn.options import OptionError
from tm2nn.passes.rcnn_form import rcnn_form_from_json, to_rcnn_form
from tm2nn.syntax import dump

#: Refuse a machine-mode model whose run reads more cells than this, (L + 1)·H·W: every
#: engine produces every cell of every grid (the torch and onnxruntime engines return them
#: all, their memory is checked when they run; the fused engine streams them through a
#: fixed buffer, and it and the decoder touch each about once, 0.7 ns a cell measured:
#: docs/rcnn.md, "Long runs"), so this bounds the work, about a minute of the fused engine.
MAX_SCAN_CELLS = 100_000_000_000


def machine_form(m, enc: dict | None = None):
    """``(chain, code)``: the B.1.2 lowering of ``m`` and its B.1.1 cell code (rebuilt
    from ``enc['lowering']`` when given, which checks it against ``m``)."""
    chain = rcnn_form_from_json(enc["lowering"], m) if enc else to_rcnn_form(m)
    return chain, cell_code(chain.machine)


def estimate(m, steps: int, max_input: int) -> dict:
    """Sizes of the machine-mode model, computed before building it."""
    chain, code = machine_form(m)
    low_len = chain.lowered_input_len(max_input)
    filter_steps = chain.lowered_steps(steps, input_len=max_input)
    columns = chain.lowered_columns(*source_columns(steps, max_input))
    window = head_window(chain.machine, filter_steps, low_len, columns)
    floats = (filter_steps + 1) * window[2] * window[3]
    return {"chain": chain, "code": code, "filter_steps": filter_steps, "window": window, "floats": floats}


def compile(m, opts) -> Model:
    """Machine mode: a net from a start grid to the grids after each of the L filter
    steps that simulate ``opts.steps`` source steps on inputs of up to ``opts.max_input``
    cells (default ``steps``); ``opts`` are the validated :class:`~.backend.Options`."""
    if not isinstance(m, Machine):
        raise Tm2nnError("the rcnn backend compiles machines (in machine mode); this is not a machine")
    steps = opts.steps
    max_input = steps if opts.max_input is None else int(opts.max_input)
    est = estimate(m, steps, max_input)
    # The filter's bumps are exact in float32 up to 12 digits (257 states) and in float64 up
    # to 30 (docs/rcnn.md, "float32, with no rounding layer"); the net runs in the narrower.
    n_states, n_digits = len(est["chain"].machine.states), est["code"].n_digits
    try:
        dtype = net_dtype(n_digits)
    except Tm2nnError as e:
        raise Tm2nnError(f"refusing to compile: {m.name!r} lowers to {n_states:,} states (B.1.2 form), "
                         f"{e.message}. Use another backend, or fewer states") from None
    if est["floats"] > MAX_SCAN_CELLS:
        _t, _l, h, w = est["window"]
        raise OptionError(
            f"refusing to compile: T = {steps} needs {est['filter_steps']:,} filter steps on a {h}x{w} grid, "
            f"{est['floats']:,} grid cells per input over the run (limit {MAX_SCAN_CELLS:,}; the torch and "
            f"onnxruntime engines would hold {human(est['floats'] * np.dtype(dtype).itemsize)} of them per input); "
            "lower {steps} or {max_input}", "steps", "max_input")
    chain, code = est["chain"], est["code"]
    filt = filter_for(chain.machine, code)
    net = machine_net(filt.body, est["filter_steps"], m.name)
    # The machine's text rides along so that `tm2nn eval` can encode inputs and decode
    # grids from the model file alone (the lowering is rebuilt from it and checked).
    # The start-grid and decode tables (plain_tables) let a script without tm2nn drive the
    # model (docs/onnx_plain.md); start_grids builds every start grid from the same table.
    enc_in = {"kind": "rcnn_grid", "machine": dump(m, "tm"), "lowering": chain.to_json(), "code": code.to_json(),
              "window": list(est["window"]), "max_input": max_input, "pad": 1 / 6,
              "start_grid": start_grid_table(chain, code, est["window"], dtype)}
    enc_out = {"kind": "rcnn_trace", "source_steps": int(steps), "filter_steps": est["filter_steps"],
               "digits": code.n_digits,
               "decode": decode_table(chain, code, code.n_digits, value_tolerance(code.n_digits))}
    options = {"steps": int(steps), "max_input": max_input, "filter_steps": est["filter_steps"],
               "window": list(est["window"]), "states": len(chain.machine.states),
               "digits": code.n_digits, "d_rc": filt.width}
    extra = []
    if dtype == "float64":  # float32 models keep their metadata (and files) as they were
        enc_in["dtype"] = options["dtype"] = "float64"  # the ONNX inputs / the torch module
        extra.append(("precision", f"float64: {n_digits} base-3 digits, more than float32's {MAX_DIGITS_FLOAT32} "
                      f"(up to {MAX_DIGITS_FLOAT64})", "O(log s) bits (B.4)"))
    return Model(
        backend="rcnn", net=net, source=m, input_encoding=enc_in, output_encoding=enc_out,
        bounds=[*filt.bounds,
                ("filter steps L", f"{est['filter_steps']:,} for T = {steps} source steps",
                 "L applications of one filter (Def. 5)"),
                ("grid (rows x columns)", f"{est['window'][2]} x {est['window'][3]}",
                 "every cell the head can reach (B.2 pads with p = 1/6)"), *extra],
        options=options,
    ).with_options(opts)
