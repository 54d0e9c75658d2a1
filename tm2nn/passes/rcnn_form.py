"""Any machine -> the machine form of Goel et al., B.1.2, with the cell symbols of B.1.1.

``to_rcnn_form(m)`` chains the passes:

1. :func:`~tm2nn.passes.binarise.binarise` — symbols ``_ - +`` (B.1.1 digit 1), so the
   machine never writes the blank;
2. :func:`~tm2nn.passes.line_to_grid.line_to_grid` — the line tape becomes row 0 of a
   grid (B.1.2, "2D tape"); skipped for a grid machine;
3. :func:`~tm2nn.passes.grid_normal_form.normal_form` — a no-op first step, and a halt
   with the answer in the top-left cell and everything else blank (B.1.2).

The result is a :class:`~tm2nn.passes.lowering.Chain`: ``lower_input`` encodes a source
input, ``source_result`` maps a lowered run back to the source machine's run, and
``steps[-1].answer(run)`` reads the answer (−1, 0, +1).
"""

from __future__ import annotations

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GridMachine, Machine
from tm2nn.passes.binarise import binarise
from tm2nn.passes.grid_normal_form import normal_form
from tm2nn.passes.line_to_grid import line_to_grid
from tm2nn.passes.lowering import Chain
from tm2nn.source import error_at


def to_rcnn_form(m: Machine, code: dict[str, str] | None = None) -> Chain:
    """Goel et al., B.1.1 and B.1.2: lower ``m`` to the RCNN's machine form (module
    docstring).  ``code`` is passed to :func:`binarise`.  A grid machine that moves up or
    down is refused (the normal form keeps the machine on one row)."""
    if isinstance(m, GridMachine):
        r = next((r for r in m.rules if r.move in ("U", "D")), None)
        if r is not None:
            raise error_at(r.loc or m.loc, f"machine {m.name!r}: rule ({r.state}, {r.read}) moves "
                                           f"{r.move}; the RCNN machine form (B.1.2 normal form) "
                                           "needs a machine that keeps to one row")
    steps = [binarise(m, code)]
    if not isinstance(m, GridMachine):
        steps.append(line_to_grid(steps[-1].machine))
    steps.append(normal_form(steps[-1].machine))
    return Chain(tuple(steps))


def rcnn_form_from_json(d: dict, m: Machine) -> Chain:
    """Rebuild ``to_rcnn_form(m, code)`` from its ``to_json()`` (e.g. model metadata), and
    check that it is the same chain of passes."""
    passes = d.get("passes") if isinstance(d, dict) else None
    if not passes or not isinstance(passes[0], dict) or passes[0].get("pass") != "binarise":
        raise Tm2nnError("RCNN form metadata: expected a list of passes starting with binarise")
    chain = to_rcnn_form(m, passes[0].get("code"))
    if chain.to_json() != d:
        raise Tm2nnError(f"RCNN form metadata does not match machine {m.name!r}")
    return chain
