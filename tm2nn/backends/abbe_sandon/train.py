"""Plain SGD on G_n in exact arithmetic, checked against the learner at every step
(Abbe & Sandon §4.1, Lemma 3; Theorem 4's inputs and loss).

Engine
------
A small reverse-mode over :class:`.net.Net` (no per-gadget rule; the closed forms of
:mod:`.gadgets` are only used by tests as cross-checks).  One step on a sample
``(z, y)``, ``z = (2x - 1, 2r - 1, 2r' - 1)``, label ``y`` in {-1, +1} (Theorem 4):

* forward, in topological order: clamped vertices output the input (``const`` outputs 1);
  every other vertex ``v`` gets ``z_v = sum_{(u,v)} k(u,v) w(u,v) y_u`` and outputs
  ``y_v = f(z_v)`` (:func:`.activation.f_scalar`; the output vertex too -- Lemma 2's
  "derivative of the loss w.r.t. the input to the output vertex is 12" is
  ``f'(1) * 2 * 2``);
* loss ``L = (y_out - y)**2`` (Theorem 4: "loss function L(x) = x^2" on the error), so
  ``delta_out = f'(z_out) * 2 (y_out - y)``;
* backward, in reverse order: ``delta_v = f'(z_v) sum_{(v,w)} k'(v,w) w(v,w) delta_w``;
* update of **every** weight: ``w <- w - gamma * y_u * delta_v`` (``gamma`` Lemma 2's).

``k`` / ``k'`` account for multiplicities (:mod:`.net` departure 1): an edge from a block
of ``K`` identical vertices into a single vertex counts ``K`` times forward; an edge from
a single vertex into a block counts ``K`` times backward (every copy sends its delta);
each copy's own weight gets the gradient ``y_u delta_v``.  Exact zeros are
short-circuited (a product with a zero delta or f' = 0 is 0, an update by 0 leaves the
weight) -- this changes no number, it only skips work; whether a delta *is* zero is
decided by the generic rule (f'(z_v) from the actual z_v).

Numbers are exact: :class:`.exact.Mono` (c 2^a 3^b s^k, s symbolic) for the copies'
weights and values, ints/Fractions elsewhere; a Mono whose value is rational is
turned back into a Fraction (:func:`.values.norm`), so the gate section runs on small
rationals.

:class:`Engine` does this vertex by vertex and is the *reference*.  :func:`train`,
:func:`predict` and :func:`learn` use :class:`.levels.LevelEngine`, which computes the
same numbers level by level over arrays (tests compare the two at every step).

Checks after each step (:func:`train`): the net's output sign equals the learner's
``y*_t`` (:func:`tm2nn.interp.learner.run_learner`), the memory decoded from the first m
copies (:func:`.gadgets.ms_bit`) equals ``b_t``, and no weight outside the copies of M_s
changed.  The first mismatch stops training with a :class:`Mismatch` report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tm2nn.interp.learner import run_learner

from .levels import LevelEngine
from .net import Net, build_net
from .values import df_exact as _df
from .values import f_exact as _f
from .values import norm as _norm

Number = Any


def _is_zero(x) -> bool:
    return not x  # ints, Fractions and Mono (Mono.__bool__: c != 0)


class Engine:
    """Forward / backward / SGD over a :class:`Net` (module doc), vertex by vertex: the
    reference for :class:`.levels.LevelEngine` (which computes the same numbers by levels
    over arrays, and is what :func:`train`, :func:`predict` and :func:`learn` use)."""

    def __init__(self, net: Net, gamma: Number | None = None):
        self.net = net
        self._gadget = net.gadget_edges()
        self._frozen = [(e, w) for e, w in enumerate(net.w) if e not in self._gadget]
        self._grads: dict[int, Number] = {}
        self.gamma = net.sec.gamma if gamma is None else gamma
        V = len(net.names)
        self.clamped = [k in ("const", "input") for k in net.kind]
        self.in_edges: list[list[int]] = [[] for _ in range(V)]
        self.out_edges: list[list[int]] = [[] for _ in range(V)]
        for e, (u, v) in enumerate(zip(net.src, net.dst)):
            self.in_edges[v].append(e)
            self.out_edges[u].append(e)
        mu, mv = [net.mult[u] for u in net.src], [net.mult[v] for v in net.dst]
        # forward: a block feeding a single vertex counts K times; backward: the converse
        self.kf = [a // b if a > b else 1 for a, b in zip(mu, mv)]
        self.kb = [b // a if b > a else 1 for a, b in zip(mu, mv)]
        for a, b in zip(mu, mv):
            if (a > b and a % b) or (b > a and b % a):  # pragma: no cover - blocks are 1 or K
                raise ValueError("multiplicities must divide each other")
        self.input_pos = {v: i for i, v in enumerate(net.inputs)}
        self.z: list[Number] = [0] * V
        self.y: list[Number] = [0] * V
        self._fc: dict = {}
        self._dfc: dict = {}

    # ------------------------------------------------------------ passes
    def forward(self, inputs) -> Number:
        """Outputs of all vertices for one net input vector (±1 entries); the net's output."""
        net, w, src = self.net, self.net.w, self.net.src
        z, y = self.z, self.y
        for v in range(len(net.names)):
            if self.clamped[v]:
                y[v] = 1 if v == net.const else int(inputs[self.input_pos[v]])
                continue
            acc = 0
            for e in self.in_edges[v]:
                yu = y[src[e]]
                if _is_zero(yu):
                    continue
                term = w[e] * yu
                if self.kf[e] != 1:
                    term = self.kf[e] * term
                acc = term if _is_zero(acc) else acc + term
            acc = _norm(acc)
            z[v] = acc
            y[v] = _f(acc, self._fc)
        return y[net.out]

    def backward(self, label: Number) -> dict[int, Number]:
        """dL/dw for every edge with a nonzero gradient (all others are exactly 0)."""
        net, w, dst = self.net, self.net.w, self.net.dst
        z, y = self.z, self.y
        V = len(net.names)
        delta: list[Number] = [0] * V
        out = net.out
        delta[out] = _norm(_df(z[out], self._dfc) * 2 * (y[out] - label))
        for v in range(V - 1, -1, -1):
            if v == out or self.clamped[v]:
                continue
            live = [e for e in self.out_edges[v] if not _is_zero(delta[dst[e]])]
            if not live:
                continue
            d = _df(z[v], self._dfc)
            if _is_zero(d):
                continue
            acc = 0
            for e in live:
                term = w[e] * delta[dst[e]]
                if self.kb[e] != 1:
                    term = self.kb[e] * term
                acc = term if _is_zero(acc) else acc + term
            delta[v] = _norm(d * acc)
        grads = {}
        for v in range(V):
            if _is_zero(delta[v]):
                continue
            for e in self.in_edges[v]:
                g = _norm(y[net.src[e]] * delta[v])
                if not _is_zero(g):
                    grads[e] = g
        return grads

    def step(self, inputs, label: Number) -> tuple[Number, dict[int, Number]]:
        """One SGD step: forward, backward, ``w <- w - gamma dL/dw``.  Returns (output, grads)."""
        out = self.forward(inputs)
        grads = self.backward(label)
        w = self.net.w
        for e, g in grads.items():
            w[e] = _norm(w[e] - self.gamma * g)
        self._grads = grads
        return out, grads

    def predict(self, inputs) -> int:
        """The net's answer (0/1) for one input vector, without training."""
        out = self.forward(inputs)
        return 1 if out > 0 else 0

    # the training loop's interface (shared with :class:`.levels.LevelEngine`)
    def stream(self, rows, labels):
        """SGD on the samples in order, lazily: yields each step's output."""
        for z, label in zip(rows, labels):
            yield self.step(z, label)[0]

    def last_grads(self) -> dict[int, Number]:
        return self._grads

    def predict_rows(self, rows) -> list[int]:
        return [self.predict(z) for z in rows]

    def memory_bits(self) -> list[int]:
        return self.net.memory_bits()

    def changed_outside_gadgets(self) -> list[int]:
        """Edges outside the copies of M_s with a nonzero gradient in the last step, or
        whose weight differs from its value when the engine was made."""
        bad = {e for e in self._grads if e not in self._gadget}
        return sorted(bad | {e for e, w0 in self._frozen if self.net.w[e] != w0})

    def sync(self) -> None:
        """Nothing to do: this engine updates ``net.w`` in place."""


