"""The example learner files, written from their builders (:mod:`tm2nn.learners.examples`):
``examples/parity8.circ``, ``examples/majority7.circ`` and the noisy learners are exactly
:func:`example_text` of their names (a test checks the files)."""

from __future__ import annotations

from tm2nn.learners.examples import EXAMPLES, NOISY_EXAMPLES
from tm2nn.syntax.circuit_dsl import dump_learner, dump_noisy_learner


def example_text(filename: str) -> str:
    """The exact text of ``examples/<filename>``."""
    if filename in NOISY_EXAMPLES:
        build, header = NOISY_EXAMPLES[filename]
        dumper = dump_noisy_learner
    else:
        build, header = EXAMPLES[filename]
        dumper = dump_learner
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comment + "\n" + dumper(build(), header=False)
