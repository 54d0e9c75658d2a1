"""The lark grammars in ``grammars/`` (repo top level; an installed wheel carries them as
``tm2nn/grammars``), built once per process."""

from __future__ import annotations

from pathlib import Path

from lark import Lark

import tm2nn

_PACKAGE = Path(tm2nn.__file__).resolve().parent
#: the installed copy (a wheel) when there is one, else the source tree's
GRAMMARS = next((d for d in (_PACKAGE / "grammars", _PACKAGE.parent / "grammars") if d.is_dir()),
                _PACKAGE.parent / "grammars")
_BUILT: dict[str, Lark] = {}


def grammar_path(filename: str) -> Path:
    return GRAMMARS / filename


def lalr_parser(filename: str, **options) -> Lark:
    """An LALR parser for ``grammars/<filename>`` with position-carrying tokens, built on
    first use.  Each grammar has one configuration: ``options`` of the first call win."""
    parser = _BUILT.get(filename)
    if parser is None:
        parser = Lark(
            grammar_path(filename).read_text(encoding="utf-8"),
            parser="lalr",
            propagate_positions=True,
            maybe_placeholders=False,
            **options,
        )
        _BUILT[filename] = parser
    return parser
