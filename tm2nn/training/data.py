"""The inputs a training run sees (issue 38): drawn from the model's input space (the one
``verify`` checks, :meth:`tm2nn.verify.check.Checker.space`), training inputs on one seed
stream and test inputs on another, the test inputs disjoint from the training ones.  When
the space has at most ``test`` inputs the test set is every input not trained on, and the
exhaustive error over the whole space is reported beside it."""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.limits import check_memory
from tm2nn.training.options import TEST_STREAM, TRAIN_STREAM


@dataclass
class Draws:
    train: list[str]
    test: list[str]
    #: "exhaustive" (the test set is the rest of a small space) or "random"
    mode: str
    #: every input of a small space (None for a large one)
    space: list[str] | None
    size: int


def draw(space, samples: int, test: int, seed: int, *, bytes_per_input: int = 256) -> Draws:
    """``samples`` training inputs (with repeats: draws from the input distribution) and the
    test inputs (see the module doc).  The memory is estimated before drawing."""
    check_memory((samples + test) * bytes_per_input, f"{samples:,} training and {test:,} test inputs",
                 ("samples", "test"))
    train = space.sample([seed, TRAIN_STREAM], samples)  # space.random's stream, drawn at once
    seen = set(train)
    if space.small and space.size <= test:
        everything = list(space.all())
        held = [t for t in everything if t not in seen]
        if not held:  # the training draws cover the space: the test is every input, all trained on
            return Draws(train, everything, "exhaustive, all trained on", everything, space.size)
        return Draws(train, held, "exhaustive", everything, space.size)
    out, tries = [], 0
    for t in space.random([seed, TEST_STREAM]):
        tries += 1
        if t not in seen:
            out.append(t)
            seen.add(t)  # distinct test inputs
        if len(out) == test or tries > 50 * test:
            break
    return Draws(train, out, "random", None, space.count)


def overlap(draws: Draws) -> int:
    """How many test inputs were trained on (0 by construction, except when the training
    draws cover a small space; the tests check it)."""
    return len(set(draws.train) & set(draws.test))
