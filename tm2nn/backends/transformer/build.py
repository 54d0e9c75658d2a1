"""Assemble the transformer of Wei, Chen & Ma §4.1 / App. C for one machine.

Encoder (§4.1): ``Enc_k(x) = E[:, x_k] + β(k)`` with ``E[:, a] = 1_{sym1:a}`` and
``β(k)^{pos1} = Bin(k + offset)`` (C.1; ``offset`` is our two-way tape origin).

Decoder step i (the proof of Theorem 4.1, steps 1–5), on ``o_{i-1} + β(i)`` with
``β(i)^{pos1} = Bin(i)``::

    Lemma C.1 (transition) → Lemma C.2 (head) → Claims C.4, C.5 ×w_pos, C.6 (binary
    search) → Lemma C.7 (input cell) → Lemma C.8 (choose the symbol)  =  o_i  (C.2)

with a Prop. 3.4 ``round`` correction after each group when ``corrections`` (the proof's
last paragraph: "we insert correction functions between every group of constructed
layers"), or, with ``placement="layers"``, after every paper transformer layer
(:func:`correct_every_layer`: "the correction functions form the last 2 feedforward
ReLU layers in every transformer layer").  With ``cls_readout`` each step's tap also
carries θ_clsᵀ o_i (:mod:`.cls`).

The initial decoder input: the paper takes h_0 as a trained parameter encoding the
start configuration, but a_0 (the symbol under the head at step 0) depends on the
input.  So ``o_0`` is computed by a *prologue*: Lemmas C.7 and C.8 applied to the
vector ``h_0 = (st = z_start, pos3 = Bin(offset))`` with no past writes.  The prologue
has no self-attention and adds one read; everything else is the paper's layer stack.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tm2nn.backends.transformer.binary_search import binary_search
from tm2nn.backends.transformer.cls import cls_readout as _cls_readout
from tm2nn.backends.transformer.head import head_move
from tm2nn.backends.transformer.layout import Layout, symbol_label
from tm2nn.backends.transformer.paper_layers import paper_layers
from tm2nn.backends.transformer.read import combine, read_input
from tm2nn.backends.transformer.transition import transition
from tm2nn.ir.machine import Machine
from tm2nn.nets import BinaryPositions, Concat, Decode, Embed, Net, Op, Port, Slice, Space
from tm2nn.nets.round import round_correction

CITE_ENC = "Wei, Chen & Ma §4.1 and (C.1): Enc_k(x) = E[:, x_k] + beta(k), beta(k)^pos1 = Bin(k)"
CITE_DEC = "Wei, Chen & Ma §4.1: decoder, h_{i+1}^(0) = o_i + beta(i+1), beta(i)^pos1 = Bin(i)"


def _corrector(lay: Layout, enabled: bool):
    """Proof of Theorem 4.1 (last paragraph) with Prop. 3.4: ``corr(ops, value, prefix)``
    appends ``round`` on ``value`` (two ReLU layers) to ``ops`` and returns the corrected
    value; the identity when not ``enabled``."""
    def corr(ops: list[Op], value: str, prefix: str) -> str:
        if not enabled:
            return value
        ops += round_correction(0, value, lay.space, prefix=f"{prefix}.round")
        return f"{prefix}.round.round_b.relu"
    return corr


def correct_every_layer(net: Net) -> Net:
    """The literal placement of the proof of Theorem 4.1 (Wei, Chen & Ma, App. C): "the
    correction functions form the last 2 feedforward ReLU layers in every transformer
    layer".  Appends Prop. 3.4's ``round`` (:func:`round_correction`, ops
    ``<value>.round.round_a`` ...) to every paper transformer layer of ``net`` (a decoder
    step or the prologue, :func:`.paper_layers.paper_layers`) that has none, and makes
    every later reader of the layer's output read the corrected value."""
    ends = {layer.value for layer in paper_layers(net) if not layer.corrected}
    rename: dict[str, str] = {}
    nodes: list[Op] = []
    for op in net.nodes:
        if any(i in rename for i in op.inputs):
            op = dataclasses.replace(op, inputs=tuple(rename.get(i, i) for i in op.inputs))
        nodes.append(op)
        if op.name in ends:
            nodes += round_correction(0, op.name, net.spaces[op.name], prefix=f"{op.name}.round")
            rename[op.name] = f"{op.name}.round.round_b.relu"
    return Net(net.name, net.inputs, tuple(nodes), tuple(rename.get(o, o) for o in net.outputs),
               dict(net.metadata))


