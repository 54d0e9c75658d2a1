"""Claims in the docs that something has not been done yet (issue 36, point 15).

A sentence such as "we have not computed the transformer's all-layer margin" goes stale
the day someone computes it, and nothing notices.  Every such sentence in README.md and
docs/ must be listed in :data:`OPEN_CLAIMS` with a check that is True while the claim
still holds (the feature it says is missing is still missing).  The test fails when

* a docs line makes such a claim and is not listed (list it, with its check), or
* a listed claim's check says the feature now exists (the sentence is stale: fix it and
  drop the entry), or
* a listed claim is no longer in the docs (drop the entry).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: phrases that say something is missing, unmeasured or left for later
PATTERN = re.compile(
    r"\b(?:we have not|we did not|has not been|have not been|not yet (?:been )?(?:computed|measured|implemented|"
    r"supported|tested|done|built)|is not implemented|are not implemented|not implemented yet|left for (?:when|later|"
    r"future|a later)|is future work|TODO|FIXME|XXX)\b", re.IGNORECASE)


def _missing(module: str, name: str | None = None) -> bool:
    """True while ``module`` (and its attribute ``name``) does not exist."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return True
    return name is not None and not hasattr(mod, name)


def _no_dense_draw() -> bool:
    import inspect

    alg = importlib.import_module("tm2nn.backends.rcnn.algorithm1")
    params = inspect.signature(alg.algorithm1).parameters
    return not any("dense" in p for p in params) and not any("dense" in n and callable(getattr(alg, n))
                                                           for n in dir(alg) if not n.startswith("_"))


#: (file, a fragment of the claim's line) -> a check that is True while the claim holds
OPEN_CLAIMS = {
    # the learner draws at the planted support only: no option or function draws densely
    ("docs/rcnn_algorithm1.md", "A dense draw at Definition 5's shapes is not implemented"):
        lambda: _no_dense_draw(),
}

#: claims a fix has made false, kept so that the sentence cannot come back unnoticed:
#: (file, fragment) -> a check that is True while the claim would hold (False: stale)
SETTLED = {
    ("docs/transformer.md", "have not computed the transformer's all-layer margin"):
        lambda: _missing("tm2nn.backends.transformer.margin", "certified_radius"),
    ("docs/rcnn.md", "NetIR ops is left for"):
        lambda: _missing("tm2nn.nets.grid", "PatchMap"),
}


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _claims() -> list[tuple[str, int, str]]:
    out = []
    for path in _doc_files():
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        in_code = False
        for i, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
            # a claim may wrap: read the line with the next one
            text = line + " " + (lines[i] if i < len(lines) else "")
            m = None if in_code else PATTERN.search(text)
            if m is not None and m.start() < len(line):  # a claim that starts on this line
                out.append((rel, i, text))
    return out


def test_every_not_yet_claim_is_listed_and_still_true():
    problems = []
    for rel, i, text in _claims():
        keys = [k for k in [*OPEN_CLAIMS, *SETTLED] if k[0] == rel and k[1] in text]
        if not keys:
            problems.append(f"{rel}:{i}: a claim that something is not done, listed nowhere: {text.strip()[:160]!r} "
                            "(add it to OPEN_CLAIMS with a check of the code that would make it false)")
            continue
        for k in keys:
            holds = (OPEN_CLAIMS.get(k) or SETTLED[k])()
            if not holds:
                problems.append(f"{rel}:{i}: the docs say {k[1]!r}, but the code says otherwise: the sentence "
                                "is stale")
    assert not problems, "\n".join(problems)


def test_listed_open_claims_are_still_in_the_docs():
    text = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in _doc_files()}
    gone = [k for k in OPEN_CLAIMS if k[1] not in " ".join(text.get(k[0], "").split())]
    assert not gone, f"listed claims no longer in the docs (drop them from OPEN_CLAIMS): {gone}"


def test_settled_claims_are_false_now():
    # each settled claim's check must say the feature exists (else it belongs in OPEN_CLAIMS)
    still = [k for k, holds in SETTLED.items() if holds()]
    assert not still, f"claims listed as settled whose feature is missing: {still}"


def test_the_pattern_finds_the_kind_of_sentence_it_is_for():
    assert PATTERN.search("we have not computed the transformer's all-layer margin")
    assert PATTERN.search("Turning this into NetIR ops is left for when the grid ops land.")
    assert not PATTERN.search("a working cell not yet written")


def test_the_transformer_margin_sentence_cites_the_computed_radius():
    """docs/transformer.md names the margin it says is computed; the number is the code's."""
    import tm2nn
    from tm2nn.backends.transformer.margin import certified_radius

    text = " ".join((ROOT / "docs/transformer.md").read_text(encoding="utf-8").split())
    m = re.search(r"bb4 at T = 8 with corrections: (\d\.\d)·10⁻([⁰¹²³⁴⁵⁶⁷⁸⁹])", text)
    assert m, "docs/transformer.md no longer cites the certified radius of bb4 at T = 8"
    cited = float(m.group(1)) * 10.0 ** -"⁰¹²³⁴⁵⁶⁷⁸⁹".index(m.group(2))
    got = certified_radius(tm2nn.compile(str(ROOT / "examples/bb4.tm"), "transformer", steps=8))["radius"]
    assert f"{got:.1e}" == f"{cited:.1e}"
