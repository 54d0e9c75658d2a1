"""GD-trace machine mode (issue 7 acceptance, §4.4): for every example machine and BB(2),
BB(3), optimizer step k of (22) equals machine step k of the §4.1 machine, the run mapped
back equals the source machine's run at every step, the loss stays within Prop. 4.3's
bounds (23) and the halting loss is below every earlier one (all inside
``gd_trace.check.check_one``); plus the CLI verbs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tests.strategies import machines
from tm2nn.backends.gd_trace.check import check_one
from tm2nn.backends.gd_trace.machine_mode import estimate, run_gd
from tm2nn.cli import main
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.nets import Net, SparseMatrix
from tm2nn.source import SourceText
from tm2nn.syntax import load, std
from tm2nn.verify import verify_compiled

ROOT = Path(__file__).resolve().parents[3]
BB = ROOT.parent / "shared" / "corpus" / "tm" / "bb"
LINE_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.tm")
                       if load(p).tape_kind == "line" and not p.name.startswith("learner"))


def compile_gd(m, **options):
    """The §4.4 model of ``m`` (the user's handle: the optimizer runs its torch module)."""
    return tm2nn.compile(m, "gd-trace", **options)



def documented_input(path: Path) -> str:
    """The ``# input:`` an example documents ('' for the empty tape)."""
    for line in path.read_text().splitlines():
        if line.startswith("# input:"):
            v = line.split(":", 1)[1].strip()
            return "" if v == "''" else v
    return ""


def traced(m, text: str, steps: int):
    c = compile_gd(m, steps=steps, max_input=len(text))
    g, d, od = check_one(c, text, use_onnx=True)
    assert d is None, d
    assert od is None, od
    return c, g


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_every_example_machine(path):
    m = load(path)
    text = documented_input(path)
    want = run_machine(m, text, 10_000)
    assert want.halted
    c, g = traced(m, text, want.steps)
    assert g.result.report() == want.report()
    # Prop. 4.3: the iterate reaches the halting vertex exactly at the lowered halt
    assert g.halted_at[-1] and not any(g.halted_at[:-1])
    assert len(g.losses) - 1 == g.lowered.steps
    assert g.max_deviation == 0.0


def bb(n: int):
    return list(std.parse(SourceText.from_file(BB / f"{n}x2.txt")))


@pytest.mark.skipif(not BB.is_dir(), reason="../shared/corpus is absent")
def test_bb2_all_and_bb3_champion():
    for m in bb(2):
        want = run_machine(m, "", 1000)
        traced(m, "", want.steps)
    champ = max(bb(3), key=lambda m: run_machine(m, "", 1000).steps)
    _c, g = traced(champ, "", 21)
    assert g.result.steps == 21 and g.result.report()["sigma"] == 5


@pytest.mark.slow
@pytest.mark.skipif(not BB.is_dir(), reason="../shared/corpus is absent")
def test_bb3_sample():
    ms = bb(3)
    rng = np.random.default_rng(3)
    for i in rng.choice(len(ms), 60, replace=False):
        m = ms[int(i)]
        want = run_machine(m, "", 1000)
        if want.halted:
            traced(m, "", want.steps)


@pytest.mark.parametrize("counts", [False, True])
def test_missing_rule_conventions(counts):
    m = load(ROOT / "examples" / "binary_increment.tm")
    rules = tuple(r for r in m.rules if not (r.state == "carry" and r.read == "0"))
    m = m.replace(rules=rules, missing_rule_counts_step=counts)
    want = run_machine(m, "10", 100)
    assert want.halted
    _c, g = traced(m, "10", want.steps + 1)
    assert g.result.report() == want.report()


def test_step_bound_cuts_the_run():
    m = load(ROOT / "examples" / "bb3.tm")
    c = compile_gd(m, steps=7, max_input=0)
    g = run_gd(c, "")
    want = run_machine(m, "", 7)
    assert g.result.report() == want.report() and not g.result.halted


def test_verify_exhaustive_and_first_divergence():
    m = load(ROOT / "examples" / "binary_increment.tm")
    c = compile_gd(m, steps=12, max_input=3)
    rep = verify_compiled(c, samples=10, seed=0)
    assert rep.ok and rep.mode == "exhaustive" and rep.n_inputs == 15
    # a corrupted construction is caught, as that input's divergence: verify runs the
    # optimizer on the model's own net, so halving the Lagrange weights of (21) breaks it
    for name in ("lag1", "mv"):
        op = c.net.node(name)
        w = op.weight
        bad = dataclasses.replace(op, weight=SparseMatrix(w.shape, w.rows, w.cols, w.vals * 0.5))
        net = Net(c.net.name, c.net.inputs, tuple(bad if o is op else o for o in c.net.nodes), c.net.outputs)
        rep = verify_compiled(dataclasses.replace(c, net=net), inputs=["1", "11"], use_onnx=False)
        assert not rep.ok and rep.engines["torch"] == 2 and rep.first.input == "1", (name, rep)
        assert rep.first.field == "decoding an iterate", rep.first


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), data=st.data())
def test_random_machines(m, data):
    syms = [a for a in m.alphabet if a != m.blank]
    text = data.draw(st.text(alphabet=syms, max_size=3)) if syms else ""
    want = run_machine(m, text, 30)
    c = compile_gd(m, steps=30, max_input=len(text))
    g, d, _ = check_one(c, text)
    assert d is None, d
    assert g.result.report() == want.report()


def test_refusals():
    m = load(ROOT / "examples" / "bb3.tm")
    with pytest.raises(Tm2nnError, match="dimension"):
        compile_gd(m, steps=10, max_input=0, max_dim=100)
    c = compile_gd(m, steps=10, max_input=2)
    with pytest.raises(Tm2nnError, match="at most 2"):
        run_gd(c, "111")
    with pytest.raises(Tm2nnError):
        compile_gd(load(ROOT / "examples" / "full_adder.circ"))
    est = estimate(m, 10, 2)
    assert est["vertices"] == 3 * est["states"] * 4


def test_cli_run_verify_info_compile_eval(tmp_path, capsys):
    src = str(ROOT / "examples" / "bb3.tm")
    assert main(["run", src, "--backend", "gd-trace", "--max-steps", "30", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    # the run report is the interpreter's (ARCHITECTURE.md); exit 0 says every step matched
    assert rep == run_machine(load(src), "", 30).report()
    assert main(["run", src, "--backend", "gd-trace", "--max-steps", "5", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["halted"] is False
    assert main(["verify", src, "--backend", "gd-trace", "--steps", "25", "--max-input", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["info", src, "--backend", "gd-trace", "--steps", "25", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    rows = {r[0].split(" (")[0]: r for r in info["bounds"]}
    assert any("Cor. 2.3" in r[2] for r in info["bounds"]) and any("Cor. 2.2" in r[0] for r in info["bounds"])
    assert rows["tape variables T, H"][1] == rows["tape variables T, H"][2].split("= ")[1]
    out = tmp_path / "bb3.onnx"
    assert main(["compile", src, "--backend", "gd-trace", "--steps", "25", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == run_machine(load(src), "", 25).report()
    assert main(["run", str(ROOT / "examples" / "full_adder.circ"), "--backend", "gd-trace"]) == 2
