"""The public API: load sources, run machines and circuits (with the interpreter or a
backend).  Thin orchestration only."""

from __future__ import annotations

from pathlib import Path

from tm2nn import backends
from tm2nn.codec import parse_bits
from tm2nn.compiler import compile, load_ir
from tm2nn.devices import is_cpu
from tm2nn.errors import Tm2nnError
from tm2nn.handle import Compiled
from tm2nn.interp import DEFAULT_MAX_STEPS, eval_circuit, run_machine
from tm2nn.interrupt import Interrupted
from tm2nn.ir import Circuit, Machine
from tm2nn.options import OptionError
from tm2nn.report import Report
from tm2nn.source import SourceText
from tm2nn.syntax import format_module, guess_format, load, load_all

__all__ = ["load", "load_all", "run", "run_circuit", "default_input", "parse_bits", "load_model"]


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
