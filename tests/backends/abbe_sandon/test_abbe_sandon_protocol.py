"""abbe-sandon as a construction of the protocol: it takes learners (§4.1 and §4.2), trains
with exports, sizes the exact nets without building them, has no reference to verify
against (its trainer checks every step), and importing it loads neither torch nor onnx."""

from __future__ import annotations

import pytest

import tm2nn
from tm2nn import backends
from tm2nn.backends.abbe_sandon.backend import BACKEND
from tm2nn.backends.protocol import Backend
from tm2nn.ir import Learner, NoisyLearner
from tm2nn.options import OptionError

from ...conftest import EXAMPLES


def test_declares_the_protocol():
    assert isinstance(BACKEND, Backend) and backends.get("abbe-sandon") is BACKEND
    assert BACKEND.takes == (Learner, NoisyLearner) and BACKEND.trainer.takes == (Learner, NoisyLearner)
    assert BACKEND.trainer.exports == ("before", "after")
    assert BACKEND.has("size_estimate") and not BACKEND.has("margin") and BACKEND.stepping is None
    assert [e.file for e in BACKEND.examples] == ["parity8.circ"]


def test_size_estimate_and_no_reference():
    lr = tm2nn.load(EXAMPLES / "parity8.circ")
    size = BACKEND.analysis("size_estimate")
    assert size(lr, BACKEND.options()).rows and size(lr, BACKEND.options(engine="float64")) is None
    assert size(tm2nn.load(EXAMPLES / "noisy_parity3.circ"), BACKEND.options()).rows
    c = tm2nn.compile(lr, "abbe-sandon", engine="float64")
    with pytest.raises(OptionError, match="tm2nn learn"):
        BACKEND.reference(c)
    assert c.check(["000000000"]) is None
