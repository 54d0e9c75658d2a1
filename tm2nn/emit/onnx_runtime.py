"""Running ONNX models in onnxruntime on the CPU: :func:`onnx_session` (built once) and
:func:`run_onnx` (numpy arrays in, batch by batch, interruptible)."""

from __future__ import annotations

import os

import numpy as np
import onnx

from tm2nn import interrupt
from tm2nn.emit.onnx_model import serialize
from tm2nn.threads import ort_threads


def onnx_session(model_or_path_or_bytes, threads: int | None = None):
    """An onnxruntime session on the CPU for a model (a ModelProto, serialized bytes or a
    path); build it once and pass it to :func:`run_onnx` to run many batches.
    ``threads`` sets onnxruntime's intra-op threads (default: :mod:`tm2nn.threads`' count,
    which ignores onnxruntime's own choice of one per core: tm2nn's graphs are chains of
    small ops)."""
    import onnxruntime as ort

    src = model_or_path_or_bytes
    if isinstance(src, onnx.ModelProto):
        src = serialize(src)
    elif not isinstance(src, (bytes, bytearray)):
        src = os.fspath(src)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # fatal only: a failure is raised (and reported once) by the caller
    opts.intra_op_num_threads = ort_threads() if threads is None else int(threads)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def _run_session(sess, feed: dict):
    """``sess.run`` on one batch; under :func:`tm2nn.interrupt.graceful` it runs in a
    worker thread, so Ctrl-C stops it through ``RunOptions.terminate`` (a Loop of many
    steps is one call, and Python handles no signal until it returns)."""
    import onnxruntime as ort

    if not interrupt.active():
        return sess.run(None, feed)
    ro = ort.RunOptions()
    return interrupt.run_blocking(lambda: sess.run(None, feed, ro), lambda: setattr(ro, "terminate", True))


#: numpy type of each onnxruntime input type (any other input is fed as float32)
_INPUT_TYPES = {"tensor(int64)": np.int64, "tensor(double)": np.float64}


def run_onnx(model_or_path_or_bytes, *arrays, batch_size: int = 4096):
    """Run numpy arrays (one per graph input, in order, batch first: ``[n, width]``,
    ``[n, length, width]`` or token ids ``[n, length]``) through onnxruntime on the CPU,
    ``batch_size`` rows at a time (``model_or_path_or_bytes`` may be an
    :func:`onnx_session`).  Each array is cast to its input's type (float32, float64 for a
    model emitted in float64, or int64 for token ids).  Returns an array of the output's
    type, or a tuple of them when the model has several outputs."""
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    src = model_or_path_or_bytes
    sess = src if hasattr(src, "get_inputs") else onnx_session(src)
    names = [i.name for i in sess.get_inputs()]
    if len(arrays) != len(names):
        raise TypeError(f"the model takes {len(names)} input(s) {names}, got {len(arrays)}")
    types = [_INPUT_TYPES.get(i.type, np.float32) for i in sess.get_inputs()]
    arrs = [np.asarray(a, dtype=t) for a, t in zip(arrays, types)]
    lengths = {a.shape[0] if a.ndim else -1 for a in arrs}
    if len(lengths) > 1 or -1 in lengths:
        raise ValueError(f"input arrays must be [n, ...] with one n, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 0
    chunks = []
    for s in range(0, max(n, 1), batch_size):
        feed = {name: np.ascontiguousarray(a[s:s + batch_size]) for name, a in zip(names, arrs)}
        chunks.append(_run_session(sess, feed))
    outs = [c[0] if len(chunks) == 1 else np.concatenate(c) for c in zip(*chunks)]
    return outs[0] if len(outs) == 1 else tuple(outs)
