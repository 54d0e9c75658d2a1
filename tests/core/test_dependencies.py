"""Every third-party package tm2nn imports is declared in pyproject.toml (issue 36: mpmath
came only through torch), and every declared dependency is imported.  Read from the
source (imports inside functions too), not from what happens to be installed."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}
#: the extras that are tools for the repository, not features of the package
TOOL_EXTRAS = ("dev",)


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """``"pyyaml>=6"`` -> ``"pyyaml"`` (normalised as PEP 503 does)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def third_party_imports(package: Path) -> dict[str, list[str]]:
    """distribution name -> the files under ``package`` importing it (absolute imports
    that are neither the standard library nor tm2nn)."""
    out: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "tm2nn" and top not in sys.stdlib_module_names and top != "__future__":
                    out.setdefault(_name(DISTRIBUTIONS.get(top, top)), []).append(str(path.relative_to(package.parent)))
    return out


def declared() -> tuple[set[str], set[str]]:
    """(the dependencies, the feature extras' packages) of pyproject.toml."""
    project = _pyproject()["project"]
    extras = {_name(r) for k, reqs in project.get("optional-dependencies", {}).items() if k not in TOOL_EXTRAS
              for r in reqs}
    return {_name(r) for r in project["dependencies"]}, extras


def test_every_import_is_declared():
    deps, extras = declared()
    missing = {d: files for d, files in third_party_imports(ROOT / "tm2nn").items() if d not in deps | extras}
    assert not missing, f"imported by tm2nn, not declared in pyproject.toml: {missing}"


def test_every_dependency_is_imported():
    deps, _ = declared()
    unused = deps - set(third_party_imports(ROOT / "tm2nn"))
    assert not unused, f"declared in pyproject.toml, imported nowhere in tm2nn: {sorted(unused)}"


@pytest.mark.parametrize("source,found", [
    ("import mpmath\nimport os\nfrom . import x\n", {"mpmath"}),
    ("def f():\n    import yaml.constructor\n    from tm2nn import api\n", {"pyyaml"}),
    ("from __future__ import annotations\nfrom numba.core import types\n", {"numba"}),
])
def test_the_reading_finds_imports_at_any_depth(tmp_path, source, found):
    """The measurement itself: top-level and function-level imports, a module's parent
    package, import names mapped to distributions; stdlib, relative and tm2nn skipped."""
    (tmp_path / "m.py").write_text(source)
    assert set(third_party_imports(tmp_path)) == found
