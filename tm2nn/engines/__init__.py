"""Fused engines: exact evaluators of compiled networks that are faster than the torch
and onnxruntime runs of the same network (ARCHITECTURE.md, "Engines").

Every fused engine lives with its construction:

* the transformer's decoder for long runs (``--engine index`` and ``--engine program``):
  :mod:`tm2nn.backends.transformer.engines`;
* relu-circuit's ``--engine fused`` and ``fused-float``:
  :mod:`tm2nn.backends.relu_circuit.layered_engine` (kernels in
  :mod:`~tm2nn.backends.relu_circuit.layered_kernel`);
* rcnn's ``--engine fused``: :mod:`tm2nn.backends.rcnn.grid_engine` (kernels in
  :mod:`tm2nn.backends.rcnn.grid_kernel`).

What every fused engine shares is here: numba's threading layer, the :data:`PARALLEL`
lock and :class:`EngineRefused`; :mod:`.chain` reads a network as one chain of
affine+ReLU layers (relu-circuit's nets and the RCNN filter); :mod:`.rows` describes units
by exact value sets, so that a program runs only the rows that compute a new value
(relu-circuit's integer program and the transformer's program engine).  Kernels are numba
functions (``cache=True``): numba installs from wheels, and the first call compiles them
(a few seconds, then cached on disk).
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
