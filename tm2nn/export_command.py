"""``tm2nn export SOURCE --to transformer-lens --steps T [--max-input N] [--dtype D] [-o DIR]``,
and what ``tm2nn info DIR`` and ``tm2nn verify DIR`` do on the folder it writes (issue 37;
docs/transformer_lens.md).  The folder is written by :func:`tm2nn.api.export`; its
verification boots it in TransformerLens (the ``tl`` extra) and replays every decoded token
against the interpreter (:mod:`tm2nn.backends.transformer.decoder_only.exported`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tm2nn.api import EXPORTS, export
from tm2nn.backends.transformer.decoder_only.exported import machine_of, verify_exported
from tm2nn.console import print_table, print_verify, verify_progress
from tm2nn.emit.transformer_lens import DTYPES, is_export, read_export
from tm2nn.errors import Tm2nnError
from tm2nn.flags import add_source
from tm2nn.limits import flag_int
from tm2nn.verify import DEFAULT_BUDGET


def add_parser(sub) -> None:
    """The ``export`` verb on the CLI's subparsers (``handler``: :func:`run`)."""
    p = sub.add_parser("export", help="compile a machine as a decoder-only transformer in a folder plain "
                                      "TransformerLens loads (config.json, model.safetensors, a model card)")
    add_source(p, None)
    p.add_argument("--to", required=True, choices=EXPORTS, help="the format: transformer-lens")
    p.add_argument("--steps", required=True, type=flag_int(1), metavar="T",
                   help="the step bound T: greedy decoding replays up to T machine steps")
    p.add_argument("--max-input", type=flag_int(0), metavar="N",
                   help="the longest input tape the prompt holds (default: the construction's)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32",
                   help="the weights' dtype (default float32); each is exact up to the T 'tm2nn info DIR' reports")
    p.add_argument("-o", "--output", metavar="DIR", help="the folder to write (default: the source's stem + -tl)")
    p.add_argument("--json", action="store_true", help="print the folder's summary as one JSON line")
    p.set_defaults(handler=run)


def run(args) -> int:
    t0 = time.perf_counter()
    out = export(args.source, args.steps, to=args.to, output=args.output, max_input=args.max_input,
                 dtype=args.dtype, format=args.format, name=args.name)
    facts = summary(out)
    facts["seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:
        print(json.dumps({"output": str(out), **facts}))
    else:
        print(f"wrote {out}/: {facts['layers']} layers, d_model {facts['d_model']}, {facts['heads']} heads, "
              f"n_ctx {facts['n_ctx']}, {facts['parameters']:,} parameters in {facts['dtype']}, "
              f"beta {facts['beta']} ({facts['seconds']:.1f} s)")
    return 0


def is_folder(path: str) -> bool:
    """Whether ``tm2nn info``/``verify`` was given an export folder rather than a source."""
    p = Path(path)
    if p.is_dir() and not is_export(p):
        raise Tm2nnError(f"{path}: a folder, and not a tm2nn TransformerLens export (no config.json of its format)")
    return p.is_dir()


def summary(folder) -> dict:
    """What ``tm2nn info DIR`` reports: sizes, β, dtype and the T each dtype is exact to."""
    ex = read_export(folder)
    b, t = ex.bridge, ex.contract
    return {"format": "transformer-lens", "source": t.get("source"), "construction": t.get("construction"),
            "paper": t.get("paper"), "d_model": b["d_model"], "layers": b["n_layers"], "heads": b["n_heads"],
            "d_head": b["d_head"], "d_mlp": b["d_mlp"], "n_ctx": b["n_ctx"], "d_vocab": b["d_vocab"],
            "parameters": t.get("parameters"), "beta": t.get("beta"), "dtype": t["dtype"], "steps": t.get("steps"),
            "max_input": t.get("max_input"), "exact_T": t.get("exact_T"), "exact_reason": t.get("exact_reason")}


def info(args) -> int:
    facts = summary(args.source)
    if args.json:
        print(json.dumps(facts))
        return 0
    rows = [[k, f"{v:,}" if isinstance(v, int) else str(v), ""] for k, v in facts.items()
            if k not in ("exact_T", "exact_reason", "paper", "construction")]
    rows += [[f"exact_T ({d})", f"{n:,}", "this file" if d == facts["dtype"] else ""]
             for d, n in (facts["exact_T"] or {}).items()]
    print_table(f"{args.source}: TransformerLens export", ["quantity", "value", ""], rows)
    print(f"construction: {facts['construction']} ({facts['paper']})")
    if facts.get("exact_reason"):
        print(f"exact up to exact_T: {facts['exact_reason']}")
    return 0


def verify(args) -> int:
    if args.ground_truth:
        return verify_ground_truth(args)
    given = [f for f, on in (("--find-beta", args.find_beta), ("--engines", args.engines), ("--no-onnx", args.no_onnx),
                             ("--min-samples", args.min_samples), ("--device", args.device != "cpu")) if on]
    if given:
        raise Tm2nnError(f"{given[0]} does not apply to an exported folder: it runs in TransformerLens on the CPU "
                         "against the interpreter (--input, --budget, --samples, --seed and --json apply)")
    with verify_progress(quiet=args.json) as bar:
        rep = verify_exported(args.source, inputs=args.input, budget=args.budget or DEFAULT_BUDGET,
                              samples=args.samples, seed=args.seed, progress=bar)
    if args.json:
        print(json.dumps({**rep.to_json(), "min_logit_margin": rep.margin}, default=str))
    else:
        print_verify(rep)
        print(f"  smallest logit gap of a greedy choice: {rep.margin:.4g}", file=sys.stdout)
    return 0 if rep.ok else 1


def verify_ground_truth(args) -> int:
    """``tm2nn verify --ground-truth DIR``: the folder's ``ground_truth.json`` checked by
    ablation on the folder's own weights, run with TransformerLens's semantics
    (:mod:`tm2nn.backends.transformer.decoder_only.faithfulness`): each listed component
    changes the field it determines where it says, and everything unlisted changes nothing.
    Exit 0 when faithful, 1 when not."""
    if not is_folder(args.source):
        raise Tm2nnError(f"--ground-truth checks an exported folder (tm2nn export SOURCE --to transformer-lens); "
                         f"{args.source} is not one")
    from tm2nn.backends.transformer.decoder_only.faithfulness import (
        verify_ground_truth as check,  # torch
    )

    ex = read_export(args.source)
    rep = check(ex.native(), Path(args.source), inputs=args.input, machine=machine_of(ex))
    if args.json:
        print(json.dumps(rep.to_json(), default=str))
    else:
        print("\n".join(rep.lines()))
    return 0 if rep.ok else 1
