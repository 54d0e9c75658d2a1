"""The sweep spec (tm2nn/sweep/spec.py): a TOML spec expands into the same tasks and ids
every time, ``halt+K`` is the reference interpreter's step count plus K, corpus items are
picked by ranges or names, and every bad spec is a located error (line, column, message)
before any task runs; random TOML-ish text gives nothing but a Tm2nnError."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.errors import Tm2nnError
from tm2nn.sweep.spec import MAX_TASKS, Task, canonical, load_spec

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples"


def spec_file(folder: Path, text: str, name: str = "spec.toml") -> Path:
    p = folder / name
    p.write_text(text)
    return p


def write(tmp_path: Path, text: str):
    return load_spec(spec_file(tmp_path, text))


# -- expansion ------------------------------------------------------------------------------

SMALL = f"""\
name = "small"
task = "verify"
backends = ["transformer", "relu-circuit"]
sources = ["{EX}/bb4.tm", "{EX}/bb3.tm"]

[grid]
steps = ["halt+1", 30]
seed = [0, 1]

[args]
inputs = [""]
"""


def test_expansion_order_and_values(tmp_path):
    spec = write(tmp_path, SMALL)
    tasks = spec.tasks()
    got = [(Path(t.source).name, t.backend, t.options["steps"], t.args["seed"]) for t in tasks]
    want = [(f, b, s, seed) for f, halt in (("bb4.tm", 107), ("bb3.tm", 21))  # sources in spec order
            for b in ("transformer", "relu-circuit") for s in (halt + 1, 30) for seed in (0, 1)]
    assert got == want
    assert spec.n_tasks == len(tasks) == 16 and spec.name == "small" and spec.kind == "verify"
    assert all(t.args["inputs"] == [""] and t.kind == "verify" and t.name is None and t.format is None
               for t in tasks)
    assert all(Path(t.source).is_absolute() for t in tasks)
    assert spec.sha256 == hashlib.sha256((tmp_path / "spec.toml").read_bytes()).hexdigest()


def test_machines_and_circuits(tmp_path):
    """relu-circuit takes machines and circuits; a glob's files sorted, the name defaulted."""
    (tmp_path / "src").mkdir()
    for f in ("full_adder.circ", "bb3.tm", "majority5.circ"):
        (tmp_path / "src" / f).write_bytes((EX / f).read_bytes())
    spec = write(tmp_path, 'task = "info"\nbackends = "relu-circuit"\nsources = ["src/*"]\n'
                           '[grid]\ncorrections = [true, false]\n[args]\nsteps = 4\n')
    assert [(Path(t.source).name, t.options["corrections"]) for t in spec.tasks()] == [
        ("bb3.tm", True), ("bb3.tm", False), ("full_adder.circ", True), ("full_adder.circ", False),
        ("majority5.circ", True), ("majority5.circ", False)]
    assert spec.name == "spec"  # the file's stem


def test_ids_stable_distinct_and_canonical(tmp_path):
    a = write(tmp_path, SMALL).tasks()
    b = load_spec(tmp_path / "spec.toml").tasks()
    assert [t.id for t in a] == [t.id for t in b]
    assert len({t.id for t in a}) == len(a)
    t = a[0]
    key = {k: v for k, v in t.to_json().items() if k != "id"}
    assert t.id == hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert t.to_json()["id"] == t.id and canonical(key) == json.dumps(key, sort_keys=True, separators=(",", ":"))
    back = Task.from_json(json.loads(json.dumps(t.to_json())))
    assert back == t and back.id == t.id
    for field, value in (("kind", "info"), ("name", "x"), ("format", "tm"), ("backend", "rcnn"),
                         ("options", {"steps": 23}), ("args", {"seed": 2}), ("source", "/elsewhere")):
        assert Task.from_json({**t.to_json(), field: value}).id != t.id, field


