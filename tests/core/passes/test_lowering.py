"""passes.lowering: a run read back from decoded configurations."""

import pytest

from tests.conftest import EXAMPLES
from tm2nn.errors import Tm2nnError
from tm2nn.interp import configurations, run_machine
from tm2nn.passes.lowering import result_from_configurations
from tm2nn.syntax import load


def _configurations(m, text: str, steps: int):
    r = run_machine(m, text, steps, trace=True)
    return r, [(k, q, h, dict(c)) for k, q, h, c in configurations(r)]


@pytest.mark.parametrize("name, text", [("bb3.tm", ""), ("binary_increment.tm", "1011"), ("palindrome.tm", "0110")])
def test_the_interpreters_configurations_read_back_as_its_run(name, text):
    m = load(EXAMPLES / name)
    r, good = _configurations(m, text, 60)
    assert result_from_configurations(m, text, good, r.halted) == r


def test_configurations_that_write_away_from_the_head_are_no_run():
    """A decoded tape that changed away from the head (a network's stray write) is refused
    at its step, even when a later step undoes it: the trace records the head's cell only
    and would hide it."""
    m = load(EXAMPLES / "bb3.tm")
    r, good = _configurations(m, "", 30)
    bad = [(k, q, h, dict(c)) for k, q, h, c in good]
    far = max(h for _k, _q, h, _c in good) + 5
    bad[3][3][far] = "1"  # a cell no head reaches, written at step 3 and gone at step 4
    with pytest.raises(Tm2nnError, match=r"step 3: the decoded tape changed at cell .* away from the head"):
        result_from_configurations(m, "", bad, r.halted)
