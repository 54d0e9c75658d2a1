"""Fuzz model files (issue 23): a model of every backend, with flipped bytes, truncated, or
with one metadata value, state-dict tensor, manifest field or array edited, through
``eval`` and ``info``.  The only outcomes allowed are exit 0, 1 or 2 with tm2nn's own
message (tests/fuzzing.py); docs/api.md "Loading models" says which is which."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tests.fuzzing import FUZZ_MEMORY, LONG_FACTOR, assert_clean, long_profile, run_case

EX = Path(__file__).resolve().parents[3] / "examples"
#: small models of every backend (name -> source, options, a valid input for eval, so an
#: intact model runs).  abbe-sandon: majority7 (inputs x[0] and the coin r'), whose model
#: loads in 0.05-0.25 s; parity8's took 0.5-0.9 s, most of this test's time.
BUILDS = {"relu-circuit": (EX / "full_adder.circ", {}, "101"),
          "transformer": (EX / "bb3.tm", {"steps": 6}, ""),
          "rcnn": (EX / "bb3.tm", {"steps": 4, "max_input": 1}, ""),
          "gd-trace": (EX / "bb3.tm", {"steps": 4, "max_input": 1}, ""),
          "abbe-sandon": (EX / "majority7.circ", {"engine": "float64"}, "01")}
#: values a metadata edit writes: wrong types, wrong JSON, huge numbers, other models' values
VALUES = st.one_of(st.sampled_from(["", "{", "[]", "{}", "null", "0", "-1", "1e999", "true", "\"x\"", "NaN",
                                    "9" * 40, "{\"kind\": \"tokens\"}", "transformer", "rcnn", "tm", "circ",
                                    "0" * 64]),
                   st.text(max_size=20))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """``(backend, suffix) -> (bytes, eval input)`` of every backend's model."""
    folder = tmp_path_factory.mktemp("fuzz_models")
    out = {}
    for name, (src, opts, text) in BUILDS.items():
        c = tm2nn.compile(src, name, **opts)
        for suffix in (".onnx", ".pt", ".safetensors"):
            out[(name, suffix)] = (c.save(folder / f"{name}{suffix}").read_bytes(), text)
    return out


def _edit_onnx_metadata(blob: bytes, draw) -> bytes:
    m = onnx.load_from_string(blob)
    props = list(m.metadata_props)
    p = draw(st.sampled_from(props))
    action = draw(st.sampled_from(["delete", "value", "json_field"]))
    if action == "delete":
        m.metadata_props.remove(p)
    elif action == "value":
        p.value = draw(VALUES)
    else:
        p.value = _edit_json(p.value, draw)
    return m.SerializeToString()


def _edit_json(text: str, draw) -> str:
    """One field of a JSON object set to another value, or deleted."""
    try:
        obj = json.loads(text)
    except ValueError:
        return draw(VALUES)
    if not isinstance(obj, dict) or not obj:
        return draw(VALUES)
    key = draw(st.sampled_from(sorted(obj)))
    if draw(st.booleans()):
        del obj[key]
    else:
        obj[key] = draw(st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8),
                                  st.lists(st.integers(-3, 3), max_size=3), st.just({})))
    return json.dumps(obj, allow_nan=True)


