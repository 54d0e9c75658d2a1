"""The ground truth of the decoder-only transformer (issue 37, deliverable 4): which
TransformerLens components implement each claim of Wei, Chen & Ma's App. C, as JSON a
circuit-discovery tool scores against (docs/transformer_lens.md, "The ground truth").

:func:`ground_truth` turns a :class:`~tm2nn.nets.native.NativeTransformer`'s
``components`` (written by :mod:`.build` next to the weights they describe) into
TransformerLens's names, and adds the embedding pieces (the residual dimensions
``tok_embed`` and ``pos.weight`` write, grouped by the fact of App. C they carry).
Plain Python: no torch.  :mod:`.faithfulness` checks a ground-truth dict against a model.

Hook names are TransformerLens 4.3.0's ``TransformerBridge`` (``boot_native``) hook
points, read from ``run_with_cache`` on a TL-native model: ``hook_embed``,
``hook_pos_embed``, ``blocks.{i}.attn.hook_z`` (``[batch, pos, head, d_head]``),
``blocks.{i}.mlp.hook_post`` (``[batch, pos, d_mlp]``), ``blocks.{i}.hook_resid_pre``,
``blocks.{i}.hook_resid_mid`` and ``blocks.{i}.hook_resid_post`` (``[batch, pos, d_model]``).
"""

from __future__ import annotations

import re

from tm2nn.errors import Tm2nnError
from tm2nn.nets.native import NativeTransformer

SCHEMA = "tm2nn.ground_truth/1"
HOOK_SOURCE = ("TransformerLens 4.3.0 TransformerBridge.boot_native hook points (run_with_cache keys); "
               "TransformerLens's HookedTransformer uses the same names")
FIELDS = ("state", "write", "move", "halt")
#: at which steps a component matters (docs/transformer_lens.md, "The ground truth").  Step s
#: is predicted at the position of step s-1's token (``<go>`` for s = 1), where the head is
#: at l_{s-1}.
WHEN = {
    "all": "every step s whose position holds <go> or a step token (up to and including the step that "
           "emits <halt>)",
    "revisit": "the steps of 'all' whose head cell l_{s-1} was written by an earlier step t <= s-1",
    "input": "the steps of 'all' whose head cell l_{s-1} no step has written and which is a prompt cell "
             "(0 <= l_{s-1} < max_input)",
    "halted": "every step s whose position holds <halt> (after the run halted)",
}

#: the embedding pieces: (name, hook, label prefixes or labels, when, cite)
EMBEDDINGS = (
    ("embedding: the state entered (st:*)", "hook_embed", ("st:",), "all",
     "Wei, Chen & Ma, Lemma C.1: the state z of the decoder's input (App. C.1's st); an outcome token "
     "carries the state it enters, <go> the start state"),
    ("embedding: the symbol written (wr:*)", "hook_embed", ("wr:",), "revisit",
     "Wei, Chen & Ma, Claim C.6: the symbol u_t step t wrote ((C.2)), the value C.6 copies"),
    ("embedding: the move (tok:move)", "hook_embed", ("tok:move",), "all",
     "Wei, Chen & Ma, Lemma C.2: the move m_t in {-1, 0, 1} (tm2nn's head position (a) averages it)"),
    ("embedding: the step marker (tok:step)", "hook_embed", ("tok:step",), "revisit",
     "Wei, Chen & Ma, Claim C.4 (and C.5, C.6) over step tokens only: the gate of the keys 2·bit - tok:step and "
     "the value C.4 and C.5 read (tm2nn departure 4: step indices are positions)"),
    ("embedding: the <bos> sink (tok:bos)", "hook_embed", ("tok:bos",), "all",
     "Wei, Chen & Ma, App. C's null key K_0 and value V_0 = 0 as a <bos> sink at position 0 "
     "(tm2nn departure 2): C.4-C.7's score one below the best"),
    ("embedding: the prompt's symbols (inp:*)", "hook_embed", ("inp:",), "input",
     "Wei, Chen & Ma, Lemma C.7: the encoder's E[:, x_k], the value of the attention to the prompt "
     "(tm2nn departure 1)"),
    ("embedding: <halt> (tok:halt)", "hook_embed", ("tok:halt",), "halted",
     "Wei, Chen & Ma, Lemma C.1's halting, as the <halt> token (tm2nn departure 8): after <halt>, <halt>"),
    ("positional embedding: Bin(p) (pos:*)", "hook_pos_embed", ("pos:",), "all",
     "Wei, Chen & Ma §4.1: the positional encoding β(i) = Bin(i), read by the head position (b) "
     "and by the step bits of C.5"),
    ("positional embedding: the prompt cells, Bin(k + T) (cell:*)", "hook_pos_embed", ("cell:",), "input",
     "Wei, Chen & Ma (C.1): the encoder's β(k) for cell k (tm2nn's offset T), the key of Lemma C.7 "
     "(tm2nn departure 1)"),
)
_CLAIM = re.compile(r"(Claim|Lemma|Prop\.) (C\.\d+|\d+\.\d+)")


