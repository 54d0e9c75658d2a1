"""relu-circuit: boolean circuits as exact ReLU nets (Wei, Chen & Ma 2022, §3 and App. B).

Circuits compile directly (:mod:`.build`: Lemma B.1 with Prop. B.2's gates, Prop. 3.4's
corrections, Theorem 3.1's ``z ↦ 2z - 1``); line machines are unrolled into a circuit for
T steps over an N-cell window first (:mod:`.unroll`), and run through their own codec
(:mod:`.codec`) and checker (:mod:`.check`).  The package also owns the fused engines
(:mod:`.layered_engine`), the size bounds (:mod:`.bounds`, :mod:`.estimate`) and the
all-layer margin analyses (:mod:`.margin`, :mod:`.attacks`).  See docs/relu_circuit.md.
"""

from __future__ import annotations

from tm2nn.backends.base import Compiled
from tm2nn.backends.relu_circuit.backend import BACKEND
from tm2nn.backends.relu_circuit.build import compile_circuit
from tm2nn.ir import Circuit

__all__ = ["compile"]


def compile(c: Circuit, *, corrections: bool = True, pm_one_output: bool = False) -> Compiled:
    """Compile circuit ``c``; input ``x`` = inputs in declared order (0/1), output ``y`` =
    outputs in declared order, 0/1 (threshold 1/2) or ±1 with ``pm_one_output``
    (threshold 0)."""
    opts = BACKEND.options(corrections=corrections, pm_one_output=pm_one_output)  # validated in one place
    return compile_circuit(c, opts)