def _edit_safetensors(blob: bytes, draw) -> bytes:
    """One field of the manifest (top level, or an op of the network) or one array edited."""
    from safetensors.numpy import load, save

    from tm2nn.modelfile.manifest import read_safetensors

    m, arrays = read_safetensors("m.safetensors", blob)
    if draw(st.booleans()):
        where = draw(st.sampled_from(["top", "op", "tensor"]))
        ops = m["net"]["ops"]
        target = m if where == "top" else draw(st.sampled_from(ops))
        if where == "tensor" and target.get("tensors"):
            target = draw(st.sampled_from(sorted(target["tensors"].values(), key=str)))
        edited = json.loads(_edit_json(json.dumps(target), draw) if draw(st.booleans()) else "null")
        target.clear()
        if isinstance(edited, dict):
            target.update(edited)
        return save(arrays, metadata={"tm2nn.manifest": json.dumps(m, allow_nan=True)})
    arrays = dict(load(blob))
    key = draw(st.sampled_from(sorted(arrays)))
    a = arrays[key].copy()
    kind = draw(st.sampled_from(["nan", "scale", "shape", "dtype", "delete"]))
    if kind == "nan" and a.dtype.kind == "f" and a.size:
        a.reshape(-1)[draw(st.integers(0, a.size - 1))] = np.nan
    elif kind == "scale":
        a = a * draw(st.sampled_from([0, -1, 7, 1.5]))
    elif kind == "shape":
        a = np.zeros(a.size + 1)
    elif kind == "dtype":
        a = a.astype(np.float32 if a.dtype.kind != "f" else np.int64)
    if kind == "delete":
        del arrays[key]
    else:
        arrays[key] = np.ascontiguousarray(a)
    return save(arrays, metadata={"tm2nn.manifest": json.dumps(m)})


def _edit_pt(blob: bytes, draw) -> bytes:
    saved = torch.load(io.BytesIO(blob), weights_only=True)
    if draw(st.booleans()):
        meta = saved["metadata"]
        key = draw(st.sampled_from(sorted(meta)))
        if draw(st.booleans()):
            del meta[key]
        else:
            meta[key] = _edit_json(meta[key], draw) if draw(st.booleans()) else draw(VALUES)
    else:
        state = saved["state_dict"]
        if state:
            key = draw(st.sampled_from(sorted(state)))
            t = state[key]
            kind = draw(st.sampled_from(["nan", "scale", "shape", "dtype", "delete"]))
            if kind == "nan" and t.is_floating_point() and t.numel():
                t.view(-1)[draw(st.integers(0, t.numel() - 1))] = float("nan")
            elif kind == "scale" and t.is_floating_point():
                state[key] = t * draw(st.sampled_from([0.0, -1.0, 1e30, 1.5]))
            elif kind == "shape":
                state[key] = torch.zeros(t.numel() + 1)
            elif kind == "dtype":
                state[key] = t.to(torch.int64)
            else:
                del state[key]
    buf = io.BytesIO()
    torch.save(saved, buf)
    return buf.getvalue()


def _nested_loops(depth: int) -> tuple[dict, list]:
    """``(net JSON, space rows)`` of a network of ``depth`` Loops, each the next one's body."""
    from tm2nn.nets import Loop, Net, Port, ReLU, Space
    from tm2nn.nets.serial import SpaceTable, net_to_json

    sp = Space(["a", "b"])
    net = Net("n0", (Port("x", sp),), (ReLU("r", ("x",)),), ("r",))
    for i in range(depth):
        net = Net(f"n{i + 1}", (Port("x", sp),), (Loop("l", ("x",), body=net, trips=1),), ("l",))
    spaces = SpaceTable()
    return net_to_json(net, {}, spaces), spaces.rows


def _wide_space(m: dict, arrays: dict) -> None:
    """A prefixed space of 10^4 x 10^4 = 10^8 labels declared in 0.2 MB."""
    m["spaces"].append({"prefixes": [f"p{i}" for i in range(10_000)], "names": [f"n{i}" for i in range(10_000)]})
    m["net"]["inputs"][0]["space"] = len(m["spaces"]) - 1


def _nested(m: dict, arrays: dict) -> None:
    m["net"], m["spaces"] = _nested_loops(200)
    arrays.clear()


#: hostile ``.safetensors`` of issue 40 (points 6, 8 and 10), the fuzz's seeds: each a
#: manifest edit, or header metadata in place of the manifest
HOSTILE = {
    "sidecar named ''": {"tm2nn.manifest_file": "", "tm2nn.manifest_sha256": "0" * 64},
    "sidecar named '..'": {"tm2nn.manifest_file": "..", "tm2nn.manifest_sha256": "0" * 64},
    "sidecar named with a NUL": {"tm2nn.manifest_file": "a\x00b.json", "tm2nn.manifest_sha256": "0" * 64},
    "10^8 labels in a prefixed space": _wide_space,
    "nets nested 200 deep": _nested,
    "an attribute nested 995 deep": lambda m, a: m["net"]["ops"][0].setdefault("attrs", {}).update(x="@DEEP@"),
}


