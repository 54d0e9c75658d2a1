"""A gd-trace model runs without tm2nn (issue 21, docs/gd_trace.md "The model files"):
``examples/plain/gd_trace_torch.py`` reads a ``.safetensors`` model, runs Welper's
optimizer (22) on the manifest's loss (21) from the encodings' tables alone and prints the
run report; here it runs in a process where importing tm2nn fails, and every field equals
``compiled.run``'s.  Mutations of the file (a loss weight, the step rule's constants, the
readback) change its report.  Also: the manifest's ``decoding`` of the gd-trace and
abbe-sandon backends names only labels that exist in the values it names."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import tm2nn
from tm2nn.cli import main
from tm2nn.modelfile import manifest as mf

from ...conftest import EXAMPLES, ROOT

SCRIPT = ROOT / "examples" / "plain" / "gd_trace_torch.py"
DOC = ROOT / "docs" / "gd_trace.md"

#: runs the script as ``__main__`` once per job (one interpreter, torch imported once),
#: with a meta-path hook that makes every ``import tm2nn`` fail
DRIVER = r"""
import contextlib, io, json, os, runpy, sys

class NoTm2nn:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tm2nn":
            raise ImportError("tm2nn is blocked: the plain script must not need it")

sys.meta_path.insert(0, NoTm2nn())
try:
    import tm2nn  # noqa: F401
    blocked = False
except ImportError:
    blocked = True
script, runs = sys.argv[1], []
for cwd, argv in json.loads(sys.argv[2]):
    os.chdir(cwd)
    sys.argv, out, err, code = [script, *argv], io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code or 0
    runs.append([code, out.getvalue(), err.getvalue()])
print(json.dumps({"blocked": blocked, "loaded": sorted(m for m in sys.modules if m.split(".")[0] == "tm2nn"),
                  "runs": runs}))
"""


def documented() -> tuple[list[str], list[str]]:
    """The ``tm2nn compile`` and ``python examples/plain/gd_trace_torch.py`` commands of
    docs/gd_trace.md "The model files", as argv lists."""
    text = DOC.read_text(encoding="utf-8").split("## The model files", 1)[1].split("\n# ", 1)[0]
    lines = [ln.split(" #")[0] for ln in text.splitlines()]
    comp = next(shlex.split(ln)[1:] for ln in lines if ln.startswith("tm2nn compile"))
    plain = next(shlex.split(ln) for ln in lines if ln.startswith("python examples/plain/gd_trace_torch.py"))
    return comp, plain[2:]


def rewrite(src: Path, dst: Path, arrays=None, manifest=None) -> Path:
    """A copy of a ``.safetensors`` model with its arrays and/or manifest edited."""
    with safe_open(str(src), "np") as f:
        meta = dict(f.metadata())
    m = json.loads(meta["tm2nn.manifest"])
    a = load_file(str(src))
    if arrays:
        arrays(a)
    if manifest:
        manifest(m)
    save_file(a, str(dst), metadata={**meta, "tm2nn.manifest": json.dumps(m)})
    return dst


def missing_rule_machine():
    """binary_increment without its rule (carry, 0), counting the step that finds no rule
    (the morphett convention): the run halts on a missing rule, mid-block of the §4.1 form."""
    from tm2nn.syntax import load

    m = load(EXAMPLES / "binary_increment.tm")
    return m.replace(rules=tuple(r for r in m.rules if not (r.state == "carry" and r.read == "0")),
                     missing_rule_counts_step=True)


#: bad inputs and models: (manifest edit, arguments after the model, the error says)
BAD = [(None, ["--input", "012"], "'2' is not one of the symbols"),
       (None, ["--input", "1"], "longer than the 0 cells"),
       (lambda m: m["net"]["ops"][6].update(kind="gelu"), [], "is not an op of the gd-trace loss"),
       (lambda m: m.update(backend="rcnn"), [], "not a gd-trace machine model"),
       (None, ["--inputs", ""], "usage")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every job in one subprocess without tm2nn: ``(result, jobs)``; a job is ``(name,
    cwd, argv, expected reports or None for a mutation, the unmutated reports)``."""
    folder = tmp_path_factory.mktemp("plain_gd")
    (folder / "examples").symlink_to(EXAMPLES)
    comp, plain = documented()
    cwd = os.getcwd()
    try:  # the documented compile command, run as written
        os.chdir(folder)
        assert main(comp) == 0
    finally:
        os.chdir(cwd)
    doc_model = folder / comp[comp.index("-o") + 1]
    models = {"bb3": (tm2nn.compile(EXAMPLES / "bb3.tm", "gd-trace", steps=25, max_input=0), [""]),
              "binary_increment": (tm2nn.compile(EXAMPLES / "binary_increment.tm", "gd-trace", steps=12,
                                                 max_input=4), ["", "1", "10", "111", "1011"]),
              "missing_rule": (tm2nn.compile(missing_rule_machine(), "gd-trace", steps=8, max_input=2),
                               ["10", "1", "0"])}
    jobs, want = [], {}
    for name, (c, texts) in models.items():
        path = c.save(folder / f"{name}.safetensors")
        want[name] = [dict(r) for r in c.run(texts)]
        jobs.append((name, folder, [str(path), *[a for t in texts for a in ("--input", t)]], want[name], None))
    doc_arrays, our_arrays = load_file(str(doc_model)), load_file(str(folder / "bb3.safetensors"))
    assert doc_arrays.keys() == our_arrays.keys()
    assert all(np.array_equal(doc_arrays[k], our_arrays[k]) for k in doc_arrays)  # the docs' model is bb3's
    jobs.append(("documented", folder, plain, want["bb3"], None))
    bb3 = folder / "bb3.safetensors"
    half = lambda a: a.__setitem__("lag1.weight.vals", a["lag1.weight.vals"] * 0.5)  # noqa: E731
    mutations = {
        "lag1_halved": (half, None),
        "T_rate_halved": (None, lambda m: m["encodings"]["input"]["optimizer"]["gradient"].update(T=0.5)),
        "tol_1e6": (None, lambda m: m["encodings"]["input"]["optimizer"]["frank_wolfe"].update(tol=1e6)),
        "no_halting_vertices": (None, lambda m: m["encodings"]["output"]["readback"].update(halting=[])),
    }
    for name, (arrays, man) in mutations.items():
        path = rewrite(bb3, folder / f"{name}.safetensors", arrays, man)
        jobs.append((name, folder, [str(path), "--input", ""], None, want["bb3"]))
    for i, (edit, tail, message) in enumerate(BAD):
        path = rewrite(bb3, folder / f"bad{i}.safetensors", manifest=edit) if edit else bb3
        jobs.append((f"bad{i}", folder, [str(path), *tail], message, None))
    res = subprocess.run([sys.executable, "-c", DRIVER, str(SCRIPT),
                          json.dumps([[str(cwd_), argv] for _n, cwd_, argv, _w, _u in jobs])],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1]), jobs, folder


