"""``tm2nn export --to transformer-lens``, and ``tm2nn info`` / ``tm2nn verify`` on the
folder (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tm2nn.backends.transformer.decoder_only.exported import expected_tokens, verify_exported
from tm2nn.emit.transformer_lens import read_export, write_export
from tm2nn.limits import set_memory_limit
from tm2nn.options import OptionError
from tm2nn.syntax import load, parse_text

from ...strategies import machines
from ..emit.native_models import COPY_FIRST, copy_first_model, plain_runs

pytest.importorskip("transformer_lens")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load_str(text: str):
    return parse_text(text, "tm")[0]


def _hand_built(folder, **kw):
    return write_export(copy_first_model(**kw), folder, dtype="float64",
                        source={"path": "copy_first.tm", "name": "copy_first", "sha256": "0" * 64, "format": "tm",
                                "text": COPY_FIRST})


def test_info_and_verify_read_an_export_folder(tmp_path, run_cli):
    good = _hand_built(tmp_path / "good")
    r = run_cli("info", good, "--json")
    assert r.code == 0, r.err
    facts = json.loads(r.out)
    assert (facts["d_model"], facts["layers"], facts["heads"], facts["n_ctx"], facts["beta"], facts["dtype"]) == \
        (15, 1, 1, 6, 30.0, "float64")
    assert facts["exact_T"] == {"float32": 1, "float64": 1}
    r = run_cli("info", good)
    assert r.code == 0 and "exact_T (float64)" in r.out
    r = run_cli("verify", good, "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["ok"] and rep["samples_checked"] == 15 and rep["complete"] and rep["min_logit_margin"] > 0.5
    bad = _hand_built(tmp_path / "bad", write_one="H|0|R")
    r = run_cli("verify", bad)
    assert r.code == 1 and "first divergence (transformer_lens): input '1', step 1, write: expected '1', got '0'" in r.out


def test_bad_input_is_refused_with_exit_2(tmp_path, run_cli):
    notes = tmp_path / "notes"
    notes.mkdir()
    for argv, message in [
        (("info", notes), "not a tm2nn TransformerLens export"),
        (("verify", notes), "not a tm2nn TransformerLens export"),
        (("export", EXAMPLES / "bb3.tm", "--to", "transformer-lens", "--steps", "0"), "--steps"),
        (("export", EXAMPLES / "bb3.tm", "--to", "onnx", "--steps", "3"), "invalid choice"),
        (("export", EXAMPLES / "full_adder.circ", "--to", "transformer-lens", "--steps", "3", "-o", tmp_path / "c"),
         "not a one-tape machine"),
    ]:
        r = run_cli(*argv)
        assert r.code == 2 and message in r.err and "Traceback" not in r.err, (argv, r.err)
    _hand_built(tmp_path / "m")
    r = run_cli("verify", tmp_path / "m", "--input", "0000")
    assert r.code == 2 and "more than the export's max_input 3" in r.err
    r = run_cli("verify", tmp_path / "m", "--find-beta")
    assert r.code == 2 and "--find-beta does not apply to an exported folder" in r.err


def test_a_plain_transformer_lens_process_replays_the_exports(tmp_path, run_cli):
    """The acceptance check: one ``python -I`` process that imports torch, safetensors and
    transformer_lens only decodes each folder's documented prompts, and each run is the
    interpreter's, step for step: the hand-built model's folder, and bb3, bb4
    and binary_increment as the CLI exports them."""
    first = load_str(COPY_FIRST)
    jobs = {_hand_built(tmp_path / "copy-first-tl"): ["1", "0", "", "011", "<card>"]}
    want = {str(tmp_path / "copy-first-tl"): {t: expected_tokens(first, t, 1) for t in ["1", "0", "", "011"]}}
    want[str(tmp_path / "copy-first-tl")]["<card>"] = expected_tokens(first, "", 1)  # the model card's snippet
    for name, steps, texts in (("bb3", 21, ["", "<card>"]), ("bb4", 107, [""]),
                                ("binary_increment", 12, ["1011", "", "111"])):
        out = tmp_path / f"{name}-tl"
        r = run_cli("export", EXAMPLES / f"{name}.tm", "--to", "transformer-lens", "--steps", steps, "-o", out,
                    "--json")
        assert r.code == 0, r.err
        m = load(EXAMPLES / f"{name}.tm")
        jobs[out] = texts
        want[str(out)] = {t: expected_tokens(m, "" if t == "<card>" else t, steps) for t in texts}
    r = run_cli("verify", tmp_path / "bb3-tl", "--input", "", "--input", "1101", "--json")
    assert r.code == 0 and json.loads(r.out)["ok"], r.err
    assert want[str(tmp_path / "copy-first-tl")]["1"] == ["H|1|R", "<halt>"]
    assert plain_runs(jobs) == want


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(ms=st.lists(machines(grid=False, max_states=4, max_symbols=3, conventions=False), min_size=3, max_size=3))
def test_random_machines_replay_in_a_plain_transformer_lens_process(tmp_path_factory, ms):
    """The acceptance on hypothesis machines (2-4 states, 2-3 symbols): each exported folder,
    decoded greedily by one plain ``python -I`` process that imports only torch, safetensors
    and transformer_lens, replays the interpreter's run step for step; float64 and float32."""
    jobs, want = {}, {}
    for k, m in enumerate(ms):
        out = tm2nn.export(m, 6, max_input=2, dtype=("float64", "float32")[k % 2],
                           output=tmp_path_factory.mktemp("h") / f"m{k}-tl")
        texts = ["", m.alphabet[-1], m.alphabet[0] + m.alphabet[-1]]
        jobs[out] = texts
        want[str(out)] = {t: expected_tokens(m, t, 6) for t in texts}
    got = plain_runs(jobs)
    for folder, runs in want.items():
        for text, tokens in runs.items():
            assert got[folder][text][:len(tokens)] == tokens, (folder, text)


