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
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from tm2nn.errors import Tm2nnError
from tm2nn.options import NoOptions, OptionError, make, to_dict
from tm2nn.report import Report

ENGINES = ("torch", "onnxruntime")


@dataclass
class Learned:
    """What a training run returns: ``summary`` (the ``--json`` line), ``ok`` (every check
    passed), ``lines`` (the human report, rich markup) and ``models`` (``"before"`` /
    ``"after"`` training, each a :class:`Compiled`, where the backend exports them)."""

    summary: dict
    ok: bool
    lines: list[str] = field(default_factory=list)
    models: dict = field(default_factory=dict)


@dataclass
class Table:
    """A result table (margins, sizes): column titles and rows of strings, plus the rows
    as JSON."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    json: object = None


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

    def finish_onnx(self, model, compiled: "Compiled"):
        """What the backend adds to the emitted ONNX graph (default: nothing)."""
        return model

    def __repr__(self) -> str:
        return f"<backend {self.name}: {self.summary}>"


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


@dataclass(eq=False)
class Compiled:
    """A compiled network and how to talk to it: what ``tm2nn.compile`` returns and
    ``tm2nn.load_model`` gives back.

    ``net`` is the network IR; ``input_encoding`` / ``output_encoding`` are JSON-able
    dicts (a ``"kind"`` plus what it needs) from which a saved model is driven without its
    source; ``bounds`` are size rows next to the paper's; ``options`` the derived sizes;
    ``build`` what rebuilds the model from its source (the validated compile options)."""

    backend: str
    net: object
    source: object
    input_encoding: dict
    output_encoding: dict
    bounds: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    build: dict = field(default_factory=dict)
    source_sha256: str | None = None
    #: a torch state dict that replaces the construction's weights (a loaded ``.pt``)
    state_dict: dict | None = field(default=None, repr=False)
    #: the bytes of a loaded ``.onnx`` file (run as they are)
    onnx_bytes: bytes | None = field(default=None, repr=False)
    #: the file a loaded model came from (its failures and errors name it)
    path: str | None = None
    #: a loaded model whose weights are not the construction's: where they first differ
    edited: str | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __repr__(self) -> str:
        return (f"<Compiled {self.backend} of {getattr(self.source, 'name', '?')!r}: "
                f"{self.info()['info']['params_nonzero']:,} parameters>")

    @property
    def spec(self) -> Backend:
        """The :class:`Backend` that made this model."""
        return _registry().get(self.backend)

    def with_options(self, opts) -> "Compiled":
        """Record the validated compile options (what :meth:`Backend.rebuild` reads)."""
        self.build = {**self.build, "options": to_dict(opts)}
        return self

    def source_text(self) -> str:
        """The source as tm2nn text (what a model file records and, without a source file,
        what its hash is of): written once per model, a second for a 10^6-gate circuit."""
        if "source_text" not in self._cache:
            from tm2nn.model_io import source_text

            self._cache["source_text"] = source_text(self.source)
        return self._cache["source_text"]

    # -- views -----------------------------------------------------------------------------
    def torch(self, dtype=None):
        """The network as a ``torch.nn.Module`` (a new one per call).  Construction weights
        are ``nn.Parameter``\\ s with ``requires_grad=False`` (the trained ones of a backend
        that trains have ``True``), named after the IR's ops (docs/api.md, "The torch
        module")."""
        from tm2nn.emit.torch_emit import to_torch

        if self.edited is not None and self.onnx_bytes is not None:
            how = "run it in onnxruntime, or " if "onnxruntime" in self.spec.engines else ""
            raise Tm2nnError(f"its weights are not the construction's ({self.edited}), and the torch module is "
                             f"built from the construction: {how}save the edited weights as .pt", file=self.path)
        dtype = dtype or self.dtype
        module = to_torch(self.net, dtype)
        if self.state_dict is not None:
            try:
                module.load_state_dict(self.state_dict, strict=True)
            except RuntimeError as e:
                raise Tm2nnError(f"the saved weights do not fit this {self.backend} network: "
                                 f"{str(e).splitlines()[0]}", file=self.path) from None
        module.eval()
        return module

    @property
    def dtype(self):
        import torch

        return torch.float64 if self.options.get("dtype") == "float64" else torch.float32

    def onnx(self):
        """The model as an ``onnx.ModelProto`` (weights inside, metadata in
        ``metadata_props``)."""
        import onnx

        if self.onnx_bytes is not None:
            return onnx.load_model_from_string(self.onnx_bytes)
        from tm2nn.model_io import onnx_model

        return onnx_model(self)

    def save(self, path):
        """Write the model: ``.onnx`` (self-contained) or ``.pt`` (a state dict and the
        metadata; ``torch.load(path, weights_only=True)`` reads it)."""
        from tm2nn.model_io import save

        return save(self, path)

    def metadata(self) -> dict[str, str]:
        from tm2nn.model_io import metadata

        return metadata(self)

    # -- running ---------------------------------------------------------------------------
    def check_engine(self, engine: str, option: str = "engine") -> None:
        """Refuse an engine this backend does not run on (``option`` names the argument),
        and a fused engine for a model whose weights are not the construction's: the fused
        engines run ``self.net``, which holds the construction's."""
        if engine not in self.spec.engines:
            raise OptionError(f"the {self.backend} backend runs on {', '.join(self.spec.engines)}, "
                              f"not {{{option}}} {engine!r}", option)
        if engine not in ENGINES and self.edited is not None:
            where = "onnxruntime" if self.onnx_bytes is not None else "torch"
            raise Tm2nnError(f"its weights are not the construction's ({self.edited}), and the {engine} engine "
                             f"runs the construction's network: run it in {where}", file=self.path)

    def runner(self, engine: str):
        """``run(*arrays) -> outputs`` for an engine (``torch``, ``onnxruntime`` or a fused
        engine's :meth:`Backend.array_runner`), built once per model."""
        self.check_engine(engine)
        if engine not in self._cache:
            if engine not in ENGINES:  # a fused engine of the backend's own
                self._cache[engine] = self.spec.array_runner(self, engine)
            elif engine == "torch":
                from tm2nn.emit.torch_emit import run_torch

                module = self.module()
                self._cache[engine] = lambda *x, batch_size=4096: run_torch(module, *x, batch_size=batch_size)
            else:
                from tm2nn.emit.onnx_runtime import onnx_session, run_onnx

                sess = onnx_session(self.onnx_bytes if self.onnx_bytes is not None else self.onnx())
                self._cache[engine] = lambda *x, batch_size=4096: run_onnx(sess, *x, batch_size=batch_size)
        return self._cache[engine]

    def module(self):
        """The torch module the ``torch`` engine runs (built once, shared; :meth:`torch`
        gives a fresh one)."""
        if "module" not in self._cache:
            self._cache["module"] = self.torch()
        return self._cache["module"]

    def encode(self, inputs):
        """The input array the network takes for ``inputs`` (strings, as ``run`` takes
        them): ``torch.from_numpy(compiled.encode(texts))`` feeds ``compiled.torch()``."""
        return self.spec.encode(self, [inputs] if isinstance(inputs, str) else list(inputs))

    def run(self, inputs, engine: str = "torch", progress=None):
        """Run one input (a string: returns a :class:`~tm2nn.report.Report`) or a batch (a
        list of strings: a list of reports) through ``engine``.  The reports are the
        CLI's ``--json`` reports."""
        single = isinstance(inputs, str)
        texts = [inputs] if single else [str(t) for t in inputs]
        self.check_engine(engine)
        with self.failures(engine):
            reports = self.spec.run(self, texts, engine, progress) if texts else []
        return reports[0] if single else reports

    def check(self, inputs, engine: str = "torch"):
        """Each input's first divergence from the reference when the model runs on
        ``engine`` (:func:`tm2nn.verify.check.divergences`): ``(what the reference is,
        [None or a Mismatch per input])``, or None when the backend has no reference for
        this model (a trained net, checked while it trains).  ``tm2nn eval`` checks its
        reports with it."""
        from tm2nn.verify.check import divergences

        self.check_engine(engine)
        try:
            checker = self.spec.checker(self)
        except Tm2nnError:
            return None
        with self.failures(engine):
            return divergences(checker, [inputs] if isinstance(inputs, str) else list(inputs), engine)

    @contextmanager
    def failures(self, engine: str | None):
        """A loaded model that fails in its engine (onnxruntime refusing the graph or a
        shape, torch a weight, the decoder its output) is a one-line error naming the file,
        not a traceback; a compiled model's failure is a bug and propagates as it is.  A
        loaded model's float errors (NaN, overflow) are not warned about: what they break
        is reported here, or by the check against the reference."""
        import numpy as np

        try:
            with np.errstate(all="ignore" if self.path is not None else None):
                yield
        except OptionError:  # an input the model does not take
            raise
        except Tm2nnError as e:  # one the backend found in the model's output
            if e.file is None and self.path is not None:
                e.file, e.message = self.path, f"running it in {engine or 'the engines'}: {e.message}"
                e.args = (e.message,)
            raise
        except MemoryError:
            raise
        except Exception as e:
            if self.path is None:
                raise
            doing = f"running it in {engine}" if engine else "verifying it"
            raise Tm2nnError(f"{doing} failed: {_one_line(e)}", file=self.path) from None

    def verify(self, inputs=None, *, budget: float | None = None, samples: int | None = None,
               seed: int | None = None, onnx: bool = True, progress=None, engines=None):
        """Check the network against the reference interpreter (:func:`tm2nn.verify.verify_compiled`):
        the given ``inputs``, else every input when few enough, else random inputs for
        ``budget`` seconds (at most ``samples``), on ``engines`` (default: torch and,
        unless ``onnx=False``, onnxruntime).  Returns a :class:`~tm2nn.verify.VerifyReport`."""
        from tm2nn.verify import DEFAULT_BUDGET, verify_compiled

        with self.failures(None):
            return verify_compiled(self, inputs=inputs, budget=DEFAULT_BUDGET if budget is None else budget,
                                   samples=samples, seed=seed, use_onnx=onnx, progress=progress, engines=engines)

    def info(self) -> dict:
        """``{"backend", "info", "bounds"}``: the network's sizes (:meth:`tm2nn.nets.Net.info`)
        and the backend's rows next to the paper's bounds."""
        net, info = self._cache.get("info", (None, None))
        if net is not self.net:  # computed once per net (a replaced net is measured again)
            info = self.net.info()
            info.pop("widths", None)
            info = {"backend": self.backend, "info": info, "bounds": self.spec.info_rows(self)}
            self._cache["info"] = (self.net, info)
        return info

    def with_info(self, net_info: dict) -> "Compiled":
        """Record ``self.net.info()`` when the backend has measured the net already (for
        its size rows), so that :meth:`info` does not measure a large net twice."""
        info = {k: v for k, v in net_info.items() if k != "widths"}
        self._cache["info"] = (self.net, {"backend": self.backend, "info": info, "bounds": self.spec.info_rows(self)})
        return self


def _one_line(e: Exception) -> str:
    """An engine's exception in one line: its type and first line (onnxruntime's
    ``[ONNXRuntimeError] : 2 :`` prefix dropped), at most 300 characters."""
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : ", "", str(e).strip())
    line = text.splitlines()[0] if text else ""
    line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def loaded_info(compiled: Compiled, meta: dict) -> None:
    """A loaded model's info as the file records it (no recomputation); ``meta`` holds
    the parsed metadata (:func:`tm2nn.model_schema.parse_metadata`)."""
    if "tm2nn.info" in meta:
        compiled._cache["info"] = (compiled.net, {"backend": compiled.backend, "info": meta["tm2nn.info"],
                                                  "bounds": meta.get("tm2nn.bounds", [])})
