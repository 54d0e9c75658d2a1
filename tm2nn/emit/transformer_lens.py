"""A :class:`~tm2nn.nets.native.NativeTransformer` as a folder that plain TransformerLens
≥ 4 loads and runs with no tm2nn import (issue 37; docs/transformer_lens.md):

* ``config.json``: ``"bridge"``, the ``TransformerBridgeConfig`` fields of the TL-native
  model (``TransformerBridge.boot_native(cfg)`` builds it), and ``"tm2nn"``, the token
  contract and the provenance (vocabulary, blank, ``max_input``, ``steps``, dtype, the
  source and its sha256, paper and construction, β, ``exact_T``, residual labels);
* ``model.safetensors``: the weights under TransformerLens's native keys
  (``bridge.load_state_dict(weights, strict=False)`` loads them), float32 or float64;
* ``ground_truth.json``: the model's ``components`` (which layer, head, neurons and
  residual dimensions implement which claim of the construction);
* ``README.md``: a model card with YAML metadata and a plain-TransformerLens snippet.

The folder is written as a whole: into a temporary folder beside it, renamed into place
(an earlier export is replaced; any other non-empty folder is refused).  Reading it back
(:func:`read_export`) and booting it in TransformerLens (:func:`load_exported`) live here
too; TransformerLens is an optional extra (``tm2nn[tl]``), imported only by
:func:`load_exported`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from tm2nn.errors import Tm2nnError
from tm2nn.fileio import current_umask
from tm2nn.limits import check_memory, human
from tm2nn.nets.native import NativeTransformer

FORMAT = "tm2nn-transformer-lens/1"
DTYPES = {"float32": np.float32, "float64": np.float64}
FILES = ("config.json", "model.safetensors", "ground_truth.json", "README.md")
#: the token contract's fixed tokens (docs/transformer_lens.md, "The token contract")
BOS, GO, HALT = "<bos>", "<go>", "<halt>"


def bridge_config(model: NativeTransformer) -> dict:
    """The ``TransformerBridgeConfig`` fields of ``model`` (TransformerLens 4's TL-native
    source, ``model_bridge/sources/native``): no normalisation, relu MLP, causal softmax
    attention with scores divided by ``attn_scale``, learned absolute positions, an
    unembedding over the whole vocabulary, no random initialisation."""
    scale = model.attn_scale
    if scale > 0 and model.d_head > 1 and abs(scale - 1.0) < 1e-9:
        # TransformerLens refuses attn_scale = 1 with d_head > 1 (NativeAttention); the
        # writer doubles W_Q and b_Q instead (exact: a power of two), see _scaled
        scale = 2.0
    return {"architecture": "TransformerLensNative", "model_name": model.meta.get("name") or model.meta.get("machine") or "tm2nn",
            "n_layers": model.n_layers, "d_model": model.d_model, "d_head": model.d_head,
            "n_heads": model.n_heads, "d_mlp": model.d_mlp, "n_ctx": model.n_ctx,
            "d_vocab": model.d_vocab, "d_vocab_out": model.d_vocab, "act_fn": "relu",
            "normalization_type": None, "attention_dir": "causal", "positional_embedding_type": "standard",
            "attn_only": False, "gated_mlp": False, "use_attn_scale": True, "attn_scale": float(scale),
            "original_architecture": "TransformerLensNative", "init_weights": False,
            "tokenizer_prepends_bos": False}


def _scaled(model: NativeTransformer, key: str, w: np.ndarray) -> np.ndarray:
    """``w`` as written: W_Q and b_Q doubled where :func:`bridge_config` doubled the scale."""
    if model.attn_scale > 0 and model.d_head > 1 and abs(model.attn_scale - 1.0) < 1e-9 and \
            key.endswith(("attn.q.weight", "attn.q.bias")):
        return w * 2.0
    return w


def exact_T(model: NativeTransformer) -> dict:
    """``{"float32": T32, "float64": T64}``: the largest step bound each dtype decodes
    exactly, as the construction computed it (``meta["exact_T"]``); empty when the model
    says nothing (a hand-built model)."""
    return dict(model.meta.get("exact_T") or {})


def check_dtype(model: NativeTransformer, dtype: str) -> None:
    """Refuse a dtype the model is not exact in for its ``steps`` (with the reason)."""
    if dtype not in DTYPES:
        raise Tm2nnError(f"dtype {dtype!r}: choose float32 or float64")
    limit, steps = exact_T(model).get(dtype), model.meta.get("steps")
    if limit is not None and steps is not None and steps > limit:
        why = model.meta.get("exact_reason", "")
        other = [d for d, t in exact_T(model).items() if d != dtype and t >= steps]
        raise Tm2nnError(f"{dtype} decodes this model exactly only up to T = {limit:,} steps, and it has "
                         f"T = {steps:,}" + (f" ({why})" if why else "")
                         + (f": export it in {other[0]}" if other else ": lower the steps"))


def export_bytes(model: NativeTransformer, dtype: str) -> int:
    """About the memory an export takes: the weights in float64 and once in ``dtype``."""
    return model.nbytes(8) + model.nbytes(np.dtype(DTYPES[dtype]).itemsize)


def write_export(model: NativeTransformer, out: str | Path, *, dtype: str = "float32",
                 source: dict | None = None, ground_truth: dict | None = None) -> Path:
    """Write ``model`` as a TransformerLens folder at ``out`` (see the module doc).
    ``source``: ``{"path", "name", "sha256", "format", "text"}`` of the machine it was
    compiled from (``text`` lets ``tm2nn verify DIR`` replay it).  ``ground_truth``: the
    construction's ground-truth JSON (the decoder-only build's, in TransformerLens's hook
    names); without it (a model built by hand) the file records ``model.components`` as
    given.  Returns the folder."""
    check_dtype(model, dtype)
    check_memory(export_bytes(model, dtype), f"exporting a transformer of {model.parameters():,} parameters "
                 f"({human(model.nbytes(np.dtype(DTYPES[dtype]).itemsize))} in {dtype})", ("steps",))
    out = Path(out)
    _check_target(out)
    config = {"format": FORMAT, "bridge": bridge_config(model), "tm2nn": _contract(model, dtype, source or {})}
    tensors = {k: np.ascontiguousarray(_scaled(model, k, np.asarray(w, dtype=np.float64)).astype(DTYPES[dtype]))
               for k, w in model.weights.items()}
    ground = ground_truth if ground_truth is not None else {
        "format": FORMAT, "paper": model.meta.get("paper"), "construction": model.meta.get("construction"),
        "residual_labels": list(model.residual_labels), "components": model.components}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".tmp", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "tm2nn": FORMAT})
        (tmp / "ground_truth.json").write_text(json.dumps(ground, indent=1) + "\n")
        (tmp / "README.md").write_text(model_card(config))
        os.chmod(tmp, 0o777 & ~current_umask())
        if out.exists():
            old = out.with_name(f".{out.name}.{os.getpid()}.old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Tm2nnError(f"cannot write {out}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _check_target(out: Path) -> None:
    """``out`` may be a new folder, an empty one or an earlier export; never a file or
    another non-empty folder."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise Tm2nnError(f"cannot export to {out}: it exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not is_export(out):
        raise Tm2nnError(f"cannot export to {out}: the folder is not empty and holds no TransformerLens export "
                         "(tm2nn replaces only its own exports): choose another -o DIR")
    if not out.parent.is_dir():
        raise Tm2nnError(f"cannot export to {out}: folder {str(out.parent)!r} does not exist")


