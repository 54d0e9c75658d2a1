"""The transformer backend on 200 busy-beaver machines from ../shared/corpus (slow):
every step to halting matches the interpreter, in torch with hard-max, in onnxruntime,
on the index engine, and in torch with softmax attention at beta = SOFTMAX_BETA."""

from __future__ import annotations

import random

import pytest

from tests.test_transformer import corpus_machines, engines
from tm2nn.backends.transformer import compile as compile_tf
from tm2nn.verify import verify_compiled

STEMS = ("2x2", "2x3", "2x4", "3x2", "4x2")
SOFTMAX_BETA = 20.0


def sample(n: int = 200, seed: int = 4):
    rows = [(stem, *r) for stem in STEMS for r in corpus_machines(stem)]
    return random.Random(seed).sample(rows, n)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_200_corpus_machines_every_step(chunk):
    for stem, m, steps, _sigma in sample()[chunk::4]:
        for mode in ("hardmax", "softmax"):
            c = compile_tf(m, steps=steps + 1, attention=mode, beta=SOFTMAX_BETA)
            rep = verify_compiled(c, inputs=[""], engines=engines(c, use_onnx=(mode == "hardmax")))
            assert rep.ok, (stem, m.name, mode, rep.first)
