"""Model files are checked when loaded (docs/api.md, "Loading models"): bad or missing
metadata, a graph that is not the construction's, a state dict of the wrong shapes, a
model onnxruntime refuses and corrupt bytes are one-line errors naming the file (exit 2,
no traceback); a model whose weights were edited loads, ``info`` says so, and ``eval``
checks its answers against the interpreter (exit 1 on a divergence)."""

from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import tm2nn
from tests.conftest import EXAMPLES
from tm2nn.cli import main
from tm2nn.modelfile.schema import REQUIRED

BB3, ADDER, PARITY8 = EXAMPLES / "bb3.tm", EXAMPLES / "full_adder.circ", EXAMPLES / "parity8.circ"
#: a model of every backend, small enough to compile in a fraction of a second
BUILDS = {"transformer": (BB3, {"steps": 4}), "rcnn": (BB3, {"steps": 4, "max_input": 2}),
          "relu-circuit": (ADDER, {}), "abbe-sandon": (PARITY8, {"engine": "float64"}),
          "gd-trace": (BB3, {"steps": 4, "max_input": 2})}
DECLARED = [(b.name, key) for b in tm2nn.backends.all() for key in b.model_keys]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """``backend -> .onnx path`` for every backend, plus ``"rcnn.pt"``."""
    folder = tmp_path_factory.mktemp("models")
    out = {}
    for name, (source, opts) in BUILDS.items():
        c = tm2nn.compile(source, name, **opts)
        out[name] = c.save(folder / f"{name}.onnx")
        if name == "rcnn":
            out["rcnn.pt"] = c.save(folder / "rcnn.pt")
    return out


def cli(capsys, *argv):
    """``(exit code, stdout, stderr)`` of the command line run in-process."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str, path, *, warnings: int = 0) -> str:
    """The message of the one error line naming ``path`` (after ``warnings`` warning
    lines), with no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == warnings + 1, err
    assert all(ln.startswith(f"{path}: warning: ") for ln in lines[:warnings]), err
    assert lines[-1].startswith(f"{path}: error: "), err
    return lines[-1][len(f"{path}: error: "):]


# -- editing files ------------------------------------------------------------------------------
def with_metadata(src, dst, edit):
    """Copy an ONNX model, ``edit(dict)`` changing its metadata."""
    m = onnx.load(str(src))
    meta = {p.key: p.value for p in m.metadata_props}
    edit(meta)
    del m.metadata_props[:]
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(dst))
    return dst


def without(key: str):
    """An edit that removes ``tm2nn.key`` or ``tm2nn.key/field/...`` (a JSON field)."""
    name, *fields = key.split("/")

    def edit(meta):
        if not fields:
            del meta[name]
            return
        value = json.loads(meta[name])
        node = value
        for f in fields[:-1]:
            node = node[f]
        del node[fields[-1]]
        meta[name] = json.dumps(value)
    return edit


def setting(key: str, text: str):
    return lambda meta: meta.__setitem__(key, text)


def with_weight(src, dst, pick, change):
    """Copy an ONNX model with ``change(array)`` applied to the first initializer whose
    name satisfies ``pick``; returns the initializer's name."""
    m = onnx.load(str(src))
    t = next(t for t in m.graph.initializer if pick(t.name))
    t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t).copy()), t.name))
    onnx.save(m, str(dst))
    return t.name


def bump(a: np.ndarray) -> np.ndarray:
    """One weight of ``a`` changed by 100."""
    a.reshape(-1)[0] += 100.0
    return a


# -- models as written ---------------------------------------------------------------------------
@pytest.mark.parametrize("key,text", [("transformer", "1"), ("rcnn", "1"), ("rcnn.pt", "1"), ("relu-circuit", "011")])
def test_models_as_written_load_run_and_agree(models, capsys, key, text):
    code, out, err = cli(capsys, "eval", models[key], "--input", text, "--json")
    assert code == 0 and err == "" and "diverges" not in json.loads(out)
    code, out, _ = cli(capsys, "info", models[key], "--json")
    assert code == 0 and json.loads(out)["weights_edited"] is None
    assert tm2nn.load_model(models[key]).edited is None


