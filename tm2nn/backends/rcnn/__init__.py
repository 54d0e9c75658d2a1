"""rcnn: Turing machines as the recurrent convolutional network of Goel, Kakade, Kalai &
Zhang (2024), App. B.  So far: the machine form (:mod:`tm2nn.passes.rcnn_form`), the
base-3 cell encoding of B.1.1 (:mod:`.encoding`), and the filter of B.2 —
the exact function and its Jacobian (:mod:`.filter_spec`), the reachable patches
(:mod:`.reachable`), the 5-layer ReLU network of Definition 5 (:mod:`.filter_net`),
``f̄_head`` (:mod:`.head`) and the sizes against the paper's bounds (:mod:`.bounds`).
See docs/rcnn.md."""
