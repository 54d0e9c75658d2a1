"""The layering pass: every edge goes from layer i to i+1 and the function is unchanged."""

from hypothesis import given, settings

from tests.strategies import circuits
from tm2nn.interp import truth_table
from tm2nn.ir import Circuit, Gate
from tm2nn.passes.layering import layer_circuit


def check_layered(c):
    lc = layer_circuit(c)
    produced = set(lc.inputs)
    for layer in lc.layers:
        for g in layer:
            assert set(g.inputs) <= produced, (g, "reads outside the previous layer")
        produced = {g.name for g in layer}
    assert set(lc.outputs) <= produced
    assert lc.depth == max(1, c.depth) if c.gates else True
    return lc


@settings(max_examples=200, deadline=None)
@given(circuits())
def test_layering_is_strict_and_preserves_function(c):
    lc = check_layered(c)
    assert (truth_table(lc.to_circuit()) == truth_table(c)).all()


def test_identity_gates_carry_skipping_edges():
    c = Circuit("c", ("a", "b"), ("o",), (
        Gate("n1", "NOT", ("a",)), Gate("n2", "NOT", ("n1",)), Gate("o", "AND", ("n2", "b"))))
    lc = check_layered(c)
    assert lc.widths == [2, 2, 2, 1]
    assert lc.identity_gates == 2  # b carried through layers 1 and 2
    assert [g.op for g in lc.layers[2]] == ["AND"]
