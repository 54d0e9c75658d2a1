"""Model files under faults (issue 40, points 1, 5, 6, 8 and 10): a ``.safetensors``
and its manifest sidecar are replaced as a pair (an interrupted or killed overwrite
leaves the old pair loadable, two writers never leave a mixed pair, and a writer whose
file was replaced by another says so); SIGTERM during a write unwinds like Ctrl-C
(temporary files removed, exit 143); and hostile model files are refused, within the
memory limit, with one tm2nn error instead of a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tm2nn
import tm2nn.modelfile.manifest as mf
from tests.conftest import EXAMPLES
from tm2nn import fileio
from tm2nn.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: a manifest threshold small enough that every test model's manifest goes beside it
SMALL = 1000

pytestmark = pytest.mark.xdist_group("faults_files")


@pytest.fixture(scope="module")
def models():
    """Two different circuits' compiled models (written over each other below)."""
    return (tm2nn.compile(EXAMPLES / "majority5.circ", "relu-circuit"),
            tm2nn.compile(EXAMPLES / "comparator4.circ", "relu-circuit"))


def _pair(path: Path) -> list[str]:
    """The files beside ``path`` that belong to it: sidecars and temporary files."""
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def _loads_as(path: Path, compiled) -> None:
    m = tm2nn.load_model(path)
    assert m.source_sha256 == compiled.source_sha256


