"""rcnn learner mode, ``tm2nn learn`` (Goel et al., Algorithm 1 and Corollary 2): SGD on
the memory layer with Lemma 4 checked exactly after every example (:mod:`.learner`), or
Corollary 2's restarts drawn from ``U_s`` and selected on a validation set
(:mod:`.algorithm1`); then the trained net against the interpreter on fresh points."""

from __future__ import annotations

import numpy as np

from tm2nn.backends.protocol import Learned
from tm2nn.backends.rcnn.algorithm1 import algorithm1, format_report, partial_candidate
from tm2nn.backends.rcnn.learner import run as learn_run
from tm2nn.backends.rcnn.learner_form import parse_parts
from tm2nn.datasets import declared_target
from tm2nn.errors import Tm2nnError
from tm2nn.learners.targets import parse_target


def sign_target(spec: str, d: int):
    """``--target`` for ±1 data: :func:`tm2nn.learners.targets.parse_target`'s function of
    bits, with a feature or label ``x = (−1)^bit`` (so ``parity:S`` is ``∏_{i∈S} x_i``)."""
    t = parse_target(spec, d)
    return lambda xs: 1 - 2 * t((1 - np.asarray(xs, dtype=np.int64)) // 2).astype(np.int64)


def learn(ir, opts, *, data: dict, source_path=None, progress=None, models=(), device=None) -> Learned:
    """Algorithm 1 on a learner machine (:func:`tm2nn.backends.rcnn.learner.run`):
    SGD on the memory layer, Lemma 4 checked exactly after every example, then the
    trained net against the interpreter on fresh points.  ``opts`` are the validated
    :class:`~.backend.LearnOptions`; ``data`` holds the training (and validation) sets;
    the net trains on ``device`` (default: the CPU)."""
    X, Y = data["train"]
    if opts.restarts:
        return _restarts(ir, opts, X, Y, data["validation"], progress, device)
    target, target_spec = _target(opts, X, Y)
    fraction = opts.random_fraction or 0.0
    drawn = partial_candidate(ir, fraction, opts.seed) if fraction > 0 else None
    m1, unit = X.shape[0] + 1, 100  # one bar: the m + 1 SGD steps, the net's steps, the interpreter

    def cb(phase, done, n):
        base, frac = {"train": (0, done / n), "test": (m1, done / n), "reference": (m1 + unit, done / n)}[phase]
        progress(base + (int(frac * m1) if phase == "train" else int(frac * unit)), m1 + 2 * unit)
    rep = learn_run(ir, X, Y, test=opts.test, seed=opts.seed, steps=opts.steps, work=opts.work,
                    progress=cb if progress else None, target=target, device=device,
                    filter_body=None if drawn is None else drawn.body, head_body=None if drawn is None else drawn.head,
                    parts=parse_parts(opts.sgd_on))
    ok = rep["memorized"] and rep["test_agreement"] == 1.0
    yes = "[green]yes[/]" if rep["memorized"] else "[red]no[/]"
    lines = [f"{rep['examples']} examples of {rep['features']} features, memorized: {yes}"]
    lines += [f"  {k.replace('_', ' ')}: {rep[k]}" for k in ("states", "d_rc", "grid", "steps", "filter_steps",
                                                              "working_columns", "max_w_error",
                                                              "max_memorization_output", "max_prediction_error",
                                                              "train_seconds", "test_seconds")]
    if drawn is not None:
        lines.append(f"  random fraction: {fraction:g} ({drawn.randomised:,} stored weights drawn from U_s, "
                     f"{drawn.changed:,} of them differ from the planted ones; seed {opts.seed})")
    tr = rep["_trained"]
    for part in tr.grad_max:
        lines.append(f"  {part}: largest gradient entry {max(tr.grad_max[part]):.3g}, "
                     f"moved at most {max(tr.moved[part]):.3g} from its start")
    colour = "green" if ok else "red"
    lines.append(f"agreement with the interpreter on {opts.test} fresh points: "
                 f"[{colour}]{rep['test_agreement']:.4f}[/]")
    keys = ["examples", "memorized", "test_agreement"]
    if target is not None:  # from --target or the training set's '# target:' line
        keys.append("test_error")
        lines.append(f"error against the target {target_spec} on the same points: {rep['test_error']:.4f}")
    summary = {k: rep[k] for k in keys}
    if drawn is not None:
        summary.update(random_fraction=fraction, randomised=drawn.randomised, changed=drawn.changed)
    return Learned(summary, ok, lines)


def _target(opts, X, Y):
    """``--target``, or else the training CSV's ``# target:`` line (checked against its
    labels: a set labelled by another function is an error at that line)."""
    if opts.target is not None:
        return sign_target(opts.target, X.shape[1]), opts.target
    found = declared_target(opts.train)
    if found is None:
        return None, None
    spec, line, col, text = found
    try:
        fn = sign_target(spec, X.shape[1])
    except Tm2nnError as e:
        raise Tm2nnError(e.message, file=opts.train, line=line, col=col, snippet=text) from None
    bad = np.flatnonzero(fn(X) != Y)
    if bad.size:
        raise Tm2nnError(f"the training set declares 'target: {spec}', but example {bad[0] + 1} is not "
                         "labelled by it", file=opts.train, line=line, col=col, snippet=text)
    return fn, spec


def _restarts(ir, opts, X, Y, val, progress, device=None) -> Learned:
    """Corollary 2 around Algorithm 1 (:func:`tm2nn.backends.rcnn.algorithm1.algorithm1`):
    ``opts.restarts`` draws from U_s, each trained and scored on the validation set."""
    Xv, Yv = val
    if Xv.shape[1] != X.shape[1]:
        raise Tm2nnError(f"the validation set has {Xv.shape[1]} features, the training set {X.shape[1]}",
                         file=opts.validation)
    rep = algorithm1(ir, X, Y, Xv, Yv, restarts=opts.restarts, seed=opts.seed,
                     offer_planted=opts.offer_planted, steps=opts.steps, work=opts.work, device=device,
                     fraction=1.0 if opts.random_fraction is None else opts.random_fraction,
                     parts=parse_parts(opts.sgd_on),
                     progress=(lambda i, n: progress(i, n)) if progress else None)
    ch = rep["chosen"]
    ok = ch is not None and ch["memorized"] and ch["validation_error"] == 0.0
    summary = {"examples": rep["examples"], "restarts": rep["restarts"],
               "chosen": None if ch is None else ch["label"],
               "validation_error": None if ch is None else ch["validation_error"],
               "log10_success_probability": rep["theorem1"]["log10_success_support"]}
    return Learned(summary, ok, format_report(rep))
