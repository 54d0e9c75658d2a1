"""A plain script drives every runnable ONNX model from its metadata alone (issue 21,
item 4; docs/onnx_plain.md): ``examples/plain/run_onnx.py`` runs in a process where
importing tm2nn fails, and prints, for every input, the report ``compiled.run`` gives.
For rcnn it builds the start grid from ``tm2nn.input_encoding/start_grid`` and decodes
the grids through ``tm2nn.output_encoding/decode``; corrupting either table changes its
reports (the tables are what the script reads, not decoration)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import tm2nn
from tests.conftest import EXAMPLES, ROOT
from tm2nn.backends.rcnn.encoding import COMPUTE, grids_from_configs, pack, to_value
from tm2nn.backends.rcnn.machine_io import start_grids
from tm2nn.backends.rcnn.machine_mode import machine_form
from tm2nn.errors import Tm2nnError

SCRIPT = ROOT / "examples" / "plain" / "run_onnx.py"

#: Run in ``python -I -c``: a finder that refuses tm2nn, checked to work; then the script
#: once per argv list (one process, so numpy and onnxruntime load once), one thread.
BOOT = r"""
import contextlib, importlib.abc, io, json, runpy, sys

class NoTm2nn(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tm2nn":
            raise ImportError("tm2nn is blocked in this process")

sys.meta_path.insert(0, NoTm2nn())
try:
    import tm2nn  # noqa: F401
    sys.exit("the blocker let tm2nn in")
except ImportError:
    pass
import onnxruntime as ort
_Session = ort.InferenceSession
def one_thread(path, sess_options=None, **kw):
    so = sess_options or ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return _Session(path, sess_options=so, **kw)
ort.InferenceSession = one_thread
script, calls = sys.argv[1], json.loads(sys.argv[2])
results = []
for argv in calls:
    sys.argv = [script, *argv]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    results.append({"out": out.getvalue(), "err": err.getvalue(), "code": code})
assert not [m for m in sys.modules if m.split(".")[0] == "tm2nn"], "tm2nn was imported"
print(json.dumps(results))
"""

#: a morphett machine (the step that finds no rule counts) over 3 symbols (blocks of 2
#: cells), with stay moves, missing rules and an accepting state
MORPHETT = """
machine morph {
  convention: morphett
  alphabet: _ a b
  blank: _
  states: s t yes
  start: s
  accept: yes
  s a -> b R s
  s b -> a S t
  t a -> a L s
  t b -> b R yes
  t _ -> a R s
}
"""
#: a grid machine that keeps to one row (the rcnn form takes it; its head is [row, col])
ROW = """
machine row {
  tape: grid
  alphabet: 0 1 _
  blank: _
  states: go back done
  start: go
  halt: done
  go 0 -> 1 R go
  go 1 -> 0 R go
  go _ -> _ L back
  back 0 1 -> * L *
  back _ -> _ R done
}
"""


def strings(alphabet: str, longest: int) -> list[str]:
    return ["".join(p) for k in range(longest + 1) for p in itertools.product(alphabet, repeat=k)]


#: name -> (source, backend, options, inputs, reference engine)
CASES = {
    "rcnn-bb3": ("bb3.tm", "rcnn", {"steps": 12, "max_input": 3}, strings("01", 3), "fused"),
    "rcnn-increment": ("binary_increment.tm", "rcnn", {"steps": 7, "max_input": 3},
                       [*strings("01", 2), "_1", "1_0"], "fused"),
    "rcnn-palindrome": ("palindrome.tm", "rcnn", {"steps": 9, "max_input": 3}, strings("01", 3), "fused"),
    "rcnn-parens": ("balanced_parens.tm", "rcnn", {"steps": 6, "max_input": 2}, strings("()X", 2), "fused"),
    "rcnn-morphett": (MORPHETT, "rcnn", {"steps": 8, "max_input": 3}, strings("ab", 3), "fused"),
    "rcnn-row": (ROW, "rcnn", {"steps": 6, "max_input": 2}, strings("01", 2), "fused"),
    "transformer-bb3": ("bb3.tm", "transformer", {"steps": 12}, strings("01", 3), "torch"),
    "transformer-palindrome": ("palindrome.tm", "transformer", {"steps": 10}, strings("01", 2), "torch"),
    "relu-adder": ("full_adder.circ", "relu-circuit", {}, strings("01", 3)[-8:], "torch"),
    "relu-adder-pm1": ("full_adder.circ", "relu-circuit", {"pm_one_output": True}, ["000", "111", "101"], "torch"),
    "relu-bb3": ("bb3.tm", "relu-circuit", {"steps": 6, "tape": 3}, strings("01", 2), "torch"),  # some overflow
    "abbe-sandon": ("parity8.circ", "abbe-sandon", {"engine": "float64"},
                    ["".join(r) for r in np.random.default_rng(0).choice(["0", "1"], (6, 9))], "torch"),
}


def source(tmp, spec: str):
    if "\n" not in spec:
        return EXAMPLES / spec
    path = tmp / f"{spec.split()[1]}.tm"
    path.write_text(spec)
    return path


def run_plain(calls: list[list[str]]) -> list[dict]:
    """The script on each argv, in one ``python -I`` process that cannot import tm2nn."""
    p = subprocess.run([sys.executable, "-I", "-c", BOOT, str(SCRIPT), json.dumps(calls)],
                       capture_output=True, text=True, timeout=300, cwd=SCRIPT.parent)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def edited(src, dst, key: str, edit) -> str:
    """A copy of an ONNX model with ``edit(value)`` applied to the JSON of metadata ``key``."""
    m = onnx.load(str(src))
    for prop in m.metadata_props:
        if prop.key == key:
            value = json.loads(prop.value)
            edit(value)
            prop.value = json.dumps(value)
    onnx.save(m, str(dst))
    return str(dst)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Every case compiled, saved and run by the script (one process), with the reports
    ``compiled.run`` gives; plus the runs of the corrupted and refused models."""
    tmp = tmp_path_factory.mktemp("plain")
    models, want, calls = {}, {}, []
    for name, (spec, backend, opts, texts, engine) in CASES.items():
        c = tm2nn.compile(source(tmp, spec), backend, **opts)
        models[name] = c.save(tmp / f"{name}.onnx")
        want[name] = [dict(r) for r in c.run(texts, engine=engine)]
        (tmp / f"{name}.txt").write_text("\n".join(texts) + "\n")
        calls.append([str(models[name]), "--inputs", str(tmp / f"{name}.txt")])
    bb3 = models["rcnn-bb3"]

    def swap_symbols(enc):  # the start grid writes a 1 where the input has a 0, and back
        s = enc["start_grid"]["symbols"]
        s["0"], s["1"] = s["1"], s["0"]

    mutants = {
        "start_grid": edited(bb3, tmp / "bad_start.onnx", "tm2nn.input_encoding", swap_symbols),
        "decode": edited(bb3, tmp / "bad_decode.onnx", "tm2nn.output_encoding",
                         lambda enc: enc["decode"]["halted_states"].clear()),
    }
    calls += [[m, "--inputs", str(tmp / "rcnn-bb3.txt")] for m in mutants.values()]
    gd = tm2nn.compile(EXAMPLES / "bb3.tm", "gd-trace", steps=4, max_input=2).save(tmp / "gd.onnx")
    refused = {"bad symbol": [str(bb3), "--input", "0x1"], "too long": [str(bb3), "--input", "0101"],
               "bad bits": [str(models["relu-adder"]), "--input", "01"], "gd-trace": [str(gd), "--input", ""],
               "not a model": [str(tmp / "rcnn-bb3.txt")],
               "no tables": [edited(bb3, tmp / "old.onnx", "tm2nn.input_encoding", lambda e: e.pop("start_grid"))]}
    calls += list(refused.values())
    got = run_plain(calls)
    n = len(CASES)
    return {"models": models, "want": want, "got": dict(zip(CASES, got[:n])),
            "mutants": dict(zip(mutants, got[n:n + len(mutants)])), "refused": dict(zip(refused, got[n + len(mutants):]))}


def reports(run: dict) -> list[dict]:
    assert run["code"] in (0, 1), run["err"]
    return [json.loads(line) for line in run["out"].splitlines()]


@pytest.mark.parametrize("name", list(CASES))
def test_the_plain_script_prints_compiled_runs_reports(plain, name):
    """The reports, and the exit code of ``tm2nn eval``: 1 when a machine did not halt
    within the bound (or left the window)."""
    run, want = plain["got"][name], plain["want"][name]
    assert reports(run) == want
    assert run["code"] == (0 if all(r.get("halted") is not False and not r.get("overflow") for r in want) else 1)


def test_the_cases_cover_a_hundred_inputs_and_every_ending():
    assert sum(len(c[3]) for c in CASES.values()) >= 100


def test_the_rcnn_cases_reach_every_branch_of_the_decoding(plain):
    """Halts in a halting state and by a missing rule (counted: morphett), runs cut at the
    bound, accept and reject, blocks of 2 cells, a grid machine's [row, col] head."""
    rcnn = [r for name in CASES if name.startswith("rcnn") for r in plain["want"][name]]
    assert {r["outcome"] for r in rcnn} >= {"accept", "reject", "halt", None}
    morph = plain["want"]["rcnn-morphett"]
    assert any(r["halted"] and r["state"] != "yes" for r in morph)  # a missing rule, the step counted
    assert all(isinstance(r["head"], list) for r in plain["want"]["rcnn-row"])
    overflow = [r for r in plain["want"]["relu-bb3"] if r.get("overflow")]
    assert overflow and len(overflow) < len(plain["want"]["relu-bb3"])


@pytest.mark.parametrize("table", ["start_grid", "decode"])
def test_a_corrupted_rcnn_table_changes_the_scripts_reports(plain, table):
    """Mutation: one start-grid entry swapped (0 and 1 encode as each other), or the
    decode table's halting states dropped: the script's reports are no longer the model's."""
    got = reports(plain["mutants"][table])
    want = plain["want"]["rcnn-bb3"]
    assert len(got) == len(want) and got != want


def test_tm2nn_refuses_the_corrupted_table(plain, tmp_path):
    """The same corruption in a file tm2nn loads is refused: the tables must be the
    construction's (modelfile.schema.check_encodings)."""
    def drop(enc):
        enc["start_grid"]["symbols"]["1"] = [0]

    bad = edited(plain["models"]["rcnn-bb3"], tmp_path / "bad.onnx", "tm2nn.input_encoding", drop)
    with pytest.raises(Tm2nnError, match="start_grid/symbols/1"):
        tm2nn.load_model(bad)


@pytest.mark.parametrize("what", ["bad symbol", "too long", "bad bits", "gd-trace", "not a model", "no tables"])
def test_the_script_refuses_bad_input_with_exit_2(plain, what):
    run = plain["refused"][what]
    assert run["code"] == 2 and run["out"] == "", run
    assert run["err"].startswith("error: ") and len(run["err"].strip().splitlines()) == 1, run["err"]


def test_start_grids_from_the_table_are_the_configurations_encoding(plain):
    """The table-built start grids (machine_io.start_grids) are B.1.1's encoding of the
    lowered input on row 0, head on the start cell (encoding.grids_from_configs)."""
    for name in ("rcnn-bb3", "rcnn-increment", "rcnn-morphett"):
        c = tm2nn.load_model(plain["models"][name])
        chain, code = machine_form(c.source, c.input_encoding)
        texts = CASES[name][3]
        window = tuple(c.input_encoding["window"])
        g = chain.machine
        configs = [(g.start, (0, 0), {(0, i): ch for i, ch in enumerate(chain.lower_input(t)) if ch != g.blank})
                   for t in texts]
        want = to_value(pack(grids_from_configs(code, configs, window, phase=COMPUTE)), code.n_digits, np.float32)
        assert np.array_equal(start_grids(chain, code, texts, window), want)
