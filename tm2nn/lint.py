"""``tm2nn check``: likely mistakes in a source that parses, and its documented header.

The parsers and :func:`tm2nn.ir.machine.validate_machine` reject what is *wrong*.  This
module reports what is *valid but almost certainly not meant*, each as a located
:class:`Diagnostic` (``file:line:col: warning: ...`` with the source line and a caret).
``tm2nn check`` prints them; any ``error`` makes it exit 2, ``warning`` s leave it at 0.
Other verbs do not lint: ``tm2nn run`` runs what the format says.

What is checked, per format, and why it is an error or a warning
-----------------------------------------------------------------
**1. The start state has no rules and is not a halting state.**  The machine halts at
step 0 on every input, and none of its rules is ever used.

* ``tm``: *error*, at the ``start:`` value.  States are declared by being mentioned, so a
  misspelt ``start:`` silently makes a new, empty state; and the language has a proper
  way to say "halt at once" (declare the start state in ``halt:``/``accept:``/``reject:``),
  so the error is never in the way of a machine someone meant.
* ``morphett``: *error*, at the first rule.  Every program starts in state ``0``; one
  with no rule for ``0`` (nor a ``*`` state rule) cannot use any of its rules — the
  classic mistake of calling the first state ``start`` or ``q0``.
* ``std`` and ``tmio``: *error* when the machine has rules (all of them are unreachable),
  *warning* when it has none.  These formats have no other way to write "halt at once"
  (std: a row A of ``---``; turingmachine.io: a start state with an empty entry), so a
  machine with nothing else in it was written that way on purpose.

**2. A rule goes to an undeclared state.**

* ``tm`` with a ``states:`` list: the parser's *error* (``unknown state``).  Without one,
  every state a rule names is declared by that mention, so "undeclared" means a target
  with no rules that is not declared halting: a *warning* at the rule's NEXT.  The run
  does stop there (a missing rule halts), so the machine works; but a misspelt ``dnoe``
  for ``done`` also loses the outcome, and "stops where no rule applies" is only
  sometimes meant (declaring the state in ``halt:`` says so and silences the warning).
* ``morphett``: the same *warning*: states are declared by use, and a run halts only in
  states whose name starts with ``halt``; a target with no rules and another name (a
  misspelt ``hlat``, or ``error``) halts by a missing rule.
* ``std``: does not apply: a letter that names no row *is* a halting state, by the format's
  definition.  ``tmio``: the parser's *error* (every next state must be a key of
  ``table``); a state with no entry is the format's halting state, so no warning.

**3. A rule writes a symbol outside the alphabet.**

* ``tm`` with ``alphabet:``: the parser's *error* (``symbol ... is not in the alphabet``).
  ``std``: the parser's *error* (a digit beyond the row width).
* ``tm`` without ``alphabet:``, ``morphett`` and ``tmio``: does not apply; the alphabet is
  inferred from the symbols the program reads and writes.

**4. The header.**  :func:`check_header` runs a file's first item on its documented
``# input:`` and compares with ``# output:`` / ``# outcome:``, as ``tm2nn demo`` does
(:mod:`tm2nn.syntax.headers` says what a match is).  A difference is an *error* at the
documented line: the file's own documentation is false.  A run that does not halt within
:data:`HEADER_MAX_STEPS` is a *warning* (nothing was shown wrong; it may be a long run).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from tm2nn.api import run_circuit
from tm2nn.errors import Loc, Tm2nnError, render_located
from tm2nn.interp import run_machine
from tm2nn.ir import Circuit, Machine
from tm2nn.source import SourceText, line_of, registered
from tm2nn.syntax import EXTENSIONS, format_module, guess_format, load_all, select
from tm2nn.syntax.confusables import confusable_groups, first_difference, mixed_script
from tm2nn.syntax.headers import circuit_mismatches, machine_mismatches, read_header

HEADER_MAX_STEPS = 1_000_000

#: per machine format: (severity of "start state has no rules" when the machine has rules,
#: when it has none, whether "target state has no rules and is not halting" applies)
_POLICY: dict[str | None, tuple[str, str, bool]] = {
    "tm": ("error", "error", True),
    "morphett": ("error", "error", True),
    "std": ("error", "warning", False),
    "tmio": ("error", "warning", False),
    None: ("warning", "warning", False),  # built in Python, or a format not listed here
}


@dataclass(frozen=True)
class Diagnostic:
    """One finding of ``tm2nn check``: ``severity`` is ``"error"`` or ``"warning"``;
    ``snippet`` is the source line (None when it is not known)."""

    severity: str
    message: str
    file: str | None
    line: int | None
    col: int | None
    snippet: str | None
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """The same layout as :meth:`Tm2nnError.render`, with ``warning:`` or ``error:``."""
        return render_located(self.severity, self.message, self.file, self.line, self.col, self.snippet, self.notes)

    def __str__(self) -> str:
        return self.render()

    def to_error(self) -> Tm2nnError:
        """The same finding as a :class:`Tm2nnError` (to raise it)."""
        return Tm2nnError(self.message, file=self.file, line=self.line, col=self.col,
                          snippet=self.snippet, notes=self.notes)


def _at(severity: str, loc: Loc | None, message: str, notes=(), file: str | None = None) -> Diagnostic:
    if loc is None:
        return Diagnostic(severity, message, file, None, None, None, tuple(notes))
    return Diagnostic(severity, message, loc.file, loc.line, loc.col, line_of(loc), tuple(notes))


def _format_of(path: str | None, fmt: str | None) -> str | None:
    if fmt is not None:
        return fmt
    if path is None:
        return None

    return EXTENSIONS.get(Path(path).suffix.lower())


def _did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _first(locs) -> Loc | None:
    """The earliest location in the file (rules of one state may be spread over lines)."""
    locs = [x for x in locs if x is not None]
    return min(locs, key=lambda x: (x.line, x.col)) if locs else None


# ---------------------------------------------------------------------------------------
# lint
# ---------------------------------------------------------------------------------------


def lint(item, path: str | None = None, fmt: str | None = None) -> list[Diagnostic]:
    """The likely mistakes in one parsed item (see the module docstring).  ``fmt`` is the
    format it was read in (default: from ``path``'s extension); circuits and learners have
    none to report."""

    if isinstance(item, Machine):
        return _lint_machine(item, _format_of(path, fmt), path) + _lint_names(_machine_names(item), path)
    if isinstance(item, Circuit):
        return _lint_names(_circuit_names(item), path)
    return []


def _machine_names(m) -> list[tuple[str, dict]]:
    """``(kind, {name: where first written})`` for a machine's states and symbols."""
    where = m.locations or {}
    states: dict = {m.start: where.get("start", m.loc)}
    symbols: dict = {}
    for r in m.rules:
        states.setdefault(r.state, r.loc)
        states.setdefault(r.next, where.get(("next", r.state, r.read), r.loc))
        symbols.setdefault(r.read, r.loc)
        symbols.setdefault(r.write, r.loc)
    for q in (*m.states, *m.halting):
        states.setdefault(q, m.loc)
    for a in m.alphabet:
        symbols.setdefault(a, m.loc)
    return [("state", states), ("symbol", symbols)]


def _circuit_names(c) -> list[tuple[str, dict]]:
    """``("signal", {name: where first written})`` for a circuit's ports and named gates."""
    signals: dict = {n: c.port_locs.get(n, c.loc) for n in c.inputs}
    for g in c.gates:
        if "$" not in g.name:  # internal gates are named after the signal they feed
            signals.setdefault(g.name, g.loc)
    for n in c.outputs:
        signals.setdefault(n, c.port_locs.get("output:" + n, c.loc))
    return [("signal", signals)]


def _lint_names(groups, path: str | None) -> list[Diagnostic]:
    """Warnings for names that look alike but differ (tm2nn.syntax.confusables), at the later
    one, and for names whose letters mix Latin, Cyrillic and Greek."""
    out: list[Diagnostic] = []
    for kind, locs in groups:
        for group in confusable_groups(locs):
            group.sort(key=lambda n: (locs[n].line, locs[n].col) if locs[n] else (0, 0))
            first = group[0]
            for other in group[1:]:
                notes = (f"{locs[first]}: note: {kind} {first!r} is here",) if locs[first] else ()
                out.append(_at("warning", locs[other],
                               f"{kind} {other!r} looks like {kind} {first!r} but is another {kind} "
                               f"({first_difference(other, first)}): a look-alike letter makes a new {kind}",
                               notes, file=path))
        for name, used in mixed_script(locs):
            out.append(_at("warning", locs[name], f"{kind} {name!r} mixes {' and '.join(s.title() for s in used)} "
                           f"letters ({first_difference(name, '')}): it may not be the {kind} it looks like",
                           file=path))
    return out


def _lint_machine(m, fmt: str | None, path: str | None) -> list[Diagnostic]:
    sev_rules, sev_empty, targets_apply = _POLICY.get(fmt, _POLICY[None])
    where = m.locations or {}
    live = {r.state for r in m.rules}  # states with at least one rule
    out: list[Diagnostic] = []

    # 1. a start state with no way out
    start_dead = m.start not in live and m.start not in m.halting
    if start_dead:
        sev = sev_rules if m.rules else sev_empty
        unused = " and none of its rules is ever used" if m.rules else ""
        if fmt == "morphett":
            first = min(m.rules, key=lambda r: (r.loc.line, r.loc.col) if r.loc else (0, 0), default=None)
            notes = ()
            if first is not None:
                notes = (f"note: the first rule is for state {first.state!r}; a morphett program "
                         f"starts in state 0, so rename {first.state!r} to 0 if it starts there",)
            out.append(_at(sev, first.loc if first else m.loc,
                           f"no rule for state '0', where every morphett program starts: the machine "
                           f"halts on its first step{unused}", notes, file=path))
        elif fmt == "std":
            out.append(_at(sev, where.get("start", m.loc),
                           f"row A (the start state) has only undefined transitions '---': the machine "
                           f"halts at step 0 on every input{unused}", file=path))
        else:
            hint = _did_you_mean(m.start, live)
            notes = ()
            if fmt == "tm":
                notes = (f"note: to halt at once on purpose, declare it halting:  halt: {m.start}",)
            what = "instructions" if fmt == "tmio" else "rules"
            out.append(_at(sev, where.get("start", m.loc),
                           f"start state {m.start!r} has no {what} and is not a halting state: the "
                           f"machine halts at step 0 on every input{unused}{hint}", notes, file=path))

    # 2. rules into a state with no way out that is not declared halting
    if targets_apply and not (fmt == "tm" and "states" in where):
        dead: dict[str, list] = {}
        for r in m.rules:
            q = r.next
            if q in live or q in m.halting or (start_dead and q == m.start):
                continue
            dead.setdefault(q, []).append(where.get(("next", r.state, r.read), r.loc))
        for q, locs in dead.items():
            if fmt == "morphett":
                hint = _did_you_mean(q, [*live, *m.halting, "halt", "halt-accept", "halt-reject"])
                msg = (f"state {q!r} has no rules and its name does not start with 'halt': a run that "
                       f"enters it stops there by a missing rule{hint}")
            else:
                hint = _did_you_mean(q, [*live, *m.halting])
                msg = (f"state {q!r} has no rules and is not a halting state: a run that enters it "
                       f"stops there by a missing rule{hint}")
            notes = [f"note: {len(locs) - 1} more rule(s) go to {q!r}"] if len(locs) > 1 else []
            if fmt == "tm":
                notes.append(f"note: if the machine is meant to stop there, declare it:  halt: {q}")
            out.append(_at("warning", _first(locs), msg, notes, file=path))
    return out


# ---------------------------------------------------------------------------------------
# the documented header
# ---------------------------------------------------------------------------------------


def check_header(path, item, fmt: str | None = None, max_steps: int = HEADER_MAX_STEPS) -> list[Diagnostic]:
    """Run ``item`` (the file's first machine or circuit) on the input the header of the
    file at ``path`` documents and compare with its ``# output:`` / ``# outcome:`` lines.

    The input is ``# input:``, else the format's own default (morphett ``$INITIAL_TAPE``,
    turingmachine.io ``input:``, as ``tm2nn run`` uses), else empty.  Nothing is run when
    the header documents no result, nor for learners and ``# train:`` machines (their
    headers describe training; ``tm2nn demo`` checks those).
    """

    hdr = read_header(path)
    if "train" in hdr or not isinstance(item, (Machine, Circuit)):
        return []
    documented = ("output",) if isinstance(item, Circuit) else ("output", "outcome")
    shown = [hdr[k] for k in documented if k in hdr]
    if not shown:
        return []
    values = {k: h.value for k, h in hdr.items()}
    file = str(path)
    src = _source_of(file)

    def at(severity: str, line: int, col: int, message: str, notes=()) -> Diagnostic:
        snippet = src.line_text(line) if src else None
        return Diagnostic(severity, message, file, line, col, snippet, tuple(notes))

    inp = hdr.get("input")
    if inp is not None:
        text = inp.value
    else:
        try:
            text = _default_input(path, fmt) or ""
        except Tm2nnError as e:
            return [at("error", shown[0].line, shown[0].col, f"cannot run the documented example: {e.message}")]

    def bad_input(e: Tm2nnError) -> list[Diagnostic]:
        if inp is None:
            return [at("error", shown[0].line, shown[0].col, f"the default input cannot be run: {e.message}")]
        col = inp.col + (e.col - 1 if e.file == "input" and e.col else 0)
        return [at("error", inp.line, col, f"documented {e.message}")]

    if isinstance(item, Circuit):
        try:
            got = run_circuit(item, text)["outputs"]
        except Tm2nnError as e:
            return bad_input(e)
        return [at("error", hdr[k].line, hdr[k].col,
                   f"the circuit's output on input {text!r} is {actual!r}, not the documented {want!r}")
                for k, want, actual in circuit_mismatches(values, got)]


    try:
        r = run_machine(item, text, max_steps)
    except Tm2nnError as e:
        return bad_input(e)
    if not r.halted:
        first = shown[0]
        return [at("warning", first.line, first.col,
                   f"the run on input {text!r} did not halt within {max_steps:,} steps, so the "
                   f"documented {first.key} was not checked")]
    note = f"note: the run halted in state {r.state!r} after {r.steps} steps with tape {r.tape!r}"
    what = {"output": "tape", "outcome": "outcome"}
    return [at("error", hdr[k].line, hdr[k].col,
               f"the run on input {text!r} ends with {what[k]} {actual!r}, not the documented {want!r}",
               (note,))
            for k, want, actual in machine_mismatches(values, r)]


def _source_of(file: str):
    """The file's registered text (the parser registered it), else read it now."""

    src = registered(file)
    if src is not None:
        return src
    try:
        return SourceText.from_file(file).text_form()
    except Tm2nnError:
        return None


def _default_input(path, fmt: str | None) -> str | None:
    mod = format_module(fmt or guess_format(path))
    fn = getattr(mod, "default_input", None)
    if fn is None:
        return None
    src = _source_of(str(path))
    return fn(src) if src is not None else None


# ---------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------


def check_report(path, fmt: str | None = None, name: str | None = None,
                 all_items: bool = False) -> tuple[list, list[Diagnostic]]:
    """What ``tm2nn check`` reports: ``(items, diagnostics)``.

    ``items`` are the checked items: every item of the file with ``all_items``, else the
    one ``name`` picks (default the first).  ``diagnostics`` are :func:`lint`'s for each of
    them and :func:`check_header`'s (for the file's first item, which its header
    documents, when it is among them), in source order.  A file that does not parse
    raises :class:`Tm2nnError`, as :func:`tm2nn.syntax.load_all` does.
    """

    items = load_all(path, fmt)
    fmt = fmt or guess_format(path)
    chosen = list(items) if all_items else [select(items, name, str(path))]
    diags: list[Diagnostic] = []
    for it in chosen:
        diags.extend(lint(it, str(path), fmt))
    if any(it is items[0] for it in chosen):
        diags.extend(check_header(path, items[0], fmt))
    diags.sort(key=lambda d: (d.file or "", d.line or 0, d.col or 0))
    return chosen, diags
