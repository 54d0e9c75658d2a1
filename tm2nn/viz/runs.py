"""The runs a space-time diagram draws: the interpreter's, and the one decoded from a
compiled network, both as ``(state, head, non-blank cells)`` after every step.  The
decoders are the verifier's (nothing is decoded twice)."""

from __future__ import annotations

from tm2nn import backends
from tm2nn.compiler import compile as compile_source
from tm2nn.errors import Tm2nnError
from tm2nn.interp import configurations, run_machine

Config = tuple[str, int, dict]
DEFAULT_MAX_STEPS = 200


def machine_backend() -> str:
    """The backend a machine's pictures use by default: the first (in the registry's order)
    that shows its attention step by step (``pictures["attention"]``), whose layers are the
    paper's lemmas."""
    for b in backends.all():
        if "attention" in b.pictures and b.has("configurations"):
            return b.name
    raise Tm2nnError("no backend draws a machine's run step by step")


def interpreter_run(m, text: str, steps: int) -> list[Config]:
    # configurations() updates one dict in place: copy it per step
    return [(q, head, dict(cells)) for _k, q, head, cells in configurations(run_machine(m, text, steps, trace=True))]


def default_steps(m, text: str, cap: int = DEFAULT_MAX_STEPS) -> int:
    """Steps to halting, or ``cap`` when the machine runs longer."""

    return max(1, run_machine(m, text, cap).steps)


def net_run(m, text: str, steps: int, backend: str, options: dict | None = None) -> list[Config]:
    """Compile ``m`` with ``backend`` for ``steps`` steps and inputs as long as ``text``,
    run it on ``text`` in torch and decode every step (the backend's
    its ``configurations`` analysis)."""

    spec = backends.get(backend)
    if spec.stepping is None or not spec.has("configurations"):
        raise Tm2nnError(f"the space-time diagram needs every step's configuration; the {backend} backend "
                         "decodes only the final tape")
    values = spec.stepping.options_for({**(options or {}), spec.stepping.option: steps}, [text])
    return spec.analyses["configurations"](compile_source(m, backend, **values), text)


def absorbed(m, run: list[Config], length: int) -> list[Config]:
    """``run`` continued to ``length`` configurations when it ends halted: a halted
    machine stays in its configuration, which is what a network compiled for more steps
    keeps computing (the absorbing configuration; ``verify`` compares the same way)."""
    if not run or len(run) >= length:
        return run
    q, head, cells = run[-1]
    if q not in m.halting and (q, cells.get(head, m.blank)) in m.delta:
        return run  # not halted: a run cut short stays short (a divergence)
    return run + [(q, head, dict(cells)) for _ in range(length - len(run))]


def aligned(m, want: list[Config], got: list[Config] | None) -> tuple[list[Config], list[Config] | None]:
    """The interpreter's and a network's runs at one length: past the halting step both
    show the absorbing configuration (:func:`absorbed`)."""
    if got is None:
        return want, got
    n = max(len(want), len(got))
    return absorbed(m, want, n), absorbed(m, got, n)


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
