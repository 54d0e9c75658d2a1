"""Orchestration: source -> IR -> backend -> Compiled; and the same for training.

``compile`` and ``learn`` are the one place that strings the stages together; the CLI,
the Python API and the tests call them.  They name no backend: the registry
(:mod:`tm2nn.backends`) gives the backend, whose options dataclass validates the keyword
arguments (an option it does not take is an error listing the ones it does).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tm2nn import backends
from tm2nn.backends.protocol import Learned
from tm2nn.datasets import load_csv
from tm2nn.devices import check_device
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.handle import Compiled
from tm2nn.options import OptionError, fields_of
from tm2nn.source import registered
from tm2nn.syntax import load


def load_ir(source, format: str | None = None, name: str | None = None):
    """A path (loaded with :func:`tm2nn.syntax.load`) or an IR object (returned as is)."""
    if isinstance(source, (str, Path)):
        return load(source, format, name)
    if format is not None or name is not None:
        raise OptionError("{format} and {name} apply to a source file, not to an IR object", "format", "name")
    return source


def default_backend(ir, learning: bool = False):
    """The first backend (in the registry's order) that compiles, or trains, ``ir``."""
    for b in backends.all():
        if learning and b.trainer is None:
            continue
        takes = b.trainer.takes if learning else b.takes
        if takes and isinstance(ir, tuple(takes)):
            return b
    what = "trains" if learning else "compiles"
    raise Tm2nnError(f"no backend {what} a {type(ir).__name__.lower()} ({getattr(ir, 'name', '?')!r})")


def sha256_of(source, compiled: Compiled) -> str:
    """The hash a model records: of the source file's bytes, or of the source's tm2nn text
    when it came as an IR object."""
    if isinstance(source, (str, Path)) and Path(source).is_file():
        loaded = registered(str(source))  # the bytes the parser read, not a second read
        return hashlib.sha256(loaded.data if loaded is not None else read_input(source)).hexdigest()
    return hashlib.sha256(compiled.source_text().encode()).hexdigest()


def compile(source, backend: str | None = None, *, format: str | None = None, name: str | None = None,
            source_path: str | None = None, **options) -> Compiled:
    """Compile ``source`` (a path, or a Machine / Circuit / Learner) with ``backend`` (default:
    the first that takes it).  ``options`` are the backend's (``tm2nn.backends.get(name).Options``);
    ``format`` and ``name`` pick the file's format and one item of a multi-item file;
    ``source_path`` names the file an IR object came from (the model records its hash)."""
    spec = backends.get(backend) if backend is not None else None
    opts = spec.options(**options) if spec is not None else None  # bad options fail before any work
    ir = load_ir(source, format, name)
    if spec is None:
        spec = default_backend(ir)
        opts = spec.options(**options)
    spec.check_source(ir)
    compiled = Compiled.of(spec.compile(ir, opts).with_options(opts))
    compiled.source_sha256 = sha256_of(source_path or source, compiled)
    return compiled


def learn(source, backend: str | None = None, *, format: str | None = None, name: str | None = None,
          source_path: str | None = None, models=(), progress=None, device=None, **options) -> Learned:
    """Train the construction of ``backend`` (default: the first that trains ``source``).
    ``options`` are the backend's ``LearnOptions``; a training-set option (a CSV path) is
    read here and handed over as arrays.  ``source_path`` names the file an IR object
    came from (a backend may read its header comments).  ``models`` names the snapshots to
    return (``"before"`` / ``"after"`` training), each a :class:`Compiled` that can be
    saved; ``progress(done, total, description=None)`` follows the training.  ``device``
    (default: the CPU; :mod:`tm2nn.devices`) is where a backend that trains in torch
    trains; one that trains in numpy refuses another device."""
    spec = backends.get(backend) if backend is not None else None
    if spec is not None and spec.trainer is None:
        raise does_not_train(spec)
    opts = spec.learn_options(**options) if spec is not None else None  # bad options fail before any work
    ir = load_ir(source, format, name)
    if spec is None:
        spec = default_backend(ir, learning=True)
        opts = spec.learn_options(**options)
    trainer = spec.trainer
    missing = [m for m in models if m not in trainer.exports]
    if missing:
        raise Tm2nnError(f"the {spec.name} backend does not export the net {missing[0]} training")
    if not isinstance(ir, tuple(trainer.takes)):
        raise Tm2nnError(f"the {spec.name} backend trains {spec.takes_what}; {getattr(ir, 'name', '?')!r} is a "
                         f"{type(ir).__name__.lower()}")
    data = {f.name: load_csv(getattr(opts, f.name), reals=f.data == "csv-reals") for f in fields_of(trainer.Options)
            if f.data in ("csv", "csv-reals") and getattr(opts, f.name) is not None}
    path = str(source) if isinstance(source, (str, Path)) else source_path
    learned = trainer.learn(ir, opts, data=data, source_path=path, progress=progress, models=tuple(models),
                            device=check_device(device))
    learned.models = {k: Compiled.of(m) for k, m in learned.models.items()}
    return learned


def does_not_train(spec) -> Tm2nnError:
    """The error for ``learn`` with a backend that has no trainer."""
    return Tm2nnError(f"the {spec.name} backend does not train (backends that do: {', '.join(backends.training())})")
