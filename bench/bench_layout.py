"""The layout (issue 34, docs/architecture.md): what the import graph is and what start-up costs.

* **Import graph** (tests/import_graph.py, imports inside functions included): circles of
  files, function-level imports of tm2nn modules, core -> backends imports, verify/ lines.
  tests/core/test_import_contract.py enforces them; this row records them with the run.
* **Start-up.** Wall time of a fresh process, best of REPEATS: ``import tm2nn``, the CLI's
  parser with every backend declared, and ``tm2nn check examples/bb3.tm``, each as a ratio
  to a bare ``python -c pass`` measured in the same run (the interpreter's own start), and
  which heavy libraries each loaded (none should).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import import_graph  # noqa: E402  (tests/import_graph.py: the measurement the contract test uses)

REPEATS = 5
HEAVY = ("torch", "onnx", "onnxruntime", "numba", "matplotlib", "ray", "pyarrow")
PROBE = f"; import sys; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
CASES = {
    "bare python": "pass",
    "import tm2nn": "import tm2nn" + PROBE,
    "CLI parser, every backend": "import tm2nn.cli; tm2nn.cli.build_parser()" + PROBE,
    "tm2nn check bb3.tm": ("import contextlib, io, tm2nn.cli\nwith contextlib.redirect_stdout(io.StringIO()): "
                          "tm2nn.cli.main(['check', 'examples/bb3.tm'])\n" + PROBE.lstrip("; ")),
}


def graph_row() -> dict:
    edges = import_graph.imports()
    core = {"nets", "ir", "interp", "syntax", "passes", "learners", "emit", "verify"}
    up = [e for e in edges if import_graph.package_of(e.source) in core and import_graph.package_of(e.target) == "backends"]
    lines = sum(len(p.read_text().splitlines()) for p in (import_graph.PACKAGE / "verify").rglob("*.py"))
    return {"bench": "layout: import graph", "modules": len(import_graph.modules()),
            "circles": len(import_graph.circles(edges)), "function_level_imports": sum(e.in_function for e in edges),
            "core_to_backends": len(up), "verify_lines": lines}


def _run(code: str) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        best = min(best, time.perf_counter() - t0)
        out = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return best, out


def startup_rows() -> list[dict]:
    base, _ = _run(CASES["bare python"])
    rows = [{"bench": "layout: start-up", "case": "bare python", "s": round(base, 3)}]
    for name, code in CASES.items():
        if name == "bare python":
            continue
        t, heavy = _run(code)
        rows.append({"bench": "layout: start-up", "case": name, "s": round(t, 3), "x_bare_python": round(t / base, 1),
                     "heavy_loaded": heavy})
    return rows


def main(argv: list[str]) -> list[dict]:
    return [graph_row(), *startup_rows()]


if __name__ == "__main__":
    for row in main(sys.argv[1:]):
        print(json.dumps(row), flush=True)
