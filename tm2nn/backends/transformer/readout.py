"""The decoded run as outputs of the model: the final configuration and the halted flag
computed inside the network from the per-step taps, so a user needs no tm2nn code to read
the answer (issue 4: "input tape in, decoded final configuration and halted flag out").

They are NetIR readouts (:class:`tm2nn.nets.RunReadout`, one per field, Wei, Chen & Ma
§4.1 / App. C: the run read off the taps of o_i), appended to the net by
:func:`with_readout`, so the torch module (its named outputs,
``module.outputs(tokens)``), the ONNX model (graph outputs after ``trace``) and the
manifest describe one network.  They compute what
:class:`~tm2nn.backends.transformer.decoding.TraceDecoder` computes, vectorised over
steps (a test checks the two agree), from the taps of o_i (state, symbol read, head
position) and the written symbol:

* ``state`` int64 ``[B]``: index into ``layout.states`` (the source machine's states
  come first; a reported state is never a stay-lowering auxiliary one);
* ``halted`` bool ``[B]``, ``steps`` int64 ``[B]`` (source steps, ARCHITECTURE.md's
  conventions), ``head`` int64 ``[B]`` (relative to the start cell);
* ``final_tape`` int64 ``[B, 2·offset + 1]``: symbol ids (``layout.alphabet``) of cells
  ``-offset .. offset``, every cell a run of T steps can reach.

The configuration is the one at the first halting step, or after the last source step.
With θ_cls (:mod:`.cls`) the net also outputs ``cls``.
"""

from __future__ import annotations

from tm2nn.backends.transformer.cls import cls_column, cls_output
from tm2nn.backends.transformer.layout import Layout
from tm2nn.nets import Net, Op, RunReadout

OUTPUTS = ("state", "halted", "steps", "head", "final_tape")


def run_readouts(enc: dict, trace: str = "trace", tokens: str = "tape") -> list[RunReadout]:
    """The readouts of ``enc`` (a ``transformer_trace`` output encoding), one per field of
    :data:`OUTPUTS`, reading the taps ``trace`` and the tape's token ids ``tokens``."""
    lay = Layout.from_json(enc["layout"])
    aux = {a for a, _t in enc.get("lowering", {}).get("aux", [])}
    halting = dict(enc["halting"])
    no_rule = {(q, a) for q, a in enc["no_rule"]}
    groups = {g: tuple(range(sl.start, sl.stop)) for g, sl in lay.tap_indices.items()}
    tables = dict(
        st=groups["st"], sym1=groups["sym1"], sym2=groups["sym2"], pos2=groups["pos2"],
        bit_values=tuple(1 << k for k in lay.bits_msb_first),
        source_step=tuple(0 if q in aux else 1 for q in lay.states),
        halts=tuple(int(q in halting or (q, a) in no_rule) for q in lay.states for a in lay.alphabet),
        halting=tuple(int(q in halting) for q in lay.states),
        missing_rule_counts_step=bool(enc.get("missing_rule_counts_step", False)),
        max_steps=int(enc["source_steps"]), offset=lay.offset, blank=lay.alphabet.index(lay.blank))
    return [RunReadout(f, (trace, tokens), field=f, **tables) for f in OUTPUTS]


def with_readout(net: Net, enc: dict) -> Net:
    """``net`` (tokens ``tape`` -> taps ``trace``) with the run's readouts appended and
    their values as outputs after the taps; with θ_cls (:func:`.cls.cls_column`), the
    output ``cls`` last.  ``enc["onnx_outputs"]`` names the outputs, in this order."""
    trace, tokens = net.outputs[0], net.inputs[0].name
    ops: list[Op] = list(run_readouts(enc, trace, tokens))
    if cls_column(enc) is not None:
        ops.append(cls_output(enc, trace))
    return Net(net.name, net.inputs, (*net.nodes, *ops), (*net.outputs, *(op.name for op in ops)),
               dict(net.metadata))
