"""transformer: Turing machines as the encoder–decoder transformer of Wei, Chen & Ma
(2022), §4.1 and App. C — binary positional encodings, hard-max (or softmax) attention
with null key/value, and a binary search over past steps (Claims C.4–C.6).

The construction is ``BACKEND`` (:mod:`.backend`); ``tm2nn.compile(m, "transformer",
steps=T)`` reaches :func:`.model.compile`, which removes stay moves
(:mod:`tm2nn.passes.stay`), lays the hidden vector out as in App. C.1 (:mod:`.layout`)
and builds the net (:mod:`.build`): input ``tape`` = token ids of the input symbols,
output ``trace`` = one tap per decoder step 0..T', decoded by :mod:`.decoding`.
:mod:`.paper_layers` reads a decoder step as the paper's transformer layers, :mod:`.cls`
is the proof of Theorem 4.1's readout θ_cls, and :mod:`.bounds` gives the function class
F_{w,d,α,T} and checks its quantities from the weights.  The package also owns the run
(:mod:`.runtime`, the index engine :mod:`.engines`), the reference check
(:mod:`.reference`) and the analyses: the all-layer margin (:mod:`.margin`,
:mod:`.perturbed_decode`), the softmax β search (:mod:`.beta`) and the statistics
bracket (:mod:`.statistics`).  See docs/transformer.md.
"""
