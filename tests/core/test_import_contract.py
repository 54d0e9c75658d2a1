"""The import contract (ARCHITECTURE.md, "The pipeline"; docs/architecture.md, "Imports").

Imports run downward: the faces (cli, sweep, viz, demo) over the API and the handle, over
the model files, over the backends, over the core (verify, emit, nets, passes, ir, interp,
syntax, learners), over the foundation.  Measured by tests/import_graph.py, which counts
imports inside functions too (``TYPE_CHECKING`` blocks excluded).

Issue 34's targets are at most one circle of files, at most 60 function-level imports of
tm2nn modules and no core module importing a backend.  The redesign is under way: each
limit below is the figure the code has reached, so the graph can only get better; lower a
limit whenever a change lowers the figure.
"""

from __future__ import annotations

from ..import_graph import circles, imports, package_of

#: the packages below the backends: none of them may import tm2nn.backends
CORE = ("nets", "ir", "interp", "syntax", "passes", "learners", "emit", "verify")
#: what a backend must never import: the handle, the model files, the API, the CLI and the faces
ABOVE_BACKENDS = ("tm2nn.handle", "tm2nn.modelfile", "tm2nn.api", "tm2nn.compiler", "tm2nn.cli", "tm2nn.demo",
                  "tm2nn.sweep", "tm2nn.viz")
#: function-level imports kept for start-up time: (importer, imported) prefixes.  The handle
#: and the API load the emitters and the model files (torch, onnx) when first used; the CLI
#: and the sweep verb load matplotlib (viz), pyarrow (the store) and ray when a verb needs them.
ALLOWED_LAZY = (
    ("tm2nn.handle", "tm2nn.modelfile"), ("tm2nn.handle", "tm2nn.emit"), ("tm2nn.api", "tm2nn.modelfile"),
    ("tm2nn.cli", "tm2nn.viz"), ("tm2nn.cli", "tm2nn.demo"), ("tm2nn.cli", "tm2nn.modelfile"),
    ("tm2nn.sweep.command", "tm2nn.sweep"),
)

# -- ratchets: today's figures (issue 34's targets in brackets) -----------------------------
MAX_CIRCLES = 7  # [1]
MAX_FUNCTION_IMPORTS = 310  # [60] (outside ALLOWED_LAZY)
MAX_CORE_TO_BACKENDS = 25  # [0]

EDGES = imports()


def _lazy_outside_allow_list():
    return [e for e in EDGES if e.in_function
            and not any(e.source.startswith(a) and e.target.startswith(b) for a, b in ALLOWED_LAZY)]


def test_circles_of_files_do_not_grow():
    found = circles(EDGES)
    assert len(found) <= MAX_CIRCLES, "\n".join(", ".join(c) for c in found)


def test_function_level_imports_do_not_grow():
    lazy = _lazy_outside_allow_list()
    assert len(lazy) <= MAX_FUNCTION_IMPORTS, f"{len(lazy)} function-level imports; the newest: {lazy[-5:]}"


def test_the_core_does_not_import_backends_more():
    up = [e for e in EDGES if package_of(e.source) in CORE and package_of(e.target) == "backends"]
    assert len(up) <= MAX_CORE_TO_BACKENDS, [f"{e.source}:{e.line} -> {e.target}" for e in up]


def test_a_backend_imports_nothing_above_it():
    up = [e for e in EDGES if e.source.startswith("tm2nn.backends.") and e.source != "tm2nn.backends.base"
          and e.target.startswith(ABOVE_BACKENDS)]
    assert not up, [f"{e.source}:{e.line} -> {e.target}" for e in up]


def test_the_graph_reads_imports_inside_functions_and_skips_type_checking(tmp_path):
    """The measurement itself: a function-level import and a circle it hides are found, a
    TYPE_CHECKING import is not (a mutation of the measured code)."""
    pkg = tmp_path / "tm2nn"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from tm2nn import b\n")
    (pkg / "b.py").write_text("def f():\n    from tm2nn.a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tm2nn import a\n")
    edges = imports(pkg)
    assert [(e.source, e.target, e.in_function) for e in edges] == [
        ("tm2nn.a", "tm2nn.b", False), ("tm2nn.b", "tm2nn.a", True)]
    assert circles(edges) == [["tm2nn.a", "tm2nn.b"]]