def hostile_safetensors(blob: bytes, which: str) -> bytes:
    """A tm2nn ``.safetensors`` (``blob``) made into the :data:`HOSTILE` file ``which``."""
    from safetensors.numpy import load, save

    from tm2nn.modelfile.manifest import read_safetensors

    edit = HOSTILE[which]
    if isinstance(edit, dict):
        return save(dict(load(blob)), metadata={"format": "np", **edit})
    m, arrays = read_safetensors("m.safetensors", blob)
    edit(m, arrays)
    text = json.dumps(m).replace('"@DEEP@"', "[" * 995 + "]" * 995)
    return save(arrays, metadata={"format": "np", "tm2nn.manifest": text})


@st.composite
def broken(draw, models: dict):
    """``(suffix, bytes, eval input)`` of a model after one random corruption."""
    (name, suffix), (blob, text) = draw(st.sampled_from(sorted(models.items())))
    kind = draw(st.sampled_from(["flip", "truncate", "metadata", "hostile"]))
    data = bytearray(blob)
    if kind == "hostile" and suffix == ".safetensors":
        data = hostile_safetensors(blob, draw(st.sampled_from(sorted(HOSTILE))))
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        data = bytes(data)
    elif kind == "truncate":
        data = bytes(data[:draw(st.integers(0, len(data) - 1))])
    else:  # metadata (and hostile for .onnx and .pt)
        edit = {".onnx": _edit_onnx_metadata, ".pt": _edit_pt, ".safetensors": _edit_safetensors}[suffix]
        data = edit(blob, draw)
    return suffix, data, text


def _fuzz(n: int, models: dict, tmp_path: Path):
    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])
    @given(st.data(), st.sampled_from(["eval", "info"]))
    def case(data, verb):
        suffix, blob, text = data.draw(broken(models))
        path = tmp_path / f"m{suffix}"
        path.write_bytes(blob)
        argv = [verb, path, "--max-memory", FUZZ_MEMORY] + (["--input", text] if verb == "eval" else [])
        code, out, err, _ = run_case(argv)
        assert_clean(code, out, err, argv)
    case()


def test_every_intact_model_evaluates(models, tmp_path):
    """The eval inputs above are valid: an intact model of every backend runs (exit 0, or
    1 for a machine not halted within its bound), so a corrupted one is fuzzed through
    the run as well as the loader."""
    for (name, suffix), (blob, text) in models.items():
        path = tmp_path / f"m{suffix}"
        path.write_bytes(blob)
        code, out, err, _ = run_case(["eval", path, "--input", text])
        assert code in (0, 1) and out and not err, (name, suffix, code, err)


@pytest.mark.parametrize("which", sorted(HOSTILE))
def test_hostile_seeds_are_one_line_errors(models, tmp_path, which):
    """issue 40, points 6 and 8: each seed is refused with one tm2nn error (exit 2) by
    ``eval`` and ``info``, within the fuzz's memory limit."""
    path = tmp_path / "m.safetensors"
    path.write_bytes(hostile_safetensors(models[("relu-circuit", ".safetensors")][0], which))
    for verb in ("eval", "info"):
        argv = [verb, path, "--max-memory", FUZZ_MEMORY] + (["--input", "101"] if verb == "eval" else [])
        code, out, err, _ = run_case(argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"{path}: error: "), (which, verb, err)


def test_fuzz_models(models, tmp_path):
    _fuzz(200, models, tmp_path)


@long_profile
def test_fuzz_models_long(models, tmp_path):
    _fuzz(200 * LONG_FACTOR, models, tmp_path)