# -- metadata --------------------------------------------------------------------------------------
def test_metadata_that_is_not_json(models, capsys, tmp_path):
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", setting("tm2nn.build", "{steps: 4"))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad).startswith("metadata key tm2nn.build is not JSON (")


@pytest.mark.parametrize("key", [k for k in REQUIRED if k != "tm2nn.backend"])
def test_a_missing_key_every_model_needs(models, capsys, tmp_path, key):
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", without(key))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad).startswith(f"metadata key {key} is missing (")


@pytest.mark.parametrize("backend,key", DECLARED, ids=[f"{b}:{k}" for b, k in DECLARED])
def test_a_missing_key_a_backend_declares(models, capsys, tmp_path, backend, key):
    bad = with_metadata(models[backend], tmp_path / "m.onnx", without(key))
    code, _, err = cli(capsys, "eval", bad)
    assert code == 2
    assert one_error(err, bad).startswith(f"metadata key {key} is missing (") and f"the {backend} backend reads" in err


def test_every_backend_declares_what_it_reads():
    assert {b for b, _ in DECLARED} >= {"transformer", "rcnn", "abbe-sandon", "gd-trace"}
    assert ("transformer", "tm2nn.output_encoding/layout") in DECLARED  # the audit's KeyError: 'layout'


@pytest.mark.parametrize("key,text,want", [
    ("tm2nn.backend", "nope", "metadata key tm2nn.backend is not a known backend: 'nope' (known: relu-circuit"),
    ("tm2nn.source_sha256", "abc", "metadata key tm2nn.source_sha256 is not a hex sha256"),
    ("tm2nn.source_format", "xyz", "metadata key tm2nn.source_format is not a known source format: 'xyz'"),
    ("tm2nn.build", "[1]", "metadata key tm2nn.build is not a JSON object: [1]"),
    ("tm2nn.bounds", "[1, 2]", "metadata key tm2nn.bounds is not a JSON list of rows"),
    ("tm2nn.weights_edited", "yes", "metadata key tm2nn.weights_edited is not 'true' or 'false'"),
    ("tm2nn.output_encoding", '{"kind": "transformer_trace", "layout": 3}',
     "metadata key tm2nn.output_encoding/layout is not a JSON object, which the transformer backend reads: 3"),
])
def test_a_key_of_the_wrong_kind(models, capsys, tmp_path, key, text, want):
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", setting(key, text))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2 and one_error(err, bad).startswith(want)


def test_metadata_promising_other_encodings(models, capsys, tmp_path):
    def edit(meta):
        enc = json.loads(meta["tm2nn.output_encoding"])
        meta["tm2nn.output_encoding"] = json.dumps({**enc, "source_steps": enc["source_steps"] + 1})
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", edit)
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad) == ("metadata key tm2nn.output_encoding/source_steps differs from the transformer "
                                   "construction of the file's source: the file has 5, the construction 4")


def test_metadata_that_does_not_describe_the_weights(models, capsys, tmp_path):
    def edit(meta):
        meta["tm2nn.build"] = json.dumps({"options": {**json.loads(meta["tm2nn.build"])["options"], "steps": 3}})
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", edit)
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2 and "metadata key tm2nn.weights_sha256 is not the hash of the transformer" in one_error(err, bad)


@pytest.mark.parametrize("text,want", [
    ("machine x {", "metadata key tm2nn.source does not load (line 1, column "),
    ("", "metadata key tm2nn.source "),
])
def test_a_source_that_does_not_load(models, capsys, tmp_path, text, want):
    bad = with_metadata(models["transformer"], tmp_path / "m.onnx", setting("tm2nn.source", text))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2 and one_error(err, bad).startswith(want)


def test_no_tm2nn_metadata(models, capsys, tmp_path):
    bad = with_metadata(models["relu-circuit"], tmp_path / "m.onnx", lambda meta: meta.clear())
    code, _, err = cli(capsys, "eval", bad, "--input", "011")
    assert code == 2 and one_error(err, bad).startswith("no tm2nn metadata")


# -- graphs that are not the construction's ----------------------------------------------------------------
def foreign(meta_from, path, inputs, outputs, nodes, inits=()):
    """A small ONNX model made with onnx.helper, carrying ``meta_from``'s metadata."""
    g = helper.make_graph(nodes, "foreign", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    for p in onnx.load(str(meta_from)).metadata_props:
        m.metadata_props.add(key=p.key, value=p.value)
    onnx.save(m, str(path))
    return path


def test_a_foreign_onnx_with_copied_metadata(models, capsys, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    bad = foreign(models["transformer"], tmp_path / "f.onnx", [x], [y], [helper.make_node("Identity", ["x"], ["y"])])
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad) == ("its graph's input 0 'x' float [?, 3] is not the transformer construction's "
                                   "input 0 'tape' int64 [?, ?]")


def test_a_foreign_onnx_with_the_right_signature_is_checked_against_the_interpreter(models, capsys, tmp_path):
    real = onnx.load(str(models["relu-circuit"]))
    zeros = numpy_helper.from_array(np.zeros((3, 2), np.float32), "w")
    bad = foreign(models["relu-circuit"], tmp_path / "f.onnx", list(real.graph.input), list(real.graph.output),
                  [helper.make_node("MatMul", [real.graph.input[0].name, "w"], [real.graph.output[0].name])], [zeros])
    code, out, err = cli(capsys, "eval", bad, "--input", "111", "--json")
    assert code == 1 and json.loads(out)["outputs"] == "00"
    msg = one_error(err, bad, warnings=1)
    assert msg.startswith("its run is not the bit-parallel evaluator's on 1 of 1 input(s); first: input '111'")
    assert json.loads(out)["diverges"]["expected"] == 1


# -- edited weights ---------------------------------------------------------------------------------
def test_a_tampered_transformer_weight_loads_and_eval_reports_the_divergence(models, capsys, tmp_path):
    bad = tmp_path / "t.onnx"
    name = with_weight(models["transformer"], bad, lambda n: n.endswith(".wq"), bump)
    code, out, err = cli(capsys, "eval", bad, "--input", "1", "--json")
    assert code == 1 and json.loads(out)["diverges"]["step"] is not None
    assert f"its weights are not the construction's (weight {name!r}: 1 of " in err.splitlines()[0]
    assert one_error(err, bad, warnings=1).startswith("its run is not the interpreter's on 1 of 1 input(s); "
                                                      "first: input '1' at step ")
    code, out, _ = cli(capsys, "eval", bad, "--input", "1")
    assert code == 1 and "not the interpreter's run: input '1' at step" in out
    code, out, _ = cli(capsys, "info", bad, "--json")
    assert code == 0 and json.loads(out)["weights_edited"].startswith(f"weight {name!r}: 1 of ")
    code, out, _ = cli(capsys, "info", bad)
    assert code == 0 and f"weights edited: not the construction's (weight {name!r}" in out
    code, _, err = cli(capsys, "eval", bad, "--input", "1", "--engine", "torch")  # torch would run the construction
    assert code == 2 and "the torch module is built from the construction" in one_error(err, bad)
    again = tm2nn.load_model(bad).save(tmp_path / "again.onnx")  # saved as loaded: the edit travels
    assert tm2nn.load_model(again).edited == tm2nn.load_model(bad).edited is not None


# the rcnn filter's V1 (6 x 9, two entries a row) is an ELL gather at the bulk batch: its
# weights are the initializer V1.weight.0 (tm2nn.emit.affine_form)
@pytest.mark.parametrize("key,pick", [("transformer", ".wq"), ("rcnn", "V1.weight.0")])
def test_a_nan_weight(models, capsys, tmp_path, key, pick):
    """NaN flows to the output: the decoder either refuses it (exit 2) or decodes a run
    that is not the interpreter's (exit 1); either way one line names the file."""
    bad = tmp_path / "n.onnx"
    with_weight(models[key], bad, lambda n: n.endswith(pick), nan_first)
    assert tm2nn.load_model(bad).edited.endswith("1 of %d values differ (1 NaN)" % onnx_size(bad, pick))
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    if code == 1:
        assert "its run is not the interpreter's" in one_error(err, bad, warnings=1)
    else:
        assert code == 2 and one_error(err, bad).startswith("running it in onnxruntime")


def nan_first(a: np.ndarray) -> np.ndarray:
    """``a`` with its first value NaN."""
    a.reshape(-1)[0] = np.nan
    return a


def onnx_size(path, pick) -> int:
    """The number of values of the first initializer whose name ends with ``pick``."""
    return int(np.prod(next(t.dims for t in onnx.load(str(path)).graph.initializer if t.name.endswith(pick))))


def test_a_tampered_rcnn_weight_loads_and_eval_reports_the_divergence(models, capsys, tmp_path):
    bad = tmp_path / "r.onnx"
    with_weight(models["rcnn"], bad, lambda n: n.endswith("V1.weight.0"), bump)
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 1 and "its run is not the interpreter's" in one_error(err, bad, warnings=1)


def test_a_weight_onnxruntime_refuses(models, capsys, tmp_path):
    bad = tmp_path / "r.onnx"
    with_weight(models["rcnn"], bad, lambda n: n.endswith("V1.weight.0"), lambda a: a[:-1])
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad).startswith("running it in onnxruntime failed: ")
    assert tm2nn.load_model(bad).edited.endswith("V1.weight.0': float32 [5, 1] instead of float32 [6, 1]")


def test_a_state_dict_of_the_wrong_shapes(models, capsys, tmp_path):
    saved = torch.load(models["rcnn.pt"], weights_only=True)
    name = next(iter(saved["state_dict"]))
    want = list(saved["state_dict"][name].shape)
    saved["state_dict"][name] = saved["state_dict"][name][:-1]
    bad = tmp_path / "r.pt"
    torch.save(saved, bad)
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2
    assert one_error(err, bad) == (f"its state_dict entry {name!r} has shape {[want[0] - 1, *want[1:]]}, the rcnn "
                                   f"construction's {want}")
    del saved["state_dict"][name]
    torch.save(saved, bad)
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 2 and one_error(err, bad).startswith(f"its state_dict lacks {name!r}")


def test_an_edited_state_dict_is_checked_against_the_interpreter(models, capsys, tmp_path):
    saved = torch.load(models["rcnn.pt"], weights_only=True)
    name = next(n for n in saved["state_dict"] if n.endswith("V1.weight"))
    saved["state_dict"][name] = bump(saved["state_dict"][name].clone().numpy()).copy()
    saved["state_dict"][name] = torch.from_numpy(saved["state_dict"][name])
    bad = tmp_path / "r.pt"
    torch.save(saved, bad)
    assert tm2nn.load_model(bad).edited.startswith(f"parameter {name!r}: 1 of ")
    code, _, err = cli(capsys, "eval", bad, "--input", "1")
    assert code == 1 and "its run is not the interpreter's" in one_error(err, bad, warnings=1)


# -- corrupt bytes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("key,seeds", [("transformer", range(6)), ("rcnn", range(2)), ("rcnn.pt", range(4))])
def test_flipped_bytes_end_in_a_tm2nn_message(models, capsys, tmp_path, key, seeds):
    """Any outcome but exit 0, 1 or 2, with a one-line message naming the file, fails."""
    blob = models[key].read_bytes()
    for seed in seeds:
        rng = random.Random(seed)
        data = bytearray(blob)
        for _ in range(rng.choice([1, 3, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        bad = tmp_path / f"s{seed}{models[key].suffix}"
        bad.write_bytes(bytes(data))
        code, _, err = cli(capsys, "eval", bad, "--input", "1")
        assert code in (0, 1, 2), (seed, err)
        lines = err.strip().splitlines()
        assert "Traceback" not in err and len(lines) <= 2, (seed, err)
        assert all(ln.startswith(f"{bad}: ") for ln in lines), (seed, err)
        assert code == 0 or lines[-1].startswith(f"{bad}: error: "), (seed, err)
