"""A line machine as a grid machine whose tape is the top row (Goel et al., B.1.2).

B.1.2 runs its machines on a 2D tape with moves up, down, left, right and none, and
notes that "the TM with the 2D tape can implement any TM on the 1D tape".  The
embedding is the plain one: the line tape is row 0 of the plane (the paper's row 1,
counting from 1), cell ``c`` is ``(0, c)``, and the rules are the same rules — L, R, S
mean the same on a grid and the machine never moves up or down.  One lowered step is
one source step, so the step map is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult
from tm2nn.ir.machine import GridMachine, Machine, check_input
from tm2nn.passes.lowering import Lowering, Mapped


@dataclass(frozen=True)
class GridLowering(Lowering):
    """``machine`` is ``source`` on row 0 of a grid (module docstring)."""

    source: Machine
    machine: GridMachine

    def to_json(self) -> dict:
        return {"pass": "line_to_grid"}

    def lower_input(self, text: str) -> str:
        check_input(self.source, text)
        return text

    def source_input(self, text: str) -> str:
        return text

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:
        return source_steps

    def lowered_columns(self, lo: int, hi: int) -> tuple[int, int]:
        return lo, hi

    def source_config(self, state: str, head, cells: dict):
        if head[0] != 0 or any(r != 0 for r, _c in cells):
            raise ValueError("a configuration of a lowered line machine has everything on row 0")
        return state, head[1], {c: a for (_r, c), a in cells.items()}

    def _map(self, lowered: RunResult) -> Mapped:
        """Goel et al., B.1.2 (2D tape): row 0 of the lowered run is the source's tape."""
        tr = lowered.trace
        if any(tr.pos_row) or any(tr.head_row):
            raise ValueError("a run of a lowered line machine stays on row 0")
        n = len(tr)
        return Mapped(list(tr.pos), list(tr.read), list(tr.write), list(tr.state),
                      list(tr.head), list(range(n + 1)), lowered.halted)


def line_to_grid(m: Machine) -> GridLowering:
    """Goel et al., B.1.2 ("2D tape instead of 1D tape"): ``m`` on row 0 of a grid."""
    if isinstance(m, GridMachine):
        raise Tm2nnError(f"machine {m.name!r} already runs on a grid tape")
    g = GridMachine(
        name=m.name, alphabet=m.alphabet, blank=m.blank, states=m.states, start=m.start,
        halting=m.halting, rules=m.rules, missing_rule_counts_step=m.missing_rule_counts_step,
        loc=m.loc,
    )
    return GridLowering(m, g)
