"""Operations of the network IR.  Each op names its output value (``name``) and the
values it reads (``inputs``); ``out_space`` validates the input spaces and returns
the output's labelled space.  Later constructions add ops here (attention,
patch-MLPs, stop-gradient) and register them with both emitters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tm2nn.nets.activations import REGISTRY
from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.positions import BinaryPositions, as_positions
from tm2nn.nets.space import Space

if TYPE_CHECKING:
    from tm2nn.nets.net import Net


class NetIRError(ValueError):
    """A malformed network (a bug in a backend, not a user error)."""


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    inputs: tuple[str, ...]
    kind: ClassVar[str] = "op"
    arity: ClassVar[int | None] = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if self.arity is not None and len(self.inputs) != self.arity:
            raise NetIRError(f"{self.kind} {self.name!r} takes {self.arity} input(s), got {len(self.inputs)}")

    def out_space(self, ins: list[Space]) -> Space:
        """Validate the input spaces and return the output's; every concrete op overrides this."""
        raise NetIRError(f"op kind {self.kind!r} ({type(self).__name__}) does not define its output space")

    def tensors(self) -> dict[str, np.ndarray | SparseMatrix]:
        """The op's weights, by name (for size reports, pictures and the emitters)."""
        return {}

    #: The kind of value the op produces (see :data:`KINDS`).
    out_kind: ClassVar[str] = "vector"

    def in_kinds(self) -> tuple[str, ...]:
        """The kinds of value the op reads, one per input (default: all vectors)."""
        return ("vector",) * len(self.inputs)


@dataclass(frozen=True, eq=False)
class Affine(Op):
    """``y = W x + b``.  ``trainable`` marks weights a construction trains (emitted as
    torch Parameters); everything else is a buffer.  A trainable sparse W trains only its
    stored entries (:func:`tm2nn.emit.affine_form`); ``train_bias=False`` keeps the bias of
    a trainable op a buffer (a construction whose units have no bias edge)."""

    weight: SparseMatrix = None  # type: ignore[assignment]
    bias: np.ndarray = None  # type: ignore[assignment]
    out: Space = None  # type: ignore[assignment]
    trainable: bool = False
    cite: str = ""
    train_bias: bool = True
    kind: ClassVar[str] = "affine"

    def __post_init__(self) -> None:
        super().__post_init__()
        b = np.zeros(len(self.out)) if self.bias is None else np.asarray(self.bias, dtype=np.float64)
        object.__setattr__(self, "bias", b)

    def out_space(self, ins: list[Space]) -> Space:
        n_out, n_in = self.weight.shape
        if n_in != len(ins[0]):
            raise NetIRError(f"affine {self.name!r}: weight has {n_in} columns, input has {len(ins[0])} dims")
        if n_out != len(self.out) or self.bias.shape != (n_out,):
            raise NetIRError(f"affine {self.name!r}: weight rows / bias / output labels disagree")
        return self.out

    def tensors(self):
        return {"weight": self.weight, "bias": self.bias}


@dataclass(frozen=True, eq=False)
class ReLU(Op):
    """Elementwise max(0, x); the output keeps the input's labels."""

    kind: ClassVar[str] = "relu"

    def out_space(self, ins: list[Space]) -> Space:
        return ins[0]


@dataclass(frozen=True, eq=False)
class Activation(Op):
    """Elementwise ``y = fn(x)`` for a function named in the activation registry
    (:mod:`tm2nn.nets.activations`): ``"abbe_sandon_f"`` (Abbe & Sandon §4.1's f),
    ``"abbe_sandon_fstar"`` (§4.2's f*), ``"abbe_sandon_fpl"`` (the float64
    parametrisation of Def. 6 / Lemma 2, docs/abbe_sandon.md).  The output keeps the
    input's labels.  The registry holds one formula per name in numpy (the reference),
    torch (autograd gives the function's derivative: exactly 0 on flat pieces) and ONNX
    (standard ops only), so both emitters compute the same function.  No weights."""

    fn: str = ""
    cite: str = ""
    kind: ClassVar[str] = "activation"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fn not in REGISTRY:
            raise NetIRError(f"activation {self.name!r}: unknown function {self.fn!r} "
                             f"(registered: {sorted(REGISTRY)})")

    def out_space(self, ins: list[Space]) -> Space:
        return ins[0]


