"""Learners as code: the builder (:mod:`.builder`), Theorem 4's learning phase as a
transformation of any learning algorithm (:mod:`.theorem4`), the example learners
(:mod:`.examples`) and the sample generators for ``--target`` (:mod:`.targets`).

See :mod:`tm2nn.ir.learner` for what a learner means (Abbe & Sandon §4.1, Lemma 3 /
Theorem 4)."""
