"""Bit-parallel circuit evaluator (numpy, 64 inputs per machine word), plus a
gate-by-gate reference evaluator that the property tests compare it with.

The evaluator compiles a circuit once into a plan: signals numbered, gates
grouped by (level, op, fan-in).  Evaluation is then one vectorised numpy reduce
per group over all words, never a Python loop over gates or inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.ir.circuit import Circuit

ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class _Group:
    op: str
    out: np.ndarray  # (G,) signal indices written
    ins: np.ndarray  # (G, fanin) signal indices read


@dataclass(frozen=True)
class Plan:
    n_signals: int
    n_inputs: int
    outputs: np.ndarray
    groups: tuple[_Group, ...]


def plan(c: Circuit) -> Plan:
    """Number the signals and group gates by (level, op, fan-in); cached on the circuit."""
    cached = c.__dict__.get("_eval_plan")
    if cached is None:
        cached = _make_plan(c)
        object.__setattr__(c, "_eval_plan", cached)
    return cached


def _make_plan(c: Circuit) -> Plan:
    index = {x: i for i, x in enumerate(c.inputs)}
    level = {x: 0 for x in c.inputs}
    for g in c.topo:
        index[g.name] = len(index)
        level[g.name] = 1 + max((level[i] for i in g.inputs), default=0)
    buckets: dict[tuple[int, str, int], list] = {}
    for g in c.topo:
        buckets.setdefault((level[g.name], g.op, len(g.inputs)), []).append(g)
    groups = []
    for (_level, op, fan), gs in sorted(buckets.items()):
        out = np.array([index[g.name] for g in gs], dtype=np.int64)
        ins = np.array([[index[i] for i in g.inputs] for g in gs], dtype=np.int64).reshape(len(gs), fan)
        groups.append(_Group(op, out, ins))
    outputs = np.array([index[o] for o in c.outputs], dtype=np.int64)
    return Plan(len(index), len(c.inputs), outputs, tuple(groups))


def eval_words(c: Circuit, words: np.ndarray) -> np.ndarray:
    """Evaluate on packed inputs ``words`` (uint64, shape (n_inputs, n_words));
    returns packed outputs (uint64, shape (n_outputs, n_words))."""
    p = plan(c)
    words = np.asarray(words, dtype=np.uint64)
    if words.ndim != 2 or words.shape[0] != p.n_inputs:
        raise ValueError(f"expected packed inputs of shape ({p.n_inputs}, n_words), got {words.shape}")
    vals = np.empty((p.n_signals, words.shape[1]), dtype=np.uint64)
    vals[: p.n_inputs] = words
    for grp in p.groups:
        op = grp.op
        if op == "CONST0":
            vals[grp.out] = 0
            continue
        if op == "CONST1":
            vals[grp.out] = ALL_ONES
            continue
        x = vals[grp.ins]  # (G, fanin, n_words)
        if op in ("AND", "NAND"):
            r = np.bitwise_and.reduce(x, axis=1)
        elif op in ("OR", "NOR"):
            r = np.bitwise_or.reduce(x, axis=1)
        elif op in ("XOR", "XNOR"):
            r = np.bitwise_xor.reduce(x, axis=1)
        else:  # NOT, BUF
            r = x[:, 0]
        if op in ("NAND", "NOR", "XNOR", "NOT"):
            r = ~r
        vals[grp.out] = r
    return vals[p.outputs]


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """(n, k) bools -> (k, ceil(n/64)) uint64 words; sample j is bit j%64 of word j//64."""
    bits = np.asarray(bits, dtype=bool)
    n, k = bits.shape
    n_words = max(1, -(-n // 64))
    padded = np.zeros((n_words * 64, k), dtype=bool)
    padded[:n] = bits
    packed = np.packbits(padded.T, axis=1, bitorder="little")  # (k, n_words*8) bytes
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64, copy=False)


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: (k, n_words) uint64 -> (n, k) bools."""
    w = np.ascontiguousarray(words, dtype="<u8")
    if w.shape[0] == 0:
        return np.zeros((n, 0), dtype=bool)
    by = w.view(np.uint8).reshape(w.shape[0], -1)
    bits = np.unpackbits(by, axis=1, bitorder="little")[:, :n]
    return bits.T.astype(bool)


def eval_circuit(c: Circuit, bits: np.ndarray) -> np.ndarray:
    """Evaluate on a batch: ``bits`` bool (n, n_inputs) -> bool (n, n_outputs)."""
    bits = np.asarray(bits)
    if bits.ndim != 2 or bits.shape[1] != len(c.inputs):
        raise ValueError(f"expected inputs of shape (n, {len(c.inputs)}), got {bits.shape}")
    return unpack_bits(eval_words(c, pack_bits(bits.astype(bool))), bits.shape[0])


MAX_EXHAUSTIVE_INPUTS = 24


def exhaustive_words(n_inputs: int) -> np.ndarray:
    """All 2^n input patterns, packed: pattern j sets input i to bit i of j."""
    if n_inputs > MAX_EXHAUSTIVE_INPUTS:
        raise Tm2nnError(f"exhaustive evaluation of {n_inputs} inputs (2^{n_inputs} patterns) is too large")
    total = 1 << n_inputs
    n_words = max(1, total // 64)
    j = np.arange(n_words * 64, dtype=np.uint64)
    out = np.empty((n_inputs, n_words), dtype=np.uint64)
    for i in range(n_inputs):
        bits = ((j >> np.uint64(i)) & np.uint64(1)).astype(bool)
        if total < 64:
            bits &= j < total
        out[i] = np.packbits(bits.reshape(n_words, 64), axis=1, bitorder="little").view("<u8")[:, 0]
    return out


def exhaustive_inputs(n_inputs: int) -> np.ndarray:
    """All 2^n input patterns as a bool array (2^n, n); row j is the binary of j, input 0 = bit 0."""
    if n_inputs > MAX_EXHAUSTIVE_INPUTS:
        raise Tm2nnError(f"exhaustive evaluation of {n_inputs} inputs is too large")
    j = np.arange(1 << n_inputs, dtype=np.int64)[:, None]
    return ((j >> np.arange(n_inputs)) & 1).astype(bool)


def random_inputs(n_inputs: int, n: int, seed: int) -> np.ndarray:
    """``n`` uniformly random input patterns, reproducible from ``seed``."""
    return np.random.default_rng(seed).integers(0, 2, size=(n, n_inputs), dtype=np.int8).astype(bool)


def truth_table(c: Circuit) -> np.ndarray:
    """Outputs for every input pattern, rows in :func:`exhaustive_inputs` order."""
    n = len(c.inputs)
    return unpack_bits(eval_words(c, exhaustive_words(n)), 1 << n)


_GATE_FN = {
    "AND": all,
    "OR": any,
    "XOR": lambda v: sum(v) % 2 == 1,
    "NAND": lambda v: not all(v),
    "NOR": lambda v: not any(v),
    "XNOR": lambda v: sum(v) % 2 == 0,
    "NOT": lambda v: not v[0],
    "BUF": lambda v: bool(v[0]),
    "CONST0": lambda v: False,
    "CONST1": lambda v: True,
}


def eval_gate_by_gate(c: Circuit, bits: Sequence[bool]) -> tuple[bool, ...]:
    """Slow, obviously-correct reference: one input pattern, one gate at a time."""
    if len(bits) != len(c.inputs):
        raise ValueError(f"expected {len(c.inputs)} input bits, got {len(bits)}")
    val = {x: bool(b) for x, b in zip(c.inputs, bits)}
    for g in c.topo:
        val[g.name] = bool(_GATE_FN[g.op]([val[i] for i in g.inputs]))
    return tuple(val[o] for o in c.outputs)
