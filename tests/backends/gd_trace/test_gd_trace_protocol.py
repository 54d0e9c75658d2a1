"""gd-trace as a construction of the protocol: what it declares (torch only, a step bound
that ``run`` sets, a trainer with exports, a refusal of 2D machines, its demo rows), and
that importing it loads neither torch nor onnx (``tm2nn --help`` lists every backend)."""

from __future__ import annotations

import pytest

from tm2nn import backends
from tm2nn.backends.gd_trace.backend import BACKEND
from tm2nn.backends.protocol import Backend
from tm2nn.errors import Tm2nnError
from tm2nn.ir import GridMachine, Machine

from ...conftest import EXAMPLES


def test_declares_the_protocol():
    assert isinstance(BACKEND, Backend) and backends.get("gd-trace") is BACKEND
    assert BACKEND.engines == ("torch",) and not BACKEND.fused
    assert BACKEND.stepping.option == "steps" and BACKEND.stepping.default == 100
    assert BACKEND.stepping.options_for({"steps": 5}, ["ab", "abcd"]) == {"max_input": 4, "steps": 5}
    assert BACKEND.trainer.exports == ("before", "after") and BACKEND.trainer.takes == (Machine,)
    assert BACKEND.has("configurations") and not BACKEND.has("margin")
    assert [e.file for e in BACKEND.examples] == ["bb3.tm", "sign_sum_3x2.tm"]
    for e in BACKEND.examples:
        assert (EXAMPLES / e.file).is_file()


def test_check_ir_refuses_a_grid_machine():
    from tm2nn.syntax import load

    grid = load(EXAMPLES / "grid_copy_down.tm")
    assert isinstance(grid, GridMachine)
    with pytest.raises(Tm2nnError, match="line machines"):
        BACKEND.check_source(grid)
