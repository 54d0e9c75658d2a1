"""The data ``tm2nn viz attention`` draws (the backend's ``pictures``): which past decoder
step each attention layer of the binary search (Wei–Chen–Ma App. C, Claims C.4–C.6)
attended to.  The weights are recorded from the emitted torch module while it decodes
(:func:`tm2nn.emit.torch_seq.record_attention`), so the picture shows what the network
did, null key included."""

from __future__ import annotations

import numpy as np

from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner


def attention_weights(compiled, text: str) -> dict[str, list[np.ndarray]]:
    """Op name -> one weight vector ``[1 + n]`` (null first) per decoder step, for every
    self-attention op of the decoder (the binary search)."""
    from tm2nn.emit.torch_seq import record_attention  # loads torch: not when the CLI starts

    with record_attention() as rec:
        torch_runner(compiled.net)(encode_tokens(compiled.input_encoding, [text]))
    steps = max(len(v) for v in rec.values())
    # The binary search's ops run once per decoder step over a growing history.
    return {k: [a[0] for a in v] for k, v in rec.items()
            if len(v) == steps and v[-1].shape[1] > v[0].shape[1]}