# ---------------------------------------------------------------- training with checks
@dataclass
class Mismatch:
    step: int  # 1-based
    what: str  # "output", "memory", "weights", "value"
    detail: str


@dataclass
class TrainReport:
    steps: int
    outputs: list[int] = field(default_factory=list)  # the net's y*_t (0/1)
    memory_changes: list[int] = field(default_factory=list)  # steps (1-based) where memory changed
    correct: int = 0  # steps where the net's output equalled the label
    mismatch: Mismatch | None = None
    seconds: float = 0.0

    @property
    def samples_used(self) -> int:
        """The step of the last memory change: the samples the net needed to reach its
        final memory (0 if it never changed)."""
        return self.memory_changes[-1] if self.memory_changes else 0

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else float("nan")


def net_inputs(xs, rs, r2s) -> np.ndarray:
    """Theorem 4's net input ``(2x - 1, 2r - 1, 2r' - 1)`` as int rows [T, n + k]."""
    xs = np.asarray(xs, dtype=np.int64)
    T = xs.shape[0]
    rs = np.zeros((T, 0), np.int64) if rs is None else np.asarray(rs, dtype=np.int64).reshape(T, -1)
    r2s = np.zeros((T, 0), np.int64) if r2s is None else np.asarray(r2s, dtype=np.int64).reshape(T, -1)
    return 2 * np.concatenate([xs, rs, r2s], axis=1) - 1


