"""The runs a space-time diagram draws: the interpreter's, and the one decoded from a
compiled network, both as ``(state, head, non-blank cells)`` after every step.  The
decoders are the verifier's (nothing is decoded twice)."""

from __future__ import annotations

from tm2nn.errors import Tm2nnError

Config = tuple[str, int, dict]
#: Backends whose decoded output holds every step's whole configuration.
SPACETIME_BACKENDS = ("transformer", "rcnn", "gd-trace")
DEFAULT_MAX_STEPS = 200


def interpreter_run(m, text: str, steps: int) -> list[Config]:
    from tm2nn.interp import configurations, run_machine

    # configurations() updates one dict in place: copy it per step
    return [(q, head, dict(cells)) for _k, q, head, cells in configurations(run_machine(m, text, steps, trace=True))]


def default_steps(m, text: str, cap: int = DEFAULT_MAX_STEPS) -> int:
    """Steps to halting, or ``cap`` when the machine runs longer."""
    from tm2nn.interp import run_machine

    return max(1, run_machine(m, text, cap).steps)


def net_run(m, text: str, steps: int, backend: str) -> list[Config]:
    """Compile ``m`` with ``backend`` for ``steps`` steps and inputs as long as ``text``,
    run it on ``text`` in torch and decode every step."""
    from tm2nn.compiler import compile as compile_source
    from tm2nn.interp import configurations

    if backend not in SPACETIME_BACKENDS:
        raise Tm2nnError(f"the space-time diagram needs every step's configuration, which the "
                         f"{', '.join(SPACETIME_BACKENDS)} backends decode; {backend!r} does not "
                         "(relu-circuit decodes only the final tape)")
    c = compile_source(m, backend, steps=steps, max_input=len(text))
    if backend == "transformer":
        from tm2nn.backends.transformer.decoding import TraceDecoder
        from tm2nn.verify.trace import encode_tokens, torch_runner

        taps = torch_runner(c.net)(encode_tokens(c.input_encoding, [text]))[0]
        return TraceDecoder(c.output_encoding).configurations(taps, text)
    if backend == "rcnn":
        import numpy as np

        from tm2nn.verify.grid import GridModel, runners

        gm = GridModel(c)
        run = dict(runners(c, False, 1))["torch"]
        result = gm.decode(np.asarray(run(gm.grids([text])))[0], text)
    else:
        from tm2nn.backends.gd_trace.machine_mode import run_gd

        result = run_gd(c, text).result
    return [(q, head, dict(cells)) for _k, q, head, cells in configurations(result)]


def divergences(want: list[Config], got: list[Config]) -> tuple[int | None, dict]:
    """The first step where the runs differ (None if they agree) and, per step, what
    differs: ``{step: {"state": bool, "head": bool, "cells": set, "missing": bool}}``."""
    out: dict = {}
    for k in range(max(len(want), len(got))):
        if k >= len(want) or k >= len(got):
            out[k] = {"state": True, "head": True, "cells": set(), "missing": True}
            continue
        (q1, h1, c1), (q2, h2, c2) = want[k], got[k]
        cells = {p for p in set(c1) | set(c2) if c1.get(p) != c2.get(p)}
        if q1 != q2 or h1 != h2 or cells:
            out[k] = {"state": q1 != q2, "head": h1 != h2, "cells": cells, "missing": False}
    return (min(out) if out else None), out
