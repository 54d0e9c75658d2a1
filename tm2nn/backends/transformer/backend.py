"""The transformer backend (Wei, Chen & Ma 2022, §4.1 and App. C) as a construction of the
protocol (:mod:`tm2nn.backends.protocol`): input = token ids of the input tape
(:mod:`.runtime`), output = one tap per decoder step, decoded into the source machine's
run (:mod:`.decoding`); its reference check is :mod:`.reference`, its fused engine the
long-run decoder (:mod:`.engines`), its analyses :mod:`.margin`, :mod:`.beta`,
:mod:`.statistics` and :func:`.bounds.function_class_of`."""

from __future__ import annotations

from tm2nn.backends.protocol import Backend, Codec, Example, Stepping, Training
from tm2nn.backends.transformer.beta import softmax_beta
from tm2nn.backends.transformer.bounds import function_class_of
from tm2nn.backends.transformer.decoding import TraceDecoder, description
from tm2nn.backends.transformer.margin import certified_margin, margin, margin_attack
from tm2nn.backends.transformer.model import Options, compile
from tm2nn.backends.transformer.pictures import attention_weights
from tm2nn.backends.transformer.reference import TraceChecker
from tm2nn.backends.transformer.runtime import LONG_RUN, encode, run_taps
from tm2nn.backends.transformer.statistics import statistics_bracket
from tm2nn.interrupt import partial_reports
from tm2nn.ir import Machine
from tm2nn.report import Report
from tm2nn.training.options import NoOptions


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """The decoded run report of each input (:class:`.decoding.TraceDecoder`)."""
    dec = TraceDecoder(compiled.output_encoding)
    with partial_reports(texts, lambda t, text: Report(dec.decode(t, text).report)):
        # the long-run engines stop once the taps decide every report (T source steps or a halt)
        taps = run_taps(compiled, texts, engine, progress, horizon=dec.horizon if engine in LONG_RUN else None)
    return [Report(dec.decode(t, text).report) for t, text in zip(taps, texts)]


def configurations(compiled, text: str, engine: str = "torch") -> list:
    """Every step's configuration, replayed from the writes the taps record."""
    return TraceDecoder(compiled.output_encoding).configurations(run_taps(compiled, [text], engine)[0], text)


def train_task(compiled, opts, extra):
    """``tm2nn train``'s hook (:func:`.train.training`: teacher-forced, softmax attention;
    it loads torch, so it is imported when a training run starts)."""
    from tm2nn.backends.transformer.train import training

    return training(compiled, opts, extra)


def describe(compiled) -> dict:
    """Each report field as the tap dimensions it reads and the rule
    :class:`~.decoding.TraceDecoder` applies (:func:`.decoding.description`)."""
    return description(compiled.output_encoding, compiled.net)


BACKEND = Backend(
    name="transformer",
    paper="Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for "
          "Approximating Turing Machines with Transformers (§4, App. C)",
    summary="Wei-Chen-Ma §4 / App. C: an encoder-decoder transformer with hard-max attention",
    Options=Options,
    takes=(Machine,),
    takes_what="line machines",
    compile=compile,
    codec=Codec(encode=encode, run=run, describe=describe),
    reference=TraceChecker,
    stepping=Stepping("steps", 1000),
    #: the long-run decoders (:mod:`.engines.index_engine`, :mod:`.engines.program_engine`):
    #: the codec's run drives them
    fused={name: None for name in LONG_RUN},
    training=Training(NoOptions, train_task, {"attention": "softmax"}),
    analyses={"margin": margin, "certified_margin": certified_margin, "function_class": function_class_of,
              "find_beta": softmax_beta, "configurations": configurations, "statistics_bracket": statistics_bracket,
              "margin_attack": margin_attack},
    #: what a model file must hold: rebuild's step bound, the token and tap encodings
    #: decoding (:mod:`.decoding`) reads
    model_keys={"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/alphabet": "list",
                "tm2nn.input_encoding/blank": "string", "tm2nn.output_encoding/layout": "object",
                "tm2nn.output_encoding/lowering": "object", "tm2nn.output_encoding/source_steps": "int"},
    pictures={"attention": attention_weights},
    examples=(Example("bb4.tm", (
        "compile {ex}/bb4.tm --backend transformer --steps 110 -o {out}/bb4_transformer.onnx --json",
        "verify {ex}/bb4.tm --backend transformer --steps 110 --json")),),
)
