"""Goel et al.'s initialization set U_s (Lemma 2, Lemma 6, Corollary 3) for our filter:
built from s alone, it holds every weight and bias of every filter and head we plant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.strategies import machines, sign_grid_machines
from tm2nn import load
from tm2nn.backends.rcnn.bounds import bounds_rows, sample_machine, size_report
from tm2nn.backends.rcnn.filter_net import FilterNet, build_filter, bump_grid
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.backends.rcnn.head import build_head
from tm2nn.backends.rcnn.u_set import (
    cell_values,
    cor3_bound,
    membership,
    n_digits,
    parameters,
    state_code,
    u_set,
    u_set_parts,
)
from tm2nn.errors import Tm2nnError
from tm2nn.passes.binarise import binarise
from tm2nn.passes.rcnn_form import to_rcnn_form

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def filter_machine(m):
    """A machine whose filter the compiler plants: the B.1.2 form of a line machine, a
    learner as written, other grid machines binarised."""
    try:
        return to_rcnn_form(m).machine
    except Tm2nnError:
        pass
    try:
        machine_table(m)
        return m
    except Tm2nnError:
        return binarise(m).machine


def assert_in_u_set(net: FilterNet, U: np.ndarray | None = None):
    U = u_set(net.n_states) if U is None else U
    params = parameters(net, build_head())
    assert 0.0 in U
    for name, v in params.items():
        v = v[v != 0]
        bad = v[~np.isin(v, U)]
        assert bad.size == 0, f"{name}: {bad[:5]} not in U_s"
    return sum(v.size for v in params.values())


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.tm")), ids=lambda p: p.stem)
def test_every_example_filter_is_in_u_set(path):
    g = filter_machine(load(path))
    s = len(g.states)
    U = u_set(s)  # from s alone, before the machine's filter exists
    net = build_filter(machine_table(g))
    assert net.n_states == s
    assert assert_in_u_set(net, U) > 0
    assert membership(net)["all_in"]
    assert U.size <= cor3_bound(s) == 24 * (3 ** (net.n_digits - 1) + 1) + 5


def test_the_learner_example_is_in_u_set():
    g = load(EXAMPLES / "learner_match.tm")
    net = build_filter(machine_table(g))
    rep = membership(net)
    assert rep["all_in"] and rep["size"] == u_set(len(g.states)).size


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(grid=False, max_states=4, max_symbols=3))
def test_random_line_machines_in_rcnn_form_are_in_u_set(m):
    g = to_rcnn_form(m).machine
    assert_in_u_set(build_filter(machine_table(g)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sign_grid_machines(max_states=9, no_op_first=True))
def test_random_grid_machines_are_in_u_set(m):
    assert_in_u_set(build_filter(machine_table(m)))


@pytest.mark.parametrize("s", [2, 3, 4, 5, 8, 9, 16, 17, 33, 100, 257])
def test_u_set_size_against_corollary3(s):
    U = u_set(s)
    xi = 3 ** (n_digits(s) - 1) + 1
    assert U.size <= 24 * xi + 5 == cor3_bound(s)
    # our count, from the derivation: 16s + 40 breakpoints, 4s + 14 new output values,
    # 15 constants (docs/rcnn_algorithm1.md; the head's exact-zero bias is one)
    assert U.size == 20 * s + 69
    assert np.all(np.diff(U) > 0) and 0.0 in U
    assert len(cell_values(s).of(*cell_values(s).values)) == 4 * s + 10


def test_u_set_depends_on_s_only():
    """Two unrelated machines with the same s plant filters inside the same U_s; the state
    code is the one every s-state machine gets."""
    a = build_filter(machine_table(sample_machine(6)))
    g = filter_machine(load(EXAMPLES / "bb3.tm"))
    b = build_filter(machine_table(g))
    assert assert_in_u_set(a, u_set(6)) and assert_in_u_set(b, u_set(len(g.states)))
    assert np.array_equal(state_code(6).table, machine_table(sample_machine(6)).code.table)


def test_sizes_are_o_of_s():
    sizes = [u_set(s).size for s in (8, 16, 32, 64)]
    assert np.all(np.diff(sizes) == np.array([160, 320, 640]))


@pytest.mark.parametrize("where", ["V5", "V2.bias", "V3", "head.U1", "head.b1"])
def test_a_perturbed_weight_leaves_u_set(where):
    """Mutation: one planted parameter moved off its value is caught, and named."""
    net = build_filter(machine_table(sample_machine(4)))
    head = build_head()
    g = bump_grid(net.n_digits)
    U = u_set(4)
    Ws = [W.copy() for W in net.weights]
    bs = [b.copy() for b in net.biases]
    if where == "V5":
        k = int(np.flatnonzero(Ws[4][0])[3])
        Ws[4][0, k] += g
        new = Ws[4][0, k]
    elif where == "V2.bias":
        bs[1][5] += g / 2
        new = bs[1][5]
    elif where == "V3":
        r, c = np.argwhere(Ws[2] != 0)[0]
        Ws[2][r, c] *= 1.5
        new = Ws[2][r, c]
    elif where == "head.U1":
        head = type(head)(head.U2, head.b2, head.U1 + np.array([[0, 0, 0.5, 0]]), head.b1, head.labels)
        new = head.U1[0, 2]
    else:
        head = type(head)(head.U2, head.b2, head.U1, head.b1 - 0.25, head.labels)
        new = head.b1[0]
    assert new not in U
    bad = FilterNet(tuple(Ws), tuple(bs), net.labels, net.units, net.n_digits, net.n_states, net.g)
    rep = membership(bad, head)
    assert not rep["all_in"] and list(rep["missing"]) == [where]
    assert membership(net)["all_in"]
    with pytest.raises(AssertionError):
        assert_in_u_set(bad) if not where.startswith("head") else _head_check(head, U)


def _head_check(head, U):
    for v in (head.U2, head.b2, head.U1, head.b1):
        assert np.isin(v, U).all()


def test_info_rows_show_u_set():
    net = build_filter(machine_table(sample_machine(4)))
    rep = size_report(net)
    rows = {q: (v, p) for q, v, p in bounds_rows(rep)}
    v, p = rows["every weight and bias in U_s (Lemma 6, Cor. 3)"]
    assert v == f"all in U_s: yes, |U_s| = {u_set(4).size}"
    assert p == f"bound 24|𝒳_i|+5 = {cor3_bound(4):,}"
    # a filter outside U_s says so
    Ws = [W.copy() for W in net.weights]
    Ws[4][0, 0] += 1e-3
    bad = FilterNet(tuple(Ws), net.biases, net.labels, net.units, net.n_digits, net.n_states, net.g)
    rows = {q: v for q, v, _ in bounds_rows(size_report(bad))}
    assert rows["every weight and bias in U_s (Lemma 6, Cor. 3)"].startswith("all in U_s: NO (V5)")


def test_parts_cover_each_layer():
    """Each layer's planted values lie in its own part of U_s (the derivation, layer by
    layer), not just somewhere in the union."""
    net = build_filter(machine_table(sample_machine(5)))
    parts = u_set_parts(5)
    zero = parts["zero"]
    for i, (W, b) in enumerate(zip(net.weights, net.biases), start=1):
        allowed = np.concatenate([parts[f"V{i}"], zero])
        assert np.isin(W, allowed).all() and np.isin(b, allowed).all(), f"V{i}"
    h = build_head()
    allowed = np.concatenate([parts["head"], zero])
    for v in (h.U2, h.b2, h.U1, h.b1):
        assert np.isin(v, allowed).all()