@dataclass(frozen=True, eq=False)
class Concat(Op):
    kind: ClassVar[str] = "concat"
    arity: ClassVar[int | None] = None

    def out_space(self, ins: list[Space]) -> Space:
        if not ins:
            raise NetIRError(f"concat {self.name!r} has no inputs")
        return Space.concat(*ins)


@dataclass(frozen=True, eq=False)
class Slice(Op):
    """Select dimensions by index (any order, no repeats)."""

    indices: tuple[int, ...] = ()
    kind: ClassVar[str] = "slice"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))

    def out_space(self, ins: list[Space]) -> Space:
        n = len(ins[0])
        if any(not 0 <= i < n for i in self.indices):
            raise NetIRError(f"slice {self.name!r}: index out of range for {n} dims")
        return Space(tuple(ins[0].labels[i] for i in self.indices))


@dataclass(frozen=True, eq=False)
class Loop(Op):
    """Apply ``body`` (one input, one output, same space and kind) ``trips`` times; the
    weights are shared between iterations.  Emitted as a Python loop in torch and an
    ONNX ``Loop``, so the model does not grow with ``trips``.  With ``scan`` the value
    is every state ``x_0 .. x_trips`` (a ``sequence`` of vectors, or ``grids``), not
    only the last.

    With ``until_fixed`` the emitted loop stops after the first trip whose output equals
    its input exactly (every element of the batch): the body is a function, so every
    later trip would give that state again.  The value is the same as without it (the
    scan is completed with copies of the last state); only the work is less.  The RCNN's
    machine mode uses it, since B.2's filter leaves the grid of a halted machine as it
    is."""

    body: "Net" = None  # type: ignore[assignment]
    trips: int = 1
    scan: bool = False
    until_fixed: bool = False
    kind: ClassVar[str] = "loop"

    def in_kinds(self) -> tuple[str, ...]:
        return (self.body.inputs[0].kind,) if self.body is not None and self.body.inputs else ("vector",)

    @property
    def out_kind(self) -> str:  # type: ignore[override]
        kind = self.in_kinds()[0]
        if not self.scan:
            return kind
        return {"vector": "sequence", "grid": "grids"}.get(kind, kind)

    def out_space(self, ins: list[Space]) -> Space:
        b = self.body
        if len(b.inputs) != 1 or len(b.outputs) != 1:
            raise NetIRError(f"loop {self.name!r}: the body must have one input and one output")
        if b.inputs[0].space != ins[0] or b.spaces[b.outputs[0]] != ins[0]:
            raise NetIRError(f"loop {self.name!r}: body input, body output and loop input spaces differ")
        if b.kinds[b.outputs[0]] != b.inputs[0].kind or b.inputs[0].kind not in ("vector", "grid"):
            raise NetIRError(f"loop {self.name!r}: the body must map a vector or a grid to the same kind")
        if self.trips < 0:
            raise NetIRError(f"loop {self.name!r}: negative trip count")
        return ins[0]


#: Value kinds.  A ``vector`` is one labelled vector per batch row; a ``sequence`` is a
#: variable-length list of them (the encoder outputs, the decoder's per-step taps);
#: ``tokens`` are integer ids per position (the transformer's input tape); a ``grid`` is
#: one number per cell of a 2D grid (the RCNN's tape, :mod:`tm2nn.nets.grid`) and
#: ``grids`` a sequence of grids.
KINDS = ("vector", "sequence", "tokens", "grid", "grids")


@dataclass(frozen=True)
class Port:
    """A net input.  For ``tokens`` ports the space labels the token ids (one label per
    symbol, in id order)."""

    name: str
    space: Space
    meta: dict = field(default_factory=dict, compare=False)
    kind: str = "vector"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise NetIRError(f"port {self.name!r}: unknown kind {self.kind!r}")


def _as_f64(a, shape: tuple[int, ...], what: str) -> np.ndarray:
    a = np.zeros(shape) if a is None else np.asarray(a, dtype=np.float64)
    if a.shape != shape:
        raise NetIRError(f"{what}: expected shape {shape}, got {a.shape}")
    return a


ATTENTION_MODES = ("hardmax", "softmax")


