"""Verification of the decoder-only transformer against the interpreter (tm2nn.interp), in
torch with TransformerLens's semantics (:class:`~tm2nn.emit.torch_native.NativeRunner`).

Teacher forcing checks every step in one forward: with the interpreter's token sequence as
input, the argmax at each position from ``<go>`` on must be the next true token (the model
is causal, so this is exactly what greedy decoding would emit).  :func:`greedy_replay`
decodes greedily and replays the tokens, for the end-to-end path.
"""

from __future__ import annotations

import torch

from tm2nn.backends.transformer.decoder_only.tokens import Contract, Replay, expected_tokens, replay
from tm2nn.emit.torch_native import Ablation, NativeRunner
from tm2nn.ir.machine import Machine
from tm2nn.nets.native import NativeTransformer


def mismatches(runner: NativeRunner, model: NativeTransformer, m: Machine, inputs: list[str],
               ablation: Ablation | None = None) -> dict[str, list[int]]:
    """``{input: [step numbers (1-based) whose token the model gets wrong]}`` under teacher
    forcing; step ``T + 1`` is the ``<halt>`` after a run that halts at T."""
    c = Contract.from_json(model.meta["tokens"])
    T, n = int(model.meta["steps"]), model.n_ctx
    ids = [c.ids(expected_tokens(m, c, x, T, length=n + 1)[0]) for x in inputs]
    logits, _ = runner.forward(torch.tensor([s[:n] for s in ids]), ablation)  # every prompt has M + 2 tokens
    pred = logits.argmax(-1).tolist()
    first = c.max_input + 1  # the <go> position predicts step 1
    return {x: [p - first + 1 for p in range(first, min(len(s) - 1, n)) if pr[p] != s[p + 1]]
            for x, s, pr in zip(inputs, ids, pred)}


def greedy_replay(runner: NativeRunner, model: NativeTransformer, x: str, steps: int | None = None) -> Replay:
    """Decode greedily from ``x``'s prompt (``steps`` tokens, default T + 1) and replay them."""
    c = Contract.from_json(model.meta["tokens"])
    n = steps if steps is not None else int(model.meta["steps"]) + 1
    prompt = c.prompt(x)
    out = runner.greedy(c.ids(prompt), min(n, model.n_ctx - len(prompt) + 1))
    return replay(prompt + c.names(out), c)
