"""The relu-circuit net is pinned: its weights (``weights_sha256``) and its structure (op
names, kinds, inputs, citations, every dimension label, the metadata) hash to the values
the straightforward implementation gave before the pipeline was made fast (issue 23: a
10^6-gate compile in 30 s).  A refactor of ``to_basis``, the layering, ``build_net`` or
the labelled spaces that changes the net, even by one label or the order of two units,
fails here first.

The circuits cover what the fast paths special-case: names with ``@`` and ``%`` (the
layering's and the basis pass's fresh names), gates that read one signal twice, repeated
outputs, an output that is an input, constants, dead gates, fan-in above 2, XOR/XNOR
with negations that already exist later in the circuit, and both options.
"""

from __future__ import annotations

import hashlib
import sys
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tm2nn
from tests.conftest import EXAMPLES
from tests.strategies import circuits
from tm2nn.ir import Circuit, Gate
from tm2nn.modelfile.metadata import weights_sha256
from tm2nn.syntax import load, parse_text

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from gen_circuits import nand_chain, random_layered_circuit  # noqa: E402

#: relu-circuit's compile of a circuit, as a user calls it
relu_compile = partial(tm2nn.compile, backend="relu-circuit")


def structure_sha256(net) -> str:
    """Op names, kinds, inputs and citations, every label of every op's output and of the
    input port, and the metadata, in order."""
    h = hashlib.sha256()
    for op in net.all_ops():
        h.update(repr((op.name, op.kind, op.inputs, getattr(op, "cite", None))).encode())
        out = getattr(op, "out", None)
        if out is not None:
            h.update("\x00".join(out.labels).encode())
    for p in net.inputs:
        h.update("\x00".join(p.space.labels).encode())
    h.update(repr(sorted(net.metadata.items())).encode())
    return h.hexdigest()


TRICKY = """\
INPUT(a)
INPUT(b)
INPUT(c)
INPUT(d)
OUTPUT(o1)
OUTPUT(o2)
OUTPUT(o1)
OUTPUT(a)
OUTPUT(k1)
OUTPUT(o5)
OUTPUT(o6)
dup = AND(a, a)
o1 = XOR(dup, b, c, d)
o2 = XNOR(a, b)
n1 = NOT(a)
o5 = NAND(n1, b, c, d, a)
o6 = NOR(o5)
k1 = OR(o2, o1, dup, dup, b)
dead = AND(a, b)
x%1 = OR(a, b)
z = AND(x%1, c)
"""

G = Gate
AT_NAMES = Circuit("at", ("a", "b", "c"), ("y", "a", "c"), (
    G("a@1", "AND", ("a", "b")), G("a@2", "OR", ("a@1", "c")), G("t", "NOT", ("a",)),
    G("y", "AND", ("a@2", "t")), G("b@1%1", "XOR", ("a", "b"))))
CONSTS = Circuit("k", ("a",), ("one", "zero", "y"), (
    G("one", "CONST1", ()), G("zero", "CONST0", ()), G("y", "XOR", ("a", "one"))))
# the XOR reads b before the NOT of b that to_basis reuses as its negation
LATE_NOT = Circuit("late", ("a", "b"), ("x", "nb", "y"), (
    G("x", "XOR", ("a", "b")), G("nb", "NOT", ("b",)), G("y", "XNOR", ("nb", "a", "x"))))


def _circuit(case: str) -> Circuit:
    if case.startswith("examples/"):
        return load(EXAMPLES / case.split("/", 1)[1])
    return {
        "tricky.bench": lambda: parse_text(TRICKY, "bench", "tricky.bench")[0],
        "at_names": lambda: AT_NAMES,
        "consts": lambda: CONSTS,
        "late_not": lambda: LATE_NOT,
        "nand_chain(120)": lambda: nand_chain(120),
        "random_layered_circuit(2000)": lambda: random_layered_circuit(2000),
        "random_layered_circuit(600, width=8)": lambda: random_layered_circuit(600, width=8, seed=2),
    }[case]()


