"""GD-trace backend (issue 7): Welper, *Universality of Gradient Descent Neural Network
Training* — gradient descent (Frank–Wolfe on a simplex, plain steps elsewhere) on a ReLU
loss traces a Turing machine step by step.

* §4.2/§4.3 and App. A: :mod:`.lagrange`, :mod:`.config_simplex` (the simplex of full
  configurations, Cor. 2.2);
* §4.4: :mod:`.tape_simplex` (tape and head variables, Cor. 2.3) on machines in §4.1 form
  (:mod:`tm2nn.passes.welper_form`), :mod:`.machine_mode` (``compile``, ``run_gd``),
  :mod:`.check` (every iterate against the interpreters; §5's ``learn_report``);
* the backend: :mod:`.options` (compile and learn options), :mod:`.codec` (§5's input
  encodings), :mod:`.portable` (the model files' tables), :mod:`.backend` (``BACKEND``);
* (3)/(14)/(22): :mod:`.optimizer`;
* §5: :mod:`.extended` (the extended network and its training), :mod:`.layout` (the data
  layout and the primary networks), :mod:`.fixed_point` (App. B's quantisation),
  :mod:`.sign_sum` (the worked example), :mod:`.perceptron` (a learning algorithm over
  fixed-point data as a machine).
"""

_LAZY = {
    "Config": "config_simplex",
    "ConfigSimplex": "config_simplex",
    "TraceStep": "config_simplex",
    "build": "config_simplex",
    "estimate_vertices": "config_simplex",
    "inputs_up_to": "config_simplex",
    "step": "config_simplex",
    "trace": "config_simplex",
    "BoundViolation": "extended",
    "Constants": "extended",
    "Extended": "extended",
    "Layout": "layout",
    "PRIMARIES": "layout",
    "FixedPoint": "fixed_point",
    "check_step": "extended",
    "perceptron_layout": "extended",
    "sign_sum_layout": "extended",
    "train": "extended",
    "Perceptron": "perceptron",
    "perceptron_machine": "perceptron",
    "corner_hyperplane": "lagrange",
    "corner_vertex": "lagrange",
    "ell_pair_all": "lagrange",
    "ell_v": "lagrange",
    "ell_v_all": "lagrange",
    "ell_vw": "lagrange",
    "pair_hyperplane": "lagrange",
    "vertex": "lagrange",
    "compile": "machine_mode",
    "run_gd": "machine_mode",
    "AmbiguousStep": "optimizer",
    "ConditionalGradient": "optimizer",
    "sign_sum_machine": "sign_sum",
    "TapeSimplex": "tape_simplex",
    "TraceStep44": "tape_simplex",
    "Tracer44": "tape_simplex",
    "choose_b": "tape_simplex",
    "lbar_all": "tape_simplex",
    "trace44": "tape_simplex",
}


def __getattr__(name: str):
    """The package's names, imported on first use (its modules need torch; the backend
    registry imports :mod:`.backend` without it)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "compile", "run_gd",
    "BoundViolation", "Constants", "Extended", "FixedPoint", "Layout", "PRIMARIES", "Perceptron", "check_step",
    "perceptron_layout", "perceptron_machine", "sign_sum_layout", "train", "sign_sum_machine",
    "Config", "ConfigSimplex", "TraceStep", "build", "corner_hyperplane", "corner_vertex",
    "ell_pair_all", "ell_v", "ell_v_all", "ell_vw", "estimate_vertices", "inputs_up_to",
    "pair_hyperplane", "step", "trace", "vertex",
    "TapeSimplex", "Tracer44", "TraceStep44", "AmbiguousStep", "ConditionalGradient", "choose_b", "lbar_all", "trace44",
]
