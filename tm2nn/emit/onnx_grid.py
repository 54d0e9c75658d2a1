"""The ONNX emitters of the grid ops (:mod:`tm2nn.nets.grid`), one table entry each
(:func:`~tm2nn.emit.onnx_graph.onnx_emitter`; conventions in :mod:`tm2nn.emit.onnx_graph`).

A grid is ``[batch, height, width]`` inside the graph as outside.  ``PatchMap`` ``X``:
``Pad`` with the padding value, nine ``Slice`` views (one per 3×3 offset, bounds from
``Shape``), ``Concat`` into ``[9, batch·height·width]`` (feature-major, so the body's
ops are the vector ops), the body, then ``Reshape`` back to the grid's shape.
``MemoryGrid`` ``X``: ``X.weight`` ``[d_mem, d_in]`` times ``z`` broadcast over rows,
then the ``ones`` columns (``Expand``) concatenated, and the ``left`` constants before them.  ``GridReadout`` ``X``: the column
(``Gather`` axis 2), ``width`` columns from ``start`` (``Slice``) or all cells, the body on ``[1, n]``, ``ReduceSum`` per batch row.
"""

from __future__ import annotations

import numpy as np

from tm2nn.emit.onnx_graph import _DecodeCtx, _Emitter, onnx_emitter, weight_bytes
from tm2nn.nets.grid import PATCH_OFFSETS, GridReadout, MemoryGrid, PatchMap


def _body_bytes(op: PatchMap | GridReadout, batch: int) -> int:
    return 64 + weight_bytes(op.body, batch)  # + offsets, padding, column


@onnx_emitter(PatchMap, weight_bytes=_body_bytes)
def patch_map(em: _Emitter, op: PatchMap, out: list, ins: list[str], base: str, final: str,
              ctx: _DecodeCtx | None) -> None:
    x = ins[0]
    zero, one = em.ints(base, 0), em.ints(base, 1)
    steps = [("pad", "Pad", [x, em.ints(base, 0, 1, 1, 0, 1, 1), em.init(f"{base}.pad", em.scalar(op.pad))],
              {"mode": "constant"}),
             ("shape", "Shape", [x], {}),
             ("hw", "Slice", ["@shape", one, em.ints(base, 3)], {})]                          # [H, W]
    axes = em.ints(base, 1, 2)
    views = []
    for k, (di, dj) in enumerate(PATCH_OFFSETS):
        lo = em.ints(base, 1 + di, 1 + dj)
        steps += [(f"end.{k}", "Add", ["@hw", lo], {}),
                  (f"view.{k}", "Slice", ["@pad", lo, f"@end.{k}", axes], {}),
                  (f"row.{k}", "Unsqueeze", [f"@view.{k}", zero], {})]
        views.append(f"@row.{k}")
    steps += [("stack", "Concat", views, {"axis": 0}),                                       # [9, B, H, W]
              ("patches", "Reshape", ["@stack", em.ints(base, 9, -1)], {})]                  # [9, B·H·W]
    got = em.steps(out, base, None, steps, op.cite, bare=False)
    env = em.net_ops(op.body, out, {op.body.inputs[0].name: got["patches"]}, prefix=f"{base}/")
    em.steps(out, base, final, [("grid", "Reshape", [env[op.body.outputs[0]], got["shape"]], {})], bare=False)


@onnx_emitter(MemoryGrid, weight_bytes=lambda op, batch: 4 * op.weight.size + 32)
def memory_grid(em: _Emitter, op: MemoryGrid, out: list, ins: list[str], base: str, final: str,
                ctx: _DecodeCtx | None) -> None:
    z = ins[0]
    d_mem, _d_in = op.weight.shape
    steps = [("z", "Transpose", [z], {"perm": [1, 0]}),                                     # [B, d_in]
             ("z.rows", "Unsqueeze", ["@z", em.ints(base, 1)], {}),                          # [B, 1, d_in]
             ("memory", "Mul", [em.init(f"{base}.weight", em.floats(op.weight)), "@z.rows"], {})]  # [B, d_mem, d_in]
    parts = ["@memory"]
    if op.ones or op.frame:
        steps += [("shape", "Shape", [z], {}),
                  ("batch", "Slice", ["@shape", em.ints(base, 1), em.ints(base, 2)], {})]
    if op.frame:  # the learner's frame: constants left of W diag(z)
        steps += [("left.shape", "Concat", ["@batch", em.ints(base, d_mem, op.frame)], {"axis": 0}),
                  ("left", "Expand", [em.init(f"{base}.left", em.floats(op.left)), "@left.shape"], {})]
        parts.insert(0, "@left")
    if op.ones:
        steps += [("ones.shape", "Concat", ["@batch", em.ints(base, d_mem, op.ones)], {"axis": 0}),
                  ("ones", "Expand", [em.init(f"{base}.one", em.scalar(1.0)), "@ones.shape"], {})]
        parts.append("@ones")
    if len(parts) > 1:
        steps.append(("grid", "Concat", parts, {"axis": 2}))
    em.steps(out, base, final, steps, op.cite, bare=False)


@onnx_emitter(GridReadout, weight_bytes=_body_bytes)
def grid_readout(em: _Emitter, op: GridReadout, out: list, ins: list[str], base: str, final: str,
                 ctx: _DecodeCtx | None) -> None:
    x = ins[0]
    steps = [("shape", "Shape", [x], {}),
             ("batch", "Slice", ["@shape", em.ints(base, 0), em.ints(base, 1)], {})]
    if op.column is not None:
        steps.append(("cells", "Gather", [x, em.init(f"{base}.column", np.array(op.column, np.int64))], {"axis": 2}))
    elif op.width is not None:
        steps.append(("left", "Slice", [x, em.ints(base, op.start), em.ints(base, op.start + op.width),
                                        em.ints(base, 2)], {}))
        steps.append(("cells", "Reshape", ["@left", em.ints(base, 0, -1)], {}))             # [B, h·width]
    else:
        steps.append(("cells", "Reshape", [x, em.ints(base, 0, -1)], {}))                    # [B, n]
    steps.append(("row", "Reshape", ["@cells", em.ints(base, 1, -1)], {}))                   # [1, B·n]
    got = em.steps(out, base, None, steps, op.cite, bare=False)
    env = em.net_ops(op.body, out, {op.body.inputs[0].name: got["row"]}, prefix=f"{base}/")
    k = len(op.body.spaces[op.body.outputs[0]])
    em.steps(out, base, final, [
        ("split.shape", "Concat", [em.ints(base, k), got["batch"], em.ints(base, -1)], {"axis": 0}),
        ("split", "Reshape", [env[op.body.outputs[0]], "@split.shape"], {}),                # [k, B, n]
        em.reduce("sum", "ReduceSum", "@split", base, 2, 0),                                 # [k, B]
    ], bare=False)
