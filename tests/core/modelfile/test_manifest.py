"""``.safetensors`` models with a JSON manifest (issue 21, docs/manifest.md): for every
backend, saved, loaded in a fresh process from the file alone with bit-identical outputs
on 100 inputs, the manifest valid under docs/manifest.schema.json; the module rebuilt
from the manifest alone; edits, damage and the sidecar manifest."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tm2nn
from tests.conftest import EXAMPLES, ROOT
from tm2nn.modelfile import manifest as mf
from tm2nn.modelfile.metadata import metadata

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((ROOT / "docs" / "manifest.schema.json").read_text())
#: one small model of every backend: source, options
BUILDS = {"relu-circuit": (EXAMPLES / "majority5.circ", {}),
          "transformer": (EXAMPLES / "bb3.tm", {"steps": 12}),
          "rcnn": (EXAMPLES / "bb3.tm", {"steps": 6, "max_input": 3}),
          "gd-trace": (EXAMPLES / "bb3.tm", {"steps": 6, "max_input": 3}),
          "abbe-sandon": (EXAMPLES / "majority7.circ", {"engine": "float64"})}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """``backend -> (compiled, path of its .safetensors)``."""
    folder = tmp_path_factory.mktemp("manifest")
    out = {}
    for name, (src, opts) in BUILDS.items():
        c = tm2nn.compile(src, name, **opts)
        out[name] = (c, c.save(folder / f"{name}.safetensors"))
    return out


def inputs_for(c, n: int = 100, seed: int = 0) -> tuple:
    """``n`` inputs the network takes, as its input arrays (random strings for machines,
    random bits for circuits, random points for gd-trace's loss)."""
    rng = np.random.default_rng(seed)
    kind = c.input_encoding["kind"]
    if kind == "bits":
        return (rng.integers(0, 2, (n, len(c.input_encoding["names"]))).astype(np.float32),)
    if kind in ("tokens", "rcnn_grid"):
        alphabet = c.input_encoding["alphabet"] if kind == "tokens" else ["0", "1"]
        most = c.input_encoding["max_len"] - 1 if kind == "tokens" else c.input_encoding["max_input"]
        texts = ["".join(rng.choice(alphabet, rng.integers(0, most + 1))) for _ in range(n)]
        x = c.encode(texts)
        return x if isinstance(x, tuple) else (x,)
    if kind == "gd_trace":
        return (rng.random((n, len(c.net.inputs[0].space))),)
    return (rng.choice([-1.0, 1.0], (n, len(c.net.inputs[0].space))),)  # abbe-sandon: ±1 inputs


def outputs(module, xs) -> list[np.ndarray]:
    with torch.no_grad():
        y = module(*[torch.from_numpy(np.asarray(x)) for x in xs])
    return [t.numpy() for t in (y if isinstance(y, tuple) else (y,))]


def test_every_backend_loads_in_a_fresh_process_from_the_file_alone(saved, tmp_path):
    """The acceptance test: each file copied alone into an empty folder, loaded by a fresh
    Python (cwd there, no examples), run on 100 inputs: outputs bit-identical to the
    original module's, and the manifest valid under the JSON Schema."""
    jobs = {}
    for name, (c, path) in saved.items():
        alone = tmp_path / name
        alone.mkdir()
        (alone / "model.safetensors").write_bytes(path.read_bytes())
        xs = inputs_for(c)
        np.savez(alone / "inputs.npz", *xs)
        jobs[name] = (alone, outputs(c.torch(), xs))
    code = ("import sys, numpy as np, torch, tm2nn\n"
            "for d in sys.argv[1:]:\n"
            "    m = tm2nn.load_model(d + '/model.safetensors')\n"
            "    assert m.edited is None, m.edited\n"
            "    xs = [torch.from_numpy(a) for a in np.load(d + '/inputs.npz').values()]\n"
            "    with torch.no_grad():\n"
            "        y = m.torch()(*xs)\n"
            "    np.savez(d + '/out.npz', *[t.numpy() for t in (y if isinstance(y, tuple) else (y,))])\n")
    subprocess.run([sys.executable, "-c", code, *[str(a) for a, _ in jobs.values()]], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    for name, (alone, want) in jobs.items():
        got = list(np.load(alone / "out.npz").values())
        assert len(got) == len(want) and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, want)), name
        m = mf.load_manifest(alone / "model.safetensors")
        jsonschema.validate(m, SCHEMA)
        assert m["backend"] == name and m["weights"]["edited"] is False


