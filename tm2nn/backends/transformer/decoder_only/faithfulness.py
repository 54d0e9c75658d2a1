"""The faithfulness check of a ground-truth dict (:mod:`.ground_truth`) against a model
(issue 37, deliverable 4; docs/transformer_lens.md, "The ground truth").

Over a set of inputs, with the run's tokens teacher-forced (one batched forward per
ablation, :class:`~tm2nn.emit.torch_native.NativeRunner`), the decoded fields of every
step's predicted token (state, write, move, halt) are compared with the unablated model's
(a step whose best two logits are within :data:`DECISION_GAP` decides nothing, which
differs from every token):

1. **necessary**: zero-ablating each listed component (its heads' ``hook_z``, its neurons'
   ``hook_post``, its embedding dimensions) changes a field it is said to ``determine`` at a
   step of its ``when`` set, on at least one input.  A component whose ``when`` set is empty
   on every input (no revisit, no prompt cell read) is ``unexercised``: reported, not failed.
   Per input this would be too strong: a run that never leaves cell 0 does not need the head
   position, and a symbol whose rule equals the blank's does not need Lemma C.7.
2. **sufficient**: zero-ablating everything not listed, together (every head, every neuron
   range outside all components, every residual dimension no component writes, the latter at
   every layer's input and before the unembedding) changes nothing at any step.
3. **writes** (from the weights): a component's heads (``o`` rows fed by a live ``v``), its
   neurons (``fc_out`` rows) or its embedding columns write exactly its listed dimensions.
4. **coverage** (from the weights): every live head and live neuron, and every residual
   dimension some weight reads, belongs to a listed component.

With a ``machine`` the teacher-forced tokens are the interpreter's run, and the unablated
model must predict every one (``baseline``); without, they are the model's own greedy run.
``ok`` only if everything passes.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tm2nn.backends.transformer.decoder_only.ground_truth import FIELDS, SCHEMA, WHEN, ground_truth
from tm2nn.backends.transformer.decoder_only.tokens import (
    HALT,
    MOVES,
    Contract,
    expected_tokens,
    outcome_table,
    parse_outcome,
)
from tm2nn.emit.torch_native import Ablation, NativeRunner
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine
from tm2nn.nets.native import NativeTransformer

#: at most this many default inputs (the empty tape and the short tapes over the alphabet)
DEFAULT_INPUTS = 32
#: at most this many witnesses / changes kept per component in the report
KEEP = 5
_HOOK_Z = re.compile(r"blocks\.(\d+)\.attn\.hook_z$")
_HOOK_POST = re.compile(r"blocks\.(\d+)\.mlp\.hook_post$")


@dataclass
class ComponentResult:
    """One component's verdict.  ``witnesses``: ``(input, step, fields)`` where its ablation
    changed a field it determines at a step of its ``when`` set; ``outside``: changes at other
    steps or of other fields (reported, not failed); ``exercised``: its ``when`` set is not
    empty on the inputs; ``writes``: ``""`` or what the weights write instead."""

    name: str
    when: str
    exercised: bool = False
    witnesses: list = field(default_factory=list)
    outside: list = field(default_factory=list)
    writes: str = ""

    @property
    def necessary(self) -> bool:
        return bool(self.witnesses) or not self.exercised

    @property
    def ok(self) -> bool:
        return self.necessary and not self.writes

    @property
    def status(self) -> str:
        if self.writes:
            return f"FAIL writes: {self.writes}"
        if not self.exercised:
            return f"unexercised (no step of '{self.when}' on these inputs)"
        if not self.witnesses:
            return f"FAIL: ablating it changes no field it determines at a '{self.when}' step"
        x, s, f = self.witnesses[0]
        return f"ok (input {x!r}, step {s}: {', '.join(f)})"


@dataclass
class FaithfulnessReport:
    """Per component a :class:`ComponentResult`; ``complement``: ``(input, step, fields)``
    changed by ablating everything unlisted; ``coverage``: live pieces no component lists;
    ``baseline``: ``{input: [steps the unablated model gets wrong]}`` against the interpreter."""

    inputs: list[str]
    components: dict[str, ComponentResult]
    complement: list = field(default_factory=list)
    complement_ablated: dict = field(default_factory=dict)
    coverage: list = field(default_factory=list)
    baseline: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (all(c.ok for c in self.components.values()) and not self.complement and not self.coverage
                and not any(self.baseline.values()))

    @property
    def failed(self) -> list[str]:
        return [n for n, c in self.components.items() if not c.ok]

    @property
    def unexercised(self) -> list[str]:
        return [n for n, c in self.components.items() if not c.exercised]

    def to_json(self) -> dict:
        return {"ok": self.ok, "inputs": self.inputs,
                "components": {n: {"status": c.status, "ok": c.ok, "when": c.when, "exercised": c.exercised,
                                   "witnesses": c.witnesses, "outside": c.outside} for n, c in self.components.items()},
                "complement": {"changed": self.complement, "ablated": self.complement_ablated},
                "coverage": self.coverage, "baseline": self.baseline}

    def lines(self) -> list[str]:
        out = [f"{n}: {c.status}" for n, c in self.components.items()]
        ab = self.complement_ablated
        what = f"{ab.get('heads', 0)} heads, {ab.get('neurons', 0)} neurons, {ab.get('residual', 0)} residual dims"
        out.append(f"everything unlisted ({what}): " + (
            "changes nothing" if not self.complement else
            "FAIL: changes " + "; ".join(f"input {x!r} step {s} ({', '.join(f)})" for x, s, f in self.complement[:KEEP])))
        out += [f"FAIL coverage: {c}" for c in self.coverage]
        out += [f"FAIL baseline: input {x!r} wrong at steps {s[:KEEP]}" for x, s in self.baseline.items() if s]
        out.append("faithful" if self.ok else "NOT faithful")
        return out


# -- reading a ground-truth dict ------------------------------------------------------------------
@dataclass
class _Piece:
    heads: list  # (layer, head)
    neurons: list  # (layer, a, b)
    embed: list  # residual indices zeroed at layer 0's input
    writes: list  # residual indices
    determines: set
    when: str
    hook_of_embed: str = ""


def _parse(gt: dict, model: NativeTransformer) -> dict[str, _Piece]:
    if not isinstance(gt, dict) or gt.get("schema") != SCHEMA:
        raise Tm2nnError(f"ground truth: not a {SCHEMA} document (schema {gt.get('schema') if isinstance(gt, dict) else None!r})")
    if list(gt.get("residual_labels", [])) != list(model.residual_labels):
        raise Tm2nnError("ground truth: its residual_labels are not the model's")
    if list(gt.get("vocab", [])) != list(model.vocab):
        raise Tm2nnError("ground truth: its vocabulary is not the model's")
    comps = gt.get("components")
    if not isinstance(comps, dict) or not comps:
        raise Tm2nnError("ground truth: no components")
    ix = {lab: i for i, lab in enumerate(model.residual_labels)}
    out = {}
    for name, c in comps.items():
        where = f"ground truth: component {name!r}"
        try:
            when, det, writes, hooks = c["when"], set(c["determines"]), list(c["writes"]), list(c["hooks"])
        except (KeyError, TypeError):
            raise Tm2nnError(f"{where} lacks when, determines, writes or hooks") from None
        if when not in WHEN:
            raise Tm2nnError(f"{where}: when {when!r} is not one of {sorted(WHEN)}")
        if not det or not det <= set(FIELDS):
            raise Tm2nnError(f"{where}: determines {sorted(det)} is not a non-empty subset of {list(FIELDS)}")
        bad = [w for w in writes if w not in ix]
        if bad or not writes:
            raise Tm2nnError(f"{where}: writes unknown residual labels {bad[:3]}" if bad else f"{where}: writes nothing")
        if "writes_idx" in c and list(c["writes_idx"]) != [ix[w] for w in writes]:
            raise Tm2nnError(f"{where}: writes_idx does not index its writes in residual_labels")
        p = _Piece([], [], [], [ix[w] for w in writes], det, when)
        for h in hooks:
            name_ = h.get("hook") if isinstance(h, dict) else None
            if name_ is None:
                raise Tm2nnError(f"{where}: a hook entry without 'hook'")
            if (m := _HOOK_Z.match(name_)) and "head" in h:
                layer, head = int(m.group(1)), h["head"]
                if not (0 <= layer < model.n_layers and isinstance(head, int) and 0 <= head < model.n_heads):
                    raise Tm2nnError(f"{where}: {name_} head {head!r} is not in the model")
                p.heads.append((layer, head))
            elif (m := _HOOK_POST.match(name_)) and "neurons" in h:
                layer, (a, b) = int(m.group(1)), h["neurons"]
                if not (0 <= layer < model.n_layers and isinstance(a, int) and isinstance(b, int) and 0 <= a < b <= model.d_mlp):
                    raise Tm2nnError(f"{where}: {name_} neurons {h['neurons']!r} are not in the model")
                p.neurons.append((layer, a, b))
            elif name_ in ("hook_embed", "hook_pos_embed") and "dims" in h:
                dims = h["dims"]
                if not all(isinstance(d, int) and 0 <= d < model.d_model for d in dims) or not dims:
                    raise Tm2nnError(f"{where}: {name_} dims {dims!r} are not residual dimensions")
                p.embed += list(dims)
                p.hook_of_embed = name_
            else:
                raise Tm2nnError(f"{where}: hook {h!r} is not a head of hook_z, neurons of hook_post or "
                                 f"dims of hook_embed / hook_pos_embed")
        if not (p.heads or p.neurons or p.embed):
            raise Tm2nnError(f"{where}: no hook")
        layer, heads, neurons = c.get("layer"), c.get("heads", []), c.get("neurons")
        if p.heads or p.neurons:  # the convenience fields must say what the hooks say
            if {lay for lay, _ in p.heads} | {lay for lay, _, _ in p.neurons} != {layer} or \
                    sorted(h for _, h in p.heads) != sorted(heads or []) or \
                    [list(x[1:]) for x in p.neurons] != ([list(neurons)] if neurons else []):
                raise Tm2nnError(f"{where}: layer/heads/neurons disagree with its hooks")
        out[name] = p
    return out


# -- the runs ------------------------------------------------------------------------------------
def default_inputs(model: NativeTransformer, extra=()) -> list[str]:
    """``extra`` (e.g. the source's example input), the empty tape, then every tape of 1, 2,
    3 symbols (up to ``max_input``), at most :data:`DEFAULT_INPUTS` in all."""
    c = Contract.from_json(model.meta["tokens"])
    syms = _symbols(c)
    out = [x for x in extra if x is not None]
    for k in range(0, min(3, c.max_input) + 1):
        for t in itertools.product(syms, repeat=k):
            x = "".join(t)
            if x not in out:
                out.append(x)
            if len(out) >= DEFAULT_INPUTS:
                return out
    return out


def _symbols(c: Contract) -> list[str]:
    return [t for t in c.vocab[3:] if not _is_outcome(t)]


def _is_outcome(tok: str) -> bool:
    try:
        parse_outcome(tok)
        return True
    except Tm2nnError:
        return False


def _sequences(runner: NativeRunner, model: NativeTransformer, c: Contract, inputs: list[str],
               machine: Machine | None) -> list[list[int]]:
    """Each input's n_ctx tokens: the interpreter's run, else the model's greedy decoding."""
    n, T = model.n_ctx, int(model.meta["steps"])
    if machine is not None:
        return [c.ids(expected_tokens(machine, c, x, T, length=n)[0][:n]) for x in inputs]
    seqs = [c.ids(c.prompt(x)) for x in inputs]
    while len(seqs[0]) < n:
        logits, _ = runner.forward(torch.tensor(seqs))
        nxt = logits[:, -1].argmax(-1).tolist()
        seqs = [s + [t] for s, t in zip(seqs, nxt)]
    return seqs


def histories(model: NativeTransformer, inputs: list[str], count: int, seed: int = 0) -> list[list[int]]:
    """``count`` counterfactual histories: the prompt of one of ``inputs`` followed by uniformly
    random step tokens up to n_ctx.  The model's function is defined on any such sequence (each
    position recomputes the head, the last write there and the prompt cell from the tokens,
    docs/transformer_lens.md departure 3), so they exercise what the machine's own runs may not
    (a cell rewritten with another symbol, a revisit in every state)."""
    c = Contract.from_json(model.meta["tokens"])
    steps = [i for i, t in enumerate(c.vocab) if _is_outcome(t)]
    by_move = {mv: [i for i in steps if c.vocab[i][-1] == mv] for mv in "LRS"}
    # every other history walks back and forth (L, R, L, ..., or S throughout): every step
    # revisits a cell written one or two steps before, up to the last positions
    swing = ([by_move["L"], by_move["R"]] if by_move["L"] and by_move["R"] else [by_move["S"]] if by_move["S"] else [])
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count if steps else 0):
        prompt = c.ids(c.prompt(inputs[k % len(inputs)]))
        n = model.n_ctx - len(prompt)
        if k % 2 and swing:
            out.append(prompt + [int(rng.choice(swing[j % len(swing)])) for j in range(n)])
        else:
            out.append(prompt + [int(t) for t in rng.choice(steps, n)])
    return out


