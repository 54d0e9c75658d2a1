"""Pausing Python's cyclic garbage collector while a large object graph is built (a
circuit of 10^6 gates, its layering, its network, its ONNX graph): reference counting
frees garbage meanwhile, and the collector would only rescan the growing heap."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

#: New objects past which :func:`gc_paused` moves them to the oldest generation.
GC_PROMOTE = 100_000


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building a large circuit.

    A parse allocates ~10 objects per gate and frees almost none, which makes the
    collector rescan the growing heap again and again (about a third of the time on
    the EPFL multiplier).  Reference counting still frees garbage meanwhile.

    On the way out, when more than :data:`GC_PROMOTE` objects were left behind, they go
    straight to the oldest generation (``freeze`` then ``unfreeze``): left in the youngest,
    the first collection after re-enabling would examine every one at once, and the
    middle one again (seconds for a 10^6-gate circuit).  The next full collection
    examines them as usual, so cyclic garbage is still found.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # (objects someone else froze stay frozen)
            if gc.get_count()[0] > GC_PROMOTE and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
