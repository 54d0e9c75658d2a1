"""The registry of constructions: ``--backend NAME`` -> a :class:`~tm2nn.backends.protocol.Backend`.

Built-in backends are imported when first asked for (their packages are heavy).  A new
construction is one package exporting ``BACKEND`` plus one line in :data:`BUILTIN`; code
outside the package (a plugin, a test) calls :func:`register`.  Nothing else names a
backend: the compiler, the CLI and the verifier ask this registry.
"""

from __future__ import annotations

import importlib

from tm2nn.backends.protocol import Backend
from tm2nn.errors import Tm2nnError

#: name -> the module that exports ``BACKEND``
BUILTIN: dict[str, str] = {
    "relu-circuit": "tm2nn.backends.relu_circuit.backend",
    "transformer": "tm2nn.backends.transformer.backend",
    "rcnn": "tm2nn.backends.rcnn.backend",
    "abbe-sandon": "tm2nn.backends.abbe_sandon.backend",
    "gd-trace": "tm2nn.backends.gd_trace.backend",
}

_loaded: dict = {}  # module -> its BACKEND
_extra: dict = {}


def names() -> list[str]:
    """Every backend's name, built-in first."""
    return [*BUILTIN, *(n for n in _extra if n not in BUILTIN)]


def get(name: str):
    """The backend called ``name`` (an error lists the others)."""
    if name in _extra:
        return _extra[name]
    if name not in BUILTIN:
        raise Tm2nnError(f"unknown backend {name!r} (available: {', '.join(names())})")
    module = BUILTIN[name]
    if module not in _loaded:  # keyed by the module: a name pointed elsewhere loads anew
        _loaded[module] = importlib.import_module(module).BACKEND
    return _loaded[module]


def model_info(model, sizes: dict | None = None) -> dict:
    """``{"backend", "info", "bounds"}`` of a model: the network's sizes (``sizes`` when
    measured already, else :meth:`tm2nn.nets.Net.info` without its widths) and its
    backend's rows next to the paper's bounds."""
    if sizes is None:
        sizes = {k: v for k, v in model.net.info().items() if k != "widths"}
    return {"backend": model.backend, "info": sizes, "bounds": get(model.backend).info_rows(model)}


def all() -> list:  # noqa: A001 - the registry's own vocabulary
    return [get(n) for n in names()]


def having(analysis: str) -> list[str]:
    """The backends that declare ``analysis`` (a name of :data:`protocol.ANALYSES`)."""
    return [b.name for b in all() if b.has(analysis)]


def training() -> list[str]:
    """The backends that train."""
    return [b.name for b in all() if b.trainer is not None]


def engine_names() -> list[str]:
    """Every engine some backend runs on, in the backends' order (``--engine`` choices;
    each backend refuses an engine it lacks)."""
    out: list[str] = []
    for b in all():
        out += [e for e in b.engines if e not in out]
    return out


def register(backend: Backend) -> None:
    """Add (or replace) a backend under ``backend.name``."""
    if not isinstance(backend, Backend):
        raise TypeError("register() takes a tm2nn.backends.protocol.Backend")
    _extra[backend.name] = backend


def unregister(name: str) -> None:
    """Remove a backend added by :func:`register`."""
    _extra.pop(name, None)
