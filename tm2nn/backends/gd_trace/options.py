"""The gd-trace backend's options (Welper §4.4 and §5), spelled once: the compile options
(:class:`Options`) and the learn options (:class:`LearnOptions`).  A leaf of the package:
:mod:`.machine_mode` and :mod:`.tape_simplex` read the defaults, :mod:`.backend` declares
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tm2nn.limits import SEED_MAX
from tm2nn.options import option, validate

DEFAULT_STEPS = 100
#: refuse a §4.4 simplex plus tape variables above this dimension
DEFAULT_MAX_DIM = 200_000


@dataclass(frozen=True)
class Options:
    steps: int = option(DEFAULT_STEPS, "the step bound T: the tape window holds T + 1 source steps",
                        metavar="T", low=0)
    max_input: int | None = option(None, "the longest input tape the window must hold (default T)", metavar="N", low=0)
    b: float | None = option(None, "b of the weights (17) (default: the smallest with b^3 > 8b^2 d + 3d, (18))", above=0.0)
    gamma: float = option(1.0, "gamma of the weights (17); T and H take plain steps at rate 1/gamma (22)", above=0.0)
    c: float = option(0.0, "the constant c of the loss (21)")
    vertices: Literal["all", "reachable"] = option(
        "all", "the §4.4 simplex's vertices: all of Qbar x {-1,1}^d (the paper), or only those of the tripled "
        "states a run can reach (the same iterates, fewer dimensions)")
    max_dim: int = option(DEFAULT_MAX_DIM, "refuse a simplex plus tape variables above this dimension", low=1)
    extended: dict | None = option(None, "Welper §5: build the extended network for this data layout "
                                   "({samples, features, theta, steps}, a machine file's '# gd-trace:' header; "
                                   "set by 'tm2nn learn')", cli=False)

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class LearnOptions:
    train: str = option(help="the training set: a CSV of n samples, M features then the label, numbers of the "
                        "formats the machine's '# gd-trace:' header declares (default ±1)", metavar="CSV",
                        data="csv-reals")
    test: int = option(20, "fresh random datasets on which F = f_theta is checked", low=0)
    seed: int = option(0, "seed of the fresh datasets", low=0, high=SEED_MAX)
    primary: str | None = option(None, "the primary network f_theta that reads the machine's weights (default: the "
                                 "header's primary=): linear, affine, or relu:H (one hidden ReLU layer of H units, "
                                 "weights w_k, c_k per unit, then a, then b; Welper §2)", metavar="NET")

    def __post_init__(self):
        validate(self)