# (circuit, options) -> (weights_sha256, structure_sha256), from the implementation before
# the fast pipeline (git 46a941d)
PINNED = {
    ('examples/full_adder.circ', ()): (
        "40aa02854cdace302c16299749bc99320e5cca12e29f15392a63a3899c40ed5a",
        "51fca9e40ee36161e9680857da43905aab97beb414c65d7cdb44b386d92ebd83"),
    ('examples/comparator4.circ', ()): (
        "58fd9d0ad80e4fff61c92f97a69cef02a7d9b94adc21c6bf8edd55c4f77f2913",
        "cec3b7da18bc4b278ece3fd23e263d7baf46644d11d7fd3fe3bccd906064d6dd"),
    ('examples/ripple_adder4.circ', ()): (
        "80ab6a7b9ad08fb94ec2e48419233f7fae4680f619b273b682a8b2b47999abd1",
        "9ffbcb084d06ba17c2b72ce2a046ae76de291affa0f5e22a0128e3547c77919d"),
    ('examples/majority5.circ', ()): (
        "7db70fa1f98031d830e1906300e87993e078d9f418293b527a458327762b3bae",
        "5f9ecea2a05b0192695a8714a3232c041ae1ee8fb8c1f03d9c2409127f55504d"),
    ('examples/full_adder.circ', (('corrections', False),)): (
        "d045c95c5bc837e0f1ffa8f564c1339ff98376ddf4ac8a2f4562f076e0c7a9c4",
        "d77283e804016e9176589bfcad75ad930039f6c4cc6639def47816b56394ced9"),
    ('examples/full_adder.circ', (('pm_one_output', True),)): (
        "d3cfb57e5637d7cc2640595ade68b7ec029ef979133bd791dffef738a4bd2e6d",
        "d474af7c7b4fe6a32d6746209a8517a3d476e5b13b20a78ee47e622fe2792038"),
    ('examples/comparator4.circ', (('corrections', False), ('pm_one_output', True))): (
        "411a19ceffbf97b14c6baa7e2e53d9a6cbe3d313acdd83fd1ac4e9184fed5e2e",
        "dffcb85e01bff713fca02823b46b5fa59efb15ab8e84c601385de1b47f743c9c"),
    ('tricky.bench', ()): (
        "22d5172a12ef754afcf35db4792938d9f4a2ad14f415b94a5b25ac13da45fca4",
        "594d6faa93519243ea0e087e748db0d211db3153953124bb3263d4f4558ecd7a"),
    ('at_names', ()): (
        "75c2a29418d23b820391d395e140abaaadeac38c40bdfd9e573bfa36ecbc020f",
        "289753af1479ae0404c266d30e377a1bc5fe318e0560d0f6f66e8da18dd328da"),
    ('consts', ()): (
        "e65508ba3ba5a6fd37ccdcdec6e2637e8092db0b92017c824763514896b136be",
        "b603718122fa935bc45ff380a51ff4a2bab4eda80b37666ceb90178dc44011e7"),
    ('late_not', ()): (
        "b636a57ca3caa113b6458136d0d6e4a15c7da524bf54d0dd4e6288989db0ddd5",
        "819b6ece8dffa2a320eff2ab509e0247fbe28d337d1bcb17df93d06dc2e6a649"),
    ('nand_chain(120)', ()): (
        "fbac8b03f46446ed83c859cb3f3754071dcfa9f9320146dd12549725a7999c80",
        "f54da14267f25e7f879388f699bad3b4f7d76c7e190b5eb6074a68179b5134e2"),
    ('random_layered_circuit(2000)', ()): (
        "48a2020d2a4ec9e88cce5a465a4c1419a06cad5449b2aa73a6bfd3fe486cbf44",
        "a905bcdaf353a2accc173546e0559c7289eeb2786da75b99cae07dc446b89f2b"),
    ('random_layered_circuit(600, width=8)', ()): (
        "159a585dfd6db122511e01825814de92ce065e993602c3593b157a38b0bee540",
        "831c5d7b62aa15e2f76ea76e47a136129e1cd6a7ad5f180cd0e69c84bcb8429a"),
    ('tricky.bench', (('pm_one_output', True),)): (
        "b8e84bde0033fe3bdb367af608e302af046a3875cb9d704366e61e45efdfb42b",
        "41ae5100d68f15c32a3e867cd112af49d654489f8c3c34fd9c652cb2901fa081"),
    ('tricky.bench', (('corrections', False),)): (
        "7fb87cad0fac74cf19bb2e605d81969dbf227b1905887f853d25cec296443f2c",
        "d911b49e236d0be45b6cf4c305c934682da2e318a594bc17d50d34f4d53f8d34"),
    ('at_names', (('pm_one_output', True),)): (
        "b8df3356974adc039e50e8a3d604d0d2e0c5ed9e857dca1d3c733628a23ca0c2",
        "97a15f1c2f9ce9639b4cd4081f4910c85b59f637e279406f4327c94350335a17"),
    ('at_names', (('corrections', False),)): (
        "4ac769edf7d09252d4e569c381c00ba0ab6699d2bfac3c931511e0e489e9ad41",
        "db4ce7b085c01d7e837027adbe97c7af4d1a748626e9183a79d8a641ad67825f"),
    ('late_not', (('pm_one_output', True),)): (
        "d5cb0bf69051920abb1ccd4efb0e492100ebac27a0fa1b6a23146856fe3ba752",
        "a9726de83d13b816ccde5f04a06cb06fe2724d5beb2725a69374966b7f3a36c2"),
    ('late_not', (('corrections', False),)): (
        "97a7e8089b647f5dc63f93e6ec7be1b6fbf91aa64ea4fde2aa2afd9b20ffc9f6",
        "dd39e0dd9f84b58aa3e5d130d725a957cef9c0b1163e7b24f5a4c760b0fdf56e"),
}