def claim_of(cite: str) -> str:
    """The paper's statement a citation names first (``"Claim C.4"``, ``"Prop. 3.4"``), or
    ``"§4.1"`` / the App. C null key for the pieces that cite those."""
    m = _CLAIM.search(cite)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    if "§4.1" in cite:
        return "§4.1"
    if "null key" in cite:
        return "App. C null key"
    raise Tm2nnError(f"ground truth: citation {cite!r} names no claim of the paper")


def _hook_entries(layer: int | None, heads: list[int], neurons: list[int] | None, hook: str | None,
                  dims: list[int]) -> list[dict]:
    if hook is not None:
        return [{"hook": hook, "dims": list(dims)}]
    out = [{"hook": f"blocks.{layer}.attn.hook_z", "head": int(h)} for h in heads]
    if neurons:
        out.append({"hook": f"blocks.{layer}.mlp.hook_post", "neurons": [int(neurons[0]), int(neurons[1])]})
    return out


def _writes_at(layer: int | None, heads, neurons) -> str:
    if layer is None:
        return "blocks.0.hook_resid_pre"
    return f"blocks.{layer}.hook_resid_post" if neurons else f"blocks.{layer}.hook_resid_mid"


def entry(name: str, *, layer: int | None, heads: list[int], neurons: list[int] | None, writes: list[str],
          determines: list[str], when: str, cite: str, labels: list[str], hook: str | None = None) -> dict:
    """One component of the ground truth, in TransformerLens's names."""
    ix = {lab: i for i, lab in enumerate(labels)}
    idx = [ix[w] for w in writes]
    return {"claim": claim_of(cite), "cite": cite, "kind": "embedding" if hook else ("attention" if heads else "mlp"),
            "layer": layer, "heads": list(heads), "neurons": list(neurons) if neurons else None,
            "hooks": _hook_entries(layer, heads, neurons, hook, idx), "writes": list(writes), "writes_idx": idx,
            "writes_at": _writes_at(layer, heads, neurons), "determines": list(determines), "when": when}


def ground_truth(model: NativeTransformer) -> dict:
    """The ground-truth JSON of ``model`` (schema :data:`SCHEMA`): every component with its
    claim, citation, TransformerLens hook points, layer, heads, neuron range ``[a, b)``,
    residual dimensions written (labels and indices into ``residual_labels``), the decoded
    fields it determines and at which steps (``when``, defined in ``"when_defs"``); with the
    vocabulary, ``residual_labels`` and an index ``claims`` from each claim to its components.
    ``json.dumps`` writes it as is."""
    if not isinstance(model, NativeTransformer):
        raise Tm2nnError("ground truth: expected a NativeTransformer (tm2nn's decoder-only build)")
    if not model.components:
        raise Tm2nnError("ground truth: the model lists no components (build it with build_native)")
    labels = list(model.residual_labels)
    comps: dict[str, dict] = {}
    for name, c in model.components.items():
        comps[name] = entry(name, layer=int(c["layer"]), heads=c["heads"], neurons=c["neurons"], writes=c["writes"],
                            determines=c["determines"], when=c["when"], cite=c["cite"], labels=labels)
    for name, hook, groups, when, cite in EMBEDDINGS:
        writes = [lab for lab in labels if any(lab == g or (g.endswith(":") and lab.startswith(g)) for g in groups)]
        if not writes:
            raise Tm2nnError(f"ground truth: the model has no residual dimension for {name!r}")
        comps[name] = entry(name, layer=None, heads=[], neurons=None, writes=writes, determines=list(FIELDS),
                            when=when, cite=cite, labels=labels, hook=hook)
    listed = {w for c in comps.values() for w in c["writes"]}
    claims: dict[str, list[str]] = {}
    for name, c in comps.items():
        claims.setdefault(c["claim"], []).append(name)
    meta = model.meta
    return {"schema": SCHEMA, "hook_names": HOOK_SOURCE,
            "paper": meta.get("paper"), "construction": meta.get("construction"), "machine": meta.get("machine"),
            "steps": meta.get("steps"), "max_input": meta.get("max_input"),
            "n_layers": model.n_layers, "n_heads": model.n_heads, "d_head": model.d_head, "d_mlp": model.d_mlp,
            "d_model": model.d_model, "fields": list(FIELDS), "when_defs": dict(WHEN),
            "ablation": "zero: blocks.{i}.attn.hook_z[:, :, head, :], blocks.{i}.mlp.hook_post[:, :, a:b], "
                        "hook_embed / hook_pos_embed[:, :, dims]",
            "vocab": list(model.vocab), "residual_labels": labels,
            "unlisted_labels": [lab for lab in labels if lab not in listed],
            "components": comps, "claims": claims}
