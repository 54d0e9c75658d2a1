"""transformer: Turing machines as the encoder–decoder transformer of Wei, Chen & Ma
(2022), §4.1 and App. C — binary positional encodings, hard-max (or softmax) attention
with null key/value, and a binary search over past steps (Claims C.4–C.6).

``compile(m, steps=T)`` (:func:`.model.compile`) removes stay moves
(:mod:`tm2nn.passes.stay`), lays the hidden vector out as in App. C.1 (:mod:`.layout`)
and builds the net (:mod:`.build`): input ``tape`` = token ids of the input symbols,
output ``trace`` = one tap per decoder step 0..T', decoded by :mod:`.decoding`.
:mod:`.paper_layers` reads a decoder step as the paper's transformer layers, :mod:`.cls`
is the proof of Theorem 4.1's readout θ_cls, and :mod:`.bounds` gives the function class
F_{w,d,α,T} and checks its quantities from the weights.  The package also owns the run
(:mod:`.runtime`, the index engine :mod:`.engines`), the reference check
(:mod:`.reference`) and the analyses: the all-layer margin (:mod:`.margin`,
:mod:`.perturbed_decode`), the softmax β search (:mod:`.beta`) and the statistics
bracket (:mod:`.statistics`).  See docs/transformer.md.
"""

from __future__ import annotations

from tm2nn.backends.base import Compiled
from tm2nn.backends.transformer.model import compile as compile_model
from tm2nn.backends.transformer.model import options
from tm2nn.ir import Machine

__all__ = ["compile"]


def compile(m: Machine, *, steps: int, attention: str = "hardmax", beta: float = 10.0,
            corrections: bool = True, shared_history: bool = True, correction_placement: str = "groups",
            cls_readout: bool = False) -> Compiled:
    """:func:`.model.compile` with the options as keywords (validated in one place,
    :func:`.model.options`)."""
    return compile_model(m, options(steps=steps, attention=attention, beta=beta, corrections=corrections,
                                    shared_history=shared_history, correction_placement=correction_placement,
                                    cls_readout=cls_readout))
