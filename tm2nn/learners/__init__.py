"""Learners as code: the builder (:mod:`.builder`), the example learners
(:mod:`.examples`) and the sample generators for ``--target`` (:mod:`.targets`).

See :mod:`tm2nn.ir.learner` for what a learner means (Abbe & Sandon §4.1, Lemma 3 /
Theorem 4)."""
