"""Options whose default is a neutral value (1, 0, the identity), tested at a value where
they act (issue 36, point 13): a test at the default alone cannot see the option's effect
dropped (Welper's step size 1/γ was dropped in gd-trace machine mode and 196 tests passed).
Each test here compares a non-neutral value with the reference (the backend's verify, or
the interpreter); dropping the option's effect fails it (checked by planting each mutation
named in the table).

Every backend's options (``tm2nn.backends.get(name).Options`` and its trainer's), their
defaults, and where a neutral default is tested away from it:

| backend | option | default | neutral? | tested at | mutation it catches |
|---|---|---|---|---|---|
| gd-trace | gamma | 1.0 | yes (1) | 2.5 and 0.5, machine mode | T, H steps at rate 1 instead of 1/γ (22); γ dropped from the weights (17) |
| gd-trace | c | 0.0 | yes (0) | 3.0 and -2.0, machine mode | c dropped from the loss net's bias (21) |
| gd-trace | b | None (smallest b of (18)) | no | | |
| gd-trace | steps, max_input, max_dim, extended | 100, None, 200000, None | no (sizes; extended is set by learn) | | |
| gd-trace learn | test, seed | 20, 0 | no (a count; a seed names a draw) | | |
| relu-circuit | pm_one_output | False (identity output map) | yes (identity) | True | the final z -> 2z - 1 dropped |
| relu-circuit | corrections | True | no (a switch, on by default) | | |
| relu-circuit | steps, tape, origin, max_gates | None, 2T+1, N//2, 5e6 | no (sizes and a position) | | |
| transformer | attention, beta, corrections, shared_history, correction_placement, cls_readout, steps | hardmax, 10, True, True, groups, False, None | no (choices and switches; cls_readout=False adds nothing rather than an identity) | | |
| rcnn | steps, max_input | None, None | no (sizes) | | |
| rcnn learn | work | 1 | yes (1) | not here: see the module's closing note | |
| rcnn learn | restarts, offer_planted, test, seed, train, target, validation, steps, sgd_on | 0, False, 100, 0, ..., memory | no (switches, counts, a seed, data, a choice) | | |
| rcnn learn | random_fraction | None (0; 1 with restarts) | yes (0: nothing drawn) | 0.002, 0.05, 1 (tests/backends/rcnn/test_rcnn_goel_odds.py) | a draw that randomises nothing, or everything |
| abbe-sandon | engine | exact | no (a choice) | | |
| abbe-sandon learn | noise, seed, test, steps, samples, target, engine | None, 0, 1000, ... | no (None: a noisy learner (§4.2) then draws uniform noise; a §4.1 learner takes no noise) | | |

Closing note: rcnn's learner option ``work`` (default 1 working column) is the one neutral
default not tested away from it here.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import tm2nn
from tm2nn.interp import eval_circuit
from tm2nn.syntax import load

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("options", [{"gamma": 2.5}, {"gamma": 0.5}, {"c": 3.0}, {"gamma": 0.5, "c": -2.0}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_gd_trace_gamma_and_c_in_machine_mode(options):
    """γ scales the weights (17) and sets the plain steps' rate 1/γ (22); c shifts the
    loss (21) and with it the bounds (23) verify checks at every iterate."""
    m = load(EXAMPLES / "bb3.tm")
    c = tm2nn.compile(m, "gd-trace", steps=4, **options)
    assert c.input_encoding["gamma"] == options.get("gamma", 1.0)
    assert c.input_encoding["c"] == options.get("c", 0.0)
    rep = c.verify(inputs=["", "1", "11"])
    assert rep.ok, rep.first
    assert rep.max_deviation["torch"] == 0.0


def test_relu_circuit_pm_one_output():
    """With pm_one_output every output is exactly 2z - 1 of the circuit's bit z (±1)."""
    circ = load(EXAMPLES / "full_adder.circ")
    comp = tm2nn.compile(circ, "relu-circuit", pm_one_output=True)
    x = np.array(list(itertools.product((0, 1), repeat=len(circ.inputs))), dtype=np.int64)
    want = 2 * eval_circuit(circ, x).astype(np.float64) - 1
    for engine in ("torch", "onnxruntime"):
        y = np.asarray(comp.runner(engine)(x.astype(np.float32)), dtype=np.float64)
        assert np.abs(y - want).max() < 1e-5, engine
    assert comp.verify().ok
