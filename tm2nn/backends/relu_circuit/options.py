"""The relu-circuit backend's options, spelled once (the CLI builds its flags from them)."""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.backends.relu_circuit.unroll import DEFAULT_MAX_GATES
from tm2nn.options import option, validate


@dataclass(frozen=True)
class Options:
    steps: int | None = option(None, "machines: the step bound T of the unrolling (required for machines)",
                               metavar="T", low=1)
    tape: int | None = option(None, "machines: the tape window, N cells (default 2T+1)", metavar="N", low=1)
    origin: int | None = option(None, "machines: the window index of the start cell (default N//2)", low=0)
    max_gates: int = option(DEFAULT_MAX_GATES, "refuse an unrolled circuit estimated above this many gates", low=1)
    corrections: bool = option(True, "the round() correction after every layer but the last (Prop. 3.4; "
                               "Lemma 3.3's large all-layer margin)")
    pm_one_output: bool = option(False, "the final map z -> 2z-1 of Theorem 3.1's proof: outputs in {-1, +1}",
                                 flag="--pm-one")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class TrainOptions:
    """The relu-circuit backend's own ``train`` options."""

    pad_width: int | None = option(None, "relu-circuit: widen every hidden layer to K*r units (r: the widest "
                                   "hidden layer), the extra units zero at the construction (Theorem 3.1: log w)",
                                   metavar="K", low=1)

    def __post_init__(self):
        validate(self)