@pytest.mark.parametrize("case, options", sorted(PINNED), ids=lambda x: str(x))
def test_relu_circuit_net_is_pinned(case, options):
    compiled = relu_compile(_circuit(case), **dict(options))
    assert (weights_sha256(compiled.net), structure_sha256(compiled.net)) == PINNED[(case, options)]


# the ISCAS-85 corpus (../shared/corpus) and machines unrolled by the backend
CORPUS_PINNED = {
    "c432": ("e2e5e29d83d2ec9a0b5c989f41f68d00e90bc7064da6602bcd58f0752691032f",
            "e2f0fcb39569090fe9995dad3f6967e48e2bb0face889bd765cfc8e0bcb43b43"),
    "c6288": ("2fe6f130426a10f3a41f59d4585b6eaaba72b2473878aafa1be1b0fedf41647c",
             "b29873774367f7735e10bd1d24f529880221935e74d90a9d65676a28790e7343"),
    "c1908": ("d8318b6c6d9ad32f15824734d0749ee94e9c18e20048b84d52d75c0d0db52fe1",
             "a6b2bcc1b6bc4a1aa4b35127fa384f85683615d816c93f5d0fcea1d8fada13d6"),
}
MACHINE_PINNED = {
    ("bb3.tm", (("steps", 20),)): (
        "8b45374050af61958c7e3851daead2320ff15372b9911d83561311044c5d5000",
        "30a950f20a909181d3b9be73102cecc808692db957595b2363fd2e4af17a9367"),
    ("binary_increment.tm", (("pm_one_output", True), ("steps", 8))): (
        "84acb749135211313e0cda52bd1f26506f7b850fe96b3c945389a2945eb278d1",
        "f46f54281bf2f673c47de0a3715a0ebb185fc2777246e4903c453e030240196f"),
}


@pytest.mark.parametrize("name", sorted(CORPUS_PINNED))
def test_relu_circuit_corpus_nets_are_pinned(corpus, name):
    compiled = relu_compile(load(corpus / "circuits" / "iscas85" / f"{name}.bench"))
    assert (weights_sha256(compiled.net), structure_sha256(compiled.net)) == CORPUS_PINNED[name]


@pytest.mark.parametrize("example, options", sorted(MACHINE_PINNED), ids=lambda x: str(x))
def test_relu_circuit_unrolled_machine_nets_are_pinned(example, options):
    compiled = tm2nn.compile(EXAMPLES / example, "relu-circuit", **dict(options))
    assert (weights_sha256(compiled.net), structure_sha256(compiled.net)) == MACHINE_PINNED[(example, options)]


# -- the fast passes against the straightforward ones ------------------------------------------
def reference_layers(c: Circuit):
    """The layering as the pass did it name by name before it worked on arrays (the
    module docstring of :mod:`tm2nn.passes.layering`): ``(layers, outputs, identity)``."""
    seen = set(c.outputs)
    for g in reversed(c.topo):
        if g.name in seen:
            seen.update(g.inputs)
    live = [g for g in c.topo if g.name in seen]
    level = dict.fromkeys(c.inputs, 0)
    for g in live:
        level[g.name] = 1 + max((level[i] for i in g.inputs), default=0)
    depth = max([level[o] for o in c.outputs] + [1 if c.gates or c.outputs else 0])
    need = dict.fromkeys(c.inputs, 0)
    for g in live:
        need[g.name] = level[g.name]
    for g in live:
        for i in g.inputs:
            need[i] = max(need[i], level[g.name] - 1)
    for o in c.outputs:
        need[o] = depth
    taken, copies = set(level), {}
    carried = [[] for _ in range(depth)]
    for s in list(c.inputs) + [g.name for g in live]:
        names = [f"{s}@{k}" for k in range(level[s] + 1, need[s] + 1)]
        if not taken.isdisjoint(names):
            fresh = []
            for n in names:
                while n in taken:
                    n += "@"
                taken.add(n)
                fresh.append(n)
            names = fresh
        taken.update(names)
        copies[s] = names
        prev = s
        for k, n in enumerate(names, level[s]):
            carried[k].append(Gate(n, "BUF", (prev,)))
            prev = n

    def at(s, k):
        return s if k == level[s] else copies[s][k - level[s] - 1]

    layers = [[] for _ in range(depth)]
    for g in live:
        k = level[g.name]
        layers[k - 1].append(Gate(g.name, g.op, tuple(at(i, k - 1) for i in g.inputs), g.loc))
    layers = tuple(tuple(a + b) for a, b in zip(layers, carried))
    identity = sum(1 for layer in layers for g in layer if g.name not in c.driver)
    return layers, tuple(at(o, depth) for o in c.outputs), identity


