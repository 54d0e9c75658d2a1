"""A ``.safetensors`` model's manifest drives interpretability tools (issue 21, item 2).

* The transformer's decoding description (:func:`tm2nn.backends.transformer.decoding.description`):
  every label it names is a dimension of the value it names, in the tap slots the decoder
  reads, and a decoder written from the description alone gives the interpreter's reports.
* nnsight reads the output of the binary search's last attention (Wei, Chen & Ma,
  Claim C.6, found by its ``cite``) at each decoder step, and the manifest's labels
  decode it into the step, the head's cell, the last step that wrote it (Lemma C.3's i')
  and the symbol written then: the interpreter's, at every step.
* nnsight patches a relu-circuit net around a Prop. 3.4 correction: noise inside the
  margin (< 1/3) is removed exactly by the correction, and propagates to the outputs
  with the correction knocked out.

Each has a mutation (a wrong label, a broken attention, a broken correction) that fails.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest

import tm2nn
from tm2nn.backends.transformer.layout import symbol_label
from tm2nn.interp import eval_circuit, run_machine
from tm2nn.ir import Machine
from tm2nn.modelfile.manifest import find_ops, load_manifest, load_module, module_path, value_labels
from tm2nn.passes.stay import remove_stays

torch = pytest.importorskip("torch")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NOISE = 0.3  # inside Prop. 3.4's margin: round() maps [0, 1/3) to 0 and (2/3, 1] to 1


# -- helpers -----------------------------------------------------------------------------------------
def at(root, path: str):
    return functools.reduce(getattr, path.split("."), root)


def saved(compiled, tmp_path: Path, name: str) -> tuple[dict, object]:
    path = tmp_path / f"{name}.safetensors"
    compiled.save(path)
    return load_manifest(path), load_module(path)


# -- the transformer's decoding description --------------------------------------------------------
def line_machines() -> list[Path]:
    return [p for p in sorted(EXAMPLES.glob("*.tm")) if type(tm2nn.load(p)) is Machine]


def decoding_problems(m: dict) -> list[str]:
    """What is wrong with a transformer manifest's decoding description: a label that is
    not a dimension of its value, or not where the decoder reads its group."""
    from tm2nn.backends.transformer.layout import Layout

    lay = Layout.from_json(m["encodings"]["output"]["layout"])
    out = []
    for field, d in m["decoding"]["fields"].items():
        space = value_labels(m, d["value"])
        for lab in d["labels"]:
            group = lab.split(":", 1)[0]
            if lab not in space:
                out.append(f"{field}: {lab} is not a dimension of {d['value']}")
            elif group not in lay.tap_indices:
                out.append(f"{field}: the decoder reads no group {group}")
            else:  # the decoder slices the group by position: the label must sit there
                within = list(lay.idx(group)).index(lay.space.index(lab))
                if space.index(lab) != lay.tap_indices[group].start + within:
                    out.append(f"{field}: {lab} is not where the decoder reads it")
    return out


@pytest.fixture(scope="module")
def transformer_manifests(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tf")
    out = {p.stem: saved(tm2nn.compile(p, "transformer", steps=6), tmp, p.stem)[0] for p in line_machines()}
    other = tm2nn.compile(EXAMPLES / "even_ones.tm", "transformer", steps=4, cls_readout=True,
                          correction_placement="layers", shared_history=False)
    out["even_ones (cls, layers)"] = saved(other, tmp, "even_ones_cls")[0]
    return out


def test_every_decoding_label_is_a_dimension_the_decoder_reads(transformer_manifests):
    assert len(transformer_manifests) >= 8
    for name, m in transformer_manifests.items():
        fields = m["decoding"]["fields"]
        assert {"state", "head", "symbol", "halted", "steps", "outcome", "tape", "sigma"} <= set(fields), name
        assert decoding_problems(m) == [], name
        assert "lowering" in m["decoding"]["notes"] and ("cls" in m["decoding"]["notes"]) == ("cls" in name)
        # the binary search the notes point at is the op the cite names
        (c6,) = find_ops(m, "attention", "Claim C.6")
        assert c6 in m["decoding"]["notes"]["binary_search"]


def report_from_manifest(m: dict, taps: np.ndarray, text: str) -> dict:
    """The run report, decoded by the manifest's description alone (its fields' labels and
    rules, and the output encoding the rules name): what a user without tm2nn would write."""
    f, enc = m["decoding"]["fields"], m["encodings"]["output"]
    col = {lab: i for i, lab in enumerate(value_labels(m, f["state"]["value"]))}
    sym_of = {symbol_label(a): a for a in enc["layout"]["alphabet"]}
    bits = f["head"]["labels"]

    def one_hot(labs):  # per row: the item of the label above 1/2 (None if none is)
        on = taps[:, [col[lab] for lab in labs]] > 0.5
        return [labs[j].split(":", 1)[1] if row.any() else None for row, j in zip(on, on.argmax(1))]

    state, read = one_hot(f["state"]["labels"]), one_hot(f["symbol"]["labels"])
    wrote = one_hot([lab for lab in f["tape"]["labels"] if lab not in bits])
    on = taps[:, [col[lab] for lab in bits]] > 0.5  # Σ 2^k [pos2:b<k> > 1/2] - offset
    loc = on @ np.array([2 ** int(lab.split(":b")[1]) for lab in bits]) - enc["layout"]["offset"]
    T, aux = enc["source_steps"], {a for a, _t in enc["lowering"]["aux"]}
    halting, no_rule = enc["halting"], {tuple(p) for p in enc["no_rule"]}
    kept = ([0] + [i for i in range(1, len(taps)) if state[i] not in aux])[: T + 1]
    stop = next((k for k, i in enumerate(kept) if state[i] in halting or (state[i], sym_of[read[i]]) in no_rule), None)
    r = kept[-1 if stop is None else stop]
    steps = len(kept) - 1 if stop is None else stop
    if stop is not None and state[r] not in halting and enc["missing_rule_counts_step"]:
        steps += 1
    halted = stop is not None and steps <= T
    cells = dict(enumerate(text))
    for i in range(1, r + 1):
        cells[int(loc[i - 1])] = sym_of[wrote[i]]
    blank = enc["layout"]["blank"]
    cells = {c: a for c, a in cells.items() if a != blank}
    tape = "".join(cells.get(c, blank) for c in range(min(cells), max(cells) + 1)) if cells else ""
    return {"halted": halted, "steps": min(steps, T), "state": state[r],
            "outcome": halting.get(state[r], "halt") if halted else None, "tape": tape, "head": int(loc[r]),
            "sigma": len(cells)}


DESCRIBED = [("bb3", 21, [""]), ("binary_increment", 8, ["1011", "111", ""]), ("even_ones", 5, ["0110", "111", "1"])]


@pytest.mark.parametrize("name,steps,texts", DESCRIBED)
def test_a_decoder_written_from_the_description_gives_the_interpreters_report(name, steps, texts, tmp_path):
    c = tm2nn.compile(EXAMPLES / f"{name}.tm", "transformer", steps=steps)
    m, module = saved(c, tmp_path, name)
    with torch.no_grad():
        taps = module(torch.from_numpy(c.encode(texts))).numpy()
    for t, text in zip(taps, texts):
        want = dict(tm2nn.run(c.source, text, max_steps=steps))
        assert report_from_manifest(m, t, text) == want, (name, text)


def test_a_wrong_decoding_label_is_caught(transformer_manifests, tmp_path):
    """Mutations of the description: a label the value does not have; a label of another
    group (the tape read from sym1, the symbol under the head, not sym2, the one written)."""
    import copy

    m = copy.deepcopy(transformer_manifests["bb3"])
    head = m["decoding"]["fields"]["head"]["labels"]
    m["decoding"]["fields"]["head"]["labels"] = [lab.replace("pos2:", "pos3:") for lab in head]  # not in the tap
    assert any("pos3:" in p for p in decoding_problems(m))
    c = tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", steps=21)
    m, module = saved(c, tmp_path, "bb3")
    fields = m["decoding"]["fields"]
    fields["tape"]["labels"] = [lab.replace("sym2:", "sym1:") for lab in fields["tape"]["labels"]]
    assert decoding_problems(m) == []  # every label exists: only the decoded run can tell
    with torch.no_grad():
        taps = module(torch.from_numpy(c.encode([""]))).numpy()[0]
    assert report_from_manifest(m, taps, "")["tape"] != tm2nn.run(c.source, "").tape


# -- (a) nnsight reads the binary search at a decoder step ---------------------------------------
def binary_search_reads(m: dict, module, x, n: int) -> list[np.ndarray]:
    """The output of Claim C.6's attention at decoder steps 1..n (nnsight, one trace)."""
    import nnsight

    (c6,) = find_ops(m, "attention", "Claim C.6")
    path = module_path(module, c6)
    model = nnsight.NNsight(module)
    with torch.no_grad(), model.trace(x) as tracer:
        rows = nnsight.save([])
        for _ in tracer.iter[:n]:  # occurrence k of a body op is decoder step k + 1
            rows.append(at(model, path).output)
    return [r.numpy() for r in rows]


