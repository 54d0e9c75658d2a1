"""The IR: Machine (1D), GridMachine (2D), Circuit, Learner.  Validation lives here, once."""

from tm2nn.ir.circuit import NULLARY, OPS, UNARY, Circuit, Gate
from tm2nn.ir.learner import BaseLearner, Learner
from tm2nn.ir.machine import (
    GRID_MOVES,
    LINE_MOVES,
    MOVE_DELTA,
    OUTCOMES,
    GridMachine,
    Machine,
    Rule,
    check_input,
)

__all__ = [
    "Circuit", "Gate", "BaseLearner", "Learner", "OPS", "UNARY", "NULLARY",
    "Machine", "GridMachine", "Rule", "OUTCOMES", "LINE_MOVES", "GRID_MOVES", "MOVE_DELTA",
    "check_input",
]
