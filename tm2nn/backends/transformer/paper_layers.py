"""The transformer in the paper's units: a decoder step as a sequence of transformer layers.

Wei, Chen & Ma §4.1 define a transformer layer of the decoder as decoder
self-attention, then encoder–decoder attention, then a feed-forward block.  The proof
of Theorem 4.1 (App. C, last paragraphs) fixes how a construction fills it: "every
single decoder self-attention or encoder-decoder attention layer or feedforward ReLU
module can be converted into a transformer layer by setting the two unused modules ...
to implement the identity", and "the correction functions form the last 2 feedforward
ReLU layers in every transformer layer.  The first 3 layers in the transformer layer
correspond to ones constructed in the lemmas" — i.e. the self-attention, the
encoder–decoder attention and ONE feed-forward ReLU layer; Theorem D.6 then reads
"the self-attention, encoder-decoder attention, and single feedforward ReLU layer as a
single function" f_i, followed by its correction ζ_i.

:func:`paper_layers` reads a decoder step (``Decode.body``) or the prologue the same
way.  Walking the ops in order, it fills the slots

    self-attention → encoder–decoder attention → one ReLU layer (Affine + ReLU)
    → a Prop. 3.4 round correction (Affine + ReLU + Affine + ReLU)

of the current layer and starts a new layer when the next op cannot go into a later
slot of the current one (greedy).  Every slot is optional, but a correction needs a
module before it.  It enforces the shape: every op that carries the decoder value
must read the value the previous op produced (one chain from the input ``x`` to the
output ``o``), and any op that is not one of these (or an affine map not followed by
a ReLU) is an error.  Slices and concatenations (the tap) have no parameters and are
skipped, as is the θ_cls readout (:mod:`.cls`), a linear map into the tap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.transformer.cls import CLS_LABEL
from tm2nn.nets import Affine, Attention, Concat, Decode, Net, NetIRError, Op, ReLU, Slice
from tm2nn.nets.round import ROUND_HI, ROUND_LO, ROUND_SCALE

#: Slot ranks within one paper transformer layer, in the order §4.1 applies them.
SELF, CROSS, FF, CORRECTION = 0, 1, 2, 3


class PaperLayerError(NetIRError):
    """An op sequence that is not a stack of the paper's transformer layers."""


@dataclass(frozen=True)
class PaperLayer:
    """One transformer layer of Wei, Chen & Ma §4.1 as the proof of Theorem 4.1 fills
    it: the op names of each slot (None / empty where the paper's module is the
    identity), ``value`` the layer's output before its correction, ``out`` after it."""

    self_attn: str | None = None
    cross_attn: str | None = None
    ff: tuple[str, str] | None = None           # (Affine, ReLU)
    correction: tuple[str, ...] = ()            # (round_a, relu, round_b, relu) or ()
    corrected: bool = False
    value: str = ""
    out: str = ""

    def __post_init__(self) -> None:
        if self.corrected != bool(self.correction):
            raise PaperLayerError("PaperLayer: corrected must say whether there is a correction")
        if self.self_attn is None and self.cross_attn is None and self.ff is None:
            raise PaperLayerError("PaperLayer: a transformer layer needs at least one module")

    @property
    def ops(self) -> tuple[str, ...]:
        """Every op name of the layer, in order."""
        out = [n for n in (self.self_attn, self.cross_attn) if n is not None]
        return tuple(out + list(self.ff or ()) + list(self.correction))


def is_cls_readout(op: Op) -> bool:
    """The θ_cls readout (:func:`tm2nn.backends.transformer.cls.cls_readout`): an affine
    map into the single label ``cls``."""
    return isinstance(op, Affine) and tuple(op.out.labels) == (CLS_LABEL,)


def _round_ops(net: Net, ops: tuple[Op, ...], i: int, cur: str) -> tuple[str, ...]:
    """The four ops of Prop. 3.4's round starting at ``ops[i]`` (an Affine named
    ``*.round_a``), checked op by op and weight by weight; raises otherwise."""
    a = ops[i]
    names = tuple(op.name for op in ops[i:i + 4])
    want = (ReLU, Affine, ReLU)
    if len(names) < 4 or not all(isinstance(op, k) for op, k in zip(ops[i + 1:i + 4], want)):
        raise PaperLayerError(f"{net.name}: {a.name!r} starts a round correction, which must be "
                              "Affine round_a, ReLU, Affine round_b, ReLU (Prop. 3.4)")
    relu_a, b, relu_b = ops[i + 1:i + 4]
    if relu_a.inputs != (a.name,) or b.inputs != (relu_a.name,) or relu_b.inputs != (b.name,) \
            or not b.name.endswith(".round_b"):
        raise PaperLayerError(f"{net.name}: the round correction {names} is not one chain "
                              "round_a -> ReLU -> round_b -> ReLU")

    n = len(net.spaces[cur])
    wa, wb = a.weight, b.weight
    ok = (wa.shape == (2 * n, n) and wa.nnz == 2 * n and np.all(wa.vals == 1.0)
          and np.array_equal(np.sort(wa.cols), np.repeat(np.arange(n), 2))
          and np.allclose(a.bias, np.tile([-ROUND_LO, -ROUND_HI], n))
          and wb.shape == (n, 2 * n) and wb.nnz == 2 * n
          and np.array_equal(np.sort(np.abs(wb.vals)), np.full(2 * n, ROUND_SCALE))
          and not np.any(b.bias) and net.spaces[b.name] == net.spaces[cur])
    if not ok:
        raise PaperLayerError(f"{net.name}: {a.name!r} is named as a Prop. 3.4 round correction, "
                              "but its weights are not round(z) = 3φ(z-1/3) - 3φ(z-2/3) on its input")
    return names


