"""The import graph of ``tm2nn/``, imports inside functions included.

Each module's imports of tm2nn modules are read with ``ast``: top-level ones, and those
inside functions (``TYPE_CHECKING`` blocks are left out: they never run). From them:
the circles of files (strongly connected components of more than one file), the
function-level imports, and which package imports which. ``python tests/import_graph.py``
prints the figures the import-contract test enforces.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tm2nn"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported tm2nn module, dotted (resolved to a file's module)
    line: int
    in_function: bool


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` names or lies inside."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(node: ast.AST, module: str, is_package: bool, known) -> list[str]:
    """The tm2nn modules one ``import`` or ``from ... import`` statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if not is_package:
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        # `from pkg import sub` loads pkg.sub when it is a module, else pkg itself
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for n in names:
        if n.split(".")[0] != "tm2nn":
            continue
        t = _resolve(n, known)
        if t is not None and t not in out:
            out.append(t)
    return out


def imports(root: Path = PACKAGE) -> list[Import]:
    known = modules(root)
    found: list[Import] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"

        _visit(tree, False, module, is_package, known, found)
    return found


def _visit(node: ast.AST, in_function: bool, module: str, is_package: bool, known, found: list) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for sub in child.orelse:
                _visit_one(sub, in_function, module, is_package, known, found)
            continue
        _visit_one(child, in_function, module, is_package, known, found)


def _visit_one(child: ast.AST, in_function: bool, module: str, is_package: bool, known, found: list) -> None:
    if isinstance(child, (ast.Import, ast.ImportFrom)):
        for t in _targets(child, module, is_package, known):
            if t != module:
                found.append(Import(module, t, child.lineno, in_function))
        return
    inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    _visit(child, inner, module, is_package, known, found)


def circles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out, key=len, reverse=True)


def package_of(module: str) -> str:
    """``tm2nn.verify.check`` -> ``verify``; top-level modules are their own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def main() -> None:
    edges = imports()
    comps = circles(edges)
    fn = [e for e in edges if e.in_function]
    low = {"nets", "ir", "interp", "syntax", "passes", "learners", "emit", "verify"}
    up = [e for e in edges if package_of(e.source) in low and package_of(e.target) == "backends"]
    lines = sum(len(p.read_text().splitlines()) for p in (PACKAGE / "verify").rglob("*.py"))
    print(f"modules: {len(modules())}")
    print(f"circles of files: {len(comps)}; sizes {[len(c) for c in comps]}")
    for c in comps:
        print("  ", ", ".join(m.removeprefix('tm2nn.') for m in c))
    print(f"function-level imports of tm2nn modules: {len(fn)}")
    print(f"imports of tm2nn.backends from the core: {len(up)}")
    print(f"verify/ lines: {lines}")
    if "-v" in sys.argv:
        for e in fn:
            print(f"  fn {e.source}:{e.line} -> {e.target}")
        for e in up:
            print(f"  up {e.source}:{e.line} -> {e.target}")


if __name__ == "__main__":
    main()