def test_the_script_runs_without_tm2nn(runs):
    result, _jobs, _folder = runs
    assert result["blocked"], "the meta-path hook did not block tm2nn"
    assert result["loaded"] == []


def test_the_script_reports_what_tm2nn_reports(runs):
    """bb3 (block width 1), binary_increment (width 2, 5 inputs), a halt on a missing rule
    counted as a step, and the command of the docs: every field of every report."""
    result, jobs, _folder = runs
    checked = 0
    for (name, _cwd, _argv, want, _u), (code, out, err) in zip(jobs, result["runs"]):
        if not isinstance(want, list):
            continue
        assert code == 0, (name, err)
        got = [json.loads(line) for line in out.splitlines()]
        assert got == want, name
        checked += len(got)
    assert checked == 1 + 5 + 3 + 1
    # what the readback distinguishes: a halting state, and a halt on a missing rule (counted)
    assert {(r["halted"], r["state"]) for r in jobs[1][3]} == {(True, "done")}
    assert [(r["halted"], r["state"]) for r in jobs[2][3]] == [(True, "carry"), (True, "done"), (True, "carry")]


def test_mutations_change_the_scripts_report(runs):
    """A loss weight halved in the arrays, the rate of T halved or tol raised to 1e6 in the
    step rule (s never moves), the halting vertices dropped from the readback: the report
    departs from bb3's, or the script stops with a one-line error (an iterate that is no
    configuration)."""
    result, jobs, _folder = runs
    seen = 0
    for (name, _cwd, _argv, want, unmutated), (code, out, err) in zip(jobs, result["runs"]):
        if want is not None:
            continue
        assert "Traceback" not in err and code in (0, 2), (name, err)
        got = [json.loads(line) for line in out.splitlines()] if code == 0 else None
        assert got != unmutated and (code == 0 or len(err.strip().splitlines()) == 1), name
        seen += 1
    assert seen == 4


def test_bad_models_and_inputs_are_one_line_errors(runs):
    """A symbol outside the alphabet, an input longer than the window, an op kind the
    loss has not, another backend's model, bad arguments: exit 2, one line, no output."""
    result, jobs, _folder = runs
    bad = [(name, message, run) for (name, _c, _a, message, _u), run in zip(jobs, result["runs"])
           if isinstance(message, str)]
    assert len(bad) == len(BAD)
    for name, message, (code, out, err) in bad:
        assert code == 2 and out == "", (name, err)
        assert err.startswith("gd_trace_torch: error: ") and message in err, (name, err)
        assert len(err.strip().splitlines()) == 1, (name, err)