@dataclass(frozen=True, eq=False)
class Attention(Op):
    """Attention with a null key/value (Wei, Chen & Ma §4.1):

        Attn(h', (h_1..h_i)) = h' + Σ_j a_j v_j,  τ_j = Q(h')ᵀK(h_j),  τ_0 = Q(h')ᵀK_0

    with ``v_0 = V_0`` and ``v_j = V(h_j)``.  ``hardmax`` attends uniformly to
    ``J = argmax_j τ_j`` (ties averaged, as in the paper); ``softmax`` uses
    ``a = softmax(beta · τ)``.

    ``inputs = (h,)`` is decoder *self*-attention: inside a :class:`Decode` body the
    memory is the history of ``h`` itself at steps 1..i (the current step included),
    kept in a cache.  ``inputs = (h, src)`` with ``history=True`` is self-attention over
    the history of another *vector* ``src`` of the same body (computed earlier in the
    step): a backend uses it when the coordinates K and V read are the same in ``src``
    and in ``h`` at every step, so that several layers share one cache of ``src``.
    ``inputs = (h, memory)`` (``history=False``) attends over a ``sequence`` value
    (encoder–decoder attention).  ``Q, K, V`` are affine; ``V`` maps the memory's space
    into ``h``'s, so the output keeps ``h``'s labels (a residual add).  Outside a decoder
    body a history is the current vector alone.
    """

    wq: SparseMatrix = None  # type: ignore[assignment]
    bq: np.ndarray = None  # type: ignore[assignment]
    wk: SparseMatrix = None  # type: ignore[assignment]
    bk: np.ndarray = None  # type: ignore[assignment]
    wv: SparseMatrix = None  # type: ignore[assignment]
    bv: np.ndarray = None  # type: ignore[assignment]
    null_key: np.ndarray = None  # type: ignore[assignment]
    null_value: np.ndarray = None  # type: ignore[assignment]
    mode: str = "hardmax"
    beta: float = 1.0
    history: bool = False
    cite: str = ""
    kind: ClassVar[str] = "attention"
    arity: ClassVar[int | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.inputs) not in (1, 2):
            raise NetIRError(f"attention {self.name!r} takes (h,) or (h, memory)")
        if self.history and len(self.inputs) != 2:
            raise NetIRError(f"attention {self.name!r}: a history attention takes (h, src)")
        dk = self.wq.shape[0]
        if self.wk.shape[0] != dk:
            raise NetIRError(f"attention {self.name!r}: query and key widths differ")
        object.__setattr__(self, "bq", _as_f64(self.bq, (dk,), f"attention {self.name!r} bq"))
        object.__setattr__(self, "bk", _as_f64(self.bk, (dk,), f"attention {self.name!r} bk"))
        object.__setattr__(self, "null_key", _as_f64(self.null_key, (dk,), f"attention {self.name!r} null_key"))
        n = self.wv.shape[0]
        object.__setattr__(self, "bv", _as_f64(self.bv, (n,), f"attention {self.name!r} bv"))
        object.__setattr__(self, "null_value", _as_f64(self.null_value, (n,), f"attention {self.name!r} null_value"))
        if self.mode not in ATTENTION_MODES:
            raise NetIRError(f"attention {self.name!r}: mode must be one of {ATTENTION_MODES}")
        if not (np.isfinite(self.beta) and self.beta > 0):
            raise NetIRError(f"attention {self.name!r}: beta must be a positive number")

    @property
    def is_self(self) -> bool:
        """Attends over a history of vectors (its own input's, or ``src``'s)."""
        return len(self.inputs) == 1 or self.history

    @property
    def source(self) -> str:
        """The value whose history (self) or sequence (cross) is attended."""
        return self.inputs[-1]

    def memory_columns(self) -> np.ndarray:
        """The memory coordinates K and V read (sorted): what a cache must keep."""
        cols = {int(c) for m in (self.wk, self.wv) for c in m.cols[m.vals != 0]}
        return np.array(sorted(cols), dtype=np.int64)

    @property
    def key_width(self) -> int:
        return self.wq.shape[0]

    def value_rows(self) -> np.ndarray:
        """The output dimensions a value can change (the rest pass through unchanged);
        the emitters cache and average only these."""
        rows = set(self.wv.rows.tolist())
        rows |= set(np.flatnonzero(self.bv).tolist()) | set(np.flatnonzero(self.null_value).tolist())
        return np.array(sorted(rows), dtype=np.int64)

    def in_kinds(self) -> tuple[str, ...]:
        if len(self.inputs) == 1:
            return ("vector",)
        return ("vector", "vector") if self.history else ("vector", "sequence")

    def out_space(self, ins: list[Space]) -> Space:
        h = ins[0]
        mem = ins[-1]
        if self.wq.shape[1] != len(h):
            raise NetIRError(f"attention {self.name!r}: query weight has {self.wq.shape[1]} columns, h has {len(h)} dims")
        if self.wk.shape[1] != len(mem) or self.wv.shape[1] != len(mem):
            raise NetIRError(f"attention {self.name!r}: key/value weights do not read the memory's {len(mem)} dims")
        if self.wv.shape[0] != len(h):
            raise NetIRError(f"attention {self.name!r}: values must land in h's {len(h)} dims")
        return h

    def tensors(self):
        return {"wq": self.wq, "bq": self.bq, "wk": self.wk, "bk": self.bk, "wv": self.wv,
                "bv": self.bv, "null_key": self.null_key, "null_value": self.null_value}


