"""The built wheel is a working tm2nn: every package, and the lark grammars (kept in the
top-level grammars/ folder, shipped as tm2nn/grammars), so an installed tm2nn parses. The
sdist, and the wheel built from it (what `python -m build` does), carry the grammars, the
licence and the index metadata. CI's wheel job (.ci/wheel) installs that wheel into a fresh
venv and runs the command line; these are the fast checks."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import tomllib

from tests.conftest import EXAMPLES, ROOT


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tm2nn").rglob("__init__.py")}
    data = {"tm2nn.examples." + p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert listed == found | {"tm2nn.grammars", "tm2nn.examples"} | data


def test_an_installed_wheel_parses_machines_and_circuits(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"tm2nn/grammars/tm.lark", "tm2nn/grammars/circuit.lark"} <= set(names)
    shipped = {n.removeprefix("tm2nn/examples/") for n in names if n.startswith("tm2nn/examples/")}
    in_repo = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file()
               and p.suffix in (".tm", ".circ", ".csv", ".py", ".toml") and "__pycache__" not in p.parts}
    assert shipped == in_repo  # every example, so an installed `tm2nn demo` runs them all
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip puts in site-packages
    code = ("import tm2nn, sys; assert tm2nn.__file__.startswith(sys.argv[1]), tm2nn.__file__; "
            "from tm2nn.console import examples_dir; assert str(examples_dir()).startswith(sys.argv[1]); "
            "assert (examples_dir() / 'bb3.tm').is_file(); "
            "print(tm2nn.run(sys.argv[2], '').steps, tm2nn.run(sys.argv[3], '110').outputs)")
    out = subprocess.run([sys.executable, "-c", code, str(site), str(EXAMPLES / "bb3.tm"),
                          str(EXAMPLES / "full_adder.circ")], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)}, check=True)
    assert out.stdout.split() == ["21", "01"]


SOURCES = ["pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "grammars", "examples", "tm2nn",
           "tests/core/cli/test_packaging.py"]
CLASSIFIERS = {"Development Status :: 3 - Alpha", "Operating System :: OS Independent",
               "Programming Language :: Python :: 3.10", "Programming Language :: Python :: 3.11",
               "Programming Language :: Python :: 3.12",
               "Topic :: Scientific/Engineering :: Artificial Intelligence"}


def _build(tmp_path, *, wheel: bool = True, mutate=None):
    """`python -m build` (without isolation: offline and fast) on a copy of the sources, so the
    repository is not written to; ``mutate(src)`` breaks the copy first. Returns the dist dir."""
    src = tmp_path / "src"
    for name in SOURCES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    if mutate:
        mutate(src)
    what = [] if wheel else ["--sdist"]  # by default: the sdist, then the wheel from the sdist
    out = subprocess.run([sys.executable, "-m", "build", "--no-isolation", *what, "-o", str(tmp_path / "dist"),
                          str(src)], check=True, capture_output=True, text=True)
    (tmp_path / "build.log").write_text(out.stdout + out.stderr)
    return tmp_path / "dist"


def _metadata_problems(text: str) -> list[str]:
    """What an index needs and the core metadata ``text`` (PKG-INFO or METADATA) lacks."""
    meta = email.message_from_string(text)
    want = {"License-Expression": "MIT", "Description-Content-Type": "text/markdown"}
    problems = [f"{k} is {meta[k]!r}" for k, v in want.items() if meta[k] != v]
    if "LICENSE" not in meta.get_all("License-File", []):
        problems.append("no License-File: LICENSE")
    problems += [f"no classifier {c!r}" for c in sorted(CLASSIFIERS - set(meta.get_all("Classifier", [])))]
    if not meta["Keywords"]:
        problems.append("no keywords")
    return problems


def _sdist_problems(dist) -> list[str]:
    """What the sdist in ``dist`` lacks (grammars, LICENSE, metadata) or should not ship."""
    (sdist,) = dist.glob("tm2nn-*.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
        problems = [f"sdist lacks {n}" for n in ("grammars/tm.lark", "grammars/circuit.lark", "LICENSE",
                                                           "examples/bb3.tm")
                    if f"{top}/{n}" not in names]
        problems += ["sdist ships tests/"] * any(n.startswith(f"{top}/tests/") for n in names)
        return problems + _metadata_problems(tar.extractfile(f"{top}/PKG-INFO").read().decode())


def test_the_sdist_and_the_wheel_built_from_it_carry_grammars_licence_metadata(tmp_path):
    dist = _build(tmp_path)
    assert _sdist_problems(dist) == []
    # issue 36: every folder shipped is declared (no setuptools banner per undeclared one)
    assert "is absent from the `packages` configuration" not in (tmp_path / "build.log").read_text()
    (wheel,) = dist.glob("tm2nn-*.whl")
    info = wheel.name.split("-py3")[0] + ".dist-info"
    with zipfile.ZipFile(wheel) as z:
        assert {"tm2nn/grammars/tm.lark", "tm2nn/grammars/circuit.lark", "tm2nn/examples/bb3.tm",
                "tm2nn/examples/gd_trace/perceptron_3x1.tm"} <= set(z.namelist())
        licence = z.read(f"{info}/licenses/LICENSE").decode()
        assert licence == (ROOT / "LICENSE").read_text() and "Copyright (c) 2026 the tm2nn authors" in licence
        assert _metadata_problems(z.read(f"{info}/METADATA").decode()) == []
        assert "tm2nn = tm2nn.cli:main" in z.read(f"{info}/entry_points.txt").decode()


def test_an_sdist_without_the_grammars_is_caught(tmp_path):
    """Mutation: drop the grammars from the packaging config (the wheel of issue 21 that failed
    every parse); the sdist check must say so."""
    def drop_grammars(src):
        (src / "MANIFEST.in").write_text("include LICENSE\nprune tests\n")
        toml = (src / "pyproject.toml").read_text()
        assert '"tm2nn.grammars" = ["*.lark"]\n' in toml
        (src / "pyproject.toml").write_text(toml.replace('"tm2nn.grammars" = ["*.lark"]\n', ""))
    problems = _sdist_problems(_build(tmp_path, wheel=False, mutate=drop_grammars))
    assert problems == ["sdist lacks grammars/tm.lark", "sdist lacks grammars/circuit.lark"]
