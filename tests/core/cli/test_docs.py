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


# -- one output path, one network across the docs (issue 36) ------------------------------------
OUTPUT_FLAGS = ("-o", "--output", "--export-before", "--export-after", "--out")
SAVED = re.compile(r"""\bsave\([^\n]*?["']([^"'\n]+\.(?:onnx|pt|safetensors|png|svg))["']\s*\)""")


def _cli_writer(argv: list[str]) -> tuple:
    """What a command writes to its output path: a compile as (source, backend, options),
    anything else as its command line without the output and --json."""
    if argv[0] == "compile":
        from tm2nn.cli import build_parser
        from tm2nn.flags import option_fields

        ns = vars(build_parser().parse_args(argv))
        names = {owners[0][1].name for owners in option_fields("compile").values()}
        return ("compile", ns["source"], ns["backend"], tuple(sorted((k, str(v)) for k, v in ns.items() if k in names)))
    i = next(i for i, a in enumerate(argv) if a in OUTPUT_FLAGS)
    return tuple(a for j, a in enumerate(argv) if j not in (i, i + 1) and a != "--json")


def _python_writes(doc: Path):
    """``(line, path, writer)`` of every file a python block of ``doc`` saves: the
    ``tm2nn.compile(...)`` call behind ``NAME.save(path)`` as (source, backend, options), else
    the block's line (unique)."""
    import ast

    compiled: dict = {}
    for start, code in python_blocks(doc):
        for k, line in enumerate(code.splitlines()):
            m = re.match(r"\s*(\w+) = tm2nn\.compile\((.*)\)\s*(#.*)?$", line)
            if m:
                call = ast.parse(f"f({m.group(2)})").body[0].value
                try:
                    args = [ast.literal_eval(a) for a in call.args]
                    kw = tuple(sorted((x.arg, str(ast.literal_eval(x.value))) for x in call.keywords))
                    compiled[m.group(1)] = ("compile", args[0], args[1] if len(args) > 1 else None, kw)
                except ValueError:  # not literals: this call is its own writer
                    compiled[m.group(1)] = (doc.name, start + k)
            for p in SAVED.findall(line):
                var = re.match(r"\s*(\w+)\.save\(", line)
                who = compiled.get(var.group(1)) if var else None
                yield start + k, p, who or (doc.name, start + k)


def test_no_two_docs_write_different_networks_to_one_path():
    """Following two pages in one folder must not overwrite one's model with another's: a path
    written by two docs is written by the same command (or the same compile) in both."""
    writes: dict = {}
    for doc in DOCS:
        for line, argv, code, _ in commands(doc):
            if code == 0 and any(a in OUTPUT_FLAGS for a in argv[:-1]):
                out = argv[next(i for i, a in enumerate(argv) if a in OUTPUT_FLAGS) + 1]
                writes.setdefault(out, []).append((doc.name, line, _cli_writer(argv)))
        for line, out, who in _python_writes(doc):
            writes.setdefault(out, []).append((doc.name, line, who))
    assert {"adder.onnx", "bb3.png"} <= set(writes)
    clashes = {out: ws for out, ws in writes.items()
               if len({d for d, _, _ in ws}) > 1 and len({w for _, _, w in ws}) > 1}
    assert clashes == {}


def test_what_the_docs_write_is_ignored_by_git():
    """Following the docs in a checkout leaves nothing for `git status` to show: every file the
    documented commands write (models, pictures, a sweep's results, `python -m build`'s dist/,
    install.md's venv) is covered by .gitignore."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    outs = {"dist/tm2nn-0.1.0-py3-none-any.whl", "tm2nn-env/bin/python", "first_results/rows/x.parquet"}
    for doc in DOCS:
        for _, argv, code, _ in commands(doc):  # a refused command writes nothing
            outs.update(argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS and code == 0)
        outs.update(out for _, out, _ in _python_writes(doc))
    outs.discard("/dev/null")
    assert {"bb3.png", "bb3.safetensors", "adder_layers.svg", "first_results"} <= outs
    got = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(sorted(outs)),
                         cwd=ROOT, capture_output=True, text=True)
    assert set(got.stdout.split()) == outs, sorted(outs - set(got.stdout.split()))
