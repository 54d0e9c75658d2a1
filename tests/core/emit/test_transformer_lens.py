"""The TransformerLens bridge (issue 37; tm2nn/emit/transformer_lens.py): the folder, its
loader, TransformerLens's logits, caches, hooks and nnsight on it.  The plain
TransformerLens process (no tm2nn import) runs in tests/core/cli/test_export_tl.py, once,
on the hand-built model's folder and the compiled examples'.  The models here are hand-built
(tests/core/emit/native_models.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tm2nn.backends.transformer.decoder_only.exported import (
    decode,
    expected_tokens,
    first_difference,
    teacher_forced,
    verify_exported,
)
from tm2nn.emit.torch_native import NativeRunner
from tm2nn.emit.transformer_lens import (
    bridge_config,
    is_export,
    load_exported,
    read_export,
    write_export,
)
from tm2nn.errors import Tm2nnError

from .native_models import COPY_FIRST, copy_first_model, random_model

pytest.importorskip("transformer_lens")

def _source() -> dict:
    return {"path": "copy_first.tm", "name": "copy_first", "sha256": "0" * 64, "format": "tm", "text": COPY_FIRST}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return write_export(copy_first_model(), tmp_path_factory.mktemp("tl") / "copy-first-tl", dtype="float64",
                        source=_source())


def test_the_folder_holds_the_config_weights_card_and_ground_truth(exported):
    cfg = json.loads((exported / "config.json").read_text())
    b, t = cfg["bridge"], cfg["tm2nn"]
    assert (b["normalization_type"], b["act_fn"], b["attention_dir"], b["positional_embedding_type"]) == \
        (None, "relu", "causal", "standard")
    assert (b["d_model"], b["n_layers"], b["n_heads"], b["d_vocab"], b["n_ctx"]) == (15, 1, 1, 7, 6)
    assert t["vocab"][:3] == ["<bos>", "<go>", "<halt>"] and t["blank"] == "0" and t["max_input"] == 3
    assert t["source_sha256"] == "0" * 64 and len(t["residual_labels"]) == 15 and t["exact_T"]["float64"] == 1
    card = (exported / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformer-lens\n") and "- not-trained" in card
    assert json.loads((exported / "ground_truth.json").read_text())["components"]["read the first cell"]["heads"] == [0]
    assert is_export(exported) and read_export(exported).weights["pos.weight"].dtype == np.float64


def test_transformer_lens_computes_the_logits_of_the_native_runner():
    """Random weights, float64: TransformerLens's NativeModel and tm2nn's NativeRunner are
    the same function (to rounding: the two order the sums differently)."""
    model = random_model(3)
    import transformer_lens.model_bridge as mb

    bridge = mb.TransformerBridge.boot_native(bridge_config(model), dtype=torch.float64)
    bridge.load_state_dict({k: torch.from_numpy(v) for k, v in model.weights.items()}, strict=False)
    tokens = torch.tensor([[0, 5, 2, 3, 1, 4, 4, 0, 2]])
    want, _ = NativeRunner(model).forward(tokens)
    assert torch.allclose(bridge(tokens), want, rtol=1e-12, atol=1e-9 * float(want.abs().max()))


def test_an_attention_scale_of_one_is_exported_as_two_with_the_queries_doubled(tmp_path):
    """TransformerLens refuses attn_scale = 1 with d_head > 1; the writer divides by 2 and
    doubles W_Q, b_Q (exact), so the logits stay the runner's."""
    model = random_model(4, d_head=2)
    model.attn_scale = 1.0
    out = write_export(model, tmp_path / "m", dtype="float64")
    bridge = load_exported(out)
    assert bridge.cfg.attn_scale == 2.0
    tokens = torch.tensor([[1, 2, 3, 0]])
    want, _ = NativeRunner(model).forward(tokens)
    assert torch.allclose(bridge(tokens), want, rtol=1e-12, atol=1e-9 * float(want.abs().max()))