def prepare_stream(lr, xs, ys, rs, r2s):
    """The learner's reference run (:func:`run_learner`) and the net inputs of a stream:
    ``(ref, Z, ys)`` with ``Z`` Theorem 4's ±1 rows and ``ys`` bool.  Shared by the exact
    and the float64 engine."""
    xs = np.asarray(xs, dtype=bool)
    ys = np.asarray(ys, dtype=bool)
    T = xs.shape[0]
    rs_a = None if not lr.random else np.asarray(rs, dtype=bool).reshape(T, -1)
    r2_a = None if not lr.coin else np.asarray(r2s, dtype=bool).reshape(T)
    ref = run_learner(lr, xs, ys, rs_a, r2_a)
    Z = net_inputs(xs, rs_a, None if r2_a is None else r2_a[:, None])
    return ref, Z, ys


class StepChecker:
    """The per-step comparison with the learner (module doc), shared by the engines: call
    :meth:`step` after each SGD step with the net's output and a function decoding its
    memory, and :meth:`weights` with the names of changed non-M_s weights; both return
    False (and set ``report.mismatch``) at the first mismatch."""

    def __init__(self, lr, ref, ys, memory0: list[int], progress=None) -> None:
        self.lr, self.ref, self.ys = lr, ref, ys
        self.report = TrainReport(0)
        self.mem = list(memory0)
        self.recent: list[int] = []
        self.progress = progress
        self.t0 = time.perf_counter()

    def step(self, t: int, out, memory: Callable[[], list[int]]) -> bool:
        """Step ``t`` (0-based): the output must be ±1 and equal the learner's y*, the decoded
        memory the learner's b_t."""
        rep, lr = self.report, self.lr
        rep.steps = t + 1
        if out not in (1, -1):
            rep.mismatch = Mismatch(t + 1, "value", f"the net output {out!r}, not ±1 (Lemma 3)")
            return False
        bit = 1 if out == 1 else 0
        rep.outputs.append(bit)
        ok = bit == int(self.ys[t])
        rep.correct += ok
        self.recent = (self.recent + [ok])[-100:]
        if bit != int(self.ref.outputs[t]):
            rep.mismatch = Mismatch(t + 1, "output", f"the net output {2 * bit - 1:+d}, the learner's "
                                    f"y* is {int(self.ref.outputs[t])}")
            return False
        new = memory()
        want = self.ref.memories[t].astype(int).tolist()
        if new != want:
            diff = [lr.memory[i] for i in range(lr.m) if new[i] != want[i]]
            rep.mismatch = Mismatch(t + 1, "memory", f"decoded memory differs from the learner's at "
                                    f"{', '.join(diff[:8])}{' ...' if len(diff) > 8 else ''}")
            return False
        if new != self.mem:
            rep.memory_changes.append(t + 1)
            self.mem = new
        return True

    def weights(self, t: int, bad: list[str]) -> bool:
        """``bad``: the edges (``u -> v``) outside the M_s copies that changed at step t."""
        if bad:
            self.report.mismatch = Mismatch(t + 1, "weights", f"{len(bad)} weight(s) outside the M_s copies "
                                            f"changed, e.g. {bad[0]}")
            return False
        return True

    def not_exact(self, t: int, e: ArithmeticError) -> None:
        """Step ``t`` (0-based) could not be computed exactly (``e``): the weights are not
        Lemma 3's (a perturbed gadget weight puts a value where the activation has no
        exact form), reported as that step's mismatch."""
        self.report.steps = t + 1
        self.report.mismatch = Mismatch(t + 1, "value", f"the exact engine cannot compute this step ({str(e)[:120]}...); "
                                        "the weights are not the construction's")

    def tick(self, t: int) -> None:
        if self.progress is not None:
            self.progress(t + 1, sum(self.recent) / len(self.recent))

    def finish(self) -> TrainReport:
        self.report.seconds = time.perf_counter() - self.t0
        return self.report


