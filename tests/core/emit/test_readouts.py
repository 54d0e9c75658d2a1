"""Readouts (tm2nn/nets/ops.py: ``RunReadout``, ``Pick``): the transformer's decoded run
and θ_cls output are ops of its net, so the ONNX model, the torch module and the manifest
describe one network.  The torch module's named outputs equal the ONNX model's (the taps
close, every readout exactly), its ``forward`` still returns the taps alone, the graph of a
transformer is byte-identical to the one the raw-node readout made before (a saved
``.onnx`` loads as not edited), a ``.safetensors`` written before loads with the
construction's readouts, and the emitters' tables hold every op and name an op they lack."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

import tm2nn
from tm2nn.backends.transformer.readout import OUTPUTS, run_readouts
from tm2nn.emit.onnx_graph import ONNX_EMITTERS
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import to_torch
from tm2nn.emit.torch_net import TORCH_MODULES
from tm2nn.nets import Net, NetIRError, Op, Pick, Port, Slice, Space
from tm2nn.nets.ops import network_outputs
from tm2nn.nets.serial import (
    OP_KINDS,
    SpaceTable,
    net_from_json,
    net_to_json,
    space_from_json,
    with_readouts_of,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
TEXTS = ["", "0", "1", "01", "10", "11", "011", "101", "1101", "0110", "0000", "111111", "10101"]


def compiled(name: str, **opts):
    return tm2nn.compile(EXAMPLES / name, "transformer", **{"steps": 12, **opts})


def tokens(c) -> np.ndarray:
    return c.encode([t for t in TEXTS if set(t) <= set(c.source.alphabet)])


def onnx_outputs(c, x) -> dict[str, np.ndarray]:
    model = c.onnx()
    return dict(zip([o.name for o in model.graph.output], run_onnx(model, x)))


def torch_outputs(module, x) -> dict[str, np.ndarray]:
    with torch.no_grad():
        return {k: v.numpy() for k, v in module.outputs(torch.from_numpy(x)).items()}


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        if k in ("trace", "cls"):
            np.testing.assert_allclose(got[k], want[k], atol=1e-5)
        else:
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


@pytest.mark.parametrize("name,opts", [("binary_increment.tm", {}), ("palindrome.tm", {"cls_readout": True}),
                                       ("unary_addition.tm", {"attention": "softmax", "steps": 5})])
def test_the_torch_module_computes_the_onnx_models_outputs(name, opts):
    c = compiled(name, **opts)
    x = tokens(c)
    want = onnx_outputs(c, x)
    assert list(want) == c.output_encoding["onnx_outputs"] == list(c.net.outputs)
    assert [c.net.kinds[o] for o in OUTPUTS] == ["integer", "flag", "integer", "integer", "integers"]
    module = c.torch()
    assert_same(torch_outputs(module, x), want)
    # forward is the network: the taps alone, as every caller of the module expects
    with torch.no_grad():
        taps = module(torch.from_numpy(x))
    assert isinstance(taps, torch.Tensor)
    np.testing.assert_allclose(taps.numpy(), want["trace"], atol=1e-5)
    assert module.output_names == ("trace",) and module.readout_names == tuple(c.net.outputs[1:])
    trace = module.trace(torch.from_numpy(x))
    assert all(np.array_equal(trace[o].numpy(), want[o]) for o in c.net.outputs[1:])


def test_the_readouts_hold_no_weights():
    c = compiled("binary_increment.tm", cls_readout=True)
    readouts = [op for op in c.net.nodes if op.readout]
    assert [op.name for op in readouts] == [*OUTPUTS, "cls"]
    assert all(not op.tensors() for op in readouts)
    assert sum(p.numel() for p in c.torch().parameters()) == c.net.info()["params_nonzero"]
    assert not any(k.startswith(tuple(OUTPUTS)) for k in c.torch().state_dict())


#: sha256 of the graphs the raw onnx.helper readout (backend.finish_onnx) gave, before
#: readouts were NetIR ops: an .onnx file saved then is the construction's to the byte
OLD_GRAPHS = {("binary_increment.tm", False): "bd9dc311691f55e865e82f335d616cc4aee35aea10d6026eb87e72d9531e7cd3",
              ("palindrome.tm", True): "3035601a7c3ac0d1c659bf84507a82f7c23e742ee92381039366d6fdcfebc1c8"}


@pytest.mark.parametrize("name,cls", list(OLD_GRAPHS))
def test_the_graph_is_the_one_the_raw_readout_made(name, cls):
    graph = compiled(name, cls_readout=cls).onnx().graph
    assert hashlib.sha256(graph.SerializeToString()).hexdigest() == OLD_GRAPHS[(name, cls)]


def test_a_safetensors_from_before_readouts_loads(tmp_path):
    """A manifest whose net has no readouts (as written before they were ops) loads, with
    the construction's readouts appended, as not edited."""
    c = compiled("palindrome.tm", cls_readout=True)
    old = Net(c.net.name, c.net.inputs, tuple(op for op in c.net.nodes if not op.readout),
              network_outputs(c.net), dict(c.net.metadata))
    c.net = old
    c.save(tmp_path / "old.safetensors")
    loaded = tm2nn.load_model(tmp_path / "old.safetensors")
    assert loaded.edited is None and loaded.net.outputs == compiled("palindrome.tm", cls_readout=True).net.outputs
    x = tokens(loaded)
    assert_same(torch_outputs(loaded.torch(), x), onnx_outputs(compiled("palindrome.tm", cls_readout=True), x))
    assert with_readouts_of(loaded.net, loaded.net) is loaded.net  # a net with readouts stays as it is


