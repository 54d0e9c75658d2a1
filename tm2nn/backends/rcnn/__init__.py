"""rcnn: Turing machines as the recurrent convolutional network of Goel, Kakade, Kalai &
Zhang (2024), Definition 5 and App. B: one shared 3x3 filter applied recurrently over a
2D tape of base-3 cell values.

Machine mode (:mod:`.machine_mode`, ``tm2nn.compile(m, "rcnn", steps=T)``): the machine is
brought to B.1.2 form (:func:`tm2nn.passes.rcnn_form.to_rcnn_form`), its cells encoded as
B.1.1 numbers (:mod:`.encoding`), and the net applies the filter of B.2 (:mod:`.filter_net`)
L times to a start grid (:mod:`.machine_io`), keeping every state so that each step can be
decoded (:mod:`.runtime`) and checked (:mod:`.checker`).  ``--engine fused`` runs it in
:mod:`.grid_engine` (numba kernels in :mod:`.grid_kernel`).

The filter of B.2: the exact function and its Jacobian (:mod:`.filter_spec`), the
reachable patches (:mod:`.reachable`), the 5-layer ReLU network of Definition 5
(:mod:`.filter_net`), ``f̄_head`` (:mod:`.head`) and the sizes against the paper's bounds
(:mod:`.bounds`).

Learner mode (``tm2nn learn``, :mod:`.trainer`): Algorithm 1 on a learner machine
(:mod:`.learner_form`, :mod:`.learner`), and Corollary 2's restarts (:mod:`.algorithm1`).

:mod:`.backend` declares the construction (``BACKEND``).  See docs/rcnn.md.
"""
