"""Fused engines: exact evaluators of compiled networks that are faster than the torch
and onnxruntime runs of the same network (ARCHITECTURE.md, "Engines").

* :mod:`.index_engine` (``--engine index``): the transformer's decoder for long runs.
  Every decoder step runs in one numba kernel (:mod:`.decode_kernel`) over a flat program
  of the network's own ops (:mod:`.decode_program`), and hard-max attention is an exact
  branch-and-bound lookup in a crit-bit tree of the keys (:mod:`.hardmax_index`), so a
  step costs O(log T)-deep walks instead of O(T) scans.
* :mod:`.layered_engine` (``--engine fused`` and ``fused-float``): relu-circuit nets
  (circuits and unrolled machines), the batch as the vector dimension, one numba kernel
  (:mod:`.layered_kernel`) over a program of the net's rows (:mod:`.layered_program`); the
  ``fused`` program computes in exact integers and runs only the rows that compute a value
  not computed before.

The rcnn backend's fused engine lives with its construction
(:mod:`tm2nn.backends.rcnn.grid_engine`, kernels in :mod:`tm2nn.backends.rcnn.grid_kernel`):
it reads the filter's chain of layers with :func:`.layered_program.layers` and raises
:class:`EngineRefused`.  What every engine shares stays here: numba's threading layer,
:data:`PARALLEL` and :class:`EngineRefused`.

Kernels are numba functions (``cache=True``): numba installs from wheels, and the first
call compiles them (a few seconds, then cached on disk).
"""

import threading

import numba

from tm2nn.errors import Tm2nnError

# numba's own thread pool for the parallel kernels, not a second OpenMP runtime beside
# torch's: with numba's omp layer its idle threads spin, and torch's OpenMP ops slowed down
# after a fused engine had run (30 rcnn verifications on torch and the fused engine: 12.7 s
# with omp, 1.2 s with workqueue, 0.8 s on torch alone).  A user's NUMBA_THREADING_LAYER wins.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "workqueue"
#: workqueue runs one parallel kernel at a time: callers from several threads take turns
PARALLEL = threading.Lock()


class EngineRefused(Tm2nnError):
    """A network a fused engine cannot run exactly (the reason is in the message)."""
