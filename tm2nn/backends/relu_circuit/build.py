"""Circuits as exact ReLU nets (Wei, Chen & Ma 2022, §3 and App. B): the circuit compile.

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

from tm2nn.backends.base import Compiled
from tm2nn.backends.relu_circuit.bounds import size_report
from tm2nn.backends.relu_circuit.estimate import check_net_memory
from tm2nn.backends.relu_circuit.layers import build_net
from tm2nn.backends.relu_circuit.options import Options
from tm2nn.gc_pause import gc_paused
from tm2nn.ir import Circuit
from tm2nn.passes.basis import to_basis
from tm2nn.passes.layering import layer_circuit, layering


def compile_circuit(c: Circuit, opts: Options) -> Compiled:
    """Compile circuit ``c`` (``opts.corrections``, ``opts.pm_one_output``); input ``x`` =
    inputs in declared order (0/1), output ``y`` = outputs in declared order, 0/1 (threshold
    1/2) or ±1 with ``pm_one_output`` (threshold 0)."""
    corrections, pm_one_output = opts.corrections, opts.pm_one_output
    # Millions of small objects and no cycles: the collector would only slow the build.  The
    # basis circuit and the layering are dropped before it runs again, so it never sees them.
    with gc_paused():
        net, info, bounds, sizes = _build(c, corrections, pm_one_output)
    return Compiled(
        backend="relu-circuit",
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
