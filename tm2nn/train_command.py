"""``tm2nn train SOURCE --backend B [--init construction|perturbed:EPS|scratch] [-o PATH]``
(issue 38, Deliver 1; docs/learning.md): the construction's own architecture trained by
Adam or SGD on inputs drawn from the reference interpreter, reported every epoch, the best
weights saved in any model format.  The flags come from
:class:`tm2nn.training.options.TrainOptions` and each backend's ``training.Options``."""

from __future__ import annotations

import argparse
import json

from tm2nn import backends, interrupt
from tm2nn.api import train
from tm2nn.console import console, progress
from tm2nn.errors import Tm2nnError
from tm2nn.flags import add_source, option_help
from tm2nn.limits import flag_int
from tm2nn.modelfile import check_model_path
from tm2nn.options import fields_of
from tm2nn.training.options import TrainOptions
from tm2nn.training.report import epoch_line


def _option_fields():
    """(field, owner) of every train flag: the shared options, then each backend's own."""
    out = [(f, None) for f in fields_of(TrainOptions)]
    for b in backends.all():
        if b.training is not None:
            out += [(f, b.name) for f in fields_of(b.training.Options)]
    return out


def add_parser(sub) -> None:
    """The ``train`` verb on the CLI's subparsers (``handler``: :func:`run`)."""
    p = sub.add_parser("train", help="train a construction's own architecture (Adam/SGD) on the interpreter's "
                                     "runs; report errors, distance to the construction and margin per epoch")
    add_source(p, "the first that trains the source")
    p.add_argument("--steps", type=flag_int(1), metavar="T", help="machines: the step bound T the net is compiled for")
    p.add_argument("-o", "--output", metavar="PATH", help="write the best weights (.onnx, .pt or .safetensors)")
    p.add_argument("--json", action="store_true", help="print the training summary as one JSON line")
    for f, _owner in _option_fields():
        flag = f.flag
        if f.kind is bool:
            p.add_argument(flag, dest=f.name, action="store_const", const=not f.default, default=argparse.SUPPRESS,
                           help=option_help(f))
        else:
            p.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, metavar=f.metavar or f.name.upper(),
                           choices=[str(c) for c in f.choices] if f.choices else None,
                           help=option_help(f).replace("%", "%%"))
    p.set_defaults(handler=run)


def _values(args) -> dict:
    out = {}
    for f, _ in _option_fields():
        if f.name in vars(args):
            raw = getattr(args, f.name)
            if f.kind in (int, float) and f.choices is None and isinstance(raw, str):
                try:
                    raw = f.kind(raw)
                except ValueError:
                    raise Tm2nnError(f"{f.flag}: expected {'an integer' if f.kind is int else 'a number'}, "
                                     f"got {raw!r}") from None
            out[f.name] = raw
    return out


def run(args) -> int:
    out = check_model_path(args.output, "-o") if args.output else None
    values = _values(args)
    if out is not None and out.suffix == ".pt" and values.get("mask", "all") != "wiring":
        raise Tm2nnError("-o: a .pt holds the construction's stored weight entries only (its torch module's packed "
                         "parameters), and --mask all trains every entry: write .safetensors or .onnx, or train "
                         "with --mask wiring")
    c = None if args.json else console()
    show = (lambda row: c.print(epoch_line(row))) if c is not None else None
    with progress("training", quiet=args.json) as bar, interrupt.graceful():
        res = train(args.source, args.backend, format=args.format, name=args.name, steps=args.steps,
                    progress=bar, on_epoch=show, **values)
    if out is not None:
        if res.model is None:
            raise Tm2nnError("a width-padded net (--pad-width) is not the construction's shape: it is not saved")
        if out.suffix == ".pt" and res.summary["outside_wiring"]:  # checked up front; a safeguard
            raise Tm2nnError(f"the trained net has {res.summary['outside_wiring']:,} weights outside the "
                             "construction's stored entries, which a .pt cannot hold")
        res.model.save(out)
        res.summary["output"] = str(out)
    if args.json:
        print(json.dumps(res.summary, default=str))
    else:
        for line in res.lines[:1] + res.lines[1 + len(res.epochs):]:
            c.print(line)
        if out is not None:
            c.print(f"  wrote the best weights to {out}")
    return 130 if res.summary["interrupted"] else 0


__all__ = ["add_parser", "run"]
