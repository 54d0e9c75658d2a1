"""Hypothesis strategies for random machines and circuits, shared by the test files."""

from __future__ import annotations

from hypothesis import strategies as st

from tm2nn.ir import GRID_MOVES, LINE_MOVES, Circuit, Gate, GridMachine, Machine, Rule

SYMBOL_POOL = "01_abxyz#*' :{}()-"


@st.composite
def machines(draw, grid: bool | None = None, max_states: int = 4, max_symbols: int = 4,
             symbols: str = SYMBOL_POOL, conventions: bool = True):
    """A random deterministic machine; some (state, symbol) pairs have no rule."""
    if grid is None:
        grid = draw(st.booleans())
    k = draw(st.integers(1, max_symbols))
    alphabet = tuple(draw(st.lists(st.sampled_from(symbols), min_size=k, max_size=k, unique=True)))
    blank = draw(st.sampled_from(alphabet))
    n = draw(st.integers(1, max_states))
    live = [f"q{i}" for i in range(n)]
    n_halt = draw(st.integers(0, 2))
    halts = [f"h{i}" for i in range(n_halt)]
    outcomes = {h: draw(st.sampled_from(["accept", "reject", "halt"])) for h in halts}
    states = tuple(live + halts)
    moves = GRID_MOVES if grid else LINE_MOVES
    rules = []
    for q in live:
        for a in alphabet:
            if draw(st.integers(0, 9)) == 0:
                continue  # missing rule: halts
            rules.append(Rule(q, a, draw(st.sampled_from(alphabet)), draw(st.sampled_from(moves)),
                              draw(st.sampled_from(states))))
    cls = GridMachine if grid else Machine
    return cls(
        name=draw(st.sampled_from(["m", "machine_1", "rand"])),
        alphabet=alphabet, blank=blank, states=states, start=live[0], halting=outcomes,
        rules=tuple(rules),
        missing_rule_counts_step=draw(st.booleans()) if conventions else False,
    )


def tape_inputs(m: Machine, max_size: int = 8):
    return st.text(alphabet=st.sampled_from(m.alphabet), max_size=max_size)


@st.composite
def circuits(draw, max_inputs: int = 6, max_gates: int = 25, ops=None):
    """A random combinational DAG over AND OR NOT XOR NAND NOR XNOR BUF CONST0 CONST1."""
    ops = ops or ["AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF", "CONST0", "CONST1"]
    n_in = draw(st.integers(1, max_inputs))
    inputs = [f"x{i}" for i in range(n_in)]
    signals = list(inputs)
    gates = []
    for j in range(draw(st.integers(1, max_gates))):
        op = draw(st.sampled_from(ops))
        if op in ("CONST0", "CONST1"):
            ins = ()
        elif op in ("NOT", "BUF"):
            ins = (draw(st.sampled_from(signals)),)
        else:
            ins = tuple(draw(st.lists(st.sampled_from(signals), min_size=1, max_size=4)))
        g = Gate(f"g{j}", op, ins)
        gates.append(g)
        signals.append(g.name)
    outs = draw(st.lists(st.sampled_from(signals), min_size=1, max_size=5))
    order = draw(st.permutations(gates))  # any order: the IR sorts topologically
    return Circuit("rand", tuple(inputs), tuple(outs), tuple(order))


@st.composite
def row_machines(draw, max_states: int = 4):
    """A random grid machine in the form the B.1.2 normal-form pass takes: symbols '_'
    (blank) '-' '+', moves L R S (it keeps to row 0), and no rule writes the blank."""
    n = draw(st.integers(1, max_states))
    live = [f"q{i}" for i in range(n)]
    halts = [f"h{i}" for i in range(draw(st.integers(0, 2)))]
    outcomes = {h: draw(st.sampled_from(["accept", "reject", "halt"])) for h in halts}
    states = tuple(live + halts)
    rules = []
    for q in live:
        for a in "_-+":
            if draw(st.integers(0, 9)) == 0:
                continue
            rules.append(Rule(q, a, draw(st.sampled_from("-+")), draw(st.sampled_from(LINE_MOVES)),
                              draw(st.sampled_from(states))))
    return GridMachine(name="row", alphabet=("_", "-", "+"), blank="_", states=states,
                       start=live[0], halting=outcomes, rules=tuple(rules),
                       missing_rule_counts_step=draw(st.booleans()))


@st.composite
def sign_grid_machines(draw, min_states: int = 1, max_states: int = 4, no_op_first: bool = False):
    """A random grid machine over B.1.1's cell symbols '_' (blank) '-' '+', moves U D L R S,
    some (state, symbol) pairs without a rule: ``min_states…max_states`` live states and
    0–1 halting ones.  With ``no_op_first`` the start state is one more state ``st`` whose
    one step neither moves nor writes (Goel et al. B.1.2, "First step")."""
    n = draw(st.integers(min_states, max_states))
    live = [f"q{i}" for i in range(n)]
    halts = [f"h{i}" for i in range(draw(st.integers(0, 1)))]
    outcomes = {h: draw(st.sampled_from(["accept", "reject", "halt"])) for h in halts}
    states = tuple(live + halts)
    rules = []
    for q in live:
        for a in "_-+":
            if draw(st.integers(0, 9)) == 0:
                continue
            rules.append(Rule(q, a, draw(st.sampled_from("_-+")), draw(st.sampled_from(GRID_MOVES)),
                              draw(st.sampled_from(states))))
    start = live[0]
    if no_op_first:
        rules += [Rule("st", a, a, "S", live[0]) for a in "_-+"]
        states = ("st",) + states
        start = "st"
    return GridMachine(name="signs", alphabet=("_", "-", "+"), blank="_", states=states,
                       start=start, halting=outcomes, rules=tuple(rules),
                       missing_rule_counts_step=draw(st.booleans()))
