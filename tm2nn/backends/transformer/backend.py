"""The transformer backend (Wei, Chen & Ma 2022, §4.1 and App. C) behind the common
interface: input = token ids of the input tape, output = one tap per decoder step,
decoded into the source machine's run (:mod:`.decoding`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tm2nn.backends.base import Backend, Compiled
from tm2nn.interrupt import partial_reports
from tm2nn.options import OptionError, option, validate
from tm2nn.report import Report


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


class Transformer(Backend):
    name = "transformer"
    summary = "Wei-Chen-Ma §4 / App. C: an encoder-decoder transformer with hard-max attention"
    paper = "Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for Approximating Turing Machines with Transformers (§4, App. C)"
    Options = Options
    takes_what = "line machines"
    run_steps = "steps"
    run_default_steps = 1000
    #: torch, onnxruntime, and the long-run decoder (:mod:`tm2nn.engines.index_engine`)
    engines = ("torch", "onnxruntime", "index")
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
                                   corrections=opts.corrections, shared_history=opts.shared_history,
                                   correction_placement=opts.correction_placement,
                                   cls_readout=opts.cls_readout)

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
            # the index engine stops once the taps decide every report (T source steps or a halt)
            taps = run_taps(compiled, texts, engine, progress, horizon=dec.horizon if engine == "index" else None)
        return [Report(dec.decode(t, text).report) for t, text in zip(taps, texts)]

    def configurations(self, compiled: Compiled, text: str, engine: str = "torch") -> list:
        """Every step's configuration, replayed from the writes the taps record."""
        from tm2nn.backends.transformer.decoding import TraceDecoder
        from tm2nn.verify.trace import run_taps

        return TraceDecoder(compiled.output_encoding).configurations(run_taps(compiled, [text], engine)[0], text)

    def decoding(self, compiled: Compiled) -> dict:
        """Each report field as the tap dimensions it reads and the rule
        :class:`~.decoding.TraceDecoder` applies (:func:`.decoding.description`)."""
        from tm2nn.backends.transformer.decoding import description

        return description(compiled.output_encoding, compiled.net)

    def checker(self, compiled: Compiled):
        from tm2nn.verify.trace import TraceChecker

        return TraceChecker(compiled)

    def function_class(self, compiled: Compiled) -> dict:
        """Theorem 4.1's F_{w,d,α,T} for this model (:func:`.bounds.function_class`):
        ``w``, ``d`` (paper layers per decoder step), ``d_total``, ``alpha`` (‖θ‖₁ of all
        parameters, softmax β folded into the queries), ``alpha_per_step``, ``p`` (dense
        parameters of that width and depth) and ``beta``; and Theorem 4.1's statement
        (``theorem``, ``order``, ``scaling``)."""
        import math

        from tm2nn.backends.transformer.bounds import function_class
        from tm2nn.backends.transformer.layout import Layout

        fc = function_class(compiled.net)
        lay = Layout.from_json(compiled.output_encoding["layout"])
        T = int(compiled.output_encoding["source_steps"])
        return {**fc, "theorem": "Theorem 4.1", "order": "poly(k, |A|, log T) log(wd) / eps^2",
                "scaling": {"k": len(lay.states), "|A|": len(lay.alphabet), "T": T, "log T": math.log2(T)},
                "scaling_how": "k: states of the stay-free machine the decoder runs (passes/stay.py); "
                               "T: the source step bound (the decoder runs T' = decoder_steps)",
                "how": {"w": "the widest vector (corrections: 2 w_TM, a round doubles what it corrects)",
                        "d": "paper transformer layers per decoder step (paper_layers.py): 10 + w_pos",
                        "alpha": "||theta||_1 of E, h_0, the prologue, one decoder step (shared), theta_cls; "
                                 "softmax: beta folded into W_q, b_q",
                        "p": "(d + 3)(9w^2 + 13w) + |A| w + w: dense attention and feed-forward blocks of width w"}}

    def certified_margin(self, compiled: Compiled) -> dict:
        """The certified per-layer all-layer margin (:func:`tm2nn.verify.transformer_margin.certified_radius`,
        derived in docs/transformer_margin.md)."""
        from tm2nn.verify.transformer_margin import certified_radius

        r = certified_radius(compiled, per_step=False, budgets=False)
        return {**r, "kind": "per-layer: every parameter block moves by <= radius (l2) at every decoder step; "
                             "a lower bound on rho (docs/transformer_margin.md)"}

    def margin(self, ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None):
        """Wei-Chen-Ma's all-layer margin of the transformer (:mod:`tm2nn.verify.transformer_margin`):
        the certified lower bound and two attacks, on ``samples`` tapes of the verifier's
        input space; with and without corrections (only without, for ``--no-corrections``)."""
        from tm2nn.limits import check_int, check_seed
        from tm2nn.verify.check import InputSpace
        from tm2nn.verify.trace import EXHAUSTIVE_CELLS, EXHAUSTIVE_TAPES
        from tm2nn.verify.transformer_margin import margin_report, margin_table

        if engines and set(engines) != {"torch"}:
            raise OptionError("the transformer's margin attacks run in torch (they need its gradients): "
                              "{engines} takes only torch", "engines")
        samples, trials = check_int("samples", samples, 1), check_int("trials", trials, 1)
        seed = check_seed("seed", seed)
        self.check_source(ir)
        space = InputSpace(ir.alphabet, 0, min(EXHAUSTIVE_CELLS, opts.steps + 1), EXHAUSTIVE_TAPES)
        texts = space.pick(samples, seed)[0]
        if len(texts) > samples:  # an exhaustive space larger than asked: a seeded sample of it
            import random

            texts = random.Random(seed).sample(texts, samples)
        rows = margin_report(ir, texts, steps=opts.steps, corrections=(True, False) if opts.corrections else (False,),
                             seed=seed, trials=trials, attention=opts.attention,
                             correction_placement=opts.correction_placement)
        return margin_table(rows)

    def find_beta(self, ir, values: dict, *, inputs, samples, seed) -> dict:
        """The smallest softmax beta with 0 mismatches (:func:`tm2nn.verify.beta.find_beta`)."""
        from tm2nn.verify.beta import find_beta

        def at(beta):
            opts = self.options(**{**values, "attention": "softmax", "beta": beta})
            return self.compile(ir, opts).with_options(opts)
        return find_beta(at, inputs=inputs, samples=samples, seed=seed)


BACKEND = Transformer()
