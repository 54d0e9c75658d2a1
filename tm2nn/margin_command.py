"""``tm2nn margin MODEL_FILE``: the all-layer margin of the weights a model file holds
(issue 38, Deliver 2), trained or edited ones included.

The certificate is the backend's ``certified_margin`` analysis: it first checks that the
net computes its source on the input space (else "not certified: wrong on k of n inputs",
exit 1), then gives the tight bound when the weights are the construction's and the general
one otherwise (docs/relu_circuit.md and docs/transformer_margin.md, "A certificate for any
weights").  The backend's ``margin_attack`` analysis, where it has one, puts an attack's
upper bound beside it, within ``--budget`` seconds."""

from __future__ import annotations

import json
import math
import time

from tm2nn.api import load_model
from tm2nn.console import print_table


def _num(x) -> str:
    return "-" if x is None else ("inf" if x == math.inf else f"{x:.4g}")


def model_margin(args) -> int:
    """The ``margin`` verb on a model file: 0 certified, 1 not certified (the net is wrong
    on some input of the space)."""
    model = load_model(args.source)
    cert = model.analysis("certified_margin")(model)
    row = {"certified": bool(cert.get("certified", True)), "wrong": cert.get("wrong", 0), "n": cert.get("n"),
           "space": cert.get("space"), "weights": cert.get("weights"), "radius": cert["radius"],
           "radius_tight": cert.get("radius_tight"), "radius_general": cert.get("radius_general"),
           "attack": None, "message": cert.get("message")}
    if row["certified"] and model.spec.has("margin_attack"):
        deadline = None if args.budget is None else time.perf_counter() + args.budget
        att = model.spec.analyses["margin_attack"](model, samples=args.samples, trials=args.trials, seed=args.seed,
                                                    deadline=deadline, device=args.device)
        row["attack"] = att["eps"]
        row["attack_inputs"] = att["inputs"]
    if args.json:
        print(json.dumps(row, default=str))
    elif not row["certified"]:
        print(f"{args.source}: {cert['message']} ({cert['space']}; first: {cert.get('first_wrong')})")
    else:
        print_table(f"{args.source}: per-layer all-layer margin of its weights ({row['weights']}), "
                    f"checked right on {row['space']}",
                    ["certified (lower bound)", "tight", "general", "random attack (upper bound)"],
                    [[_num(row["radius"]), _num(row["radius_tight"]), _num(row["radius_general"]),
                      _num(row["attack"])]], right=(0, 1, 2, 3))
    return 0 if row["certified"] else 1
