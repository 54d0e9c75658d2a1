"""The built wheel is a working tm2nn: every package, and the lark grammars (kept in the
top-level grammars/ folder, shipped as tm2nn/grammars), so an installed tm2nn parses."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import tomllib

from .conftest import EXAMPLES, ROOT


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tm2nn").rglob("__init__.py")}
    assert listed == found | {"tm2nn.grammars"}


def test_an_installed_wheel_parses_machines_and_circuits(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"tm2nn/grammars/tm.lark", "tm2nn/grammars/circuit.lark"} <= set(names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip puts in site-packages
    code = ("import tm2nn, sys; assert tm2nn.__file__.startswith(sys.argv[1]), tm2nn.__file__; "
            "print(tm2nn.run(sys.argv[2], '').steps, tm2nn.run(sys.argv[3], '110').outputs)")
    out = subprocess.run([sys.executable, "-c", code, str(site), str(EXAMPLES / "bb3.tm"),
                          str(EXAMPLES / "full_adder.circ")], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)}, check=True)
    assert out.stdout.split() == ["21", "01"]
