"""Run a :class:`~tm2nn.nets.native.NativeTransformer` in torch with TransformerLens's
TL-native semantics, without TransformerLens: the reference its exports are checked
against, and the place ablations are done (a head's output or a range of MLP neurons
set to zero).

The forward is TransformerLens 4's ``NativeModel`` with ``normalization_type=None``,
``act_fn="relu"``, causal attention and standard positional embeddings
(``transformer_lens/model_bridge/sources/native/model.py``)::

    x = tok_embed[tokens] + pos[0:n]
    for each layer:  x = x + o(softmax(causal(q(x) k(x)ᵀ / scale)) v(x));  x = x + fc_out(relu(fc_in(x)))
    logits = x @ head.weightᵀ
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from tm2nn.nets.native import NativeTransformer


@dataclass
class Ablation:
    """What to zero in a forward: ``heads`` as ``(layer, head)`` (the head's value mix,
    before ``o``), ``neurons`` as ``(layer, first, stop)`` (post-ReLU MLP activations),
    ``residual`` as ``(layer, dims)`` (residual dimensions zeroed at the input of a layer;
    ``layer == n_layers`` is before the head)."""

    heads: list[tuple[int, int]] = field(default_factory=list)
    neurons: list[tuple[int, int, int]] = field(default_factory=list)
    residual: list[tuple[int, list[int]]] = field(default_factory=list)


class NativeRunner:
    """``model``'s weights as torch tensors of ``dtype``, ready to run token batches."""

    def __init__(self, model: NativeTransformer, dtype: torch.dtype = torch.float64, device=None):
        self.model, self.dtype = model, dtype
        self.w = {k: torch.as_tensor(np.asarray(v), dtype=dtype, device=device) for k, v in model.weights.items()}
        n = model.n_ctx
        self.mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)

    def forward(self, tokens: torch.Tensor, ablation: Ablation | None = None,
                keep: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(logits [batch, seq, vocab], residuals)`` for ``tokens [batch, seq]``;
        ``residuals`` (with ``keep``) holds the residual stream at the input of every layer
        and after the last, ``n_layers + 1`` tensors."""
        m, w = self.model, self.w
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=w["pos.weight"].device)
        b, n = tokens.shape
        if n > m.n_ctx:
            raise ValueError(f"{n} tokens, more than the model's n_ctx = {m.n_ctx}")
        x = w["tok_embed.weight"][tokens] + w["pos.weight"][:n]
        kept = []
        heads = {}
        for layer, head in (ablation.heads if ablation else []):
            heads.setdefault(layer, []).append(head)
        for i in range(m.n_layers):
            x = _zero_residual(x, ablation, i)
            if keep:
                kept.append(x)
            p = f"layers.{i}."
            q = (x @ w[p + "attn.q.weight"].T + w[p + "attn.q.bias"]).view(b, n, m.n_heads, m.d_head).transpose(1, 2)
            k = (x @ w[p + "attn.k.weight"].T + w[p + "attn.k.bias"]).view(b, n, m.n_heads, m.d_head).transpose(1, 2)
            v = (x @ w[p + "attn.v.weight"].T + w[p + "attn.v.bias"]).view(b, n, m.n_heads, m.d_head).transpose(1, 2)
            scores = (q @ k.transpose(-2, -1)) / m.scale
            scores = scores.masked_fill(self.mask[:n, :n], float("-inf"))
            mix = torch.softmax(scores, dim=-1) @ v  # [b, heads, n, d_head]
            for h in heads.get(i, ()):
                mix[:, h] = 0
            x = x + mix.transpose(1, 2).reshape(b, n, -1) @ w[p + "attn.o.weight"].T + w[p + "attn.o.bias"]
            mid = torch.relu(x @ w[p + "mlp.fc_in.weight"].T + w[p + "mlp.fc_in.bias"])
            for layer, first, stop in (ablation.neurons if ablation else []):
                if layer == i:
                    mid[..., first:stop] = 0
            x = x + mid @ w[p + "mlp.fc_out.weight"].T + w[p + "mlp.fc_out.bias"]
        x = _zero_residual(x, ablation, m.n_layers)
        if keep:
            kept.append(x)
        return x @ w["head.weight"].T, kept

    def greedy(self, prompt: list[int], steps: int, ablation: Ablation | None = None) -> list[int]:
        """``steps`` tokens decoded greedily after ``prompt`` (each step a full forward over
        the prefix, as TransformerLens's ``generate`` without a cache)."""
        seq = list(prompt)
        for _ in range(steps):
            logits, _ = self.forward(torch.tensor([seq]), ablation)
            seq.append(int(logits[0, -1].argmax()))
        return seq[len(prompt):]


def _zero_residual(x: torch.Tensor, ablation: Ablation | None, layer: int) -> torch.Tensor:
    if ablation is None:
        return x
    for at, dims in ablation.residual:
        if at == layer and dims:
            x = x.clone()
            x[..., list(dims)] = 0
    return x