@dataclass(frozen=True, eq=False)
class Embed(Op):
    """Encoder: token ids -> a ``sequence``, ``Enc_k(x) = E[:, x_k] + β(k)`` (Wei, Chen &
    Ma §4.1).  ``table`` is ``[n_tokens, width]`` (row ``a`` = ``E[:, a]``), ``positions``
    is ``[max_len, width]`` (row ``k`` = ``β(k)``); tokens past ``max_len`` are dropped
    (a compiled machine can never reach those cells)."""

    table: np.ndarray = None  # type: ignore[assignment]
    positions: np.ndarray = None  # type: ignore[assignment]
    out: Space = None  # type: ignore[assignment]
    cite: str = ""
    kind: ClassVar[str] = "embed"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "table", np.asarray(self.table, dtype=np.float64))
        object.__setattr__(self, "positions", as_positions(self.positions))

    def in_kinds(self) -> tuple[str, ...]:
        return ("tokens",)

    out_kind: ClassVar[str] = "sequence"

    @property
    def max_len(self) -> int:
        return self.positions.shape[0]

    def out_space(self, ins: list[Space]) -> Space:
        w = len(self.out)
        if self.table.shape != (len(ins[0]), w):
            raise NetIRError(f"embed {self.name!r}: table must be [{len(ins[0])} tokens, {w}]")
        if self.positions.ndim != 2 or self.positions.shape[1] != w or self.positions.shape[0] < 1:
            raise NetIRError(f"embed {self.name!r}: positions must be [max_len >= 1, {w}]")
        return self.out

    def tensors(self):
        return {"table": self.table, "positions": _position_tensor(self.positions)}