def test_duplicates_run_once_and_values_as_the_backend_reads_them(tmp_path):
    spec = write(tmp_path, f'task = "verify"\nbackends = ["transformer"]\nsources = ["{EX}/bb3.tm", "{EX}/bb*.tm"]\n'
                           '[grid]\nsteps = ["halt+1", 22]\n[args]\nbeta = 10\n')
    assert [(Path(t.source).name, t.options) for t in spec.tasks()] == [
        ("bb3.tm", {"steps": 22, "beta": 10.0}), ("bb4.tm", {"steps": 108, "beta": 10.0}),
        ("bb4.tm", {"steps": 22, "beta": 10.0})]
    assert isinstance(spec.tasks()[0].options["beta"], float)


# -- halt+K ---------------------------------------------------------------------------------

def test_halt_plus_k_on_bb3(tmp_path):
    spec = write(tmp_path, f'task = "verify"\nbackends = ["transformer", "rcnn"]\nsources = ["{EX}/bb3.tm"]\n'
                           '[grid]\nsteps = ["halt+1", "halt", "halt + 5"]\n')
    assert [t.options["steps"] for t in spec.tasks()] == [22, 21, 26] * 2


def test_halt_on_run_input(tmp_path):
    """run: max_steps = halt+K counts the steps on the task's input (each grid input)."""
    spec = write(tmp_path, f'task = "run"\nbackends = ["interp", "transformer"]\nsources = ["{EX}/unary_addition.tm"]\n'
                           '[grid]\ninput = ["", "1+1", "11+111"]\n[args]\nmax_steps = "halt+1"\n')
    from tm2nn import run

    want = [run(str(EX / "unary_addition.tm"), x).steps + 1 for x in ("", "1+1", "11+111")]
    assert len(set(want)) == 3
    assert [t.args["max_steps"] for t in spec.tasks()] == want * 2
    assert [t.backend for t in spec.tasks()] == ["interp"] * 3 + ["transformer"] * 3
    assert all(t.options == {} for t in spec.tasks())


# -- corpus files ---------------------------------------------------------------------------

def test_corpus_items_and_names(tmp_path, corpus):
    f = corpus / "tm" / "bb" / "3x2.txt"
    lines = [ln.split()[0] for ln in f.read_text().splitlines() if ln.strip()]
    spec = write(tmp_path, f'task = "info"\nbackends = ["transformer"]\n[[source]]\npath = "{f}"\nformat = "std"\n'
                           'items = "10, 1-3"\n[[source]]\npath = "' + str(f) + '"\nformat = "std"\n'
                           f'names = ["{lines[5]}", "{lines[4]}"]\n[args]\nsteps = "halt+1"\n')
    tasks = spec.tasks()
    assert [t.name for t in tasks] == [lines[0], lines[1], lines[2], lines[9], lines[4], lines[5]]
    assert all(t.format == "std" and t.source == str(f) for t in tasks)
    assert tasks[0].options["steps"] == int(f.read_text().split()[2]) + 1  # the corpus's own count: 21 + 1


def test_corpus_relative_path(tmp_path, corpus):
    """A [[source]] path is relative to the spec's folder; the task's source is absolute."""
    f = corpus / "tm" / "bb" / "2x2.txt"
    rel = os.path.relpath(f, tmp_path)
    spec = write(tmp_path, f'task = "info"\nbackends = ["transformer"]\n[[source]]\npath = "{rel}"\nformat = "std"\n'
                           '[args]\nsteps = 5\n')
    assert rel.startswith("..") and spec.n_tasks == 15
    assert {t.source for t in spec.tasks()} == {os.path.normpath(os.path.abspath(f))}


# -- bad specs: located errors ----------------------------------------------------------------