def _tap(lay: Layout, o: str, writes: str, prefix: str, halting: dict | None = None) -> tuple[list[Op], str]:
    """tap_i = (st, sym1, pos2 of o_i; sym2 = the symbol step i wrote at l_{i-1}), and,
    when ``halting`` is given, θ_clsᵀ o_i (label ``cls``, :func:`.cls.cls_readout`)."""
    head = np.concatenate([lay.idx("st"), lay.idx("sym1"), lay.idx("pos2")])
    ops: list[Op] = [Slice(f"{prefix}.tap.o", (o,), indices=tuple(int(i) for i in head)),
                     Slice(f"{prefix}.tap.write", (writes,), indices=tuple(int(i) for i in lay.idx("sym2")))]
    parts = [f"{prefix}.tap.o", f"{prefix}.tap.write"]
    if halting is not None:
        c_ops, cls = _cls_readout(lay, halting, o, prefix)
        ops += c_ops
        parts.append(cls)
    return ops + [Concat(f"{prefix}.tap", tuple(parts))], f"{prefix}.tap"


def build(m: Machine, lay: Layout, *, mode: str = "hardmax", beta: float = 1.0,
          corrections: bool = True, shared_history: bool = True, placement: str = "groups",
          cls_readout: bool = False) -> Net:
    """The whole model: tokens ``tape`` -> the per-step taps ``trace`` (see layout).
    ``shared_history``: see :func:`~tm2nn.backends.transformer.binary_search.binary_search`.
    ``placement``: ``"groups"`` (a correction after each group of lemmas) or ``"layers"``
    (after every paper transformer layer, :func:`correct_every_layer`); only read when
    ``corrections``.  ``cls_readout``: θ_cls (:mod:`.cls`) as the last tap column."""
    if placement not in ("groups", "layers"):
        raise ValueError(f"correction placement {placement!r}: 'groups' or 'layers'")
    h = lay.space
    corr = _corrector(lay, corrections and placement == "groups")
    finish = correct_every_layer if corrections and placement == "layers" else (lambda net: net)
    halting = dict(m.halting) if cls_readout else None
    ports = (Port("x", h), Port("memory", h, kind="sequence"))

    # Decoder step (the body).
    ops: list[Op] = []
    t_ops, cur = transition(lay, m, "x", "S.c1")
    ops += t_ops
    cur = corr(ops, cur, "S.c1")
    h_ops, cur = head_move(lay, cur, "S.c2")
    ops += h_ops
    cur = corr(ops, cur, "S.c2")
    after_head = cur
    b_ops, cur = binary_search(lay, cur, "S", mode=mode, beta=beta, corrections=corr,
                               shared_history=shared_history)
    ops += b_ops
    cur = corr(ops, cur, "S.c6")
    r_ops, cur = read_input(lay, cur, "memory", "S", mode=mode, beta=beta)
    ops += r_ops
    c_ops, cur = combine(lay, cur, "S")
    ops += c_ops
    o = corr(ops, cur, "S.c8")
    tap_ops, tap = _tap(lay, o, after_head, "S", halting)
    body = finish(Net("step", ports, tuple(ops + tap_ops), (o, tap)))

    # Prologue: o_0 from h_0 by Lemmas C.7 and C.8.
    pops: list[Op] = []
    r_ops, cur = read_input(lay, "x", "memory", "P", mode=mode, beta=beta)
    pops += r_ops
    c_ops, cur = combine(lay, cur, "P")
    pops += c_ops
    o0 = corr(pops, cur, "P.c8")
    tap_ops, tap0 = _tap(lay, o0, "x", "P", halting)
    prologue = finish(Net("prologue", ports, tuple(pops + tap_ops), (o0, tap0)))

    init = lay.vector(st=lay.one_hot("st", m.start), pos3=lay.bin(lay.offset))
    p1 = tuple(int(c) for c in lay.idx("pos1"))  # pos1:b<k>, most significant bit first
    positions = BinaryPositions(lay.width, p1, offset=1, length=lay.steps)             # β(i) = Bin(i)

    syms = [symbol_label(a) for a in lay.alphabet]
    table = np.zeros((len(syms), lay.width))
    for a, s in enumerate(syms):
        table[a, h.index(f"sym1:{s}")] = 1.0
    max_len = lay.steps + 1  # cells 0..T are the only ones a run of T steps can read
    enc_pos = BinaryPositions(lay.width, p1, offset=lay.offset, length=max_len)      # β(k) = Bin(k + offset)
    tokens = Port("tape", Space.named("tok", syms), kind="tokens")
    nodes = (
        Embed("encoder", ("tape",), table=table, positions=enc_pos, out=h, cite=CITE_ENC),
        Decode("trace", ("encoder",), prologue=prologue, body=body, init=init, positions=positions,
               steps=lay.steps, cite=CITE_DEC),
    )
    return Net(m.name, (tokens,), nodes, ("trace",))
