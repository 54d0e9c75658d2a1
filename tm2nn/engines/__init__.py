"""Fused engines: exact evaluators of compiled networks that are faster than the torch
and onnxruntime runs of the same network (ARCHITECTURE.md, "Engines").

* :mod:`.layered_engine` (``--engine fused`` and ``fused-float``): relu-circuit nets
  (circuits and unrolled machines), the batch as the vector dimension, one numba kernel
  (:mod:`.layered_kernel`) over a program of the net's rows (:mod:`.layered_program`); the
  ``fused`` program computes in exact integers and runs only the rows that compute a value
  not computed before.
* :mod:`.grid_engine` (``--engine fused`` on rcnn): the RCNN machine-mode filter loop.
  The filter's layers run on a tile of cells in one numba kernel (:mod:`.grid_kernel`),
  and a trip evaluates only the cells whose patch changed (the filter is a function of
  its patch, bit for bit).

A backend's own fused engine lives in its package: the transformer's decoder for long runs
(``--engine index``) is :mod:`tm2nn.backends.transformer.engines`.  This package keeps what
every fused engine shares: numba's threading layer, :data:`PARALLEL` and
:class:`EngineRefused`.

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