HEAD = 'task = "verify"\nbackends = ["transformer"]\n'
BB3 = f'sources = ["{EX}/bb3.tm"]\n'
BAD = [  # (spec text, line, col, a piece of the message)
    ('task = "verify\n', 1, 15, "not valid TOML"),
    ('task = "verify"\nbackends = [1,\n', 3, 1, "not valid TOML"),  # where tomllib says
    ('tsak = "verify"\n', 1, 1, "unknown key 'tsak'"),
    (HEAD + BB3 + "[gird]\nsteps = 3\n", 4, 2, "unknown key 'gird'"),
    ('task = "verfy"\nbackends = ["transformer"]\n', 1, 8, "unknown task 'verfy'"),
    ('task = 3\n', 1, 8, "task must be a string"),
    ('name = ""\n' + HEAD + BB3, 1, 8, "name is empty"),
    ('task = "verify"\nbackends = ["transformer", "nope"]\n' + BB3, 2, 28, "unknown backend 'nope'"),
    ('task = "verify"\nbackends = []\n' + BB3, 2, 12, "backends is an empty list"),
    ('task = "verify"\nbackends = ["interp"]\n' + BB3, 2, 13, "only runs"),
    ('task = "margin"\nbackends = ["rcnn"]\n' + BB3, 2, 13, "has no margin"),
    (HEAD + 'sources = ["nothing/*.tm"]\n', 3, 12, "matches no file"),
    (HEAD + 'sources = []\n', 3, 11, "sources is an empty list"),
    (HEAD + f'sources = ["{EX}/full_adder.circ"]\n[args]\nsteps = 3\n', 3, 12, "compiles line machines"),
    (HEAD + BB3 + '[grid]\nsteps = []\n', 5, 9, "empty list"),
    (HEAD + BB3 + '[grid]\nsteps = [5, 0]\n', 5, 13, "expected an integer ≥ 1, got 0"),
    (HEAD + BB3 + '[grid]\nsteps = 5\natention = "softmax"\n', 6, 1, "unknown key 'atention' in [grid]"),
    (HEAD + BB3 + '[args]\nsteps = 5\nseed = "x"\n', 6, 8, "seed: expected an integer"),
    (HEAD + BB3 + '[args]\nsteps = 5\ninputs = []\n', 6, 10, "inputs is an empty list"),
    (HEAD + BB3 + '[args]\nsteps = 5\nengines = ["torch", "fused"]\n', 6, 21, "not 'fused'"),
    (HEAD + BB3 + '[grid]\nsteps = 5\n[args]\nsteps = 6\n', 7, 1, "in both [grid] and [args]"),
    (HEAD + BB3, 2, 13, "needs steps"),
    (HEAD + BB3 + '[grid]\nsteps = ["halt+x"]\n', 5, 10, "not 'halt' or 'halt+K'"),
    (HEAD + BB3 + '[grid]\nsteps = 5\nseed = ["halt+1"]\n', 6, 9, "only the step bound"),
    (HEAD + BB3 + 'halt_limit = 20\n[grid]\nsteps = "halt+1"\n', 3, 12, "does not halt within halt_limit = 20 steps"),
    (HEAD + BB3 + 'halt_limit = 0\n', 4, 14, "halt_limit must be"),
    ('task = "verify"\nbackends = ["transformer", "relu-circuit"]\n' + BB3 + '[args]\nsteps = 5\nattention = "softmax"\n',
     6, 1, "an option of the transformer backend but not of relu-circuit"),
    ('task = "run"\nbackends = ["interp"]\n' + BB3 + '[args]\nengine = "torch"\n', 5, 10, "has no engine"),
    ('task = "run"\nbackends = ["transformer"]\n' + BB3 + '[args]\nsteps = 5\n', 5, 1, "max_steps"),
    ('task = "run"\nbackends = ["transformer"]\n' + BB3 + '[args]\nmax_steps = 0\n', 5, 13, "max_steps: expected"),
    ('task = "verify"\nbackends = ["transformer"]\n' + BB3 + '[args]\nsteps = 1979-05-27\n', 5, 9, "date"),
]


