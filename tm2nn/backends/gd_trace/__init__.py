"""GD-trace backend (issue 7): Welper, *Universality of Gradient Descent Neural Network
Training*, §4.2-§4.3 and Appendix A — gradient descent (Frank-Wolfe) on a ReLU loss over
the simplex of full configurations traces a Turing machine step by step."""

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
from .optimizer import AmbiguousStep, ConditionalGradient
from .tape_simplex import TapeSimplex, Tracer44, TraceStep44, choose_b, lbar_all, trace44

__all__ = [
    "Config", "ConfigSimplex", "TraceStep", "build", "corner_hyperplane", "corner_vertex",
    "ell_pair_all", "ell_v", "ell_v_all", "ell_vw", "estimate_vertices", "inputs_up_to",
    "pair_hyperplane", "step", "trace", "vertex",
    "TapeSimplex", "Tracer44", "TraceStep44", "AmbiguousStep", "ConditionalGradient", "choose_b", "lbar_all", "trace44",
]
