"""Backend options: a dataclass per backend, validated here, once.

A backend declares its compile options (and, where it trains, its learn options) as a
dataclass whose fields are made by :func:`option`: a default and a help text, plus how
the option looks on the command line.  From that one declaration

* :func:`make` checks keyword arguments from the Python API (an unknown name is an error
  that lists the names the backend takes; each value is checked against the field's type)
  and builds the options object, whose ``__post_init__`` checks the values;
* the CLI builds each verb's flags (:func:`flag_of`, :func:`fields_of`).

Errors name options as ``{name}`` placeholders (:class:`OptionError`), rendered as the
argument name (``steps``) for Python callers and as the flag (``--steps``) on the command
line, so nobody is told to pass a flag from Python.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import MISSING, dataclass, field

from tm2nn.errors import OptionError
from tm2nn.limits import check_float, check_int


def option(default=MISSING, help: str = "", *, flag: str | None = None, metavar: str | None = None,
           cli: bool = True, data: str | None = None, low=None, high=None, above=None):
    """A dataclass field for an option.  ``low``/``high`` bound a number (inclusive),
    ``above`` bounds it strictly from below (a float); every int and float option is
    checked against its range (and floats for being finite) by :func:`make`, with the
    checks of :mod:`tm2nn.limits`.  ``flag`` overrides the derived flag
    (``--name-with-dashes``; a bool that defaults to True becomes ``--no-name``);
    ``cli=False`` keeps an option out of the command line (set by another verb);
    ``data="csv"`` marks a path to a training set, which ``tm2nn learn`` reads
    (:func:`tm2nn.datasets.load_csv`) and hands to the backend as arrays (``"csv-reals"``:
    a CSV of real numbers);
    ``data="model"`` a model file to write (checked before any work)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "cli": cli, "data": data, "low": low, "high": high,
            "above": above}
    if isinstance(default, (dict, list)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class NoOptions:
    """A backend without options."""


@dataclass(frozen=True)
class OptionField:
    name: str
    kind: type | None          # int, float, bool, str, dict (None: any)
    optional: bool             # None is allowed
    choices: tuple | None      # a Literal's values
    default: object
    required: bool
    help: str
    flag: str
    metavar: str | None
    cli: bool
    data: str | None
    low: float | None = None     # inclusive bounds of a number
    high: float | None = None
    above: float | None = None   # strict lower bound of a float


def _kind(tp) -> tuple[type | None, bool, tuple | None]:
    """(base type, None allowed, Literal choices) of a field's annotation."""
    optional = False
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else None
        origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        return type(choices[0]), optional, choices
    if origin is not None:
        tp = origin
    return (tp if isinstance(tp, type) else None), optional, None


@functools.lru_cache(maxsize=None)
def fields_of(cls) -> tuple[OptionField, ...]:
    """The options a dataclass declares, in declaration order (read once per class:
    every option object validates itself with them)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind, optional, choices = _kind(hints[f.name])
        if f.default is not MISSING:
            default, required = f.default, False
        elif f.default_factory is not MISSING:
            default, required = f.default_factory(), False
        else:
            default, required = None, True
        meta = f.metadata
        flag = meta.get("flag") or ("--no-" if kind is bool and default is True else "--") + f.name.replace("_", "-")
        out.append(OptionField(f.name, kind, optional, choices, default, required, meta.get("help", ""),
                               flag, meta.get("metavar"), meta.get("cli", True), meta.get("data"),
                               meta.get("low"), meta.get("high"), meta.get("above")))
    return tuple(out)


def _check_value(owner: str, f: OptionField, value):
    if value is None:
        if f.optional:
            return None
        raise OptionError(f"{{{f.name}}} of the {owner} needs a value, got None", f.name)
    if f.choices is not None:
        if value not in f.choices:
            shown = ", ".join(repr(c) for c in f.choices)
            raise OptionError(f"{{{f.name}}} must be one of {shown}, got {value!r}", f.name)
        return value
    if f.kind is bool:
        if not isinstance(value, bool):
            raise OptionError(f"{{{f.name}}} must be True or False, got {value!r}", f.name)
    elif f.kind in (int, float):
        try:
            if f.kind is int:
                return check_int(f.name, value, f.low, f.high)
            if f.above is not None:
                return check_float(f.name, value, f.above, f.high, open_low=True)
            return check_float(f.name, value, f.low, f.high)
        except OptionError as e:  # say what the option is: "--steps: expected ... (the step bound T: ...)"
            if f.help:
                e.template += f" ({f.help})"
                e.message = e._render(lambda n: n)
                e.args = (e.message,)
            raise
    elif f.kind is str:
        if not isinstance(value, str):
            raise OptionError(f"{{{f.name}}} must be a string, got {value!r}", f.name)
    elif f.kind is dict:
        if not isinstance(value, dict):
            raise OptionError(f"{{{f.name}}} must be a dict, got {type(value).__name__}", f.name)
    return value


def make(cls, values: dict, owner: str):
    """``cls(**values)`` after checking every name and value; ``owner`` ("the transformer
    backend") is named in the errors."""
    fs = {f.name: f for f in fields_of(cls)}
    unknown = [k for k in values if k not in fs]
    if unknown:
        names = list(fs)
        takes = ", ".join("{" + n + "}" for n in names) if names else "none"
        raise OptionError(f"{owner} takes no option {{{unknown[0]}}}; the options it takes: {takes}",
                          unknown[0], *names)
    checked = {k: _check_value(owner, fs[k], v) for k, v in values.items()}
    missing = [n for n, f in fs.items() if f.required and n not in checked]
    if missing:
        f = fs[missing[0]]
        raise OptionError(f"{owner} needs {{{f.name}}}" + (f" ({f.help})" if f.help else ""), f.name)
    return cls(**checked)


def validate(opts) -> None:
    """Check every field of an options object against its declared type and range (for a
    dataclass's ``__post_init__``, so an object built directly is checked like one from
    :func:`make`)."""
    for f in fields_of(type(opts)):
        _check_value(type(opts).__name__, f, getattr(opts, f.name))


def to_dict(opts) -> dict:
    """The options as a JSON-able dict (what a saved model records to rebuild itself)."""
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
