"""Verification: run a compiled net (torch, and ONNX in onnxruntime) and the reference
side by side on the same inputs, in chunks, within a time budget.

The inputs are the given ones, else every input of the model's input space when there
are few enough (exhaustive, shortest first), else random inputs from a printed seed,
for as long as the budget lasts (at most ``samples``; at least ``min_samples``, which the
check reaches even past the budget).  The report says how many inputs were checked, how
they were chosen, whether the space was covered, what stopped the check, and the first
divergence (input, step, field and both values).  A check that the budget stopped after
fewer than :data:`FEW_SAMPLES` inputs says little, and its report says so (``few``,
``warnings``).

What to compare is the backend's business (its ``reference``):
a :class:`Checker` names the input space and checks one chunk on one engine.  This file
holds the driver and the checker of the ``bits`` encoding (circuits); the backends' own
checkers (relu-circuit's unrolled machines, the step-by-step ones) live with them.
Nothing here compares a net with itself.
"""

from __future__ import annotations

import abc
import itertools
import math
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from tm2nn.codec import output_bits, parse_bits
from tm2nn.errors import OptionError, Tm2nnError
from tm2nn.interp import eval_circuit
from tm2nn.ir import Circuit
from tm2nn.limits import check_float, check_int, check_seed

EXHAUSTIVE_LIMIT = 1 << 16
#: seconds of random inputs when no budget is given (ARCHITECTURE: "verify at human speed")
DEFAULT_BUDGET = 60.0
#: a check the budget stops after fewer inputs than this is flagged as ``few`` (a warning)
FEW_SAMPLES = 100
#: random inputs are told apart (a 64-bit hash each, 8 bytes) up to this many distinct
#: ones; past it the report's count of distinct inputs is a lower bound
DISTINCT_CAP = 1 << 22
REPORT_FIELDS = ("halted", "steps", "state", "outcome", "tape", "head", "sigma")


@dataclass
class Mismatch:
    engine: str
    input: str
    field: str
    expected: object
    got: object
    step: int | None = None  # machines verified step by step: the first divergent step

    @classmethod
    def of(cls, engine: str, text: str, d: tuple) -> "Mismatch":
        """From a checker's ``(step, field, expected, got)`` for input ``text``."""
        return cls(engine, text, d[1], d[2], d[3], step=d[0])


@dataclass
class VerifyReport:
    backend: str
    mode: str  # "exhaustive" | "random" | "given"
    n_inputs: int
    seed: int | None
    engines: dict[str, int] = field(default_factory=dict)  # engine -> mismatching inputs
    first: Mismatch | None = None
    max_deviation: dict[str, float] = field(default_factory=dict)  # |y - nearest exact value|
    # Unrolled machines: inputs whose run leaves the compiled tape window within T steps.
    # The net must flag them (``overflow``); they are outside the model's domain.
    out_of_window: int = 0
    space: int | None = None  # inputs in the model's input space (every mode; None: not known)
    # distinct inputs of the space checked (a lower bound past DISTINCT_CAP in random mode)
    distinct: int = 0
    distinct_exact: bool = True
    coverage: float | None = None  # distinct / space (None when the space is not known)
    complete: bool = False  # every input of the space was checked
    cut: bool = False  # the budget stopped the check before the count its mode asked for
    seconds: float = 0.0
    budget: float | None = None
    how: str = ""  # how the inputs were chosen, in words
    reference: str = ""  # what the net was compared with
    compares: str = ""  # what was compared
    # what ended the check: "budget" (time ran out first), "samples" (the count asked
    # for), "space" (every input of an exhaustive space), "inputs" (the given ones)
    stopped_by: str = ""
    min_samples: int | None = None  # the floor asked for (reached even past the budget)
    few_threshold: int = FEW_SAMPLES
    # engine -> why its row does not check what the torch row checks (it checks less)
    not_checked: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(v == 0 for v in self.engines.values())

    @property
    def few(self) -> bool:
        """The budget stopped the check after fewer than ``few_threshold`` inputs."""
        return self.stopped_by == "budget" and self.n_inputs < self.few_threshold

    @property
    def warnings(self) -> list[str]:
        """Lines for a reader: a check that says little because the budget cut it short."""
        if not self.few:
            return []
        of = f" of {count_text(self.space)}" if self.space else ""
        return [f"the {self.budget:g} s budget stopped the check after {self.n_inputs:,} input"
                f"{'s' if self.n_inputs != 1 else ''}{of} (fewer than {self.few_threshold}): this says little about "
                "the net; raise --budget or ask for --min-samples N"]

    @property
    def covered(self) -> str:
        """The coverage in words: ``checked 1 of 4,294,967,296 inputs (2.3e-10)``."""
        at_least = "" if self.distinct_exact else "at least "
        if self.space is None:
            return f"checked {at_least}{self.distinct:,} distinct inputs (the input space's size is not known)"
        share = "all" if self.complete else f"{self.coverage:.2g}"
        return f"checked {at_least}{self.distinct:,} of {count_text(self.space)} inputs ({share})"

    def to_json(self) -> dict:
        d = asdict(self)
        d["covered"] = self.covered
        d["ok"] = self.ok
        d["samples_checked"] = self.n_inputs
        d["few"] = self.few
        d["warnings"] = self.warnings
        if self.space is not None and not _printable(self.space):
            d["space"] = count_text(self.space)  # past the digits Python writes (json.dumps would raise)
        return d


