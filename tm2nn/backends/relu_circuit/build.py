"""relu-circuit's compile (Wei, Chen & Ma 2022, §3 and App. B): :func:`compile` takes a
circuit, or a line machine unrolled into one for T steps (:func:`unroll_machine`).

:func:`compile_circuit` lowers a circuit to the basis AND/OR (2 inputs), NOT, ID, constants
(:func:`tm2nn.passes.basis.to_basis`), layers it strictly
(:func:`~tm2nn.passes.layering.layer_circuit`), and turns each circuit layer into two ReLU
layers (Lemma B.1 with Prop. B.2's gates, :func:`.layers.build_net`).  With
``corrections`` (the default) a Prop. 3.4 ``round`` follows every layer but the last
(Lemma 3.3: large all-layer margin); ``pm_one_output`` adds the final ``z ↦ 2z - 1`` of
the proof of Theorem 3.1.  A net estimated over the memory limit is refused before
layering (:mod:`.estimate`).  See docs/relu_circuit.md.
"""

from __future__ import annotations

from tm2nn.backends.protocol import Model
from tm2nn.backends.relu_circuit.bounds import size_report
from tm2nn.backends.relu_circuit.codec import encoding
from tm2nn.backends.relu_circuit.estimate import check_net_memory
from tm2nn.backends.relu_circuit.layers import build_net
from tm2nn.backends.relu_circuit.options import Options
from tm2nn.backends.relu_circuit.unroll import unroll
from tm2nn.errors import Tm2nnError
from tm2nn.gc_pause import gc_paused
from tm2nn.ir import Circuit, GridMachine
from tm2nn.ir.levels import layering
from tm2nn.options import OptionError
from tm2nn.passes.basis import to_basis
from tm2nn.passes.layering import layer_circuit

NAME = "relu-circuit"


def compile(ir, opts: Options) -> Model:
    """A circuit, or a line machine unrolled for ``opts.steps`` steps (its input and output
    encodings are the ``unrolled_tm`` codec's, :mod:`.codec`), as a ReLU net."""
    if isinstance(ir, Circuit):
        if opts.steps is not None or opts.tape is not None or opts.origin is not None:
            raise OptionError("{steps}, {tape} and {origin} are for machines; this is a circuit",
                              "steps", "tape", "origin")
        return compile_circuit(ir, opts)
    circuit, layout = unroll_machine(ir, opts)
    inner = compile_circuit(circuit, opts)
    threshold = inner.output_encoding.get("threshold", 0.5)
    return Model(
        NAME, inner.net, ir,
        input_encoding=encoding(layout),
        output_encoding=encoding(layout, threshold),
        bounds=inner.bounds,
        options=dict(inner.options, steps=opts.steps, tape=layout.tape, origin=layout.origin,
                     circuit_gates=len(circuit.gates)),
    ).with_options(opts).with_info(inner.net_info)  # the same net: measured once


def unroll_machine(m, opts: Options):
    """TM -> circuit: ``steps`` is required, the window defaults to 2T+1 cells (every run
    of T steps fits).  Returns (circuit, layout)."""
    if isinstance(m, GridMachine):
        raise Tm2nnError("the relu-circuit backend unrolls line machines; this is a grid machine "
                         "(try the rcnn backend)")
    if opts.steps is None:
        raise OptionError("compiling a machine to a circuit needs the step bound {steps} (T)", "steps")
    n = opts.tape if opts.tape is not None else 2 * opts.steps + 1
    return unroll(m, opts.steps, n, origin=opts.origin, max_gates=opts.max_gates)


def compile_circuit(c: Circuit, opts: Options) -> Model:
    """Compile circuit ``c`` (``opts.corrections``, ``opts.pm_one_output``); input ``x`` =
    inputs in declared order (0/1), output ``y`` = outputs in declared order, 0/1 (threshold
    1/2) or ±1 with ``pm_one_output`` (threshold 0)."""
    corrections, pm_one_output = opts.corrections, opts.pm_one_output
    # Millions of small objects and no cycles: the collector would only slow the build.  The
    # basis circuit and the layering are dropped before it runs again, so it never sees them.
    with gc_paused():
        net, info, bounds, sizes = _build(c, corrections, pm_one_output)
    return Model(
        backend=NAME,
        net=net,
        source=c,
        input_encoding={"kind": "bits", "names": list(c.inputs)},
        output_encoding={"kind": "bits", "names": list(c.outputs),
                         "threshold": 0.0 if pm_one_output else 0.5,
                         "values": "pm1" if pm_one_output else "01"},
        bounds=bounds,
        options={"corrections": bool(corrections), "pm_one_output": bool(pm_one_output), **sizes},
    ).with_options(opts).with_info(info)


def _build(c: Circuit, corrections: bool, pm_one_output: bool):
    """``(net, net.info(), size rows, sizes)``: the basis circuit, its layer widths and
    the memory refusal, the layered circuit, the net and its report."""
    basis = to_basis(c)
    plan = layering(basis)  # counted once: for the estimate, then to build the layers
    check_net_memory(basis, corrections=corrections, pm_one_output=pm_one_output, plan=plan)
    lc = layer_circuit(basis, plan)
    if tuple(lc.inputs) != tuple(c.inputs):  # pragma: no cover - to_basis keeps the ports
        raise ValueError("to_basis changed the circuit's inputs")
    net = build_net(lc, corrections=corrections, pm_one_output=pm_one_output,
                    name=c.name, output_names=tuple(c.outputs))
    info = net.info()
    bounds = size_report(lc, net, corrections=corrections, pm_one_output=pm_one_output, info=info)
    sizes = {"layers": lc.depth, "width": max(lc.widths[1:], default=0), "gates": lc.size}
    return net, info, bounds, sizes
