"""The fused engine for layered ReLU nets (``--engine fused`` and ``fused-float``): the
relu-circuit backend's nets, circuits and unrolled machines, run as one numba kernel
(:mod:`.layered_kernel`) over a program of the net's own rows (:mod:`.layered_program`).

* ``fused``: the integer mode, exact on 0/1 inputs (every unit times the bias
  denominator ``s`` is an integer: ReLU is positively homogeneous), running only the rows
  that compute a value not computed before;
* ``fused-float``: every row in float32 (float64 on request), for real-valued inputs.

Both take and return what the torch module takes and returns: ``[batch, n_in]`` inputs,
``[batch, n_out]`` outputs (the integer mode's outputs divided by ``s``: exact).
"""

from __future__ import annotations

import numpy as np

from tm2nn import threads
from tm2nn.backends.relu_circuit.layered_kernel import run_program
from tm2nn.backends.relu_circuit.layered_program import Program, float_program, integer_program
from tm2nn.engines import PARALLEL
from tm2nn.errors import Tm2nnError

#: Inputs per tile: as many as fit :data:`TILE_BYTES` of registers, from TILE_MIN to
#: TILE_MAX, and no more than the batch split over the threads.  Per-row overhead, not
#: cache misses, bounds these loops: on c6288's program (one thread, float32), 256
#: inputs a tile ran at 1.07e6 inputs/s, 2048 at 1.17e6 (``bench_register_types``).
TILE_BYTES = 8 << 20
TILE_MIN, TILE_MAX = 32, 2048
#: the engines' names, and their modes
MODES = {"fused": "integer", "fused-float": "float"}


class LayeredEngine:
    """A layered ReLU net compiled for the fused kernel (module doc)."""

    def __init__(self, program: Program, mode: str) -> None:
        self.program = program
        self.mode = mode
        self._args = program.arrays()
        self._fit = TILE_BYTES // max(1, program.n_regs * program.dtype.itemsize)

    @classmethod
    def for_net(cls, net, mode: str = "integer", dtype=np.float32) -> "LayeredEngine":
        """The engine for a layered ReLU net: ``mode`` ``"integer"`` (exact, 0/1 inputs) or
        ``"float"`` (every row, in ``dtype``); other nets are an ``EngineRefused``."""
        if mode == "integer":
            return cls(integer_program(net), mode)
        if mode == "float":
            return cls(float_program(net, dtype), mode)
        raise ValueError(f"unknown mode {mode!r}")

    def tile(self, batch: int) -> int:
        """Inputs per tile for a batch (see :data:`TILE_BYTES`)."""
        split = -(-batch // threads.use_numba())
        return int(max(TILE_MIN, min(TILE_MAX, self._fit, -(-split // 32) * 32)))

    def run(self, x, batch_size: int | None = None) -> np.ndarray:
        """Outputs ``[batch, n_out]`` (float) for inputs ``[batch, n_in]``."""
        p = self.program
        x = np.asarray(x)
        if x.ndim != 2:
            raise Tm2nnError(f"the fused engine takes inputs of shape [batch, n_inputs], got {list(x.shape)}")
        if self.mode == "integer":
            bits = x == 1
            if not np.all(bits | (x == 0)):
                raise Tm2nnError("the fused engine is exact on 0/1 inputs only; run real-valued inputs with "
                                 "--engine fused-float")
            xt = np.ascontiguousarray(bits.T, dtype=p.dtype) * p.dtype.type(p.scale)
        else:
            xt = np.ascontiguousarray(x.T, dtype=p.dtype)
        out = np.empty((p.out_reg.size, x.shape[0]), dtype=p.dtype)
        if x.shape[0]:
            none = np.zeros(0, np.uint64)
            with PARALLEL:
                run_program(xt, *self._args, self.tile(x.shape[0]), out, none, none, none,
                            np.zeros((0, 0), p.dtype), np.zeros(0, p.dtype))
        y = out.T
        return y / p.scale if self.mode == "integer" else y

    def run_perturbed(self, x, a, eps) -> np.ndarray:
        """The float mode's outputs with Wei-Chen-Ma's all-layer perturbation
        (:func:`.layered_kernel.run_program`): ``a`` ``[net rows, batch]`` (every affine's
        output rows in net order), ``eps`` ``[batch]``."""
        p = self.program
        if self.mode != "float":
            raise ValueError("perturbed runs are the float mode's")
        xt = np.ascontiguousarray(np.asarray(x).T, dtype=p.dtype)
        a = np.ascontiguousarray(a, dtype=p.dtype)
        eps = np.ascontiguousarray(eps, dtype=p.dtype)
        out = np.empty((p.out_reg.size, xt.shape[1]), dtype=p.dtype)
        if xt.shape[1]:
            with PARALLEL:
                run_program(xt, *self._args, self.tile(xt.shape[1]), out, p.lay_row, p.lay_src, p.lay_width, a, eps)
        return out.T


def runner(compiled, engine: str):
    """The array runner of ``--engine fused`` / ``fused-float`` for a compiled relu-circuit
    model (the backend's ``fused`` factory): the engine is built from the
    model's net once, on the first call (``Compiled.check_engine`` has refused a model
    whose weights are not that net's)."""
    mode = MODES[engine]
    dtype = np.float64 if compiled.options.get("dtype") == "float64" else np.float32
    built: list[LayeredEngine] = []

    def run(x, batch_size: int = 4096):
        if not built:
            built.append(LayeredEngine.for_net(compiled.net, mode, dtype))
        return built[0].run(x)
    return run
