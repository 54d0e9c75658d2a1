"""Stay-move removal: rewrite every ``S`` move as a step right and a step back left.

The transformer construction of Wei, Chen & Ma, App. C: the head moves ±1 each step
(q_i ∈ {left, right}), so the machine it simulates must never stay put.  Each rule
``(q, a) -> (b, S, q')`` becomes ``(q, a) -> (b, R, q'~S)``, and the auxiliary state
``q'~S`` (one per target ``q'``, shared) has ``(q'~S, c) -> (c, L, q')`` for every
symbol ``c``.  After the pair the state, head and tape are those after the source
step; one source step costs at most two lowered steps.

Aux states are never halting and have a rule for every symbol, so halting (also on a
missing rule, either convention) happens only at source states, and the source step
count after any lowered step is the number of lowered steps so far that ended in a
non-aux state (:func:`source_step_map`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine, Rule


@dataclass(frozen=True)
class StayLowering:
    """``machine`` is ``source`` without S moves; ``aux`` the states the pass added,
    in creation order, and ``targets[i]`` the source state ``aux[i]`` steps left into."""

    source: Machine
    machine: Machine
    aux: tuple[str, ...]
    targets: tuple[str, ...] = ()

    def lowered_steps(self, source_steps: int) -> int:
        """Lowered steps that suffice to simulate ``source_steps`` source steps."""
        return 2 * source_steps if self.aux else source_steps

    def is_aux_index(self) -> np.ndarray:
        """Bool array over ``machine.states``: True for the states the pass added."""
        aux = set(self.aux)
        return np.array([q in aux for q in self.machine.states], dtype=bool)

    def to_json(self) -> dict:
        return {"aux": [[a, t] for a, t in zip(self.aux, self.targets)]}

    @classmethod
    def from_json(cls, d: dict, source: Machine) -> "StayLowering":
        """Rebuild the lowering of ``source`` with the aux names recorded in ``d``."""
        names = {t: a for a, t in d.get("aux", [])}
        wanted = _stay_targets(source)
        if set(names) != set(wanted) or len(names) != len(d.get("aux", [])):
            raise Tm2nnError(
                f"stay lowering metadata does not match machine {source.name!r}: "
                f"aux targets {sorted(names)} but the machine stays into {sorted(wanted)}"
            )
        return _lower(source, {t: names[t] for t in wanted})


def remove_stays(m: Machine) -> StayLowering:
    """Lower ``m`` to a machine without S moves (see module docstring).

    A machine with no S rule is returned as it is (``machine is source``, no aux).
    """
    taken = set(m.states)
    names: dict[str, str] = {}
    for t in _stay_targets(m):
        name = f"{t}~S"
        while name in taken:
            name = name[:-1] + "~S"
        taken.add(name)
        names[t] = name
    return _lower(m, names)


def _stay_targets(m: Machine) -> list[str]:
    """Targets of S rules, distinct, in rule order."""
    return list(dict.fromkeys(r.next for r in m.rules if r.move == "S"))


def _lower(m: Machine, names: dict[str, str]) -> StayLowering:
    if not names:
        return StayLowering(m, m, (), ())
    rules = [Rule(r.state, r.read, r.write, "R", names[r.next], r.loc) if r.move == "S" else r
             for r in m.rules]
    rules += [Rule(a, c, c, "L", t) for t, a in names.items() for c in m.alphabet]
    lowered = m.replace(states=m.states + tuple(names.values()), rules=tuple(rules))
    return StayLowering(m, lowered, tuple(names.values()), tuple(names))


def source_step_map(lowering: StayLowering, lowered_states) -> np.ndarray:
    """Source steps completed after each lowered step.

    ``lowered_states[k-1]`` is the state (name or index into ``lowering.machine.states``,
    e.g. a run's ``trace.state``) after lowered step k; entry k-1 of the result is the
    number of lowered steps <= k that ended in a non-aux state.
    """
    si = lowering.machine.state_index
    idx = np.fromiter((si[s] if isinstance(s, str) else int(s) for s in lowered_states),
                      dtype=np.intp)
    return np.cumsum(~lowering.is_aux_index()[idx])


def source_configurations(lowering: StayLowering, lowered_configs):
    """From ``configurations(lowered_run)``, yield ``(source_step, state, head, cells)``
    for the configurations that are source configurations (those not in an aux state)."""
    aux = set(lowering.aux)
    k = 0
    for _, state, head, cells in lowered_configs:
        if state not in aux:
            yield k, state, head, cells
            k += 1