def _source_cases(corpus_file: str):
    head = HEAD + f'[[source]]\npath = "{corpus_file}"\nformat = "std"\n'
    return [
        (head + 'items = "1-3, 2000"\n[args]\nsteps = 5\n', 6, 15, "'2000' is out of range: 3x2.txt holds 1,379"),
        (head + 'items = "3-1"\n[args]\nsteps = 5\n', 6, 9, "not a range"),
        (head + 'items = "1,x"\n[args]\nsteps = 5\n', 6, 12, "'x' is not an index"),
        (head + 'names = ["1RB1RZ_1LB0RC_1LC1LA", "nope"]\n[args]\nsteps = 5\n', 6, 34, "no item named 'nope'"),
        (head + 'items = "1"\nnames = ["x"]\n[args]\nsteps = 5\n', 7, 1, "items or names, not both"),
        (head + 'colour = 1\n', 6, 1, "unknown key 'colour' in [[source]] number 1"),
        (HEAD + f'[[source]]\npath = "{corpus_file}"\nformat = "stdd"\n', 5, 10, "unknown format 'stdd'"),
        (HEAD + f'[[source]]\npath = "{corpus_file}"\n', 4, 8, "cannot tell the format"),
        (HEAD + '[[source]]\nformat = "std"\n', 3, 1, "needs path"),
    ]


def check_located(tmp_path, text, line, col, message):
    p = spec_file(tmp_path, text)
    with pytest.raises(Tm2nnError) as info:
        load_spec(p)
    e = info.value
    assert message in e.message, e.render()
    assert (e.file, e.line, e.col) == (str(p), line, col), e.render()
    assert e.snippet == text.split("\n")[line - 1]
    assert e.render().startswith(f"{p}:{line}:{col}: error: ")


@pytest.mark.parametrize("text, line, col, message", BAD)
def test_bad_spec_is_located(tmp_path, text, line, col, message):
    check_located(tmp_path, text, line, col, message)


def test_bad_corpus_sources_are_located(tmp_path, corpus):
    for case in _source_cases(str(corpus / "tm" / "bb" / "3x2.txt")):
        check_located(tmp_path, *case)


def test_oversize_spec_gives_its_count(tmp_path):
    seeds = ", ".join(map(str, range(1001)))
    samples = ", ".join(map(str, range(1, 1001)))
    text = HEAD + BB3 + f"[args]\nsteps = 5\n[grid]\nseed = [{seeds}]\nsamples = [{samples}]\n"
    check_located(tmp_path, text, 6, 1, f"expands to 1,001,000 tasks (1 sources x 1 backends x 1,001,000 grid "
                                        f"points), more than the {MAX_TASKS:,}")


def test_error_in_a_source_file_stays_there(tmp_path):
    bad = tmp_path / "bad.tm"
    bad.write_text("this is not a machine\n")
    with pytest.raises(Tm2nnError) as info:
        write(tmp_path, HEAD + 'sources = ["bad.tm"]\n[args]\nsteps = 3\n')
    assert info.value.file == str(bad) and any("spec.toml:3:12" in n for n in info.value.notes)


def test_not_utf8(tmp_path):
    p = tmp_path / "spec.toml"
    p.write_bytes(b'task = "verify"\nname = "\xff"\n')
    with pytest.raises(Tm2nnError, match="not UTF-8") as info:
        load_spec(p)
    assert (info.value.line, info.value.col) == (2, 9)


def test_cli_exit_2_before_any_task(tmp_path, run_cli):
    p = spec_file(tmp_path, HEAD + 'sources = ["nothing/*.tm"]\n')
    r = run_cli("sweep", p, "-o", tmp_path / "results")
    assert r.code == 2 and f"{p}:3:12: error: 'nothing/*.tm' matches no file" in r.err
    assert "Traceback" not in r.err and not (tmp_path / "results").exists()


def test_learn_paths_from_the_spec_folder(tmp_path):
    spec = write(tmp_path, f'task = "learn"\nbackends = ["abbe-sandon"]\nsources = ["{EX}/parity8.circ"]\n'
                           '[args]\nsamples = "data/train.csv"\n')
    assert spec.tasks()[0].options == {"samples": str(tmp_path / "data" / "train.csv")}


# -- fuzz -------------------------------------------------------------------------------------

