"""GD-trace backend (issue 7): Welper, *Universality of Gradient Descent Neural Network
Training* — gradient descent (Frank–Wolfe on a simplex, plain steps elsewhere) on a ReLU
loss traces a Turing machine step by step.

* §4.2/§4.3 and App. A: :mod:`.lagrange`, :mod:`.config_simplex` (the simplex of full
  configurations, Cor. 2.2);
* §4.4: :mod:`.tape_simplex` (tape and head variables, Cor. 2.3) on machines in §4.1 form
  (:mod:`tm2nn.passes.welper_form`), :mod:`.machine_mode` (``compile``, ``run_gd``);
* (3)/(14)/(22): :mod:`.optimizer`;
* §5: :mod:`.extended` (the extended network and its training), :mod:`.sign_sum` (the
  worked example).
"""

from .config_simplex import (
    Config,
    ConfigSimplex,
    TraceStep,
    build,
    estimate_vertices,
    inputs_up_to,
    step,
    trace,
)
from .extended import Constants, Extended, Layout, sign_sum_layout, train
from .lagrange import (
    corner_hyperplane,
    corner_vertex,
    ell_pair_all,
    ell_v,
    ell_v_all,
    ell_vw,
    pair_hyperplane,
    vertex,
)
from .machine_mode import compile, run_gd
from .optimizer import AmbiguousStep, ConditionalGradient
from .sign_sum import sign_sum_machine
from .tape_simplex import TapeSimplex, Tracer44, TraceStep44, choose_b, lbar_all, trace44

__all__ = [
    "compile", "run_gd",
    "Constants", "Extended", "Layout", "sign_sum_layout", "train", "sign_sum_machine",
    "Config", "ConfigSimplex", "TraceStep", "build", "corner_hyperplane", "corner_vertex",
    "ell_pair_all", "ell_v", "ell_v_all", "ell_vw", "estimate_vertices", "inputs_up_to",
    "pair_hyperplane", "step", "trace", "vertex",
    "TapeSimplex", "Tracer44", "TraceStep44", "AmbiguousStep", "ConditionalGradient", "choose_b", "lbar_all", "trace44",
]