def train(net: Net, xs, ys, rs=None, r2s=None, *, check_weights: bool = True,
          progress: Callable[[int, float], None] | None = None, engine=None) -> TrainReport:
    """Train ``net`` by SGD on the samples ``((2x-1, 2r-1, 2r'-1), 2y-1)`` (bits in), one
    step per sample, comparing with :func:`run_learner` after every step (module doc).

    ``engine``: a :class:`.levels.LevelEngine` (the default, made here) or the reference
    :class:`Engine`; the net's weights are up to date (``engine.sync()``) on return.
    ``rs``/``r2s`` may be ``None`` when the learner has no such bits.  ``progress(t, acc)``
    is called after each step with the running accuracy (output = label, last 100 steps)."""
    ref, Z, ys = prepare_stream(net.learner, xs, ys, rs, r2s)
    eng = engine or LevelEngine(net)
    chk = StepChecker(net.learner, ref, ys, eng.memory_bits(), progress)
    steps = eng.stream(Z, [1 if y else -1 for y in ys])
    t = 0
    try:
        while True:
            try:  # a number the exact engine cannot compute is a broken net: a mismatch at step t
                out = next(steps, None)
                if out is None or not chk.step(t, out, eng.memory_bits):
                    break
            except ArithmeticError as e:
                chk.not_exact(t, e)
                break
            if check_weights:
                bad = eng.changed_outside_gadgets()
                if not chk.weights(t, [f"{net.names[net.src[e]]} -> {net.names[net.dst[e]]}" for e in bad]):
                    break
            chk.tick(t)
            t += 1
    finally:
        eng.sync()
    return chk.finish()


def predict(net: Net, xs, rs=None, r2s=None, engine=None) -> np.ndarray:
    """The trained net's answers (bool [N]) on inputs ``xs`` [N, n] (random bits default 0)."""
    lr = net.learner
    xs = np.asarray(xs, dtype=bool)
    N = xs.shape[0]
    rs = np.zeros((N, len(lr.random)), bool) if rs is None else np.asarray(rs, bool).reshape(N, -1)
    r2s = np.zeros((N, len(lr.coin)), bool) if r2s is None else np.asarray(r2s, bool).reshape(N, -1)
    Z = net_inputs(xs, rs, r2s)
    eng = engine or LevelEngine(net)
    return np.asarray(eng.predict_rows(Z), dtype=np.int64).reshape(N) == 1


