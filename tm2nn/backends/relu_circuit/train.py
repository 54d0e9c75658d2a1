"""``tm2nn train --backend relu-circuit`` (issue 38): the layered ReLU net of Wei, Chen & Ma
§3 (Lemma B.1 / Prop. B.2's gate layers, Prop. 3.4's round corrections) trained in its own
parametrisation: every affine op of the compiled net is a dense trained matrix of the IR's
shape (``mask="all"``), or only its nonzero entries train (``mask="wiring"``).

``pad_width=K`` widens every hidden layer to ``K·r`` units (``r``: the widest hidden layer
of the construction), the extra rows and columns zero at the construction (so the padded
net computes the same function) and random in a scratch start: Theorem 3.1 of the paper
says the sample complexity grows with ``log w`` only, which the padded nets measure
(docs/learning.md, table b).

Targets come from the reference interpreter: ``eval_circuit`` of the source circuit, or of
the unrolled circuit of a line machine (:func:`.build.unroll_machine`, the circuit the
construction compiles, itself checked against the machine's runs by ``verify``).  The loss
is the mean squared error of the outputs against the target bits (0/1, or ±1 with
``pm_one_output``).  The saved model is the construction's net with the trained values
(:meth:`Task.model`), so ``verify``, ``margin`` and ``info`` read it as any model file.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from tm2nn.backends.protocol import Model, model_fields
from tm2nn.backends.relu_circuit.build import unroll_machine
from tm2nn.backends.relu_circuit.options import Options, TrainOptions
from tm2nn.errors import OptionError, Tm2nnError
from tm2nn.interp import eval_circuit
from tm2nn.ir import Circuit
from tm2nn.limits import check_memory
from tm2nn.nets import Affine, Net, ReLU, Slice, SparseMatrix
from tm2nn.training.loop import Task


def _chain(net: Net) -> list:
    """The net's ops as a chain x -> Affine/ReLU ... -> Slice (what every relu-circuit net is)."""
    prev = net.inputs[0].name
    for op in net.nodes:
        if not isinstance(op, (Affine, ReLU, Slice)) or tuple(op.inputs) != (prev,):
            raise Tm2nnError(f"the relu-circuit net {net.name!r} is not a chain of affine, ReLU and slice ops "
                             f"(at {op.name!r}); train compiles it again with the default options")
        prev = op.name
    return list(net.nodes)


def _targets(compiled: Model):
    """``texts -> (x, target bits)``: the net's input and the reference's output bits."""
    codec = compiled.spec.codec if hasattr(compiled, "spec") else None
    src = compiled.source
    circuit = src if isinstance(src, Circuit) else unroll_machine(src, Options(**{
        k: compiled.build["options"][k] for k in ("steps", "tape", "origin", "max_gates")}))[0]

    memo: dict = {}

    def of(texts: list[str]):
        new = [t for t in dict.fromkeys(texts) if t not in memo]
        if new:  # each input is encoded and run through the interpreter once
            x = np.asarray(codec.encode(compiled, new), dtype=np.float64)
            memo.update(zip(new, zip(x, eval_circuit(circuit, x > 0.5))))
        rows = [memo[t] for t in texts]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    return of


def training(compiled: Model, opts, extra: TrainOptions) -> Task:
    """The :class:`~tm2nn.training.loop.Task` of a compiled relu-circuit net (module doc)."""
    ops = _chain(compiled.net)
    affines = [op for op in ops if isinstance(op, Affine)]
    hidden = {op.name for op in affines[:-1]}  # every affine but the last feeds another
    r = max((op.weight.shape[0] for op in affines[:-1]), default=0)
    width = {}
    if extra.pad_width is not None:
        if extra.pad_width * r < r:
            raise OptionError("{pad_width} must be at least 1", "pad_width")
        width = {name: extra.pad_width * r for name in hidden}
    widths = [width.get(op.name, op.weight.shape[0]) for op in affines]
    entries = sum(o * (i + 1) for o, i in zip(widths, [affines[0].weight.shape[1], *widths[:-1]])) if affines else 0
    # each entry: the parameter, the construction's copy, its gradient, Adam's two moments, a mask (float64)
    check_memory(entries * 8 * 6, f"training {entries:,} weights of the relu-circuit net", ("pad_width",))
    params, ref, masks, keep_zero, fan_in = {}, {}, {}, {}, {}
    prev_w = affines[0].weight.shape[1] if affines else 0
    for op in affines:
        n_out, n_in = op.weight.shape
        out_w = width.get(op.name, n_out)
        W = np.zeros((out_w, prev_w))
        W[:n_out, :n_in] = op.weight.dense()
        b = np.zeros(out_w)
        b[:n_out] = np.asarray(op.bias, dtype=np.float64).reshape(-1)[:n_out] if np.size(op.bias) else 0.0
        for key, val in ((f"{op.name}.weight", W), (f"{op.name}.bias", b)):
            ref[key] = torch.from_numpy(val)
            params[key] = torch.nn.Parameter(torch.from_numpy(val.copy()))
            pad = torch.ones(val.shape, dtype=torch.bool)
            pad[(slice(0, n_out),) + ((slice(0, n_in),) if val.ndim == 2 else ())] = False
            if pad.any():
                keep_zero[key] = pad
            if opts.mask == "wiring":
                masks[key] = torch.from_numpy(val != 0)
            fan_in[key] = prev_w
        prev_w = out_w
    of = _targets(compiled)
    thr = float(compiled.output_encoding.get("threshold", 0.5))
    low = -1.0 if thr == 0.0 else 0.0

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = x
        for op in ops:
            if isinstance(op, Affine):
                h = h @ params[f"{op.name}.weight"].T + params[f"{op.name}.bias"]
            elif isinstance(op, ReLU):
                h = torch.relu(h)
            else:
                h = h[:, list(op.indices)]
        return h

    def loss(texts: list[str]) -> torch.Tensor:
        x, y = of(texts)
        want = torch.from_numpy(np.where(y, 1.0, low))
        return ((forward(torch.from_numpy(x)) - want) ** 2).mean()

    def errors(texts: list[str]):
        x, y = of(texts)
        with torch.no_grad():
            got = forward(torch.from_numpy(x)).numpy() > thr
        bad = got != y
        return int(bad.any(axis=1).sum()), int(bad.sum()), int(bad.size), len(texts)

    def model() -> Model | None:
        if width:
            return None  # a padded net is not the construction's shape
        nodes = []
        for op in compiled.net.nodes:
            if isinstance(op, Affine):
                W = params[f"{op.name}.weight"].detach().numpy()
                b = params[f"{op.name}.bias"].detach().numpy().copy()
                if opts.mask == "wiring":
                    w = op.weight
                    weight = SparseMatrix(w.shape, w.rows, w.cols, W[w.rows, w.cols].copy())
                else:
                    rows, cols = np.nonzero(W)
                    weight = SparseMatrix(W.shape, rows, cols, W[rows, cols].copy())
                bias = b if np.shape(op.bias) == b.shape else b[:0]
                op = dataclasses.replace(op, weight=weight, bias=bias)
            nodes.append(op)
        net = Net(compiled.net.name, compiled.net.inputs, tuple(nodes), compiled.net.outputs,
                  dict(compiled.net.metadata))
        m = Model(**{**model_fields(compiled), "net": net, "net_info": None})
        m.edited = "trained weights (tm2nn train)"
        return m

    return Task(params, ref, loss, errors, model, fan_in, masks, keep_zero,
                what=f"{len(affines)} affine layers" + (f", hidden layers padded to {extra.pad_width}·{r}"
                                                        if width else ""))
