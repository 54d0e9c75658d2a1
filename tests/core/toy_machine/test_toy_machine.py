"""A new machine construction is one folder plus one registry line (issue 34, ARCHITECTURE.md
"The construction protocol"): the toy step net (``toy_step_net/``, next to this file) is
registered with one line of :data:`tm2nn.backends.BUILTIN`, and goes through compile, run,
verify, info, save / load_model and the command line like a built-in backend, with no file
of ``tm2nn/`` naming it.  Its runs equal the interpreter's at every step (bb3,
binary_increment, halts by a missing rule in both step conventions, runs that do not halt
within T), and a broken weight is caught by verify at the step it first acts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import tm2nn
from tm2nn.backends import BUILTIN
from tm2nn.interp import configurations, run_machine
from tm2nn.nets import Net, SparseMatrix
from tm2nn.syntax import load

from ...conftest import EXAMPLES, ROOT
from .toy_step_net.backend import BACKEND
from .toy_step_net.layout import Layout

NAME = "toy-step-net"
MODULE = "tests.core.toy_machine.toy_step_net.backend"
FOLDER = Path(__file__).parent / "toy_step_net"

MACHINES = {
    # halts by a missing rule: (t, _) has none; 'ab' halts after 2 steps (3 in morphett's convention)
    "stuck": """machine stuck {
  alphabet: _ a b
  blank: _
  start: s
  halt: h
  s a -> b R s
  s b -> a R t
  s _ -> _ S h
  t a -> a L t
}""",
    "stuck_morphett": """machine stuck_morphett {
  alphabet: _ a b
  blank: _
  start: s
  convention: morphett
  s a -> b R s
  s b -> a R t
  t a -> a L t
}""",
    # never halts: walks left for ever, toggling the cells it passes
    "leftward": """machine leftward {
  alphabet: _ 1
  blank: _
  start: a
  halt: h
  a _ -> 1 L a
  a 1 -> _ L a
}""",
    # never halts: walks right along its input, then on, writing 1s
    "rightward": """machine rightward {
  alphabet: 0 1
  blank: 0
  start: r
  r 0 1 -> 1 R r
}""",
}


@pytest.fixture(scope="module")
def toy():
    """The one registry line (for this module's tests only)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BUILTIN, NAME, MODULE)
        yield NAME


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("toy_sources")
    out = {"bb3": EXAMPLES / "bb3.tm", "binary_increment": EXAMPLES / "binary_increment.tm"}
    for name, text in MACHINES.items():
        (folder / f"{name}.tm").write_text(text + "\n")
        out[name] = folder / f"{name}.tm"
    return out


#: (machine, T, inputs): every input is compared with the interpreter's run of T steps
CASES = [
    ("bb3", 22, ["", "1", "11", "0110", "1" * 23]),  # halts at step 21 on the blank tape
    ("bb3", 9, ["", "01", "1011"]),  # does not halt within T
    ("binary_increment", 12, ["1011", "111", "", "0", "_1", "1100110"]),  # stay moves; a carry to the left
    ("stuck", 5, ["ab", "aab", "b", "", "ba"]),  # a missing rule, and a halting state
    ("stuck", 2, ["ab", "aab"]),  # the missing rule found at step T: not halted
    ("stuck_morphett", 5, ["ab", "aab", "b", ""]),  # the no-rule step counts
    ("stuck_morphett", 2, ["ab", "b"]),
    ("leftward", 7, ["", "1", "1_1"]),  # the head reaches the window's left edge at step T
    ("rightward", 6, ["", "1101", "1111111"]),  # ... and its right edge; an input that fills T+1 cells
]


@pytest.fixture(scope="module")
def compiled(toy, sources):
    return {(m, t): tm2nn.compile(sources[m], toy, steps=t) for m, t, _ in CASES}


# -- one folder, one registry line -------------------------------------------------------------------
def test_one_registry_line_and_nothing_in_the_core_names_it(toy):
    assert tm2nn.backends.get(toy) is BACKEND and toy in tm2nn.backends.names()
    assert tm2nn.backends.get(toy).engines == ("torch", "onnxruntime")
    for path in (ROOT / "tm2nn").rglob("*.py"):
        text = path.read_text()
        assert "toy-step-net" not in text and "toy_step_net" not in text, path
    # the construction is its folder: its modules import tm2nn and each other, nothing else of the tests
    for path in FOLDER.glob("*.py"):
        assert "tests." not in path.read_text() and "conftest" not in path.read_text(), path


# -- compile and run, against the interpreter ----------------------------------------------------------
@pytest.mark.parametrize("machine,steps,inputs", CASES, ids=[f"{m}-T{t}" for m, t, _ in CASES])
def test_runs_equal_the_interpreter(compiled, sources, machine, steps, inputs):
    c = compiled[machine, steps]
    want = [tm2nn.run(sources[machine], t, steps) for t in inputs]
    assert c.run(inputs) == want
    assert c.run(inputs, engine="onnxruntime") == want
    assert c.run(inputs[0]) == want[0] and isinstance(c.run(inputs[0]), tm2nn.Report)


def test_the_cases_cover_halts_and_runs_that_do_not(sources):
    seen = {(r.halted, r.outcome) for m, t, inputs in CASES for r in (tm2nn.run(sources[m], x, t) for x in inputs)}
    assert {(True, "halt"), (False, None)} <= seen
    morphett = tm2nn.run(sources["stuck_morphett"], "ab", 5)
    assert morphett.halted and morphett.steps == 3 and tm2nn.run(sources["stuck"], "ab", 5).steps == 2
    assert not tm2nn.run(sources["stuck"], "ab", 2).halted


def test_every_step_is_the_interpreters(compiled, sources):
    """Decoded straight from the net's rows (the ``configurations`` analysis): configuration
    k is the interpreter's after k steps, and a halted one repeats."""
    from .toy_step_net import codec

    c = compiled["bb3", 22]
    rows = codec.outputs(c, [""], "torch")[0]
    assert rows.shape == (23, len(c.net.spaces["configs"])) and set(np.unique(rows)) <= {0.0, 1.0}
    run = run_machine(load(sources["bb3"]), "", 22, trace=True)
    want = [(q, h, dict(cells)) for _k, q, h, cells in configurations(run)]
    assert c.analysis("configurations")(c, "", "onnxruntime") == want + [want[-1]]  # step 22 repeats step 21
    assert NAME in tm2nn.backends.having("configurations")


def test_inputs_and_sources_it_refuses(compiled, toy):
    c = compiled["bb3", 9]
    with pytest.raises(tm2nn.Tm2nnError, match=r"symbol '2' is not in the alphabet of 'bb3'"):
        c.run("1021")
    with pytest.raises(tm2nn.OptionError, match=r"'10101010101' has 11 cells; the window of a 9-step net holds 10"):
        c.run("10101010101")
    with pytest.raises(tm2nn.Tm2nnError, match=r"compiles line machines; 'grid_copy_down' is a grid machine"):
        tm2nn.compile(EXAMPLES / "grid_copy_down.tm", toy, steps=3)
    with pytest.raises(tm2nn.Tm2nnError, match=r"compiles line machines; 'full_adder' is a circuit"):
        tm2nn.compile(EXAMPLES / "full_adder.circ", toy, steps=3)
    with pytest.raises(tm2nn.OptionError, match=r"needs steps"):
        tm2nn.compile(EXAMPLES / "bb3.tm", toy)
    with pytest.raises(tm2nn.OptionError, match=r"steps: expected an integer ≥ 1, got 0"):
        tm2nn.compile(EXAMPLES / "bb3.tm", toy, steps=0)


def test_run_with_the_backend(toy, sources):
    for machine, steps, text in (("bb3", 25, ""), ("bb3", 6, "1"), ("binary_increment", 12, "1011")):
        assert tm2nn.run(sources[machine], text, steps, backend=toy) == tm2nn.run(sources[machine], text, steps)


# -- verify, and a broken construction -------------------------------------------------------------------
@pytest.mark.parametrize("machine,steps,size", [("bb3", 22, 127), ("binary_increment", 12, 1093),
                                                ("stuck_morphett", 2, 40), ("leftward", 7, 127)])
def test_verify_is_exhaustive_and_ok(compiled, machine, steps, size):
    rep = compiled[machine, steps].verify()
    assert rep.ok and rep.mode == "exhaustive" and rep.complete, rep.first
    assert rep.n_inputs == rep.space == size and set(rep.engines) == {"torch", "onnxruntime"}
    assert rep.max_deviation == {"torch": 0.0, "onnxruntime": 0.0}
    assert rep.compares.startswith("state, head and every cell at every step")


def _edit_next(net: Net, edit) -> Net:
    """``net`` with the step's affine map ``next`` replaced by ``edit(dense weight)``."""
    loop = net.nodes[0]
    body = loop.body
    nodes = []
    for op in body.nodes:
        if op.name == "next":
            w = op.weight.dense()
            edit(w)
            op = dataclasses.replace(op, weight=SparseMatrix.from_dense(w))
        nodes.append(op)
    body = Net(body.name, body.inputs, tuple(nodes), body.outputs)
    return Net(net.name, net.inputs, (dataclasses.replace(loop, body=body),), net.outputs)


def test_verify_finds_a_wrong_next_state_weight_at_its_step(toy, sources):
    """The rule (C, 0) -> 1 L C sends the machine to A instead, at one window cell i: the
    first step that applies it at cell i is where verify reports the state."""
    steps = 22
    m = load(sources["bb3"])
    lay = Layout(m, steps)
    first = next((k, head) for k, q, head, cells in configurations(run_machine(m, "", steps, trace=True))
                 if q == "C" and cells.get(head, "0") == "0")
    k, head = first
    col = lay.width + lay.indicator(head + lay.origin, m.state_index["C"], m.symbol_index["0"])

    def wrong_state(w):
        assert w[lay.state(m.state_index["C"]), col] == 1.0
        w[lay.state(m.state_index["C"]), col] = 0.0
        w[lay.state(m.state_index["A"]), col] = 1.0

    c = tm2nn.compile(sources["bb3"], toy, steps=steps)
    c.net = _edit_next(c.net, wrong_state)
    rep = c.verify()
    assert not rep.ok and rep.engines["torch"] > 0 and rep.engines["onnxruntime"] > 0
    f = rep.first
    assert (f.input, f.step, f.field, f.expected, f.got) == ("", k + 1, "state", "C", "A")
    assert c.run("") != tm2nn.run(sources["bb3"], "", steps)


def test_verify_finds_a_configuration_that_is_not_one_hot(toy, sources):
    """Without the -1 that clears the cell read by (A, 0) -> 1 R B at the origin, cell T
    holds both symbols after step 1."""
    m = load(sources["bb3"])
    lay = Layout(m, 4)
    col = lay.width + lay.indicator(lay.origin, m.state_index["A"], m.symbol_index["0"])

    def keep_old_symbol(w):
        w[lay.cell(lay.origin, m.symbol_index["0"]), col] = 0.0

    c = tm2nn.compile(sources["bb3"], toy, steps=4)
    c.net = _edit_next(c.net, keep_old_symbol)
    rep = c.verify([""], onnx=False)
    assert (rep.first.step, rep.first.field) == (1, "encoding")
    assert "step 1: the cells group of the configuration is not one-hot" in rep.first.got


# -- info, model files -------------------------------------------------------------------------------------
def test_info(compiled):
    c = compiled["bb3", 22]
    info = c.info()
    assert info["backend"] == NAME
    assert info["bounds"] == [["configuration width", "139", "(2T+1)(1+|Σ|) + |Q|"],
                              ["indicator units per step", "360", "(2T+1)·|Q|·|Σ|"],
                              ["steps (loop trips, weights shared)", "22", "T"]]
    assert sum(p.numel() for p in c.torch().parameters()) == info["info"]["params_nonzero"]
    assert info["info"]["inputs"] == {"x": 139} and info["info"]["depth"]["relu"] == 22
    labels = c.net.spaces["configs"].labels
    assert labels[0] == "head:p0" and "st:Z" in labels and "cell44:1" in labels


def test_saved_models_load_back_through_the_registry(compiled, toy, tmp_path, monkeypatch):
    c = compiled["binary_increment", 12]
    inputs = ["1011", "111", ""]
    want = c.run(inputs)
    for suffix in (".onnx", ".pt", ".safetensors"):
        path = c.save(tmp_path / f"inc{suffix}")
        back = tm2nn.load_model(path)
        assert back.backend == toy and back.edited is None and back.input_encoding == c.input_encoding
        assert back.run(inputs) == want
        if suffix == ".onnx":
            assert back.run(inputs, engine="onnxruntime") == want
        assert back.info()["bounds"] == c.info()["bounds"]
        assert back.verify(["1011", "0"], onnx=False).ok
    from tm2nn.modelfile.manifest import read_safetensors

    path = tmp_path / "inc.safetensors"
    manifest, _arrays = read_safetensors(path, path.read_bytes())
    assert set(manifest["decoding"]["fields"]) == {"halted", "steps", "state", "outcome", "tape", "head", "sigma"}
    assert manifest["decoding"]["fields"]["head"]["labels"][0] == "head:p0"
    assert manifest["encodings"]["output"]["kind"] == "toy-configs"
    monkeypatch.delitem(BUILTIN, toy)  # without its registry line the file names a backend nobody knows
    with pytest.raises(tm2nn.Tm2nnError, match=NAME):
        tm2nn.load_model(tmp_path / "inc.onnx")


# -- the command line --------------------------------------------------------------------------------------
def test_the_command_line(toy, run_cli, tmp_path, sources):
    bb3 = sources["bb3"]
    model = tmp_path / "bb3.onnx"
    r = run_cli("compile", bb3, "--backend", toy, "--steps", "22", "-o", model)
    assert r.code == 0, r.err
    r = run_cli("eval", model, "--input", "", "--input", "11", "--json")
    assert r.code == 0, r.err
    assert [json.loads(x) for x in r.out.splitlines()] == [{"input": t, **tm2nn.run(bb3, t, 22)} for t in ("", "11")]
    r = run_cli("verify", bb3, "--backend", toy, "--steps", "10", "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["ok"] and rep["mode"] == "exhaustive" and rep["n_inputs"] == 127
    r = run_cli("info", bb3, "--backend", toy, "--steps", "22", "--json")
    assert r.code == 0 and json.loads(r.out)["bounds"][1] == ["indicator units per step", "360", "(2T+1)·|Q|·|Σ|"]
    r = run_cli("info", model, "--json")
    assert r.code == 0 and json.loads(r.out)["backend"] == toy
    for steps, code in (("30", 0), ("10", 1)):  # halts at step 21; not within 10 steps
        mine = run_cli("run", bb3, "--backend", toy, "--max-steps", steps, "--json")
        interp = run_cli("run", bb3, "--max-steps", steps, "--json")
        assert (mine.code, interp.code) == (code, code), mine.err
        assert json.loads(mine.out) == json.loads(interp.out)
    r = run_cli("run", sources["binary_increment"], "--backend", toy, "--max-steps", "12", "--input", "1011", "--json")
    assert r.code == 0 and json.loads(r.out)["tape"] == "1100"
    r = run_cli("run", bb3, "--backend", toy, "--max-steps", "3", "--input", "10101", "--json")
    assert r.code == 2 and "compile with a larger --max-steps" in r.err  # run names its flag
    r = run_cli("compile", "--help")
    assert r.code == 0 and toy in r.out