def expected_next(c: Contract, table: dict, tokens: list[str]) -> list[str | None]:
    """Per position from ``<go>`` on, the token the contract prescribes next for any sequence
    of step tokens: the outcome of (the state entered, the symbol the tokens leave under the
    head) by ``table`` (:func:`~.tokens.outcome_table`); ``<halt>`` after ``<halt>``."""
    tape = {k: a for k, a in enumerate(tokens[1:c.max_input + 1])}
    head, state, out = 0, c.start, []
    for p in range(c.max_input + 1, len(tokens)):
        tok = tokens[p]
        if tok == HALT:
            out.append(HALT)
            continue
        if p > c.max_input + 1:
            state, u, mv = parse_outcome(tok)
            tape[head] = u
            head += MOVES[mv]
        out.append(table.get((state, tape.get(head, c.blank)), HALT))
    return out


def step_kinds(c: Contract, tokens: list[str]) -> list[set[str]]:
    """For step s = 1, 2, .. (predicted at position max_input + s of ``tokens``): the ``when``
    kinds it belongs to (:data:`~.ground_truth.WHEN`)."""
    head, written, out = 0, set(), []
    for p in range(c.max_input + 1, len(tokens)):
        tok = tokens[p]
        if tok == HALT:
            out.append({"halted"})
            continue
        if p > c.max_input + 1:
            _, _, mv = parse_outcome(tok)
            written.add(head)
            head += MOVES[mv]
        kinds = {"all"}
        if head in written:
            kinds.add("revisit")
        elif 0 <= head < c.max_input:
            kinds.add("input")
        out.append(kinds)
    return out


