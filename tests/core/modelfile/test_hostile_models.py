"""Hostile model files (issue 36, points 17-19): what a file declares is checked against
the construction its metadata describes before the expensive part runs. A ``.pt`` zip bomb
is refused from its archive directory, before any tensor is decompressed; a
``.safetensors`` header's tensors must fit its offsets, the file and the manifest before
any array is read; an ONNX graph far larger than the construction's is refused before an
onnxruntime session is built; and an edited Loop trip count is refused with its estimate
instead of running for hours. Each refusal is one line naming the file, exit 2."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

import tm2nn
from tests.conftest import EXAMPLES
from tm2nn.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rcnn_pt(tmp_path_factory) -> Path:
    c = tm2nn.compile(EXAMPLES / "bb3.tm", "rcnn", steps=4, max_input=2)
    return c.save(tmp_path_factory.mktemp("models") / "rcnn.pt")


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def eval_in_subprocess(path, timeout: float = 60) -> tuple[int, str]:
    """``(exit code, stderr)`` of ``tm2nn eval PATH --input 1`` in a fresh process, failing
    the test (not hanging it) when the model runs past ``timeout`` seconds."""
    code = "import sys\nfrom tm2nn.cli import main\nsys.exit(main(['eval', sys.argv[1], '--input', '1']))"
    try:
        r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=timeout,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"tm2nn eval {path} ran past {timeout} s")
    return r.returncode, r.stderr


def one_error(err: str, path) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: error: "), err
    return lines[0][len(f"{path}: error: "):]


# -- a .pt zip bomb -------------------------------------------------------------------------------------
def _zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip archive of ``(name, stored bytes, method, crc32, uncompressed size)`` members,
    written by hand (so a member can be deflated zeros of any size)."""
    out, central = io.BytesIO(), io.BytesIO()
    for name, data, method, crc, size in members:
        offset, n = out.tell(), name.encode()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(n), 0))
        out.write(n + data)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data), size,
                                  len(n), 0, 0, 0, 0, 0, offset) + n)
    start, cd = out.tell(), central.getvalue()
    out.write(cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(cd), start, 0))
    return out.getvalue()


