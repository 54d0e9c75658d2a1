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
