"""Learner mode of the RCNN backend: Goel et al.'s Algorithm 1 (SGD on the memory layer of
the RCNN of Definition 5), checked against Lemma 4 after every example.

The net (network IR, emitted with :func:`tm2nn.emit.to_torch`)::

    z = [x, 1] ──MemoryGrid (W, trainable)──▶ [W diag(z)  1] ──Loop L × PatchMap(filter)──▶ grid
          ──GridReadout(f̄_head, first d+1 columns)──▶ ŷ

:func:`learn` runs Algorithm 1 with ``torch.optim.SGD`` (η = 1/54, batch size 1, loss
``½(y − ŷ)²``) on the ``m`` examples and the dummy ``(1_d, 1)``, W starting at 0, and
checks after each example that W's rows are ``y⁽ᵃ⁾[x⁽ᵃ⁾, 1]/3`` for the examples seen
and 0 after them, and that ``ŷ`` was 0.  See docs/rcnn.md "Learner mode (Algorithm 1)".
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tm2nn import threads
from tm2nn.backends.rcnn.build import CELL, CITE_FILTER, PAD, filter_for
from tm2nn.backends.rcnn.encoding import cell_code
from tm2nn.backends.rcnn.head import build_head
from tm2nn.backends.rcnn.learner_form import (
    PARTS,
    Shape,
    check_learner_form,
    frame_values,
    reference_answer,
)
from tm2nn.backends.rcnn.lookup_engine import Degenerate, LookupEngine
from tm2nn.backends.rcnn.lookup_grad import LookupGrad
from tm2nn.datasets import load_csv
from tm2nn.devices import torch_device
from tm2nn.emit import to_torch
from tm2nn.emit.torch_emit import module_device
from tm2nn.emit.torch_loop_grad import segment_length
from tm2nn.limits import check_memory
from tm2nn.nets import (
    Affine,
    GridReadout,
    Loop,
    MemoryGrid,
    Net,
    PatchMap,
    Port,
    ReLU,
    Space,
    SparseMatrix,
)
from tm2nn.options import OptionError

#: Algorithm 1 / Lemma 2: the learning rate.
ETA = 1.0 / 54.0
CITE_MEM = "Goel et al., Def. 5: f_mem(z) = [W diag(z)  1_{d_mem x l}], W trained by Algorithm 1 (W(1) = 0)"
CITE_HEAD = "Goel et al., Def. 5 and B.3: sum of f_head over the input region, f_head = B.2's f̄_head (4 ReLUs)"
OUT = Space(("y:prediction",))


def head_body() -> Net:
    """Goel et al., B.2/B.3: ``f̄_head(c) = U1 σ(U2 c + b2) + b1`` on one cell
    (:func:`tm2nn.backends.rcnn.head.build_head`, Definition 5's ``f_head`` with biases)."""
    h = build_head()
    hidden = Space(tuple(h.labels))
    return Net("f_head", (Port("cell", CELL),), (
        Affine("U2", ("cell",), weight=SparseMatrix.from_dense(h.U2), bias=h.b2, out=hidden),
        ReLU("relu", ("U2",)),
        Affine("U1", ("relu",), weight=SparseMatrix.from_dense(h.U1), bias=h.b1, out=OUT),
    ), ("U1",))


def depth_for(steps: int, m: int) -> int:
    """Algorithm 1's number of filter steps ``L`` for a ``steps``-step learner on ``m``
    examples: ``t + 1`` (B.2's case 3 places the head one step after memorization ends,
    then the machine runs ``t`` steps), and at least ``m + 2``: Lemma 3 fills its band in
    ``m + 1``, and one more step passes every memory cell through the filter's slope-1
    path, which puts it on the float ``head.E_STAR`` where ``f_head`` is exactly 0."""
    return max(steps + 1, m + 2)


def learner_net(filter_body: Net, shape: Shape, depth: int, name: str = "rcnn_learner",
                head: Net | None = None) -> Net:
    """Goel et al., Definition 5 and Algorithm 1: ``f(z) = Σ f_head(f_Conv2D^{(L)}(f_mem(z)))``
    over the input region, with ``W`` (``(m+1) × (d+1)``) zero and trainable, the frame
    of edge markers left of it (:func:`~.learner_form.frame_values`, our departure: B.1.2's
    "markers", docs/rcnn.md "The frame"), ``shape.work`` columns of ones, ``L = depth``
    applications of the shared filter.  Outputs ``("prediction", "grid")``: ``ŷ`` and the
    last grid."""
    z = Space(tuple(f"z:x{b}" for b in range(shape.d)) + ("z:1",))
    step = Net("rc_layer", (Port("g", CELL, kind="grid"),),
               (PatchMap("filter", ("g",), body=filter_body, pad=PAD, cite=CITE_FILTER),), ("filter",))
    return Net(name, (Port("z", z),), (
        MemoryGrid("memory", ("z",), weight=np.zeros((shape.rows, shape.d + 1)), ones=shape.work, out=CELL,
                   left=frame_values(shape.rows), trainable=True, cite=CITE_MEM),
        Loop("grid", ("memory",), body=step, trips=depth, until_fixed=True),
        GridReadout("prediction", ("grid",), body=head_body() if head is None else head, width=shape.d + 1,
                    start=shape.left, cite=CITE_HEAD),
    ), ("prediction", "grid"))


def lemma4_target(X: np.ndarray, Y: np.ndarray, seen: int) -> np.ndarray:
    """Goel et al., Lemma 4 (and Lemma 2 part 1): W after ``seen`` SGD steps: row
    ``a < seen`` is ``y⁽ᵃ⁾[x⁽ᵃ⁾, 1]/3`` (the dummy ``(1_d, 1)`` is example ``m + 1``),
    the other rows 0."""
    Xd = np.concatenate([np.asarray(X, float), np.ones((1, X.shape[1]))], 0)
    Yd = np.append(np.asarray(Y, float), 1.0)
    W = np.zeros((Xd.shape[0], Xd.shape[1] + 1))
    W[:seen, :-1] = Yd[:seen, None] * Xd[:seen] / 3
    W[:seen, -1] = Yd[:seen] / 3
    return W


@dataclass
class Trained:
    """The trained model and what the checks saw."""

    module: torch.nn.Module
    shape: Shape
    depth: int
    dtype: torch.dtype
    memorized: bool
    width: int = 0                                          # the filter's widest layer (d_rc)
    w_error: list[float] = field(default_factory=list)     # max |W − fl(Lemma 4's W)| after each step
    outputs: list[float] = field(default_factory=list)     # ŷ at each memorization step
    grad_exact: list[bool] = field(default_factory=list)   # SGD's gradient == Lemma 4's, bit for bit
    step_exact: list[bool] = field(default_factory=list)   # W after the step == W − η·that gradient
    parts: tuple[str, ...] = ("memory",)                   # what SGD trained (PARTS)
    grad_max: dict = field(default_factory=dict)           # part -> max |gradient| at each step
    moved: dict = field(default_factory=dict)              # part -> max |θ − θ_start| after each step

    def predict(self, xs: np.ndarray, progress=None, engine: str = "lookup", incremental: bool = True) -> np.ndarray:
        """``ŷ`` for test points ``xs`` ``[n, d]`` (±1): B.3's read-out, ±1 when the learner
        ran to its halting position.  ``engine="lookup"`` runs the filter loop with
        :class:`~.lookup_engine.LookupEngine` (the module's own filter, memoised; the same
        function, tested bit for bit) and falls back to the module when the grid is not a
        B.1.1 code; ``"module"`` runs the emitted module.  ``incremental``: the lookup engine
        re-evaluates only the cells next to a change (:meth:`~.lookup_engine.LookupEngine.run`;
        ``False``: every cell, every trip).  ``progress(i, trips)``."""
        if engine not in ("lookup", "module"):
            raise ValueError(f"engine is 'lookup' or 'module', not {engine!r}")
        mod = self.module
        device = module_device(mod)
        z = torch.tensor(np.concatenate([np.asarray(xs, float), np.ones((len(xs), 1))], 1), dtype=self.dtype,
                         device=device)
        with torch.no_grad():
            if engine == "lookup" and len(xs):
                try:
                    first = mod.op("memory")(z).to(torch.float64).cpu().numpy()
                    eng = LookupEngine(mod.op("grid").body.op("filter"), self.depth, self.dtype)
                    last, _trips = eng.run(first, progress, incremental=incremental)
                    y = mod.op("prediction")(torch.as_tensor(last, dtype=self.dtype, device=device))
                    return y[:, 0].to(torch.float64).cpu().numpy()
                except Degenerate:
                    pass
            out = []
            for s in range(0, len(xs), PREDICT_BATCH):
                y, _grid = mod(z[s:s + PREDICT_BATCH])
                out.append(y[:, 0].to(torch.float64).cpu().numpy())
                if progress is not None:
                    progress(min(s + PREDICT_BATCH, len(xs)), len(xs))
            return np.concatenate(out) if out else np.zeros(0)


#: Refuse a training step whose backward pass would keep more floats than this (8 GB of
#: float64); the memory limit (``--max-memory``, :func:`tm2nn.limits.check_memory`) too.
MAX_TRAIN_FLOATS = 1_000_000_000


def output_tolerance(dtype, cells: int) -> float:
    """How far from 0 ``ŷ`` may be during memorization: f̄_head at the float nearest to
    −3⁻² is 0 up to the rounding of its four ReLU terms (of the order 18·(1/6)), summed
    over ``cells`` input cells."""
    return 64 * float(torch.finfo(dtype).eps) * cells


def trainable_parts(module: torch.nn.Module, parts: tuple[str, ...]) -> dict[str, list[torch.nn.Parameter]]:
    """Open the parameters of ``parts`` to SGD (``requires_grad``; the memory layer's W
    already is, its frame of edge markers stays fixed): ``{part: [Parameters]}``.  The
    filter is the loop body's patch map, the head the read-out's body (Definition 5's
    ``Θ_rc`` and ``Θ_head``)."""
    where = {"filter": module.op("grid").body.op("filter"), "head": module.op("prediction")}
    out = {}
    for part in parts:
        ps = [module.op("memory").weight] if part == "memory" else list(where[part].parameters())
        for q in ps:
            q.requires_grad_(True)
        out[part] = ps
    return out


def learn(g, X: np.ndarray, Y: np.ndarray, *, depth: int, work: int, dtype=torch.float32,
          progress=None, filter_body: Net | None = None, head_body: Net | None = None, device=None,
          parts: tuple[str, ...] = ("memory",), engine: str = "lookup") -> Trained:
    """Goel et al., Algorithm 1 with the construction's Θ_rc and Θ_head (B.2, B.3): SGD on
    W only (``torch.optim.SGD``, lr = 1/54, one example per step, loss ``½(y − ŷ)²``) over
    the ``m`` examples then the dummy ``(1_d, 1)``, from ``W = 0``.  After each step it
    checks Lemma 4 exactly: the gradient autograd computed through all ``L`` filter steps
    equals, bit for bit, Lemma 4's ``−18·(y − ŷ)·1[a = τ]·z`` at the net's ``ŷ`` (in
    ``dtype``), the step wrote ``W − η`` times it, and W is Lemma 4's (rows
    ``y⁽ᵃ⁾[x⁽ᵃ⁾, 1]/3`` for the examples seen, 0 after).  In float64 ``ŷ`` is exactly 0
    and W is the nearest float to Lemma 4's, bit for bit; in float32 ``ŷ`` is within
    :func:`output_tolerance` of 0 and W within ``|ŷ|/3`` (docs/rcnn.md decision 9).
    ``progress(i, m + 1)`` after each step.  ``filter_body`` / ``head_body`` replace the planted ``Θ_rc`` / ``Θ_head``
    (Algorithm 1's random draws, :mod:`.algorithm1`).  ``device``: where the module trains
    (default: the CPU; the exact checks compare on that device).

    ``parts`` (:data:`PARTS`) chooses what SGD trains: Algorithm 1 trains the memory layer
    only; with ``"filter"`` and ``"head"`` the same SGD step (same η, same loss) also
    moves the stored entries of ``Θ_rc`` and ``Θ_head`` (a departure from Algorithm 1,
    docs/rcnn_algorithm1.md "Training the filter and the head").  Then every trip runs
    (the fixed-point tail is exact only for a body without gradients) in checkpointed
    segments, and each step records the gradient's largest entry on each part
    (``Trained.grad_max``) and the largest move from the starting weights
    (``Trained.moved``); Lemma 4's checks still run, and fail once the filter moved.

    ``engine="lookup"`` (the default) runs each step of Algorithm 1 proper (the memory
    layer only, the planted filter, float64 on the CPU) through the memoised filter and
    its memoised Jacobian (:class:`~.lookup_grad.LookupGrad`); ``"module"`` (and every
    other case) through the emitted module's autograd.  Lemma 4's bit-for-bit checks are
    the same for both."""
    X = np.asarray(X, dtype=np.int64)
    Y = np.asarray(Y, dtype=np.int64)
    m, d = X.shape
    shape = Shape(m, d, work)
    body = filter_for(g, cell_code(g)).body if filter_body is None else filter_body
    # Backward keeps the hidden units (about 1.4 d_rc floats per cell) of the trips it
    # stores: with checkpointed segments of ~√L trips (tm2nn.emit.torch_loop_grad), one
    # segment being recomputed plus one input grid per segment, at most ~2√L trips.
    # With the planted filter and only W training, the forward reaches its fixed point
    # within m + 2 trips (depth_for) and the tail stands for the rest: one segment of at
    # most m + 2 trips is ever recomputed.
    width = max(len(body.spaces[o.name]) for o in body.nodes)
    seg = segment_length(depth)
    if engine not in ("lookup", "module"):
        raise ValueError(f"engine is 'lookup' or 'module', not {engine!r}")
    parts = tuple(parts)
    if "memory" not in parts or not set(parts) <= set(PARTS):
        raise OptionError(f"{{sgd_on}} is memory, optionally with filter and head, not {','.join(parts)}", "sgd_on")
    plain = filter_body is None and parts == ("memory",)
    use_lookup = plain and engine == "lookup" and dtype == torch.float64 and torch_device(device).type == "cpu"
    held = min(seg, m + 2) if plain else seg
    floats = int(1.4 * width) * shape.rows * shape.cols * (held + 1) + shape.rows * shape.cols * (depth // seg + 1)
    if use_lookup:  # one id grid per trip to the fixed point, and the vector v
        floats = shape.rows * shape.cols * (m + 6)
    how = "through the memoised filter" if use_lookup else f"checkpointed in segments of {seg} steps"
    check_memory(floats * torch.finfo(dtype).bits // 8, f"training: {depth} filter steps on a {shape.rows}x"
                 f"{shape.cols} grid, {how}", ("steps", "work"))
    if floats > MAX_TRAIN_FLOATS:
        raise OptionError(f"refusing to train: {depth} filter steps on a {shape.rows}x{shape.cols} grid keep "
                          f"about {floats:,} floats for the backward pass (checkpointed in segments of {seg} "
                          f"steps; limit {MAX_TRAIN_FLOATS:,}); lower {{steps}} or {{work}}, or use fewer "
                          "examples", "steps", "work")
    module = to_torch(learner_net(body, shape, depth, g.name, head=head_body), dtype=dtype,
                      device=torch_device(device))
    module.op("grid").checkpoint = True
    opened = trainable_parts(module, parts)
    W = module.op("memory").weight
    params = [q for part in parts for q in opened[part]]
    start = {part: [q.detach().clone() for q in opened[part]] for part in parts if part != "memory"}
    opt = torch.optim.SGD(params, lr=ETA)
    Xd = np.concatenate([X, np.ones((1, d), dtype=np.int64)], 0)
    Yd = np.append(Y, 1)
    out_tol = output_tolerance(dtype, shape.rows * (d + 1))
    res = Trained(module, shape, depth, dtype, memorized=True, width=width, parts=tuple(parts))
    fast = LookupGrad(module, depth, dtype) if use_lookup else None
    for i in range(m + 1):
        z = torch.tensor(np.append(Xd[i], 1)[None, :], dtype=dtype, device=W.device)
        opt.zero_grad()
        y_hat = None
        if fast is not None:
            try:
                y_hat = fast.step(z, float(Yd[i]))
            except Degenerate:  # not a B.1.1 code: the module's own backward
                fast = None
                W.grad = None
        if y_hat is None:
            y_hat, _grid = module(z)
            loss = 0.5 * (float(Yd[i]) - y_hat[0, 0]) ** 2
            loss.backward()
        # Lemma 4's gradient, −18·(y − ŷ)·1[a = τ]·z, at the net's ŷ, in the run's dtype
        grad = torch.zeros_like(W)
        grad[i] = ((y_hat.detach()[0, 0] - float(Yd[i])) * 18.0) * z[0]
        res.grad_exact.append(bool(torch.equal(W.grad, grad)))
        for part in start:
            res.grad_max.setdefault(part, []).append(max((float(q.grad.abs().max()) if q.grad is not None
                                                          and q.numel() else 0.0) for q in opened[part]))
        before = W.detach().clone()
        opt.step()
        for part, qs in start.items():
            res.moved.setdefault(part, []).append(max(float((q.detach() - q0).abs().max()) if q.numel() else 0.0
                                                      for q, q0 in zip(opened[part], qs)))
        res.step_exact.append(bool(torch.equal(W.detach(), before.add_(grad, alpha=-ETA))))
        want = torch.tensor(lemma4_target(X, Y, i + 1)).to(W.device, dtype)
        err = float((W.detach() - want).abs().max())
        res.w_error.append(err)
        res.outputs.append(float(y_hat.detach()[0, 0]))
        # W is then Lemma 4's y·[x, 1]/3 up to ŷ's rounding: |ΔW| ≤ η·18·|ŷ| + an ulp of 1/3;
        # in float64 ŷ is exactly 0 (f_head's bias, head.exact_zero_bias) and W is Lemma 4's
        bound = abs(res.outputs[-1]) / 3 + 2 * float(torch.finfo(dtype).eps)
        exact = dtype != torch.float64 or (err == 0.0 and res.outputs[-1] == 0.0)
        if (not (res.grad_exact[-1] and res.step_exact[-1]) or err > bound or abs(res.outputs[-1]) > out_tol
                or not exact):
            res.memorized = False
        if progress is not None:
            progress(i + 1, m + 1)
    return res


@contextmanager
def step_threads():
    """Run the block on :mod:`tm2nn.threads`' count for per-step work: the learner's grids
    are tiny (``(m+1) × (d+1+work)`` cells), so threads only add overhead and contention."""
    threads.use_torch()
    yield


#: Test points per forward pass (the filter's hidden layer is ~80s floats per cell).
PREDICT_BATCH = 16

#: The default step bound's search: the learner must halt on the training inputs within this.
MAX_STEPS = 1_000_000


def step_bound(g, X: np.ndarray, Y: np.ndarray, shape: Shape) -> int:
    """Theorem 1's ``t`` when not given: the most steps the learner takes (by the
    interpreter) on the memorized layout for the inputs ``x⁽¹⁾ … x⁽ᵐ⁾`` and ``1_d`` (the
    training set decides it, not the test points; a test run that needs more is refused
    by :func:`~tm2nn.backends.rcnn.learner_form.reference_answer`)."""
    wide = Shape(shape.m, shape.d, MAX_STEPS)
    xs = np.concatenate([X, np.ones((1, X.shape[1]), dtype=np.int64)], 0)
    return max(reference_answer(g, X, Y, x, wide, MAX_STEPS)[1] for x in xs)


def run(g, X: np.ndarray, Y: np.ndarray, *, test: int = 100, seed: int = 0, steps: int | None = None,
        work: int | None = None, dtype=torch.float64, progress=None, target=None, device=None,
        filter_body: Net | None = None, head_body: Net | None = None, parts=("memory",), fast: bool = True) -> dict:
    """Learner mode end to end (docs/rcnn.md "Learner mode"): check the learner's form,
    choose ``L = t + 1`` filter steps (the head is placed by B.2's case 3 one step after
    memorization ends, then the machine runs ``t`` steps) and ``work`` working columns
    (default 1: B.2's case 3 needs one, Definition 5's ``1_{d_mem × l}`` is the most a
    ``t``-step machine can reach, and a run that leaves the grid is refused), train by Algorithm 1
    (:func:`learn`), then compare the trained net's prediction with the interpreter's
    ``A(S)[x]`` on ``test`` fresh points (uniform ±1, numpy ``seed``) and, when
    ``target`` (``xs [n, d] -> ±1 [n]``) labels them, count its errors against it.
    ``progress(phase, done, total)`` reports ``"train"`` (SGD steps), ``"test"`` (the
    net's filter steps on the test points) and ``"reference"`` (the interpreter's runs).
    The report's keys starting with ``_`` hold objects for callers (the :class:`Trained`
    model, the test points, the interpreter's and the net's answers), not for JSON.
    ``device``: where the net trains and predicts (default: the CPU).  ``filter_body``,
    ``head_body`` and ``parts`` go to :func:`learn` (a drawn filter, what SGD trains).
    ``fast=False`` trains through the module's backward and tests with the full-step
    lookup engine (the code before issue 38, for ``bench/bench_rcnn_learner.py``'s
    before/after)."""
    check_learner_form(g)
    X = np.asarray(X, dtype=np.int64)
    Y = np.asarray(Y, dtype=np.int64)
    m, d = X.shape
    if m < 1:
        raise OptionError("Algorithm 1 needs at least one training example", "train")
    if steps is None:
        steps = step_bound(g, X, Y, Shape(m, d, 0))
    if steps < 1:
        raise OptionError("{steps} must be >= 1", "steps")
    depth = depth_for(steps, m)
    work = 1 if work is None else int(work)
    if work < 1:
        raise OptionError("{work} must be >= 1 (B.2's case 3 places the head beside a working cell)", "work")
    shape = Shape(m, d, work)
    rng = np.random.default_rng(seed)
    check_memory(test * (d + 2) * 8 + 3 * test * shape.rows * shape.cols * 8,
                 f"{test:,} test points of {d} features on a {shape.rows}x{shape.cols} grid", ("test",))
    xs = rng.choice(np.array([-1, 1]), size=(test, d)) if test > 0 else np.zeros((0, d), dtype=np.int64)
    t0 = time.perf_counter()
    with step_threads():
        trained = learn(g, X, Y, depth=depth, work=work, dtype=dtype, device=device, filter_body=filter_body,
                        head_body=head_body, parts=parts, engine="lookup" if fast else "module",
                        progress=(lambda i, n: progress("train", i, n)) if progress else None)
        t1 = time.perf_counter()
        got = trained.predict(xs, progress=(lambda i, n: progress("test", i, n)) if progress else None,
                              incremental=fast)
    t2 = time.perf_counter()
    want = np.zeros(test, dtype=np.int64)
    for k, x in enumerate(xs):  # the interpreter: A(S)[x], checked to end in B.1.2's halting position
        want[k] = reference_answer(g, X, Y, x, shape, steps)[0]
        if progress and (k + 1 == test or (k + 1) % max(1, test // 100) == 0):
            progress("reference", k + 1, test)
    pred = np.where(got >= 0, 1, -1)
    agree = float((pred == want).mean()) if test else 1.0
    rep = {"examples": int(m), "memorized": bool(trained.memorized), "test_agreement": agree}
    if target is not None:
        labels = np.asarray(target(xs), dtype=np.int64).reshape(test)
        rep["test_error"] = float((pred != labels).mean()) if test else 0.0
    rep.update({"features": int(d), "steps": int(steps), "filter_steps": int(depth), "working_columns": int(work),
                "grid": [shape.rows, shape.cols], "states": len(g.states), "d_rc": int(trained.width),
                "max_w_error": max(trained.w_error), "max_memorization_output": max(abs(v) for v in trained.outputs),
                "max_prediction_error": float(np.abs(got - want).max()) if test else 0.0,
                "train_seconds": round(t1 - t0, 3), "test_seconds": round(t2 - t1, 3),
                "_trained": trained, "_xs": xs, "_want": want, "_got": got})
    if target is not None:
        rep["_labels"] = labels
    return rep


def demo_learner(g, train: Path) -> tuple[str, bool]:
    """``tm2nn demo``'s row for a learner machine in Goel et al.'s B.1.2 form on its
    training set (its ``# train:`` header): the interpreter's ``A(S)[x]`` for every ``x``
    in ``{±1}^d`` (each run checked to end in B.1.2's halting position), as ``(text, ok)``."""
    check_learner_form(g)
    X, Y = load_csv(train)
    shape = Shape(X.shape[0], X.shape[1], 1)
    xs, answers = [], []
    for x in itertools.product((-1, 1), repeat=X.shape[1]):
        a, _ = reference_answer(g, X, Y, np.array(x), shape, MAX_STEPS)
        xs.append("".join("+" if v > 0 else "-" for v in x))
        answers.append("+" if a > 0 else "-")
    return f"answers on x = {' '.join(xs)}: {' '.join(answers)}", True
