"""Devices: where a torch module runs, named as torch names them, checked in one place.

``--device`` on ``run``, ``eval``, ``verify``, ``margin`` and ``learn``, and the ``device=``
argument of :class:`tm2nn.handle.Compiled`'s methods, take ``cpu`` (the default),
``cuda``, ``cuda:N``, ``mps`` or ``meta`` (shapes only: torch's device without storage, for
checking that a module's tensors all move).  :func:`check_device` parses the name without
loading torch (the CLI's flag type); :func:`torch_device` also checks that the device is
present and returns the ``torch.device``.  A device that is not present is an
:class:`~tm2nn.errors.OptionError` naming the option: the CLI prints one line and exits 2.

Only the torch engine runs on another device than the CPU: onnxruntime (the CPU wheel),
the fused and the index engines say so (:func:`check_engine_device`).
"""

from __future__ import annotations

import re

from tm2nn import threads
from tm2nn.errors import OptionError

#: The default device.
CPU = "cpu"
_NAME = re.compile(r"^(cpu|meta|mps|cuda)(?::(\d+))?$")


def check_device(text, option: str = "device") -> str:
    """``text`` as a canonical device name (``"cuda"`` stays ``"cuda"``, ``"CUDA:0"`` is
    ``"cuda:0"``); None is the CPU.  Only the syntax is checked (no torch import)."""
    if text is None:
        return CPU
    name = str(text).strip().lower()  # a torch.device prints as its name
    m = _NAME.match(name)
    if m is None:
        raise OptionError(f"{{{option}}}: expected cpu, cuda, cuda:N, mps or meta, got {text!r}", option)
    if m.group(2) is not None and m.group(1) != "cuda":
        raise OptionError(f"{{{option}}}: only cuda devices take an index (cuda:N), got {text!r}", option)
    return name


def is_cpu(device) -> bool:
    """Whether ``device`` (a name, a ``torch.device`` or None) is the CPU."""
    return check_device(device) == CPU


def torch_device(text, option: str = "device"):
    """The ``torch.device`` for ``text`` (see :func:`check_device`), refused with one line
    when this machine does not have it."""
    import torch

    threads.use_torch()  # where tm2nn starts torch work: its thread count (tm2nn.threads)
    name = check_device(text, option)
    kind, _, index = name.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise OptionError(f"{{{option}}} {name!r}: this machine has no CUDA device ({why}; torch "
                              f"{torch.__version__}); use --device cpu", option)
        if index and int(index) >= torch.cuda.device_count():
            raise OptionError(f"{{{option}}} {name!r}: this machine has {torch.cuda.device_count()} CUDA "
                              f"device(s), numbered from 0", option)
    elif kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise OptionError(f"{{{option}}} 'mps': this machine has no Apple GPU (MPS); use --device cpu", option)
    return torch.device(name)


def check_engine_device(engine: str, device, option: str = "device") -> None:
    """Refuse a device other than the CPU for an engine that runs on the CPU only (every
    engine but torch)."""
    if engine != "torch" and not is_cpu(device):
        raise OptionError(f"the {engine} engine runs on the CPU only; {{{option}}} {check_device(device)!r} "
                          "takes the torch engine (--engine torch)", option)
