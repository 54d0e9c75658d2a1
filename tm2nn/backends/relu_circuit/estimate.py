"""How big a relu-circuit net will be, counted before it is built, and the refusal.

The net has one block per layer of the layered basis circuit (Lemma B.1, and the
Prop. 3.4 correction after every layer but the last), so what it costs is set by the
layer widths after layering, not by the gate count: a layer's width is the number of
signals live across it, carried copies included.  A chain of n gates that each read
a new input has width 1 as a circuit but keeps input k live for about k layers, so its
net has ~n²/2 units.  :func:`~tm2nn.passes.layering.layer_widths` counts the widths in
time linear in the gates, without making the copies, so the estimate is cheap even
when the net would not fit.

The estimate (bytes) is ``BYTES_PER_UNIT * units + BYTES_PER_DENSE_ENTRY * dense``:

* ``units``: the gates of the layered circuit, the sum of the layer widths.  Each
  costs memory in every stage that ``tm2nn compile`` keeps at once: the layered
  circuit (a gate and its name), the NetIR (its 2 hidden units, 5 with the
  correction: labels, sparse weights, biases) and the ONNX model (ELL initializers)
  with its serialised copy.  The constant is measured with the correction (the
  default); without it the estimate is high.
* ``dense``: the entries of the weight matrices the emitters write densely (a matrix of
  at most :data:`tm2nn.emit.SMALL_DENSE` entries is a matmul whatever its sparsity:
  narrow layers), found with :func:`tm2nn.emit.affine_form` itself.

Both constants are measured: see the table above :data:`BYTES_PER_UNIT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

#: Measured: the peak RSS of ``tm2nn compile FILE.bench -o out.onnx`` (relu-circuit,
#: corrections on) minus 57 MB (the same for a 1-gate circuit: interpreter and imports,
#: already in use when the estimate is checked), fitted to ``a * units + b * dense`` by
#: least squares on relative error over 12 circuits (``bench/bench_parse.py
#: --calibrate`` and the 10^6-gate row of ``bench/bench_parse.py``; 2026-11-25):
#:
#: ============================  =========  ===========  ========  ==================
#: circuit (bench/gen_circuits)  units      dense        peak RSS  estimate / (peak-57)
#: ============================  =========  ===========  ========  ==================
#: random, 10^4 gates               49,199    9,978,583    263 MB  1.12
#: random, 3·10^4                  146,346      627,309    268 MB  1.01
#: random, 10^5                    496,857      230,215    717 MB  1.05
#: random, 3·10^5                1,509,986       26,560  2,042 MB  1.05
#: random, 10^6                  5,143,639            0  6,973 MB  1.03
#: width 64, 10^4                   45,355   20,277,850    428 MB  1.06
#: width 64, 3·10^4                140,502   64,733,147  1,331 MB  0.98
#: width 64, 10^5                  473,867  218,760,863  3,647 MB  1.17
#: NAND chain, 300 gates            90,300    9,627,619    282 MB  1.25
#: NAND chain, 1,000             1,001,000    9,627,619  1,304 MB  1.24
#: NAND chain, 1,500             2,251,500    9,627,619  2,823 MB  1.18
#: NAND chain, 2,000             4,002,000    9,627,619  5,100 MB  1.13
#: ============================  =========  ===========  ========  ==================
#:
#: The fit is a = 1,309 bytes per unit (the layered circuit's gate and name, ~200
#: bytes; the NetIR's labels, weights and biases for its 5 hidden units, ~700; the ONNX
#: initializers, protobuf and serialised copy, ~400) and b = 15.2 bytes per dense entry
#: (float64 while emitted, float32 in the protobuf and again serialised).  Rounded up
#: to 1,450 and 17, the estimate is 0.98 to 1.25 times the measured growth.
BYTES_PER_UNIT = 1450
BYTES_PER_DENSE_ENTRY = 17


@dataclass(frozen=True)
class NetSize:
    """The size of a relu-circuit net: circuit ``layers`` and the widest one, hidden
    ``units`` and ``dense`` matrix entries, and the memory estimate in bytes."""

    layers: int
    max_width: int
    units: int
    dense: int

    @property
    def nbytes(self) -> int:
        return BYTES_PER_UNIT * self.units + BYTES_PER_DENSE_ENTRY * self.dense

    def describe(self) -> str:
        return (f"a relu-circuit net of {self.layers:,} circuit layers (widest {self.max_width:,}) and "
                f"{self.units:,} units")


def net_size(widths: list[int], n_inputs: int, n_outputs: int, *, corrections: bool = True,
             pm_one_output: bool = False) -> NetSize:
    """The size of the net :func:`~tm2nn.backends.relu_circuit.layers.build_net` makes of a
    layered basis circuit whose layers have ``widths`` (``layer_widths``), reading
    ``n_inputs`` inputs; its last layer has one unit per output."""
    q = len(widths)
    if q == 0:
        return NetSize(0, 0, 0, 0)
    sizes = list(widths[:-1]) + [n_outputs]  # the last layer: one unit per output position
    dense = 0
    prev = n_inputs
    for k, w in enumerate(sizes, start=1):
        dense += _dense(w, prev, 2 * w, 2)  # W1: at most two inputs per basis gate
        if corrections and k < q:
            dense += _dense(2 * w, w, 2 * w, 1) + _dense(w, 2 * w, 2 * w, 2)
        prev = w
    return NetSize(q, max(sizes), sum(widths[:-1]) + max(widths[-1], n_outputs), dense)


def _dense(n_out: int, n_in: int, nnz: int, row_nnz: int) -> int:
    """The entries of an ``n_out x n_in`` matrix if the emitters write it densely, else 0."""
    from tm2nn.emit import affine_form

    w = SimpleNamespace(shape=(n_out, n_in), nnz=min(nnz, n_out * n_in),
                        max_row_nnz=min(row_nnz, n_in), is_diagonal=False)
    return n_out * n_in if affine_form(SimpleNamespace(weight=w, trainable=False)) == "dense" else 0


def check_net_memory(basis, *, corrections: bool = True, pm_one_output: bool = False) -> NetSize:
    """Refuse, before layering, a net estimated over the memory limit
    (:func:`tm2nn.limits.check_memory`, ``--max-memory``); ``basis`` is the circuit after
    :func:`~tm2nn.passes.basis.to_basis`.  Returns the size."""
    from tm2nn.limits import check_memory
    from tm2nn.passes.layering import layer_widths

    size = net_size(layer_widths(basis), len(basis.inputs), len(basis.outputs),
                    corrections=corrections, pm_one_output=pm_one_output)
    check_memory(size.nbytes, f"compiling {basis.name!r} to {size.describe()}")
    return size