def decode_search(m: dict, h: np.ndarray) -> dict:
    """The search's result in one row of Claim C.6's output, by the manifest's labels."""
    (c6,) = find_ops(m, "attention", "Claim C.6")
    on = {lab for lab, v in zip(value_labels(m, c6), h) if v > 0.5}
    sym_of = {symbol_label(a): a for a in m["encodings"]["output"]["layout"]["alphabet"]}

    def number(group):
        return sum(2 ** int(lab.split(":b")[1]) for lab in on if lab.startswith(group + ":b"))

    return {"step": number("pos1"), "head": number("pos3") - m["encodings"]["output"]["layout"]["offset"],
            "found": number("scr3"), "any": "scr4:1" in on,
            "symbol": [sym_of[lab.split(":", 1)[1]] for lab in sorted(on) if lab.startswith("scr1:")]}


def expected_search(run, i: int) -> dict:
    """Lemma C.3 from the interpreter's trace of the lowered machine: after step i the head
    is on l_i; i' is the last step t <= i with l_{t-1} = l_i (0 if none), u_{i'} its write."""
    tr, alphabet = run.trace, run.machine.alphabet
    head = tr.head[i - 1]
    writers = [t for t in range(1, i + 1) if tr.pos[t - 1] == head]
    found = writers[-1] if writers else 0
    return {"step": i, "head": head, "found": found, "any": found > 0,
            "symbol": [alphabet[tr.write[found - 1]]] if found else []}


