"""The command line: verbs, reports, exit codes, error rendering, no tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES, ROOT
from tm2nn.backends.protocol import Example
from tm2nn.cli import main
from tm2nn.syntax import FORMATS

BB3_STD = "1RB1RZ_1LB0RC_1LC1LA"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_json_report_follows_the_contract(tmp_path, capsys):
    f = tmp_path / "bb3.std"
    f.write_text(BB3_STD + "\n")
    code, out, _ = run_cli(capsys, "run", str(f), "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {"halted", "steps", "state", "outcome", "tape", "head", "sigma"}
    assert (report["steps"], report["sigma"], report["halted"]) == (21, 5, True)


def test_run_not_halting_exits_1(tmp_path, capsys):
    f = tmp_path / "bb3.std"
    f.write_text(BB3_STD)
    code, out, _ = run_cli(capsys, "run", str(f), "--max-steps", "10", "--json")
    assert code == 1
    assert json.loads(out) == {**json.loads(out), "halted": False, "steps": 10, "outcome": None}


def test_run_trace_json_has_every_step(tmp_path, capsys):
    f = tmp_path / "bb3.std"
    f.write_text(BB3_STD)
    code, out, _ = run_cli(capsys, "run", str(f), "--trace", "--json")
    rep = json.loads(out)
    assert code == 0 and len(rep["trace"]) == 21
    assert rep["trace"][0] == {"step": 1, "state": "B", "head": 1, "read": "0", "write": "1"}
    assert rep["trace"][-1]["state"] == "Z"


def test_bad_file_prints_location_and_caret_and_exits_2(tmp_path, capsys):
    f = tmp_path / "bad.std"
    f.write_text("1RB1RZ_1LB0XC_1LC1LA\n")
    code, _, err = run_cli(capsys, "check", str(f))
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith(f"{f}:1:") and "error" in first
    assert err.splitlines()[-1].strip() == "^"
    assert "Traceback" not in err


def test_missing_file_and_unknown_format(tmp_path, capsys):
    code, _, err = run_cli(capsys, "check", str(tmp_path / "nope.tm"))
    assert code == 2 and "no such file" in err
    code, _, err = run_cli(capsys, "check", "x.unknown")
    assert code == 2 and "--format" in err
    code, _, err = run_cli(capsys, "check", "x.tm", "--format", "nosuch")
    assert code == 2 and "unknown format" in err


def test_usage_errors_exit_2(capsys):
    code, _, err = run_cli(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err
    code, _, err = run_cli(capsys, "run")
    assert code == 2 and "source" in err


def test_bad_input_string_is_located(tmp_path, capsys):
    f = tmp_path / "bb3.std"
    f.write_text(BB3_STD)
    code, _, err = run_cli(capsys, "run", str(f), "--input", "01x")
    assert code == 2 and err.startswith("--input:1:3:")


def test_convert_std_to_tm_and_back(tmp_path, capsys):
    f = tmp_path / "bb3.std"
    f.write_text(BB3_STD)
    out_tm = tmp_path / "bb3.tm"
    assert run_cli(capsys, "convert", str(f), "--to", "tm", "-o", str(out_tm))[0] == 0
    code, out, _ = run_cli(capsys, "run", str(out_tm), "--json")
    assert code == 0 and json.loads(out)["steps"] == 21
    code, out, _ = run_cli(capsys, "convert", str(out_tm), "--to", "std")
    assert code == 0 and out.strip() == BB3_STD


def test_convert_failure_writes_no_file(tmp_path, capsys):
    src = tmp_path / "stay.tm"
    src.write_text("machine s {\n alphabet: 0 1\n blank: 0\n start: a\n halt: h\n a 0 -> 1 S h\n}\n")
    out = tmp_path / "out.std"
    code, _, err = run_cli(capsys, "convert", str(src), "--to", "std", "-o", str(out))
    assert code == 2 and not out.exists()
    assert not list(tmp_path.glob(".out.std.*"))


def test_circuit_run_reports_outputs(capsys):
    code, out, _ = run_cli(capsys, "run", str(EXAMPLES / "full_adder.circ"), "--input", "111", "--json")
    assert code == 0 and json.loads(out) == {"outputs": "11"}
    code, _, err = run_cli(capsys, "run", str(EXAMPLES / "full_adder.circ"), "--input", "11")
    assert code == 2 and "3 inputs" in err


def test_check_json_summaries(capsys):
    code, out, _ = run_cli(capsys, "check", str(EXAMPLES / "bb4.tm"), "--json")
    s = json.loads(out)
    assert code == 0 and s["kind"] == "machine" and s["transitions"] == 8
    code, out, _ = run_cli(capsys, "check", str(EXAMPLES / "ripple_adder4.circ"), "--json")
    s = json.loads(out)
    assert code == 0 and s["kind"] == "circuit" and s["inputs"] == 9 and s["outputs"] == 5


def test_demo_runs_every_example_as_documented(capsys):
    from tm2nn.demo import run_examples

    rows = run_examples(EXAMPLES)
    assert len(rows) >= 11
    bad = [r for r in rows if r["ok"] is not True]
    assert not bad, bad


def test_console_script_has_no_traceback_on_user_error(tmp_path):
    f = tmp_path / "bad.tm"
    f.write_text("machine m {\n  alphabet: 0 1\n  start: q\n  q 0 -> 1 Q q\n}\n")
    exe = [sys.executable, "-m", "tm2nn.cli"]
    p = subprocess.run([*exe, "check", str(f)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and p.stderr.startswith(f"{f}:")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(sorted(FORMATS)), data=st.binary(max_size=300))
def test_fuzzed_files_give_only_tm2nn_errors(tmp_path, capsys, fmt, data):
    f = tmp_path / "fuzz.bin"
    f.write_bytes(data)
    code = main(["check", str(f), "--format", fmt])
    _, err = capsys.readouterr()
    assert code in (0, 2)
    if code == 2:
        assert "error:" in err


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_module_is_wired(fmt):
    from tm2nn.syntax import format_module

    mod = format_module(fmt)
    assert mod.KIND in ("machine", "circuit") and callable(mod.parse)


def test_demo_compiles_and_verifies_one_example_per_backend(tmp_path):
    from tm2nn.backends import BUILTIN as BACKENDS
    from tm2nn.demo import backend_jobs, run_backends

    assert {b.split()[0] for b, _ex in backend_jobs()} == set(BACKENDS)  # no backend left out
    rows = run_backends(main, EXAMPLES, tmp_path)
    assert [r for r in rows if not r["ok"]] == []
    for r in rows:  # each wrote a self-contained ONNX model
        assert Path(r["model"]).parent == tmp_path and Path(r["model"]).stat().st_size > 10_000
        assert "KiB" in r["size"]


def test_demo_table_reports_a_failing_job(tmp_path, monkeypatch):
    from tm2nn import demo

    bad = [("rcnn", Example("bb3.tm", ("compile {ex}/bb3.tm --backend rcnn --steps 0 -o {out}/x.onnx --json",)))]
    (row,) = demo.run_backends(main, EXAMPLES, tmp_path, jobs=bad)
    assert row["ok"] is False and "step bound" in row["checked"]
