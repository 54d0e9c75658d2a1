"""The token contract of the decoder-only form (issue 37; docs/transformer_lens.md).

Vocabulary: ``<bos>``, ``<go>``, ``<halt>``, one token per tape symbol (its name), and one
token ``STATE|WRITE|MOVE`` per transition outcome of the machine's rules (MOVE in ``L``,
``R``, ``S``).  The prompt for an input tape ``x`` is ``<bos>``, the symbols of ``x``,
blanks up to ``max_input``, then ``<go>``.  Greedy decoding emits one outcome token per
machine step (the state entered, the symbol written, the move); after the halting step it
emits ``<halt>``, and keeps emitting it.

A machine halts when it enters a halting state, or when it finds no rule for its
(state, symbol) pair (tm2nn's convention, ARCHITECTURE.md "IR conventions"): both emit
``<halt>`` at the next position.  A machine that counts the no-rule step
(``missing_rule_counts_step``, morphett) still emits ``<halt>`` there: the counted step
changes nothing, and :func:`replay` counts it from the contract.

Everything here is plain Python: :func:`replay` rebuilds the run from the tokens alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.ir.machine import Machine

BOS, GO, HALT = "<bos>", "<go>", "<halt>"
SPECIAL = (BOS, GO, HALT)
MOVES = {"L": -1, "S": 0, "R": 1}


def outcome_token(state: str, write: str, move: str) -> str:
    """``STATE|WRITE|MOVE`` (the state entered, the symbol written, the move)."""
    return f"{state}|{write}|{move}"


def parse_outcome(tok: str) -> tuple[str, str, str]:
    """``(state, write, move)`` of an outcome token: the last two fields are one character
    each, so a state name (or a symbol) may itself be ``|``."""
    if len(tok) < 5 or tok[-2] != "|" or tok[-4] != "|" or tok[-1] not in MOVES:
        raise Tm2nnError(f"token {tok!r} is not an outcome STATE|WRITE|MOVE")
    return tok[:-4], tok[-3], tok[-1]


def outcome_table(m: Machine) -> dict[tuple[str, str], str]:
    """``(state, symbol) -> the token emitted next``: the rule's outcome token, or
    ``<halt>`` for a halting state or a pair with no rule."""
    out = {}
    for z in m.states:
        for a in m.alphabet:
            r = m.delta.get((z, a))
            out[(z, a)] = HALT if (z in m.halting or r is None) else outcome_token(r.next, r.write, r.move)
    return out


def vocabulary(m: Machine) -> list[str]:
    """The token names in id order: specials, symbols (alphabet order), outcomes (rule order)."""
    outs: list[str] = []
    for r in m.rules:
        t = outcome_token(r.next, r.write, r.move)
        if t not in outs:
            outs.append(t)
    return [*SPECIAL, *m.alphabet, *outs]


@dataclass(frozen=True)
class Contract:
    """What a driver needs to write prompts and replay outputs (``meta["tokens"]``)."""

    vocab: tuple[str, ...]
    blank: str
    start: str
    max_input: int
    halting: tuple[str, ...]
    missing_rule_counts_step: bool = False

    @classmethod
    def of(cls, m: Machine, max_input: int) -> "Contract":
        return cls(tuple(vocabulary(m)), m.blank, m.start, int(max_input), tuple(m.halting),
                   bool(m.missing_rule_counts_step))

    def to_json(self) -> dict:
        return {"vocab": list(self.vocab), "blank": self.blank, "start": self.start, "max_input": self.max_input,
                "halting": list(self.halting), "missing_rule_counts_step": self.missing_rule_counts_step,
                "bos": BOS, "go": GO, "halt": HALT}

    @classmethod
    def from_json(cls, d: dict) -> "Contract":
        return cls(tuple(d["vocab"]), d["blank"], d["start"], int(d["max_input"]), tuple(d["halting"]),
                   bool(d.get("missing_rule_counts_step", False)))

    def prompt(self, x: str) -> list[str]:
        """``<bos>``, the symbols of ``x``, blanks up to ``max_input``, ``<go>``."""
        if len(x) > self.max_input:
            raise Tm2nnError(f"input {x!r} has {len(x)} symbols, more than max_input = {self.max_input}")
        for ch in x:
            if ch not in self.vocab[len(SPECIAL):] or ch in SPECIAL:
                raise Tm2nnError(f"input {x!r}: {ch!r} is not a tape symbol of the machine")
        return [BOS, *x, *([self.blank] * (self.max_input - len(x))), GO]

    def ids(self, tokens: list[str]) -> list[int]:
        index = {t: i for i, t in enumerate(self.vocab)}
        try:
            return [index[t] for t in tokens]
        except KeyError as e:
            raise Tm2nnError(f"token {e.args[0]!r} is not in the vocabulary") from None

    def names(self, ids) -> list[str]:
        return [self.vocab[int(i)] for i in ids]


@dataclass
class Replay:
    """A run rebuilt from tokens: ``states[k]``, ``heads[k]``, ``writes[k]`` (cell, symbol)
    after step k+1; the final ``tape`` (non-blank cells), ``halted``, ``steps`` (counted as
    the interpreter counts them)."""

    states: list[str]
    heads: list[int]
    writes: list[tuple[int, str]]
    tape: dict[int, str]
    state: str
    head: int
    halted: bool
    steps: int


def replay(tokens: list[str], contract: Contract) -> Replay:
    """The run the tokens describe (prompt included), in plain Python: the input tape from
    the prompt, then each outcome token writes its symbol at the head, moves it and enters
    its state; ``<halt>`` ends the run (tokens after it must be ``<halt>``)."""
    n = contract.max_input
    if len(tokens) < n + 2 or tokens[0] != BOS or tokens[n + 1] != GO:
        raise Tm2nnError(f"not a prompt: expected {BOS}, {n} symbols, {GO}")
    tape = {k: a for k, a in enumerate(tokens[1:n + 1]) if a != contract.blank}
    head, state = 0, contract.start
    out = Replay([], [], [], tape, state, head, False, 0)
    for k, tok in enumerate(tokens[n + 2:]):
        if tok == HALT:
            if any(t != HALT for t in tokens[n + 2 + k:]):
                raise Tm2nnError("a step token after <halt>")
            out.halted = True
            break
        z, u, mv = parse_outcome(tok)
        out.writes.append((head, u))
        if u == contract.blank:
            tape.pop(head, None)
        else:
            tape[head] = u
        head += MOVES[mv]
        state = z
        out.states.append(z)
        out.heads.append(head)
    out.state, out.head, out.steps = state, head, len(out.states)
    if out.halted and contract.missing_rule_counts_step and state not in contract.halting:
        out.steps += 1  # the counted step that found no rule (morphett)
    return out


def expected_tokens(m: Machine, contract: Contract, x: str, steps: int, length: int | None = None) -> tuple[list[str], bool]:
    """The interpreter's run of ``m`` on ``x`` for up to ``steps`` steps as the token
    sequence the contract prescribes (prompt, one outcome per step, ``<halt>`` after the
    halting step, repeated up to ``length`` tokens), and whether it halted."""
    res = run_machine(m, x, max_steps=steps, trace=True)
    toks = contract.prompt(x)
    n = len(res.trace)
    if res.halted and m.missing_rule_counts_step and res.state not in m.halting:
        n -= 1  # the counted no-rule step is not a token: <halt> stands for it
    for k in range(n):
        mv = res.trace.head[k] - res.trace.pos[k]
        toks.append(outcome_token(m.states[res.trace.state[k]], m.alphabet[res.trace.write[k]],
                                  {-1: "L", 0: "S", 1: "R"}[mv]))
    if res.halted:
        toks += [HALT] * max(1, (length or 0) - len(toks))
    return toks, bool(res.halted)

