"""The IR: Machine (1D), GridMachine (2D), Circuit, Learner, NoisyLearner.  Validation lives
here, once."""

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
from tm2nn.ir.noisy_learner import NoisyLearner

__all__ = [
    "Circuit", "Gate", "BaseLearner", "Learner", "NoisyLearner", "OPS", "UNARY", "NULLARY",
    "Machine", "GridMachine", "Rule", "OUTCOMES", "LINE_MOVES", "GRID_MOVES", "MOVE_DELTA",
    "check_input",
]
