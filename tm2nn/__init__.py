"""tm2nn: compile Turing machines and boolean circuits into exact, verified neural networks.

Public API (re-exports only): ``load``, ``load_all``, ``run``, ``run_circuit``.
"""

from tm2nn.api import load, load_all, run, run_circuit
from tm2nn.errors import Tm2nnError

__version__ = "0.1.0"
__all__ = ["load", "load_all", "run", "run_circuit", "Tm2nnError", "__version__"]