def _printable(n: int) -> bool:
    """Whether ``str(n)`` stays within Python's limit on the digits of an int as text."""
    limit = sys.get_int_max_str_digits()
    return limit == 0 or n.bit_length() <= (limit - 1) * 3.32


def count_text(n: int) -> str:
    """A count of inputs with thousands separators; one past the digits Python writes as
    text (an input space of 3^9000 tapes) as ``about 4.9·10^4321``."""
    if _printable(n):
        return f"{n:,}"
    e = math.log10(n)
    return f"about {10 ** (e - math.floor(e)):.2g}·10^{math.floor(e)}"


class InputSpace:
    """Strings over ``symbols`` of ``min_len..max_len`` characters: enumerated shortest
    first when there are at most ``limit``, else sampled (a uniform length, then uniform
    symbols)."""

    def __init__(self, symbols, min_len: int, max_len: int, limit: int, noun: str = "tapes"):
        self.symbols = list(symbols)
        self.min_len, self.max_len, self.limit, self.noun = min_len, max(min_len, max_len), limit, noun
        total = 0
        for k in range(self.min_len, self.max_len + 1):  # stop counting past the limit
            total += len(self.symbols) ** k
            if total > limit:
                break
        self.size = total  # exact when <= limit

    @property
    def small(self) -> bool:
        return self.size <= self.limit

    @property
    def count(self) -> int:
        """Every input of the space (exact, however large)."""
        s = len(self.symbols)
        return sum(s ** k for k in range(self.min_len, self.max_len + 1))

    def contains(self, text: str) -> bool:
        """Whether ``text`` is one of the space's inputs."""
        return self.min_len <= len(text) <= self.max_len and all(ch in self.symbols for ch in text)

    def all(self):
        for k in range(self.min_len, self.max_len + 1):
            for p in itertools.product(self.symbols, repeat=k):
                yield "".join(p)

    def random(self, seed: int):
        rng = np.random.default_rng(seed)
        while True:
            k = int(rng.integers(self.min_len, self.max_len + 1))
            yield "".join(self.symbols[i] for i in rng.integers(0, len(self.symbols), size=k))

    def sample(self, seed, n: int) -> list[str]:
        """The first ``n`` inputs of :meth:`random` (``seed``), the same strings, drawn at once
        where every input has one length (a circuit's bits): one ``integers`` call consumes the
        generator as the per-string calls do (a one-value length draw consumes nothing), and
        the strings are built in numpy, so 10⁶ draws take a second, not 20."""
        if self.min_len != self.max_len or not self.max_len or any(len(s) != 1 for s in self.symbols):
            return list(itertools.islice(self.random(seed), n))
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(self.symbols), size=(n, self.max_len))
        codes = np.array([ord(s) for s in self.symbols], dtype=np.uint32)[idx]
        return np.ascontiguousarray(codes).view(f"<U{max(1, self.max_len)}").ravel().tolist()

    def pick(self, samples: int, seed: int | None) -> tuple[list[str], str, int | None]:
        """A fixed set of inputs: all of them when few enough (``(inputs, "exhaustive",
        None)``), else ``samples`` random ones (``(inputs, "random", seed)``, the seed drawn
        when not given, so it can be printed)."""
        if self.small:
            return list(self.all()), "exhaustive", None
        seed = secrets.randbits(32) if seed is None else seed
        return list(itertools.islice(self.random(seed), samples)), "random", seed

    def describe(self) -> str:
        if self.symbols == ["0", "1"] and self.min_len == self.max_len:
            return f"{self.max_len}-bit {self.noun}"
        syms = " ".join(repr(s) if s in (" ", "") else s for s in self.symbols)
        n = f"{self.max_len}" if self.min_len == self.max_len else f"{self.min_len}..{self.max_len}"
        return f"{self.noun} of {n} symbols over {{{syms}}}"


