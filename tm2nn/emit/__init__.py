"""Emitters: NetIR -> ``torch.nn.Module`` and NetIR -> ONNX.

Both emitters read the same :class:`~tm2nn.nets.Net` and choose the same runtime form for
every affine op (:func:`affine_form`), so the torch module, the ONNX model and the size
report describe one network.

Internally both run in *feature-major* layout: a hidden value of width ``n`` is held as an
``[n, batch]`` tensor, so the gather of an ELL affine copies whole contiguous rows (measured
2-3x faster in torch and ~9x faster in onnxruntime than gathering columns of
``[batch, n]``).  Every public input and output is ``[batch, width]``; the transposes happen
once at the edges of the graph.

In the torch module every op tensor is a named ``nn.Parameter`` (frozen unless the
construction trains it) holding exactly what :meth:`tm2nn.nets.Net.info` counts, and each
op caches its runtime form (:mod:`tm2nn.emit.torch_net`).

Each emitter is a table, op type -> emitter, filled beside each op's emitter code
(``@torch_emitter(Affine)`` on a module class, ``@onnx_emitter(Affine)`` on a function), so
a new op is one entry in each:

* torch: :mod:`.torch_net` (:class:`NetModule`, the op modules' base, the table),
  :mod:`.torch_ops`, :mod:`.torch_seq`, :mod:`.torch_grid` (the op modules),
  :mod:`.torch_emit` (:func:`to_torch`, :func:`run_torch`, progress);
* ONNX: :mod:`.onnx_graph` (the emitter's state and the table), :mod:`.onnx_ops`,
  :mod:`.onnx_seq`, :mod:`.onnx_grid` (the op emitters), :mod:`.onnx_model` (model
  assembly, metadata, files), :mod:`.onnx_runtime` (onnxruntime sessions, :func:`run_onnx`).

The entry points are imported lazily, so the ONNX modules (``tm2nn eval`` on an ``.onnx``
file) do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tm2nn.nets import Affine

#: An affine op whose rows have at most this many nonzeros may use the ELL gather form ...
ELL_MAX_K = 16
#: ... provided the padded row density ``k / n_in`` is below this.
ELL_MAX_DENSITY = 0.25

#: The batch an op is expected to run at.  A decoder's per-step layers (a ``Decode``'s
#: prologue and body) run on the inputs decoded together, typically one; every other op runs
#: on a caller's batch (relu-circuit's exhaustive checks and margin attacks: thousands).
STEP_BATCH = 1
BULK_BATCH = 4096

#: A matrix whose dense work ``n_out * n_in * batch`` is at most this is a matmul whatever its
#: sparsity: below it, per-op overhead dominates and one op beats the ``k`` ops of a gather
#: form (the transformer's per-step layers, up to 2^15 entries).  At a bulk batch only
#: matrices of at most 8 entries qualify: a 181x181 matmul does 90 times the multiply-adds
#: of the two gathers of a two-input layer (c6288 spent 58 % of its torch time in such
#: matmuls, and its ONNX file grew from 3.2 MB to 14.9 MB, while the rule read shape alone).
DENSE_WORK = 1 << 15

#: Past ELL (rows of more than ELL_MAX_K nonzeros), a matrix with at most this fraction
#: of nonzeros gathers, scales and scatter-adds its ``nnz`` entries instead of a matmul
#: (the RCNN filter's V4: a few rows sum hundreds of bumps, the rest read a handful).
SCATTER_MAX_DENSITY = 1 / 16

FORMS = ("diagonal", "ell", "scatter", "dense")


def affine_form(op: "Affine", batch: int = BULK_BATCH) -> str:
    """The runtime form of an affine op expected to run at ``batch`` (:data:`STEP_BATCH` or
    :data:`BULK_BATCH`): ``"diagonal"``, ``"ell"``, ``"scatter"`` or ``"dense"``.

    * a trainable op whose matrix stores some but not all of its entries is ``scatter``:
      the parameter is the ``[nnz]`` vector of the stored entries, so only the existing
      edges get gradients and SGD updates (an absent edge stays absent: Abbe & Sandon's
      G_n, :mod:`tm2nn.backends.abbe_sandon.ir_net`);
    * any other trainable op (every entry stored, or none: a zero-initialised matrix, the
      only way to declare a fully trainable zero W) is ``dense`` (the parameter is the dense
      W, so autograd gives the gradient with respect to every weight);
    * a square matrix with entries only on its diagonal is ``diagonal`` (``x * d + b``);
    * a matrix with ``n_out * n_in * batch <= DENSE_WORK`` is ``dense``;
    * rows with at most :data:`ELL_MAX_K` nonzeros and padded density below
      :data:`ELL_MAX_DENSITY` are ``ell`` (gather ``k`` columns per row);
    * otherwise, at most :data:`SCATTER_MAX_DENSITY` nonzero is ``scatter`` (gather the
      ``nnz`` inputs, scale, add each into its row);
    * everything else is ``dense`` (a matmul).
    """
    w = op.weight
    n_out, n_in = w.shape
    if op.trainable:
        return "scatter" if 0 < w.nnz < n_out * n_in else "dense"
    if n_in == 0 or n_out == 0:
        return "dense"
    if w.is_diagonal:
        return "diagonal"
    if n_out * n_in * batch <= DENSE_WORK:
        return "dense"
    k = max(1, w.max_row_nnz)
    if k <= ELL_MAX_K and k / n_in < ELL_MAX_DENSITY:
        return "ell"
    if w.nnz <= SCATTER_MAX_DENSITY * n_out * n_in:
        return "scatter"
    return "dense"


_LAZY = {
    "to_torch": "tm2nn.emit.torch_emit",
    "run_torch": "tm2nn.emit.torch_emit",
    "NetModule": "tm2nn.emit.torch_net",
    "OpModule": "tm2nn.emit.torch_net",
    "AffineModule": "tm2nn.emit.torch_ops",
    "to_onnx": "tm2nn.emit.onnx_model",
    "to_onnx_step": "tm2nn.emit.onnx_model",
    "save_onnx": "tm2nn.emit.onnx_model",
    "onnx_metadata": "tm2nn.emit.onnx_model",
    "run_onnx": "tm2nn.emit.onnx_runtime",
    "onnx_session": "tm2nn.emit.onnx_runtime",
}

__all__ = ["affine_form", "FORMS", "STEP_BATCH", "BULK_BATCH", "DENSE_WORK", "ELL_MAX_K", "ELL_MAX_DENSITY", "SCATTER_MAX_DENSITY", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
