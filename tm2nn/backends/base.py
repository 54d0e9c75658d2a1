"""The backend interface (ARCHITECTURE.md, "The backend interface") and :class:`Compiled`,
the object a user holds.

A construction is one :class:`Backend` object, exported as ``BACKEND`` by its package
and listed in :mod:`tm2nn.backends`.  It is the only place that knows that construction:

* ``Options``: its compile options, a dataclass of :func:`tm2nn.options.option` fields
  (defaults, help text); ``LearnOptions`` likewise where it trains;
* :meth:`Backend.compile`: IR -> :class:`Compiled` (a backend never parses text, runs the
  interpreter or writes files);
* its encodings: :meth:`Backend.run` turns user inputs into tensors, runs an engine and
  decodes the outputs into run reports; :meth:`Backend.decoding` says in words which
  dimensions each report field is read from (a ``.safetensors`` model's manifest);
  :meth:`Backend.checker` tells ``verify`` how to compare a model with the reference;
* :meth:`Backend.info_rows`: its size next to the paper's bounds;
* :attr:`Backend.model_keys`: the metadata its model files must carry (checked on load);
* :meth:`Backend.learn`: its training loop, where it has one; :meth:`Backend.margin`,
  :meth:`Backend.find_beta`, :meth:`Backend.function_class` and
  :meth:`Backend.certified_margin` (what :mod:`tm2nn.verify.statistics` reads): its extra
  analyses, where it has them.

Every method has a default that fits a circuit backend with ``bits`` encodings, so a new
construction of that kind is a few lines (docs/backends.md).  ``compiler.py``,
``cli.py`` and ``verify/`` reach a backend only through this interface.
"""

from __future__ import annotations

import abc

from tm2nn.backends.protocol import Learned, Table
from tm2nn.errors import Tm2nnError
from tm2nn.handle import Compiled
from tm2nn.options import NoOptions, OptionError, make
from tm2nn.report import Report

ENGINES = ("torch", "onnxruntime")