def _fields(c: Contract) -> list[tuple]:
    """Per token id its decoded (state, write, move, halt)."""
    out = []
    for t in c.vocab:
        if t == HALT:
            out.append((None, None, None, True))
        elif _is_outcome(t):
            out.append((*parse_outcome(t), False))
        else:
            out.append((None, None, None, False))  # not a step token: no field holds
    return out


#: The smallest top-two logit gap of a decision: half the construction's margin (its
#: logits are 0/1 indicators, so an intact step wins by 1).  An ablated step below it has
#: no decided token (:data:`UNDECIDED`): without this, which of several tied logits
#: argmax picks (ties of 0 when a component that lights the winner is zeroed) would
#: depend on the weights' last bits, e.g. after a float32 round trip.
DECISION_GAP = 0.5
UNDECIDED = -1
_NO_FIELDS = ("(no decision)",) * 4


def decided(logits: torch.Tensor) -> np.ndarray:
    """Per position the token the logits decide, :data:`UNDECIDED` where the best two are
    within :data:`DECISION_GAP`."""
    top = logits.topk(2, dim=-1)
    out = top.indices[..., 0].numpy().copy()
    out[(top.values[..., 0] - top.values[..., 1]).numpy() < DECISION_GAP] = UNDECIDED
    return out


def _changes(pred: np.ndarray, base: np.ndarray, first: int, fields: list[tuple]) -> list[tuple[int, int, list[str]]]:
    """``(batch row, step, [fields changed])`` where ``pred`` differs from ``base`` (an
    undecided step changes every field)."""
    out = []
    for b, p in zip(*np.nonzero(pred[:, first:] != base[:, first:])):
        f0, f1 = (_NO_FIELDS if t == UNDECIDED else fields[t] for t in (base[b, first + p], pred[b, first + p]))
        out.append((int(b), int(p) + 1, [FIELDS[k] for k in range(4) if f0[k] != f1[k]]))
    return out


