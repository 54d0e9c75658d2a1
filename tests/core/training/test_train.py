"""``tm2nn train`` (issue 38, Deliver 1): the acceptance pair for relu-circuit (in
process), ``verify`` agreeing with the reported test error, the mutation tests (a loop
that never updates; a test error computed on training inputs), bad input and Ctrl-C."""

from __future__ import annotations

import json

import pytest
import torch

from tm2nn import interrupt
from tm2nn.api import load_model, train
from tm2nn.cli import main
from tm2nn.training import data as data_mod
from tm2nn.training import loop as loop_mod

ADDER = "examples/full_adder.circ"
MAJ = "examples/majority5.circ"


def _train(**kw):
    kw = {"backend": "relu-circuit", "epochs": 3, "margin": False, **kw}
    return train(kw.pop("source", ADDER), **kw)


def test_acceptance_relu_circuit_verify_confirms_test_error(tmp_path):
    """issue 38's acceptance: the reported (exhaustive) test error is what verify finds."""
    res = _train(init="perturbed:0.05", samples=256, margin=True)
    out = tmp_path / "t.safetensors"
    res.model.save(out)
    rep = load_model(out).verify(onnx=False)
    assert rep.mode == "exhaustive"
    assert rep.engines["torch"] / rep.n_inputs == pytest.approx(res.summary["test_error"])
    wrong = rep.engines["torch"]  # the certificate's precondition: a wrong net is not certified, with the count
    want = f"not certified: wrong on {wrong} of {rep.n_inputs} inputs" if wrong else None
    got = res.summary["certified_margin"]
    assert got == want if wrong else (isinstance(got, float) and got > 0)
    assert isinstance(res.summary["lemma23"], dict) and res.summary["lemma23"]["n"] > 0
    assert load_model(out).build["trained"]["init"] == "perturbed:0.05"


def test_construction_start_is_exact_and_every_format_loads(tmp_path):
    res = _train(init="construction", epochs=1, mask="wiring", lr=1e-6)
    assert res.summary["start"]["test_error"] == 0 and res.summary["start"]["l2"] == 0
    for suffix in (".safetensors", ".pt", ".onnx"):
        out = tmp_path / f"t{suffix}"
        res.model.save(out)
        assert load_model(out).verify().ok


def test_training_moves_toward_the_construction():
    """From a perturbed start the loss falls; SGD with a never-updating step fails this."""
    res = _train(source=MAJ, init="perturbed:0.02", samples=128, epochs=4, lr=3e-3, mask="wiring")
    first, last = res.summary["epochs"][0], res.summary["epochs"][-1]
    assert last["loss"] < first["loss"]
    assert res.summary["best"]["l2"] != first["l2"]


def test_mutation_optimizer_that_never_steps_fails(monkeypatch):
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: None)
    with pytest.raises(AssertionError):
        test_training_moves_toward_the_construction()


def test_test_inputs_are_disjoint_and_the_error_is_theirs():
    """The test set never holds a training input (random draws too), and the held-out
    error is recomputed independently, by verify against the interpreter, on those inputs."""
    res = _train(source=MAJ, init="perturbed:0.05", samples=8, test=64, epochs=1)
    d, s = res.draws, res.summary
    assert s["test_mode"] == "exhaustive" and data_mod.overlap(d) == 0 and s["overlap"] == 0
    assert sorted(set(d.train) | set(d.test)) == sorted(d.space)
    rep = res.model.verify(inputs=d.test, onnx=False)
    assert rep.engines["torch"] / len(d.test) == pytest.approx(s["held_out_error"])
    rnd = _train(source=MAJ, samples=8, test=12, epochs=0)
    assert rnd.summary["test_mode"] == "random" and data_mod.overlap(rnd.draws) == 0


def test_mutation_test_draws_that_reuse_training_inputs_fail(monkeypatch):
    from tm2nn.training import session

    def leaky(space, samples, test, seed, **kw):
        d = data_mod.draw(space, samples, test, seed, **kw)
        d.test = list(dict.fromkeys(d.train))  # the test error computed on training inputs
        return d
    monkeypatch.setattr(session, "draw", leaky)
    with pytest.raises(AssertionError):
        test_test_inputs_are_disjoint_and_the_error_is_theirs()


@pytest.mark.parametrize("argv, msg", [
    (["--init", "warm"], "choose construction, perturbed:EPS or scratch"),
    (["--init", "perturbed:0"], "EPS must be a finite number > 0"),
    (["--init", "perturbed:-1"], "EPS must be a finite number > 0"),
    (["--backend", "rcnn"], "does not train in its own architecture"),
])
def test_bad_input_exits_2(capsys, argv, msg):
    assert main(["train", ADDER, *argv, "--epochs", "0"]) == 2
    assert msg in capsys.readouterr().err


def test_ctrl_c_keeps_the_best_weights(monkeypatch, tmp_path):
    """A Ctrl-C during epoch 2 ends the run; the weights kept are the best epoch's."""
    calls = {"n": 0}
    real = loop_mod.distance

    def on_measure(task):
        calls["n"] += 1
        if calls["n"] == 2:  # after epoch 1 is measured: the next step sees Ctrl-C
            monkeypatch.setattr(interrupt, "requested", lambda: True)
        return real(task)
    monkeypatch.setattr(loop_mod, "distance", on_measure)
    res = _train(init="construction", epochs=5, lr=0.5, optimizer="sgd")
    s = res.summary
    assert s["interrupted"] and s["epochs_run"] == 2
    assert s["best"]["epoch"] == 0 and s["test_error"] == 0  # the exact start beat the wrecked epochs
    out = tmp_path / "t.pt"
    res.model.save(out)
    assert load_model(out).verify(onnx=False).ok