class Checker(abc.ABC):
    """What ``verify`` needs from a backend for one compiled model: the input space, and
    per chunk of inputs the work both engines share (:meth:`prepare`: the reference runs)
    and one engine's comparison (:meth:`check`)."""

    reference = "the interpreter"
    compares = "the run report"
    onnx = True  # the model also runs in onnxruntime
    #: engine -> why that engine cannot check what the torch row checks, and what its row
    #: checks instead (the report's ``not_checked``; the console does not print it as ok)
    unchecked: dict[str, str] = {}
    engines: tuple[str, ...] = ("torch",)  # the engines this verification runs (set by the driver)
    #: its engines run a chunk in about the time of one input (a per-step overhead, no
    #: early stop that a batch would lose): chunks may then double past a second's worth
    #: of the measured rate (:func:`verify_compiled`)
    batches_cheaply = False

    def __init__(self, compiled) -> None:
        self.compiled = compiled

    @abc.abstractmethod
    def space(self) -> InputSpace:
        """The inputs the model takes."""

    def batch(self) -> int:
        """The most inputs to run at once (memory)."""
        return 4096

    def prepare(self, texts: list[str]):
        """What every engine's check of this chunk reads (the reference runs), computed
        once per chunk."""
        return None

    @abc.abstractmethod
    def check(self, engine: str, texts: list[str], prepared) -> tuple[list, float, dict]:
        """``(per input: None or (step, field, expected, got), max deviation, counts)``."""


