"""Every `tm2nn` command in the README and in docs/*.md runs as documented: in order, per
file, from a scratch folder that looks like the repository root (``examples/`` and, when
present, ``../shared``).  A command's exit code must be 0, or the ``# exit N`` its comment
gives; ``"key": value`` pairs in a ``# => {...}`` comment (or on a following ``# ...``
line) must be in the command's last JSON line.  Every ```python block runs too, in order,
per file, in one namespace (its ``assert``s are the documented results).  So the docs
cannot rot."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tm2nn.cli import main

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PREFIXES = (".venv/bin/tm2nn ", "tm2nn ")
PAIR = re.compile(r'"(\w+)":\s*(\[[^\]]*\]|"[^"]*"|-?[\d.]+(?:[eE][-+]?\d+)?|true|false|null)')


def commands(path: Path) -> list[tuple[int, list[str], int, dict]]:
    """``(line, argv, expected exit code, expected JSON fields)`` of every command in the
    ```sh blocks of ``path``."""
    out: list[tuple[int, list[str], int, dict]] = []
    in_sh, pending = False, ""
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.startswith("```"):
            in_sh = (not in_sh) and line in ("```sh", "```bash", "```console")
            continue
        if not in_sh:
            continue
        if line.startswith("# ...") and out and out[-1][0] == i - 1:  # expected output, next line
            out[-1][3].update(_pairs(line))
            continue
        if pending:
            line = pending + " " + line
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].strip()
            continue
        prefix = next((p for p in PREFIXES if line.startswith(p)), None)
        if prefix is None:
            continue
        cmd, _, comment = line[len(prefix):].partition(" #")
        m = re.search(r"exit (\d)", comment)
        want = _pairs(comment.split("=>", 1)[1]) if "=>" in comment else {}
        out.append((i, shlex.split(cmd), int(m.group(1)) if m else 0, want))
    return out


def _pairs(text: str) -> dict:
    return {k: json.loads(v) for k, v in PAIR.findall(text)}


def test_the_parser_finds_commands_and_expectations():
    cmds = commands(ROOT / "docs" / "guide.md")
    assert len(cmds) >= 20
    eval_fa = next(c for c in cmds if c[1][:2] == ["eval", "full_adder.onnx"])
    assert eval_fa[3] == {"outputs": "11"} and eval_fa[2] == 0
    assert any(c[2] == 2 for c in cmds)


@pytest.fixture()
def repo_like(tmp_path, monkeypatch):
    """A scratch repository root: ``examples`` (and ``../shared``) linked, cwd set."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "examples").symlink_to(ROOT / "examples")
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("doc", [d for d in DOCS if commands(d)], ids=lambda d: d.name)
def test_documented_commands_run(doc, repo_like, capsys):
    for line, argv, code, want in commands(doc):
        if any("../shared" in a for a in argv) and not SHARED.is_dir():
            continue
        got = main(argv)
        out, err = capsys.readouterr()
        where = f"{doc.name}:{line}: tm2nn {' '.join(argv)}"
        assert got == code, f"{where}: exit {got}, documented {code}\n{err[-2000:]}"
        assert "Traceback" not in err, where
        if want:
            js = [ln for ln in out.splitlines() if ln.startswith("{")]
            assert js, f"{where}: no JSON output"
            rep = json.loads(js[-1])
            for k, v in want.items():
                assert rep.get(k) == v, f"{where}: {k} = {rep.get(k)!r}, documented {v!r}"


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line, code)`` of every ```python block of ``path``."""
    out, block, start = [], None, 0
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if block is None and line.strip() == "```python":
            block, start = [], i + 1
        elif block is not None and line.strip() == "```":
            out.append((start, "\n".join(block)))
            block = None
        elif block is not None:
            block.append(line)
    return out


@pytest.mark.parametrize("doc", [d for d in DOCS if python_blocks(d)], ids=lambda d: d.name)
def test_documented_python_runs(doc, repo_like, capsys, monkeypatch):
    import sys
    import types

    module = types.ModuleType(f"docs_{doc.stem}")  # a real module: dataclasses look their class up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    import linecache

    for line, code in python_blocks(doc):
        where = f"{doc.name}:{line}"
        # the source stays readable (tracebacks; nnsight reads a `with` block's source)
        linecache.cache[where] = (len(code), None, code.splitlines(True), where)
        try:
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - our own docs
        except Exception as e:  # noqa: BLE001 - report which block failed, and where
            pytest.fail(f"{doc.name}:{line}: {type(e).__name__}: {e}")
