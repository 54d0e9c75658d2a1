"""``tm2nn viz KIND SOURCE -o OUT``: load the source, pick what each kind draws, write the
picture.  Returns ``(path, first divergent step or None, the backend drawn)``."""

from __future__ import annotations

from pathlib import Path

from tm2nn import backends
from tm2nn.api import default_input
from tm2nn.compiler import compile as compile_source
from tm2nn.compiler import default_backend
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Circuit, GridMachine, Machine
from tm2nn.syntax import load
from tm2nn.syntax.headers import example_header

from .attention import draw_attention
from .layers import draw_layers
from .render import check_out, save
from .runs import aligned, default_steps, interpreter_run, machine_backend, net_run
from .spacetime import draw_spacetime
from .weights import draw_weights

KINDS = ("spacetime", "weights", "attention", "layers")


def _input(source, fmt, name, m) -> str:
    """What the file documents: an embedded tape, else its ``# input:`` line, else empty."""

    text = default_input(source, fmt, name)
    if text is None and isinstance(m, Machine):
        text = example_header(Path(source)).get("input", "")
    return text or ""


def draw(kind: str, source, output, *, fmt=None, name=None, text=None, backend=None, step=None, layer=None,
         interpreter_only: bool = False, options: dict | None = None):
    if kind not in KINDS:
        raise Tm2nnError(f"unknown picture {kind!r} (one of: {', '.join(KINDS)})")
    out = check_out(output)
    obj = load(source, fmt, name)
    text = _input(source, fmt, name, obj) if text is None else text
    options = dict(options or {})
    steps = options.pop("steps", None)
    first, who = None, None
    if kind == "layers":
        if not isinstance(obj, Circuit):
            raise Tm2nnError("viz layers draws a circuit's layering; this source is not a circuit")

        fig, _ = draw_layers(obj)
    elif kind == "weights":
        # a machine's weights: machine_backend()'s by default (its layers are the paper's lemmas)
        spec = backends.get(backend or (machine_backend() if isinstance(obj, Machine) else default_backend(obj).name))
        if isinstance(obj, Machine):
            steps = default_steps(obj, text) if steps is None else steps
            options = spec.stepping.options_for({**options, spec.stepping.option: steps}, [text]) if spec.stepping else \
                {**options, "steps": steps}
        fig, _ = draw_weights(compile_source(obj, spec.name, **options).net, layer)
    else:
        if not isinstance(obj, Machine):
            raise Tm2nnError(f"viz {kind} draws a machine's run; this source is a {type(obj).__name__.lower()}")
        if isinstance(obj, GridMachine):
            raise Tm2nnError(f"viz {kind} draws line machines; {obj.name!r} has a 2D tape")

        steps = default_steps(obj, text) if steps is None else steps
        if kind == "attention":
            backend = backend or machine_backend()
            if "attention" not in backends.get(backend).pictures:
                shows = ", ".join(b.name for b in backends.all() if "attention" in b.pictures)
                raise Tm2nnError(f"viz attention shows the {shows}'s attention, not {backend!r}'s")


            fig, _ = draw_attention(compile_source(obj, backend, steps=steps, **options), text, step)
        else:
            who = None if interpreter_only else (backend or machine_backend())
            want = interpreter_run(obj, text, steps)
            got = net_run(obj, text, steps, who, options) if who else None
            want, got = aligned(obj, want, got)  # past halting: the absorbing configuration
            fig, first = draw_spacetime(obj, text, want, got, who or "")
    save(fig, out)
    return out, first, who
