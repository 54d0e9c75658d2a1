"""Circuit parsers and checks that scale (issue 23, deliverable 5).

* The fast paths (``.circ`` flat lines, plain ``.bench`` and BLIF lines, plain AIGER
  AND lines) give exactly what the full parsers give: the same circuits (names, gate
  order, locations) on valid texts, the same located error on broken ones.
* 10^5-gate circuits in every format parse to the generated circuit (the same gates for
  ``.circ`` and ``.bench``; the same function on random inputs for the formats whose
  readers lower it to other gates).
* Validation and the summary are linear and iterative: a very deep chain, in any gate
  order, neither recurses nor builds the layered copies it would need.
* ``tm2nn compile`` refuses, before layering, a net estimated over ``--max-memory``.
"""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
from gen_circuits import (  # bench/, on the path (conftest)
    FORMATS,
    circuit_text,
    nand_chain,
    random_layered_circuit,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import circuits
from tm2nn.errors import Tm2nnError
from tm2nn.interp import eval_circuit, random_inputs
from tm2nn.ir import Circuit, Gate
from tm2nn.ir.levels import layer_widths
from tm2nn.passes.layering import layer_circuit
from tm2nn.source import SourceText
from tm2nn.syntax import circuit_dsl, dump, parse_text
from tm2nn.syntax.circuit_dsl import port_name, signal_name
from tm2nn.syntax.circuit_flat import parse_flat

#: format -> the function that, patched to return None, sends a text down the full path
FAST_PATHS = {"circ": "tm2nn.syntax.circuit_flat.parse_flat", "bench": "tm2nn.syntax.bench._parse_plain",
              "blif": "tm2nn.syntax.blif._parse_plain", "aag": "tm2nn.syntax.aiger._plain_ands",
              "aig": "tm2nn.syntax.aiger._plain_ands"}


def strict(c) -> tuple:
    """Everything a parse determines, locations included (Circuit.__eq__ ignores them)."""
    return (c.name, c.inputs, c.outputs, [(g.name, g.op, g.inputs, g.loc) for g in c.gates], c.loc,
            c.port_locs, [g.name for g in c.topo])


def outcome(parse, text: bytes, path: str) -> tuple:
    """``("ok", circuits)`` or ``("error", message, line, col, snippet, notes)``."""
    src = SourceText.register(path, text)
    try:
        return ("ok", [strict(c) for c in parse(src)])
    except Tm2nnError as e:
        return ("error", e.message, e.file, e.line, e.col, e.snippet, e.notes)


def full_path(fmt: str, text: bytes, path: str) -> tuple:
    from tm2nn.syntax import format_module

    with mock.patch(FAST_PATHS[fmt], return_value=None):
        return outcome(format_module(fmt).parse, text, path)


def public(fmt: str, text: bytes, path: str) -> tuple:
    from tm2nn.syntax import format_module

    return outcome(format_module(fmt).parse, text, path)


# -- random circuit texts -------------------------------------------------------------------------
#: signal names that need every form of the language: plain, indexed, quoted, keywords,
#: gate names, escapes, non-ASCII
NAMES = ["a", "b.c", "d$e", "f[3]", "f[12]", "input", "output", "circuit", "learner", "AND", "nand",
         "1gat", "a b", 'q"x', "back\\slash", "é", "x#y", "p(q", "t,u", "v=w", "_", "gnd"]


@st.composite
def named_circuits(draw, flat: bool = False):
    """A random circuit whose signals carry names from :data:`NAMES` (and the rest g<k>);
    ``flat``: no name that needs an escape."""
    c = draw(circuits(max_gates=12))
    signals = list(c.inputs) + [g.name for g in c.gates]
    pool = draw(st.permutations([n for n in NAMES if not (flat and ('"' in n or "\\" in n))]))
    rename = {s: (pool[i] if i < len(pool) and draw(st.booleans()) else s) for i, s in enumerate(signals)}
    r = rename.__getitem__
    return Circuit(draw(st.sampled_from(["c", "my circuit", "input"])), tuple(map(r, c.inputs)),
                   tuple(map(r, c.outputs)),
                   tuple(Gate(r(g.name), g.op, tuple(map(r, g.inputs))) for g in c.topo))


def _sig(draw, name: str, flat: bool = False) -> str:
    """``name`` as an assignment or expression may write it: canonical, quoted, or an
    index with leading zeros (``flat``: no unquoted keyword)."""
    canon = signal_name(name)
    if canon[0] != '"' and draw(st.integers(0, 3)) == 0:
        canon = '"' + name + '"'
    elif "[" in canon and canon[0] != '"' and draw(st.booleans()):
        canon = canon.replace("[", "[0", 1)
    elif not flat and canon[0] == '"' and name in circuit_dsl.KEYWORDS and draw(st.integers(0, 3)) == 0:
        canon = name  # an unquoted keyword where a name stands
    return canon


def _expr(draw, g: Gate, flat: bool = False) -> str:
    """The right-hand side of ``g`` in a random form: a call (any case, spacing, trailing
    comma, over several lines), or unless ``flat`` an infix chain or a nested call that
    makes internal gates."""
    args = [_sig(draw, i, flat) for i in g.inputs]
    if g.op in ("CONST0", "CONST1"):
        return g.op[-1]
    if g.op == "BUF" and draw(st.booleans()):
        return args[0]
    form = draw(st.integers(2 if flat else 0, 9))
    if flat and form in (3, 4):
        form = 9
    op = draw(st.sampled_from([g.op, g.op.lower(), g.op.capitalize()]))
    if form == 0 and g.op in ("AND", "OR", "XOR") and len(args) > 1:
        return {"AND": " & ", "OR": " | ", "XOR": " ^ "}[g.op].join(args)
    if form == 1 and g.op == "NOT":
        return "~" + args[0]
    if form == 2:
        return f"{op}(\n    " + ",\n    ".join(args) + draw(st.sampled_from(["", ","])) + "  # wide\n  )"
    if form == 3:
        return f"{op}(NOT({args[0]}){''.join(', ' + a for a in args[1:])})"
    if form == 4:
        return f"{op}({args[0]}, 1)" if g.op not in ("NOT", "BUF") else f"{op}(0)"
    sep = draw(st.sampled_from([", ", ",", " ,\t", ",  "]))
    return f"{op}{draw(st.sampled_from(['', ' ']))}({sep.join(args)}{draw(st.sampled_from(['', ',']))})"


@st.composite
def dsl_texts(draw) -> str:
    """Random valid text in the circuit language for a random circuit: bare or in a block,
    with comments, blank lines and every way of writing ports and gates."""
    flat = draw(st.booleans())  # half the texts in the fast path's forms
    c = draw(named_circuits(flat))
    lines = ["# a random circuit", ""]
    block = draw(st.booleans())
    if block:
        lines.append(f"circuit {signal_name(c.name)} {{")
    for kw, ports in (("input", c.inputs), ("output", c.outputs)):
        if ports:
            names = [port_name(p) if draw(st.integers(0, 5)) else '"' + p.replace("\\", "\\\\")
                     .replace('"', '\\"') + '"' for p in ports]
            sep = draw(st.sampled_from([" ", "\t"] if flat else [" ", ", ", "\t"]))
            lines.append(f"  {kw} {sep.join(names)}" + draw(st.sampled_from(["", "  # ports"])))
    for g in draw(st.permutations(c.gates)):
        lines.append(f"  {_sig(draw, g.name, flat)} = {_expr(draw, g, flat)}"
                     + draw(st.sampled_from(["", "  # gate", "\r"])))
        if draw(st.integers(0, 6)) == 0:
            lines.append(draw(st.sampled_from(["", "   ", "# note", "\t# note"])))
    if block:
        lines.append("}")
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One random edit: a character deleted, inserted or replaced, or a line duplicated,
    swapped, deleted or with one word replaced."""
    if not data:
        return b"x"
    b = bytearray(data)
    i = rng.randrange(len(b))
    kind = rng.randrange(7)
    if kind == 0:
        del b[i]
    elif kind == 1:
        b.insert(i, rng.choice(b'()=,#\n 01ax-.\\"[]&~{}'))
    elif kind == 2:
        b[i] = rng.choice(b"()=,#\n 01ax-.")
    else:
        lines = bytes(b).split(b"\n")
        j, k = rng.randrange(len(lines)), rng.randrange(len(lines))
        if kind == 3:
            lines.insert(j, lines[k])
        elif kind == 4:
            lines[j], lines[k] = lines[k], lines[j]
        elif kind == 5:
            del lines[j]
        else:
            words = lines[j].split(b" ")
            words[rng.randrange(len(words))] = rng.choice(
                [b"g1", b"x0", b"AND", b"gnd", b"vdd", b"7", b"", b"NOT(", b"x0)", b"input", b"1 1"])
            lines[j] = b" ".join(words)
        b = bytearray(b"\n".join(lines))
    return bytes(b)


# -- fast path == full path -----------------------------------------------------------------------
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dsl_texts(), st.randoms(use_true_random=False))
def test_circ_fast_path_agrees_with_the_grammar(text, rng):
    data = text.encode("utf-8")
    for _ in range(4):
        slow = outcome(circuit_dsl.parse_grammar, data, "t.circ")
        assert public("circ", data, "t.circ") == slow
        flat = parse_flat(SourceText.register("t.circ", data))
        if flat is not None:
            assert ("ok", [strict(c) for c in flat]) == slow
        data = mutate(rng, data)


@settings(max_examples=150, deadline=None)
@given(circuits(max_gates=30))
def test_dump_is_read_by_the_fast_path(c):
    """What ``tm2nn convert`` writes takes the fast path, and reads back as the circuit."""
    src = SourceText.register("d.circ", dump(c, "circ").encode())
    (got,) = parse_flat(src)
    assert got == c and strict(got) == strict(circuit_dsl.parse_grammar(src)[0])


def takes_fast_path(fmt: str, data: bytes, path: str) -> bool:
    """Whether the fast path of ``fmt`` reads ``data`` itself (gives a result, not None)."""
    from tm2nn.syntax import aiger, bench, blif, format_module

    src = SourceText.register(path, data)
    if fmt in ("bench", "blif"):
        return {"bench": bench, "blif": blif}[fmt]._parse_plain(src) is not None
    if fmt == "circ":
        return parse_flat(src) is not None
    results = []
    real = aiger._plain_ands

    def record(*args):
        results.append(real(*args))
        return results[-1]
    with mock.patch.object(aiger, "_plain_ands", record):
        format_module(fmt).parse(src)
    return len(results) == 1 and results[0] is not None


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "aig"])
def test_fast_paths_agree_with_the_full_readers(fmt):
    """Generated files and 4 random edits of each: the same circuit or the same error."""
    rng = random.Random(fmt)
    for trial in range(60):
        c = random_layered_circuit(rng.randrange(1, 40), rng.randrange(1, 6), seed=trial, name="t")
        data = circuit_text(c, fmt)
        path = f"t{trial}.{fmt}"
        assert takes_fast_path(fmt, data, path)
        for k in range(5):
            got = public(fmt, data, path)
            assert got == full_path(fmt, data, path), (fmt, data)
            assert k or got[0] == "ok"
            data = mutate(rng, data)


def test_circ_fast_path_errors_are_the_grammars():
    """An error anywhere sends the whole text to the grammar: its message and position."""
    text = "circuit c {\n  input a b\n  output y\n  y = AND(a, z)\n}\n"
    with pytest.raises(Tm2nnError) as e:
        parse_text(text, "circ", "e.circ")
    assert (e.value.line, e.value.col) == (4, 14) and "undefined signal 'z'" in e.value.message
    text = "input a\noutput y\ny = NOT(a)\ny = BUF(a)\n"
    with pytest.raises(Tm2nnError) as e:
        parse_text(text, "circ", "e.circ")
    assert e.value.line == 4 and "defined twice" in e.value.message and e.value.notes


# -- 10^5 gates in every format -------------------------------------------------------------------
@pytest.fixture(scope="module")
def big():
    c = random_layered_circuit(100_000, seed=5, name="big")
    x = random_inputs(len(c.inputs), 64, seed=1)
    return c, x, eval_circuit(c, x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_1e5_gates_parse_to_the_generated_circuit(big, fmt):
    c, x, ref = big
    (got,) = parse_text(circuit_text(c, fmt), fmt, f"big.{fmt}")
    assert (got.name, got.inputs, got.outputs) == (c.name, c.inputs, c.outputs)
    if fmt in ("circ", "bench"):
        assert got == c and [g.name for g in got.topo] == [g.name for g in c.topo]
    else:  # BLIF covers and AIGER ANDs are lowered to other gates: compare the function
        assert np.array_equal(eval_circuit(got, x), ref)


# -- validation and the summary at depth ----------------------------------------------------------
def _reference_order(c: Circuit) -> list[str]:
    """Depth-first post-order from each gate in turn, recursively (small circuits)."""
    drivers, done, order = {g.name: g for g in c.gates}, set(), []

    def visit(g):
        done.add(g.name)
        for i in g.inputs:
            if i in drivers and i not in done:
                visit(drivers[i])
        order.append(g.name)
    for g in c.gates:
        if g.name not in done:
            visit(g)
    return order


@settings(max_examples=300, deadline=None)
@given(circuits(max_gates=30))
def test_topological_order_is_the_depth_first_one(c):
    assert [g.name for g in c.topo] == _reference_order(c)
    assert layer_widths(c) == [len(layer) for layer in layer_circuit(c).layers]


def test_cycles_are_reported_along_their_path():
    gates = (Gate("p", "AND", ("a", "r")), Gate("q", "NOT", ("p",)), Gate("r", "OR", ("q", "a")))
    with pytest.raises(Tm2nnError, match=r"combinational cycle: p -> q -> r -> p"):
        Circuit("c", ("a",), ("r",), gates)


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_deep_chain_validates_and_summarises_without_recursion(order):
    n = 200_000
    c = nand_chain(n)
    gates = c.gates if order == "forward" else tuple(reversed(c.gates))
    d = Circuit("deep", c.inputs, c.outputs, gates)  # backward: the sort goes n deep
    assert [g.name for g in d.topo] == [f"g{k}" for k in range(n)]
    s = d.summary()
    # layer k holds g(k-1) and the inputs x(k+1) .. x(n) still waiting: n at layer 1
    assert (s["depth"], s["width"]) == (n, n)
    small = nand_chain(40)
    assert layer_widths(small) == [len(layer) for layer in layer_circuit(small).layers]


def test_cycle_in_a_deep_chain_is_found_without_recursion():
    n = 100_000
    c = nand_chain(n)
    looped = (Gate("g0", "NAND", (f"g{n - 1}", "x1")),) + c.gates[1:]
    with pytest.raises(Tm2nnError, match="combinational cycle"):
        Circuit("loop", c.inputs, c.outputs, looped[::-1])


# -- compile: the estimate and the refusal --------------------------------------------------------
def test_estimate_counts_the_net_that_is_built():
    from tm2nn.backends.relu_circuit.backend import BACKEND
    from tm2nn.backends.relu_circuit.estimate import net_size
    from tm2nn.emit import affine_form
    from tm2nn.passes.basis import to_basis

    for c in (random_layered_circuit(3_000, seed=2), random_layered_circuit(600, width=8, seed=2), nand_chain(150)):
        b = to_basis(c)
        for corrections in (True, False):
            size = net_size(layer_widths(b), len(b.inputs), len(b.outputs), corrections=corrections)
            net = BACKEND.compile(c, BACKEND.options(corrections=corrections)).net
            dense = sum(op.weight.shape[0] * op.weight.shape[1] for op in net.affine_layers()
                        if affine_form(op) == "dense")
            assert size.units == sum(len(layer) for layer in layer_circuit(b).layers)
            assert size.layers == int(net.metadata["circuit_layers"])
            # an upper bound: W1 is counted dense where a layer of copies makes it diagonal
            assert dense <= size.dense <= 2 * dense + 2**15


def test_oversize_compile_is_refused_with_its_estimate(tmp_path, run_cli):
    chain = tmp_path / "chain.bench"
    chain.write_text(dump(nand_chain(20_000), "bench"))
    out = tmp_path / "chain.onnx"
    with mock.patch("tm2nn.passes.layering.layer_circuit", side_effect=AssertionError("layered")):
        r = run_cli("compile", chain, "-o", out, "--max-memory", "64G")
    assert r.code == 2 and not out.exists()
    assert "40,000 circuit layers (widest 20,000) and 400,020,000 units" in r.err
    assert "would need about" in r.err and "over the limit of 64.0 GiB" in r.err and "--max-memory" in r.err


def test_compile_fits_under_a_limit_that_covers_the_estimate(tmp_path, run_cli):
    from tm2nn import limits
    from tm2nn.backends.relu_circuit.estimate import check_net_memory
    from tm2nn.passes.basis import to_basis

    c = random_layered_circuit(2_000, seed=4, name="fits")
    size = check_net_memory(to_basis(c))
    path = tmp_path / "fits.bench"
    path.write_text(dump(c, "bench"))
    low, high = size.nbytes // 2, size.nbytes * 2
    r = run_cli("compile", path, "-o", tmp_path / "low.onnx", "--max-memory", str(low))
    assert r.code == 2 and f"{size.units:,} units" in r.err
    r = run_cli("compile", path, "-o", tmp_path / "fits.onnx", "--max-memory", str(high))
    assert r.code == 0 and (tmp_path / "fits.onnx").exists()
    limits.set_memory_limit(low)
    try:
        with pytest.raises(Exception, match="would need about"):
            check_net_memory(to_basis(c))
    finally:
        limits.set_memory_limit(None)
