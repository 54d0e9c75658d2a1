"""How many threads torch, onnxruntime and numba use: decided here, for each kind of work.

tm2nn's networks run as chains of small ops (a decoder step, a grid step, a layer of a
verified batch, the gd-trace loss): extra intra-op threads only synchronise, and on a
machine another process is using they fight it (docs/benchmarks.md, "Threads": at load
4-5 on 2 cores the rcnn verify took 10x longer on torch's default of one thread per core).
:data:`DEFAULTS` gives the count per kind of work, as measured there.  The user overrides
every kind at once with ``--threads N`` (:func:`set_threads`) or ``TM2NN_THREADS=N``.

Each library gets the count when tm2nn first uses it: :func:`use_torch` where a torch
module is built or a device chosen, :func:`ort_threads` for an onnxruntime session,
:func:`use_numba` before a fused engine's kernels.  Nothing here imports a library that is
not loaded yet.
"""

from __future__ import annotations

import os
import sys

from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_int

#: the environment variable that overrides the count (an integer ≥ 1)
ENV = "TM2NN_THREADS"
#: small per-step graphs: torch modules, onnxruntime sessions, the learners' steps
STEP = "step"
#: the fused engines' kernels over a batch of independent inputs (relu-circuit's fused
#: engine, rcnn's grids): split across threads, one share each
BULK = "bulk"
#: threads per kind of work when the user sets none (measured: docs/benchmarks.md, "Threads")
DEFAULTS = {STEP: 1, BULK: 1}
#: the most threads a user may ask for (torch and onnxruntime take a C int; far above any core count)
MAX_THREADS = 4096

_override: int | None = None


def set_threads(n: int | None) -> None:
    """Use ``n`` threads for every kind of work (None: back to the environment, else
    :data:`DEFAULTS`); the libraries already loaded get it now."""
    global _override
    _override = None if n is None else check_int("threads", n, 1, MAX_THREADS)
    if "torch" in sys.modules:
        use_torch()
    if "numba" in sys.modules:
        use_numba()


def count(kind: str = STEP) -> int:
    """The threads for ``kind`` of work (:data:`STEP` or :data:`BULK`): the user's choice
    (:func:`set_threads`, then ``TM2NN_THREADS``), else :data:`DEFAULTS` (never more than
    the cores this process may run on)."""
    if kind not in DEFAULTS:
        raise ValueError(f"unknown kind of work {kind!r} (expected one of {sorted(DEFAULTS)})")
    if _override is not None:
        return _override
    text = os.environ.get(ENV)
    if text:
        if not text.strip().isdigit() or not 1 <= int(text) <= MAX_THREADS:
            raise Tm2nnError(f"{ENV}: expected an integer in [1, {MAX_THREADS}], got {text!r}")
        return int(text)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(DEFAULTS[kind], cores))


def use_torch(kind: str = STEP) -> int:
    """Set torch's intra-op threads to :func:`count` (where tm2nn starts torch work);
    returns the count."""
    import torch

    n = count(kind)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def use_numba(kind: str = BULK) -> int:
    """Set numba's threads (this thread's, as numba keeps them) to :func:`count`, at most
    the pool numba started with (``NUMBA_NUM_THREADS``); returns what it set."""
    import numba

    n = min(count(kind), numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


def ort_threads(kind: str = STEP) -> int:
    """The intra-op threads of an onnxruntime session (it reads no environment variable)."""
    return count(kind)