def test_decoding_the_export_replays_the_machine_and_a_mutation_is_caught(exported, tmp_path):
    bridge = load_exported(exported)
    ex = read_export(exported)
    from tm2nn.syntax import parse_text

    m = parse_text(COPY_FIRST, "tm")[0]
    texts = ["", "1", "01", "110"]
    got = decode(bridge, ex, texts, 2)
    assert got == [expected_tokens(m, t, 1) for t in texts] == [["H|0|R", "<halt>"], ["H|1|R", "<halt>"],
                                                               ["H|0|R", "<halt>"], ["H|1|R", "<halt>"]]
    runner = NativeRunner(copy_first_model())
    assert [runner.greedy(ex.prompt(t), 2) for t in texts] == [[ex.contract["vocab"].index(s) for s in g] for g in got]
    assert teacher_forced(bridge, ex, texts, got) == got  # verify's one-forward check reads the same run
    rep = verify_exported(exported)
    assert rep.ok and rep.mode == "exhaustive" and rep.n_inputs == 15 and rep.complete
    bad = write_export(copy_first_model(write_one="H|0|R"), tmp_path / "bad", dtype="float32", source=_source())
    rep = verify_exported(bad)
    assert not rep.ok and rep.engines["transformer_lens"] == 7  # the tapes that start with 1
    assert (rep.first.step, rep.first.field, rep.first.expected, rep.first.got) == (1, "write", "1", "0")
    assert first_difference(["H|1|R", "<halt>"], ["H|1|R", "H|1|R"]) == (2, "halt", "<halt>", "H|1|R")


def test_run_with_cache_gives_the_residual_stream_and_nnsight_traces_the_bridge(exported):
    bridge = load_exported(exported)
    ex = read_export(exported)
    tokens = torch.tensor([ex.prompt("1")])
    _, cache = bridge.run_with_cache(tokens)
    _, kept = NativeRunner(copy_first_model()).forward(tokens, keep=True)
    read = ex.contract["residual_labels"].index("read:1")
    resid = cache["blocks.0.hook_resid_post"]
    assert torch.allclose(resid, kept[1]) and float(resid[0, -1, read]) > 0.999
    # a patching experiment on one head: TransformerLens's hook_z zeroed is NativeRunner's
    # Ablation of that head, and the head is what reads the first cell
    from tm2nn.emit.torch_native import Ablation

    def zero_head(z, hook):
        z[:, :, 0] = 0
        return z

    ablated = bridge.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    want, _ = NativeRunner(copy_first_model()).forward(tokens, Ablation(heads=[(0, 0)]))
    assert torch.allclose(ablated, want)
    vocab = ex.contract["vocab"]
    assert vocab[int(bridge(tokens)[0, -1].argmax())] == "H|1|R" and vocab[int(ablated[0, -1].argmax())] == "H|0|R"
    nnsight = pytest.importorskip("nnsight")
    traced = nnsight.NNsight(bridge)
    with traced.trace(tokens):
        pattern = traced.blocks[0].attn.hook_pattern.output.save()
    assert float(pattern.detach()[0, 0, -1, 1]) > 0.999  # the <go> query reads the first cell


def test_the_writer_refuses_what_it_must(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(Tm2nnError, match="not empty and holds no TransformerLens export"):
        write_export(copy_first_model(), other)
    assert (other / "todo.txt").read_text() == "mine"
    with pytest.raises(Tm2nnError, match="does not exist"):
        write_export(copy_first_model(), tmp_path / "no" / "such")
    model = copy_first_model()
    model.meta.update(steps=5, exact_T={"float32": 2, "float64": 9})
    with pytest.raises(Tm2nnError, match=r"float32 decodes this model exactly only up to T = 2 .*export it in float64"):
        write_export(model, tmp_path / "x", dtype="float32")
    assert not (tmp_path / "x").exists()
    again = write_export(copy_first_model(), tmp_path / "y")
    assert write_export(copy_first_model(), again, dtype="float64") == again  # an export is replaced
    assert read_export(again).contract["dtype"] == "float64"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "y"]  # no temporary folder left
    (again / "model.safetensors").write_bytes(b"junk")
    with pytest.raises(Tm2nnError, match="model.safetensors does not load"):
        read_export(again)
    with pytest.raises(Tm2nnError, match="not a tm2nn TransformerLens export"):
        read_export(other)
