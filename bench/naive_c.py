"""A naive C simulator of a line machine: the direct-simulation baseline of the long-run
table (issue 39: "a naive C simulator, 3.1·10⁸ steps/s").

The machine's rules become three C arrays (write, move, next) indexed by ``state·|Σ| +
symbol``; the loop is the textbook one (halting check, lookup, write, move), compiled with
``cc -O2``.  Its final configuration (steps, state, head, every written cell) is compared
with the reference interpreter's before its rate counts.  The rate is per CPU-second of the
simulator process (``clock()``, its loop only).  A C compiler is needed for this row only;
without one the row says so and the rest of the benchmark runs (tm2nn itself never needs
one).  Run alone: ``python bench/naive_c.py [T]``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tm2nn.interp import run_machine

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(void) {
  unsigned char *tape = calloc(TAPE, 1);
  for (long i = 0; i < TAPE; i++) tape[i] = BLANK;
  for (long i = 0; i < NIN; i++) tape[ORIGIN + i] = INPUT[i];
  long h = ORIGIN, t = 0; int q = START;
  clock_t c0 = clock();
  for (; t < STEPS; t++) {
    if (HALTING[q]) break;
    int r = q * NSYM + tape[h];
    if (!HAS[r]) { t += COUNTS; break; }
    tape[h] = WR[r]; h += MV[r]; q = NX[r];
  }
  double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
  printf("%ld %d %ld %.9f\n", t, q, h - ORIGIN, cpu);
  for (long i = 0; i < TAPE; i++) if (tape[i] != BLANK) printf("%ld %d\n", i - ORIGIN, tape[i]);
  return 0;
}
"""


def _array(name: str, ctype: str, values) -> str:
    return f"static const {ctype} {name}[] = {{{', '.join(str(int(v)) for v in values)}}};\n"


def c_source(m, text: str, steps: int) -> str:
    """The simulator of line machine ``m`` on ``text`` for at most ``steps`` steps."""
    S, Q = len(m.alphabet), len(m.states)
    sym, st = {a: i for i, a in enumerate(m.alphabet)}, {q: i for i, q in enumerate(m.states)}
    has, wr, mv, nx = [0] * (Q * S), [0] * (Q * S), [0] * (Q * S), [0] * (Q * S)
    for r in m.rules:
        k = st[r.state] * S + sym[r.read]
        has[k], wr[k], nx[k] = 1, sym[r.write], st[r.next]
        mv[k] = {"L": -1, "R": 1, "S": 0}[r.move]
    tape = 2 * steps + len(text) + 4
    head = "".join(f"#define {k} {v}\n" for k, v in {
        "TAPE": tape, "ORIGIN": steps + 2, "NIN": len(text), "BLANK": sym[m.blank], "START": st[m.start],
        "NSYM": S, "STEPS": steps, "COUNTS": int(m.missing_rule_counts_step)}.items())
    tables = (_array("HAS", "unsigned char", has) + _array("WR", "unsigned char", wr) + _array("MV", "int", mv)
              + _array("NX", "int", nx) + _array("HALTING", "unsigned char", [q in m.halting for q in m.states])
              + _array("INPUT", "unsigned char", [sym[c] for c in text] or [0]))
    return head + tables + _MAIN


def c_rate(m, text: str, steps: int) -> dict:
    """Compile and run the simulator; check it against the interpreter; its steps per CPU-second."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return {"bench": f"naive C simulator {m.name}", "skipped": "no C compiler on this machine"}
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "sim.c", Path(tmp) / "sim"
        src.write_text(c_source(m, text, steps))
        subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    t, q, h, cpu = out[0].split()
    cells = {int(a): m.alphabet[int(b)] for a, b in (ln.split() for ln in out[1:] if ln)}
    want = run_machine(m, text, steps)
    got = (int(t), m.states[int(q)], int(h), cells)
    blank = m.blank
    ref = (want.steps, want.state, want.head, {k: v for k, v in want.cells.items() if v != blank})
    assert got == ref, f"the C simulator's run differs from the interpreter's: {got[:3]} against {ref[:3]}"
    return {"bench": f"naive C simulator {m.name} T={steps:.0e}", "steps": int(t), "cpu_s": float(cpu),
            "steps_per_cpu_s": round(int(t) / max(float(cpu), 1e-9))}


if __name__ == "__main__":
    from tm2nn.syntax import load

    T = int(sys.argv[1]) if len(sys.argv) > 1 else 10**6
    ROOT = Path(__file__).resolve().parents[1]
    print(c_rate(load(ROOT / "examples" / "binary_counter.tm"), "0" * 20, T))