def _renamed(c: Circuit, rng) -> Circuit:
    """``c`` with some signals renamed to names with ``@`` and ``%`` (the passes' own)."""
    pool = ["x0@1", "g1@2", "x1@1@", "g0%1", "g2%1%1", "a@1%2"]
    names = [*c.inputs, *(g.name for g in c.gates)]
    new = {n: n for n in names}
    for n in names:
        if rng.random() < 0.3:
            cand = rng.choice(pool)
            if cand not in new.values():
                new[n] = cand
    return Circuit(c.name, tuple(new[x] for x in c.inputs), tuple(new[o] for o in c.outputs),
                   tuple(Gate(new[g.name], g.op, tuple(new[i] for i in g.inputs)) for g in c.gates))


@settings(max_examples=300, deadline=None)
@given(circuits(max_gates=30), st.randoms(use_true_random=False))
def test_layering_and_basis_match_the_straightforward_passes(c, rng):
    from tm2nn.passes.basis import to_basis
    from tm2nn.passes.layering import layer_circuit

    for circuit in (c, _renamed(c, rng)):
        for x in (circuit, to_basis(circuit)):
            lc = layer_circuit(x)
            layers, outputs, identity = reference_layers(x)
            assert lc.layers == layers and lc.outputs == outputs and lc.identity_gates == identity
        b = to_basis(circuit)  # its topological order is the one validation gives
        assert b.topo == Circuit(b.name, b.inputs, b.outputs, b.gates).topo


def test_long_dead_chains_are_dropped():
    from tm2nn.passes.layering import layer_circuit

    chain = [Gate("d0", "NOT", ("a",))] + [Gate(f"d{k}", "AND", (f"d{k - 1}", "b")) for k in range(1, 300)]
    c = Circuit("dead", ("a", "b"), ("o", "p"), (*chain, Gate("o", "AND", ("a", "b")), Gate("p", "OR", ("d4", "a"))))
    lc = layer_circuit(c)
    layers, outputs, identity = reference_layers(c)
    assert lc.layers == layers and lc.outputs == outputs and lc.identity_gates == identity
    assert lc.size == 21  # d0 .. d4, p, o and their copies; not the 295 dead gates


def test_lazy_labels_are_the_same_space():
    import copy
    import pickle

    from tm2nn.nets import Space

    lazy = Space.prefixed(("rlo:", "rhi:"), ["a", "b@2"])
    assert len(lazy) == 4
    plain = Space(("rlo:a", "rhi:a", "rlo:b@2", "rhi:b@2"))
    assert lazy == plain and hash(lazy) == hash(plain) and repr(lazy) == repr(plain)
    assert lazy.index("rhi:b@2") == 3 and "rlo:a" in lazy and lazy.groups == plain.groups
    again = pickle.loads(pickle.dumps(Space.prefixed(("g:",), ["x", "y"])))
    assert again.labels == ("g:x", "g:y") and copy.deepcopy(again) == again
    with pytest.raises(ValueError, match="duplicate dimension label"):
        Space(("a", "a"))


@pytest.mark.parametrize("odd", ["a\nb", "input", "v[3]", "x y", "\n", "é", None])
def test_dump_fast_path_writes_what_the_name_by_name_path_writes(monkeypatch, odd):
    from tm2nn.syntax import circuit_dsl

    names = ["g0", "g1.x", "_z$"] + ([odd] if odd is not None else [])
    gates = [Gate(n, "NOT" if j % 2 else "AND", ("p",) if j % 2 else ("p", "q")) for j, n in enumerate(names)]
    c = Circuit("c", ("p", "q"), tuple(names), tuple(gates))
    fast = circuit_dsl.dump(c)
    monkeypatch.setattr(circuit_dsl, "_all_plain", lambda names: False)
    assert fast == circuit_dsl.dump(c)