def _contract(model: NativeTransformer, dtype: str, source: dict) -> dict:
    meta = model.meta
    return {"vocab": list(model.vocab), "bos": BOS, "go": GO, "halt": HALT, "blank": meta.get("blank"),
            "max_input": meta.get("max_input"), "steps": meta.get("steps"), "dtype": dtype,
            "prompt": "<bos>, the input's symbols, blanks up to max_input, <go>",
            "outputs": "one STATE|WRITE|MOVE token per machine step, then <halt> after the halting step",
            "source": source.get("path"), "source_name": source.get("name"), "source_sha256": source.get("sha256"),
            "source_format": source.get("format"), "source_text": source.get("text"),
            "paper": meta.get("paper"), "construction": meta.get("construction"), "beta": meta.get("beta"),
            "exact_T": exact_T(model), "exact_reason": meta.get("exact_reason"),
            "parameters": model.parameters(), "residual_labels": list(model.residual_labels),
            "contract": meta.get("tokens")}  # the construction's token contract (start, halting states)


def model_card(config: dict) -> str:
    """``README.md``: YAML metadata, what the model computes, what is exact, and a
    plain-TransformerLens snippet that decodes it."""
    b, t = config["bridge"], config["tm2nn"]
    exact = ", ".join(f"{d} up to T = {n:,}" for d, n in t["exact_T"].items()) or "not stated by the builder"
    name = t.get("source_name") or b["model_name"]
    return f"""---
library_name: transformer-lens
tags:
- hand-compiled
- not-trained
- turing-machine
- tm2nn
---

# {name}: a Turing machine as a decoder-only transformer

Compiled by tm2nn, not trained. Source: `{t.get('source')}` (sha256 `{t.get('source_sha256')}`).
Construction: {t.get('construction')} ({t.get('paper')}).

**What it computes.** Prompt: `<bos>`, the input's symbols, the blank `{t.get('blank')}` up to
{t.get('max_input')} cells, then `<go>`. Greedy decoding then emits one `STATE|WRITE|MOVE` token per
machine step (the state entered, the symbol written, the move L, R or S), and `<halt>` after
the halting step, for up to {t.get('steps')} steps. The tape can be replayed from these tokens alone.

**Sizes.** {b['n_layers']} layers, d_model {b['d_model']} (every residual dimension labelled in
`config.json`, `tm2nn.residual_labels`), {b['n_heads']} heads of {b['d_head']}, d_mlp {b['d_mlp']},
n_ctx {b['n_ctx']}, {t['parameters']:,} parameters in {t['dtype']}. Softmax β: {t.get('beta')}.

**What is exact, and where.** Greedy decoding replays the machine exactly, step for step, in
{exact}{f" ({t['exact_reason']})" if t.get('exact_reason') else ""}; this file is {t['dtype']}.
Past T steps nothing is claimed. `ground_truth.json` lists which components implement which
claim of the construction.

```python
import json, torch
from safetensors.torch import load_file
from transformer_lens.model_bridge import TransformerBridge
cfg = json.load(open("config.json"))
model = TransformerBridge.boot_native(cfg["bridge"], dtype=getattr(torch, cfg["tm2nn"]["dtype"]))
model.load_state_dict(load_file("model.safetensors"), strict=False)
text, t = "", cfg["tm2nn"]  # text: the input tape
seq = [t["vocab"].index(s) for s in ["<bos>", *text.ljust(t["max_input"], t["blank"]), "<go>"]]
while t["vocab"][seq[-1]] != "<halt>" and len(seq) <= cfg["bridge"]["n_ctx"]:
    seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
print([t["vocab"][i] for i in seq])
```
(`strict=False` because TransformerBridge 4.3 lists aliases of the same weights as missing
keys; every weight of the file is loaded.)
"""


