"""Limits on what a request may cost, checked before the work starts: one place.

* **Numbers.** :func:`check_int` / :func:`check_float` check a count, a seed or a time
  against its range and raise ``{name}: expected an integer ≥ 1, got -1`` (an
  :class:`~tm2nn.options.OptionError`, so the CLI names the flag and Python callers the
  argument).  :func:`flag_int` / :func:`flag_float` are the same checks as argparse types.
* **Memory.** :func:`check_memory` compares an estimate (bytes) of an allocation that
  scales with a flag or a source (samples, test points, steps, grids, unrolled circuits,
  decoder histories) with :func:`memory_limit`, and refuses with the estimate when it is
  over.  The limit is 80 % of the memory available when asked (``MemAvailable``, and
  the address-space rlimit when one is set), overridden by ``--max-memory SIZE`` on the
  command line, ``TM2NN_MAX_MEMORY`` in the environment, or :func:`set_memory_limit`.
  Raising a size limit of a construction (``--max-gates``) does not lift this one.
* **Sources.** :data:`MAX_SOURCE_BYTES` caps what a parser reads (``--max-source-size``,
  ``TM2NN_MAX_SOURCE``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time

from tm2nn.errors import OptionError, Tm2nnError

#: Seeds are 32-bit: numpy, torch and Python's random all take them.
SEED_MAX = 2**32 - 1
#: The share of available memory one request may plan to use.
MEMORY_SHARE = 0.8
#: Default cap on a source file's size (bytes): a 10^6-gate circuit is about 40 MB.
MAX_SOURCE_BYTES = 256 * 2**20

_memory_override: int | None = None
_source_override: int | None = None

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


def _error(template: str, name: str):
    return OptionError(template, name)


def _shown(v) -> str:
    return f"{v:,}" if isinstance(v, int) and abs(v) >= 10**4 else str(v)


def _range_text(low, high, integer: bool) -> str:
    what = "an integer" if integer else "a number"
    if low is not None and high is not None:
        return f"{what} in [{_shown(low)}, {_shown(high)}]"
    if low is not None:
        return f"{what} ≥ {_shown(low)}"
    if high is not None:
        return f"{what} ≤ {_shown(high)}"
    return what


def _float_range_text(low, high, open_low: bool) -> str:
    """The range of a float option, with an excluded low end shown as such."""
    if open_low and high is None:
        return f"a number > {_shown(low)}"
    if open_low:  # (low, high]
        return f"a number in ({_shown(low)}, {_shown(high)}]"
    return _range_text(low, high, False)


def _as_int(value, low, high) -> tuple[int | None, str | None]:
    """``(value as an int, None)``, or ``(None, "expected ..., got ...")``."""
    ok = not isinstance(value, bool) and (isinstance(value, int) or hasattr(value, "__index__"))
    v = int(value) if ok else None
    if not ok or (low is not None and v < low) or (high is not None and v > high):
        return None, f"expected {_range_text(low, high, True)}, got {value!r}"
    return v, None


def _as_float(value, low, high, open_low: bool) -> tuple[float | None, str | None]:
    """``(value as a finite float, None)``, or ``(None, "expected ..., got ...")``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    v = float(value) if ok else math.nan
    ok = ok and math.isfinite(v) and (low is None or v > low or (v == low and not open_low)) \
        and (high is None or v <= high)
    if not ok:
        return None, f"expected {_float_range_text(low, high, open_low)}, got {value!r}"
    return v, None


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (either end open when None), else an
    OptionError ``{name}: expected an integer ≥ low, got value``."""
    v, problem = _as_int(value, low, high)
    if problem:
        raise _error(f"{{{name}}}: {problem}", name)
    return v


def check_float(name: str, value, low: float | None = None, high: float | None = None, *,
                open_low: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
    v, problem = _as_float(value, low, high, open_low)
    if problem:
        raise _error(f"{{{name}}}: {problem}", name)
    return v


def check_seed(name: str, value) -> int | None:
    """A seed: None (choose one) or an integer in [0, 2^32 - 1]."""
    return None if value is None else check_int(name, value, 0, SEED_MAX)


def _flag_type(parse, check, what: str, name: str):
    """An argparse ``type``: ``parse`` the text, then ``check(value) -> (value, problem)``."""
    def convert(text: str):
        try:
            value = parse(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        value, problem = check(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    convert.__name__ = name
    return convert


def flag_int(low: int | None = None, high: int | None = None):
    """An argparse ``type`` for an integer flag in ``[low, high]``."""
    return _flag_type(int, lambda v: _as_int(v, low, high), _range_text(low, high, True), "integer")


def flag_float(low: float | None = None, high: float | None = None, *, open_low: bool = False):
    """An argparse ``type`` for a finite number in ``[low, high]`` (``(low, high]``)."""
    return _flag_type(float, lambda v: _as_float(v, low, high, open_low), _float_range_text(low, high, open_low),
                      "number")


def parse_size(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1000000"`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size such as 512M or 8G, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def flag_size(text: str) -> int:
    """An argparse ``type`` for a size (``8G``)."""
    try:
        n = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return n


def human(nbytes: float) -> str:
    """Bytes in the unit that reads best (``3.4 GiB``)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} bytes"


