"""Training the constructions' own architectures (issue 38, ``tm2nn train``): the shared
part, which knows no construction.

* :mod:`.options` -- :class:`TrainOptions` (spelled once; the ``train`` verb's flags) and
  the ``--init`` grammar;
* :mod:`.data` -- the training and test inputs, drawn from the model's input space
  (:meth:`tm2nn.verify.check.Checker.space`) on two seed streams, disjoint;
* :mod:`.loop` -- :class:`Task` (what a backend's ``training`` hook returns) and the loop:
  Adam or SGD, per-epoch metrics, the best weights kept (Ctrl-C included);
* :mod:`.report` -- the per-epoch rows, the human lines and the ``--json`` summary.

:mod:`.loop` loads torch; :mod:`.options` and :mod:`.data` do not.
"""