def paper_layers(net: Net) -> list[PaperLayer]:
    """Partition a decoder step (``Decode.body``) or the prologue into the paper's
    transformer layers, in order (see the module doc).  Raises :class:`PaperLayerError`
    when the ops do not have that shape."""
    if any(isinstance(op, Decode) for op in net.nodes):
        raise PaperLayerError(f"{net.name}: paper_layers reads one decoder step (Decode.body) or the "
                              "prologue, not the whole model; count() takes the model")
    if len(net.inputs) < 1 or len(net.outputs) < 1:
        raise PaperLayerError(f"{net.name}: a decoder step maps (x, memory) to (o, tap)")
    cur = net.inputs[0].name
    chain = {cur}                        # the input and every value a module produced
    layers: list[PaperLayer] = []
    slots: dict[int, object] = {}        # the current layer: slot rank -> op name(s)
    value = cur                          # its output before the correction

    def close() -> None:
        if slots:
            corr = slots.get(CORRECTION, ())
            layers.append(PaperLayer(slots.get(SELF), slots.get(CROSS), slots.get(FF), corr, bool(corr),
                                     value=value, out=cur))

    ops = net.nodes
    i = 0
    while i < len(ops):
        op = ops[i]
        if isinstance(op, (Slice, Concat)) or is_cls_readout(op):
            i += 1
            continue
        where = f"{net.name}: {op.kind} {op.name!r}"
        if isinstance(op, (Attention, Affine)) and op.inputs[0] != cur:
            raise PaperLayerError(f"{where} reads {op.inputs[0]!r}, but the layer stack's current value is "
                                  f"{cur!r}: the ops are not one chain of layers")
        if isinstance(op, Attention):
            rank = SELF if op.is_self else CROSS
            if op.is_self and op.history and op.source not in chain:
                raise PaperLayerError(f"{where} attends over the history of {op.source!r}, which is not "
                                      "a value of the layer stack")
            names: tuple[str, ...] = (op.name,)
        elif isinstance(op, Affine) and op.name.endswith(".round_a"):
            rank = CORRECTION
            names = _round_ops(net, ops, i, cur)
        elif isinstance(op, Affine):
            nxt = ops[i + 1] if i + 1 < len(ops) else None
            if not (isinstance(nxt, ReLU) and nxt.inputs == (op.name,)):
                raise PaperLayerError(f"{where} is not followed by its ReLU: a paper transformer layer's "
                                      "feed-forward layer is φ(W h + b)")
            rank = FF
            names = (op.name, nxt.name)
        else:
            raise PaperLayerError(f"{where} is not a module of a paper transformer layer (self-attention, "
                                  "encoder-decoder attention, Affine + ReLU, Prop. 3.4 round)")
        if rank == CORRECTION and (not slots or CORRECTION in slots):
            what = "another correction" if slots else "no module"
            raise PaperLayerError(f"{where}: a round correction after {what}; the proof of Theorem 4.1 "
                                  "puts one correction after a layer's modules")
        if slots and rank <= max(slots):
            close()
            slots = {}
        if rank != CORRECTION:
            value = names[-1]
        slots[rank] = names[0] if rank in (SELF, CROSS) else names
        cur = names[-1]
        chain.add(cur)
        i += len(names)
    close()
    if net.outputs[0] != cur:
        raise PaperLayerError(f"{net.name}: the output {net.outputs[0]!r} is not the end of the layer "
                              f"stack ({cur!r})")
    return layers


def decoder(net: Net) -> Decode:
    """The model's Decode op."""
    for op in net.nodes:
        if isinstance(op, Decode):
            return op
    raise PaperLayerError(f"{net.name}: no decoder (Decode op) in this net")


def count(net: Net) -> int:
    """d: the paper transformer layers of one decoder step.  ``net`` is a whole
    transformer model (its decoder body is counted) or a step net itself."""
    if any(isinstance(op, Decode) for op in net.nodes):
        net = decoder(net).body
    return len(paper_layers(net))
