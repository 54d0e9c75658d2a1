"""The run report: what ``tm2nn.run``, ``Compiled.run`` and ``--json`` give back.

One type for machines and circuits (ARCHITECTURE.md, "--json run report"): a ``dict``
with the contract's keys, readable as attributes too, so it prints, compares and
serialises as the JSON the CLI writes.

* machines: ``halted``, ``steps``, ``state``, ``outcome``, ``tape``, ``head``, ``sigma``
  (a backend may add fields of its own, e.g. ``optimizer_steps``);
* circuits and models with bit outputs: ``outputs`` (``"0110..."``, or a list of numbers
  for real-valued outputs).

``report.run`` is the interpreter's :class:`~tm2nn.interp.machine.RunResult` (with its
trace when one was asked for) or the run decoded from a network, when there is one; it is
not part of the JSON.
"""

from __future__ import annotations

import json


class Report(dict):
    """A run report (see the module doc)."""

    run = None  # the RunResult behind the report, if any (not serialised)
    notes: list = ()  # lines for a human reader (not serialised)
    failure: str | None = None  # why this run does not count as a success, beyond not halting

    def __init__(self, fields=(), *, run=None, **kw):
        super().__init__(fields, **kw)
        self.run = run

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"this report has no field {name!r} (fields: {', '.join(self)})") from None

    @property
    def ok(self) -> bool:
        """True unless the machine did not halt or ran outside the model's window."""
        return self.get("halted") is not False and not self.get("overflow") and self.failure is None

    def to_json(self) -> str:
        return json.dumps(dict(self))

    @classmethod
    def of_run(cls, result) -> "Report":
        """The report of an interpreter or decoded :class:`RunResult`."""
        return cls(result.report(), run=result)

    def __repr__(self) -> str:
        return f"Report({dict.__repr__(self)})"


def trace_rows(result) -> list[dict]:
    """``run --trace``'s steps of an interpreter :class:`RunResult` (kept with ``trace=True``):
    ``{"step", "state", "head", "read", "write"}`` each (a grid head is ``[row, column]``)."""
    m, tr = result.machine, result.trace
    grid = bool(len(tr.head_row))
    return [{"step": k + 1, "state": m.states[tr.state[k]],
             "head": [tr.head_row[k], tr.head[k]] if grid else tr.head[k],
             "read": m.alphabet[tr.read[k]], "write": m.alphabet[tr.write[k]]} for k in range(len(tr))]
