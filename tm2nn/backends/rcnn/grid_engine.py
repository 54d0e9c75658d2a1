"""The fused grid engine (``--engine fused`` on the rcnn backend): the machine-mode RCNN
of a compiled model, run exactly and fast.

It evaluates the network the model holds (``compiled.net``): Goel, Kakade, Kalai &
Zhang's filter ``f_Conv2D = V5 σ(V4 V3 σ(V2 V1 vec(z)))`` (Def. 5, B.2) as a
:class:`~tm2nn.nets.PatchMap` over the grid with padding ``p``, applied ``L`` times by a
scanned :class:`~tm2nn.nets.Loop`.  The weights are the ``Affine`` ops' own, in the
model's dtype, read as CSR rows; the kernels (:mod:`.grid_kernel`) run the whole filter
on a tile of cells in one loop nest.  Two things make it fast, and neither changes the
function (docs/rcnn.md, "The fused engine"):

* **fused layers:** cells are the vector dimension and a tile's hidden values stay in
  cache through all five layers, instead of one ``[width, cells]`` matrix streamed per
  layer;
* **incremental trips:** each row is summed in one fixed order, so the filter is a
  function of the patch cells it reads, bit for bit (``V1`` reads the centre and its 4
  neighbours).  A cell none of whose read cells changed in the previous trip keeps its
  value; only the cells next to a changed cell are evaluated (the first trip evaluates
  every cell).  A machine's head changes a few cells per step, so a trip costs a copy
  of the grid (the scan's output) and a few dozen filter evaluations.

:meth:`GridEngine.run` returns every state, ``[B, L + 1, H, W]``, as the module does;
:meth:`GridEngine.stream` yields the same states block by block from a ring buffer of
fixed size, for decoding long runs in bounded memory (docs/rcnn.md, "Long runs").

The loop's ``until_fixed`` is kept per grid: a grid with no changed cell is at a fixed
point, and its later states are copies (as the module's, which stops when every grid of
its batch is fixed; the filter is a function, so the values agree either way, and with
``until_fixed`` off too).  Grids are split round robin over :mod:`tm2nn.threads`' count
for bulk work (Python threads); the kernel releases the GIL.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from tm2nn import interrupt
from tm2nn import threads as thread_policy
from tm2nn.backends.rcnn import grid_kernel as K
from tm2nn.engines import EngineRefused
from tm2nn.engines.chain import layers as chain
from tm2nn.limits import check_memory
from tm2nn.nets import Loop, PatchMap
from tm2nn.nets.grid import PATCH_OFFSETS

#: a chunk of trips per kernel call aims at about this many seconds (progress, Ctrl-C)
CHUNK_SECONDS = 0.25
#: the scratch of a tile, at most (measured on the 2-core EPYC, 1 MB of L2 per core: for
#: the 23-state counter's filter, 1970 wide in float32, tiles of 64 cells, 1 MB, ran the
#: first trip in 0.78x the time of tiles of 32 and 0.53x of 16; for sign_sum_3x2's, 24770
#: wide in float64, tiles of 8, 3.2 MB, ran 1.2x faster than 32 and 1.6x than 4)
TILE_BYTES = 4 << 20
#: a streamed run's ring buffer holds about this many bytes of states (:meth:`GridEngine.stream`)
STREAM_BYTES = 32 << 20


@dataclass(frozen=True)
class GridOptions:
    """How the engine splits its work; the values only change the speed."""

    #: cells per tile (None: the largest power of two from 8 to 64 whose two scratch
    #: blocks, ``width × tile`` numbers each, take at most :data:`TILE_BYTES`)
    tile: int | None = None
    #: threads, each running its share of the grids (None: :mod:`tm2nn.threads`' count for
    #: bulk work: ``--threads``, ``TM2NN_THREADS`` or its measured default)
    threads: int | None = None
    #: evaluate only the cells whose patch changed (False: every cell at every trip, the
    #: dense baseline the benchmark compares with; the same states, bit for bit)
    incremental: bool = True


@dataclass(frozen=True)
class GridProgram:
    """A machine-mode net as the kernels take it: the filter's layers (``meta`` rows of
    :mod:`.grid_kernel`, CSR pools in the model's dtype), its padding and the loop's trips."""

    names: tuple[str, ...]
    #: the patch positions the first layer reads, (di + 1, dj + 1) each: the cells whose
    #: change can change a cell's value (the filter's V1 reads 5 of the 9)
    reads: np.ndarray
    meta: np.ndarray
    indptr: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    bias: np.ndarray
    width: int
    pad: np.floating
    trips: int
    dtype: np.dtype = field(default=np.dtype(np.float32))


def _refuse(why: str) -> EngineRefused:
    return EngineRefused(f"the fused grid engine runs the rcnn machine-mode net (a scanned Loop of one PatchMap "
                         f"whose filter is Affine and ReLU ops in a chain): {why}")


def build_program(net, dtype=np.float32) -> GridProgram:
    """The kernels' program for ``net`` (``grid`` -> ``states``, as
    :func:`tm2nn.backends.rcnn.build.machine_net` builds it), its weights cast to ``dtype``
    as the torch module casts them; anything else is refused (:class:`EngineRefused`)."""
    dtype = np.dtype(dtype)
    if len(net.nodes) != 1 or not isinstance(net.nodes[0], Loop) or net.outputs != (net.nodes[0].name,):
        raise _refuse(f"net {net.name!r} is not one Loop")
    loop = net.nodes[0]
    if not loop.scan:
        raise _refuse(f"loop {loop.name!r} does not scan")
    body = loop.body
    if len(body.nodes) != 1 or not isinstance(body.nodes[0], PatchMap) or body.outputs != (body.nodes[0].name,):
        raise _refuse(f"the body of loop {loop.name!r} is not one PatchMap")
    pm = body.nodes[0]
    try:  # the filter: Affine ops in a chain, each optionally followed by a ReLU
        _n_in, layers, _out = chain(pm.body)
    except EngineRefused as e:
        raise _refuse(str(e)) from None
    if not layers:
        raise _refuse("the filter has no affine map")
    meta = np.zeros((len(layers), K.M_WIDTH), dtype=np.uint64)
    indptr, cols, vals, bias = [], [], [], []
    n_ptr = n_ent = n_bias = 0
    for k, lay in enumerate(layers):
        meta[k] = (lay.n_out, n_ptr, n_bias, lay.relu)
        indptr.append(lay.ptr + n_ent)  # entries row by row, columns increasing
        cols.append(lay.cols)
        vals.append(lay.vals)
        bias.append(lay.bias)
        n_ptr, n_ent, n_bias = n_ptr + lay.n_out + 1, n_ent + int(lay.ptr[-1]), n_bias + lay.n_out
    read = set(layers[0].cols.tolist())  # V1's nonzero columns (SparseMatrix stores no zeros)
    reads = np.array([(di + 1, dj + 1) for k, (di, dj) in enumerate(PATCH_OFFSETS) if k in read],
                     dtype=np.uint64).reshape(-1, 2)
    return GridProgram(names=tuple(lay.name for lay in layers), reads=reads, meta=meta,
                       indptr=np.concatenate(indptr).astype(np.uint64), cols=np.concatenate(cols).astype(np.uint64),
                       vals=np.concatenate(vals).astype(dtype), bias=np.concatenate(bias).astype(dtype),
                       width=max(9, *(lay.n_out for lay in layers)), pad=dtype.type(pm.pad),
                       trips=int(loop.trips), dtype=dtype)


@dataclass
class GridStats:
    """What the last :meth:`GridEngine.run` did: the trips the module's loop runs (to the
    trip at which every grid is at its fixed point), the filter evaluations, and the
    cell-updates of the output (grids · cells · L)."""

    trips: int = 0
    evaluated: int = 0
    cell_updates: int = 0


class GridEngine:
    """The fused engine for one machine-mode net (module doc)."""

    name = "fused"

    def __init__(self, net, dtype=np.float32, options: GridOptions = GridOptions()) -> None:
        self.prog = build_program(net, dtype)
        self.options = options
        self.stats = GridStats()
        if options.tile is not None:
            self.tile = int(options.tile)
        else:
            fit = TILE_BYTES // (2 * self.prog.width * self.prog.dtype.itemsize)
            self.tile = int(min(64, max(8, 1 << max(0, int(fit).bit_length() - 1))))

    def run(self, grids: np.ndarray, progress=None) -> np.ndarray:
        """The states ``[B, L + 1, H, W]`` of start grids ``[B, H, W]``: what the module
        returns.  ``progress(i, L)`` after each chunk of trips; Ctrl-C
        (:func:`tm2nn.interrupt.graceful`) raises :class:`~tm2nn.interrupt.Interrupted`
        with the states so far."""
        x = self._grids(grids)
        nb, h, w = x.shape
        trips, size = self.prog.trips, self.prog.dtype.itemsize
        check_memory(nb * (trips + 1) * h * w * size + nb * h * w * 24,
                     f"the states of {nb} grid(s) of {h}x{w} cells over {trips} filter steps", ("steps",))
        states = np.empty((nb, trips + 1, h, w), dtype=self.prog.dtype)
        for _k, _block in self._trips(x, states, progress, window=False):
            pass  # the trips write into `states` in place
        return states

    def stream(self, grids: np.ndarray, progress=None, block_bytes: int = STREAM_BYTES):
        """The same states as :meth:`run`, in step order and in bounded memory: yields
        ``(k, block)``, ``block`` ``[B, n, H, W]`` the states ``k .. k + n - 1`` (the first
        block is the start grids).  Each block is a view of one ring buffer of about
        ``block_bytes`` (at least two steps), valid until the next one is asked for; once
        every grid is at its fixed point, the last block is the fixed grids broadcast over
        the remaining steps (no copy).  Ctrl-C raises
        :class:`~tm2nn.interrupt.Interrupted` without states (the caller holds what it
        decoded)."""
        x = self._grids(grids)
        nb, h, w = x.shape
        size = self.prog.dtype.itemsize
        cap = int(max(1, min(self.prog.trips, block_bytes // max(1, nb * h * w * size))))
        check_memory(nb * (cap + 1) * h * w * size + nb * h * w * 24,
                     f"a streamed block of {cap + 1} states of {nb} grid(s) of {h}x{w} cells", ("steps",))
        buf = np.empty((nb, cap + 1, h, w), dtype=self.prog.dtype)
        yield from self._trips(x, buf, progress, window=True)

    @staticmethod
    def _grids(grids) -> np.ndarray:
        x = np.asarray(grids)
        if x.ndim != 3:
            raise ValueError(f"the fused grid engine takes grids [batch, height, width], got shape {x.shape}")
        return x

    def _trips(self, x: np.ndarray, buf: np.ndarray, progress, window: bool):
        """The loop of :meth:`run` (``window`` False: ``buf`` holds every state) and of
        :meth:`stream` (True: ``buf`` is a ring of ``n + 1`` states, slot 0 the last state
        of the chunk before).  Yields ``(k, states k .. k + n - 1)`` as views of ``buf``."""
        p = self.prog
        nb, h, w = x.shape
        trips = p.trips
        buf[:, 0] = x
        self.stats = GridStats(cell_updates=nb * h * w * trips)
        yield 0, buf[:, :1]
        if trips == 0 or nb == 0 or h * w == 0:
            if trips:
                yield 1, np.broadcast_to(buf[:, :1], (nb, trips, h, w)) if window else _fill(buf, 0)
            return
        bits = buf.view(np.uint32 if p.dtype.itemsize == 4 else np.uint64)
        weights = (p.meta, p.indptr, p.cols, p.vals, p.bias)
        tile = np.int64(self.tile)
        changed = np.zeros((nb, h * w), dtype=np.uint64)
        nchanged = np.zeros(nb, dtype=np.uint64)
        mark = np.zeros((nb, h * w), dtype=np.uint64)
        fixed_at = np.zeros(nb, dtype=np.uint64)
        evaluated = np.zeros(nb, dtype=np.uint64)
        n_threads = max(1, min(nb, self.options.threads or thread_policy.count(thread_policy.BULK)))
        parts = [np.arange(k, nb, n_threads, dtype=np.uint64) for k in range(n_threads)]  # round robin
        pool = ThreadPoolExecutor(len(parts)) if len(parts) > 1 else None
        cap = buf.shape[1] - 1 if window else trips
        done, chunk, cap_used = 0, 16, 0
        try:
            while done < trips and not fixed_at.all():
                n = min(chunk, cap, trips - done)
                base = done if window else 0
                if window and done:
                    buf[:, 0] = buf[:, cap_used]  # the ring: the last state on slot 0
                t0 = time.perf_counter()
                args = (buf, bits, np.int64(base), np.int64(done + 1), np.int64(done + n), p.pad, *weights, p.reads,
                        tile, np.int64(p.width), changed, nchanged, mark, fixed_at, evaluated, not self.options.incremental)
                if pool is None:
                    K.run_trips(*args, parts[0])
                else:  # disjoint grids, one kernel call per thread (it releases the GIL)
                    list(pool.map(partial(K.run_trips, *args), parts))
                yield done + 1, buf[:, done + 1 - base:done + n + 1 - base]
                done, cap_used = done + n, n
                chunk = int(max(16, min(chunk * 4, n * CHUNK_SECONDS / max(time.perf_counter() - t0, 1e-6))))
                if progress is not None:
                    progress(done, trips)
                if interrupt.requested() and done < trips and not fixed_at.all():
                    raise interrupt.Interrupted(done, trips, what="network steps",
                                                partial=None if window else buf[:, :done + 1].copy())
        finally:
            if pool is not None:
                pool.shutdown()
        if done < trips:  # every grid is at a fixed point: the later states are copies
            last = buf[:, cap_used:cap_used + 1] if window else buf[:, done:done + 1]
            yield done + 1, np.broadcast_to(last, (nb, trips - done, h, w)) if window else _fill(buf, done)
        if progress is not None and done < trips:
            progress(trips, trips)
        ran = int(fixed_at.max()) if fixed_at.all() else trips  # the trips the module runs
        self.stats = GridStats(trips=ran, evaluated=int(evaluated.sum()), cell_updates=nb * h * w * trips)


def _fill(states: np.ndarray, done: int) -> np.ndarray:
    """``states[:, done + 1:]`` set to copies of ``states[:, done]`` (the fixed point); returns them."""
    states[:, done + 1:] = states[:, done:done + 1]
    return states[:, done + 1:]


def runner(compiled, options: GridOptions = GridOptions()):
    """``run(grids, batch_size=N) -> states`` for a compiled rcnn machine-mode model, as
    the torch runner's (``[n, L + 1, H, W]`` in the model's dtype, ``batch_size`` grids
    per run).  It reads ``compiled.net``: ``Compiled.check_engine`` has refused a loaded
    model whose weights are not that net's."""
    # the net's float type, as the start grids are made (runtime.GridModel; no torch import)
    engine = GridEngine(compiled.net, np.dtype(compiled.input_encoding.get("dtype", "float32")), options)

    def run(grids, batch_size: int = 4096, progress=None):
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        x = np.asarray(grids)
        chunks = [engine.run(x[s:s + batch_size], progress) for s in range(0, max(len(x), 1), batch_size)]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def stream(grids, progress=None):
        """:meth:`GridEngine.stream` of all of ``grids`` at once (bounded memory whatever
        their number of steps)."""
        return engine.stream(np.asarray(grids), progress)

    run.engine = engine
    run.stream = stream
    return run
