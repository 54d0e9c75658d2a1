"""Small hand-built :class:`NativeTransformer` s for the TransformerLens bridge's tests:
one with random weights (any function; TransformerLens must compute the same logits as
``NativeRunner``) and one with a known function, a one-step machine under the token
contract (docs/transformer_lens.md): it reads the first input cell through an attention
head and emits ``H|x|R`` then ``<halt>``."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tm2nn.nets.native import NativeTransformer, zero_weights

#: the machine the hand-built model computes: copy the first cell, move right, halt
COPY_FIRST = """machine copy_first {
  alphabet: 0 1
  blank: 0
  states: A H
  start: A
  halt: H

  A 0 -> 0 R H
  A 1 -> 1 R H
}
"""


def random_model(seed: int = 0, *, n_layers: int = 2, n_heads: int = 2, d_head: int = 3, d_mlp: int = 5,
                 d_model: int = 7, vocab: int = 6, n_ctx: int = 9) -> NativeTransformer:
    rng = np.random.default_rng(seed)
    w = {k: rng.normal(size=v.shape) for k, v in zero_weights(vocab, d_model, n_layers, n_heads, d_head, d_mlp,
                                                               n_ctx).items()}
    return NativeTransformer(vocab=[f"t{i}" for i in range(vocab)], residual_labels=[f"r:{i}" for i in range(d_model)],
                             n_layers=n_layers, n_heads=n_heads, d_head=d_head, d_mlp=d_mlp, n_ctx=n_ctx, weights=w,
                             meta={"name": "random"})


def copy_first_model(max_input: int = 3, beta: float = 30.0, *, write_one: str = "H|1|R") -> NativeTransformer:
    """The one-step machine :data:`COPY_FIRST` under the token contract.  ``write_one``
    names the token emitted when the first cell holds 1 (a mutation: ``"H|0|R"``)."""
    vocab = ["<bos>", "<go>", "<halt>", "0", "1", "H|0|R", "H|1|R"]
    n_ctx = max_input + 2 + 1  # the prompt and one step (<halt> is predicted at the last position)
    labels = [f"tok:{t}" for t in vocab] + [f"pos:{i}" for i in range(n_ctx)] + ["read:1", "mlp:go_read0"]
    at = {s: i for i, s in enumerate(labels)}
    w = zero_weights(len(vocab), len(labels), 1, 1, 1, 1, n_ctx)
    for i, t in enumerate(vocab):
        w["tok_embed.weight"][i, at[f"tok:{t}"]] = 1
    for i in range(n_ctx):
        w["pos.weight"][i, at[f"pos:{i}"]] = 1
    # the head: the <go> query finds position 1 (the first input cell) and copies "is it 1"
    w["layers.0.attn.q.weight"][0, at["tok:<go>"]] = beta
    w["layers.0.attn.k.weight"][0, at["pos:1"]] = 1
    w["layers.0.attn.v.weight"][0, at["tok:1"]] = 1
    w["layers.0.attn.o.weight"][at["read:1"], 0] = 1
    # one neuron: relu(go - 2 read) is 1 at <go> when the cell holds 0, else 0
    w["layers.0.mlp.fc_in.weight"][0, at["tok:<go>"]] = 1
    w["layers.0.mlp.fc_in.weight"][0, at["read:1"]] = -2
    w["layers.0.mlp.fc_out.weight"][at["mlp:go_read0"], 0] = 1
    head = w["head.weight"]
    head[vocab.index("H|0|R"), at["mlp:go_read0"]] = 4
    head[vocab.index(write_one), at["tok:<go>"]] += 1
    head[vocab.index(write_one), at["read:1"]] += 2
    head[vocab.index("<halt>"), at["tok:H|0|R"]] = 10
    head[vocab.index("<halt>"), at["tok:H|1|R"]] = 10
    return NativeTransformer(vocab=vocab, residual_labels=labels, n_layers=1, n_heads=1, d_head=1, d_mlp=1,
                             n_ctx=n_ctx, weights=w, attn_scale=1.0,
                             components={"read the first cell": {"layer": 0, "heads": [0], "writes": ["read:1"],
                                                                 "determines": "write"}},
                             meta={"name": "copy_first", "blank": "0", "max_input": max_input, "steps": 1,
                                   "beta": beta, "paper": "hand-built test model", "construction": "copy_first",
                                   "exact_T": {"float32": 1, "float64": 1}, "exact_reason": "one step"})


#: the acceptance check: plain TransformerLens in an isolated interpreter (no tm2nn)
PLAIN = r"""
import ast, contextlib, io, json, os, sys, torch
from safetensors.torch import load_file
from transformer_lens.model_bridge import TransformerBridge
torch.set_grad_enabled(False)
torch.set_num_threads(1)  # the suite runs two workers on two cores
runs = {}
for folder, texts in json.loads(sys.argv[1]).items():
    cfg = json.load(open(folder + "/config.json"))
    model = TransformerBridge.boot_native(cfg["bridge"], dtype=getattr(torch, cfg["tm2nn"]["dtype"]))
    model.load_state_dict(load_file(folder + "/model.safetensors"), strict=False)
    t = cfg["tm2nn"]
    for text in texts:
        if text == "<card>":  # the model card's own snippet, run in the folder (input: the empty tape)
            card = open(folder + "/README.md").read().split("```python\n")[1].split("```")[0]
            here, shown = os.getcwd(), io.StringIO()
            os.chdir(folder)
            with contextlib.redirect_stdout(shown):
                exec(card, {})
            os.chdir(here)
            runs.setdefault(folder, {})[text] = ast.literal_eval(shown.getvalue().strip())[t["max_input"] + 2:]
            continue
        seq = [t["vocab"].index(s) for s in ["<bos>", *text.ljust(t["max_input"], t["blank"]), "<go>"]]
        while t["vocab"][seq[-1]] != "<halt>" and len(seq) <= cfg["bridge"]["n_ctx"]:
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
        runs.setdefault(folder, {})[text] = [t["vocab"][i] for i in seq[t["max_input"] + 2:]]
assert not any(m == "tm2nn" or m.startswith("tm2nn.") for m in sys.modules)
print(json.dumps(runs))
"""


def plain_runs(jobs: dict) -> dict[str, dict[str, list[str]]]:
    """``{folder: {text: token names}}``: what one plain TransformerLens process (``python
    -I``, no tm2nn) decodes greedily for each folder's texts (``jobs``: folder -> texts; the
    text ``"<card>"`` runs the snippet of the folder's README.md, on the empty tape)."""
    out = subprocess.run([sys.executable, "-I", "-c", PLAIN, json.dumps({str(k): v for k, v in jobs.items()})],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