class Backend(abc.ABC):
    """One construction (see the module doc).  Subclasses set the class attributes and
    override :meth:`compile`; everything else has a default."""

    #: the name users type (``--backend NAME``)
    name: str = ""
    #: one line: the paper and what the network does (help text, docs)
    summary: str = ""
    #: the paper the construction is from: authors, title and the sections it takes
    #: (a model's manifest records it; each op's ``cite`` names the lemma)
    paper: str = ""
    #: compile options (a dataclass of :func:`tm2nn.options.option` fields)
    Options: type = NoOptions
    #: learn options, for a backend that trains (``tm2nn learn``); None otherwise
    LearnOptions: type | None = None
    #: the IR classes the backend compiles (and trains), and how to name them in an error
    takes: tuple[type, ...] = ()
    learn_takes: tuple[type, ...] = ()
    takes_what: str = "circuits"
    #: the option that ``run --max-steps N`` sets (a compile-time step bound), and the
    #: bound ``run`` uses when none is given; None: the backend does not run machines
    run_steps: str | None = None
    run_default_steps: int | None = None
    #: the engines its models run on
    engines: tuple[str, ...] = ENGINES
    #: the metadata a model file of this backend must carry beyond every model's
    #: (:data:`tm2nn.model_schema.REQUIRED`): what its ``rebuild`` and decoding read, as
    #: ``"tm2nn.key"`` or ``"tm2nn.key/field/..."`` (a path into its JSON) -> a kind of
    #: :data:`tm2nn.model_schema.KINDS`; checked when a model is loaded
    model_keys: dict[str, str] = {}

    # -- options and compiling -------------------------------------------------------------
    def options(self, **values):
        """The validated options object (unknown names and bad values are errors)."""
        return make(self.Options, values, f"the {self.name} backend")

    def check_source(self, ir) -> None:
        """Refuse IR this backend does not compile, with a clear error."""
        if self.takes and not isinstance(ir, self.takes):
            what = type(ir).__name__.lower().replace("gridmachine", "grid machine")
            raise Tm2nnError(f"the {self.name} backend compiles {self.takes_what}; {getattr(ir, 'name', '?')!r} "
                             f"is a {what}")

    @abc.abstractmethod
    def compile(self, ir, opts) -> "Compiled":
        """IR -> the network and its encodings (:class:`Compiled`)."""

    def options_for_run(self, values: dict, texts: list[str]) -> dict:
        """The compile options ``run`` uses for these inputs (default: as given)."""
        return values

    def rebuild(self, ir, build: dict) -> "Compiled":
        """The model a saved file describes: ``build`` is what :attr:`Compiled.build` held."""
        return self.compile(ir, self.options(**build.get("options", {})))

    # -- running ---------------------------------------------------------------------------
    def encode(self, compiled: "Compiled", texts: list[str]):
        """The model's input array for ``texts`` (what ``compiled.torch()`` and the ONNX
        model take; default: the :mod:`tm2nn.codec` encodings)."""
        from tm2nn.codec import encode_many

        return encode_many(compiled.input_encoding, texts)

    def run(self, compiled: "Compiled", texts: list[str], engine: str, progress=None) -> list[Report]:
        """Encode ``texts``, run them through ``engine``, decode one report each (the
        :mod:`tm2nn.codec` encodings; backends with encodings of their own override)."""
        from tm2nn.codec import decode_many

        x = self.encode(compiled, texts)
        y = compiled.runner(engine)(x)
        return [Report(r) for r in decode_many(compiled.output_encoding, y)]

    def array_runner(self, compiled: "Compiled", engine: str):
        """``run(*arrays, batch_size=4096) -> outputs`` on a fused engine of this backend
        that takes the network's own arrays, as torch and onnxruntime do (the relu-circuit
        and rcnn engines).  Default: none; the transformer's index engine is driven by
        :meth:`run` alone."""
        raise OptionError(f"the {engine} engine has no array runner: run inputs with compiled.run(texts, "
                          f"engine={engine!r})", "engine")

    def configurations(self, compiled: "Compiled", text: str, engine: str = "torch") -> list:
        """The run decoded from the network, every step's ``(state, head, non-blank
        cells)`` (for space-time diagrams); default: the trace of the run a report holds."""
        from tm2nn.interp import configurations

        r = self.run(compiled, [text], engine)[0]
        if r.run is None or r.run.trace is None:
            raise Tm2nnError(f"the {self.name} backend decodes only the final configuration, not every step")
        return [(q, head, dict(cells)) for _k, q, head, cells in configurations(r.run)]

    def decoding(self, compiled: "Compiled") -> dict:
        """How each field of the run report is read from the network's dimensions, for a
        model's manifest (docs/manifest.md): ``{"fields": {field: {"value": a value of the
        net (``"op/field/name"`` inside a nested net), "labels": the dimensions read,
        "rule": how}}}``, plus ``"notes"`` where the backend has more to say.  Default:
        a ``bits`` circuit, output i read from dimension i of the output."""
        enc = compiled.output_encoding
        if enc.get("kind") != "bits":
            raise Tm2nnError(f"the {self.name} backend does not describe how its {enc.get('kind')!r} output "
                             "is decoded")
        y = compiled.net.outputs[0]
        names = ", ".join(enc["names"][:4]) + (", ..." if len(enc["names"]) > 4 else "")
        return {"fields": {"outputs": {
            "value": y, "labels": list(compiled.net.spaces[y].labels),
            "rule": f"character i of 'outputs' is '1' when dimension i of {y!r} exceeds {enc['threshold']}, "
                    f"else '0'; dimension i is the circuit's output i in declared order ({names})"}}}

    def checker(self, compiled: "Compiled"):
        """What ``verify`` needs to compare this model with the reference
        (:class:`tm2nn.verify.check.Checker`); default: circuits, bit for bit against the
        bit-parallel evaluator."""
        from tm2nn.ir import Circuit
        from tm2nn.verify.check import CircuitChecker

        if isinstance(compiled.source, Circuit) and compiled.output_encoding.get("kind") == "bits":
            return CircuitChecker(compiled)
        raise Tm2nnError(f"the {self.name} backend has no verifier for {compiled.output_encoding.get('kind')!r} models")

    # -- reports and analyses ----------------------------------------------------------------
    def info_rows(self, compiled: "Compiled") -> list:
        """Size rows ``(quantity, this network, the paper's bound)``."""
        return [list(r) for r in compiled.bounds]

    def info_source(self, ir, opts):
        """A size report without compiling (for constructions too large to build): a
        :class:`Table`, or None to compile and report the model's size."""
        return None

    #: the snapshots ``learn`` can return (``"before"`` / ``"after"`` training)
    exports: tuple[str, ...] = ()

    def learn(self, ir, opts, *, data: dict | None = None, source_path: str | None = None, progress=None,
              models=()) -> Learned:
        """Train: ``data`` holds the training sets (a ``data="csv"`` option's file, read as
        ``(X, Y)`` arrays); ``models`` the snapshots wanted."""
        raise self._does_not_train()

    def learn_options(self, **values):
        """The validated learn options (a backend that does not train says so)."""
        if self.LearnOptions is None:
            raise self._does_not_train()
        return make(self.LearnOptions, values, f"learning with the {self.name} backend")

    def _does_not_train(self) -> Tm2nnError:
        return Tm2nnError(f"the {self.name} backend does not train (backends that do: "
                          f"{', '.join(b.name for b in _registry().all() if b.LearnOptions)})")

    def margin(self, ir, opts, *, samples: int, trials: int, seed: int, engines=None) -> Table:
        raise Tm2nnError(f"the {self.name} backend has no margin analysis (backends with one: "
                         f"{_having('margin')})")

    def find_beta(self, ir, values: dict, *, inputs, samples, seed) -> dict:
        raise Tm2nnError(f"the {self.name} backend has no softmax beta to search")

    # -- statistics (Wei, Chen & Ma Lemma 2.3; tm2nn.verify.statistics) ----------------------
    def function_class(self, compiled: "Compiled") -> dict:
        """The function class the model belongs to, as its paper states the sample
        complexity: ``{"w": width, "d": depth, "alpha": ‖θ‖₁, "p": parameter count}``, and
        where the backend has them ``"theorem"`` (e.g. ``"Theorem 3.1"``), ``"order"`` (the
        theorem's sample complexity as a formula), ``"scaling"`` (the theorem's parameters,
        name -> value) and any other measured keys (``"beta"``, ...)."""
        raise Tm2nnError(f"the {self.name} backend does not describe its function class (backends that do: "
                         f"{_having('function_class')})")

    def certified_margin(self, compiled: "Compiled") -> dict:
        """A certified lower bound on the model's all-layer margin (Wei, Chen & Ma eq. 2.1) at
        every input: ``{"radius": γ, ...}``.  Statistics use it as Lemma 2.3's γ."""
        raise Tm2nnError(f"the {self.name} backend has no certified margin (backends with one: "
                         f"{_having('certified_margin')})")

    def __repr__(self) -> str:
        return f"<backend {self.name}: {self.summary}>"

    def as_protocol(self):
        """TRANSITION (issue 34): this legacy backend as a :class:`tm2nn.backends.protocol.Backend`."""
        from tm2nn.backends import protocol as P

        pairs = [("margin", "margin"), ("certified_margin", "certified_margin"), ("function_class", "function_class"),
                 ("find_beta", "find_beta"), ("size_estimate", "info_source")]
        analyses = {n: getattr(self, m) for n, m in pairs if overrides(self, m)}
        if self.run_steps is not None:
            analyses["configurations"] = self.configurations
        p = P.Backend(
            name=self.name, paper=self.paper, summary=self.summary, Options=self.Options, takes=tuple(self.takes),
            takes_what=self.takes_what, compile=self.compile, codec=P.Codec(self.encode, self.run, self.decoding),
            reference=self.checker,
            stepping=P.Stepping(self.run_steps, self.run_default_steps, self.options_for_run) if self.run_steps else None,
            fused={e: (lambda c, e=e: self.array_runner(c, e)) for e in self.engines if e not in ENGINES},
            dense=tuple(e for e in self.engines if e in ENGINES),
            trainer=P.Trainer(self.LearnOptions, tuple(self.learn_takes), self.learn, self.exports)
            if self.LearnOptions else None,
            analyses=analyses, model_keys=dict(self.model_keys),
            check_ir=self.check_source if overrides(self, "check_source") else None,
            rebuild_from=self.rebuild if overrides(self, "rebuild") else None,
            size_rows=self.info_rows if overrides(self, "info_rows") else None)
        return p


def _registry():
    import tm2nn.backends as reg

    return reg


def overrides(backend: Backend, method: str) -> bool:
    """Whether ``backend`` has its own ``method`` (an analysis the base class only refuses)."""
    return getattr(type(backend), method) is not getattr(Backend, method)


def _having(method: str) -> str:
    """The backends that override ``method`` (for the error of one that does not)."""
    names = [b.name for b in _registry().all() if overrides(b, method)]
    return ", ".join(names) or "none"