def _deflated_zeros(nbytes: int) -> tuple[bytes, int]:
    """``(raw deflate stream, crc32)`` of ``nbytes`` zero bytes (a multiple of 4 MiB):
    one fully flushed 4 MiB block repeated, so building it is quick."""
    chunk = bytes(4 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(nbytes // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return block * (nbytes // len(chunk)) + b"\x03\x00", crc


def zip_bomb(model: Path, dst: Path, nbytes: int) -> Path:
    """``model`` (a tm2nn .pt) with one more state-dict tensor, ``bomb``, of ``nbytes``
    zero bytes (float32) stored deflated (about 1000:1): saved with 70,001 values, whose
    count the pickle then says is ``nbytes / 4``, and its record replaced."""
    saved = torch.load(model, weights_only=True)
    small = 70_001
    saved["state_dict"]["bomb"] = torch.zeros(small)
    buf = io.BytesIO()
    torch.save(saved, buf)
    z = zipfile.ZipFile(buf)
    pkl = next(i.filename for i in z.infolist() if i.filename.endswith("/data.pkl"))
    data = z.read(pkl)
    assert data.count(b"J" + struct.pack("<i", small)) == 2  # the storage's count and the tensor's size
    data = data.replace(b"J" + struct.pack("<i", small), b"J" + struct.pack("<i", nbytes // 4))
    key = next(i.filename for i in z.infolist() if i.file_size == 4 * small)  # the bomb's record
    stream, crc = _deflated_zeros(nbytes)
    members = []
    for info in z.infolist():
        if info.filename == key:
            members.append((key, stream, 8, crc, nbytes))
            continue
        raw = data if info.filename == pkl else z.read(info)
        members.append((info.filename, raw, 0, zlib.crc32(raw), len(raw)))
    dst.write_bytes(_zip(members))
    return dst


def test_a_pt_zip_bomb_is_refused_before_it_is_decompressed(rcnn_pt, tmp_path):
    """A 512 MiB tensor deflated into a file of about 0.5 MB: refused from the archive's
    directory, in one line, with peak memory well under the tensor's size (today it is
    decompressed in full, 500 MiB more, then refused as a tensor the construction does
    not have)."""
    bomb = zip_bomb(rcnn_pt, tmp_path / "bomb.pt", 512 << 20)
    assert bomb.stat().st_size < 2 << 20
    assert torch.load(bomb, weights_only=True, map_location="meta")["state_dict"]["bomb"].shape == (128 << 20,)
    code = ("import resource, sys, torch\nfrom tm2nn.cli import main\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "rc = main(['eval', sys.argv[1], '--input', '1'])\n"
            "print('RSS', base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    *err, rss = r.stderr.strip().splitlines()
    base_kb, peak_kb = map(int, rss.split()[1:])
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert (peak_kb - base_kb) * 1024 < 200 << 20, f"peak RSS grew by {(peak_kb - base_kb) // 1024} MiB: {err}"
    assert err[0].startswith(f"{bomb}: error: its archive member 'archive/data/"), err
    assert f"declares {512 << 20:,} bytes, more than the whole file's" in err[0]
    assert time.monotonic() - t0 < 120


def test_pt_records_beyond_the_construction_are_refused_before_any_tensor_is_read(rcnn_pt, tmp_path, capsys):
    """A stored (uncompressed) record no tensor of the construction accounts for: the
    archive declares more tensor data than the construction's state dict holds."""
    z = zipfile.ZipFile(rcnn_pt)
    members = [(i.filename, z.read(i), 0, zlib.crc32(z.read(i)), i.file_size) for i in z.infolist()]
    prefix = members[0][0].split("/")[0]
    junk = bytes(1 << 20)
    bad = tmp_path / "junk.pt"
    bad.write_bytes(_zip([*members, (f"{prefix}/data/999", junk, 0, zlib.crc32(junk), len(junk))]))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    msg = one_error(err, bad)
    assert msg.startswith("its archive holds ") and f"'{prefix}/data/999', {1 << 20:,})" in msg, msg
    assert "the rcnn construction's state dict has" in msg
    assert cli(capsys, "eval", rcnn_pt, "--input", "1")[0] == 0  # the file as written loads


# -- ONNX graphs that would run too long -------------------------------------------------------------
@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("onnx")
    return {"transformer": tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", steps=4).save(folder / "t.onnx"),
            "relu-circuit": tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit").save(folder / "a.onnx")}


def _with_trip_count(src: Path, dst: Path, trips: int) -> Path:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    loop = next(n for n in m.graph.node if n.op_type == "Loop")
    t = next(t for t in m.graph.initializer if t.name == loop.input[0])
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).copy() * 0 + trips, t.name))
    onnx.save(m, str(dst))
    return dst


def test_an_edited_loop_trip_count_is_refused_with_its_estimate(onnx_models, tmp_path):
    """The transformer's Loop set to 10^9 iterations (today: a warning, then a run killed
    after minutes): refused before it runs, naming both counts and the recorded steps. A
    shorter run is an edit like any other: it loads, flagged as edited."""
    bad = _with_trip_count(onnx_models["transformer"], tmp_path / "long.onnx", 10**9)
    code, err = eval_in_subprocess(bad)
    assert code == 2
    msg = one_error(err, bad)
    assert msg.startswith("its Loop 'trace' runs 1,000,000,000 iterations; the transformer construction its metadata "
                          "describes (tm2nn.build: steps=4, "), msg
    assert ") runs 4, 250,000,000 times as many" in msg and "refused before it runs" in msg
    short = _with_trip_count(onnx_models["transformer"], tmp_path / "short.onnx", 2)
    assert tm2nn.load_model(short).edited.startswith("weight 'trace.steps': 1 of 1 values differ")


def test_a_loop_without_a_trip_count_is_refused(onnx_models, tmp_path):
    """No trip count and no condition: today onnxruntime loops for ever."""
    import onnx

    m = onnx.load(str(onnx_models["transformer"]))
    next(n for n in m.graph.node if n.op_type == "Loop").input[0] = ""
    bad = tmp_path / "nocount.onnx"
    onnx.save(m, str(bad))
    code, err = eval_in_subprocess(bad)
    assert code == 2 and one_error(err, bad).startswith("its Loop 'trace' has no fixed trip count, so its run has no "
                                                        "bound")


def test_a_graph_far_larger_than_the_construction_is_refused_before_a_session(onnx_models, tmp_path):
    """An identity chain of 50,000 nodes before the adder's output: refused in seconds,
    with both sizes, before an onnxruntime session is built, at the memory of an ordinary
    eval (today the session is built and the chain runs: 10^6 nodes took 30 s and 2.7 GB)."""
    import onnx
    from onnx import helper

    m = onnx.load(str(onnx_models["relu-circuit"]))
    out = m.graph.output[0].name
    last = next(n for n in m.graph.node if out in n.output)
    last.output[list(last.output).index(out)] = "chain0"
    n = 50_000
    m.graph.node.extend(helper.make_node("Identity", [f"chain{i}"], [f"chain{i + 1}" if i + 1 < n else out])
                        for i in range(n))
    bad = tmp_path / "chain.onnx"
    onnx.save(m, str(bad))
    code = ("import resource, sys, time\nfrom tm2nn.cli import main\nt = time.monotonic()\n"
            "rc = main(['eval', sys.argv[1], '--input', '110'])\n"
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic() - t, file=sys.stderr)\n"
            "sys.exit(rc)")
    runs = {}
    for key, path in (("chain", bad), ("plain", onnx_models["relu-circuit"])):
        r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        *err, rss = r.stderr.strip().splitlines()
        runs[key] = (r.returncode, err, int(rss.split()[1]) // 1024, float(rss.split()[2]))
    code, err, peak_mb, seconds = runs["chain"]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"{bad}: error: its graph has {n + 81:,} nodes"), err
    assert "the relu-circuit construction its metadata describes has 81 nodes" in err[0]
    assert "refused before onnxruntime builds a session" in err[0]
    assert runs["plain"][0] == 0 and peak_mb < runs["plain"][2] + 150, runs
    assert seconds < runs["plain"][3] + 10, runs


# -- .safetensors headers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def st_model(tmp_path_factory) -> Path:
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    return c.save(tmp_path_factory.mktemp("st") / "a.safetensors")


def _header_of(path: Path) -> tuple[dict, bytes]:
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def _with_header(header: dict, data: bytes, dst: Path) -> Path:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    dst.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return dst


def test_a_safetensors_header_that_does_not_fit_its_offsets(st_model, tmp_path, capsys):
    """A tensor declared 10^9 values wide over 8 bytes, and one whose span runs past the
    data: refused from the header, before any array is read, in tm2nn's words."""
    header, data = _header_of(st_model)
    name = next(k for k in header if k != "__metadata__")
    wide = json.loads(json.dumps(header))
    wide[name]["shape"] = [10**9]
    bad = _with_header(wide, data, tmp_path / "wide.safetensors")
    code, _, err = cli(capsys, "info", bad)
    assert code == 2 and one_error(err, bad).startswith(f"its header's tensor {name!r} declares F64 [1000000000] "
                                                        f"(8,000,000,000 bytes) at bytes ")
    past = json.loads(json.dumps(header))
    begin, end = past[name]["data_offsets"]
    past[name]["data_offsets"] = [begin + len(data), end + len(data)]
    bad = _with_header(past, data, tmp_path / "past.safetensors")
    code, _, err = cli(capsys, "info", bad)
    assert code == 2 and f"of a data section of {len(data):,}" in one_error(err, bad)


def test_a_safetensors_array_the_manifest_does_not_read(st_model, tmp_path, capsys):
    """An extra 8 MiB array no op of the manifest's network reads (today it is read and
    the model loads): refused from the header, before any array is read."""
    from safetensors.numpy import load_file, save_file

    header, _ = _header_of(st_model)
    arrays = load_file(str(st_model))
    arrays["bomb"] = torch.zeros(1 << 20, dtype=torch.float64).numpy()
    bad = tmp_path / "extra.safetensors"
    save_file(arrays, str(bad), metadata=header["__metadata__"])
    code, _, err = cli(capsys, "info", bad)
    assert code == 2
    assert one_error(err, bad) == "its header declares the array 'bomb', which its manifest's network does not read"
    assert cli(capsys, "info", st_model)[0] == 0