def test_an_overwrite_interrupted_between_the_two_writes_keeps_the_old_pair(models, tmp_path, monkeypatch):
    """issue 40, point 1: Ctrl-C after the sidecar is written and before the main file
    is replaced leaves the old pair loadable, and the new sidecar is removed."""
    old, new = models
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", SMALL)
    path = old.save(tmp_path / "m.safetensors")
    before = _pair(path)
    assert len(before) == 1 and before[0].startswith("m.manifest.")
    real = mf.write_atomic

    def interrupted(p, data):
        if Path(p).suffix == ".safetensors":
            raise KeyboardInterrupt
        return real(p, data)
    monkeypatch.setattr(mf, "write_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        new.save(path)
    _loads_as(path, old)
    assert _pair(path) == before
    monkeypatch.setattr(mf, "write_atomic", real)
    new.save(path)  # the next write replaces the pair and removes the old sidecar
    _loads_as(path, new)
    assert len(_pair(path)) == 1 and _pair(path) != before


def test_two_writers_of_one_path_never_leave_a_mixed_pair(models, tmp_path, monkeypatch):
    """issue 40, point 1: a second writer that starts while the first is between its
    two writes (it runs to the end, or waits its turn) never leaves a sidecar that the
    main file does not match: the file there loads, as the writer that finished last."""
    a, b = models
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", SMALL)
    path = tmp_path / "m.safetensors"
    real_write, done, waiting = mf.write_atomic, threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def second():
        try:
            b.save(path)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            done.set()

    def between(p, data):
        real_write(p, data)
        if Path(p).suffix == ".json" and threading.current_thread() is threading.main_thread():
            t = threading.Thread(target=second)
            t.start()
            while not (done.is_set() or waiting.is_set()):  # it finished, or it waits for the folder
                done.wait(0.01)
    monkeypatch.setattr(mf, "write_atomic", between)
    if hasattr(fileio, "fcntl"):  # the second writer announces that it waits for its turn
        real_flock = fileio.fcntl.flock

        def flock(fd, op):
            if threading.current_thread() is not threading.main_thread():
                waiting.set()
            return real_flock(fd, op)
        monkeypatch.setattr(fileio.fcntl, "flock", flock)
    a.save(path)
    done.wait(60)
    assert not errors, errors
    _loads_as(path, b)  # b finished last
    assert len(_pair(path)) == 1


def test_a_writer_whose_file_another_process_replaced_does_not_report_success(tmp_path, monkeypatch):
    """issue 40, point 1: when another process renames its file over the target right
    after this one's rename, this write is an error, not a success."""
    target = tmp_path / "m.onnx"
    other = tmp_path / "other"
    real = os.replace

    def raced(src, dst):
        real(src, dst)
        if Path(dst) == target:
            other.write_bytes(b"the other writer's")
            real(other, dst)
    monkeypatch.setattr(os, "replace", raced)
    with pytest.raises(tm2nn.Tm2nnError, match="another process replaced it"):
        fileio.write_atomic(target, b"mine")
    assert target.read_bytes() == b"the other writer's"
    assert _pair(target) == []


#: the CLI in a child process, the manifest threshold lowered, paused after the sidecar
#: is written while the main file's temporary file is written (it prints "paused")
_CHILD = """
import os, sys, time
import tm2nn.modelfile.manifest as mf
from tm2nn import cli
mf.HEADER_MANIFEST_MAX = 1000
real = os.fsync
def fsync(fd):
    name = os.readlink(f"/proc/self/fd/{fd}")
    if name.endswith(".tmp") and ".safetensors." in name:
        print("paused", flush=True)
        time.sleep(60)
    return real(fd)
os.fsync = fsync
sys.exit(cli.main(sys.argv[1:]))
"""


def _killed_mid_write(path: Path, sig: int) -> tuple[int, str, list[str]]:
    """``(exit code, stderr, temporary files seen while paused)`` of ``tm2nn compile
    comparator4 -o path`` sent ``sig`` while it writes the main file of the pair."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", _CHILD, "compile", str(EXAMPLES / "comparator4.circ"), "--backend",
                          "relu-circuit", "-o", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=ROOT)
    try:
        line = p.stdout.readline()
        assert line.strip() == "paused", (line, p.stderr.read() if p.poll() is not None else "")
        temps = [n for n in _pair(path) if n.endswith(".tmp")]
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err, temps


def test_sigterm_during_a_pair_write_cleans_up_and_exits_143(models, tmp_path, monkeypatch):
    """issue 40, points 5 and 1: SIGTERM while the main file's temporary file is being
    written runs the Ctrl-C cleanup: one line, exit 143, no temporary file, no new
    sidecar, and the old pair intact."""
    old, _ = models
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", SMALL)
    path = old.save(tmp_path / "m.safetensors")
    before = _pair(path)
    code, err, temps = _killed_mid_write(path, signal.SIGTERM)
    assert temps, "the child was not paused inside the write"
    assert code == 143, (code, err)
    assert err.strip() == "tm2nn: terminated (SIGTERM)", err
    assert _pair(path) == before
    _loads_as(path, old)


def test_sigkill_between_the_two_writes_keeps_the_old_pair(models, tmp_path, monkeypatch):
    """issue 40, point 1: a writer killed (SIGKILL, no cleanup possible) after writing the
    new sidecar leaves the old pair loadable; the next write removes what it left."""
    old, new = models
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", SMALL)
    path = old.save(tmp_path / "m.safetensors")
    code, _, temps = _killed_mid_write(path, signal.SIGKILL)
    assert code == -signal.SIGKILL and temps
    _loads_as(path, old)
    new.save(path)
    _loads_as(path, new)
    assert len(_pair(path)) == 1 and not _pair(path)[0].endswith(".tmp")


# -- hostile files --------------------------------------------------------------------------------
def _with_manifest(src: Path, dst: Path, change=None, raw: str | None = None, meta: dict | None = None) -> Path:
    """``src``'s arrays under a manifest ``change``d (or the text ``raw``, or the header
    metadata ``meta``), written to ``dst``."""
    from safetensors.numpy import save

    m, arrays = mf.read_safetensors(src, src.read_bytes())
    if change is not None:
        change(m, arrays)
    dst.write_bytes(save(arrays, metadata=meta or {"format": "np", "tm2nn.manifest": raw or json.dumps(m)}))
    return dst


@pytest.fixture(scope="module")
def plain(models, tmp_path_factory) -> Path:
    return models[0].save(tmp_path_factory.mktemp("plain") / "m5.safetensors")


def test_a_sidecar_named_empty_is_one_error(plain, tmp_path, capsys):
    """issue 40, point 8: a header naming the sidecar ``""`` is a one-line error (exit 2)
    from ``info`` and ``eval``, not a ValueError."""
    path = _with_manifest(plain, tmp_path / "e.safetensors",
                          meta={"format": "np", "tm2nn.manifest_file": "", "tm2nn.manifest_sha256": "0" * 64})
    for argv in (["info", str(path)], ["eval", str(path), "--input", "10101"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{path}: error: its manifest file ''"), err


def test_a_sidecar_linked_elsewhere_is_refused_before_it_is_read(plain, tmp_path, monkeypatch):
    """issue 40, point 10: a sidecar that is a symbolic link out of the model's folder
    (to /etc/passwd) is refused by its target, before any of it is read."""
    link = tmp_path / "x.manifest.json"
    link.symlink_to("/etc/passwd")
    path = _with_manifest(plain, tmp_path / "x.safetensors",
                          meta={"format": "np", "tm2nn.manifest_file": link.name, "tm2nn.manifest_sha256": "0" * 64})
    read: list[str] = []
    real = mf.read_input
    monkeypatch.setattr(mf, "read_input", lambda p, *a, **k: (read.append(str(p)), real(p, *a, **k))[1])
    with pytest.raises(tm2nn.Tm2nnError, match="symbolic link to '/etc/passwd'"):
        tm2nn.load_model(path)
    assert str(link) not in read


def _nested_loops(depth: int, dst: Path, plain: Path) -> Path:
    """A manifest whose network is ``depth`` Loops, each the body of the next."""
    from tm2nn.nets import Loop, Net, Port, ReLU, Space
    from tm2nn.nets.serial import SpaceTable, net_to_json

    sp = Space(["a", "b"])
    net = Net("n0", (Port("x", sp),), (ReLU("r", ("x",)),), ("r",))
    for i in range(depth):
        net = Net(f"n{i + 1}", (Port("x", sp),), (Loop("l", ("x",), body=net, trips=1),), ("l",))
    spaces = SpaceTable()
    text = json.dumps(net_to_json(net, {}, spaces))

    def change(m, arrays):
        m["net"], m["spaces"] = "@NET@", spaces.rows
        arrays.clear()
    m, _ = mf.read_safetensors(plain, plain.read_bytes())
    change(m, {})
    from safetensors.numpy import save

    dst.write_bytes(save({}, metadata={"format": "np", "tm2nn.manifest": json.dumps(m).replace('"@NET@"', text)}))
    return dst


def test_a_deeply_nested_network_is_a_tm2nn_error(plain, tmp_path):
    """issue 40, point 8: ``load_module`` of a network nested 200 Loops deep raises a
    Tm2nnError (it raised RecursionError)."""
    path = _nested_loops(200, tmp_path / "deep.safetensors", plain)
    with pytest.raises(tm2nn.Tm2nnError, match="nests nets more than"):
        mf.load_module(path)


#: loads each file in a child under an address-space cap and a 300 MiB tm2nn limit, and
#: prints what each raised and the child's peak RSS
_LOADER = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import tm2nn.modelfile.manifest as mf
import torch, safetensors.numpy
out = {"base_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
for p in sys.argv[1:]:
    try:
        mf.load_module(p)
        out[p] = "loaded"
    except BaseException as e:
        out[p] = type(e).__name__ + ": " + str(e)[:300]
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def test_declared_sizes_are_checked_against_the_memory_limit_before_building(plain, tmp_path):
    """issue 40, points 6 and 8: a 0.3 MB manifest declaring 10^8 labels (a prefixed space
    of 10^4 x 10^4) is refused with its estimate under TM2NN_MAX_MEMORY=300M, and the
    loader's peak RSS grows by less than 64 MiB over the interpreter's with torch imported
    (it took gigabytes and raised MemoryError)."""
    def wide(m, arrays):
        m["spaces"].append({"prefixes": [f"p{i}" for i in range(10_000)], "names": [f"n{i}" for i in range(10_000)]})
        m["net"]["inputs"][0]["space"] = len(m["spaces"]) - 1
    path = _with_manifest(plain, tmp_path / "wide.safetensors", wide)
    assert path.stat().st_size < 400_000
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TM2NN_MAX_MEMORY": "300M"}
    r = subprocess.run([sys.executable, "-c", _LOADER, str(path)], capture_output=True, text=True, env=env,
                       timeout=120)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    assert re.match(r"Tm2nnError: .*: error: the 100,000,\d+ labels its manifest's spaces declare would need about "
                    r"12.8 GiB of memory, over the limit of 300.0 MiB", str(out.get(str(path)))), (out, r.stderr)
    assert out["rss_mib"] - out["base_mib"] < 64, out  # beyond the interpreter, torch and safetensors


def test_onnx_external_data_anywhere_in_the_graph_is_refused(tmp_path):
    """issue 40, point 10: external data in a Constant node's tensor, a sparse
    initializer or a loop body's Constant is refused like an initializer's."""
    import onnx
    from onnx import TensorProto, helper

    from tm2nn.modelfile import schema

    def external(name):
        t = helper.make_tensor(name, TensorProto.FLOAT, [1], [0.0])
        t.ClearField("float_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="/etc/passwd")
        return t
    const = helper.make_node("Constant", [], ["c"], name="k", value=external("v"))
    body = helper.make_graph([helper.make_node("Constant", [], ["d"], name="kb", value=external("w"))], "body", [], [])
    loop = helper.make_node("Loop", ["", ""], [], name="L", body=body)
    sparse = helper.make_sparse_tensor(external("s"), helper.make_tensor("i", TensorProto.INT64, [1], [0]), [2])
    cases = {"'k.value'": helper.make_graph([const], "g", [], []),
             "'s'": helper.make_graph([], "g", [], [], sparse_initializer=[sparse]),
             "L.body/'kb.value'": helper.make_graph([loop], "g", [], [])}
    for where, g in cases.items():
        with pytest.raises(tm2nn.Tm2nnError, match="stored outside the file") as e:
            schema.check_self_contained(onnx.helper.make_model(g), tmp_path / "x.onnx")
        assert f"its weight {where} is stored" in str(e.value)


def test_a_small_pt_asking_for_a_huge_rebuild_is_refused_before_it_is_built(tmp_path):
    """issue 40, point 10: a 16 KB relu-circuit ``.pt`` whose metadata was edited to a
    line machine unrolled for 200 steps (1.4 GiB by the backend's own estimate) is
    refused by that estimate before the rebuild runs (it compiled for 6 s and 650 MB,
    then refused the weights' hash; 400 steps took 19 s and 1.8 GB)."""
    import torch

    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    saved = torch.load(c.save(tmp_path / "fa.pt"), weights_only=True)
    meta = saved["metadata"]
    meta.update({"tm2nn.source": (EXAMPLES / "bb3.tm").read_text(), "tm2nn.source_format": "tm"})
    meta.pop("tm2nn.source_name", None)
    build = json.loads(meta["tm2nn.build"])
    build["options"]["steps"] = 200
    meta["tm2nn.build"] = json.dumps(build)
    path = tmp_path / "edited.pt"
    torch.save(saved, path)
    assert path.stat().st_size < 20_000
    with pytest.raises(tm2nn.Tm2nnError, match=r"unrolling 200 steps .* would need about 1\.4 GiB of memory, more than "
                       r"a model file of [\d,]+ bytes describes .*: refused before it is built"):
        tm2nn.load_model(path)


def test_a_pair_of_the_older_naming_reads_and_is_replaced_whole(models, tmp_path, monkeypatch):
    """issue 40, point 1: a pair written before sidecars were named after their hash
    (``NAME.manifest.json``) still loads; overwriting it removes that sidecar too."""
    import hashlib

    from safetensors.numpy import save

    old, new = models
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", SMALL)
    m, arrays = mf.build_manifest(old)
    data = json.dumps(m, sort_keys=True, separators=(",", ":")).encode()
    (tmp_path / "m.manifest.json").write_bytes(data)
    path = tmp_path / "m.safetensors"
    path.write_bytes(save(arrays, metadata={"format": "np", "tm2nn.manifest_file": "m.manifest.json",
                                            "tm2nn.manifest_sha256": hashlib.sha256(data).hexdigest()}))
    _loads_as(path, old)
    new.save(path)
    _loads_as(path, new)
    assert len(_pair(path)) == 1 and _pair(path) != ["m.manifest.json"]
