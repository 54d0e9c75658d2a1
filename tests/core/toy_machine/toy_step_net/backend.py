"""toy-step-net as the registry sees it (:class:`tm2nn.backends.protocol.Backend`): a toy
machine construction, not from the papers (:mod:`.build`), with its options spelled once,
its codec (:mod:`.codec`) and its reference check (:mod:`.check`)."""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.backends.protocol import Backend, Codec, Stepping
from tm2nn.ir import Machine
from tm2nn.options import option, validate

from . import codec
from .build import NAME, check_ir, compile
from .check import StepChecker


@dataclass(frozen=True)
class Options:
    steps: int = option(help="the step bound T: the net computes every configuration of T steps on a window of "
                        "2T+1 cells", metavar="T", low=1)

    def __post_init__(self):
        validate(self)


BACKEND = Backend(
    name=NAME,
    paper="",  # a toy: no paper
    summary="a toy (not from the papers): one ReLU layer of head-state-symbol indicators per step, every "
            "configuration out",
    Options=Options,
    takes=(Machine,),
    takes_what="line machines",
    compile=compile,
    codec=Codec(encode=codec.encode, run=codec.run, describe=codec.describe),
    reference=StepChecker,
    stepping=Stepping("steps", 100),
    check_ir=check_ir,
    analyses={"configurations": codec.configurations},
    #: what a model file must hold: rebuild's step bound, and what the codec reads
    model_keys={"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/width": "int",
                "tm2nn.output_encoding/steps": "int", "tm2nn.output_encoding/no_rule": "list",
                "tm2nn.output_encoding/halting": "object"},
)