@pytest.mark.parametrize("name,steps,texts", [("bb3", 21, [""]), ("binary_increment", 6, ["1011", "11"]),
                                              ("palindrome", 6, ["0110", "01"])])
def test_nnsight_reads_the_binary_search_at_every_step(name, steps, texts, tmp_path):
    pytest.importorskip("nnsight")
    c = tm2nn.compile(EXAMPLES / f"{name}.tm", "transformer", steps=steps)
    m, module = saved(c, tmp_path, name)
    T = c.options["decoder_steps"]
    rows = binary_search_reads(m, module, torch.from_numpy(c.encode(texts)), T)
    lowered = remove_stays(c.source).machine  # the machine the decoder runs (notes: lowering)
    checked = 0
    for b, text in enumerate(texts):
        run = run_machine(lowered, text, T, trace=True)
        for i in range(1, len(run.trace) + 1):  # every step the lowered machine takes within T'
            assert decode_search(m, rows[i - 1][b]) == expected_search(run, i), (name, text, i)
            checked += 1
    assert checked >= len(texts)


@pytest.mark.parametrize("mutation", ["drop a copied symbol", "move C.4's null key"])
def test_a_broken_search_is_caught(mutation, tmp_path):
    pytest.importorskip("nnsight")
    c = tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", steps=21)
    m, module = saved(c, tmp_path, "bb3")
    body = module.trace_op.body
    with torch.no_grad():
        if mutation == "drop a copied symbol":  # Claim C.6's V copies sym2:1 into scr1:1 no more
            at(body, module_path(body, "S.c6")).wv[-1] = 0.0
        else:  # Claim C.4's null key sits between the best and next best score; move it past the best
            at(body, module_path(body, "S.c4")).null_key.add_(2.0)
    run = run_machine(c.source, "", 21, trace=True)
    rows = binary_search_reads(m, module, torch.from_numpy(c.encode([""])), 21)
    assert any(decode_search(m, rows[i - 1][0]) != expected_search(run, i) for i in range(1, 22))


