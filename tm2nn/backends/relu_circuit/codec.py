"""relu-circuit's run-time codec for machines unrolled into circuits (the ``unrolled_tm``
encoding): how a run maps onto the circuit's inputs and outputs.

:class:`UnrollLayout` (JSON-able: a saved model carries only :meth:`UnrollLayout.to_json`)
encodes an input string as the one-hot initial tape window, decodes the outputs into the
run report, and describes the decoding for a model's manifest.  The circuit itself is
built by :func:`.unroll.unroll` (its module doc gives the layout: inputs ``t0[i]:a``;
outputs ``tape[i]:a``, ``head[i]``, ``state:q``, ``halted``, ``steps[b]``, ``overflow``).
:func:`encode_tapes` and :func:`decode_outputs` run it on a model's encodings, many inputs
at a time.  :data:`CODEC` is the backend's codec: this one for machines, the shared ``bits``
codec (:data:`tm2nn.backends.protocol.BITS`) for circuits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.backends.protocol import BITS, Codec
from tm2nn.errors import Tm2nnError
from tm2nn.options import OptionError
from tm2nn.report import Report

#: the encoding's kind, as models record it (``input_encoding`` / ``output_encoding``)
KIND = "unrolled_tm"


@dataclass(frozen=True)
class UnrollLayout:
    """Everything needed to encode an input string and decode the circuit's outputs.

    A saved model carries only :meth:`to_json`; :meth:`from_json` rebuilds the layout.
    """

    name: str
    alphabet: tuple[str, ...]
    blank: str
    states: tuple[str, ...]
    halting: dict[str, str]
    tape: int  # N, the window's width
    origin: int  # the start cell's window index
    steps: int  # T
    counts_missing: bool  # morphett convention: the step finding no rule counts
    _sym: dict = field(default=None, init=False, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "alphabet", tuple(self.alphabet))
        object.__setattr__(self, "states", tuple(self.states))
        object.__setattr__(self, "halting", dict(self.halting))
        object.__setattr__(self, "_sym", {a: k for k, a in enumerate(self.alphabet)})

    # -- sizes and names --------------------------------------------------------------------
    @property
    def n_bits(self) -> int:
        """Width of the step counter: ⌈log2(T+1)⌉."""
        return self.steps.bit_length()

    @property
    def n_inputs(self) -> int:
        return self.tape * len(self.alphabet)

    @property
    def n_outputs(self) -> int:
        return self.tape * (len(self.alphabet) + 1) + len(self.states) + 2 + self.n_bits

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f"t0[{i}]:{a}" for i in range(self.tape) for a in self.alphabet)

    @property
    def output_names(self) -> tuple[str, ...]:
        N = self.tape
        return (
            tuple(f"tape[{i}]:{a}" for i in range(N) for a in self.alphabet)
            + tuple(f"head[{i}]" for i in range(N))
            + tuple(f"state:{q}" for q in self.states)
            + ("halted",)
            + tuple(f"steps[{b}]" for b in range(self.n_bits))
            + ("overflow",)
        )

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "kind": "tm2nn.unroll",
            "version": 1,
            "name": self.name,
            "alphabet": list(self.alphabet),
            "blank": self.blank,
            "states": list(self.states),
            "halting": dict(self.halting),
            "tape": self.tape,
            "origin": self.origin,
            "steps": self.steps,
            "counts_missing": self.counts_missing,
            "convention": "morphett" if self.counts_missing else "bbchallenge",
        }

    @classmethod
    def from_json(cls, d: dict) -> "UnrollLayout":
        try:
            return cls(
                name=str(d["name"]),
                alphabet=tuple(d["alphabet"]),
                blank=d["blank"],
                states=tuple(d["states"]),
                halting=dict(d["halting"]),
                tape=int(d["tape"]),
                origin=int(d["origin"]),
                steps=int(d["steps"]),
                counts_missing=bool(d["counts_missing"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise Tm2nnError(f"bad unroll layout metadata: {e!r}") from None

    # -- encode / decode --------------------------------------------------------------------
    def encode(self, input: str) -> np.ndarray:
        """The circuit's input vector (bool, ``N·K``) for ``input`` written from the start cell."""
        for i, ch in enumerate(input):
            if ch not in self._sym:
                raise Tm2nnError(
                    f"input: symbol {ch!r} is not in the alphabet of {self.name!r} "
                    f"({' '.join(repr(a) for a in self.alphabet)})",
                    file="input", line=1, col=i + 1, snippet=input,
                )
        room = self.tape - self.origin
        if len(input) > room:
            raise OptionError(
                f"input: {len(input)} symbols do not fit in the tape window: only {room} cells "
                f"lie right of the start cell (window of {self.tape} cells, start cell {self.origin}); "
                "raise {tape} or lower {origin}", "tape", "origin",
                file="input", line=1, col=room + 1, snippet=input,
            )
        K = len(self.alphabet)
        cells = np.full(self.tape, self._sym[self.blank], dtype=np.int64)
        if input:
            cells[self.origin : self.origin + len(input)] = [self._sym[c] for c in input]
        x = np.zeros((self.tape, K), dtype=bool)
        x[np.arange(self.tape), cells] = True
        return x.reshape(-1)

    def decode(self, outputs: np.ndarray) -> dict:
        """The run report (``RunResult.report()``'s dict) from one output vector.

        ``outputs`` is bool (or 0/1) of length :attr:`n_outputs` (a ``(1, n)`` batch is
        accepted).  If the head left the window, the dict has an extra
        ``"overflow": True``, ``halted`` False, ``outcome`` and ``head`` None; its tape,
        state and steps describe the window when the head left and are *not* the
        interpreter's result.  A vector that is not one-hot where it must be raises
        :class:`Tm2nnError`.
        """
        y = np.asarray(outputs)
        if y.ndim == 2 and y.shape[0] == 1:
            y = y[0]
        if y.ndim != 1 or y.shape[0] != self.n_outputs:
            raise Tm2nnError(f"decode: expected {self.n_outputs} outputs, got shape {np.shape(outputs)}")
        y = y > 0.5 if y.dtype.kind == "f" else y.astype(bool)
        N, K, Q = self.tape, len(self.alphabet), len(self.states)
        tape = y[: N * K].reshape(N, K)
        p = N * K
        head = y[p : p + N]
        p += N
        state = y[p : p + Q]
        p += Q
        halted = bool(y[p])
        bits = y[p + 1 : p + 1 + self.n_bits]
        overflow = bool(y[p + 1 + self.n_bits])

        bad = np.nonzero(tape.sum(axis=1) != 1)[0]
        if len(bad):
            raise Tm2nnError(f"decode: tape cell {int(bad[0])} is not one-hot")
        if state.sum() != 1:
            raise Tm2nnError(f"decode: the state outputs are not one-hot ({int(state.sum())} set)")
        hs = np.nonzero(head)[0]
        if len(hs) != (0 if overflow else 1):
            raise Tm2nnError(f"decode: {len(hs)} head outputs set (overflow={overflow})")

        sym = tape.argmax(axis=1)
        blank = self._sym[self.blank]
        nz = np.nonzero(sym != blank)[0]
        text = ""
        if len(nz):
            text = "".join(self.alphabet[k] for k in sym[nz[0] : nz[-1] + 1])
        q = self.states[int(state.argmax())]
        steps = int(sum(1 << b for b, v in enumerate(bits) if v))
        if overflow:
            halted = False
        report = {
            "halted": halted,
            "steps": steps,
            "state": q,
            "outcome": self.halting.get(q, "halt") if halted else None,
            "tape": text,
            "head": None if overflow else int(hs[0]) - self.origin,
            "sigma": int(len(nz)),
        }
        if overflow:
            report["overflow"] = True
        return report

    def description(self, value: str, labels) -> dict:
        """How :meth:`decode` reads each report field, for a model's manifest
        (the codec's ``describe``): ``labels`` are the dimension
        labels of the net output ``value``, in :attr:`output_names` order."""
        labels = list(labels)
        N, K, Q = self.tape, len(self.alphabet), len(self.states)
        tape, head = labels[: N * K], labels[N * K: N * K + N]
        state = labels[N * K + N: N * K + N + Q]
        halted = labels[N * K + N + Q]
        bits = labels[N * K + N + Q + 1: N * K + N + Q + 1 + self.n_bits]
        overflow = labels[N * K + N + Q + 1 + self.n_bits]
        on = "a dimension is on when it exceeds 1/2"
        f = {"state": (state, f"the one state dimension on ({on}; exactly one must be)"),
             "halted": ([halted, overflow], "on when the machine halted within the step bound and the head did not "
                                            "leave the window (overflow off)"),
             "outcome": ([halted, *state], "the halting state's outcome (source tables) when halted, else null"),
             "steps": (bits, f"the {self.n_bits} bits, least significant first: min(T, the interpreter's steps)"),
             "head": (head, f"the index of the one head dimension on, minus the start cell {self.origin} "
                            f"(all off when the head left the window)"),
             "tape": (tape, f"cell i holds the symbol whose dimension of tape[i] is on (one-hot over the alphabet); "
                            f"the span from the leftmost to the rightmost non-blank ({self.blank!r}) cell"),
             "sigma": (tape, f"the number of cells whose symbol is not the blank {self.blank!r}")}
        return {"fields": {k: {"value": value, "labels": ls, "rule": r} for k, (ls, r) in f.items()},
                "notes": f"the machine unrolled into a circuit for T = {self.steps} steps on a window of {N} cells "
                         f"(tm2nn/backends/relu_circuit/unroll.py); 'overflow' ({overflow}) is on when the head would have left "
                         "the window, and the report is then not the interpreter's"}


