"""Names that look alike but differ: ``А`` (U+0410, Cyrillic) beside ``A`` (Latin).

Two names are *confusable* when their :func:`skeleton` s are equal: the NFKC form
(``ｑ０`` is ``q0``, ``ﬁ`` is ``fi``) with each Cyrillic or Greek letter that looks like a
Latin one replaced by it (:data:`LOOKALIKE`, a small table in the spirit of Unicode's
confusables.txt, for the three scripts names are written in).  A name is *mixed-script*
when its letters come from more than one of Latin, Cyrillic and Greek (``pАss``).
``tm2nn check`` warns about both (:mod:`tm2nn.lint`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

_PAIRS = {
    # Cyrillic capitals and small letters
    "А": "A", "В": "B", "Е": "E", "Ѕ": "S", "І": "I", "Ј": "J", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ү": "Y", "Ӏ": "I", "Ԛ": "Q", "Ԝ": "W",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ү": "y",
    # Greek capitals and small letters
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ν": "v", "ρ": "p", "υ": "u", "ϲ": "c", "ϳ": "j",
}
#: Cyrillic or Greek letter -> the Latin letter it looks like.
LOOKALIKE = str.maketrans(_PAIRS)
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def skeleton(name: str) -> str:
    """What ``name`` looks like: NFKC, then every look-alike letter made Latin."""
    return unicodedata.normalize("NFKC", name).translate(LOOKALIKE)


def scripts(name: str) -> list[str]:
    """The scripts among Latin, Cyrillic and Greek of ``name``'s letters, in order of first use."""
    found: list[str] = []
    for ch in name:
        if ch.isascii() or not ch.isalpha():
            script = "LATIN" if ch.isascii() and ch.isalpha() else None
        else:
            script = unicodedata.name(ch, "").split(" ", 1)[0]
        if script in _SCRIPTS and script not in found:
            found.append(script)
    return found


def describe(ch: str) -> str:
    """``U+0410 CYRILLIC CAPITAL LETTER A``."""
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}"


def first_difference(a: str, b: str) -> str:
    """The first character of ``a`` that is not ASCII and not where ``b`` has it, described."""
    for i, ch in enumerate(a):
        if not ch.isascii() and (i >= len(b) or b[i] != ch):
            return describe(ch)
    for ch in a:
        if not ch.isascii():
            return describe(ch)
    return repr(a)


def confusable_groups(names: Iterable[str]) -> list[list[str]]:
    """Groups (in first-seen order) of two or more distinct names with one skeleton.  All-ASCII
    input has none, and costs one check."""
    names = list(dict.fromkeys(names))
    if "".join(names).isascii():
        return []
    by: dict[str, list[str]] = {}
    for n in names:
        by.setdefault(n if n.isascii() else skeleton(n), []).append(n)
    return [g for g in by.values() if len(g) > 1]


def mixed_script(names: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``(name, scripts)`` for each name whose letters mix Latin, Cyrillic and Greek."""
    return [(n, s) for n in dict.fromkeys(names) if not n.isascii() and len(s := scripts(n)) > 1]
