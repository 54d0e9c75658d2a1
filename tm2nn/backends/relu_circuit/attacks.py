"""All-layer margin of relu-circuit nets: attacks (upper bounds), and the margin report.

Wei, Chen & Ma's all-layer margin (eq. 2.1) and its per-layer version are defined in
:mod:`.margin`, which bounds them from below.  Here:

* :func:`empirical_margin` — attacks (random directions, and a gradient attack) giving
  upper bounds: a reported ``ε`` was seen to flip an output bit.  Per layer by default;
  ``joint=True`` spends one ℓ2 budget on all parameters, which is eq. (2.1)'s ρ, so
  ``certified ≤ ρ ≤ joint attack`` brackets it.
* :func:`perturbed_outputs` — the net's outputs under one random perturbation of size ε.
* :func:`margin_report` — with and without corrections: (D.5), the certified radius and
  the attacks; :func:`margin_table` — the backend's ``margin`` analysis (``tm2nn margin``).
* :func:`statistics_bracket` — the backend's ``statistics_bracket`` analysis: ℓ_γ (eq. 2.2)
  on a dataset, between the certified margin and the joint attacks.

The attacks run the emitted torch module (``to_torch(net, torch.float64)``) and never
touch the compiled net: they wrap each affine submodule's ``fm`` on a fresh module, on
a ``device`` (default: the CPU; the random directions are drawn on the CPU and moved, so
a seed gives the same directions everywhere).  The random attack may run its forward
passes on the fused engine instead (``fused-float``, the same perturbation added in its
kernel; CPU only).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from tm2nn import threads
from tm2nn.backends.protocol import Model, Table
from tm2nn.backends.relu_circuit import certify
from tm2nn.backends.relu_circuit.build import compile_circuit, unroll_machine
from tm2nn.backends.relu_circuit.codec import encode_tapes, encoding
from tm2nn.backends.relu_circuit.layered_engine import LayeredEngine
from tm2nn.backends.relu_circuit.layers import blocks
from tm2nn.backends.relu_circuit.margin import certified_margin, certified_radius, theorem_d6_bound
from tm2nn.backends.relu_circuit.options import Options
from tm2nn.devices import check_engine_device, torch_device
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.errors import Tm2nnError
from tm2nn.interp import eval_circuit, exhaustive_inputs, random_inputs
from tm2nn.ir import Circuit
from tm2nn.limits import check_float, check_int, check_memory, check_seed
from tm2nn.options import OptionError
from tm2nn.verify.check import EXHAUSTIVE_LIMIT, InputSpace
from tm2nn.verify.statistics import bracketed, load_dataset


class _Perturbed:
    """A fresh float64 torch module whose affine ops add a perturbation effect ``t``.

    For one input, the cheapest parameter change of an affine layer with (perturbed)
    input h̃ that adds ``t`` to its output is ``ΔW = t h̃ᵀ/(‖h̃‖²+1), Δb = t/(‖h̃‖²+1)``,
    of norm ``‖t‖/sqrt(‖h̃‖²+1)``; every parameter change acts through such a ``t``.  So
    ``t = ε·sqrt(‖h̃‖²+1)·a`` with ``Σ_(ℓ in block) ‖a_ℓ‖² ≤ 1`` ranges over exactly the
    perturbations with block norm ≤ ε (per input, as in eq. 2.1).  With ``joint`` the
    whole net is one block: ``Σ_ℓ ‖a_ℓ‖² ≤ 1`` over every layer, so the perturbation's
    norm ``sqrt(Σ_B ‖δ_B‖²)`` is ≤ ε (eq. 2.1's ‖δ‖₂ itself).  ``mode="dense"`` instead
    applies one explicit dense (ΔW, Δb) to every input.
    """

    def __init__(self, compiled: Model, joint: bool = False, device=None):
        self.torch = torch
        self.device = torch_device(device)
        self.module = to_torch(compiled.net, torch.float64, self.device)
        self.blocks = blocks(compiled.net)
        self.names = [op.name for b in self.blocks for op in b.affines]
        self.block_of = [0 if joint else bi for bi, b in enumerate(self.blocks) for _ in b.affines]
        self.shapes = {op.name: op.weight.shape for b in self.blocks for op in b.affines}
        self.mode = "aligned"
        self.eps = None  # [R]
        self.a: dict[str, object] = {}  # aligned: name -> [n_out, R]
        self.dense: dict[str, tuple] = {}  # dense: name -> (ΔW, Δb)
        for name in self.names:
            mod = self.module.op(name)
            mod.fm = self._wrap(name, mod.fm)
        self.fused = None  # the fused engine the aligned runs use instead (:meth:`use`)
        self._stacked: tuple = (None, None)

    def use(self, engine: str, net) -> None:
        """Run the aligned perturbations on ``engine``: ``torch`` (this module) or
        ``fused-float`` (:mod:`.layered_engine` in float64, the same
        perturbation added in its kernel).  Gradients need torch: a gradient step always
        runs the module."""
        if engine == "fused-float":
            check_engine_device(engine, self.device.type)
            self.fused = LayeredEngine.for_net(net, "float", np.float64)
        elif engine != "torch":
            raise Tm2nnError(f"the margin attacks run on torch or fused-float, not {engine!r}")

    def _wrap(self, name, fm):
        torch = self.torch

        def fm_perturbed(x):
            z = fm(x)
            if self.mode == "dense":
                dw, db = self.dense[name]
                return z + (dw @ x + db[:, None])
            scale = self.eps * torch.sqrt((x * x).sum(0) + 1.0)  # [R]
            return z + self.a[name] * scale[None, :]
        return fm_perturbed

    def run(self, x):
        torch = self.torch
        if self.fused is None or self.mode != "aligned" or torch.is_grad_enabled():
            return self.module(x)
        if self._stacked[0] is not self.a:  # the directions, stacked in net order once per set
            self._stacked = (self.a, torch.cat([self.a[n] for n in self.names]).numpy())
        return torch.from_numpy(self.fused.run_perturbed(x.numpy(), self._stacked[1], self.eps.numpy()))

    def random_directions(self, rows: int, gen) -> dict:
        """Uniformly random unit vectors over each block's stacked a's, one per row."""
        torch = self.torch
        a = {n: torch.randn((self.shapes[n][0], rows), generator=gen, dtype=torch.float64).to(self.device)
             for n in self.names}
        return self.normalise(a, project=False)

    def normalise(self, a: dict, project: bool = True) -> dict:
        """Scale each block to norm 1 (or, with ``project``, into the unit ball), per row."""
        torch = self.torch
        sq: dict[int, object] = {}
        for n, bi in zip(self.names, self.block_of):
            sq[bi] = sq.get(bi, 0.0) + (a[n] ** 2).sum(0)
        out = {}
        for n, bi in zip(self.names, self.block_of):
            norm = torch.sqrt(sq[bi]).clamp_min(1e-300)
            f = (1.0 / norm).clamp_max(1.0) if project else 1.0 / norm
            out[n] = a[n] * f[None, :]
        return out


def _labels(compiled: Model, x: np.ndarray) -> np.ndarray:
    """The labels G(x): the circuit interpreter's outputs (a non-circuit source falls back
    to the unperturbed net's decoded outputs)."""
    if isinstance(compiled.source, Circuit):
        return eval_circuit(compiled.source, x.astype(bool))
    y = run_torch(to_torch(compiled.net, torch.float64), x.astype(np.float64))
    return y > compiled.output_encoding.get("threshold", 0.5)


def perturbed_outputs(compiled: Model, inputs: np.ndarray, eps: float, *, seed: int = 0,
                      kind: str = "aligned", joint: bool = False) -> np.ndarray:
    """Outputs (float64, [n, n_out]) after perturbing every block by exactly ``eps`` (with
    ``joint``: the whole parameter vector, ``‖δ‖₂ = eps``):

    * ``kind="aligned"``: a random direction per input, the rank-one form of
      :class:`_Perturbed` (the strongest random directions);
    * ``kind="dense"``: one dense Gaussian (ΔW, Δb) per block, the same for every input
      (a genuine θ + δ; only for small nets).
    """
    P = _Perturbed(compiled, joint=joint)
    x = torch.as_tensor(np.asarray(inputs, dtype=np.float64))
    gen = torch.Generator().manual_seed(seed)
    if kind == "dense":
        total = sum(m * (n + 1) for m, n in P.shapes.values())
        if total > 50_000_000:
            raise ValueError(f"a dense perturbation would have {total} entries")
        raw = {n: (torch.randn(P.shapes[n], generator=gen, dtype=torch.float64),
                   torch.randn(P.shapes[n][0], generator=gen, dtype=torch.float64))
               for n in P.names}
        sq: dict[int, float] = {}
        for n, bi in zip(P.names, P.block_of):
            sq[bi] = sq.get(bi, 0.0) + float((raw[n][0] ** 2).sum() + (raw[n][1] ** 2).sum())
        P.mode = "dense"
        P.dense = {n: (raw[n][0] * eps / math.sqrt(sq[bi]), raw[n][1] * eps / math.sqrt(sq[bi]))
                   for n, bi in zip(P.names, P.block_of)}
    elif kind == "aligned":
        P.a = P.random_directions(x.shape[0], gen)
        P.eps = torch.full((x.shape[0],), float(eps), dtype=torch.float64)
    else:
        raise ValueError(f"unknown perturbation kind {kind!r}")
    with torch.no_grad():
        return P.run(x).numpy()


def empirical_margin(compiled: Model, inputs: np.ndarray, *, seed: int = 0, trials: int = 8,
                     method: str = "random", steps: int = 150, max_eps: float = 8.0,
                     eps0: float | None = None, joint: bool = False,
                     labels: np.ndarray | None = None, engine: str = "torch", device=None,
                     deadline: float | None = None) -> dict:
    """Upper bounds on the per-layer all-layer margin on ``inputs`` (0/1, [n, n_inputs]):
    the smallest ε found such that perturbing every block by ≤ ε flips some output bit of
    some input.  Every reported ε was seen to flip (``inf`` if nothing flipped up to
    ``max_eps``); ``per_input`` holds each input's smallest.

    With ``joint`` the budget is one ℓ2 ball over all parameters, ``‖δ‖₂ ≤ ε`` (eq. 2.1):
    each reported ε is then an upper bound on Wei's ρ(θ, x, y) itself, and with the
    certified radius it brackets ρ: ``certified ≤ ρ ≤ joint attack``.  ``labels`` (0/1,
    [n, n_outputs]) are the y to flip away from (default: the circuit's outputs); an
    input whose unperturbed output is already not its label gets ε = 0.

    * ``method="random"``: ``trials`` random directions per input (rank-one, aligned with
      each layer's input; see :class:`_Perturbed`), bisection on ε along each direction;
    * ``method="gradient"``: ``trials`` random starts per input, then ``steps`` projected
      gradient steps on the directions that maximise the wrong-side amount of the worst
      output bit, with ε shrunk after each step that flips and grown after each that
      does not (a decoupled direction/norm attack), starting from ``eps0`` (default
      ``max_eps/8``); the smallest flipping ε is kept.

    ``engine``: where the random attack's forward passes run, ``torch`` or ``fused-float``
    (the same directions and bisection; the gradient attack runs in torch).  ``device``:
    where the torch module and the attack's tensors live (default: the CPU).  ``deadline``
    (a ``time.perf_counter()`` value): the bisections or gradient steps stop there (every
    ε reported still flipped); ``iterations_done`` of ``iterations`` say what it cut.
    """
    threads.use_torch()  # the tensors are small (tm2nn.threads)
    return _attack(compiled, inputs, seed, trials, method, steps, max_eps, eps0, joint, labels, engine, device,
                   deadline)


def _attack(compiled, inputs, seed, trials, method, steps, max_eps, eps0, joint=False, labels=None,
            engine="torch", device=None, deadline=None) -> dict:
    t0 = time.perf_counter()
    iterations, done = (24 if method == "random" else steps), 0

    def late() -> bool:
        return deadline is not None and time.perf_counter() >= deadline

    x_np = np.asarray(inputs)
    if labels is None:
        labels = _labels(compiled, x_np)
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.shape[0] != x_np.shape[0]:
        raise Tm2nnError(f"labels must have shape [n_inputs, n_outputs] = [{x_np.shape[0]}, ...], got {labels.shape}")
    thr = float(compiled.output_encoding.get("threshold", 0.5))
    P = _Perturbed(compiled, joint=joint, device=device)
    dev = P.device
    want = torch.as_tensor(labels.astype(bool)).to(dev)
    P.use(engine, compiled.net)
    if not P.names or want.shape[1] == 0:
        return {"method": method, "joint": joint, "eps": math.inf, "input": None,
                "per_input": np.full(x_np.shape[0], math.inf), "seconds": 0.0}
    rows = x_np.shape[0] * trials
    # per row: a direction and an activation per affine output (x ~8 with the gradient
    # attack's graph, leaves and gradients), float64
    width = sum(P.shapes[n][0] for n in P.names) + x_np.shape[1]
    check_memory(rows * width * 8 * 8, f"the {method} attack on {x_np.shape[0]:,} inputs x {trials:,} trials "
                 f"({width:,} units each)", ("samples", "trials"))
    x = torch.as_tensor(np.repeat(x_np.astype(np.float64), trials, axis=0)).to(dev)
    w = want.repeat_interleave(trials, 0)
    sign = w.to(torch.float64) * 2 - 1
    gen = torch.Generator().manual_seed(seed)
    if deadline is not None:  # the budget is for the attack: the set-up (numba's first compile) is not in it
        deadline += time.perf_counter() - t0

    def flipped(y):
        return ((y > thr) != w).any(1)

    best = torch.full((rows,), math.inf, dtype=torch.float64, device=dev)
    if method == "random":
        P.a = P.random_directions(rows, gen)
        with torch.no_grad():
            P.eps = torch.zeros(rows, dtype=torch.float64, device=dev)
            unperturbed_wrong = flipped(P.run(x))
            best[unperturbed_wrong] = 0.0
            hi = torch.full((rows,), float(max_eps), dtype=torch.float64, device=dev)
            P.eps = hi
            ok_hi = flipped(P.run(x)) & ~unperturbed_wrong
            lo = hi * 1e-6
            for _ in range(iterations):
                if late():  # hi still flips: a looser upper bound
                    break
                done += 1
                mid = torch.sqrt(lo * hi)
                P.eps = mid
                f = flipped(P.run(x))
                hi = torch.where(f, mid, hi)
                lo = torch.where(f, lo, mid)
            best = torch.where(ok_hi, hi, best)
    elif method == "gradient":
        a = P.random_directions(rows, gen)
        start = float(eps0) if eps0 and math.isfinite(eps0) else float(max_eps) / 8
        eps = torch.full((rows,), min(start, max_eps), dtype=torch.float64, device=dev)
        with torch.no_grad():
            P.a, P.eps = a, torch.zeros(rows, dtype=torch.float64, device=dev)
            best[flipped(P.run(x))] = 0.0
        for step in range(steps):
            if late():
                break
            done += 1
            gamma = 0.02 + 0.18 * 0.5 * (1 + math.cos(math.pi * step / max(steps, 1)))
            leaves = {n: v.detach().requires_grad_(True) for n, v in a.items()}
            P.a, P.eps = leaves, eps
            y = P.run(x)
            margin = sign * (y - thr)  # > 0: right side
            with torch.no_grad():
                f = flipped(y)
                best = torch.where(f, torch.minimum(best, eps), best)
            loss = (0.05 * torch.logsumexp(-margin / 0.05, dim=1)).sum()
            grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
            with torch.no_grad():
                g = {n: (gr if gr is not None else torch.zeros_like(leaves[n]))
                     for n, gr in zip(leaves, grads)}
                g = P.normalise(g, project=False)
                a = P.normalise({n: leaves[n] + 0.2 * g[n] for n in leaves}, project=True)
                eps = torch.where(f, eps * (1 - gamma), eps * (1 + gamma)).clamp(max=max_eps)
        with torch.no_grad():  # the final iterate
            P.a, P.eps = a, eps
            f = flipped(P.run(x))
            best = torch.where(f, torch.minimum(best, eps), best)
    else:
        raise ValueError(f"unknown method {method!r}")
    per_input = best.view(x_np.shape[0], trials).min(1).values
    i = int(torch.argmin(per_input))
    e = float(per_input[i])
    return {
        "method": method,
        "joint": joint,
        "eps": e,
        "input": "".join("1" if v else "0" for v in x_np[i].astype(bool)) if math.isfinite(e) else None,
        "per_input": per_input.cpu().numpy(),
        "trials": trials,
        "iterations": iterations,
        "iterations_done": done,
        "seconds": time.perf_counter() - t0,
    }


def margin_report(circuit: Circuit, inputs: np.ndarray, *, seed: int = 0, trials: int = 8,
                  steps: int = 150, pm_one_output: bool = False, engines=("torch",), device=None,
                  budget: float | None = None) -> list[dict]:
    """With and without corrections: (D.5) (:func:`theorem_d6_bound`), the certified radius,
    and the per-layer and joint (ℓ2 over all parameters, eq. 2.1) attacks, random and
    gradient.  ``(D.5), certified ≤ ρ_layer ≤ eps_random, eps_gradient`` and ``certified ≤ ρ
    ≤ eps_joint_random, eps_joint_gradient``.  A row per engine the random attacks run on
    (``engines``: torch, fused-float); the gradient attacks run in torch, once.  The torch
    attacks run on ``device`` (default: the CPU); the bounds are computed on the CPU.
    ``budget``: seconds for all the attacks (None: no limit), an equal share of what is left
    to each, counted from the end of each attack's set-up (the fused-float engine's first
    numba compile can take seconds on a busy machine); a row's ``attacked`` says how many
    bisections or steps each attack did."""
    out = []
    end = None if budget is None else time.perf_counter() + check_float("budget", budget, 0.0, open_low=True)
    left = [2 * (2 * len(engines) + 2)]  # attacks still to run

    def deadline():
        left[0] -= 1
        return None if end is None else time.perf_counter() + (end - time.perf_counter()) / (left[0] + 1)

    for corr in (True, False):
        comp = compile_circuit(circuit, Options(corrections=corr, pm_one_output=pm_one_output))
        t0 = time.perf_counter()
        cert = certified_radius(comp)
        d5 = theorem_d6_bound(comp)
        rnd = {(e, j): empirical_margin(comp, inputs, seed=seed, trials=trials, method="random", joint=j,
                                        engine=e, device=device, deadline=deadline()) for e in engines for j in (False, True)}
        grd = {j: empirical_margin(comp, inputs, seed=seed, trials=max(1, trials // 4), method="gradient",
                                   steps=steps, eps0=rnd[engines[0], j]["eps"], joint=j, device=device,
                                   deadline=deadline()) for j in (False, True)}
        done = {f"{'joint ' if j else ''}random ({e})": r for (e, j), r in rnd.items()}
        done.update({f"{'joint ' if j else ''}gradient": r for j, r in grd.items()})
        attacked = {k: {"iterations_done": r.get("iterations_done", 0), "iterations": r.get("iterations", 0)}
                    for k, r in done.items()}
        rnd = {k: r["eps"] for k, r in rnd.items()}
        grd = {k: r["eps"] for k, r in grd.items()}
        for e in engines:
            att = {"eps_random": rnd[e, False], "eps_gradient": grd[False],
                   "eps_joint_random": rnd[e, True], "eps_joint_gradient": grd[True]}
            out.append({"circuit": circuit.name, "engine": e, "corrections": corr,
                        "layers": comp.options["layers"], "width": comp.options["width"],
                        "d5": d5["d5"], "d5_binding": d5["binding"],
                        "certified": cert["radius"], "certified_chain": cert["radius_chain"],
                        "certified_local": cert["radius_local"], **att,
                        "rho_upper": min(att["eps_joint_random"], att["eps_joint_gradient"]),
                        "seconds": time.perf_counter() - t0, "budget": budget, "attacked": attacked,
                        "complete": all(a["iterations_done"] == a["iterations"] for a in attacked.values())})
    return out


def margin_table(ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None, device=None,
                 budget: float | None = None) -> Table:
    """The ``margin`` analysis (``tm2nn margin``): Wei-Chen-Ma's all-layer margin, per layer
    (:mod:`.margin`, :func:`margin_report`): the certified lower bound and two attacks, with
    and without corrections, on the circuit or the unrolled machine's circuit; the random
    attacks on each of ``engines`` (torch, fused-float; default torch), the torch ones on
    ``device`` (default: the CPU; fused-float runs on the CPU only)."""
    samples, trials = check_int("samples", samples, 1), check_int("trials", trials, 1)
    seed = check_seed("seed", seed)
    engines = tuple(dict.fromkeys(engines or ("torch",)))
    bad = [e for e in engines if e not in ("torch", "fused-float")]
    if bad:
        raise OptionError(f"the margin attacks run on torch or fused-float (real-valued perturbations), "
                          f"not {{engines}} {bad[0]!r}", "engines")
    for e in engines:
        check_engine_device(e, device)
    torch_device(device)
    if isinstance(ir, Circuit):
        circuit = ir
        n = len(circuit.inputs)
        if n > 10:
            check_memory(2 * samples * n, f"{samples:,} random inputs of {n} bits", ("samples",))
        x = exhaustive_inputs(n) if n <= 10 else random_inputs(n, samples, seed)
    else:
        circuit, layout = unroll_machine(ir, opts)
        tapes, _, _ = InputSpace(layout.alphabet, 0, layout.tape - layout.origin, EXHAUSTIVE_LIMIT).pick(samples, seed)
        x = encode_tapes(encoding(layout), tapes[:samples]) > 0.5
    rows = margin_report(circuit, x, seed=seed, trials=trials, pm_one_output=opts.pm_one_output, engines=engines,
                         device=device, budget=budget)
    which = ["engine"] if len(engines) > 1 else []
    cut = [f"{'on' if r['corrections'] else 'off'}: {k} {a['iterations_done']}/{a['iterations']}"
           for r in rows[::len(engines)] for k, a in r["attacked"].items() if a["iterations_done"] < a["iterations"]]
    return Table(f"all-layer margin, {len(x)} inputs: (D.5), certified <= per-layer margin <= per-layer "
                 "attacks; certified <= rho (eq. 2.1, one l2 ball over all parameters) <= joint attacks"
                 + ("" if engines == ("torch",) else f"; random attacks on {', '.join(engines)}")
                 + (f"; the {budget:g} s budget cut the attacks (bisections/steps done: {', '.join(cut)}): raise "
                    "--budget" if cut else ""),
                 which + ["corrections", "layers", "(D.5) Thm D.6 (lower)", "certified (lower)",
                  "per-layer gradient (upper)", "per-layer random (upper)", "joint gradient (upper)",
                  "joint random (upper)"],
                 [[r["engine"]] * bool(which) + ["on" if r["corrections"] else "off", str(r["layers"]), f"{r['d5']:.3g}",
                   f"{r['certified']:.3g}", f"{r['eps_gradient']:.3g}", f"{r['eps_random']:.3g}",
                   f"{r['eps_joint_gradient']:.3g}", f"{r['eps_joint_random']:.3g}"] for r in rows], json=rows)


def statistics_bracket(compiled, dataset, gamma: float, *, seed: int = 0, trials: int = 4, steps: int = 60,
                       delta: float = 0.01) -> dict:
    """The ``statistics_bracket`` analysis (:func:`tm2nn.verify.statistics.surrogate_loss_on`
    for a circuit model): the mean ℓ_γ (eq. 2.2) on ``dataset`` bracketed by ρ_lower, the
    certified margin (:func:`.margin.certified_margin`, valid at every binary input) where
    the net's output equals the label and 0 where it does not, and ρ_upper, the smallest
    joint ℓ2 perturbation the attacks (random directions and the gradient attack,
    ``trials`` starts each, :func:`empirical_margin`) found to flip some output bit."""
    X, Y = load_dataset(compiled, dataset)
    thr = float(compiled.output_encoding.get("threshold", 0.5))
    pred = run_torch(compiled.module(), X.astype(np.float32)) > thr
    agree = (pred == Y).all(1)
    cert = float(certified_margin(compiled)["radius"])
    upper = np.full(len(X), math.inf)
    for method in ("random", "gradient"):
        att = empirical_margin(compiled, X, seed=seed, trials=trials, method=method, steps=steps,
                               joint=True, labels=pred)
        upper = np.minimum(upper, att["per_input"])
    return bracketed(compiled, gamma, agree, cert, upper, delta)


def margin_attack(compiled: Model, *, samples: int = 64, trials: int = 8, seed: int = 0, deadline=None,
                  device=None) -> dict:
    """The ``margin_attack`` analysis: the random-direction attack (:func:`empirical_margin`,
    per layer) on these weights, on ``samples`` inputs of the certificate's input space
    (:func:`.certify.input_space`, labels from the interpreter): an upper bound next to the
    certified radius of a loaded or trained model."""
    x, labels, _ = certify.input_space(compiled, seed)
    if len(x) > samples:
        pick = np.random.default_rng(seed).choice(len(x), samples, replace=False)
        x, labels = x[pick], labels[pick]
    r = empirical_margin(compiled, x, seed=seed, trials=trials, method="random", labels=labels, device=device,
                         deadline=deadline)
    return {"eps": r["eps"], "method": "random", "inputs": len(x)}
