"""Every backend's compiled examples and an input for each, shared by the device and
gradient tests (issue 35): the examples and options of the ONNX pins
(:mod:`tests.core.test_onnx_pins`), compiled once per test process."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import torch

from tests.core.test_onnx_pins import EXAMPLES, PINS, compile_example
from tm2nn.nets import Loop, Net


@functools.cache
def example_pairs() -> tuple:
    """``((backend, example path), ...)``: every pair the ONNX pins hold (those that
    compile with the pins' options), each test compiling its own once per process
    (:func:`compiled`)."""
    pins = json.loads(PINS.read_text())
    return tuple((key.split(":", 1)[0], EXAMPLES / key.split(":", 1)[1]) for key in pins)


def ids() -> list[str]:
    return [f"{b}:{path.name}" for b, path in example_pairs()]


def compiled(backend: str, path):
    """The example compiled with the pins' options, once per process (the tests that use
    it are in the xdist group ``examples`` with the pins: one worker compiles each once)."""
    return compile_example(backend, path)


def one_trip(net: Net) -> Net:
    """The RCNN's step: its loop cut to one trip (Goel et al.'s filter applied once at
    every cell).  The loop runs its one body 35+ times; one trip reaches the same modules
    and tensors at a thirtieth of the cost (the loop's trips compose that step, and
    tests/core/emit/test_emit_grid.py checks the loop against the unrolled steps)."""
    nodes = tuple(dataclasses.replace(o, trips=1) if isinstance(o, Loop) else o for o in net.nodes)
    return Net(net.name, net.inputs, nodes, net.outputs, dict(net.metadata))


def sample_text(compiled) -> str:
    """One input the model takes: a machine's last symbol (a nonblank), else every bit of
    the bit codec, alternating."""
    alphabet = getattr(compiled.source, "alphabet", None)
    if alphabet is not None:
        return alphabet[-1]
    n = len(compiled.input_encoding["names"])
    return ("10" * n)[:n]


def sample_inputs(compiled, device=None) -> tuple[torch.Tensor, ...]:
    """The network's input tensors for :func:`sample_text` (on ``device``)."""
    x = compiled.encode([sample_text(compiled)])
    return tuple(torch.from_numpy(np.asarray(a)).to(device or "cpu") for a in (x if isinstance(x, tuple) else (x,)))


def as_tuple(y) -> tuple:
    return y if isinstance(y, tuple) else (y,)
