"""How big a relu-circuit net will be, counted before it is built, and the refusal.

The net has one block per layer of the layered basis circuit (Lemma B.1, and the
Prop. 3.4 correction after every layer but the last), so what it costs is set by the
layer widths after layering, not by the gate count: a layer's width is the number of
signals live across it, carried copies included.  A chain of n gates that each read
a new input has width 1 as a circuit but keeps input k live for about k layers, so its
net has ~n²/2 units.  :func:`~tm2nn.ir.levels.layer_widths` counts the widths in
time linear in the gates, without making the copies, so the estimate is cheap even
when the net would not fit.

The estimate (bytes) is ``BYTES_PER_UNIT * units + BYTES_PER_DENSE_ENTRY * dense``:

* ``units``: the gates of the layered circuit, the sum of the layer widths.  Each
  costs memory in every stage that ``tm2nn compile`` keeps at once: the layering (a
  few array entries, and a name for a carried copy), the NetIR (sparse weights and
  biases for its 2 hidden units, 5 with the correction; the labels are made only when
  read, which compiling does not) and the ONNX model (ELL initializers) with its
  serialised copy.  The constant is measured with the correction (the default);
  without it the estimate is high.
* ``dense``: the entries of the weight matrices the emitters write densely, found with
  :func:`tm2nn.emit.affine_form` itself at the bulk batch the net runs at (only matrices
  of at most 8 entries since the form reads the batch, issue 20; the constant was fitted
  when every matrix of at most 2^15 entries was dense).

Both constants are measured: see the table above :data:`BYTES_PER_UNIT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from tm2nn.emit import affine_form
from tm2nn.ir.levels import layering
from tm2nn.limits import check_memory

#: Measured: the peak RSS of ``tm2nn compile FILE.bench -o out.onnx`` (relu-circuit,
#: corrections on) minus 57 MB (the same for a 1-gate circuit: interpreter and imports,
#: already in use when the estimate is checked), against ``a * units + b * dense``, on
#: 13 circuits (``bench/bench_parse.py --calibrate``, the 10^6-gate row of
#: ``bench/bench_parse.py``, and a wall of 700 layers of 1,000 two-input AND/OR gates,
#: each reading the layer before; 2026-11-25, after the compile was made fast):
#:
#: ============================  =========  ===========  ========  ==================
#: circuit (bench/gen_circuits)  units      dense        peak RSS  estimate / (peak-57)
#: ============================  =========  ===========  ========  ==================
#: random, 10^4 gates               49,199    9,978,583    209 MB  1.51
#: random, 3·10^4                  146,346      627,309    184 MB  1.67
#: random, 10^5                    496,857      230,215    431 MB  1.85
#: random, 3·10^5                1,509,986       26,560  1,153 MB  1.91
#: random, 10^6                  5,143,639            0  3,643 MB  1.98
#: width 64, 10^4                   45,355   20,277,850    321 MB  1.48
#: width 64, 3·10^4                140,502   64,733,147    897 MB  1.48
#: width 64, 10^5                  473,867  218,760,863  2,891 MB  1.48
#: NAND chain, 300 gates            90,300    9,627,619    202 MB  1.94
#: NAND chain, 1,000             1,001,000    9,627,619    689 MB  2.44
#: NAND chain, 1,500             2,251,500    9,627,619  1,347 MB  2.53
#: NAND chain, 2,000             4,002,000    9,627,619  2,233 MB  2.61
#: AND/OR wall, 700 x 1,000        700,000            0    861 MB  1.20
#: ============================  =========  ===========  ========  ==================
#:
#: A unit costs what it is: a carried copy (most of a chain's units) about 550 bytes, a
#: real gate more (the wall, where every unit is one: 1,204 bytes), so the least-squares
#: fit on relative error (a = 671, b = 11.6) would under-count a circuit of real gates
#: by nearly half.  The constants stay those measured before the compile was made fast
#: (1,450 and 17, when a unit cost 1,309 bytes: labels and two more copies of the ONNX
#: weights were kept then): the estimate is 1.2 to 2.6 times the measured growth, at
#: least the growth on every circuit measured (the wall's 1.20 is the closest).
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
    w = SimpleNamespace(shape=(n_out, n_in), nnz=min(nnz, n_out * n_in),
                        max_row_nnz=min(row_nnz, n_in), is_diagonal=False)
    return n_out * n_in if affine_form(SimpleNamespace(weight=w, trainable=False)) == "dense" else 0


def check_net_memory(basis, *, corrections: bool = True, pm_one_output: bool = False,
                     plan=None) -> NetSize:
    """Refuse, before layering, a net estimated over the memory limit
    (:func:`tm2nn.limits.check_memory`, ``--max-memory``); ``basis`` is the circuit after
    :func:`~tm2nn.passes.basis.to_basis`, ``plan`` its
    :func:`~tm2nn.ir.levels.layering` when the caller has it (the layer widths are
    counted from it, and :func:`~tm2nn.passes.layering.layer_circuit` reuses it).  Returns
    the size."""
    widths = (layering(basis) if plan is None else plan).widths
    size = net_size(widths, len(basis.inputs), len(basis.outputs),
                    corrections=corrections, pm_one_output=pm_one_output)
    check_memory(size.nbytes, f"compiling {basis.name!r} to {size.describe()}")
    return size