def is_export(folder: str | Path) -> bool:
    """Whether ``folder`` holds a tm2nn TransformerLens export (its config says so)."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("format") == FORMAT


@dataclass
class Exported:
    """An export read back: its folder, ``config.json`` and the weights (numpy)."""

    folder: Path
    config: dict
    weights: dict[str, np.ndarray]

    @property
    def bridge(self) -> dict:
        return self.config["bridge"]

    @property
    def contract(self) -> dict:
        return self.config["tm2nn"]

    def native(self) -> NativeTransformer:
        """The folder's model as a :class:`NativeTransformer` (float64 weights as written,
        the config's attention scale): what :class:`~tm2nn.emit.torch_native.NativeRunner`
        runs with TransformerLens's semantics, e.g. to check the ground truth's ablations."""
        b, t = self.bridge, self.contract
        return NativeTransformer(vocab=list(t["vocab"]), residual_labels=list(t["residual_labels"]),
                                 n_layers=b["n_layers"], n_heads=b["n_heads"], d_head=b["d_head"], d_mlp=b["d_mlp"],
                                 n_ctx=b["n_ctx"], attn_scale=float(b.get("attn_scale", -1.0)),
                                 weights={k: np.asarray(v, dtype=np.float64) for k, v in self.weights.items()},
                                 meta={"steps": t.get("steps"), "max_input": t.get("max_input"),
                                       "blank": t.get("blank"), "name": t.get("source_name"),
                                       **({"tokens": t["contract"]} if t.get("contract") else {})})

    def prompt(self, text: str) -> list[int]:
        """The token ids of the prompt for input tape ``text`` (the token contract)."""
        t = self.contract
        vocab = {s: i for i, s in enumerate(t["vocab"])}
        if len(text) > t["max_input"]:
            raise Tm2nnError(f"input {text!r}: {len(text)} cells, more than the export's max_input "
                             f"{t['max_input']} (export again with --max-input {len(text)})")
        bad = [c for c in text if c not in vocab]
        if bad:
            raise Tm2nnError(f"input {text!r}: symbol {bad[0]!r} is not a token of the export")
        return [vocab[BOS], *(vocab[c] for c in text.ljust(t["max_input"], t["blank"])), vocab[GO]]


def read_export(folder: str | Path) -> Exported:
    """The export at ``folder``, checked: its config names the format, and the weights
    hold every native key of the config's shapes."""
    folder = Path(folder)
    if not folder.is_dir():
        raise Tm2nnError(f"{folder}: not a folder")
    if not is_export(folder):
        raise Tm2nnError(f"{folder}: not a tm2nn TransformerLens export (no config.json of format {FORMAT!r})")
    config = json.loads((folder / "config.json").read_text())
    b, t = config.get("bridge"), config.get("tm2nn")
    if not isinstance(b, dict) or not isinstance(t, dict) or not isinstance(t.get("vocab"), list):
        raise Tm2nnError(f"{folder}/config.json: no 'bridge' and 'tm2nn' sections")
    try:
        weights = load_file(str(folder / "model.safetensors"))
    except (OSError, ValueError, Exception) as e:  # safetensors raises its own SafetensorError
        raise Tm2nnError(f"{folder}/model.safetensors does not load: {e}") from None
    ex = Exported(folder, config, weights)
    try:
        ex.native()  # validates: every native key of the config's shapes, finite
    except (KeyError, TypeError) as e:
        raise Tm2nnError(f"{folder}/config.json: {e} missing or wrong") from None
    except Exception as e:  # NetIRError: a missing key, a wrong shape, a value not finite
        raise Tm2nnError(f"{folder}: the weights do not match the config: {e}") from None
    return ex


def load_exported(folder: str | Path, dtype: str | None = None):
    """The export at ``folder`` as a TransformerLens ``TransformerBridge`` (booted with
    ``boot_native``, weights loaded and checked to be the file's), in ``dtype`` (default:
    the file's).  Needs the ``tl`` extra: ``pip install 'tm2nn[tl]'``."""
    ex = read_export(folder)
    try:
        import torch
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:
        raise Tm2nnError("loading a TransformerLens export needs TransformerLens: pip install 'tm2nn[tl]'") from None
    dt = getattr(torch, dtype or ex.contract["dtype"])
    bridge = TransformerBridge.boot_native(dict(ex.bridge), dtype=dt)
    state = {k: torch.from_numpy(np.asarray(v)).to(dt) for k, v in ex.weights.items()}
    bridge.load_state_dict(state, strict=False)
    loaded = {k.replace("._original_component", ""): v for k, v in bridge.original_model.state_dict().items()}
    for k, v in state.items():  # strict=False: every weight of the file must have landed
        if k not in loaded or not torch.equal(loaded[k], v):
            raise Tm2nnError(f"{folder}: TransformerLens did not load weight {k} (its version may name the "
                             "native keys differently)")
    bridge.eval()
    return bridge
