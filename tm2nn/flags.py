"""Command-line flags from the backends' option dataclasses (:mod:`tm2nn.options`).

A verb that compiles (or trains) gets one flag per option of any backend; its help lists
them in one group per backend (titled with the backend and its paper), each with that
backend's help text, and ``--backend NAME --help`` lists only NAME's.  A boolean option on
by default is the flag ``--no-NAME``, whose help says that it turns the option off.  After
parsing, :func:`backend_values` keeps the
options the user gave, converts them with the chosen backend's field types, and refuses
an option the chosen backend does not take, naming the ones it does.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import re

from tm2nn import backends, limits, threads
from tm2nn.devices import check_device
from tm2nn.errors import Tm2nnError
from tm2nn.limits import MAX_SOURCE_BYTES, flag_float, flag_int, flag_size
from tm2nn.options import fields_of
from tm2nn.verify.check import FEW_SAMPLES


class _Help(argparse.Action):
    """``-h``/``--help``: after ``--backend NAME``, only that backend's option group."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "backend", None)  # run's default (interp) is not a choice of options
        parser.only_backend = None if given == parser.get_default("backend") else given
        parser.print_help()
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse that raises Tm2nnError (exit 2, our format) instead of printing its own,
    takes no abbreviated flag (``--max-step`` is not ``--max-steps``), and names the close
    flags of an unknown one with the verb's own help."""

    only_backend: str | None = None  # set by --backend NAME --help

    def __init__(self, *args, add_help: bool = True, parents=(), **kw):
        kw["allow_abbrev"] = False
        super().__init__(*args, add_help=False, **kw)
        self.register("action", "help", _Help)
        if add_help:
            self.add_argument("-h", "--help", action="help", help="show this help message and exit "
                              "(after --backend NAME: only NAME's options)")
        for parent in parents:  # after -h, as argparse orders them
            self._add_container_actions(parent)
            self._defaults.update(parent._defaults)

    def error(self, message: str):  # noqa: D401
        """One line: ``--samples: expected an integer ≥ 1, got -1``, or the problem and
        where the options are listed."""
        flag, n = re.subn(r"^argument ([^:]+): ", r"\1: ", message)
        raise Tm2nnError(flag if n else f"{message} (see '{self.prog} --help')")

    def parse_args(self, args=None, namespace=None):
        """Unknown arguments are reported by the verb's parser, with the flags they are close to."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            p = self._chosen(ns)
            flags = [f for f in p._option_string_actions if f.startswith("--")]
            close = [m for x in extras if x.startswith("-") for m in
                     difflib.get_close_matches(x.split("=", 1)[0], flags, n=1, cutoff=0.6)]
            hint = f"; did you mean {' or '.join(dict.fromkeys(close))}?" if close else ""
            p.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return ns

    def _chosen(self, ns) -> "Parser":
        """The (sub)parser of the verb ``ns`` holds (self without one)."""
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction) and getattr(ns, a.dest, None) in a.choices:
                return a.choices[getattr(ns, a.dest)]._chosen(ns)
        return self

    def format_help(self) -> str:
        groups = self._action_groups
        if self.only_backend is not None:
            self._action_groups = [g for g in groups if getattr(g, "backend", self.only_backend) == self.only_backend]
        try:
            return super().format_help()
        finally:
            self._action_groups = groups

    def _get_values(self, action, arg_strings):
        """argparse drops a value of ``--`` (``--seed=--``) and stores ``[]``, unchecked."""
        if action.option_strings and action.nargs is None and arg_strings in (["--"], []):
            self.error(f"argument {action.option_strings[-1]}: expected one argument")
        return super()._get_values(action, arg_strings)


def add_source(p, default_help: str | None = "the first that takes the source") -> None:
    """The source file and the flags that pick an item of it (and the backend)."""
    p.add_argument("source", help="a machine or circuit file")
    p.add_argument("--format", help="override the format guessed from the extension "
                   "(tm, circ, std, morphett, tmio, bench, aag, aig, blif)")
    p.add_argument("--name", help="pick one machine/circuit from a file holding several "
                   "(by name or 1-based index; default: the first)")
    if default_help:
        names = backends.names()
        p.add_argument("--backend", choices=names, metavar="NAME",
                       help=f"the construction: {', '.join(names)} (default: {default_help})")


def option_fields(verb: str) -> dict:
    """flag -> [(backend, field)] for the backend options a verb takes."""
    out: dict = {}
    for b in backends.all():
        cls = (b.trainer.Options if b.trainer else None) if verb == "learn" else b.Options
        if cls is None or (verb == "run" and b.stepping is None):
            continue
        for f in fields_of(cls):
            if f.cli and not (verb == "run" and f.name == b.stepping.option):
                out.setdefault(f.flag, []).append((b.name, f))
    return out


def flag_of(name: str) -> str:
    """The command-line flag of an option name (for OptionError messages)."""
    for verb in ("compile", "learn"):
        for flag, owners in option_fields(verb).items():
            if owners[0][1].name == name:
                return flag
    return "--" + name.replace("_", "-")


def option_help(f) -> str:
    """A backend option's help as its flag does it: ``--no-NAME`` turns off what is on."""
    if f.kind is bool:
        return f"turn off (on by default): {f.help}" if f.default else f.help
    return f.help + (f" (default: {f.default})" if f.default is not None else "")