# -- the check -----------------------------------------------------------------------------------
def _live(model: NativeTransformer):
    """Live heads, live neurons (layer, k), and the residual dimensions some weight reads."""
    w, dh = model.weights, model.d_head
    heads, neurons, read = set(), set(), np.zeros(model.d_model, bool)
    for i in range(model.n_layers):
        p = f"layers.{i}."
        for h in range(model.n_heads):
            blk = slice(h * dh, (h + 1) * dh)
            if np.any(w[p + "attn.v.weight"][blk]) and np.any(w[p + "attn.o.weight"][:, blk]):
                heads.add((i, h))
        for k in np.nonzero(np.abs(w[p + "mlp.fc_out.weight"]).sum(0))[0]:
            neurons.add((i, int(k)))
        for key in ("attn.q.weight", "attn.k.weight", "attn.v.weight", "mlp.fc_in.weight"):
            read |= np.abs(w[p + key]).sum(0) > 0
    read |= np.abs(w["head.weight"]).sum(0) > 0
    return heads, neurons, read


def _written(model: NativeTransformer, p: _Piece) -> set[int]:
    """What the weights of ``p``'s heads and neurons write; for embedding dimensions, those
    that are theirs alone (no other embedding, head or neuron writes them)."""
    w, dh, out = model.weights, model.d_head, set()
    for i, h in p.heads:
        v, o = w[f"layers.{i}.attn.v.weight"], w[f"layers.{i}.attn.o.weight"]
        rows = [h * dh + r for r in range(dh) if np.any(v[h * dh + r])]
        out |= {int(d) for d in np.nonzero(np.abs(o[:, rows]).sum(1))[0]}
    for i, a, b in p.neurons:
        out |= {int(d) for d in np.nonzero(np.abs(w[f"layers.{i}.mlp.fc_out.weight"][:, a:b]).sum(1))[0]}
    if p.embed:
        other = np.abs(w["pos.weight" if p.hook_of_embed == "hook_embed" else "tok_embed.weight"]).sum(0)
        for i in range(model.n_layers):
            other = other + np.abs(w[f"layers.{i}.attn.o.weight"]).sum(1) + np.abs(w[f"layers.{i}.mlp.fc_out.weight"]).sum(1)
        out |= {d for d in p.embed if other[d] == 0}
    return out


