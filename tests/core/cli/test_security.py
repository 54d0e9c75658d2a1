"""Issue 24, pinned: no code runs from a model file, output paths are regular files (links
written through), no check passes while checking nothing, the same source saves the same
bytes, and the commands the audit ran out of memory stay bounded under an address-space
limit (a subprocess with ``RLIMIT_AS``)."""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import tm2nn
from tm2nn.errors import Tm2nnError

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples"
TM2NN = [sys.executable, "-m", "tm2nn.cli"]


def _one_error(r) -> str:
    assert r.code == 2, (r.code, r.err)
    assert "Traceback" not in r.err
    return r.err.strip().splitlines()[-1]


# -- no code runs from a model file ----------------------------------------------------------
class _Payload:
    """Unpickling this creates ``path``: what a crafted .pt would do."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.mark.parametrize("verb", ["eval", "info"])
def test_a_malicious_pickle_never_runs(run_cli, tmp_path, verb):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    buf = io.BytesIO()
    torch.save({"state_dict": {}, "metadata": {"tm2nn.backend": "relu-circuit"}, "x": _Payload(marker)}, buf)
    evil.write_bytes(buf.getvalue())
    plain = tmp_path / "plain.pt"  # a bare pickle, not even a torch zip
    plain.write_bytes(pickle.dumps(_Payload(marker)))
    for path in (evil, plain):
        line = _one_error(run_cli(verb, path))
        assert str(path) in line and not marker.exists()


# -- output paths ----------------------------------------------------------------------------
def test_a_symlink_is_written_through(run_cli, tmp_path):
    real = tmp_path / "real.onnx"
    real.write_bytes(b"old")
    link = tmp_path / "link.onnx"
    link.symlink_to(real)
    r = run_cli("compile", EX / "full_adder.circ", "-o", link)
    assert r.code == 0 and link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes()[:4] != b"old" and tm2nn.load_model(real).backend == "relu-circuit"


def test_a_dangling_symlink_into_a_missing_folder_is_refused(run_cli, tmp_path):
    link = tmp_path / "dl.onnx"
    link.symlink_to(tmp_path / "nowhere" / "x.onnx")
    line = _one_error(run_cli("compile", EX / "full_adder.circ", "-o", link))
    assert "does not exist" in line and "links to" in line and link.is_symlink()


@pytest.mark.parametrize("target,what", [("/dev/null", "character device"), ("/dev/full", "character device")])
def test_a_device_is_never_replaced(run_cli, target, what):
    if not os.path.exists(target):
        pytest.skip(f"{target} is absent")
    before = os.stat(target)
    line = _one_error(run_cli("convert", EX / "bb3.tm", "--to", "tm", "-o", target))
    assert what in line and "not a regular file" in line
    after = os.stat(target)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)


def test_nothing_is_written_into_dev_or_proc(run_cli):
    for out in ("/dev/full.onnx", "/proc/tm2nn.onnx"):
        line = _one_error(run_cli("compile", EX / "full_adder.circ", "-o", out))
        assert "file system" in line and not os.path.exists(out)
    assert "file system" in _one_error(run_cli("viz", "layers", EX / "full_adder.circ", "-o", "/dev/x.png"))


def test_a_folder_or_fifo_as_output_is_refused(run_cli, tmp_path):
    (tmp_path / "d.onnx").mkdir()
    assert "it is a folder" in _one_error(run_cli("compile", EX / "full_adder.circ", "-o", tmp_path / "d.onnx"))
    os.mkfifo(tmp_path / "p.tm")
    assert "FIFO" in _one_error(run_cli("convert", EX / "bb3.tm", "--to", "tm", "-o", tmp_path / "p.tm"))


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    """A writer killed (SIGKILL) between writing and renaming leaves its temporary file;
    the next write to the same path removes it (and leaves a live writer's alone)."""
    out = tmp_path / "m.onnx"
    code = (f"import os, time\nimport tm2nn.fileio as f\nos.replace = lambda a, b: time.sleep(600)\n"
            f"f.write_atomic({str(out)!r}, b'x' * 1000)\n")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    for _ in range(200):  # until the temporary file is there
        if list(tmp_path.glob(".m.onnx.*.tmp")):
            break
        time.sleep(0.05)
    time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    left = list(tmp_path.glob(".m.onnx.*.tmp"))
    assert len(left) == 1 and str(p.pid) in left[0].name
    live = tmp_path / f".m.onnx.{os.getppid()}.abcd1234.tmp"  # a running process's
    live.write_bytes(b"")
    tm2nn.compile(EX / "full_adder.circ").save(out)
    assert not left[0].exists() and live.exists() and out.stat().st_size > 1000


# -- every check checks something --------------------------------------------------------------
def test_zero_samples_and_zero_comparisons_are_refused(run_cli):
    assert "--samples: expected an integer ≥ 1, got 0" in _one_error(
        run_cli("verify", EX / "full_adder.circ", "--samples", "0"))
    with pytest.raises(Tm2nnError, match="compared no input"):
        tm2nn.compile(EX / "full_adder.circ").verify([])


def test_gd_trace_eval_runs_the_files_weights(run_cli, tmp_path):
    c = tm2nn.compile(EX / "bb3.tm", "gd-trace", steps=25)
    good = c.save(tmp_path / "gd.pt")
    assert run_cli("eval", good).code == 0
    saved = torch.load(good, weights_only=True)
    saved["state_dict"] = {k: torch.zeros_like(v) if v.is_floating_point() else v
                           for k, v in saved["state_dict"].items()}
    bad = tmp_path / "gd0.pt"
    torch.save(saved, bad)
    r = run_cli("eval", bad)
    assert r.code in (1, 2) and "Traceback" not in r.err and str(bad) in r.err


def test_viz_spacetime_past_halting_agrees_as_verify_does(run_cli, tmp_path):
    for backend in ("transformer", "rcnn"):
        r = run_cli("viz", "spacetime", EX / "bb4.tm", "--steps", "150", "--backend", backend, "-o",
                    tmp_path / f"{backend}.png")
        assert r.code == 0 and "diverges" not in r.err, r.err
    assert run_cli("verify", EX / "bb4.tm", "--backend", "transformer", "--steps", "150", "--input", "").code == 0


def test_viz_spacetime_still_reports_a_real_divergence(tmp_path):
    from tm2nn.syntax import load
    from tm2nn.viz.runs import aligned, divergences, interpreter_run

    m = load(EX / "bb3.tm")
    want = interpreter_run(m, "", 30)
    got = [list(c) for c in want]
    got[5][0] = "B" if got[5][0] != "B" else "C"  # a wrong state at step 5
    first, _ = divergences(*aligned(m, want, [tuple(c) for c in got]))
    assert first == 5
    cut = want[:10]  # a run cut short before halting is a divergence, not an absorbing state
    assert divergences(*aligned(m, want, cut))[0] == 10


@pytest.mark.parametrize("name,text,where", [
    ("e.bench", "", "no circuit found"), ("w.bench", "  \n\n# c\n", "no circuit found"),
    ("e.blif", "", "no circuit found"), ("w.blif", "\n  \n", "no circuit found"),
    ("n.circ", "input a b\n", ":1:1: error: circuit 'n' has no outputs"),
    ("n.bench", "INPUT(a)\n", ":1:1: error: circuit 'n' has no outputs"),
    ("c.blif", ".model m\n.inputs a \\", ":2:11: error: the file ends inside a continued line"),
    ("c2.blif", ".model m\n.inputs a b\n.outputs y\n.names a b y\n11 1\n.end \\",
     ":6:6: error: the file ends inside a continued line"),
    ("e.aag", "aag 0 0 0 0 0\n", "no circuit found"),
])
def test_empty_circuits_and_truncated_continuations(run_cli, tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    r = run_cli("check", path)
    assert r.code == 2 and where in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("data,where", [
    ("1,1,1\n".encode("utf-16"), ":1:1: error: not UTF-8 text"),
    (bytes(range(200, 256)) * 4, ":1:1: error: not UTF-8 text"),
    (b"1,1,1\n1,x,1\n", ":2:3: error: 'x' is not +1 or -1"),
    (b"1,1,1\n1,1\n", ":2:4: error: this example has 2 fields"),
])
def test_bad_training_sets_are_located(run_cli, tmp_path, data, where):
    csv = tmp_path / "t.csv"
    csv.write_bytes(data)
    r = run_cli("learn", EX / "learner_match.tm", "--train", csv)
    assert r.code == 2 and f"{csv}{where}" in r.err and "Traceback" not in r.err


def test_a_byte_order_mark_is_not_a_header(tmp_path):
    from tm2nn.datasets import load_csv

    csv = tmp_path / "bom.csv"
    csv.write_bytes(b"\xef\xbb\xbf1,-1,1\n-1,1,-1\n")
    X, Y = load_csv(csv)
    assert X.tolist() == [[1, -1], [-1, 1]] and Y.tolist() == [1, -1]


# -- the same source saves the same bytes ------------------------------------------------------
PT_SOURCES = [["examples/bb4.tm", "--backend", "transformer", "--steps", "40"],
              ["examples/bb3.tm", "--backend", "rcnn", "--steps", "5"],
              ["examples/full_adder.circ"]]
#: ``tm2nn compile`` once per job (a JSON list of argvs) in one process: the hash seed is
#: per process, and one interpreter start (about 1.5 s, most of a compile here) serves all
_COMPILE_ALL = "import json, sys; from tm2nn.cli import main; sys.exit(max(main(a) for a in json.loads(sys.argv[1])))"


def test_a_pt_is_byte_identical_whatever_the_hash_seed(tmp_path):
    for seed in ("1", "2"):
        jobs = [["compile", *argv, "-o", str(tmp_path / f"m{i}-{seed}.pt")] for i, argv in enumerate(PT_SOURCES)]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", _COMPILE_ALL, json.dumps(jobs)], cwd=ROOT, env=env, check=True,
                       capture_output=True)
    for i, argv in enumerate(PT_SOURCES):
        assert (tmp_path / f"m{i}-1.pt").read_bytes() == (tmp_path / f"m{i}-2.pt").read_bytes(), argv


# -- memory, under an address-space limit ------------------------------------------------------
def _limited(argv, gib: float, timeout: float = 240):
    """``tm2nn argv`` in a subprocess whose address space is capped at ``gib`` GiB."""
    def cap():
        n = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    env = {k: v for k, v in os.environ.items() if k != "TM2NN_MAX_MEMORY"}
    return subprocess.run([*TM2NN, *map(str, argv)], cwd=ROOT, env=env, preexec_fn=cap, capture_output=True,
                          text=True, timeout=timeout)


def _clean(r):
    assert r.returncode in (0, 2), (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Segmentation" not in r.stderr
    if r.returncode == 2:
        assert r.stderr.strip().splitlines()[-1].startswith("tm2nn: error: ")


@pytest.mark.slow
def test_viz_weights_of_an_unrolled_machine_under_4_gib(tmp_path):
    out = tmp_path / "w.png"
    r = _limited(["viz", "weights", "examples/bb4.tm", "--backend", "relu-circuit", "-o", out], 4)
    _clean(r)
    assert r.returncode == 0 and out.stat().st_size > 0  # it draws the first 12 layers only


def test_viz_weights_refuses_a_picture_too_big_to_draw_or_hold(run_cli, tmp_path):
    from tm2nn.viz import weights

    net = tm2nn.compile(EX / "ripple_adder4.circ").net
    big = max(weights.affine_layers(net), key=lambda L: L[1].shape[0] * L[1].shape[1])
    old = weights.MAX_ENTRIES
    weights.MAX_ENTRIES = big[1].shape[0] * big[1].shape[1] - 1
    try:
        line = _one_error(run_cli("viz", "weights", EX / "ripple_adder4.circ", "--layer", big[0], "-o",
                                  tmp_path / "w.png"))
    finally:
        weights.MAX_ENTRIES = old
    assert "refusing to draw" in line and "--layer" in line and not (tmp_path / "w.png").exists()
    old = weights.BYTES_PER_DRAWN_ENTRY
    weights.BYTES_PER_DRAWN_ENTRY = 10**12  # as if every weight were huge: refused before densifying
    try:
        line = _one_error(run_cli("viz", "weights", EX / "ripple_adder4.circ", "-o", tmp_path / "w.png"))
    finally:
        weights.BYTES_PER_DRAWN_ENTRY = old
    assert "drawing 12 layer(s)" in line and "would need about" in line


def test_a_deep_chain_is_refused_up_front_under_2_gib(tmp_path):
    from gen_circuits import nand_chain, write_circuit  # bench/, on the path (conftest)

    src = write_circuit(nand_chain(100_000), tmp_path, "bench")
    t0 = time.perf_counter()
    r = _limited(["compile", src, "-o", tmp_path / "chain.onnx"], 2)
    _clean(r)
    assert r.returncode == 2 and "would need about" in r.stderr and time.perf_counter() - t0 < 60
    assert not (tmp_path / "chain.onnx").exists()


def test_huge_requests_are_refused_under_2_gib():
    for argv in (["learn", "examples/parity8.circ", "--target", "parity:10110010", "--steps", "1000000000"],
                 ["run", "examples/bb3.tm", "--trace", "--max-steps", "100000000000"]):
        r = _limited(argv, 2)
        _clean(r)
        assert r.returncode == 2 and "would need about" in r.stderr


def test_memory_limit_follows_the_address_space_limit():
    code = ("import resource\nfrom tm2nn import limits\nresource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "print(limits.memory_limit())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(out.stdout) < int(0.8 * (3 << 30)) and np.isfinite(int(out.stdout))
