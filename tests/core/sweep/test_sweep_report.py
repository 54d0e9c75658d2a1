"""``tm2nn sweep report`` (tm2nn/sweep/report.py): the summary of hand-made result rows
(counts, percentiles, the slowest tasks, the failures), the plots the rows allow, and no
crash on empty results or rows that are all errors."""

from __future__ import annotations

import itertools
import json

import pytest

from tm2nn.errors import Tm2nnError
from tm2nn.sweep.report import plots, render, report, summarize

PNG = b"\x89PNG\r\n\x1a\n"
_ids = itertools.count(1)


def row(kind="verify", backend="relu-circuit", outcome="ok", seconds=1.0, options=None, args=None, figures=None,
        source="/x/examples/full_adder.circ", name=None, error=None, rss=100.0):
    """One row with every column of the results table (docs/sweep.md, "Results")."""
    return {"task_id": f"{next(_ids):016x}", "sweep": "demo", "kind": kind, "source": source, "name": name,
            "format": None, "backend": backend, "options": json.dumps(options or {}, sort_keys=True),
            "args": json.dumps(args or {}, sort_keys=True), "outcome": outcome,
            "exit_class": {"ok": 0, "mismatch": 1, "error": 2, "crash": 70}[outcome], "error": error,
            "figures": json.dumps(figures or {}, sort_keys=True), "seconds": seconds, "peak_rss_mb": rss,
            "tm2nn_version": "0", "source_sha256": "0" * 64, "worker": "h:1", "finished_at": "2025-01-01T00:00:00Z"}


def group(summary, backend, kind):
    return next(g for g in summary["groups"] if (g["backend"], g["kind"]) == (backend, kind))


@pytest.fixture
def mixed():
    first = {"step": 7, "field": "state", "expected": "B", "got": "C"}
    rows = [row(seconds=float(s), rss=float(s)) for s in range(1, 98)]  # 97 ok, 1 .. 97 s
    rows += [row(outcome="mismatch", seconds=98.0, figures={"ok": False, "first": first}),
             row(outcome="error", seconds=99.0, error="bad option steps"),
             row(outcome="crash", seconds=100.0, error="ValueError: boom")]
    rows += [row(backend="transformer", seconds=0.5, rss=2000.0) for _ in range(3)]
    return rows


def test_summary_counts_percentiles_slowest_failures(mixed):
    s = summarize(mixed)
    assert s["tasks"] == 103 and s["sweep"] == "demo"
    assert s["outcomes"] == {"ok": 100, "mismatch": 1, "error": 1, "crash": 1}
    g = group(s, "relu-circuit", "verify")
    assert (g["tasks"], g["ok"], g["mismatch"], g["error"], g["crash"]) == (100, 97, 1, 1, 1)
    # seconds 1..100: numpy's linear percentiles
    assert g["seconds"]["p50"] == pytest.approx(50.5) and g["seconds"]["p90"] == pytest.approx(90.1)
    assert g["seconds"]["p99"] == pytest.approx(99.01) and g["seconds"]["max"] == 100.0
    assert g["seconds"]["total"] == pytest.approx(5050.0) and g["peak_rss_mb"] == 100.0
    t = group(s, "transformer", "verify")
    assert (t["tasks"], t["ok"], t["seconds"]["max"], t["peak_rss_mb"]) == (3, 3, 0.5, 2000.0)
    assert s["total"]["peak_rss_mb"] == 2000.0
    assert [x["seconds"] for x in s["slowest"]] == [float(v) for v in range(100, 90, -1)]
    assert s["slowest"][0]["options"] == {} and s["slowest"][0]["source"].endswith("full_adder.circ")
    # crashes first, then mismatches (with verify's first divergence), then errors
    assert [f["outcome"] for f in s["failures"]] == ["crash", "mismatch", "error"]
    assert s["failures"][0]["error"] == "ValueError: boom" and s["failures"][0]["exit_class"] == 70
    assert s["failures"][1]["first"] == {"step": 7, "field": "state", "expected": "B", "got": "C"}
    json.dumps(s)  # JSON-able


def test_a_mismatch_shows_in_the_counts_and_tables(mixed):
    """Mutation: one ok row turned into a mismatch moves one count, and the table says so."""
    from rich.console import Console

    ok = [r for r in mixed if r["outcome"] == "ok"]
    assert group(summarize(ok), "transformer", "verify")["mismatch"] == 0
    ok[-1] = {**ok[-1], "outcome": "mismatch", "exit_class": 1,
              "figures": json.dumps({"first": {"step": 3, "field": "head", "expected": 1, "got": 2}})}
    s = summarize(ok)
    g = group(s, "transformer", "verify")
    assert (g["ok"], g["mismatch"]) == (2, 1) and s["outcomes"]["mismatch"] == 1
    c = Console(record=True, width=300)
    render({**s, "plots": {**s["plots"], "files": ["p.png"]}}, c)
    text = c.export_text()
    assert "demo: 100 tasks finished" in text and "failures: 1 of 1" in text
    assert "step 3: head expected 1, got 2" in text and "plot: p.png" in text


def margin_rows():
    """margin tasks at T = 8, 16, 32 as the transformer's Table JSON holds them: a row per
    corrections setting with the certified radius and the attacks."""
    rows = []
    for T in (8, 16, 32):
        js = [{"corrections": c, "steps": T, "certified": (1e-3 if c else 1e-2) / T, "eps_random": 0.5 / T,
               "eps_gradient": 0.3 / T, "eps_min": 0.3 / T} for c in (True, False)]
        rows.append(row("margin", "transformer", options={"steps": T},
                        figures={"title": "t", "columns": [], "rows": [], "json": js}))
    return rows


