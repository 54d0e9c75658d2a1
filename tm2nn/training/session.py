"""One ``tm2nn train`` run (issue 38, Deliver 1), given the compiled construction: draw the
inputs (:mod:`.data`), build the backend's :class:`~tm2nn.training.loop.Task`, set the
start (``--init``), train (:func:`.loop.fit`), and report every epoch's errors, distance to
the construction, certified margin (the backend's ``certified_margin`` analysis on the
current weights; a refusal is reported as ``n/a: <reason>``) and, once, Lemma 2.3's sample
bound for the construction's class (:func:`tm2nn.verify.statistics.statistics_report`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import torch

from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory
from tm2nn.threads import use_torch
from tm2nn.training import report
from tm2nn.training.data import draw, overlap
from tm2nn.training.loop import distance, fit, initialise
from tm2nn.training.options import TrainOptions
from tm2nn.training.params import outside_wiring
from tm2nn.verify.statistics import statistics_report


@dataclass
class Trained:
    """``summary`` (the ``--json`` line), ``lines`` (the human report), ``model`` (the best
    weights as a model of the construction's shape, a handle like the one given; None for a
    padded net) and ``epochs`` (the rows)."""

    summary: dict
    lines: list[str] = field(default_factory=list)
    model: object = None
    epochs: list = field(default_factory=list)
    #: the inputs drawn (:class:`tm2nn.training.data.Draws`)
    draws: object = None


def certified(compiled, model) -> object:
    """The certified margin of ``model``'s weights; ``"not certified: wrong on k of n
    inputs"`` when the net is wrong somewhere (the certificate's precondition); or
    ``"n/a: <reason>"`` where no certificate applies (softmax attention, a padded net)."""
    if model is None:
        return "n/a: a padded net is not the construction's shape"
    try:
        cert = compiled.spec.analysis("certified_margin")(model)
    except Tm2nnError as e:
        return f"n/a: {e.message}"
    return float(cert["radius"]) if cert.get("certified", True) else cert["message"]


#: Lemma 2.3's n per construction (backend, source hash, build): the bench and the tests train one
#: construction many times, and its certificate takes most of a small run's time
_BOUNDS: dict = {}


def lemma23(compiled, eps: float = 0.1) -> object:
    """Lemma 2.3's n for the construction's class (``statistics_report``), or why not."""
    key = (compiled.backend, compiled.source_sha256, json.dumps(compiled.build, sort_keys=True, default=str), eps)
    if key not in _BOUNDS:
        _BOUNDS[key] = _lemma23(compiled, eps)
    return _BOUNDS[key]


def _lemma23(compiled, eps: float) -> object:
    try:
        s = statistics_report(compiled, eps=eps)
    except Tm2nnError as e:
        return f"n/a: {e.message}"
    return {"n": s["n"], "eps": eps, "delta": s["delta"], "alpha": s["alpha"], "gamma": s["gamma"], "p": s["p"],
            "w": s["w"], "d": s["d"]}


def train(compiled, opts: TrainOptions, extra, *, progress=None, on_epoch=None, bound=None) -> Trained:
    """Train ``compiled`` (a :class:`tm2nn.handle.Compiled`) by its backend's training hook;
    ``bound``: the model whose class Lemma 2.3's n is computed for (default ``compiled``)."""
    spec = compiled.spec
    threads = use_torch()  # small per-step graphs: the STEP count (tm2nn.threads; --threads N)
    torch.manual_seed(opts.seed)
    task = spec.training.task(compiled, opts, extra)
    draws = draw(spec.reference(compiled).space(), opts.samples, opts.test, opts.seed)
    check_memory(opts.epochs * 4096, f"the report of {opts.epochs:,} epochs", ("epochs",))
    initialise(task, opts)
    handle = type(compiled).of

    def margin():
        m = task.model()
        return certified(compiled, handle(m) if m is not None else None)

    t0 = time.perf_counter()
    # inside tm2nn.interrupt.graceful (the CLI) the first Ctrl-C ends the epoch: the best weights are kept
    out = fit(task, opts, draws.train, draws.test, margin=margin if opts.margin else None,
              progress=progress, on_epoch=on_epoch)
    best, rows = out["best"], out["epochs"]
    space_error = None
    if draws.space is not None:
        wrong, _, _, n = task.errors(draws.space)
        space_error = wrong / n
    l2, mx = distance(task)
    model = task.model()
    model = handle(model) if model is not None else None
    if model is not None:
        model.build = {**model.build, "trained": {"init": opts.init, "seed": opts.seed, "samples": opts.samples,
                                                  "epochs": best.epoch, "optimizer": opts.optimizer,
                                                  "lr": opts.lr, "mask": opts.mask, "l2": l2, "max_abs": mx}}
    facts = {"source": compiled.source.name, "backend": compiled.backend, "what": task.what, "init": opts.init,
             "seed": opts.seed, "samples": opts.samples, "optimizer": opts.optimizer, "lr": opts.lr,
             "mask": opts.mask, "epochs_run": len(rows) - 1, "batch": opts.batch,
             "test_inputs": len(draws.test), "test_mode": draws.mode, "space_size": draws.size,
             "overlap": overlap(draws), "space_error": space_error, "interrupted": out["interrupted"], "stopped_by": out["stopped_by"],
             "updates": out["updates"], "train_error_inputs": out["train_probe"],
             "best": report.epoch_json(best), "start": report.epoch_json(out["start"]),
             "test_error": space_error if space_error is not None else best.test_error,
             "held_out_error": best.test_error, "train_error": best.train_error, "l2": l2, "max_abs": mx,
             "certified_margin": report.epoch_json(best)["certified_margin"],
             "lemma23": lemma23(bound if bound is not None else compiled), "seconds": round(time.perf_counter() - t0, 3), "threads": threads,
             "epochs": [report.epoch_json(r) for r in rows]}
    facts["outside_wiring"] = outside_wiring(model.net, compiled.net) if model is not None else None
    facts["exact"] = best.test_error == 0 and (space_error in (None, 0))
    return Trained(facts, report.lines(facts, rows), model, rows, draws)


__all__ = ["Trained", "train", "certified", "lemma23"]
