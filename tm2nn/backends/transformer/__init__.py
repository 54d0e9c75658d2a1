"""transformer: Turing machines as the encoder–decoder transformer of Wei, Chen & Ma
(2022), §4.1 and App. C — binary positional encodings, hard-max (or softmax) attention
with null key/value, and a binary search over past steps (Claims C.4–C.6).

``compile(m, steps=T)`` removes stay moves (:mod:`tm2nn.passes.stay`), lays the hidden
vector out as in App. C.1 (:mod:`.layout`) and builds the net (:mod:`.build`): input
``tape`` = token ids of the input symbols, output ``trace`` = one tap per decoder step
0..T', decoded by :mod:`.decoding`.  :mod:`.paper_layers` reads a decoder step as the
paper's transformer layers, :mod:`.cls` is the proof of Theorem 4.1's readout θ_cls, and
:mod:`.bounds` gives the function class F_{w,d,α,T} and checks its quantities from the
weights.  See docs/transformer.md.
"""

from __future__ import annotations

from tm2nn.backends.base import Compiled
from tm2nn.backends.transformer.build import build
from tm2nn.backends.transformer.layout import Layout
from tm2nn.errors import Tm2nnError
from tm2nn.ir import GridMachine, Machine
from tm2nn.options import OptionError

__all__ = ["compile"]


#: Binary positions of at most this many bits: the index engine keeps Claim C.6's key,
#: Bin(l_{t-1}) and Bin(t), in 64 bits (T' < 2^31).  The model itself is O(log T) in size:
#: positions are computed, so compiling does not refuse a long run; an engine that would
#: materialise per-step tables refuses when it is built (torch: ``MAX_POSITION_ENTRIES``).
MAX_POSITION_BITS = 32


def compile(m: Machine, *, steps: int, attention: str = "hardmax", beta: float = 10.0,
            corrections: bool = True, shared_history: bool = True, correction_placement: str = "groups",
            cls_readout: bool = False) -> Compiled:
    """``shared_history=False`` builds the binary search literally, each layer attending
    over its own input's history (one cache per layer); the default shares one cache
    (same function, see :func:`.binary_search.binary_search`).
    ``correction_placement="layers"`` puts a round correction after every paper
    transformer layer (:func:`.build.correct_every_layer`), the default after each group
    of lemmas.  ``cls_readout`` adds θ_cls (:mod:`.cls`)."""
    from tm2nn.passes.stay import remove_stays

    if isinstance(m, GridMachine):
        raise Tm2nnError("the transformer backend compiles line-tape machines; this is a grid machine "
                         "(try the rcnn backend)")
    from tm2nn.backends.transformer.backend import BACKEND

    opts = BACKEND.options(steps=steps, attention=attention, beta=beta, corrections=corrections,
                           shared_history=shared_history, correction_placement=correction_placement,
                           cls_readout=cls_readout)  # validated in one place
    low = remove_stays(m)
    t = low.lowered_steps(steps)
    lay = Layout.for_machine(low.machine.states, m.alphabet, m.blank, t)  # sizes only: nothing built yet
    if lay.w_pos > MAX_POSITION_BITS:
        raise OptionError(f"refusing to compile: T = {steps:,} needs {t:,} decoder steps, positions of "
                          f"{lay.w_pos} bits (the most is {MAX_POSITION_BITS}); lower {{steps}}", "steps")
    net = build(low.machine, lay, mode=attention, beta=beta, corrections=corrections,
                shared_history=shared_history, placement=correction_placement, cls_readout=cls_readout)
    from tm2nn.backends.transformer.readout import OUTPUTS, with_readout

    no_rule = [[q, a] for q in m.states if q not in m.halting for a in m.alphabet if (q, a) not in m.delta]
    enc = {"kind": "transformer_trace", "layout": lay.to_json(), "lowering": low.to_json(),
           "halting": dict(m.halting), "no_rule": no_rule,
           "missing_rule_counts_step": m.missing_rule_counts_step, "source_steps": int(steps),
           "onnx_outputs": ["trace", *OUTPUTS]}
    if cls_readout:  # θ_clsᵀ o_i: the tap column after the groups (cls.py)
        enc["cls_column"] = lay.tap_indices[lay.tap_groups[-1]].stop
        enc["onnx_outputs"].append("cls")
    net = with_readout(net, enc)  # the decoded run (and cls) as readout ops: outputs after trace
    from tm2nn.backends.transformer.bounds import size_report

    return Compiled(
        backend="transformer",
        net=net,
        source=m,
        input_encoding={"kind": "tokens", "alphabet": list(m.alphabet), "blank": m.blank,
                        "max_len": t + 1},
        output_encoding=enc,
        bounds=size_report(m, lay, net, corrections=corrections, placement=correction_placement,
                           cls=cls_readout),
        options={"steps": int(steps), "decoder_steps": t, "attention": attention,
                 "beta": float(beta) if attention == "softmax" else None,
                 "corrections": bool(corrections), "shared_history": bool(shared_history),
                 "correction_placement": correction_placement, "cls_readout": bool(cls_readout),
                 "width": lay.width, "w_pos": lay.w_pos,
                 "offset": lay.offset, "stay_aux_states": len(low.aux)},
    ).with_options(opts)
