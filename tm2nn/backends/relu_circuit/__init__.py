"""relu-circuit: boolean circuits as exact ReLU nets (Wei, Chen & Ma 2022, §3 and App. B).

Circuits compile directly (:mod:`.build`: Lemma B.1 with Prop. B.2's gates, Prop. 3.4's
corrections, Theorem 3.1's ``z ↦ 2z - 1``); line machines are unrolled into a circuit for
T steps over an N-cell window first (:mod:`.unroll`), and run through their own codec
(:mod:`.codec`) and reference check (:mod:`.check`).  The package also owns the fused
engines (:mod:`.layered_engine`), the size bounds (:mod:`.bounds`, :mod:`.estimate`) and
the all-layer margin analyses (:mod:`.margin`, :mod:`.attacks`).  :mod:`.backend` declares
it (``BACKEND``).  See docs/relu_circuit.md.
"""
