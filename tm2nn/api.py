"""The public API: load sources, run machines and circuits (with the interpreter or a
backend).  Thin orchestration only."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tm2nn import backends
from tm2nn.backends.transformer.decoder_only import build_native
from tm2nn.backends.transformer.decoder_only.ground_truth import ground_truth
from tm2nn.codec import parse_bits
from tm2nn.compiler import compile, load_ir
from tm2nn.devices import is_cpu
from tm2nn.emit.transformer_lens import DTYPES, write_export
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.handle import Compiled
from tm2nn.interp import DEFAULT_MAX_STEPS, eval_circuit, run_machine
from tm2nn.interrupt import Interrupted
from tm2nn.ir import Circuit, GridMachine, Machine
from tm2nn.limits import check_int
from tm2nn.options import OptionError, make
from tm2nn.report import Report
from tm2nn.source import SourceText, registered
from tm2nn.syntax import format_module, guess_format, load, load_all, native_format, native_text
from tm2nn.training.options import TrainOptions

__all__ = ["load", "load_all", "run", "run_circuit", "default_input", "parse_bits", "load_model", "export", "train"]
#: what ``export(to=...)`` writes
EXPORTS = ("transformer-lens",)


def default_input(path: str | Path, fmt: str | None = None, name: str | None = None) -> str | None:
    """The input a source file documents for itself (morphett ``$INITIAL_TAPE``,
    turingmachine.io ``input:``), or None."""
    mod = format_module(fmt or guess_format(path))
    fn = getattr(mod, "default_input", None)
    if fn is None:
        return None
    return fn(SourceText.from_file(path).text_form().text)


def run_circuit(c: Circuit, bits: str) -> Report:
    """Evaluate one input pattern; the report is ``{"outputs": "0110..."}``."""
    x = parse_bits(bits, len(c.inputs))
    y = eval_circuit(c, x[None, :])[0]
    return Report(outputs="".join("1" if b else "0" for b in y))


def run(source, input: str | None = None, max_steps: int | None = None, *, backend: str | None = None,
        engine: str = "torch", format: str | None = None, name: str | None = None, trace: bool = False,
        progress=None, device=None, **options) -> Report:
    """Run a machine (or evaluate a circuit) on ``input`` and return its run report.

    ``source`` is a path or an IR object.  Without ``backend`` the reference interpreter
    runs it (at most ``max_steps`` steps, default 10^7; ``trace=True`` keeps every step in
    ``report.run.trace``).  With ``backend`` the machine is compiled with that backend,
    its step bound set to ``max_steps`` (default: the backend's), and run on ``engine``
    (the torch engine on ``device``, default the CPU: :mod:`tm2nn.devices`); a circuit is
    compiled as it is (no step bound); ``options`` are the backend's other compile options."""
    ir = load_ir(source, format, name)
    text = "" if input is None else input
    if backend is None or backend == "interp":
        if not is_cpu(device):
            raise OptionError("{device} applies to a backend's network; the interpreter runs on the CPU", "device")
        if options:
            raise OptionError(f"the interpreter takes no option {{{next(iter(options))}}}", next(iter(options)))
        if isinstance(ir, Circuit):
            return run_circuit(ir, text)
        if not isinstance(ir, Machine):
            raise OptionError(f"{ir.name!r} is a {ir.summary()['kind']}: it runs on a stream of samples, not on "
                              f"one input ('tm2nn learn' trains its net; {{name}} {ir.h.name} picks its circuit h)",
                              "name")
        steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
        try:
            return Report.of_run(run_machine(ir, text, steps, trace=trace,
                                             progress=(lambda k: progress(k, steps)) if progress else None))
        except Interrupted as e:  # Ctrl-C (tm2nn.interrupt.graceful): the configuration reached
            e.reports = [Report.of_run(e.partial)]
            raise
    spec = backends.get(backend)
    if spec.stepping is None:
        raise Tm2nnError(f"the {spec.name} backend does not run machines step by step (backends that do: "
                         f"{', '.join(b.name for b in backends.all() if b.stepping)})")
    if isinstance(ir, Circuit) and Circuit in spec.takes:  # no step bound: evaluated once, as the interpreter does
        return compile(ir, spec.name, **options).run(text, engine=engine, progress=progress, device=device)
    values = {**options, spec.stepping.option: spec.stepping.default if max_steps is None else max_steps}
    compiled = compile(ir, spec.name, **spec.stepping.options_for(values, [text]))
    return compiled.run(text, engine=engine, progress=progress, device=device)


def load_model(path):
    """The :class:`~tm2nn.handle.Compiled` a model file holds (``.onnx``, ``.pt`` or
    ``.safetensors``), checked against its construction (:mod:`tm2nn.modelfile.load`)."""
    from tm2nn.modelfile.load import load_model as load_file  # loads torch and onnx: not at import

    return Compiled.of(load_file(path))


def export(source, steps: int, *, to: str = "transformer-lens", output=None, max_input: int | None = None,
           dtype: str = "float32", format: str | None = None, name: str | None = None) -> Path:
    """Compile the machine ``source`` (a path or a Machine) for ``steps`` steps on inputs of
    up to ``max_input`` cells (default: the construction's) as a decoder-only transformer
    (Wei-Chen-Ma App. C, decoder-only: docs/transformer_lens.md) and write it as a folder
    plain TransformerLens loads (``to="transformer-lens"``; :mod:`tm2nn.emit.transformer_lens`)
    at ``output`` (default: the source's stem + ``-tl``), its weights in ``dtype``
    (float32 or float64, each exact up to the T the export reports).  Returns the folder."""
    if to not in EXPORTS:
        raise OptionError(f"{{to}} {to!r}: tm2nn exports to {', '.join(EXPORTS)}", "to")
    if dtype not in DTYPES:
        raise OptionError(f"{{dtype}} {dtype!r}: choose float32 or float64", "dtype")
    steps = check_int("steps", steps, 1)
    if max_input is not None:
        max_input = check_int("max_input", max_input, 0)
    ir = load_ir(source, format, name)
    if not isinstance(ir, Machine) or isinstance(ir, GridMachine):
        raise Tm2nnError(f"{ir.name!r} is not a one-tape machine: the TransformerLens export compiles Turing "
                         "machines (Wei-Chen-Ma's construction)")
    is_file = isinstance(source, (str, Path)) and Path(source).is_file()
    out = Path(output) if output is not None else Path((Path(source).stem if is_file else ir.name) + "-tl")
    model = build_native(ir, steps, max_input)
    return write_export(model, out, dtype=dtype, source=_provenance(source, ir, is_file),
                        ground_truth=ground_truth(model))


def _provenance(source, ir: Machine, is_file: bool) -> dict:
    """The source an export records: its path, name, sha256 (of the file's bytes, or of
    the machine's tm2nn text), and that text (what ``tm2nn verify DIR`` replays)."""
    text = native_text(ir)
    if is_file:
        loaded = registered(str(source))  # the bytes the parser read
        data = loaded.data if loaded is not None else read_input(source)
    else:
        data = text.encode()
    return {"path": str(source) if is_file else None, "name": ir.name, "sha256": hashlib.sha256(data).hexdigest(),
            "format": native_format(ir), "text": text}


def train(source, backend: str | None = None, *, format: str | None = None, name: str | None = None,
          steps: int | None = None, progress=None, on_epoch=None, **options):
    """Train the construction of ``backend`` in its own architecture (issue 38, ``tm2nn
    train``; :mod:`tm2nn.training`): ``options`` are :class:`~tm2nn.training.options.TrainOptions`'
    fields and the backend's own (``backends.get(name).training.Options``); ``steps`` the
    step bound T a machine is compiled for.  Returns a :class:`tm2nn.training.session.Trained`
    (``summary``, ``lines``, ``model``: the best weights, a :class:`Compiled` to save)."""
    from tm2nn.training.session import train as run_training  # loads torch: not at import

    ir = load_ir(source, format, name)
    spec = backends.get(backend) if backend is not None else next(
        (b for b in backends.all() if b.training is not None and b.takes and isinstance(ir, tuple(b.takes))), None)
    if spec is None or spec.training is None:
        who = f"the {spec.name} backend does not" if spec is not None else "no backend can"
        learns = f"; it trains its paper's learner with tm2nn learn --backend {spec.name}" if (
            spec is not None and spec.trainer is not None) else ""
        raise Tm2nnError(f"{who} train in its own architecture (backends that do: "
                         f"{', '.join(b.name for b in backends.all() if b.training is not None)}){learns}")
    spec.check_source(ir)
    shared = {f for f in TrainOptions.__dataclass_fields__}
    opts = make(TrainOptions, {k: v for k, v in options.items() if k in shared}, "tm2nn train")
    extra = make(spec.training.Options, {k: v for k, v in options.items() if k not in shared},
                 f"training with the {spec.name} backend")
    values = dict(spec.training.compile)
    if steps is not None:
        if not isinstance(ir, Machine):
            raise OptionError("{steps} is the step bound of a machine; this is a circuit", "steps")
        values[spec.stepping.option if spec.stepping else "steps"] = check_int("steps", steps, 1)
    path = str(source) if isinstance(source, (str, Path)) else None
    compiled = compile(ir, spec.name, source_path=path, **values)
    # Lemma 2.3's class is the construction's as compiled by default (the transformer's hard-max one)
    plain = {k: v for k, v in values.items() if k not in spec.training.compile}
    bound = compile(ir, spec.name, source_path=path, **plain) if spec.training.compile else compiled
    return run_training(compiled, opts, extra, progress=progress, on_epoch=on_epoch, bound=bound)