# -- memory --------------------------------------------------------------------------------------
def available_memory() -> int:
    """Bytes this process may still allocate: ``MemAvailable``, lowered to what the
    address-space rlimit leaves when one is set."""
    avail = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 8 * 2**30
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1):
            used = 0
            with open("/proc/self/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmSize:"):
                        used = int(line.split()[1]) * 1024
                        break
            avail = min(avail, max(0, soft - used))
    except (ImportError, OSError, ValueError):
        pass
    return avail


def set_memory_limit(nbytes: int | None) -> int | None:
    """Set (or, with None, reset to the default) the memory one request may plan to use;
    returns the value set before (None: the default), for a caller to put back."""
    global _memory_override
    before, _memory_override = _memory_override, nbytes
    return before


def _limit(override: int | None, env: str, example: str, default) -> int:
    """A limit: set in-process (``override``), else from the environment variable
    ``env`` (a size), else ``default()``."""
    if override is not None:
        return override
    text = os.environ.get(env)
    if text:
        try:
            return parse_size(text)
        except ValueError:
            raise Tm2nnError(f"{env}: expected a size such as {example}, got {text!r}") from None
    return default()


#: How long a reading of the available memory is reused (seconds): checks on a hot path
#: (a trace per verified input) would otherwise read /proc twice each.
AVAILABLE_TTL = 1.0
_available: tuple[float, int] = (-math.inf, 0)


def _available_now() -> int:
    """:func:`available_memory`, read at most once per :data:`AVAILABLE_TTL`."""
    global _available
    now = time.monotonic()
    if now - _available[0] > AVAILABLE_TTL:
        _available = (now, available_memory())
    return _available[1]


def memory_limit() -> int:
    """The memory one request may plan to use (see the module doc)."""
    return _limit(_memory_override, "TM2NN_MAX_MEMORY", "512M or 8G",
                  lambda: int(_available_now() * MEMORY_SHARE))


def explicit_memory_limit() -> int | None:
    """The memory limit when one was set (:func:`set_memory_limit`, ``--max-memory``,
    ``TM2NN_MAX_MEMORY``), else None (the default share of the available memory): the
    limit :mod:`tm2nn.memwatch` holds the resident memory to."""
    if _memory_override is not None or os.environ.get("TM2NN_MAX_MEMORY"):
        return memory_limit()
    return None


def check_memory(nbytes: float, what: str, lower: tuple[str, ...] = ()) -> None:
    """Refuse, before allocating, a request estimated at ``nbytes`` bytes when that is over
    :func:`memory_limit`.  ``what`` says what would be allocated (``"1,000,000,000 random
    inputs of 36 bits"``); ``lower`` names the options that shrink it (``"samples"``)."""
    limit = memory_limit()
    if nbytes <= limit:
        return

    names = ["{" + n + "}" for n in lower]
    hint = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    whose = "" if _memory_override is not None or os.environ.get("TM2NN_MAX_MEMORY") else \
        f" ({MEMORY_SHARE:.0%} of the available memory)"
    raise OptionError(f"{what} would need about {human(nbytes)} of memory, over the limit of {human(limit)}{whose}: "
                      + (f"lower {hint}, or " if hint else "") + "raise the limit (--max-memory SIZE)", *lower)


# -- sources -------------------------------------------------------------------------------------
def set_source_limit(nbytes: int | None) -> None:
    """Set (None: reset) the largest source file a parser reads."""
    global _source_override
    _source_override = nbytes


def source_limit() -> int:
    """The largest file tm2nn reads (see the module doc)."""
    return _limit(_source_override, "TM2NN_MAX_SOURCE", "64M", lambda: MAX_SOURCE_BYTES)