def test_the_export_verb_writes_what_its_builder_built(tmp_path, run_cli, monkeypatch):
    """The wiring from the verb to the folder, with the hand-built model standing in for
    the construction: the default folder, the source's sha256 and text, the refusals."""
    import hashlib

    from tm2nn import api

    def build(m, steps, max_input=None):
        model = copy_first_model(3 if max_input is None else max_input)
        model.meta.update(steps=steps, exact_T={"float32": 1, "float64": 4})
        return model

    monkeypatch.setattr(api, "build_native", build)
    monkeypatch.setattr(api, "ground_truth", lambda model: {"components": model.components})  # its own claims
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "copy_first.tm"
    src.write_text(COPY_FIRST)
    r = run_cli("export", src, "--to", "transformer-lens", "--steps", "1", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["output"] == "copy_first-tl" and json.loads(r.out)["d_model"] == 15
    t = read_export(tmp_path / "copy_first-tl").contract
    assert t["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest() and t["dtype"] == "float32"
    assert "machine copy_first {" in t["source_text"]
    assert run_cli("verify", "copy_first-tl").code == 0
    r = run_cli("export", src, "--to", "transformer-lens", "--steps", "2", "-o", "two")
    assert r.code == 2 and "float32 decodes this model exactly only up to T = 1" in r.err and "float64" in r.err
    previous = set_memory_limit(4096)  # past the parser's estimate, under the weights'
    try:
        with pytest.raises(OptionError, match=r"exporting a transformer of \d+ parameters .* would need about"):
            write_export(build(None, 1), tmp_path / "big")
    finally:
        set_memory_limit(previous)
    assert not (tmp_path / "two").exists() and not (tmp_path / "big").exists()


def test_verify_ground_truth_checks_the_folders_file_by_ablation(tmp_path, run_cli):
    """``tm2nn verify --ground-truth DIR`` (issue 37, deliverable 4): the exported
    ``ground_truth.json`` is faithful on the folder's own float32 weights; with one claim's
    component left out of the file, or one listed at another head, it is not (exit 1); a
    source that is not an exported folder is exit 2."""
    out = tmp_path / "bb3-tl"
    assert run_cli("export", EXAMPLES / "bb3.tm", "--to", "transformer-lens", "--steps", 21, "-o", out).code == 0
    r = run_cli("verify", "--ground-truth", out, "--json")
    assert r.code == 0 and json.loads(r.out)["ok"], r.out
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["schema"] == "tm2nn.ground_truth/1" and "Lemma C.7" in truth["claims"]
    intact = json.dumps(truth)

    left_out = json.loads(intact)
    del left_out["components"]["C.6: the symbol step i' wrote"]
    (out / "ground_truth.json").write_text(json.dumps(left_out))
    r = run_cli("verify", "--ground-truth", out, "--json")
    assert r.code == 1 and not json.loads(r.out)["ok"] and json.loads(r.out)["complement"]["changed"]

    wrong = json.loads(intact)
    c7, c4 = wrong["components"]["C.7: the input symbol at l_i"], wrong["components"]["C.4: some past step wrote l_i"]
    c7["layer"], c7["heads"], c7["hooks"] = c4["layer"], c4["heads"], c4["hooks"]
    (out / "ground_truth.json").write_text(json.dumps(wrong))
    assert run_cli("verify", "--ground-truth", out).code == 1

    r = run_cli("verify", "--ground-truth", EXAMPLES / "bb3.tm")
    assert r.code == 2 and "exported folder" in r.err


def test_verify_of_a_machine_that_counts_its_no_rule_step(tmp_path):
    """A morphett machine halts on a missing rule and counts that step; the construction emits
    ``<halt>`` for it, and ``tm2nn verify DIR`` expects exactly that (it once expected a
    ``STATE|SYM|S`` token no vocabulary holds, and raised a KeyError)."""
    m = parse_text("0 _ 1 r 1\n1 _ 0 r 2\n1 1 1 l 0\n", "morphett", "counts.txt")[0]
    assert m.missing_rule_counts_step
    out = tm2nn.export(m, 8, max_input=2, dtype="float64", output=tmp_path / "counts-tl")
    rep = verify_exported(out)
    assert rep.ok and rep.n_inputs == 13  # every tape of 0..2 cells over {_ 0 1}
    assert expected_tokens(m, "", 8) == ["1|1|R", "2|0|R", "<halt>"]
