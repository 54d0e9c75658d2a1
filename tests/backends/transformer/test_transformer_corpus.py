"""The transformer backend on 200 busy-beaver machines from ../shared/corpus (slow):
every step to halting matches the interpreter, in torch with hard-max, in onnxruntime,
on the index engine, and with softmax attention at beta = SOFTMAX_BETA.

All but one of the 200 halt within 289 steps, and they run to halting on every engine.
The exception halts at step 6,445 (2x4 ``1RB3LA1LA1RA_2LA1RZ3LA3RB``): a dense decoder
scans every past step, so its run costs O(T^2): it took half the test's time.  It runs
to halting on the index engine with hard-max (tests/backends/transformer/test_index_engine.py proves step by
step that this engine computes the torch module's function) and in onnxruntime with
softmax (the longest softmax run, where the error bound i·e^{-beta} of docs/transformer.md
"Softmax" is largest); torch (both attentions) and onnxruntime with hard-max run its first
DENSE_STEPS steps."""

from __future__ import annotations

import random

import pytest

from tests.backends.transformer.test_transformer import compile_tf, corpus_machines, engines
from tm2nn.verify import verify_compiled

STEMS = ("2x2", "2x3", "2x4", "3x2", "4x2")
SOFTMAX_BETA = 20.0
#: the dense engines' step bound: above every sampled machine's halting step but one (289)
DENSE_STEPS = 300


def sample(n: int = 200, seed: int = 4):
    rows = [(stem, *r) for stem in STEMS for r in corpus_machines(stem)]
    return random.Random(seed).sample(rows, n)


def check(m, steps: int, mode: str, only: list[str] | None = None) -> None:
    """``m`` compiled for ``steps`` with ``mode`` attention, verified from the blank tape
    on ``only``, else on every engine it runs on (onnxruntime for hard-max only)."""
    c = compile_tf(m, steps=steps, attention=mode, beta=SOFTMAX_BETA)
    rep = verify_compiled(c, inputs=[""], engines=only or engines(c, use_onnx=(mode == "hardmax")))
    assert rep.ok and rep.n_inputs == 1, (m.name, steps, mode, rep.first)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_200_corpus_machines_every_step(chunk):
    for _stem, m, steps, _sigma in sample()[chunk::4]:
        for mode in ("hardmax", "softmax"):
            if steps < DENSE_STEPS:  # to halting, on every engine
                check(m, steps + 1, mode)
                continue
            check(m, steps + 1, mode, ["index"] if mode == "hardmax" else ["onnxruntime"])
            check(m, DENSE_STEPS, mode, ["torch", "onnxruntime"] if mode == "hardmax" else ["torch"])


def test_one_sampled_machine_runs_past_the_dense_bound():
    """The long branch above is taken, for the one machine the module doc names."""
    steps = sorted(r[2] for r in sample())
    assert steps[-1] == 6445 and steps[-2] < DENSE_STEPS