# ---------------------------------------------------------------- the `learn` verb
def learn(lr, xs, ys, rs, r2s, test_xs, test_ys, test_rs=None, test_r2s=None, *,
          progress: Callable[[int, str], None] | None = None) -> dict:
    """Build G_n for ``lr``, train on the stream, then predict the test inputs.

    Returns a dict: ``steps`` (SGD steps run), ``samples_used`` (the step of the last memory
    change, :attr:`TrainReport.samples_used`), ``test_accuracy``, ``mismatches`` (0 or 1:
    training stops at the first), ``test_inputs``, and for the human report
    ``memory_changes``, ``train_accuracy``, ``steps_per_second``, ``mismatch`` (text) and
    ``size`` (the rows of :meth:`.net.Net.size_report`)."""
    net = build_net(lr)
    eng = LevelEngine(net)
    T = len(xs)

    def on_step(t, acc):
        if progress is not None:
            progress(t, f"training (running accuracy {acc:.2f})")

    rep = train(net, xs, ys, rs, r2s, progress=on_step, engine=eng)
    acc = held_out_accuracy(lr, rep, eng.predict_rows, test_xs, test_ys, test_rs, test_r2s, chunk=100,
                            progress=None if progress is None else (lambda i, msg: progress(T + i, msg)))
    return learn_summary(rep, acc, len(test_xs), net.size_report())


def held_out_inputs(lr, test_xs, test_rs=None, test_r2s=None) -> np.ndarray:
    """Theorem 4's ±1 rows for test points (random bits default 0)."""
    N = len(test_xs)
    rs_t = np.zeros((N, len(lr.random)), bool) if test_rs is None else np.asarray(test_rs, bool).reshape(N, -1)
    r2_t = np.zeros((N, len(lr.coin)), bool) if test_r2s is None else np.asarray(test_r2s, bool).reshape(N, -1)
    return net_inputs(np.asarray(test_xs, bool).reshape(N, -1), rs_t, r2_t)


def held_out_accuracy(lr, rep: TrainReport, predict_rows, test_xs, test_ys, test_rs=None, test_r2s=None,
                  progress=None, chunk: int = 10) -> float:
    """Accuracy of ``predict_rows(Z) -> 0/1 answers`` on the test points (NaN after a
    mismatch or with no test points); ``progress(i, text)`` every ``chunk`` points."""
    N = len(test_xs)
    if rep.mismatch is not None or not N:
        return float("nan")
    Z = held_out_inputs(lr, test_xs, test_rs, test_r2s)
    right = 0
    for i in range(0, N, chunk):
        got = predict_rows(Z[i:i + chunk])
        right += sum(int(a) == int(b) for a, b in zip(got, test_ys[i:i + chunk]))
        done = min(N, i + chunk)
        if progress is not None:
            progress(done, f"testing (accuracy {right / done:.3f})")
    return right / N


def learn_summary(rep: TrainReport, acc: float, n_test: int, size) -> dict:
    """The dict :func:`learn` returns (shared with the float64 engine's learn)."""
    mm = rep.mismatch
    return {
        "steps": rep.steps,
        "samples_used": rep.samples_used,
        "test_accuracy": acc,
        "mismatches": 0 if mm is None else 1,
        "test_inputs": n_test,
        "memory_changes": len(rep.memory_changes),
        "train_accuracy": rep.correct / rep.steps if rep.steps else float("nan"),
        "steps_per_second": rep.steps_per_second,
        "mismatch": None if mm is None else f"step {mm.step}: {mm.what} mismatch: {mm.detail}",
        "size": size,
    }


__all__ = ["Engine", "Mismatch", "TrainReport", "StepChecker", "prepare_stream", "train", "predict", "net_inputs",
           "learn", "learn_summary", "held_out_accuracy", "held_out_inputs"]