def test_plots_margin_beta_verify(tmp_path):
    rows = margin_rows()
    rows += [row("find-beta", "transformer", options={"steps": T, "corrections": c}, seconds=2.0,
                 figures={"beta": 1.5 * T / 8 + c, "below": 1.4, "tried": [], "n_inputs": 1, "mode": "given"})
             for T in (8, 16, 32) for c in (True, False)]
    # no beta up to the search's cap: a mismatch row (as tasks.py writes it), noted, not plotted
    rows.append(row("find-beta", "transformer", outcome="mismatch", options={"steps": 64, "corrections": True},
                    figures={"beta": None, "below": 1e4}))
    rows += [row("verify", b, options={"steps": T}, seconds=T / 100) for T in (8, 64, 512) for b in ("a", "b")]
    s = summarize(rows)
    assert {(p["kind"], p["x"]) for p in s["plots"]["planned"]} == {("margin", "steps"), ("find-beta", "steps"),
                                                                   ("verify", "steps"), ("*", None)}
    notes = []
    files = plots(rows, tmp_path / "plots", notes)
    assert sorted(f.name for f in files) == ["beta_min_vs_steps.png", "margin_vs_steps.png",
                                             "seconds_histogram.png", "verify_seconds_vs_steps.png"]
    for f in files:
        data = f.read_bytes()
        assert data[:8] == PNG and len(data) > 5000
    assert any("1 tasks found no beta" in n for n in notes) and not any("upper bound there" in n for n in notes)


def test_the_margin_read_from_each_backends_table():
    """The numbers plotted: ``certified`` (lower bound) and the smallest attack (``eps_min``,
    the transformer's; else ``min(eps_gradient, eps_random)``, the relu-circuit's), per
    corrections setting."""
    from tm2nn.sweep.report import _margin_points, _plan

    def relu(T):
        return [{"engine": "torch", "corrections": c, "certified": 0.01 * T, "eps_gradient": 0.02 * T,
                 "eps_random": 0.05 * T, "eps_joint_gradient": 1e-9} for c in (True, False)]
    rows = margin_rows() + [row("margin", "relu-circuit", options={"steps": T}, figures={"json": relu(T)})
                            for T in (8, 16)]
    plan = next(p for p in _plan(rows)[0] if p.kind == "margin")
    points, notes = _margin_points(plan)
    assert sorted(points) == ["relu-circuit, corrections off", "relu-circuit, corrections on",
                              "transformer, corrections off", "transformer, corrections on"] and not notes
    assert points["transformer, corrections on"][0] == (8.0, 1e-3 / 8, 0.3 / 8)
    assert points["relu-circuit, corrections off"][1] == (16.0, 0.01 * 16, 0.02 * 16)


def test_no_numeric_axis_no_plot_and_a_note(tmp_path):
    rows = [r for r in margin_rows() if json.loads(r["options"])["steps"] == 8] * 2  # one T only
    s = summarize(rows)
    assert [p["kind"] for p in s["plots"]["planned"]] == ["*"]
    assert any(n.startswith("margin: no plot") for n in s["plots"]["notes"])
    assert [f.name for f in plots(rows, tmp_path)] == ["seconds_histogram.png"]
    # seeds are replicates, never an axis
    assert summarize([row("margin", options={"steps": 8}, args={"seed": k}) for k in (0, 1)])["plots"]["planned"][0]["x"] is None


def test_empty_and_error_only(tmp_path):
    from rich.console import Console

    for rows in ([], [row(outcome="error", error="no such file", seconds=None, rss=None)],
                 [row("margin", outcome="error", error="x", options={"steps": T}) for T in (8, 16)]):
        s = summarize(rows)
        json.dumps(s)
        assert s["outcomes"]["ok"] == 0 and not [p for p in s["plots"]["planned"] if p["kind"] != "*"]
        files = plots(rows, tmp_path / f"p{len(rows)}")
        assert all(f.name == "seconds_histogram.png" for f in files)
        c = Console(record=True, width=200)
        render({**s, "plots": {**s["plots"], "files": [str(f) for f in files]}}, c)
        assert ("no finished tasks" in c.export_text()) == (not rows)


def test_report_reads_the_results_folder(tmp_path, capsys):
    store = pytest.importorskip("tm2nn.sweep.store")
    pytest.importorskip("pyarrow")
    results = tmp_path / "results"
    st = store.Store(results)
    for r in margin_rows() + [row(outcome="crash", error="RuntimeError: x")]:
        st.append(r)
    s = report(results, json=True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["tasks"] == 4 and printed["outcomes"]["crash"] == 1 == s["outcomes"]["crash"]
    assert sorted(p.rsplit("/", 1)[1] for p in printed["plots"]["files"]) == ["margin_vs_steps.png",
                                                                              "seconds_histogram.png"]
    assert (results / "plots" / "margin_vs_steps.png").read_bytes()[:8] == PNG
    report(results, out=tmp_path / "elsewhere")
    assert "crash" in capsys.readouterr().out and (tmp_path / "elsewhere" / "seconds_histogram.png").is_file()


def test_report_refuses_what_is_not_a_results_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    for bad, why in ((tmp_path / "missing", "no such results folder"), (tmp_path / "f", "not a folder"),
                     (tmp_path, "not a sweep's results folder")):
        with pytest.raises(Tm2nnError, match=why) as e:
            report(bad)
        assert e.value.file == str(bad)
    with pytest.raises(Tm2nnError, match="/f' is a file"):  # the plots' folder
        plots([row(), row()], tmp_path / "f")
    with pytest.raises(Tm2nnError, match="does not exist"):
        plots([row(), row()], tmp_path / "missing" / "plots")
