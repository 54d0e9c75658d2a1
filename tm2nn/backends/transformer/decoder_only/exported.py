"""``tm2nn verify DIR`` on a TransformerLens export: the folder booted in TransformerLens
(:func:`tm2nn.emit.transformer_lens.load_exported`), and every step of its greedy decoding
compared with the reference interpreter's step (the state entered, the symbol written, the
move; ``<halt>`` after the halting step), on every tape of up to ``min(max_input, 8)``
cells when there are at most 4,096 of them, else on random ones within the budget.

The check is teacher-forced: one forward over the prompt and the interpreter's whole run
(its last token dropped), and the argmax at every position compared with the run's next
token.  Attention is causal, so the logits at a position depend only on the tokens up to
it: where every argmax is the run's next token, greedy decoding from the prompt emits
exactly that run, and the first position where they differ is where greedy decoding
leaves it.  (One forward instead of T: a full-prefix greedy decode of T steps costs T
forwards.)  The smallest gap between the chosen logit and the next is reported, so a
reader sees how far a rounding would have to go to change a step.

The replay reads the folder alone: the machine from ``tm2nn.source_text`` in
``config.json``, the prompt and the tokens from its vocabulary; the tokens expected are the
token contract's (:mod:`.tokens`), the one definition the construction is built and tested
against."""

from __future__ import annotations

import itertools
import secrets
import time

from tm2nn.backends.transformer.decoder_only.tokens import Contract
from tm2nn.backends.transformer.decoder_only.tokens import expected_tokens as contract_tokens
from tm2nn.emit.transformer_lens import GO, HALT, Exported, load_exported, read_export
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Machine
from tm2nn.limits import check_memory, check_seed, memory_limit
from tm2nn.syntax import parse_text, select
from tm2nn.verify.check import DEFAULT_BUDGET, InputSpace, Mismatch, VerifyReport
from tm2nn.verify.runs import EXHAUSTIVE_CELLS, EXHAUSTIVE_TAPES

#: inputs checked in one forward
BATCH = 32


def machine_of(ex: Exported) -> Machine:
    """The machine the export was compiled from (``tm2nn.source_text``)."""
    t = ex.contract
    if not t.get("source_text"):
        raise Tm2nnError(f"{ex.folder}: config.json records no source text (tm2nn.source_text): nothing to replay")
    items = parse_text(t["source_text"], t.get("source_format") or "tm", "tm2nn.source_text")
    m = select(items, t.get("source_name"), "tm2nn.source_text")
    if not isinstance(m, Machine):
        raise Tm2nnError(f"{ex.folder}: tm2nn.source_text holds no machine")
    return m


def expected_tokens(m: Machine, text: str, steps: int) -> list[str]:
    """The token contract's outputs for ``m`` on ``text``: one ``STATE|WRITE|MOVE`` per step
    of the interpreter's run (at most ``steps``), then ``<halt>`` if it halted by then; the
    construction's own expectation (:func:`.tokens.expected_tokens`: a counted no-rule step
    is the ``<halt>`` itself), without the prompt."""
    toks, _ = contract_tokens(m, Contract.of(m, len(text)), text, steps)
    return toks[len(text) + 2:]


def decode(bridge, ex: Exported, texts: list[str], n: int, margins: list | None = None) -> list[list[str]]:
    """``n`` tokens decoded greedily by ``bridge`` after each text's prompt (a batch: the
    prompts have one length), as token names; ``margins`` (a list) gets, per text, the
    smallest gap between the chosen logit and the next one over its decoded tokens."""
    import torch  # the tl extra's torch: loaded with the bridge

    vocab = ex.contract["vocab"]
    seq = torch.tensor([ex.prompt(t) for t in texts], dtype=torch.long)
    gap = torch.full((len(texts),), float("inf"), dtype=torch.float64)
    with torch.no_grad():
        for _ in range(n):
            logits = bridge(seq)[:, -1]
            top = logits.topk(min(2, logits.shape[-1]), dim=-1).values.to(torch.float64)
            if top.shape[-1] == 2:
                gap = torch.minimum(gap, top[:, 0] - top[:, 1])
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    if margins is not None:
        margins.extend(gap.tolist())
    return [[vocab[i] for i in row[-n:]] for row in seq.tolist()] if n else [[] for _ in texts]


def teacher_forced(bridge, ex: Exported, texts: list[str], runs: list[list[str]],
                   margins: list | None = None) -> list[list[str]]:
    """Per text, the argmax token after the prompt and each prefix of its ``run`` (one
    forward over prompt + run, padded to the longest run of the batch; each row is read
    only up to its own length, and causal attention keeps the padding out of it)."""
    import torch  # the tl extra's torch: loaded with the bridge

    vocab = ex.contract["vocab"]
    at = {s: i for i, s in enumerate(vocab)}
    n = max(len(r) for r in runs)
    rows = [ex.prompt(t) + [at[s] for s in r[:-1]] for t, r in zip(texts, runs)]
    p = len(ex.prompt(texts[0]))  # every prompt has this length
    seq = torch.tensor([r + [r[-1]] * (p + n - 1 - len(r)) for r in rows], dtype=torch.long)
    with torch.no_grad():
        logits = bridge(seq)[:, p - 1:]
    top = logits.topk(min(2, logits.shape[-1]), dim=-1).values.to(torch.float64)
    out = []
    for i, r in enumerate(runs):
        k = len(r)
        if margins is not None and top.shape[-1] == 2 and k:
            margins.append(float((top[i, :k, 0] - top[i, :k, 1]).min()))
        out.append([vocab[j] for j in logits[i, :k].argmax(-1).tolist()])
    return out


