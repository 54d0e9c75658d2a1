"""The transformer's options (spelled once) and ``compile(ir, opts)``: a line machine as
the encoder–decoder transformer of Wei, Chen & Ma (2022), §4.1 and App. C.

:func:`compile` removes stay moves (:mod:`tm2nn.passes.stay`), lays the hidden vector out
as in App. C.1 (:mod:`.layout`) and builds the net (:mod:`.build`): input ``tape`` = token
ids of the input symbols, output ``trace`` = one tap per decoder step 0..T', decoded by
:mod:`.decoding`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tm2nn.backends.protocol import Model
from tm2nn.backends.transformer.bounds import size_report
from tm2nn.backends.transformer.build import build
from tm2nn.backends.transformer.layout import Layout
from tm2nn.errors import OptionError, Tm2nnError
from tm2nn.ir import GridMachine, Machine
from tm2nn.options import make, option, validate
from tm2nn.passes.stay import remove_stays

#: Binary positions of at most this many bits: the index engine keeps Claim C.6's key,
#: Bin(l_{t-1}) and Bin(t), in 64 bits (T' < 2^31).  The model itself is O(log T) in size:
#: positions are computed, so compiling does not refuse a long run; an engine that would
#: materialise per-step tables refuses when it is built (torch: ``MAX_POSITION_ENTRIES``).
MAX_POSITION_BITS = 32


@dataclass(frozen=True)
class Options:
    steps: int = option(help="the step bound T: the decoder runs T source steps", metavar="T", low=1)
    attention: Literal["hardmax", "softmax"] = option(
        "hardmax", "hard-max attention (ties averaged, as in the paper) or softmax (App. C's remark)")
    beta: float = option(10.0, "the softmax inverse temperature (attention softmax)", above=0.0)
    corrections: bool = option(True, "the round() corrections of Prop. 3.4 (placed by --correction-placement)")
    shared_history: bool = option(True, "one key/value cache shared by the binary-search layers (the same "
                                  "function as one cache per layer, Claims C.4-C.6)")
    correction_placement: Literal["groups", "layers"] = option(
        "groups", "where the round corrections go: after each group of lemmas (groups), or after every "
        "paper transformer layer as in the proof of Theorem 4.1 (layers); the same function")
    cls_readout: bool = option(False, "add θ_cls (proof of Theorem 4.1): +1 accept, -1 reject, 0 otherwise, "
                               "read off o_T as the last tap column (and the ONNX output cls)")

    def __post_init__(self):
        validate(self)
        if self.correction_placement == "layers" and not self.corrections:
            raise OptionError("{correction_placement} 'layers' places Prop. 3.4's corrections, which are turned "
                              "off; drop it or {corrections}", "correction_placement", "corrections")


def check_source(ir) -> None:
    """Refuse IR that is not a line machine (as the backend's ``check_source`` does)."""
    if not isinstance(ir, Machine):
        raise Tm2nnError(f"the transformer backend compiles line machines; {getattr(ir, 'name', '?')!r} "
                         f"is a {type(ir).__name__.lower()}")


def options(**values) -> Options:
    """The validated options (unknown names and bad values are errors naming the backend)."""
    return make(Options, values, "the transformer backend")


def compile(m: Machine, opts: Options) -> Model:
    """``opts.shared_history=False`` builds the binary search literally, each layer
    attending over its own input's history (one cache per layer); the default shares one
    cache (same function, see :func:`.binary_search.binary_search`).
    ``correction_placement="layers"`` puts a round correction after every paper
    transformer layer (:func:`.build.correct_every_layer`), the default after each group
    of lemmas.  ``cls_readout`` adds θ_cls (:mod:`.cls`)."""
    if isinstance(m, GridMachine):
        raise Tm2nnError("the transformer backend compiles line-tape machines; this is a grid machine "
                         "(try the rcnn backend)")
    steps, attention, beta = opts.steps, opts.attention, opts.beta
    corrections, placement, cls_readout = opts.corrections, opts.correction_placement, opts.cls_readout
    low = remove_stays(m)
    t = low.lowered_steps(steps)
    lay = Layout.for_machine(low.machine.states, m.alphabet, m.blank, t)  # sizes only: nothing built yet
    if lay.w_pos > MAX_POSITION_BITS:
        raise OptionError(f"refusing to compile: T = {steps:,} needs {t:,} decoder steps, positions of "
                          f"{lay.w_pos} bits (the most is {MAX_POSITION_BITS}); lower {{steps}}", "steps")
    net = build(low.machine, lay, mode=attention, beta=beta, corrections=corrections,
                shared_history=opts.shared_history, placement=placement, cls_readout=cls_readout)
    # readout loads onnx: imported here for start-up time
    from tm2nn.backends.transformer.readout import OUTPUTS

    no_rule = [[q, a] for q in m.states if q not in m.halting for a in m.alphabet if (q, a) not in m.delta]
    enc = {"kind": "transformer_trace", "layout": lay.to_json(), "lowering": low.to_json(),
           "halting": dict(m.halting), "no_rule": no_rule,
           "missing_rule_counts_step": m.missing_rule_counts_step, "source_steps": int(steps),
           "onnx_outputs": ["trace", *OUTPUTS]}
    if cls_readout:  # θ_clsᵀ o_i: the tap column after the groups (cls.py)
        enc["cls_column"] = lay.tap_indices[lay.tap_groups[-1]].stop
        enc["onnx_outputs"].append("cls")
    return Model(
        backend="transformer",
        net=net,
        source=m,
        input_encoding={"kind": "tokens", "alphabet": list(m.alphabet), "blank": m.blank,
                        "max_len": t + 1},
        output_encoding=enc,
        bounds=size_report(m, lay, net, corrections=corrections, placement=placement,
                           cls=cls_readout),
        options={"steps": int(steps), "decoder_steps": t, "attention": attention,
                 "beta": float(beta) if attention == "softmax" else None,
                 "corrections": bool(corrections), "shared_history": bool(opts.shared_history),
                 "correction_placement": placement, "cls_readout": bool(cls_readout),
                 "width": lay.width, "w_pos": lay.w_pos,
                 "offset": lay.offset, "stay_aux_states": len(low.aux)},
    ).with_options(opts)