def verify_compiled(compiled, *, inputs: list[str] | None = None, budget: float = DEFAULT_BUDGET,
                    samples: int | None = None, seed: int | None = None, use_onnx: bool = True,
                    progress=None, engines=None, min_samples: int | None = None) -> VerifyReport:
    """Check ``compiled`` against its reference (see the module doc) on ``engines``
    (default: torch, and onnxruntime unless ``use_onnx`` is False).  ``min_samples``:
    check at least this many inputs (all of a smaller space), even past the budget.
    ``progress(done, total, elapsed, budget)`` is called after every chunk (``total``
    None for a random run bounded by the budget alone)."""

    if samples is not None:
        check_int("samples", samples, 1)
    if min_samples is not None:
        check_int("min_samples", min_samples, 1)
        if samples is not None and min_samples > samples:
            raise OptionError(f"{{min_samples}} {min_samples} is above {{samples}} {samples}: the check "
                              "cannot reach the floor", "min_samples", "samples")
    seed = check_seed("seed", seed)
    budget = check_float("budget", budget, 0.0, open_low=True)
    checker = compiled.spec.reference(compiled)
    if engines:
        engines = list(dict.fromkeys(engines))
        for eng in engines:
            compiled.check_engine(eng, "engines")
    else:
        engines = ["torch"] + (["onnxruntime"] if use_onnx and checker.onnx else [])
    checker.engines = tuple(engines)
    space = _space(checker, inputs is None)
    if inputs is not None:
        mode, stream, total, how = "given", iter(list(inputs)), len(inputs), "the given inputs"
    elif space.small:
        mode, stream, total = "exhaustive", space.all(), space.size
        how = f"every one of the {space.size:,} {space.describe()}"
    else:
        seed = secrets.randbits(32) if seed is None else seed
        mode, stream, total = "random", space.random(seed), samples
        how = f"random {space.describe()} (seed {seed})"
    rep = VerifyReport(compiled.backend, mode, 0, seed if mode == "random" else None,
                       engines=dict.fromkeys(engines, 0), max_deviation=dict.fromkeys(engines, 0.0),
                       space=None if space is None else space.count, budget=budget, how=how,
                       reference=checker.reference, compares=checker.compares, min_samples=min_samples,
                       not_checked={e: why for e, why in checker.unchecked.items() if e in engines})
    floor = 0 if min_samples is None or mode == "given" else min_samples
    if total is not None:
        floor = min(floor, total)
    seen = _Distinct(space, mode)
    t0 = time.perf_counter()
    chunk = 1
    while total is None or rep.n_inputs < total:
        want = chunk if total is None else min(chunk, total - rep.n_inputs)
        texts = list(itertools.islice(stream, want))
        if not texts:
            break
        t1 = time.perf_counter()
        prepared = checker.prepare(texts)
        for eng in engines:
            diffs, dev, counts = checker.check(eng, texts, prepared)
            rep.max_deviation[eng] = max(rep.max_deviation[eng], float(dev))
            if eng == "torch":
                rep.out_of_window += int(counts.get("out_of_window", 0))
            for text, d in zip(texts, diffs):
                if d is None:
                    continue
                rep.engines[eng] += 1
                if rep.first is None:
                    rep.first = Mismatch.of(eng, text, d)
        rep.n_inputs += len(texts)
        seen.add(texts)
        now = time.perf_counter()
        if progress is not None:
            progress(rep.n_inputs, total, now - t0, budget)
        if mode != "given" and now - t0 >= budget and rep.n_inputs >= floor:
            break
        # aim at chunks of about a second, within the budget (or up to the floor, past
        # it) and the checker's memory.  For a checker that batches cheaply, a chunk may
        # also double while the rate measured says it fits in an eighth of the budget and
        # in what is left of it: an engine that runs a batch in about the time of one
        # input (a decoder's per-step overhead) measures about one input per second at
        # one input a chunk, and would otherwise never batch.  (Not for every checker:
        # the RCNN's loop stops when every grid of the batch is fixed, so a batch runs
        # as long as its longest run.)
        rate = len(texts) / max(now - t1, 1e-6)
        left = budget - (now - t0) if mode != "given" else math.inf
        if left <= 0:
            chunk = int(max(1, min(floor - rep.n_inputs, checker.batch())))  # the floor asked for
        else:
            soon = rate * min(1.0, left)
            grow = min(2 * chunk, rate * min(left, max(1.0, budget / 8))) if checker.batches_cheaply else 0
            chunk = int(max(1, min(chunk * 8, max(soon, grow), checker.batch())))
    rep.seconds = time.perf_counter() - t0
    if rep.n_inputs == 0:  # a pass that compared nothing is not a pass

        raise Tm2nnError(f"the verification compared no input ({how}): give at least one input")
    rep.cut = total is not None and rep.n_inputs < total  # the budget stopped it before the mode's count
    rep.stopped_by = ("inputs" if mode == "given" else "budget" if rep.cut or total is None
                      else "space" if mode == "exhaustive" else "samples")
    rep.distinct, rep.distinct_exact = seen.count()
    if rep.space is not None:  # complete: every input of the space, not the mode's promise
        rep.coverage = rep.distinct / rep.space if rep.space else 1.0
        rep.complete = rep.distinct_exact and rep.distinct >= rep.space
    return rep


def _space(checker: Checker, needed: bool) -> InputSpace | None:
    """The checker's input space; with given inputs (``needed`` False) only to measure
    the coverage, so a checker that cannot name it then gives None."""
    if needed:
        return checker.space()
    try:
        return checker.space()
    except (Tm2nnError, KeyError, TypeError, ValueError):
        return None