def test_readouts_travel_through_the_manifest():
    c = compiled("binary_increment.tm", cls_readout=True)
    arrays: dict = {}
    table = SpaceTable()
    d = net_to_json(c.net, arrays, table)
    ops = {o["name"]: o for o in d["ops"]}
    assert ops["final_tape"]["kind"] == "run_readout" and ops["final_tape"]["out_kind"] == "integers"
    assert ops["cls"]["kind"] == "pick" and ops["cls"]["attrs"]["step"] == -1
    assert not any(k.startswith(("state", "final_tape", "cls")) for k in arrays)  # tables are attributes
    back = net_from_json(d, arrays, [space_from_json(r) for r in table.rows])
    for a, b in zip(back.nodes[2:], c.net.nodes[2:]):
        assert type(a) is type(b) and dataclasses.asdict(a) == dataclasses.asdict(b)
    assert {"run_readout", "pick"} <= set(OP_KINDS)


def test_fields_emitted_in_any_order_and_alone():
    """The ONNX readouts of one run share their nodes, emitted up to the field each op asks
    for: any subset in any order computes what the torch module computes."""
    c = compiled("unary_addition.tm")
    x = tokens(c)
    taps = c.net.outputs[0]
    ops = {op.name: op for op in run_readouts(c.output_encoding, taps, c.net.inputs[0].name)}
    for order in (["final_tape", "head"], ["steps"], ["head", "state", "halted"]):
        net = Net(c.net.name, c.net.inputs, (*c.net.nodes[:2], *(ops[f] for f in order)), (taps, *order))
        got = dict(zip(net.outputs, run_onnx(to_onnx(net), x)))
        assert_same(got, torch_outputs(to_torch(net), x))


def test_pick_any_step_and_column():
    c = compiled("binary_increment.tm")
    x = tokens(c)
    taps = c.net.outputs[0]
    picks = (Pick("p0", (taps,), step=0, index=3, out=Space(("a",))),
             Pick("p2", (taps,), step=2, index=0, out=Space(("b",))))
    net = Net(c.net.name, c.net.inputs, (*c.net.nodes[:2], *picks), (taps, "p0", "p2"))
    got = dict(zip(net.outputs, run_onnx(to_onnx(net), x)))
    want = torch_outputs(to_torch(net), x)
    assert_same(got, want)
    np.testing.assert_array_equal(want["p0"], want["trace"][:, 0, 3])
    np.testing.assert_array_equal(want["p2"], want["trace"][:, 2, 0])


def test_readouts_read_outputs_and_are_read_by_readouts_only():
    c = compiled("binary_increment.tm")
    embed, dec = c.net.nodes[:2]
    state = c.net.node("state")
    reads_hidden = dataclasses.replace(state, inputs=(embed.name, "tape"))  # not an output of the net
    bad = Net(c.net.name, c.net.inputs, (embed, dec, Pick("p", (embed.name,), index=0, out=Space(("p",)))),
              ("trace", "p"))
    for net in (bad, Net(c.net.name, c.net.inputs, (embed, dec, reads_hidden), ("trace", "state"))):
        with pytest.raises(NetIRError, match="not an input, an output of the net or an earlier readout"):
            to_onnx(net)
        with pytest.raises(NetIRError, match="not an input, an output of the net or an earlier readout"):
            to_torch(net)
    p = Pick("p", ("trace",), index=0, out=Space(("p",)))
    reader = Slice("s", ("p",), indices=(0,))
    with pytest.raises(NetIRError):  # a readout's value is no vector: nothing but a readout reads it
        Net(c.net.name, c.net.inputs, (embed, dec, p, reader), ("trace", "s"))
    with pytest.raises(NetIRError, match="readout's kind"):
        Port("x", Space(("a",)), kind="integer")


def test_every_op_has_an_entry_in_both_tables():
    kinds = {cls.kind: cls for cls in OP_KINDS.values()}
    assert set(kinds.values()) <= set(TORCH_MODULES) and set(kinds.values()) <= set(ONNX_EMITTERS)


@dataclasses.dataclass(frozen=True, eq=False)
class Unknown(Op):
    """An op no emitter has an entry for."""

    kind: ClassVar[str] = "unknown_test_op"

    def out_space(self, ins):
        return ins[0]


def test_an_op_without_an_entry_is_named():
    net = Net("n", (Port("x", Space(("a", "b"))),), (Unknown("u", ("x",)),), ("u",))
    with pytest.raises(NetIRError, match=r"torch emitter has no module for Unknown \(unknown_test_op op 'u'\)"):
        to_torch(net)
    with pytest.raises(NetIRError, match=r"ONNX emitter has no entry for Unknown \(unknown_test_op op 'u'\)"):
        to_onnx(net)
