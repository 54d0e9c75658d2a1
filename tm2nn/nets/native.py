"""A decoder-only transformer in TransformerLens's TL-native form, with every residual
dimension labelled: what a construction builds to be opened in TransformerLens.

TransformerLens ≥ 4 boots a model of this shape with ``TransformerBridge.boot_native``
and loads it with ``load_state_dict`` under its native keys (``tok_embed.weight``,
``pos.weight``, ``head.weight``, ``layers.{i}.attn.{q,k,v,o}.{weight,bias}``,
``layers.{i}.mlp.{fc_in,fc_out}.{weight,bias}``; ``transformer_lens/utilities/tracr.py``).
Its block is ``x + attn(x)`` then ``x + mlp(x)``, no normalisation, causal softmax
attention with scores ``q·k / scale``, ``mlp(x) = fc_out(relu(fc_in(x)))``, and logits
``head.weight @ x`` (no bias).  Every layer has the same ``n_heads``, ``d_head`` and
``d_mlp``: a construction pads narrower pieces with zero heads and zero neurons.

The weights here are float64 numpy arrays in ``nn.Linear``'s ``[out, in]`` layout, under
the native keys; the emitters cast them (:mod:`tm2nn.emit.torch_native` runs them,
:mod:`tm2nn.emit.transformer_lens` writes the folder TransformerLens loads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tm2nn.nets.ops import NetIRError


@dataclass
class NativeTransformer:
    """A TL-native decoder-only transformer (see the module docstring).

    ``vocab`` names the tokens (row ``t`` of ``tok_embed.weight`` and of ``head.weight``);
    ``residual_labels`` names the residual dimensions in tracr's ``"name:value"`` form;
    ``attn_scale`` is what scores are divided by (TransformerLens's default is
    ``sqrt(d_head)``: a construction folds its β and this scale into ``W_Q``);
    ``components`` maps a name of a piece of the construction (e.g. ``"C.7 read"``) to
    where it lives (``{"layer": i, "heads": [...], "neurons": [a, b], "writes": [labels]}``),
    the ground truth a circuit-discovery tool is scored against; ``meta`` is free JSON."""

    vocab: list[str]
    residual_labels: list[str]
    n_layers: int
    n_heads: int
    d_head: int
    d_mlp: int
    n_ctx: int
    weights: dict[str, np.ndarray]
    attn_scale: float = -1.0  # TransformerLens's sentinel: sqrt(d_head)
    components: dict[str, dict] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    @property
    def d_model(self) -> int:
        return len(self.residual_labels)

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    @property
    def scale(self) -> float:
        """What attention scores are divided by."""
        return math.sqrt(self.d_head) if self.attn_scale <= 0 else float(self.attn_scale)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every native key and its shape."""
        d, v, hd = self.d_model, self.d_vocab, self.n_heads * self.d_head
        out = {"tok_embed.weight": (v, d), "pos.weight": (self.n_ctx, d), "head.weight": (v, d)}
        per = {"attn.q.weight": (hd, d), "attn.q.bias": (hd,), "attn.k.weight": (hd, d), "attn.k.bias": (hd,),
               "attn.v.weight": (hd, d), "attn.v.bias": (hd,), "attn.o.weight": (d, hd), "attn.o.bias": (d,),
               "mlp.fc_in.weight": (self.d_mlp, d), "mlp.fc_in.bias": (self.d_mlp,),
               "mlp.fc_out.weight": (d, self.d_mlp), "mlp.fc_out.bias": (d,)}
        for i in range(self.n_layers):
            out.update({f"layers.{i}.{k}": s for k, s in per.items()})
        return out

    def validate(self) -> None:
        """Every native key present with its shape, finite, and nothing else; labels unique."""
        if len(set(self.vocab)) != len(self.vocab):
            raise NetIRError("native transformer: token names repeat")
        if len(set(self.residual_labels)) != len(self.residual_labels):
            raise NetIRError("native transformer: residual labels repeat")
        want = self.shapes()
        extra = sorted(set(self.weights) - set(want))
        if extra:
            raise NetIRError(f"native transformer: unknown weights {extra[:3]}")
        for key, shape in want.items():
            w = self.weights.get(key)
            if w is None:
                raise NetIRError(f"native transformer: missing weight {key}")
            if tuple(w.shape) != shape:
                raise NetIRError(f"native transformer: {key} has shape {tuple(w.shape)}, expected {shape}")
            if not np.all(np.isfinite(w)):
                raise NetIRError(f"native transformer: {key} is not finite")

    def parameters(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes().values())

    def nbytes(self, itemsize: int = 4) -> int:
        """Bytes of the weights at ``itemsize`` bytes a number."""
        return self.parameters() * itemsize


def zero_weights(vocab: int, d_model: int, n_layers: int, n_heads: int, d_head: int, d_mlp: int,
                 n_ctx: int) -> dict[str, np.ndarray]:
    """Every native key as a float64 zero array (a builder fills in what it constructs)."""
    hd = n_heads * d_head
    out = {"tok_embed.weight": np.zeros((vocab, d_model)), "pos.weight": np.zeros((n_ctx, d_model)),
           "head.weight": np.zeros((vocab, d_model))}
    for i in range(n_layers):
        out.update({f"layers.{i}.attn.q.weight": np.zeros((hd, d_model)), f"layers.{i}.attn.q.bias": np.zeros(hd),
                    f"layers.{i}.attn.k.weight": np.zeros((hd, d_model)), f"layers.{i}.attn.k.bias": np.zeros(hd),
                    f"layers.{i}.attn.v.weight": np.zeros((hd, d_model)), f"layers.{i}.attn.v.bias": np.zeros(hd),
                    f"layers.{i}.attn.o.weight": np.zeros((d_model, hd)), f"layers.{i}.attn.o.bias": np.zeros(d_model),
                    f"layers.{i}.mlp.fc_in.weight": np.zeros((d_mlp, d_model)),
                    f"layers.{i}.mlp.fc_in.bias": np.zeros(d_mlp),
                    f"layers.{i}.mlp.fc_out.weight": np.zeros((d_model, d_mlp)),
                    f"layers.{i}.mlp.fc_out.bias": np.zeros(d_model)})
    return out