def test_cli_json(tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    assert main(["train", ADDER, "--backend", "relu-circuit", "--epochs", "1", "--no-margin", "-o", str(out),
                 "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["output"] == str(out) and out.exists()


def test_acceptance_transformer_bb3_teacher_forced(tmp_path):
    """issue 38's acceptance for the transformer (bb3, T = 12, softmax): the reported test
    error is what verify finds on the same inputs, and the saved model loads as bb3's
    construction with trained weights."""
    res = train("examples/bb3.tm", "transformer", steps=12, init="perturbed:0.01", samples=16, test=24, epochs=1,
                batch=16, margin=False)
    s = res.summary
    assert s["test_mode"] == "random" and s["overlap"] == 0 and s["epochs_run"] == 1
    assert isinstance(s["lemma23"], dict) and s["lemma23"]["n"] > 0  # the hard-max class's n
    out = tmp_path / "t.safetensors"
    res.model.save(out)
    loaded = load_model(out)
    assert loaded.edited and loaded.build["trained"]["samples"] == 16
    rep = loaded.verify(inputs=res.draws.test, onnx=False)
    assert rep.engines["torch"] / len(res.draws.test) == pytest.approx(s["test_error"])


def test_pad_width_keeps_the_function_and_is_not_saved(capsys, tmp_path):
    """--pad-width K: the padded construction computes the same function (its extra units
    start at zero, also under noise), a scratch start fills them; it is not saved."""
    res = _train(init="construction", epochs=0, pad_width=4)
    assert res.summary["test_error"] == 0 and res.model is None and "padded to 4·" in res.summary["what"]
    noisy = _train(init="perturbed:0.01", epochs=0, pad_width=4)
    assert noisy.summary["start"]["l2"] < 0.01 * 60  # the padding stayed zero: noise on the original entries only
    assert main(["train", ADDER, "--pad-width", "4", "--epochs", "0", "-o", str(tmp_path / "p.safetensors")]) == 2
    assert "not the construction's shape" in capsys.readouterr().err


def test_memory_is_estimated_before_allocating(capsys):
    assert main(["train", ADDER, "--pad-width", "100000", "--epochs", "0"]) == 2
    err = capsys.readouterr().err
    assert "training" in err and "weights of the relu-circuit net would need about" in err and "--pad-width" in err


def test_pt_needs_the_wiring_mask(capsys, tmp_path):
    """A .pt holds the construction's packed entries: --mask all is refused up front."""
    assert main(["train", ADDER, "--epochs", "0", "-o", str(tmp_path / "t.pt")]) == 2
    assert "--mask wiring" in capsys.readouterr().err and not (tmp_path / "t.pt").exists()


def _transformer_start_loss() -> float:
    res = train("examples/bb3.tm", "transformer", steps=12, init="construction", samples=4, test=4, epochs=0,
                margin=False)
    return res.summary["start"]["loss"]


def test_teacher_forcing_feeds_step_i_the_teachers_o_i_minus_1(monkeypatch):
    """At the construction, teacher-forced taps are the teacher's own: loss 0.  A teacher
    input one step off (o_i for step i) is caught."""
    assert _transformer_start_loss() < 1e-12
    from tm2nn.backends.transformer import train as ttrain

    monkeypatch.setattr(ttrain, "teacher_input", lambda o, i: o[min(i, o.shape[0] - 1)])
    assert _transformer_start_loss() > 1e-6


def test_updates_is_a_fixed_step_budget_whatever_the_samples(monkeypatch):
    """--updates N: exactly N optimizer steps, many epochs of few samples or part of one epoch
    of many (docs/learning.md, table b's design); the training error is measured on at most
    TRAIN_PROBE training inputs."""
    steps, measured = [], []
    real_step, real_rate = torch.optim.Adam.step, loop_mod._rate
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: steps.append(1) or real_step(self, closure))
    monkeypatch.setattr(loop_mod, "_rate", lambda errs: measured.append(errs[3]) or real_rate(errs))
    few = _train(source=MAJ, samples=8, batch=4, epochs=50, updates=7, init="scratch", test=4).summary
    assert (few["updates"], few["stopped_by"], few["epochs_run"], len(steps)) == (7, "updates", 4, 7)
    monkeypatch.setattr(loop_mod, "TRAIN_PROBE", 5)
    measured.clear()
    from tm2nn.training import session
    real_fit, losses = session.fit, []

    def fit(task, *a, **k):  # the loss sees batches of 4 and the probe, never all 40 inputs
        inner = task.loss
        task.loss = lambda texts: losses.append(len(texts)) or inner(texts)
        return real_fit(task, *a, **k)
    monkeypatch.setattr(session, "fit", fit)
    many = _train(source=MAJ, samples=40, batch=4, epochs=1, updates=3, test=4, init="scratch").summary
    assert (many["updates"], many["stopped_by"], many["train_error_inputs"]) == (3, "updates", 5)
    assert sorted(set(measured)) == [4, 5]  # the test inputs and the probe, never all 40 training inputs
    assert sorted(set(losses)) == [4, 5]


def test_sample_is_the_random_stream_drawn_at_once():
    """InputSpace.sample(seed, n) == the first n of random(seed): fixed length (the numpy
    path), several symbols (rejection in the bounded draw), variable length (the fallback)."""
    import itertools

    from tm2nn.verify.check import InputSpace
    for syms, lo, hi in (("01", 20, 20), ("abc", 6, 6), ("01", 1, 4), ("01", 0, 0)):
        sp = InputSpace(syms, lo, hi, 1 << 16)
        assert sp.sample([7, 0], 300) == list(itertools.islice(sp.random([7, 0]), 300))
