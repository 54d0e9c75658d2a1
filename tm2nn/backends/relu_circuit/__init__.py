"""relu-circuit: boolean circuits as exact ReLU nets (Wei, Chen & Ma 2022, §3 and App. B).

``compile(c)`` lowers ``c`` to the basis AND/OR (2 inputs), NOT, ID, constants
(:func:`tm2nn.passes.basis.to_basis`), layers it strictly (:func:`layer_circuit`), and
turns each circuit layer into two ReLU layers (Lemma B.1 with Prop. B.2's gates).  With
``corrections`` (the default) a Prop. 3.4 ``round`` follows every layer but the last
(Lemma 3.3: large all-layer margin); ``pm_one_output`` adds the final ``z ↦ 2z - 1`` of
the proof of Theorem 3.1.  A net estimated over the memory limit is refused before
layering (:mod:`~tm2nn.backends.relu_circuit.estimate`).  See docs/relu_circuit.md.
"""

from __future__ import annotations

from tm2nn.backends.base import Compiled
from tm2nn.backends.relu_circuit.bounds import size_report
from tm2nn.backends.relu_circuit.layers import build_net
from tm2nn.ir import Circuit

__all__ = ["compile"]


def compile(c: Circuit, *, corrections: bool = True, pm_one_output: bool = False) -> Compiled:
    """Compile circuit ``c``; input ``x`` = inputs in declared order (0/1), output ``y`` =
    outputs in declared order, 0/1 (threshold 1/2) or ±1 with ``pm_one_output``
    (threshold 0)."""
    from tm2nn.backends.relu_circuit.backend import BACKEND
    from tm2nn.backends.relu_circuit.estimate import check_net_memory
    from tm2nn.passes.basis import to_basis
    from tm2nn.passes.layering import layer_circuit
    from tm2nn.syntax.aiger import gc_paused

    opts = BACKEND.options(corrections=corrections, pm_one_output=pm_one_output)  # validated in one place

    with gc_paused():  # millions of small objects and no cycles: the collector only slows it
        basis = to_basis(c)
        check_net_memory(basis, corrections=corrections, pm_one_output=pm_one_output)
        lc = layer_circuit(basis)
    if tuple(lc.inputs) != tuple(c.inputs):  # pragma: no cover - to_basis keeps the ports
        raise ValueError("to_basis changed the circuit's inputs")
    net = build_net(lc, corrections=corrections, pm_one_output=pm_one_output,
                    name=c.name, output_names=tuple(c.outputs))
    return Compiled(
        backend="relu-circuit",
        net=net,
        source=c,
        input_encoding={"kind": "bits", "names": list(c.inputs)},
        output_encoding={"kind": "bits", "names": list(c.outputs),
                         "threshold": 0.0 if pm_one_output else 0.5,
                         "values": "pm1" if pm_one_output else "01"},
        bounds=size_report(lc, net, corrections=corrections, pm_one_output=pm_one_output),
        options={"corrections": bool(corrections), "pm_one_output": bool(pm_one_output),
                 "layers": lc.depth, "width": max(lc.widths[1:], default=0),
                 "gates": sum(len(layer) for layer in lc.layers)},
    ).with_options(opts)