def first_difference(want: list[str], got: list[str]) -> tuple[int, str, str, str] | None:
    """``(step, field, expected, got)`` of the first token that differs, or None."""
    for k, (w, g) in enumerate(zip(want, got)):
        if w == g:
            continue
        if HALT in (w, g) or "|" not in g:
            return k + 1, "halt", w, g
        for name, a, b in zip(("state", "write", "move"), w.split("|"), g.split("|")):
            if a != b:
                return k + 1, name, a, b
    return None


def verify_exported(folder, *, inputs: list[str] | None = None, budget: float = DEFAULT_BUDGET,
                    samples: int | None = None, seed: int | None = None, progress=None) -> VerifyReport:
    """The export at ``folder`` against the interpreter (see the module doc)."""
    ex = read_export(folder)
    m, t = machine_of(ex), ex.contract
    if t.get("go") not in (None, GO) or t.get("halt") not in (None, HALT):
        raise Tm2nnError(f"{folder}: a token contract this tm2nn does not know ({t.get('go')}, {t.get('halt')})")
    steps, n_ctx = int(t["steps"]), int(ex.bridge["n_ctx"])
    n = min(steps + 1, n_ctx - (int(t["max_input"]) + 2) + 1)  # the last token predicted needs no position
    space = InputSpace(m.alphabet, 0, min(int(t["max_input"]), EXHAUSTIVE_CELLS), EXHAUSTIVE_TAPES)
    seed = check_seed("seed", seed)
    if inputs is not None:
        mode, texts, how = "given", list(inputs), "the given inputs"
    elif space.small:
        mode, texts, how = "exhaustive", list(space.all()), f"every one of the {space.size:,} {space.describe()}"
    else:
        seed = secrets.randbits(32) if seed is None else seed
        mode, how = "random", f"random {space.describe()} (seed {seed})"
        texts = list(itertools.islice(space.random(seed), samples or 256))
    for text in texts:
        ex.prompt(text)  # refused before any work: too long, or a symbol that is no token
    b = ex.bridge
    length = int(t["max_input"]) + 2 + n - 1
    # one input's forward: the residual stream, q k v, the scores, the MLP's hidden layer, the
    # logits (float64 at worst, twice for what TransformerLens's hooks keep)
    per_input = 2 * 8 * length * (8 * b["d_model"] + 3 * b["n_heads"] * b["d_head"] + b["n_heads"] * length
                                  + b["d_mlp"] + b["d_vocab"])
    check_memory(per_input, f"one input's forward over {length:,} positions")
    batch = max(1, min(BATCH, memory_limit() // 4 // per_input))
    bridge = load_exported(folder)
    rep = VerifyReport("transformer-lens", mode, 0, seed if mode == "random" else None, engines={"transformer_lens": 0},
                       max_deviation={"transformer_lens": 0.0}, space=space.count, budget=budget, how=how,
                       reference="the interpreter", compares="every decoded token (state, write, move, halt)")
    t0, seen, margins = time.perf_counter(), set(), []
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        wants = [expected_tokens(m, text, steps)[:n] for text in chunk]
        for text, want, got in zip(chunk, wants, teacher_forced(bridge, ex, chunk, wants, margins)):
            d = first_difference(want, got)
            if d is not None:
                rep.engines["transformer_lens"] += 1
                rep.first = rep.first or Mismatch.of("transformer_lens", text, d)
        rep.n_inputs += len(chunk)
        seen.update(chunk)
        elapsed = time.perf_counter() - t0
        if progress is not None:
            progress(rep.n_inputs, len(texts), elapsed, budget)
        if mode != "given" and elapsed >= budget:
            break
    if rep.n_inputs == 0:
        raise Tm2nnError(f"the verification compared no input ({how}): give at least one input")
    rep.seconds = time.perf_counter() - t0
    rep.cut = rep.n_inputs < len(texts)
    rep.stopped_by = "inputs" if mode == "given" else "budget" if rep.cut else "space" if mode == "exhaustive" else "samples"
    rep.distinct = len({x for x in seen if space.contains(x)})
    rep.coverage = rep.distinct / rep.space if rep.space else 1.0
    rep.complete = rep.distinct >= rep.space
    rep.margin = min(margins, default=float("inf"))  # the smallest logit gap of a greedy choice
    return rep


__all__ = ["verify_exported", "expected_tokens", "decode", "teacher_forced", "first_difference", "machine_of"]
