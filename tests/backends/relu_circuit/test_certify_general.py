"""Certificates for any weights of the relu-circuit construction's shape (issue 38, Deliver 2):
the correctness precondition, the general bound next to the tight one, soundness against
the attacks, and the model-file path (docs/relu_circuit.md, "A certificate for any weights")."""

import dataclasses
import json

import numpy as np
import pytest

import tm2nn
from tests.conftest import EXAMPLES
from tests.noise import noisy_nodes
from tm2nn.api import load_model
from tm2nn.backends.relu_circuit import certify
from tm2nn.backends.relu_circuit.attacks import empirical_margin
from tm2nn.backends.relu_circuit.margin import certified_radius
from tm2nn.cli import main
from tm2nn.emit.torch_emit import run_torch
from tm2nn.interp import eval_circuit, exhaustive_inputs


def perturbed(comp, scale: float, seed: int = 0):
    """``comp`` with Gaussian noise of ``scale`` on every stored weight and bias (a trained
    model's stand-in: the construction's shapes, not its weights)."""
    nodes = noisy_nodes(comp.net.nodes, scale, np.random.default_rng(seed))
    return dataclasses.replace(comp, net=dataclasses.replace(comp.net, nodes=nodes))


@pytest.fixture(scope="module")
def adder():
    return tm2nn.compile(EXAMPLES / "full_adder.circ", backend="relu-circuit")


def wrong_count(comp) -> int:
    """Inputs where the emitted torch module (not the certificate's numpy pass) decodes wrong."""
    x = exhaustive_inputs(len(comp.source.inputs))
    return int(np.any((run_torch(comp.net, x.astype(np.float64)) > 0.5) != eval_circuit(comp.source, x), 1).sum())


def assert_sound(comp, cert, trials=4):
    """No perturbation within the certified radius flips an output: the attacks' smallest
    flipping ε (random and gradient, labels from the interpreter) is at least the radius."""
    x = exhaustive_inputs(len(comp.source.inputs))
    labels = eval_circuit(comp.source, x)
    for method in ("random", "gradient"):
        eps = empirical_margin(comp, x, trials=trials, method=method, steps=40, labels=labels)["eps"]
        assert eps >= cert["radius"], (method, eps, cert["radius"])


def test_a_wrong_net_is_not_certified_with_its_count(adder):
    bad = perturbed(adder, 0.3)
    k = wrong_count(bad)
    assert 0 < k < 8
    r = certified_radius(bad)
    assert (r["certified"], r["wrong"], r["n"], r["radius"]) == (False, k, 8, 0.0)
    assert r["message"] == f"not certified: wrong on {k} of 8 inputs"


def test_mutation_without_the_precondition_a_wrong_net_gets_an_unsound_radius(adder, monkeypatch):
    """Disable the check (report every input right): the net is then 'certified' although it
    is wrong at δ = 0, and the soundness test catches it (an attack flips at ε = 0)."""
    bad = perturbed(adder, 0.3)
    assert wrong_count(bad) > 0
    real = certify.check_correct
    monkeypatch.setattr(certify, "check_correct", lambda *a, **k: (np.zeros(8, bool), real(*a, **k)[1]))
    cert = certified_radius(bad)
    assert cert["certified"] and cert["radius"] > 0
    with pytest.raises(AssertionError):
        assert_sound(bad, cert, trials=1)


def test_general_is_at_most_tight_on_the_construction_and_positive_when_perturbed(adder):
    for comp in (adder, tm2nn.compile(EXAMPLES / "full_adder.circ", backend="relu-circuit", corrections=False)):
        r = certified_radius(comp, general=True)
        assert r["weights"] == "the construction's" and r["radius"] == r["radius_tight"]
        assert 0 < r["radius_general"] <= r["radius_tight"]
        p = certified_radius(perturbed(comp, 1e-3))
        assert p["certified"] and p["radius_tight"] is None and p["radius"] == p["radius_general"] > 0
        assert p["radius"] > r["radius_general"] / 2  # the corrections still reset the error (Coordinatewise)


def test_attacks_never_break_within_the_radius_and_a_10x_radius_is_broken(adder):
    comp = perturbed(adder, 1e-3)
    cert = certified_radius(comp)
    assert_sound(comp, cert)
    with pytest.raises(AssertionError):  # mutation: a certificate 10 times too large
        assert_sound(comp, {**cert, "radius": 10 * cert["radius"]})


def test_margin_on_a_model_file_certifies_or_counts(adder, tmp_path, capsys):
    for name, scale, rc in (("ok", 1e-3, 0), ("bad", 0.3, 1)):
        m = perturbed(adder, scale)
        m.edited = "perturbed on purpose"
        path = tmp_path / f"{name}.safetensors"
        m.save(str(path))
        loaded = load_model(str(path))
        assert loaded.edited is not None
        cert = loaded.analysis("certified_margin")(loaded)
        assert cert["certified"] is (rc == 0)
        assert main(["margin", str(path), "--json", "--trials", "1", "--samples", "4"]) == rc
        row = json.loads(capsys.readouterr().out)
        if rc == 0:
            assert row["radius"] == cert["radius"] > 0 and row["radius_tight"] is None and row["attack"] >= row["radius"]
        else:
            assert (row["certified"], row["wrong"], row["n"]) == (False, wrong_count(m), 8)


def test_coordinatewise_oscillation_of_the_round_and_at_an_interior_kink():
    """Prop. 3.4's round 3φ(z − 1/3) − 3φ(z − 2/3): flat within 1/3 of a bit (oscillation 0,
    Definition D.1), 0.2 at radius 0.4 around 0; u(t) = φ(t) − 2φ(t − 1/2) on [−1, 1] peaks at
    its kink 1/2 (0.5), which the two ends alone (0 each) would miss."""
    from tm2nn.nets import SparseMatrix
    from tm2nn.verify.margin_toolkit import Coordinatewise

    A = SparseMatrix((2, 1), np.array([0, 1]), np.array([0, 0]), np.array([1.0, 1.0]))
    B = SparseMatrix((1, 2), np.array([0, 0]), np.array([0, 1]), np.array([3.0, -3.0]))
    rnd = Coordinatewise.of(A, np.array([-1 / 3, -2 / 3]), B, np.zeros(1))
    g = np.array([[0.0], [1.0], [0.0]])
    assert rnd.oscillation(g, np.array([1 / 3, 1 / 3, 0.4]))[:, 0] == pytest.approx([0.0, 0.0, 0.2])
    peak = Coordinatewise.of(A, np.array([0.0, -0.5]), dataclasses.replace(B, vals=np.array([1.0, -2.0])), np.zeros(1))
    assert peak.oscillation(np.zeros((1, 1)), np.array([1.0]))[0, 0] == pytest.approx(0.5)
    ends = np.maximum(peak.u(np.array([[-1.0], [1.0]])), 0.0)
    assert np.all(ends == 0.0)  # mutation: an oscillation read at the ends only would say 0
