"""``tm2nn viz KIND SOURCE -o OUT``: load the source, pick what each kind draws, write the
picture.  Returns ``(path, first divergent step or None, the backend drawn)``."""

from __future__ import annotations

from pathlib import Path

from tm2nn.errors import Tm2nnError

KINDS = ("spacetime", "weights", "attention", "layers")


def _input(source, fmt, name, m) -> str:
    """What the file documents: an embedded tape, else its ``# input:`` line, else empty."""
    from tm2nn.api import default_input
    from tm2nn.ir import Machine

    text = default_input(source, fmt, name)
    if text is None and isinstance(m, Machine):
        from tm2nn.demo import example_header

        text = example_header(Path(source)).get("input", "")
    return text or ""


def draw(kind: str, source, output, *, fmt=None, name=None, text=None, backend=None, step=None, layer=None,
         interpreter_only: bool = False, options: dict | None = None):
    from tm2nn.ir import Circuit, GridMachine, Machine
    from tm2nn.syntax import load

    from .render import check_out, save

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
        from .layers import draw_layers

        fig, _ = draw_layers(obj)
    elif kind == "weights":
        from tm2nn import backends
        from tm2nn.compiler import compile as compile_source
        from tm2nn.compiler import default_backend

        from .runs import default_steps
        from .weights import draw_weights

        # a machine's weights: the transformer's by default (its layers are the paper's lemmas)
        spec = backends.get(backend or ("transformer" if isinstance(obj, Machine) else default_backend(obj).name))
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
        from .runs import default_steps

        steps = default_steps(obj, text) if steps is None else steps
        if kind == "attention":
            if (backend or "transformer") != "transformer":
                raise Tm2nnError(f"viz attention shows the transformer's attention, not {backend!r}'s")
            from tm2nn.compiler import compile as compile_source

            from .attention import draw_attention

            fig, _ = draw_attention(compile_source(obj, "transformer", steps=steps, **options), text, step)
        else:
            from .runs import aligned, interpreter_run, net_run
            from .spacetime import draw_spacetime

            who = None if interpreter_only else (backend or "transformer")
            want = interpreter_run(obj, text, steps)
            got = net_run(obj, text, steps, who, options) if who else None
            want, got = aligned(obj, want, got)  # past halting: the absorbing configuration
            fig, first = draw_spacetime(obj, text, want, got, who or "")
    save(fig, out)
    return out, first, who
