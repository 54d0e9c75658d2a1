"""What every backend returns: a :class:`Compiled` network plus how to talk to it.

A backend turns IR into a NetIR and nothing else (ARCHITECTURE.md): it never
parses text, runs the interpreter or writes files.  ``input_encoding`` and
``output_encoding`` are JSON-able dicts (a ``"kind"`` plus what that kind needs);
:mod:`tm2nn.codec` turns user inputs into tensors and output tensors back into
reports from these dicts alone, so a saved ONNX model can be driven from its
metadata without the source file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tm2nn.ir import Circuit, Machine
from tm2nn.nets import Net


@dataclass
class Compiled:
    backend: str
    net: Net
    source: Machine | Circuit
    input_encoding: dict
    output_encoding: dict
    # Size report next to the paper's bounds: rows of (quantity, ours, paper's bound).
    bounds: list[tuple[str, str, str]] = field(default_factory=list)
    options: dict = field(default_factory=dict)
