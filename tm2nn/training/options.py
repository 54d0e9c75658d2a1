"""The ``train`` verb's options (issue 38, Deliver 1), spelled once: the API validates them
and the verb builds its flags from them (:mod:`tm2nn.train_command`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tm2nn.errors import OptionError
from tm2nn.options import option, validate

#: the seed streams: training draws, test draws, the initial weights, the batch order
TRAIN_STREAM, TEST_STREAM, INIT_STREAM, ORDER_STREAM = 0, 1, 2, 3


@dataclass(frozen=True)
class TrainOptions:
    init: str = option("construction", "the starting weights: construction | perturbed:EPS (Gaussian noise of "
                       "standard deviation EPS on every trained entry) | scratch (random, He-scaled)")
    seed: int = option(0, "the seed of the draws, the initial weights and the batch order", low=0, high=2**32 - 1)
    samples: int = option(256, "training inputs drawn from the input space", metavar="N", low=1)
    test: int = option(1024, "test inputs (all of them when the input space has at most this many)",
                       metavar="N", low=1)
    epochs: int = option(20, "passes over the training inputs", low=0)
    batch: int = option(64, "inputs per optimizer step", low=1)
    lr: float = option(1e-3, "the learning rate", above=0.0)
    optimizer: Literal["adam", "sgd"] = option("adam", "the optimizer: adam or sgd")
    mask: Literal["all", "wiring"] = option("all", "the trained entries: all (every weight of the construction's "
                                            "shape) or wiring (only the construction's nonzero weights train)")
    updates: int | None = option(None, "stop after this many optimizer steps, mid-epoch if need be (a fixed step "
                                 "budget whatever --samples is; the best weights are kept)", metavar="N", low=1)
    budget: float | None = option(None, "stop after this many seconds of training (the best weights are kept)",
                                  metavar="SECONDS", above=0.0)
    margin: bool = option(True, "the certified margin of the current weights every epoch (n/a where the "
                          "certificate refuses them)")

    def __post_init__(self):
        validate(self)
        parse_init(self.init)


def parse_init(text: str) -> tuple[str, float]:
    """``(kind, eps)`` of an ``--init`` value; a bad one is an :class:`OptionError`."""
    kind, _, rest = str(text).partition(":")
    if kind in ("construction", "scratch") and not rest:
        return kind, 0.0
    if kind == "perturbed":
        try:
            eps = float(rest)
        except ValueError:
            raise OptionError(f"{{init}} {text!r}: perturbed:EPS needs a number EPS > 0, e.g. perturbed:0.05",
                              "init") from None
        if not (eps > 0 and eps < float("inf")):
            raise OptionError(f"{{init}} {text!r}: the noise EPS must be a finite number > 0", "init")
        return kind, eps
    raise OptionError(f"{{init}} {text!r}: choose construction, perturbed:EPS or scratch", "init")


@dataclass(frozen=True)
class NoOptions:
    """The train options of a backend that takes none of its own."""
