"""Big random circuits in every circuit format, shared by bench/bench_parse.py and
tests/core/syntax/test_parse_scale.py.

:func:`random_layered_circuit` draws a strictly layered circuit: layer 1 reads the
inputs, layer ``k + 1`` reads only layer ``k``, and the outputs are the last layer.  Gates
are AND, OR, XOR, NAND (fan-in 1 to 3, distinct inputs) and NOT, drawn uniformly.  The
draw is vectorised per layer, so 10^6 gates take seconds, not minutes.

:func:`circuit_text` writes a circuit in any of :data:`FORMATS`: ``circ`` and ``bench``
through tm2nn's own writers (what ``tm2nn convert`` writes); BLIF and AIGER, which tm2nn
reads but does not write, here:

* BLIF: one ``.names`` cover per gate (AND: one on-set row; NAND: the same row as an
  off-set; OR: one row per input; XOR/XNOR: one row per odd/even minterm; NOT, BUF,
  constants);
* AIGER (``aag`` ASCII and ``aig`` binary): the gates as 2-input ANDs with negated
  literals (OR by De Morgan, XOR as ``¬(¬(a ∧ ¬b) ∧ ¬(¬a ∧ b))``), the ANDs numbered in
  topological order (so the binary form's ``lhs > rhs0 >= rhs1`` holds), and a symbol
  table naming the inputs and outputs as the circuit does.

Every format describes the same function; the AIGER and BLIF readers build more gates
than the circuit has (the ANDs of the lowering, and NOTs for negated literals).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tm2nn.ir import Circuit, Gate

FORMATS = ("circ", "bench", "blif", "aag", "aig")
#: the gate types drawn, uniformly; NOT has fan-in 1, the others 1 to MAX_FANIN
OPS = ("AND", "OR", "XOR", "NAND", "NOT")
MAX_FANIN = 3


def random_layered_circuit(n_gates: int, n_inputs: int = 64, width: int | None = None,
                           seed: int = 0, name: str = "random") -> Circuit:
    """A random strictly layered circuit of ``n_gates`` gates (named ``g0`` ...) over
    ``n_inputs`` inputs (``x0`` ...): layers of ``width`` gates (default ``√n_gates``,
    so as many layers as gates per layer), the last layer possibly shorter and the outputs."""
    if n_gates < 1 or n_inputs < 1:
        raise ValueError("a random circuit needs at least one gate and one input")
    width = width or max(1, round(n_gates ** 0.5))
    rng = np.random.default_rng(seed)
    inputs = tuple(f"x{i}" for i in range(n_inputs))
    prev: tuple[str, ...] = inputs
    gates: list[Gate] = []
    while len(gates) < n_gates:
        w = min(width, n_gates - len(gates))
        ops, picks = _draw_layer(rng, w, len(prev))
        layer = [Gate(f"g{len(gates) + j}", OPS[ops[j]], tuple(prev[i] for i in picks[j]))
                 for j in range(w)]
        gates += layer
        prev = tuple(g.name for g in layer)
    return Circuit(name, inputs, prev, tuple(gates))


def nand_chain(n_gates: int, name: str = "chain") -> Circuit:
    """A chain of ``n_gates`` NANDs, each reading the previous one and a new input:
    ``g0 = NAND(x0, x1)``, ``gk = NAND(g(k-1), x(k+1))``; the output is the last gate.
    Depth n, width 1, yet layering keeps input k live for k layers, so the layered net
    has about n²/2 units: the worst case for an estimate from the gate count alone."""
    if n_gates < 1:
        raise ValueError("a chain needs at least one gate")
    inputs = tuple(f"x{i}" for i in range(n_gates + 1))
    gates = [Gate("g0", "NAND", ("x0", "x1"))]
    gates += [Gate(f"g{k}", "NAND", (f"g{k - 1}", f"x{k + 1}")) for k in range(1, n_gates)]
    return Circuit(name, inputs, (f"g{n_gates - 1}",), tuple(gates))


def gate_wall(n_layers: int, width: int, n_inputs: int = 64, seed: int = 0, name: str = "wall") -> Circuit:
    """``n_layers`` layers of ``width`` two-input gates (OR and AND in turn, named
    ``l<layer>_<j>``), each reading two signals of the layer before, every one of them at
    least once: strictly layered already and every gate live, so the layered circuit has
    no carried copies (the relu-circuit net costs most per unit); the outputs are the last
    layer."""
    rng = np.random.default_rng(seed)
    inputs = tuple(f"x{i}" for i in range(n_inputs))
    prev: tuple[str, ...] = inputs
    gates: list[Gate] = []
    for layer in range(n_layers):
        first = rng.permutation(width) % len(prev)
        cur = []
        for j in range(width):
            g = Gate(f"l{layer}_{j}", "AND" if j % 2 else "OR", (prev[first[j]], prev[rng.integers(len(prev))]))
            gates.append(g)
            cur.append(g.name)
        prev = tuple(cur)
    return Circuit(name, inputs, prev, tuple(gates))


def _draw_layer(rng: np.random.Generator, w: int, n_prev: int) -> tuple[np.ndarray, list[list[int]]]:
    """Gate types and input indices (distinct within a gate, into the previous layer of
    ``n_prev`` signals) of one layer of ``w`` gates."""
    ops = rng.integers(0, len(OPS), size=w)
    fanin = np.minimum(rng.integers(1, MAX_FANIN + 1, size=w), n_prev)
    fanin[ops == OPS.index("NOT")] = 1
    # Three distinct indices: i0 anywhere, i1 among the other n-1, i2 among the other n-2.
    i0 = rng.integers(0, n_prev, size=w)
    i1 = (i0 + 1 + rng.integers(0, max(n_prev - 1, 1), size=w)) % n_prev
    lo, hi = np.minimum(i0, i1), np.maximum(i0, i1)
    i2 = rng.integers(0, max(n_prev - 2, 1), size=w)
    i2 = i2 + (i2 >= lo)
    i2 = i2 + (i2 >= hi)
    idx = np.stack([i0, i1, i2], axis=1).tolist()
    return ops, [row[:k] for row, k in zip(idx, fanin.tolist())]


# -- writing --------------------------------------------------------------------------------
def circuit_text(c: Circuit, fmt: str) -> bytes:
    """``c`` in format ``fmt`` (one of :data:`FORMATS`), as the bytes of a file."""
    if fmt in ("circ", "bench"):
        from tm2nn.syntax import dump

        return dump(c, fmt).encode("utf-8")
    if fmt == "blif":
        return blif_text(c).encode("utf-8")
    if fmt == "aag":
        return aag_text(c).encode("utf-8")
    if fmt == "aig":
        return aig_bytes(c)
    raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")


def write_circuit(c: Circuit, folder: Path, fmt: str, stem: str | None = None) -> Path:
    """Write ``c`` to ``folder/<stem>.<fmt>`` (stem: the circuit's name) and return the path."""
    path = Path(folder) / f"{stem or c.name}.{fmt}"
    path.write_bytes(circuit_text(c, fmt))
    return path


def write_all(c: Circuit, folder: Path, formats=FORMATS, stem: str | None = None) -> dict[str, Path]:
    """``c`` written in each of ``formats``: ``{format: path}``."""
    return {fmt: write_circuit(c, folder, fmt, stem) for fmt in formats}


def _cover(op: str, k: int) -> list[str]:
    """The BLIF cover rows of gate ``op`` with ``k`` inputs."""
    if op == "AND":
        return ["1" * k + " 1"]
    if op == "NAND":
        return ["1" * k + " 0"]
    if op == "OR":
        return ["-" * i + "1" + "-" * (k - i - 1) + " 1" for i in range(k)]
    if op == "NOR":
        return ["0" * k + " 1"]
    if op in ("XOR", "XNOR"):
        odd = op == "XOR"
        rows = (format(m, f"0{k}b") for m in range(2 ** k))
        return [r + " 1" for r in rows if (r.count("1") % 2 == 1) == odd]
    if op == "NOT":
        return ["0 1"]
    if op == "BUF":
        return ["1 1"]
    if op == "CONST1":
        return ["1"]
    if op == "CONST0":
        return []
    raise ValueError(f"no BLIF cover for gate type {op!r}")


def blif_text(c: Circuit) -> str:
    """``c`` as a combinational BLIF model: one ``.names`` cover per gate."""
    out = [f".model {c.name}", ".inputs " + " ".join(c.inputs), ".outputs " + " ".join(c.outputs)]
    for g in c.topo:
        out.append(" ".join((".names", *g.inputs, g.name)))
        out += _cover(g.op, len(g.inputs))
    out.append(".end")
    return "\n".join(out) + "\n"


class _Aig:
    """An and-inverter graph built gate by gate: literals ``2v`` / ``2v + 1``, inputs
    first (variables 1..I), then each AND as the next variable."""

    def __init__(self, n_inputs: int):
        self.n_inputs = n_inputs
        self.ands: list[tuple[int, int, int]] = []  # (lhs, rhs0, rhs1), rhs0 >= rhs1

    def and2(self, a: int, b: int) -> int:
        lhs = 2 * (self.n_inputs + len(self.ands) + 1)
        self.ands.append((lhs, max(a, b), min(a, b)))
        return lhs

    def and_all(self, lits: list[int]) -> int:
        acc = lits[0]
        for x in lits[1:]:
            acc = self.and2(acc, x)
        return acc

    def xor2(self, a: int, b: int) -> int:
        return self.and2(self.and2(a, b ^ 1) ^ 1, self.and2(a ^ 1, b) ^ 1) ^ 1

    def gate(self, op: str, ins: list[int]) -> int:
        """The literal of gate ``op`` over the literals ``ins``."""
        if op in ("AND", "NAND"):
            return self.and_all(ins) ^ (op == "NAND")
        if op in ("OR", "NOR"):
            return self.and_all([x ^ 1 for x in ins]) ^ (op == "OR")
        if op in ("XOR", "XNOR"):
            acc = ins[0]
            for x in ins[1:]:
                acc = self.xor2(acc, x)
            return acc ^ (op == "XNOR")
        if op in ("NOT", "BUF"):
            return ins[0] ^ (op == "NOT")
        return 1 if op == "CONST1" else 0


def _to_aig(c: Circuit) -> tuple[_Aig, list[int]]:
    """The AIG of ``c`` and the literal of each output."""
    aig = _Aig(len(c.inputs))
    lit = {x: 2 * (i + 1) for i, x in enumerate(c.inputs)}
    for g in c.topo:
        lit[g.name] = aig.gate(g.op, [lit[i] for i in g.inputs])
    return aig, [lit[o] for o in c.outputs]


def _symbols(c: Circuit) -> list[str]:
    return ([f"i{k} {x}" for k, x in enumerate(c.inputs)]
            + [f"o{k} {y}" for k, y in enumerate(c.outputs)] + ["c", f"{c.name} (written by gen_circuits.py)"])


def aag_text(c: Circuit) -> str:
    """``c`` as ASCII AIGER (``aag M I 0 O A``) with a symbol table."""
    aig, outs = _to_aig(c)
    n_in, n_and = len(c.inputs), len(aig.ands)
    lines = [f"aag {n_in + n_and} {n_in} 0 {len(outs)} {n_and}"]
    lines += [str(2 * (i + 1)) for i in range(n_in)]
    lines += [str(o) for o in outs]
    lines += [f"{lhs} {r0} {r1}" for lhs, r0, r1 in aig.ands]
    return "\n".join(lines + _symbols(c)) + "\n"


def varint(x: int) -> bytes:
    """AIGER's binary unsigned integer: 7 bits a byte, the high bit set on all but the last."""
    out = bytearray()
    while x >= 0x80:
        out.append(x & 0x7F | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def aig_bytes(c: Circuit) -> bytes:
    """``c`` as binary AIGER (``aig M I 0 O A``: output lines, delta-coded ANDs) with a
    symbol table."""
    aig, outs = _to_aig(c)
    n_in, n_and = len(c.inputs), len(aig.ands)
    head = [f"aig {n_in + n_and} {n_in} 0 {len(outs)} {n_and}"] + [str(o) for o in outs]
    body = b"".join(varint(lhs - r0) + varint(r0 - r1) for lhs, r0, r1 in aig.ands)
    return ("\n".join(head) + "\n").encode() + body + ("\n".join(_symbols(c)) + "\n").encode()
