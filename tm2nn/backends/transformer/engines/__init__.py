"""The transformer's fused engine (``--engine index``, ARCHITECTURE.md "Engines"): its
decoder for long runs, the same function as the compiled network (Wei, Chen & Ma §4.1 /
App. C), exact in float64.

* :mod:`.index_engine`: the driver.  Every decoder step runs in one numba kernel
  (:mod:`.decode_kernel`) over a flat program of the network's own ops
  (:mod:`.decode_program`), and hard-max attention is an exact branch-and-bound lookup in
  a crit-bit tree of the keys (:mod:`.hardmax_index`), so a step costs O(log T)-deep walks
  instead of O(T) scans.

What every fused engine shares (numba's threading layer, :class:`~tm2nn.engines.EngineRefused`)
is in :mod:`tm2nn.engines`.
"""
