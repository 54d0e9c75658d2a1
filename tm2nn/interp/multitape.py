"""Reference interpreter of the Welper §4.1 machine form (:mod:`tm2nn.ir.multitape`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from tm2nn.ir.multitape import MConfig, MultiTapeMachine


@dataclass(frozen=True)
class MultiRun:
    """``configs[k]`` = the configuration after ``k`` steps; ``halted`` = a halting state or
    a missing rule was reached within the step bound."""

    machine: MultiTapeMachine
    configs: tuple[MConfig, ...]
    halted: bool

    @property
    def steps(self) -> int:
        return len(self.configs) - 1


def start_config(m: MultiTapeMachine, tapes: Sequence[Iterable[int]]) -> MConfig:
    """Heads at cell 0 of every tape; ``tapes[j]`` = the cells of tape ``j`` holding ``+1``."""
    if len(tapes) != m.tapes:
        raise ValueError(f"{m.name}: {m.tapes} tapes, {len(tapes)} given")
    return MConfig(m.start, (0,) * m.tapes, tuple(frozenset(t) for t in tapes))


def step(m: MultiTapeMachine, c: MConfig) -> MConfig | None:
    """One step, or ``None`` if ``c`` halts (halting state or no rule)."""
    if c.state in m.halting:
        return None
    r = m.delta.get((c.state, c.read()))
    if r is None:
        return None
    tapes = []
    for h, t, w in zip(c.heads, c.tapes, r.write):
        tapes.append(t | {h} if w == 1 else t - {h})
    heads = tuple(h + mv for h, mv in zip(c.heads, r.move))
    return MConfig(r.next, heads, tuple(tapes))


def run_multitape(m: MultiTapeMachine, tapes: Sequence[Iterable[int]], max_steps: int) -> MultiRun:
    """Run from :func:`start_config` for at most ``max_steps`` steps, keeping every
    configuration."""
    c = start_config(m, tapes)
    out = [c]
    for _ in range(max_steps):
        n = step(m, c)
        if n is None:
            return MultiRun(m, tuple(out), True)
        out.append(n)
        c = n
    return MultiRun(m, tuple(out), step(m, c) is None)