def encoding(layout: UnrollLayout, threshold: float | None = None) -> dict:
    """A model's input encoding (``threshold`` None) or output encoding for ``layout``."""
    enc = {"kind": KIND, "layout": layout.to_json()}
    return enc if threshold is None else {**enc, "threshold": threshold}


def encode_tapes(enc: dict, texts: list[str]) -> np.ndarray:
    """Input strings -> the model's input, float32 ``[len(texts), N·K]`` (one-hot cells)."""
    if not texts:
        return np.zeros((0, 0), np.float32)
    layout = UnrollLayout.from_json(enc["layout"])  # parsed once, not per input
    return np.stack([layout.encode(t).astype(np.float32) for t in texts])


def decode_outputs(enc: dict, y: np.ndarray) -> list[dict]:
    """The model's outputs ``[batch, n_outputs]`` -> one run report each (a dimension is on
    above the encoding's ``threshold``)."""
    layout = UnrollLayout.from_json(enc["layout"])
    bits = np.asarray(y) > float(enc.get("threshold", 0.5))
    return [layout.decode(row) for row in bits]


# -- the backend's codec: unrolled machines here, circuits through the shared bits codec ------
def encode(compiled, texts: list[str]) -> np.ndarray:
    """The model's input for ``texts``: one-hot tape windows, or a circuit's bits."""
    if compiled.input_encoding.get("kind") == KIND:
        return encode_tapes(compiled.input_encoding, texts)
    return BITS.encode(compiled, texts)


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """Encode ``texts``, run ``engine``, decode one report each: the run report after T
    steps for a machine, ``{"outputs": ...}`` for a circuit."""
    if compiled.output_encoding.get("kind") != KIND:
        return BITS.run(compiled, texts, engine, progress)
    y = compiled.runner(engine)(encode(compiled, texts))
    return [Report(r) for r in decode_outputs(compiled.output_encoding, y)]


def describe(compiled) -> dict:
    """How each report field is read from the net (:meth:`UnrollLayout.description` for a
    machine, the ``bits`` rule for a circuit)."""
    if compiled.output_encoding.get("kind") == KIND:
        y = compiled.net.outputs[0]
        layout = UnrollLayout.from_json(compiled.output_encoding["layout"])
        return layout.description(y, compiled.net.spaces[y].labels)
    return BITS.describe(compiled)


CODEC = Codec(encode=encode, run=run, describe=describe)
