"""``tm2nn sweep`` end to end (issue 22): a spec run, rerun (nothing to do), reported;
failed tasks kept as rows and run again with --retry-failed; the verb's usage errors."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES

SPEC = """name = "cli"
task = "run"
backends = ["interp"]
sources = ["{bb3}"]

[grid]
max_steps = [5, "halt"]
"""


def _spec(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(bb3=EXAMPLES / "bb3.tm"))
    return path


def test_a_sweep_runs_resumes_and_reports(tmp_path, run_cli):
    spec, out = _spec(tmp_path), tmp_path / "r"
    r = run_cli("sweep", spec, "-o", out, "--workers", "1", "--json")
    assert r.code == 1  # bb3 does not halt within 5 steps: a mismatch row, and the sweep goes on
    assert json.loads(r.out) == {"sweep": "cli", "tasks": 2, "ok": 1, "mismatch": 1, "error": 0, "crash": 0,
                                 "results": str(out)}
    assert "2 tasks, 0 already in" in r.err and "running 2" in r.err
    again = run_cli("sweep", spec, "-o", out, "--workers", "1", "--json")
    assert again.code == 1 and json.loads(again.out) == json.loads(r.out) and "running 0" in again.err
    rep = run_cli("sweep", "report", out, "--json")
    assert rep.code == 0 and json.loads(rep.out)["outcomes"]["mismatch"] == 1
    retry = run_cli("sweep", spec, "-o", out, "--workers", "1", "--retry-failed", "--json")
    assert "1 failed rows removed" in retry.err and "running 1" in retry.err and retry.code == 1
    info = json.loads((out / "sweep.json").read_text())
    assert info["name"] == "cli" and info["tasks"] == 2


def test_a_damaged_row_is_quarantined_and_its_task_runs_again(tmp_path, run_cli):
    """One corrupt row file: the rerun and the report move it into RESULTS/quarantine/,
    say so in one line each, rerun its task and keep every other row."""
    spec, out = _spec(tmp_path), tmp_path / "r"
    first = run_cli("sweep", spec, "-o", out, "--workers", "1", "--json")
    rows = sorted((out / "rows").iterdir())
    kept, bad = rows
    kept_bytes = kept.read_bytes()
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2])  # truncated
    rep = run_cli("sweep", "report", out, "--json")
    assert rep.code == 0 and sum(json.loads(rep.out)["outcomes"].values()) == 1
    assert rep.err.count("warning: not a row of a tm2nn results table (") == 1 and "Traceback" not in rep.err
    assert (out / "quarantine" / bad.name).exists() and not bad.exists()
    bad.write_bytes(b"garbage")
    again = run_cli("sweep", spec, "-o", out, "--workers", "1", "--json")
    assert again.code == first.code == 1 and json.loads(again.out) == json.loads(first.out)
    assert "1 already in" in again.err and "running 1" in again.err
    assert f"{bad}: warning: not a row of a tm2nn results table (" in again.err and "its task runs again" in again.err
    assert kept.read_bytes() == kept_bytes and bad.exists() and (out / "quarantine" / f"{bad.stem}.1.parquet").exists()


def test_dry_run_lists_the_tasks_and_runs_nothing(tmp_path, run_cli):
    r = run_cli("sweep", _spec(tmp_path), "--dry-run")
    assert r.code == 0 and len(r.out.splitlines()) == 2 and "max_steps=21" in r.out and "2 tasks" in r.err
    assert not (tmp_path / "r").exists()


def test_usage_errors(tmp_path, run_cli):
    spec = _spec(tmp_path)
    assert run_cli("sweep", spec).code == 2  # no -o
    r = run_cli("sweep", spec, "extra", "-o", tmp_path / "r")
    assert r.code == 2 and "the results folder goes after -o" in r.err
    r = run_cli("sweep", spec, "-o", tmp_path / "r", "--ray", "auto", "--workers", "2")
    assert r.code == 2 and "--workers sizes the local pool" in r.err
    r = run_cli("sweep", "report")
    assert r.code == 2 and "needs the results folder" in r.err
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "verify"\nbackends = ["transformer"]\nsources = ["nothing*.tm"]\n')
    r = run_cli("sweep", bad, "-o", tmp_path / "r")
    assert r.code == 2 and r.err.startswith(f"{bad}:3:") and "Traceback" not in r.err
    assert not (tmp_path / "r").exists()