def test_loaded_models_report_as_the_originals(saved):
    for name, (c, path) in saved.items():
        if c.spec.stepping is None and c.input_encoding["kind"] != "bits":
            continue  # abbe-sandon: run on samples, by tm2nn learn
        texts = {"bits": ["1" * len(c.input_encoding.get("names", ())), "0" * len(c.input_encoding.get("names", ()))]}
        texts = texts.get(c.input_encoding["kind"], ["", "1", "10"])
        loaded = tm2nn.load_model(path)
        assert loaded.run(texts) == c.run(texts), name


def test_the_manifest_says_what_the_issue_asks(saved):
    """Every op in order with kind, shapes and the lemma it implements; labels of every
    value; encodings and each report field's decoding; the source and its sha256; the sizes
    next to the paper's bounds; and it maps back to the .onnx metadata exactly."""
    for name, (c, path) in saved.items():
        m = mf.load_manifest(path)
        assert m["paper"] == c.spec.paper and m["paper"]
        assert m["source"]["sha256"] == metadata(c)["tm2nn.source_sha256"]
        assert m["encodings"]["input"] == json.loads(json.dumps(c.input_encoding))
        assert m["sizes"]["bounds"] == json.loads(json.dumps(c.info()["bounds"], default=str))
        assert mf.flat_metadata(m) == metadata(c), name
        for op in _ops(m["net"]):
            assert op["cite"], (name, op["name"])
            if op.get("tensors"):  # an op with weights names its lemma itself
                assert not op.get("cite_inherited"), (name, op["name"])
                for t in op["tensors"].values():
                    assert t["layout"] == "binary_positions" or t["shape"]
        for field, d in m["decoding"]["fields"].items():
            labels = mf.value_labels(m, d["value"])
            assert d["labels"] and set(d["labels"]) <= set(labels), (name, field)
            assert d["rule"], (name, field)


def _ops(net: dict):
    for op in net["ops"]:
        yield op
        for sub in op.get("nets", {}).values():
            yield from _ops(sub)