# -- the manifest's decoding ---------------------------------------------------------------------
def decoding_problems(m: dict) -> list[str]:
    """Each decoded field names a value of the net, at least one label, only labels of
    that value, and a rule."""
    out = []
    for field, d in m["decoding"]["fields"].items():
        try:
            have = set(mf.value_labels(m, d["value"]))
        except KeyError as e:
            out.append(f"{field}: {e}")
            continue
        wrong = [x for x in d["labels"] if x not in have]
        if not d["labels"] or wrong or not d["rule"]:
            out.append(f"{field}: labels {wrong[:3] or 'missing'} not in {d['value']!r}, or no rule")
    return out


@pytest.fixture(scope="module")
def manifests(runs) -> dict:
    from tm2nn.backends.gd_trace.backend import extended_model
    from tm2nn.backends.gd_trace.sign_sum import sign_sum_machine
    from tm2nn.syntax import parse_text

    _result, _jobs, folder = runs
    out = {name: mf.load_manifest(folder / f"{name}.safetensors") for name in ("bb3", "binary_increment")}
    ab = tm2nn.compile(EXAMPLES / "majority7.circ", "abbe-sandon", engine="float64")
    out["abbe-sandon"] = mf.build_manifest(ab)[0]
    ext = extended_model(parse_text(sign_sum_machine(2, 1), "tm", "<s>")[0],
                         {"samples": 2, "features": 1, "theta": [5], "steps": 20})
    out["gd-trace §5"] = mf.build_manifest(ext)[0]
    return json.loads(json.dumps(out))


def test_decoding_names_labels_of_its_values(manifests):
    for name, m in manifests.items():
        assert decoding_problems(m) == [], name
    fields = {name: set(m["decoding"]["fields"]) for name, m in manifests.items()}
    assert fields["bb3"] == {"state", "head", "tape", "sigma", "halted", "outcome", "steps"}
    assert fields["abbe-sandon"] == fields["gd-trace §5"] == {"outputs"}


def test_gd_trace_decoding_is_the_readback(manifests):
    """The labels say what the script reads: the halting vertices are those of the
    readback and the construction's (TapeSimplex.halting); head and tape are the work
    tape's; the state's vertices are those of source states."""
    from tm2nn.backends.gd_trace.machine_mode import simplex_of

    c = tm2nn.compile(EXAMPLES / "bb3.tm", "gd-trace", steps=25, max_input=0)
    _low, ts = simplex_of(c)
    m = manifests["bb3"]
    f, rb = m["decoding"]["fields"], m["encodings"]["output"]["readback"]
    labels = ts.labels()["s"].labels
    assert f["halted"]["labels"] == rb["halting"] == [v for v, h in zip(labels, ts.halting) if h]
    assert {x[2] for x in f["state"]["labels"]} == set("ABCZ") and len(f["state"]["labels"]) == 4 * 12
    assert all(x.startswith("H1:") for x in f["head"]["labels"]) and len(f["head"]["labels"]) == ts.tau
    assert all(x.startswith("T1:") for x in f["tape"]["labels"]) and len(f["tape"]["labels"]) == ts.tau


@pytest.mark.parametrize("name", ["bb3", "abbe-sandon"])
def test_a_wrong_label_or_value_is_caught(manifests, name):
    """Mutations: one label renamed, or the value renamed: the check names the field."""
    for brk in (lambda d: d["labels"].__setitem__(0, d["labels"][0] + "~"),
                lambda d: d.update(value=d["value"] + "~")):
        bad = json.loads(json.dumps(manifests[name]))
        field = next(iter(bad["decoding"]["fields"]))
        brk(bad["decoding"]["fields"][field])
        assert [p.split(":")[0] for p in decoding_problems(bad)] == [field]


def test_the_start_table_is_the_lowering_of_every_short_input():
    """The encoding's ro layout (fixed cells, period, +1 offsets per symbol) gives the
    read-only tape TapeSimplex.start gives, for every input of up to 3 symbols."""
    from itertools import product

    from tm2nn.backends.gd_trace.machine_mode import simplex_of

    c = tm2nn.compile(EXAMPLES / "balanced_parens.tm", "gd-trace", steps=4, max_input=3)
    low, ts = simplex_of(c)
    st = c.input_encoding["start"]
    cells = [int(x.split(":")[1]) for x in ts.labels()["ro"].labels]
    syms = [a for a in c.source.alphabet if a in st["plus"]]
    for n in range(4):
        for text in map("".join, product(syms, repeat=n)):
            plus = set(st["fixed"]) | {i * st["period"] + o for i, a in enumerate(text) for o in st["plus"][a]}
            ro = np.array([1.0 if x in plus else st["blank"] for x in cells])
            assert np.array_equal(ro, ts.start(low.lower_input(text))["ro"]), text
