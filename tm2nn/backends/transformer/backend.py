"""The transformer backend (Wei, Chen & Ma 2022, §4.1 and App. C) behind the common
interface: input = token ids of the input tape, output = one tap per decoder step,
decoded into the source machine's run (:mod:`.decoding`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tm2nn.backends.base import Backend, Compiled
from tm2nn.interrupt import partial_reports
from tm2nn.options import option, validate
from tm2nn.report import Report


@dataclass(frozen=True)
class Options:
    steps: int = option(help="the step bound T: the decoder runs T source steps", metavar="T", low=1)
    attention: Literal["hardmax", "softmax"] = option(
        "hardmax", "hard-max attention (ties averaged, as in the paper) or softmax (App. C's remark)")
    beta: float = option(10.0, "the softmax inverse temperature (attention softmax)", above=0.0)
    corrections: bool = option(True, "the round() corrections after each group of lemmas (Prop. 3.4)")
    shared_history: bool = option(True, "one key/value cache shared by the binary-search layers (the same "
                                  "function as one cache per layer, Claims C.4-C.6)")

    def __post_init__(self):
        validate(self)


class Transformer(Backend):
    name = "transformer"
    summary = "Wei-Chen-Ma §4 / App. C: an encoder-decoder transformer with hard-max attention"
    Options = Options
    takes_what = "line machines"
    run_steps = "steps"
    run_default_steps = 1000
    #: what a model file must hold: rebuild's step bound, the token and tap encodings
    #: decoding (:mod:`.decoding`) reads
    model_keys = {"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/alphabet": "list",
                  "tm2nn.input_encoding/blank": "string", "tm2nn.output_encoding/layout": "object",
                  "tm2nn.output_encoding/lowering": "object", "tm2nn.output_encoding/source_steps": "int"}

    @property
    def takes(self):
        from tm2nn.ir import Machine

        return (Machine,)

    def compile(self, ir, opts: Options) -> Compiled:
        from tm2nn.backends.transformer import compile as compile_transformer

        return compile_transformer(ir, steps=opts.steps, attention=opts.attention, beta=opts.beta,
                                   corrections=opts.corrections, shared_history=opts.shared_history)

    def encode(self, compiled: Compiled, texts: list[str]):
        """Token ids ``[n, L]`` of the input tapes, padded with the blank."""
        from tm2nn.ir.machine import check_input
        from tm2nn.verify.trace import encode_tokens

        for t in texts:
            check_input(compiled.source, t)
        return encode_tokens(compiled.input_encoding, texts)

    def run(self, compiled: Compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
        from tm2nn.backends.transformer.decoding import TraceDecoder
        from tm2nn.verify.trace import run_taps

        dec = TraceDecoder(compiled.output_encoding)
        with partial_reports(texts, lambda t, text: Report(dec.decode(t, text).report)):
            taps = run_taps(compiled, texts, engine, progress)
        return [Report(dec.decode(t, text).report) for t, text in zip(taps, texts)]

    def configurations(self, compiled: Compiled, text: str, engine: str = "torch") -> list:
        """Every step's configuration, replayed from the writes the taps record."""
        from tm2nn.backends.transformer.decoding import TraceDecoder
        from tm2nn.verify.trace import run_taps

        return TraceDecoder(compiled.output_encoding).configurations(run_taps(compiled, [text], engine)[0], text)

    def checker(self, compiled: Compiled):
        from tm2nn.verify.trace import TraceChecker

        return TraceChecker(compiled)

    def find_beta(self, ir, values: dict, *, inputs, samples, seed) -> dict:
        """The smallest softmax beta with 0 mismatches (:func:`tm2nn.verify.beta.find_beta`)."""
        from tm2nn.verify.beta import find_beta

        def at(beta):
            opts = self.options(**{**values, "attention": "softmax", "beta": beta})
            return self.compile(ir, opts).with_options(opts)
        return find_beta(at, inputs=inputs, samples=samples, seed=seed)

    def finish_onnx(self, model, compiled: Compiled):
        """The ONNX model gets the decoded run as outputs besides the taps (:mod:`.readout`)."""
        from tm2nn.backends.transformer.readout import add_readout

        return add_readout(model, compiled.output_encoding)


BACKEND = Transformer()