def test_the_schema_catches_a_broken_manifest(saved):
    """Mutations: each breaks the manifest in one place; the schema refuses every one."""
    m = mf.load_manifest(saved["transformer"][1])
    jsonschema.validate(m, SCHEMA)
    breaks = [lambda d: d.pop("decoding"), lambda d: d["net"]["ops"][0].update(kind="conv"),
              lambda d: d["net"]["ops"][0].update(cite=""), lambda d: d["weights"].update(sha256="x"),
              lambda d: d["spaces"].append(["a", "a"]), lambda d: d["source"].pop("text"),
              lambda d: d.update(schema_version=2), lambda d: d["decoding"]["fields"].clear()]
    for brk in breaks:
        bad = json.loads(json.dumps(m))
        brk(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


def test_the_module_is_rebuilt_from_the_manifest_alone(saved, tmp_path):
    """load_module reads no source and compiles nothing: with the source text blanked it
    still rebuilds the module (load_model, which checks the file against the construction,
    refuses that file), and an edited array is what it runs."""
    c, path = saved["transformer"]
    xs = inputs_for(c, 20)
    want = outputs(c.torch(), xs)
    m, arrays = mf.read_safetensors(path, path.read_bytes())
    m["source"]["text"] = ""
    blank = _write(tmp_path / "blank.safetensors", m, arrays)
    got = outputs(mf.load_module(blank), xs)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    with pytest.raises(tm2nn.Tm2nnError, match="tm2nn.source"):
        tm2nn.load_model(blank)


def _write(path: Path, m: dict, arrays: dict) -> Path:
    from safetensors.numpy import save

    path.write_bytes(save(arrays, metadata={"tm2nn.manifest": json.dumps(m)}))
    return path


def test_an_edited_array_loads_flagged_and_runs_as_edited(saved, tmp_path):
    c, path = saved["relu-circuit"]
    m, arrays = mf.read_safetensors(path, path.read_bytes())
    op = next(o for o in m["net"]["ops"] if o["kind"] == "affine")
    key = op["tensors"]["weight"]["vals"]
    arrays[key] = arrays[key].copy()
    arrays[key][0] = -arrays[key][0]
    edited = tm2nn.load_model(_write(tmp_path / "e.safetensors", m, arrays))
    assert edited.edited.startswith(f"op {op['name']!r} weight: 1 of ")
    xs = inputs_for(c)
    assert not all(np.array_equal(a, b) for a, b in zip(outputs(edited.torch(), xs), outputs(c.torch(), xs)))
    with pytest.raises(tm2nn.Tm2nnError, match="runs the construction's network"):
        edited.run("1" * 5, engine="fused")
    edited.save(tmp_path / "again.safetensors")  # saved as loaded: the edit travels
    assert tm2nn.load_model(tmp_path / "again.safetensors").edited == edited.edited


def test_a_manifest_that_is_not_the_construction_is_refused(saved, tmp_path):
    c, path = saved["relu-circuit"]
    cases = {"ops": lambda m, a: m["net"]["ops"].pop(),
             "shape": lambda m, a: m["net"]["ops"][0]["tensors"]["weight"].update(shape=[99, 99]),
             "labels": lambda m, a: m["spaces"].__setitem__(m["net"]["ops"][0]["space"],
                                                            [f"z:{i}" for i in range(len(m["spaces"][
                                                                m["net"]["ops"][0]["space"]]))])}
    for what, brk in cases.items():
        m, arrays = mf.read_safetensors(path, path.read_bytes())
        brk(m, arrays)
        with pytest.raises(tm2nn.Tm2nnError) as e:
            tm2nn.load_model(_write(tmp_path / f"{what}.safetensors", m, arrays))
        assert f"{what}.safetensors: error: " in str(e.value), what


def test_a_large_manifest_goes_beside_the_file(saved, tmp_path, monkeypatch):
    c, _ = saved["relu-circuit"]
    monkeypatch.setattr(mf, "HEADER_MANIFEST_MAX", 1000)
    path = c.save(tmp_path / "big.safetensors")
    (side,) = tmp_path.glob("big.manifest.*.json")  # named after its sha256's first 16 digits
    assert re.fullmatch(r"big\.manifest\.[0-9a-f]{16}\.json", side.name)
    assert tm2nn.load_model(path).edited is None
    side.write_text(side.read_text().replace('"majority5"', '"majority6"', 1))
    with pytest.raises(tm2nn.Tm2nnError, match="its sha256 differs"):
        tm2nn.load_model(path)
    side.unlink()
    with pytest.raises(tm2nn.Tm2nnError, match="is not beside it"):
        tm2nn.load_model(path)


@pytest.mark.parametrize("damage", ["empty", "short", "not_json", "no_manifest", "truncated"])
def test_damaged_files_are_one_line_errors(saved, tmp_path, run_cli, damage):
    blob = saved["relu-circuit"][1].read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    data = {"empty": b"", "short": b"\x08\x00", "not_json": blob[:8] + b"{" * n + blob[8 + n:],
            "no_manifest": None, "truncated": blob[:len(blob) - 5]}[damage]
    path = tmp_path / "bad.safetensors"
    if data is None:
        from safetensors.numpy import save

        data = save({"a": np.zeros(2)})
    path.write_bytes(data)
    r = run_cli("eval", path, "--input", "10101")
    assert r.code == 2 and r.err.startswith(f"{path}: error: ") and r.err.count("\n") == 1, r.err


def test_the_cli_compiles_and_evaluates_safetensors(tmp_path, run_cli):
    out = tmp_path / "bb3.safetensors"
    r = run_cli("compile", EXAMPLES / "bb3.tm", "--backend", "transformer", "--steps", "25", "-o", out)
    assert r.code == 0, r.err
    r = run_cli("eval", out, "--input", "", "--json")
    assert r.code == 0 and json.loads(r.out)["steps"] == 21


def test_an_unrolled_machine_names_the_dimensions_each_field_reads(tmp_path):
    """relu-circuit on a machine: each field's labels are its own output group (a
    misaligned slice of the output labels would name another group's)."""
    c = tm2nn.compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=8)
    m = mf.load_manifest(c.save(tmp_path / "m.safetensors"))
    jsonschema.validate(m, SCHEMA)
    groups = {"state": ":state:", "head": ":head[", "tape": ":tape[", "sigma": ":tape[", "steps": ":steps["}
    fields = m["decoding"]["fields"]
    for field, group in groups.items():
        assert all(group in lab for lab in fields[field]["labels"]), field
    assert fields["halted"]["labels"] == ["out:halted", "out:overflow"]
    layout = c.output_encoding["layout"]
    assert len(fields["head"]["labels"]) == layout["tape"] and len(fields["state"]["labels"]) == len(layout["states"])


def test_the_schema_names_every_op_kind_of_the_ir():
    from tm2nn.nets.serial import OP_KINDS

    assert set(SCHEMA["$defs"]["op"]["properties"]["kind"]["enum"]) == set(OP_KINDS)
