"""The import contract (ARCHITECTURE.md, "The pipeline"; docs/architecture.md, "Imports").

Imports run downward: the faces (cli, sweep, viz, demo) over the API and the handle, over
the model files, over the backends, over the core (verify, emit, nets, passes, ir, interp,
syntax, learners), over the foundation.  Measured by tests/import_graph.py, which counts
imports inside functions too (``TYPE_CHECKING`` blocks excluded).
"""

from __future__ import annotations

import subprocess
import sys

from ..import_graph import PACKAGE, circles, imports, package_of

#: the packages below the backends (and the foundation's modules): none may import tm2nn.backends
CORE = ("nets", "ir", "interp", "syntax", "passes", "learners", "emit", "verify", "engines", "training")
FOUNDATION = ("tm2nn.errors", "tm2nn.source", "tm2nn.fileio", "tm2nn.limits", "tm2nn.memwatch", "tm2nn.options", "tm2nn.report",
              "tm2nn.codec", "tm2nn.interrupt", "tm2nn.datasets", "tm2nn.gc_pause", "tm2nn._version",
              "tm2nn.devices", "tm2nn.threads")
#: what a backend must never import: the handle, the model files, the API and the faces
ABOVE_BACKENDS = ("tm2nn.handle", "tm2nn.modelfile", "tm2nn.api", "tm2nn.compiler", "tm2nn.cli", "tm2nn.demo",
                  "tm2nn.export_command", "tm2nn.train_command",
                  "tm2nn.sweep", "tm2nn.viz", "tm2nn.lint", "tm2nn.flags", "tm2nn.console")
#: the heavy libraries a start of the CLI must not load
HEAVY = ("torch", "onnx", "onnxruntime", "numba", "matplotlib", "ray", "pyarrow", "transformer_lens")
#: function-level imports kept for start-up time, (importer, imported) prefixes: each
#: imported module loads one of HEAVY, and the importer is loaded when the CLI starts
#: (every CLI call declares every backend: the flags come from their Options).
ALLOWED_LAZY = (
    # the handle and the API: torch and onnx when a model is built, saved or loaded
    ("tm2nn.handle", "tm2nn.modelfile"), ("tm2nn.handle", "tm2nn.emit"), ("tm2nn.api", "tm2nn.modelfile"),
    # tm2nn train: the training loop (torch)
    ("tm2nn.api", "tm2nn.training.session"),
    # the verbs that draw (matplotlib) and the demo (it draws)
    ("tm2nn.cli", "tm2nn.viz"), ("tm2nn.cli", "tm2nn.demo"),
    # the sweep verb: the store (pyarrow), the pools and Ray
    ("tm2nn.sweep.command", "tm2nn.sweep."),
    # the export verb's ground-truth check (torch) on an exported folder
    ("tm2nn.export_command", "tm2nn.backends.transformer.decoder_only.faithfulness"),
    # each backend's own torch- and numba-loading modules, and the torch emitter
    ("tm2nn.backends.relu_circuit.backend", "tm2nn.backends.relu_circuit."),
    ("tm2nn.backends.rcnn.backend", "tm2nn.backends.rcnn."), ("tm2nn.backends.rcnn.runtime", "tm2nn.emit"),
    ("tm2nn.backends.transformer.runtime", "tm2nn.emit"),
    ("tm2nn.backends.transformer.backend", "tm2nn.backends.transformer.train"),
    ("tm2nn.backends.transformer.runtime", "tm2nn.backends.transformer.engines"),
    ("tm2nn.backends.transformer.perturbed_decode", "tm2nn.emit"),
    ("tm2nn.backends.transformer.pictures", "tm2nn.emit"),
)
#: issue 34's ceiling on function-level imports of tm2nn modules, allowed ones included
MAX_FUNCTION_IMPORTS = 60

EDGES = imports()


def _where(edges) -> list[str]:
    return [f"{e.source}:{e.line} -> {e.target}" for e in edges]


def test_no_circle_of_files():
    found = circles(EDGES)
    assert not found, "\n".join(", ".join(c) for c in found)


def test_no_core_module_imports_a_backend():
    up = [e for e in EDGES if (package_of(e.source) in CORE or e.source in FOUNDATION)
          and package_of(e.target) == "backends"]
    assert not up, _where(up)


def test_the_foundation_imports_only_the_foundation():
    up = [e for e in EDGES if e.source in FOUNDATION and e.target not in FOUNDATION]
    assert not up, _where(up)


def test_a_backend_imports_nothing_above_it():
    up = [e for e in EDGES if e.source.startswith("tm2nn.backends") and e.target.startswith(ABOVE_BACKENDS)]
    assert not up, _where(up)


def test_imports_inside_functions_are_only_the_start_up_ones():
    lazy = [e for e in EDGES if e.in_function]
    stray = [e for e in lazy if not any(e.source.startswith(a) and e.target.startswith(b) for a, b in ALLOWED_LAZY)]
    assert not stray, _where(stray)
    assert len(lazy) <= MAX_FUNCTION_IMPORTS


def test_starting_the_cli_loads_no_heavy_library():
    """What the allow-list buys: the CLI's parser (every backend declared) without torch,
    onnx, numba, matplotlib, ray or pyarrow."""
    code = ("import sys, tm2nn, tm2nn.cli; tm2nn.cli.build_parser(); tm2nn.backends.all(); "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]"


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