def check_faithfulness(model: NativeTransformer, gt: dict, inputs: list[str] | None = None,
                       machine: Machine | None = None, n_histories: int = 8, seed: int = 0,
                       dtype: torch.dtype = torch.float64) -> FaithfulnessReport:
    """Check ``gt`` (a :func:`~.ground_truth.ground_truth` dict, possibly edited) against
    ``model`` on the runs from ``inputs`` (default :func:`default_inputs`) and on
    ``n_histories`` counterfactual :func:`histories`; see the module docstring."""
    if not isinstance(model, NativeTransformer) or "tokens" not in model.meta:
        raise Tm2nnError("faithfulness: expected a decoder-only NativeTransformer (build_native)")
    pieces = _parse(gt, model)
    c = Contract.from_json(model.meta["tokens"])
    inputs = default_inputs(model) if inputs is None else list(inputs)
    if not inputs:
        raise Tm2nnError("faithfulness: no inputs")
    for x in inputs:
        c.prompt(x)  # refuses a bad input with a Tm2nnError
    runner = NativeRunner(model, dtype)
    hist = histories(model, inputs, n_histories, seed)
    seqs = _sequences(runner, model, c, inputs, machine) + hist
    names = list(inputs) + [f"history {k} on {inputs[k % len(inputs)]!r}" for k in range(len(hist))]
    first = c.max_input + 1
    tokens = torch.tensor(seqs)
    kinds = [step_kinds(c, c.names(s)) for s in seqs]
    fields = _fields(c)

    def predict(ab: Ablation | None) -> np.ndarray:
        logits, _ = runner.forward(tokens, ab)
        return decided(logits)

    base = predict(None)
    rep = FaithfulnessReport(names, {})
    if machine is not None:
        table = outcome_table(machine)
        for b, x in enumerate(names):
            want = c.ids(expected_next(c, table, c.names(seqs[b])))
            rep.baseline[x] = [p + 1 for p, t in enumerate(want) if base[b, first + p] != t]
    inputs = names
    heads, neurons, read = _live(model)
    for name, p in pieces.items():
        r = ComponentResult(name, p.when)
        r.exercised = any(p.when in k for ks in kinds for k in ks)
        ab = Ablation(heads=list(p.heads), neurons=list(p.neurons), residual=[(0, list(p.embed))] if p.embed else [])
        for b, s, f in _changes(predict(ab), base, first, fields):
            hit = p.when in kinds[b][s - 1] and set(f) & p.determines
            (r.witnesses if hit else r.outside).append((inputs[b], s, f))
        r.witnesses, r.outside = r.witnesses[:KEEP], r.outside[:KEEP]
        got, lab = _written(model, p), model.residual_labels
        if p.embed:  # an embedding dimension is the embedding's alone
            if set(p.writes) - got:
                r.writes = f"{sorted(lab[d] for d in set(p.writes) - got)[:4]} also written by another piece"
        elif got - set(p.writes) or not got:
            # a listed dimension may stay unwritten (C.1's out:<halt> when no pair halts), none may be extra
            r.writes = f"its weights write {sorted(lab[d] for d in got)[:4]}, not the listed {p.writes[:4]}"
        rep.components[name] = r
    # everything unlisted, together
    in_heads = {h for p in pieces.values() for h in p.heads}
    in_neurons = {(i, k) for p in pieces.values() for i, a, b in p.neurons for k in range(a, b)}
    in_dims = {d for p in pieces.values() for d in p.writes}
    off_heads = [(i, h) for i in range(model.n_layers) for h in range(model.n_heads) if (i, h) not in in_heads]
    off_neurons = []
    for i in range(model.n_layers):
        off = [k for k in range(model.d_mlp) if (i, k) not in in_neurons]
        for _, grp in itertools.groupby(enumerate(off), key=lambda t: t[1] - t[0]):
            ks = [k for _, k in grp]
            off_neurons.append((i, ks[0], ks[-1] + 1))
    off_dims = [d for d in range(model.d_model) if d not in in_dims]
    ab = Ablation(heads=off_heads, neurons=off_neurons,
                  residual=[(i, off_dims) for i in range(model.n_layers + 1)] if off_dims else [])
    rep.complement = [(inputs[b], s, f) for b, s, f in _changes(predict(ab), base, first, fields)]
    rep.complement_ablated = {"heads": len(off_heads), "neurons": sum(b - a for _, a, b in off_neurons),
                              "residual": len(off_dims)}
    lab = model.residual_labels
    rep.coverage = [f"head {h} of layer {i} is live but in no component" for i, h in sorted(heads - in_heads)]
    rep.coverage += [f"neuron {k} of layer {i} is live but in no component" for i, k in sorted(neurons - in_neurons)][:KEEP]
    rep.coverage += [f"residual {lab[d]!r} is read but no component writes it" for d in np.nonzero(read)[0]
                     if int(d) not in in_dims]
    return rep


def load_ground_truth(path) -> dict:
    """A ground-truth JSON file (a folder: its ``ground_truth.json``), as a dict."""
    path = Path(path)
    if path.is_dir():
        path = path / "ground_truth.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise Tm2nnError(f"ground truth: no file {path}") from None
    except (OSError, ValueError) as e:
        raise Tm2nnError(f"ground truth: cannot read {path}: {e}") from None


def verify_ground_truth(model: NativeTransformer, ground_truth_path=None, *, gt: dict | None = None,
                        inputs: list[str] | None = None, machine: Machine | None = None,
                        n_histories: int = 8, dtype: torch.dtype = torch.float64) -> FaithfulnessReport:
    """What ``tm2nn verify --ground-truth`` calls: check ``gt`` (or the JSON at
    ``ground_truth_path``, a file or a folder holding ``ground_truth.json``; default the
    model's own :func:`~.ground_truth.ground_truth`) against ``model``."""
    if gt is None:
        gt = load_ground_truth(ground_truth_path) if ground_truth_path is not None else ground_truth(model)
    return check_faithfulness(model, gt, inputs=inputs, machine=machine, n_histories=n_histories, dtype=dtype)
