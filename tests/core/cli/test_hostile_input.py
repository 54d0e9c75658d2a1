"""Issue 23's audit, pinned: each command it reported gives exit 2 (or 1 for a mismatch)
with a one-line tm2nn message and no traceback; sizes are refused before allocation
with their estimate; sources that are not regular files, or too big, are refused at
once (tm2nn.limits, tm2nn.fileio.read_input)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tm2nn import limits

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples"
CORPUS = ROOT.parent / "shared" / "corpus"
C432 = CORPUS / "circuits" / "iscas85" / "c432.bench"
C17 = CORPUS / "circuits" / "iscas85" / "c17.bench"


def _one_line_error(r, code: int = 2) -> str:
    assert r.code == code, (r.code, r.err)
    assert "Traceback" not in r.err and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tm2nn: error: "), r.err
    return lines[0]


@pytest.fixture
def wide(xor_circuit) -> Path:
    """A 36-input circuit (c432's input count) written by tm2nn, so no corpus is needed."""
    return xor_circuit(36)


# -- flag values ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,msg", [
    (["verify", "{wide}", "--samples", "-1"], "--samples: expected an integer ≥ 1, got -1"),
    (["verify", "{wide}", "--samples", "0"], "--samples: expected an integer ≥ 1, got 0"),
    (["verify", "{wide}", "--seed", "-1"], "--seed: expected an integer in [0, 4,294,967,295], got -1"),
    (["verify", "{wide}", "--budget", "nan"], "--budget: expected a number > 0.0, got nan"),
    (["margin", "{wide}", "--trials", "0"], "--trials: expected an integer ≥ 1, got 0"),
    (["margin", "{wide}", "--samples", "0"], "--samples: expected an integer ≥ 1, got 0"),
    (["margin", "{wide}", "--seed", "99999999999999999999"],
     "--seed: expected an integer in [0, 4,294,967,295], got 99999999999999999999"),
    (["run", "{ex}/bb3.tm", "--max-steps", "-5"], "--max-steps: expected an integer ≥ 0, got -5"),
    (["learn", "{ex}/parity8.circ", "--target", "parity:10110010", "--steps", "-3"],
     "--steps: expected an integer ≥ 1, got -3"),
    (["learn", "{ex}/parity8.circ", "--target", "parity:10110010", "--steps", "5", "--seed", "-1"],
     "--seed: expected an integer in [0, 4,294,967,295], got -1"),
    (["learn", "{ex}/learner_match.tm", "--train", "{ex}/learner_match.csv", "--work", "0"],
     "--work: expected an integer ≥ 1, got 0"),
    (["compile", "{ex}/bb3.tm", "--backend", "transformer", "--steps", "5", "--beta", "inf", "-o", "{tmp}/m.onnx"],
     "--beta: expected a number > 0.0, got inf"),
    (["compile", "{ex}/bb3.tm", "--backend", "gd-trace", "--b", "1", "-o", "{tmp}/m.onnx"],
     "--b = 1 breaks (18)"),
    (["viz", "attention", "{ex}/bb3.tm", "--step", "-1", "-o", "{tmp}/a.png"], "--step: expected an integer ≥ 0"),
    (["check", "{ex}/bb3.tm", "--max-memory=-1G"], "--max-memory: expected a size such as 512M or 8G"),
])
def test_flag_values_are_checked(run_cli, tmp_path, wide, argv, msg):
    argv = [a.replace("{wide}", str(wide)).replace("{ex}", str(EX)).replace("{tmp}", str(tmp_path)) for a in argv]
    line = _one_line_error(run_cli(*argv))
    assert msg in line
    assert not list(tmp_path.glob("*.onnx")) and not list(tmp_path.glob("*.png"))


def test_the_audits_corpus_commands(run_cli, corpus):
    for argv, msg in ((["verify", C432, "--samples", "-1"], "--samples: expected an integer ≥ 1, got -1"),
                      (["verify", C432, "--seed", "-1"], "--seed: expected an integer in"),
                      (["margin", C17, "--trials", "0"], "--trials: expected an integer ≥ 1, got 0"),
                      (["margin", C17, "--samples", "0"], "--samples: expected an integer ≥ 1, got 0"),
                      (["margin", C17, "--seed", "99999999999999999999"], "--seed: expected an integer in")):
        assert msg in _one_line_error(run_cli(*argv))


# -- sizes refused before allocation -------------------------------------------------------------
@pytest.fixture
def small_memory():
    limits.set_memory_limit(1 << 30)
    yield
    limits.set_memory_limit(None)


@pytest.mark.parametrize("argv,what", [
    (["learn", "{ex}/parity8.circ", "--target", "parity:10110010", "--steps", "1000000000"],
     "1,000,000,000 samples and 1,000 test points"),
    (["learn", "{ex}/parity8.circ", "--target", "parity:10110010", "--steps", "10", "--test", "1000000000"],
     "1,000,000,000 test points"),
    (["margin", "{wide}", "--samples", "1000000000"], "1,000,000,000 random inputs of 36 bits"),
    (["margin", "{ex}/full_adder.circ", "--trials", "100000000"], "100,000,000 trials"),
    (["run", "{ex}/bb3.tm", "--trace", "--max-steps", "1000000000000"], "a trace of up to 1,000,000,000,000 steps"),
    (["learn", "{ex}/learner_match.tm", "--train", "{ex}/learner_match.csv", "--test", "1000000000000"],
     "1,000,000,000,000 test points"),
])
def test_sizes_are_refused_with_their_estimate(run_cli, wide, argv, what):
    argv = [a.replace("{wide}", str(wide)).replace("{ex}", str(EX)) for a in argv]
    t0 = time.perf_counter()
    line = _one_line_error(run_cli(*argv, "--max-memory", "1G"))
    assert what in line and "would need about" in line and "over the limit of 1.0 GiB" in line
    assert "--max-memory" in line and time.perf_counter() - t0 < 20