# -- (b) nnsight patches around a relu-circuit correction ----------------------------------------
def correction_ops(m: dict) -> list[tuple[str, str]]:
    """``(input, output)`` of every Prop. 3.4 round correction: the value its first layer
    reads (a circuit layer's gates) and the ReLU after its second layer."""
    ops = m["net"]["ops"]

    def reader(name):
        return next(op["name"] for op in ops if op["inputs"] == [name])

    firsts = find_ops(m, "affine", "Prop. 3.4: round, first layer")
    return [(next(op for op in ops if op["name"] == a)["inputs"][0], reader(reader(reader(a)))) for a in firsts]


def patched_runs(m: dict, module, x, layer: str, end: str, knock_out: bool):
    """nnsight: push every unit of ``layer`` NOISE towards 1/2; with ``knock_out`` the
    correction's output is patched to its (noisy) input.  Returns (correction output, y)."""
    import nnsight

    model = nnsight.NNsight(module)
    gate, corr = at(model, module_path(module, layer)), at(model, module_path(module, end))
    with torch.no_grad(), model.trace(x):
        g = gate.output
        noisy = g + NOISE * (1 - 2 * g)
        gate.output = noisy
        if knock_out:
            corr.output = noisy
        fixed = corr.output.save()
        y = model.output.save()
    return fixed, y


@pytest.mark.parametrize("name", ["full_adder", "majority5", "comparator4"])
def test_a_correction_removes_noise_inside_its_margin(name, tmp_path):
    pytest.importorskip("nnsight")
    c = tm2nn.compile(EXAMPLES / f"{name}.circ", "relu-circuit")
    m, module = saved(c, tmp_path, name)
    texts = ["".join(b) for b in itertools.product("01", repeat=len(c.source.inputs))]
    x = torch.from_numpy(c.encode(texts))
    want = eval_circuit(c.source, x.numpy().astype(bool))  # the reference evaluator
    with torch.no_grad():
        clean = module.trace(x)
    pairs = correction_ops(m)
    assert len(pairs) == int(m["net"]["metadata"]["circuit_layers"]) - 1  # one after every layer but the last
    for layer, end in pairs:
        fixed, y = patched_runs(m, module, x, layer, end, knock_out=False)
        assert (fixed - clean[end]).abs().max() < 1e-6, (name, layer)   # round() gives the clean values back
        assert np.array_equal(y.numpy() > 0.5, want), (name, layer)
        _, y_cut = patched_runs(m, module, x, layer, end, knock_out=True)
        assert (y_cut - clean["y"]).abs().max() > 0.25, (name, layer)   # without it, the noise reaches y


def test_a_broken_correction_is_caught(tmp_path):
    """Mutation: the first correction's thresholds moved from (1/3, 2/3) to (0.2, 0.8):
    the same noise now comes out of it."""
    pytest.importorskip("nnsight")
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    m, module = saved(c, tmp_path, "full_adder")
    x = torch.from_numpy(c.encode(["".join(b) for b in itertools.product("01", repeat=3)]))
    with torch.no_grad():
        clean = module.trace(x)
    layer, end = correction_ops(m)[0]
    first = find_ops(m, "affine", "Prop. 3.4: round, first layer")[0]
    with torch.no_grad():
        bias = at(module, module_path(module, first)).bias
        bias.copy_(torch.tensor([-0.2, -0.8]).repeat(bias.numel() // 2))
    fixed, _y = patched_runs(m, module, x, layer, end, knock_out=False)
    assert (fixed - clean[end]).abs().max() > 0.1
