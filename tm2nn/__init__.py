"""tm2nn: compile Turing machines and boolean circuits into exact, verified neural networks.

The public API (re-exports only; docs/api.md walks through it):

* ``load``, ``load_all``: a source file -> IR (Machine, GridMachine, Circuit, Learner);
* ``run``: a run report (:class:`Report`), from the interpreter or a backend;
* ``compile``: source -> :class:`Compiled` (``.torch()``, ``.onnx()``, ``.save()``,
  ``.run()``, ``.verify()``, ``.info()``); ``load_model``: a saved model -> the same;
* ``verify``: a compiled net against the reference interpreter;
* ``export``: a machine as a folder plain TransformerLens loads (docs/transformer_lens.md);
* ``learn``: the constructions trained by SGD;
* ``backends``: the registry (``backends.names()``, ``backends.get(name)``,
  ``backends.register(backend)``); :class:`Backend` is what a construction declares.
"""

from tm2nn import backends
from tm2nn._version import __version__
from tm2nn.api import export, load, load_all, load_model, run, run_circuit
from tm2nn.backends.protocol import Backend, Learned
from tm2nn.compiler import compile, learn
from tm2nn.errors import Tm2nnError
from tm2nn.handle import Compiled
from tm2nn.options import OptionError
from tm2nn.report import Report
from tm2nn.verify import verify_compiled as verify

__all__ = ["load", "load_all", "run", "run_circuit", "compile", "learn", "verify", "load_model", "export", "backends",
           "Backend", "Compiled", "Learned", "Report", "Tm2nnError", "OptionError", "__version__"]