def test_raising_max_gates_keeps_the_memory_check(run_cli, tmp_path):
    t0 = time.perf_counter()
    line = _one_line_error(run_cli("compile", EX / "bb3.tm", "--steps", "100000", "--max-gates", "1000000000000000",
                                   "-o", tmp_path / "m.onnx", "--max-memory", "2G"))
    assert "unrolling 100,000 steps" in line and "would need about" in line and "--steps or --tape" in line
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "m.onnx").exists()
    # the gate limit is still its own, earlier check
    line = _one_line_error(run_cli("compile", EX / "bb3.tm", "--steps", "100000", "-o", tmp_path / "m.onnx"))
    assert "over the limit of 5,000,000" in line and "--max-gates" in line


def test_verify_with_a_huge_sample_count_stays_within_its_budget(run_cli, wide):
    t0 = time.perf_counter()
    r = run_cli("verify", wide, "--samples", "1000000000", "--budget", "2", "--json", "--max-memory", "1G")
    assert r.code == 0 and time.perf_counter() - t0 < 30


def test_memory_limit_from_the_environment(run_cli, monkeypatch):
    monkeypatch.setenv("TM2NN_MAX_MEMORY", "1M")
    line = _one_line_error(run_cli("run", EX / "bb3.tm", "--trace", "--max-steps", "10000000"))
    assert "over the limit of 1.0 MiB" in line and "(80%" not in line
    monkeypatch.setenv("TM2NN_MAX_MEMORY", "lots")
    assert "TM2NN_MAX_MEMORY: expected a size" in _one_line_error(run_cli("run", EX / "bb3.tm", "--trace"))


def test_api_errors_name_arguments():
    import tm2nn

    c = tm2nn.compile(EX / "full_adder.circ")
    with pytest.raises(tm2nn.OptionError, match=r"error: samples: expected an integer ≥ 1, got 0"):
        c.verify(samples=0)
    with pytest.raises(tm2nn.OptionError, match=r"error: seed: expected an integer in"):
        c.verify(seed=2**40)
    with pytest.raises(tm2nn.OptionError, match=r"error: budget: expected a number > 0.0"):
        c.verify(budget=float("nan"))


# -- sources -------------------------------------------------------------------------------------
def _quick(run_cli, *argv):
    t0 = time.perf_counter()
    r = run_cli(*argv)
    return r, time.perf_counter() - t0


def test_dev_zero_is_refused_at_once(run_cli):
    r, dt = _quick(run_cli, "check", "/dev/zero", "--format", "tm")
    assert "/dev/zero is a character device, not a regular file" in _one_line_error(r) and dt < 1


def test_a_fifo_without_a_writer_is_refused_at_once(run_cli, tmp_path):
    fifo = tmp_path / "pipe.tm"
    os.mkfifo(fifo)
    done = threading.Event()
    r, dt = _quick(run_cli, "check", fifo)
    done.set()
    assert "is a FIFO (named pipe), not a regular file" in _one_line_error(r) and dt < 1


def test_a_folder_is_refused(run_cli, tmp_path):
    (tmp_path / "d.tm").mkdir()
    assert "is a folder" in _one_line_error(run_cli("check", tmp_path / "d.tm"))


def test_source_size_cap_and_its_override(run_cli, tmp_path):
    big = tmp_path / "big.tm"
    big.write_bytes((EX / "bb3.tm").read_bytes() + b"#" * 5000 + b"\n")
    line = _one_line_error(run_cli("check", big, "--max-source-size", "4K"))
    assert "larger than the limit of 4.0 KiB" in line and "--max-source-size" in line
    assert run_cli("check", big, "--max-source-size", "1M").code == 0
    assert run_cli("check", big).code == 0  # the default is far above


def test_read_input_stops_at_the_limit_even_when_the_size_lies(tmp_path, monkeypatch):
    """A file that grows while read (or reports a wrong size) is still cut at the limit."""
    from tm2nn import fileio
    from tm2nn.errors import Tm2nnError

    p = tmp_path / "grow.txt"
    p.write_bytes(b"x" * 10_000)
    real_fstat = os.fstat

    class Small:
        def __init__(self, st):
            self.st_mode, self.st_size = st.st_mode, 10
    monkeypatch.setattr(fileio.os, "fstat", lambda fd: Small(real_fstat(fd)))
    with pytest.raises(Tm2nnError, match="larger than the limit"):
        fileio.read_input(p, limit=4096)


def test_training_sets_and_input_lists_are_read_the_same_way(run_cli, tmp_path):
    line = _one_line_error(run_cli("learn", EX / "learner_match.tm", "--train", "/dev/zero"))
    assert "training set /dev/zero is a character device" in line
    utf16 = tmp_path / "t.csv"
    utf16.write_text("1,1,1\n", encoding="utf-16")
    r = run_cli("learn", EX / "learner_match.tm", "--train", utf16)
    assert r.code == 2 and f"{utf16}:1:1: error: not UTF-8 text" in r.err and "Traceback" not in r.err