class _Distinct:
    """The distinct inputs of ``space`` a check went through: counted as they come in
    exhaustive mode (an enumeration repeats none), as a set of the given inputs, and by a
    64-bit hash each (sorted, merged as the pending ones double) in random mode, up to
    :data:`DISTINCT_CAP` (past it, a lower bound)."""

    def __init__(self, space: InputSpace | None, mode: str):
        self.space, self.mode = space, mode
        self.n, self.exact = 0, True
        self.given: set[str] = set()
        self.unique = np.zeros(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.waiting = 0

    def add(self, texts: list[str]) -> None:
        if self.mode == "exhaustive":
            self.n += len(texts)
        elif self.mode == "given":
            self.given.update(t for t in texts if self.space is None or self.space.contains(t))
        elif self.exact:
            self.pending.append(np.fromiter((hash(t) for t in texts), dtype=np.int64, count=len(texts)))
            self.waiting += len(texts)
            if self.waiting > max(len(self.unique), 4096):
                self._merge()

    def _merge(self) -> None:
        self.unique = np.unique(np.concatenate([self.unique, *self.pending]))
        self.pending, self.waiting = [], 0
        if len(self.unique) > DISTINCT_CAP:  # stop telling them apart: what is counted is a floor
            self.exact = False

    def count(self) -> tuple[int, bool]:
        """``(distinct inputs, whether that count is exact)``."""
        if self.mode == "exhaustive":
            return self.n, True
        if self.mode == "given":
            return len(self.given), True
        if self.pending:
            self._merge()
        return len(self.unique), self.exact


def divergences(checker: Checker, texts: list[str], engine: str) -> tuple[str, list[Mismatch | None]]:
    """``(what the reference is, each input's first divergence from it when the model
    runs on ``engine``, None where they agree)``: a model's checker
    (its ``reference``) on given inputs and one engine
    (``tm2nn eval`` checks its reports with it)."""
    checker.engines = (engine,)
    out: list[Mismatch | None] = []
    size = max(1, checker.batch())
    for s in range(0, len(texts), size):
        chunk = texts[s:s + size]
        diffs, _dev, _counts = checker.check(engine, chunk, checker.prepare(chunk))
        out += [None if d is None else Mismatch.of(engine, t, d) for t, d in zip(chunk, diffs)]
    return checker.reference, out


# -- circuits: bit for bit against the bit-parallel evaluator -----------------------------------
def deviation(enc: dict, y: np.ndarray) -> float:
    """How far outputs ``y`` are from the nearest exact value: 0/1, or ±1 (threshold 0)."""
    if y.size == 0:
        return 0.0
    if enc.get("threshold", 0.5) == 0.0:  # ±1 outputs
        return float(np.abs(np.abs(y) - 1.0).max())
    return float(np.minimum(np.abs(y), np.abs(y - 1.0)).max())


class CircuitChecker(Checker):
    """A circuit's model against the bit-parallel evaluator, every output bit."""

    reference = "the bit-parallel evaluator"
    compares = "every output bit"

    def space(self) -> InputSpace:
        n = len(self.compiled.source.inputs)
        return InputSpace("01", n, n, EXHAUSTIVE_LIMIT, noun="inputs")

    def prepare(self, texts: list[str]):
        c: Circuit = self.compiled.source
        x = np.stack([parse_bits(s, len(c.inputs)) for s in texts])
        return x, eval_circuit(c, x)

    def check(self, engine: str, texts: list[str], prepared):
        c: Circuit = self.compiled.source
        x, want = prepared
        enc = self.compiled.output_encoding
        y = self.compiled.runner(engine)(x.astype(np.float32))
        got = output_bits(enc, y)
        out = []
        for i in range(len(texts)):
            bad = np.nonzero(got[i] != want[i])[0]
            out.append(None if not bad.size else
                       (None, f"output {bad[0]} ({c.outputs[bad[0]]})", int(want[i, bad[0]]), int(got[i, bad[0]])))
        return out, deviation(enc, y), {}