PIECES = ["task", "backends", "sources", "name", "halt_limit", "steps", "seed", "inputs", "items", "names", "path",
          "format", "max_steps", "engine", "engines", "beta", "attention", "=", " = ", "[grid]", "[args]",
          "[[source]]", "[source]", "\n", '"verify"', '"run"', '"transformer"', '"interp"', '["relu-circuit"]',
          f'"{EX}/bb3.tm"', f'["{EX}/full_adder.circ"]', f'["{EX}/*.tm"]', '"halt+1"', '"halt+"', '"1-2"', '"std"',
          "[", "]", "{", "}", ",", "0", "-1", "10", "1e400", "nan", "true", "'", '"', '"""', "#", "1979-05-27",
          '"\\u0000"', "x", ".", "\\"]


KEYS = ["task", "backends", "sources", "name", "halt_limit", "steps", "seed", "inputs", "items", "names", "path",
        "format", "max_steps", "input", "engine", "engines", "beta", "attention", "samples", "corrections", "x"]
VALUES = ['"verify"', '"run"', '"info"', '"margin"', '"transformer"', '["interp", "transformer"]', '["relu-circuit"]',
          f'"{EX}/bb3.tm"', f'["{EX}/full_adder.circ"]', f'["{EX}/bb*.tm"]', '"halt+1"', '["halt", 5]', '"halt+"',
          '"1-2"', '"2-1"', '"std"', "0", "-1", "3", "[1, 2]", "[]", "1e400", "nan", "true", '[""]', '[["0"], ["1"]]',
          '["torch", "index"]', "1979-05-27", '"\\u0000"', "{a = 1}", '"softmax"', "2.5"]
LINES = st.one_of(st.sampled_from(["[grid]", "[args]", "[[source]]", "[source]", "", "# c"]),
                  st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(KEYS), st.sampled_from(VALUES)))
TASKS = ['"verify"', '"run"', '"info"', '"margin"', '"learn"', '"find-beta"', "3"]
BACKS = ['"transformer"', '["interp", "transformer"]', '["relu-circuit"]', '["rcnn", "transformer"]', '[]', '"abbe-sandon"']
SOURCES = [f'"{EX}/bb3.tm"', f'["{EX}/full_adder.circ"]', f'["{EX}/bb*.tm"]', f'["{EX}/majority7.circ"]', '["no/*"]',
           f'["{EX}/unary_addition.tm", "{EX}/grid_copy_down.tm"]']
SOURCE_BLOCKS = [f'[[source]]\npath = "{EX}/majority7.circ"\nitems = {v}' for v in ('"1-2"', '"2-3"', '"3"', '"0"', "2")] \
    + [f'[[source]]\npath = "{EX}/bb3.tm"\nnames = ["bb3"]', f'[[source]]\npath = "{EX}/parity8.circ"\nformat = "circ"']


def _spec_text(task, backs, sources, blocks, grid, args) -> str:
    lines = [f"task = {task}", f"backends = {backs}"] + ([f"sources = {sources}"] if sources else []) + blocks
    for table, kv in (("grid", grid), ("args", args)):
        if kv:
            lines += [f"[{table}]"] + [f"{k} = {v}" for k, v in kv.items()]
    return "\n".join(lines) + "\n"


TABLE = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
SPECS = st.builds(_spec_text, st.sampled_from(TASKS), st.sampled_from(BACKS), st.sampled_from([None, *SOURCES]),
                  st.lists(st.sampled_from(SOURCE_BLOCKS), max_size=2), TABLE, TABLE)
TEXTS = st.one_of(st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
                  st.lists(LINES, max_size=12).map("\n".join), SPECS)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(TEXTS)
def test_fuzz_only_tm2nn_errors(text):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.toml"
        p.write_text(text)
        try:
            spec = load_spec(p)
        except Tm2nnError as e:
            assert e.file is not None and e.line is not None, e.render()
            e.render()
        else:
            assert spec.n_tasks == len(spec.tasks()) >= 1
