"""toy-step-net: a toy machine construction (not from any of the papers), registered by
tests/core/toy_machine/test_toy_machine.py with one line of :data:`tm2nn.backends.BUILTIN`.

It is the test of ARCHITECTURE.md's promise that a new construction is one folder plus one
registry line: everything it is lives here (:mod:`.layout` the labelled configuration space,
:mod:`.build` the network, :mod:`.codec` inputs in and reports out, :mod:`.check` the reference
check, :mod:`.backend` the protocol value ``BACKEND``), and no file of ``tm2nn/`` names it.
"""