def add_backend_options(p, verb: str) -> None:
    """One flag per backend option of ``verb``, listed in a group per backend (a flag that
    several backends take is parsed once, and shown in each of their groups with that
    backend's help)."""
    groups = {}
    for b in backends.all():
        groups[b.name] = g = p.add_argument_group(f"{b.name} options ({b.summary})")
        g.backend = b.name
    hidden = p.add_argument_group()
    for flag, owners in option_fields(verb).items():
        f = owners[0][1]
        if f.kind is bool:
            action = hidden.add_argument(flag, dest=f.name, action="store_const", const=not f.default,
                                         default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            action = hidden.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                                         metavar=f.metavar or (None if f.choices else f.name.upper()),
                                         choices=[str(c) for c in f.choices] if f.choices else None)
        for b, field in owners:  # shown, not parsed: argparse lists a group's _group_actions
            shown = copy.copy(action)
            shown.help = option_help(field).replace("%", "%%")
            groups[b]._group_actions.append(shown)
    for g in groups.values():
        if not g._group_actions:
            p._action_groups.remove(g)
    if p.epilog is None and len(groups) > 1:
        p.epilog = "--backend NAME --help lists only NAME's options."


def backend_values(args, spec, verb: str) -> dict:
    """The backend options given on the command line, converted by the chosen backend's
    field types; an option another backend owns is an error naming the ones it takes.
    Without a backend (``spec`` None) every given option is kept, typed by its first owner."""
    cls = None if spec is None else (spec.trainer.Options if spec.trainer else None) if verb == "learn" else spec.Options
    mine = {f.name: f for f in fields_of(cls)} if cls else {}
    values = {}
    for flag, owners in option_fields(verb).items():
        name = owners[0][1].name
        if name not in vars(args):
            continue
        raw = getattr(args, name)
        f = mine.get(name) if spec is not None else owners[0][1]
        if f is None:
            takes = [fl for fl, ow in option_fields(verb).items() if any(b == spec.name for b, _ in ow)]
            order = {g.flag: i for i, g in enumerate(mine.values())}
            takes.sort(key=lambda fl: order.get(fl, 0))
            raise Tm2nnError(f"the {spec.name} backend takes no option {flag} (it is an option of "
                             f"{', '.join(b for b, _ in owners)}); {verb} with {spec.name} takes: "
                             f"{', '.join(takes) or 'no options'}")
        if f.kind in (int, float) and f.choices is None:
            try:
                raw = f.kind(raw)
            except ValueError:
                raise Tm2nnError(f"{flag}: expected {'an integer' if f.kind is int else 'a number'}, "
                                 f"got {raw!r}") from None
        values[name] = raw
    return values


def limit_flags(p):
    """``p`` with the flags every verb takes that bound what a request may cost
    (:mod:`tm2nn.limits`): ``--max-memory`` and ``--max-source-size``, and ``--threads``
    (:mod:`tm2nn.threads`); used as a parent parser."""

    g = p.add_argument_group("limits")
    g.add_argument("--max-memory", type=flag_size, metavar="SIZE",
                   help="refuse work estimated above this much memory (e.g. 8G; default: 80%% of the memory "
                   "available; env TM2NN_MAX_MEMORY)")
    g.add_argument("--max-source-size", type=flag_size, metavar="SIZE",
                   help=f"refuse files larger than this (sources, training sets, input lists; default "
                   f"{MAX_SOURCE_BYTES // 2**20}M; env TM2NN_MAX_SOURCE)")
    g.add_argument("--threads", type=flag_int(1, threads.MAX_THREADS), metavar="N",
                   help=f"threads for torch, onnxruntime and numba (default: {threads.DEFAULTS[threads.STEP]}, "
                   f"measured fastest for tm2nn's small per-step graphs; env {threads.ENV})")
    return p


