"""The public API: load sources, run machines and circuits.  Thin orchestration only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.interp import DEFAULT_MAX_STEPS, eval_circuit, run_machine
from tm2nn.ir import Circuit, Machine
from tm2nn.syntax import format_module, guess_format, load, load_all

__all__ = ["load", "load_all", "run", "run_circuit", "default_input", "parse_bits"]


def default_input(path: str | Path, fmt: str | None = None, name: str | None = None) -> str | None:
    """The input a source file documents for itself (morphett ``$INITIAL_TAPE``,
    turingmachine.io ``input:``), or None."""
    mod = format_module(fmt or guess_format(path))
    fn = getattr(mod, "default_input", None)
    if fn is None:
        return None
    from tm2nn.source import SourceText

    return fn(SourceText.from_file(path).text)


def parse_bits(text: str, n: int, what: str = "--input") -> np.ndarray:
    """A '0'/'1' string of length ``n`` (spaces and '_' ignored) -> bool array."""
    bits = []
    for i, ch in enumerate(text):
        if ch in " _":
            continue
        if ch not in "01":
            raise Tm2nnError(f"{what}: expected 0 or 1, got {ch!r}", file=what, line=1, col=i + 1, snippet=text)
        bits.append(ch == "1")
    if len(bits) != n:
        raise Tm2nnError(f"{what}: the circuit has {n} inputs, got {len(bits)} bits", file=what, line=1, col=1, snippet=text)
    return np.array(bits, dtype=bool)


def run_circuit(c: Circuit, bits: str) -> dict:
    """Evaluate one input pattern; the report is ``{"outputs": "0110..."}``."""
    x = parse_bits(bits, len(c.inputs))
    y = eval_circuit(c, x[None, :])[0]
    return {"outputs": "".join("1" if b else "0" for b in y)}


def run(source, input: str | None = None, max_steps: int = DEFAULT_MAX_STEPS, **kw):
    """Run a machine (a path or a Machine) with the reference interpreter."""
    m = source if isinstance(source, Machine) else load(source, kw.pop("format", None), kw.pop("name", None))
    if isinstance(m, Circuit):
        return run_circuit(m, input or "")
    return run_machine(m, input or "", max_steps, **kw)
