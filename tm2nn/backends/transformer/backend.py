"""The transformer backend (Wei, Chen & Ma 2022, §4.1 and App. C) behind the common
interface: input = token ids of the input tape (:mod:`.runtime`), output = one tap per
decoder step, decoded into the source machine's run (:mod:`.decoding`); its reference
check is :mod:`.reference`, its analyses :mod:`.margin`, :mod:`.beta`, :mod:`.statistics`
and :func:`.bounds.function_class_of`."""

from __future__ import annotations

from tm2nn.backends.base import Backend, Compiled
from tm2nn.backends.transformer.beta import softmax_beta
from tm2nn.backends.transformer.bounds import function_class_of
from tm2nn.backends.transformer.decoding import TraceDecoder, description
from tm2nn.backends.transformer.margin import certified_margin, margin
from tm2nn.backends.transformer.model import Options, compile
from tm2nn.backends.transformer.reference import TraceChecker
from tm2nn.backends.transformer.runtime import encode_tokens, run_taps
from tm2nn.backends.transformer.statistics import statistics_bracket
from tm2nn.interrupt import partial_reports
from tm2nn.ir import Machine
from tm2nn.ir.machine import check_input
from tm2nn.report import Report


def encode(compiled, texts: list[str]):
    """Token ids ``[n, L]`` of the input tapes, padded with the blank."""
    for t in texts:
        check_input(compiled.source, t)
    return encode_tokens(compiled.input_encoding, texts)


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """The decoded run report of each input (:class:`.decoding.TraceDecoder`)."""
    dec = TraceDecoder(compiled.output_encoding)
    with partial_reports(texts, lambda t, text: Report(dec.decode(t, text).report)):
        # the index engine stops once the taps decide every report (T source steps or a halt)
        taps = run_taps(compiled, texts, engine, progress, horizon=dec.horizon if engine == "index" else None)
    return [Report(dec.decode(t, text).report) for t, text in zip(taps, texts)]


def configurations(compiled, text: str, engine: str = "torch") -> list:
    """Every step's configuration, replayed from the writes the taps record."""
    return TraceDecoder(compiled.output_encoding).configurations(run_taps(compiled, [text], engine)[0], text)


def describe(compiled) -> dict:
    """Each report field as the tap dimensions it reads and the rule
    :class:`~.decoding.TraceDecoder` applies (:func:`.decoding.description`)."""
    return description(compiled.output_encoding, compiled.net)


class Transformer(Backend):
    name = "transformer"
    summary = "Wei-Chen-Ma §4 / App. C: an encoder-decoder transformer with hard-max attention"
    paper = "Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for Approximating Turing Machines with Transformers (§4, App. C)"
    Options = Options
    takes = (Machine,)
    takes_what = "line machines"
    run_steps = "steps"
    run_default_steps = 1000
    #: torch, onnxruntime, and the long-run decoder (:mod:`.engines.index_engine`)
    engines = ("torch", "onnxruntime", "index")
    #: what a model file must hold: rebuild's step bound, the token and tap encodings
    #: decoding (:mod:`.decoding`) reads
    model_keys = {"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/alphabet": "list",
                  "tm2nn.input_encoding/blank": "string", "tm2nn.output_encoding/layout": "object",
                  "tm2nn.output_encoding/lowering": "object", "tm2nn.output_encoding/source_steps": "int"}

    def compile(self, ir, opts: Options) -> Compiled:
        return compile(ir, opts)

    def encode(self, compiled: Compiled, texts: list[str]):
        return encode(compiled, texts)

    def run(self, compiled: Compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
        return run(compiled, texts, engine, progress)

    def configurations(self, compiled: Compiled, text: str, engine: str = "torch") -> list:
        return configurations(compiled, text, engine)

    def decoding(self, compiled: Compiled) -> dict:
        return describe(compiled)

    def checker(self, compiled: Compiled):
        return TraceChecker(compiled)

    def function_class(self, compiled: Compiled) -> dict:
        return function_class_of(compiled)

    def certified_margin(self, compiled: Compiled) -> dict:
        return certified_margin(compiled)

    def margin(self, ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None):
        return margin(ir, opts, samples=samples, trials=trials, seed=seed, engines=engines)

    def find_beta(self, ir, values: dict, *, inputs, samples, seed) -> dict:
        return softmax_beta(ir, values, inputs=inputs, samples=samples, seed=seed)

    def statistics_bracket(self, compiled: Compiled, dataset, gamma: float, **kw) -> dict:
        return statistics_bracket(compiled, dataset, gamma, **kw)

    def finish_onnx(self, model, compiled: Compiled):
        """The ONNX model gets the decoded run as outputs besides the taps (:mod:`.readout`)."""
        from tm2nn.backends.transformer.cls import add_cls_output, cls_column
        from tm2nn.backends.transformer.readout import add_readout

        model = add_readout(model, compiled.output_encoding)
        if cls_column(compiled.output_encoding) is not None:
            model = add_cls_output(model, compiled.output_encoding)
        return model


BACKEND = Transformer()