@contextlib.contextmanager
def applied_limits(args):
    """The limit flags' values (memory, source size, threads) in force for one command,
    and the defaults again after it (the CLI runs in-process in tests and the demo)."""
    limits.set_memory_limit(args.max_memory)
    limits.set_source_limit(args.max_source_size)
    threads.set_threads(args.threads)
    try:
        yield
    finally:
        limits.set_memory_limit(None)
        limits.set_source_limit(None)
        threads.set_threads(None)


def add_statistics_flags(p) -> None:
    """``info --statistics [--eps E] [--delta D]`` (:mod:`tm2nn.verify.statistics`)."""

    g = p.add_argument_group("statistics (Wei, Chen & Ma Lemma 2.3)")
    g.add_argument("--statistics", action="store_true",
                   help="the sample complexity: the measured alpha, the certified margin gamma, p, w, d and the "
                   "resulting n, next to the paper's theorem")
    g.add_argument("--eps", type=flag_float(0.0, 1.0, open_low=True), metavar="E",
                   help="--statistics: the target 0-1 error (default 0.1)")
    g.add_argument("--delta", type=flag_float(0.0, 1.0, open_low=True), metavar="D",
                   help="--statistics: the failure probability (default 0.01, Definition 2.1's 0.99)")


def statistics_values(args) -> dict | None:
    """``{"eps", "delta"}`` when ``--statistics`` is given, else None; ``--eps`` or
    ``--delta`` without it is an error."""
    if not getattr(args, "statistics", False):
        given = [f for f, v in (("--eps", args.eps), ("--delta", args.delta)) if v is not None]
        if given:
            raise Tm2nnError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} only with --statistics")
        return None
    return {"eps": 0.1 if args.eps is None else args.eps, "delta": 0.01 if args.delta is None else args.delta}


def engine_list(known: list[str]):
    """An argparse type: ``"torch,index"`` -> ``["torch", "index"]``, each a known engine."""
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if n not in known]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not an engine (choose from "
                                             f"{', '.join(known)})")
        return names
    return parse


def device_flag(text: str) -> str:
    """An argparse type: ``--device``'s name, canonical (:func:`tm2nn.devices.check_device`;
    whether this machine has it is checked when the verb starts)."""
    try:
        return check_device(text)
    except Tm2nnError as e:
        raise argparse.ArgumentTypeError(e.message.replace("device: ", "", 1)) from None


def add_device(p, what: str) -> None:
    """``--device`` (default cpu): where ``what`` runs (docs/guide.md, "Devices")."""
    p.add_argument("--device", type=device_flag, default="cpu", metavar="DEVICE",
                   help=f"where {what} runs: cpu (default), cuda, cuda:N or mps; only the torch engine runs "
                   "off the CPU (onnxruntime, the fused and the index engines run on the CPU only)")


#: seconds the margin attacks take by default: the defaults finish in about a minute
MARGIN_BUDGET = 45.0


def add_sample_flags(p, verb: str = "verify") -> None:
    """``verify``'s ``--budget``, ``--samples`` and ``--min-samples`` (how many inputs a
    check takes; :func:`tm2nn.verify.verify_compiled`); ``margin``'s ``--budget``, the
    time its attacks may take (the certified bound is not budgeted)."""
    if verb == "margin":
        p.add_argument("--budget", type=flag_float(0.0, open_low=True), default=MARGIN_BUDGET, metavar="SECONDS",
                       help=f"time for all the attacks, shared by the rows (default: {MARGIN_BUDGET:g} s); the "
                       "table's 'attacked' column and the JSON's 'attacked' say which inputs and steps it cut")
        return
    p.add_argument("--budget", type=flag_float(0.0, open_low=True), default=None, metavar="SECONDS",
                   help="random inputs: check for this long (default: 60 s); an exhaustive check stops there too")
    p.add_argument("--samples", type=flag_int(1), help="random inputs: at most this many (default: as many as the "
                   "budget allows)")
    p.add_argument("--min-samples", type=flag_int(1), metavar="N",
                   help="check at least this many inputs (all of a smaller space), even past --budget; a check the "
                   f"budget stops after fewer than {FEW_SAMPLES} inputs warns (and says \"few\" in --json)")

