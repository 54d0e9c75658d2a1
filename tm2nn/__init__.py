"""tm2nn: compile Turing machines and boolean circuits into exact, verified neural networks.

Public API (re-exports only): ``load``, ``load_all``, ``run``, ``run_circuit``,
``compile`` (source -> :class:`~tm2nn.backends.base.Compiled`) and ``verify``
(a compiled net against the reference interpreter).
"""

__version__ = "0.1.0"

from tm2nn.api import load, load_all, run, run_circuit  # noqa: E402
from tm2nn.compiler import compile  # noqa: E402
from tm2nn.errors import Tm2nnError  # noqa: E402
from tm2nn.verify import verify_compiled as verify  # noqa: E402

__all__ = ["load", "load_all", "run", "run_circuit", "compile", "verify", "Tm2nnError", "__version__"]
