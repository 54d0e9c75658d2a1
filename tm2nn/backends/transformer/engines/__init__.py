"""The transformer's fused engine (``--engine index``, ARCHITECTURE.md "Engines"): its
decoder for long runs, the same function as the compiled network (Wei, Chen & Ma §4.1 /
App. C), exact in float64.

* :mod:`.index_engine`: the driver.  Every decoder step runs in one numba kernel
  (:mod:`.decode_kernel`) over a flat program of the network's own ops
  (:mod:`.decode_program`), and hard-max attention is an exact branch-and-bound lookup in
  a crit-bit tree of the keys (:mod:`.hardmax_index`), so a step costs O(log T)-deep walks
  instead of O(T) scans.
* :mod:`.program_engine` (``--engine program``, issue 39): the index engine with the decoder
  step replaced by the rows that compute a new value over exact integer registers
  (:mod:`.step_program`, shared analysis :mod:`tm2nn.engines.rows`) and each attention as
  one prefix lookup in the key index (:mod:`.step_kernel`, :func:`.hardmax_index.index_prefix`).

What every fused engine shares (numba's threading layer, :class:`~tm2nn.engines.EngineRefused`)
is in :mod:`tm2nn.engines`.
"""
