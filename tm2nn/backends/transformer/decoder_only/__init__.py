"""A decoder-only form of Wei, Chen & Ma's App. C in TransformerLens's TL-native layout
(issue 37): :func:`build_native` builds a :class:`~tm2nn.nets.native.NativeTransformer`
whose greedy decoding emits a machine's run as tokens (:mod:`.tokens`, :func:`replay`).
See docs/transformer_lens.md."""

from tm2nn.backends.transformer.decoder_only.build import build_native, exact_T
from tm2nn.backends.transformer.decoder_only.tokens import (
    Contract,
    Replay,
    outcome_table,
    replay,
    vocabulary,
)

__all__ = ["build_native", "exact_T", "Contract", "Replay", "outcome_table", "replay", "vocabulary"]