@dataclass(frozen=True, eq=False)
class Decode(Op):
    """The decoder loop of Wei, Chen & Ma §4.1, with one cache per attended history.

    ``inputs = (memory,)``, a ``sequence`` (the encoder outputs).  With ``init`` = the
    initial decoder input and ``β(i)`` = ``positions[i - 1]`` (an array or a computed
    :class:`~tm2nn.nets.positions.BinaryPositions`)::

        (o_0, tap_0) = prologue(init, memory)
        (o_i, tap_i) = body(o_{i-1} + β(i), memory)      for i = 1 .. steps

    ``prologue`` and ``body`` are nets with inputs ``(x: vector, memory: sequence)`` and
    outputs ``(o, tap)``; ``o`` lives in ``x``'s space.  The op's value is the
    ``sequence`` ``tap_0 .. tap_steps``.  The body's self-attention ops attend over the
    history of a body value (:meth:`histories`), so step ``i`` costs O(i) and earlier
    steps are never recomputed; the prologue may not use self-attention.
    """

    prologue: "Net" = None  # type: ignore[assignment]
    body: "Net" = None  # type: ignore[assignment]
    init: np.ndarray = None  # type: ignore[assignment]
    positions: np.ndarray = None  # type: ignore[assignment]
    steps: int = 0
    cite: str = ""
    kind: ClassVar[str] = "decode"
    out_kind: ClassVar[str] = "sequence"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "init", np.asarray(self.init, dtype=np.float64))
        object.__setattr__(self, "positions", as_positions(self.positions))

    def in_kinds(self) -> tuple[str, ...]:
        return ("sequence",)

    def out_space(self, ins: list[Space]) -> Space:
        tap = None
        for part, net in (("prologue", self.prologue), ("body", self.body)):
            kinds = tuple(p.kind for p in net.inputs)
            if kinds != ("vector", "sequence") or len(net.outputs) != 2:
                raise NetIRError(f"decode {self.name!r}: the {part} must map (x: vector, memory: sequence) to (o, tap)")
            x, mem = net.inputs
            if mem.space != ins[0]:
                raise NetIRError(f"decode {self.name!r}: the {part}'s memory space differs from the input's")
            if net.spaces[net.outputs[0]] != self.body.inputs[0].space:
                raise NetIRError(f"decode {self.name!r}: the {part}'s output o must live in the body input's space")
            t = net.spaces[net.outputs[1]]
            if tap is not None and t != tap:
                raise NetIRError(f"decode {self.name!r}: prologue and body taps differ")
            tap = t
        if any(isinstance(op, Attention) and op.is_self for op in self.prologue.nodes):
            raise NetIRError(f"decode {self.name!r}: the prologue cannot use self-attention (it has no history)")
        w = len(self.body.inputs[0].space)
        if self.init.shape != (len(self.prologue.inputs[0].space),):
            raise NetIRError(f"decode {self.name!r}: init must have the prologue input's width")
        if self.positions.shape != (self.steps, w):
            raise NetIRError(f"decode {self.name!r}: positions must be [steps, {w}]")
        if self.steps < 0:
            raise NetIRError(f"decode {self.name!r}: negative step count")
        return tap

    def histories(self) -> dict[str, np.ndarray]:
        """``{src: columns}`` for the body's self-attention, in op order: each attended
        history (a vector value of the body) and the coordinates its attention ops read
        (the union of their :meth:`Attention.memory_columns`), i.e. one cache per ``src``."""
        out: dict[str, set[int]] = {}
        for op in self.body.nodes:
            if isinstance(op, Attention) and op.is_self:
                out.setdefault(op.source, set()).update(op.memory_columns().tolist())
        return {src: np.array(sorted(c), dtype=np.int64) for src, c in out.items()}

    def tensors(self):
        return {"init": self.init, "positions": _position_tensor(self.positions)}


def _position_tensor(p) -> np.ndarray:
    """What a positional table stores: the table, or a computed code's placement matrix."""
    return p.placement() if isinstance(p, BinaryPositions) else p


@dataclass(frozen=True, eq=False)
class Param(Op):
    """A free trainable vector ``value`` (Welper's ``s``, ``T``, ``H``, ``z``: weights that
    are not multiplied with anything but enter the net as values).  Its one input is read
    for its batch size only: the value is the same for every batch row.  Emitted as a
    torch Parameter and an ONNX initializer (expanded over the batch)."""

    value: np.ndarray = None  # type: ignore[assignment]
    out: Space = None  # type: ignore[assignment]
    cite: str = ""
    kind: ClassVar[str] = "param"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "value", np.asarray(self.value, dtype=np.float64).reshape(-1))

    def out_space(self, ins: list[Space]) -> Space:
        if self.value.shape != (len(self.out),):
            raise NetIRError(f"param {self.name!r}: value has {self.value.size} entries, "
                             f"the space {len(self.out)}")
        return self.out

    def tensors(self):
        return {"value": self.value}


@dataclass(frozen=True, eq=False)
class StopGradient(Op):
    """Identity in the forward pass, zero derivative (Welper's ``\\·\\``, §4.4 before
    (21)): torch ``detach``, ONNX ``Identity`` (ONNX models are not differentiated)."""

    kind: ClassVar[str] = "stop_gradient"

    def out_space(self, ins: list[Space]) -> Space:
        return ins[0]


@dataclass(frozen=True, eq=False)
class Mul(Op):
    """Elementwise product of two values of one width (Welper's product non-linearity,
    (1)); the output is labelled ``out`` (or keeps the first input's labels)."""

    out: Space | None = None
    kind: ClassVar[str] = "mul"
    arity: ClassVar[int | None] = 2

    def out_space(self, ins: list[Space]) -> Space:
        if len(ins[0]) != len(ins[1]):
            raise NetIRError(f"mul {self.name!r}: widths {len(ins[0])} and {len(ins[1])} differ")
        if self.out is not None and len(self.out) != len(ins[0]):
            raise NetIRError(f"mul {self.name!r}: output labels do not match the width")
        return ins[0] if self.out is None else self.out
