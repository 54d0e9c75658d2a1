"""rcnn: Turing machines as the recurrent convolutional network of Goel, Kakade, Kalai &
Zhang (2024), App. B.  So far: the machine form (:mod:`tm2nn.passes.rcnn_form`) and the
base-3 cell encoding of B.1.1 (:mod:`.encoding`).  See docs/rcnn.md."""
