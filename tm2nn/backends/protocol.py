"""What a construction declares (ARCHITECTURE.md, "The construction protocol").

A construction is one :class:`Backend` value, exported as ``BACKEND`` by its package and
listed in :mod:`tm2nn.backends`.  It is composed, not subclassed:

* required: ``name``, ``paper``, ``summary``; ``Options`` (a dataclass of
  :func:`tm2nn.options.option` fields: the CLI builds its flags from it); ``takes`` (the IR
  types it compiles) and ``takes_what`` (how an error names them); ``compile(ir, opts) ->
  Model``; its :class:`Codec` (inputs -> tensors, outputs -> run reports, the decoding
  described for the manifest); its ``reference(compiled) -> Checker`` (the input space and
  how one chunk of runs is compared with the interpreter);
* optional, as data: :class:`Stepping` (a compile-time step bound ``run`` sets), ``fused``
  engines (name -> array-runner factory, or None for an engine its codec drives), a
  :class:`Trainer`, ``analyses`` (name -> function, names from :data:`ANALYSES`),
  ``model_keys`` (what its model files must carry), ``examples`` (for ``tm2nn demo``) and
  ``pictures`` (for ``tm2nn viz``).

"Does this backend have a margin?" is ``backend.has("margin")``: a lookup in
``analyses``.  A backend builds a :class:`Model` (plain data); the user's handle,
:class:`tm2nn.handle.Compiled`, wraps it above the backends.  A backend never parses text,
writes files or drives the verifier.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Mapping

from tm2nn.codec import describe_bits, encode_bits, run_bits
from tm2nn.errors import Tm2nnError
from tm2nn.options import make, to_dict

#: the engines every backend's network runs on (dense: the emitted torch module and ONNX model)
DENSE = ("torch", "onnxruntime")

#: the analyses a backend may declare, and what each computes (signatures in docs/backends.md)
ANALYSES: dict[str, str] = {
    "margin": "margin(ir, opts, *, samples, trials, seed, engines, device) -> Table: the all-layer margin, "
              "certified and attacked (the torch attacks on device, a name of tm2nn.devices: 'cpu' the default)",
    "certified_margin": "certified_margin(compiled) -> {'radius': gamma, ...}: a certified lower bound on "
                        "the all-layer margin at every input (Lemma 2.3's gamma)",
    "margin_attack": "margin_attack(compiled, *, samples, trials, seed, deadline, device) -> {'eps', ...}: an "
                     "upper bound on the per-layer all-layer margin of these weights (random-direction attack)",
    "function_class": "function_class(compiled) -> {'w', 'd', 'alpha', 'p', ...}: the class the sample "
                      "complexity is stated for",
    "statistics_bracket": "statistics_bracket(compiled, dataset, gamma, *, seed, trials, delta) -> dict: "
                          "the surrogate loss of a dataset bracketed by certificate and attack",
    "find_beta": "find_beta(ir, values, *, inputs, samples, seed) -> dict: the smallest softmax beta "
                 "with no mismatch",
    "configurations": "configurations(compiled, text, engine) -> [(state, head, cells)]: every step "
                      "decoded from the network (space-time pictures)",
    "size_estimate": "size_estimate(ir, opts) -> Table | None: sizes without compiling (constructions "
                     "too large to build)",
}


#: how a backend without an analysis refuses it ({name}: the backend, {others}: those with it)
REFUSALS: dict[str, str] = {
    "margin": "the {name} backend has no margin analysis (backends with one: {others})",
    "certified_margin": "the {name} backend has no certified margin (backends with one: {others})",
    "function_class": "the {name} backend does not describe its function class (backends that do: {others})",
    "find_beta": "the {name} backend has no softmax beta to search",
}


@dataclass
class Table:
    """A result table (margins, sizes): column titles and rows of strings, plus the rows
    as JSON."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    json: object = None


@dataclass
class Learned:
    """What a training run returns: ``summary`` (the ``--json`` line), ``ok`` (every check
    passed), ``lines`` (the human report, rich markup) and ``models`` (``"before"`` /
    ``"after"`` training, each a :class:`Model`, where the backend exports them)."""

    summary: dict
    ok: bool
    lines: list[str] = field(default_factory=list)
    models: dict = field(default_factory=dict)


@dataclass(eq=False)
class Model:
    """What ``compile`` builds: the network IR and how to talk to it, as plain data.

    ``net`` is the network IR; ``input_encoding`` / ``output_encoding`` are JSON-able
    dicts (a ``"kind"`` plus what it needs) from which a saved model is driven without its
    source; ``bounds`` are size rows next to the paper's; ``options`` the derived sizes;
    ``build`` what rebuilds the model from its source (the validated compile options);
    ``net_info`` the net's sizes when the backend measured them already."""

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
    #: ``net.info()`` when the backend measured the net already (a large net is measured once)
    net_info: dict | None = field(default=None, repr=False)
    #: a loaded model's ``{"backend", "info", "bounds"}`` as its file records them
    recorded_info: dict | None = field(default=None, repr=False)

    def with_options(self, opts) -> "Model":
        """Record the validated compile options (what a rebuild reads)."""
        self.build = {**self.build, "options": to_dict(opts)}
        return self

    def with_info(self, net_info: dict) -> "Model":
        """Record ``self.net.info()`` when the backend has measured the net already."""
        self.net_info = {k: v for k, v in net_info.items() if k != "widths"}
        return self


def model_fields(model: Model) -> dict:
    """A model's data fields, name -> value (what the handle is built from)."""
    return {f.name: getattr(model, f.name) for f in fields(Model)}


@dataclass(frozen=True)
class Codec:
    """Inputs in, reports out.

    ``encode(compiled, texts) -> array``: the network's input for user input strings;
    ``run(compiled, texts, engine, progress) -> [Report]``: encode, run ``compiled.runner
    (engine)`` (or a fused engine), decode one report each; ``describe(compiled) -> dict``:
    how each report field is read from the network's dimensions (a model's manifest,
    docs/manifest.md)."""

    encode: Callable
    run: Callable
    describe: Callable


#: the codec of a circuit net: 0/1 vectors in declared port order (:mod:`tm2nn.codec`)
BITS = Codec(encode=encode_bits, run=run_bits, describe=describe_bits)


@dataclass(frozen=True)
class Stepping:
    """A backend that runs machines step by step with a compile-time step bound:
    ``option`` is the option ``run --max-steps N`` sets, ``default`` the bound ``run``
    uses when none is given, ``for_inputs(values, texts) -> values`` the compile options
    ``run`` uses for these inputs (e.g. a window that fits them)."""

    option: str
    default: int
    for_inputs: Callable | None = None

    def options_for(self, values: dict, texts: list[str]) -> dict:
        return self.for_inputs(values, texts) if self.for_inputs is not None else values


@dataclass(frozen=True)
class Trainer:
    """A backend that trains (``tm2nn learn``): ``Options`` (its learn options; a
    ``data="csv"`` field is read by the API and handed over as arrays), ``takes`` (the IR
    it trains), ``exports`` (the snapshots it can return: ``"before"`` / ``"after"``),
    ``learn(ir, opts, *, data, source_path, progress, models, device) -> Learned`` (``device``:
    a name of :mod:`tm2nn.devices`, ``"cpu"`` by default, where a torch trainer trains; a
    trainer that cannot run there refuses it with an OptionError naming ``{device}``) and, where the
    demo shows a training example of it with the reference, ``example(ir, header, folder) ->
    (text, ok)`` (``header``: the example's documented header lines)."""

    Options: type
    takes: tuple
    learn: Callable
    exports: tuple[str, ...] = ()
    example: Callable | None = None


@dataclass(frozen=True)
class Training:
    """A backend that ``tm2nn train`` trains in its own architecture (issue 38,
    :mod:`tm2nn.training`): ``Options`` (its own train options, beside the shared
    :class:`tm2nn.training.options.TrainOptions`) and ``task(compiled, opts, extra) ->
    Task`` (which tensors train, how outputs decode and compare with the interpreter, the
    loss, the model the trained weights make).  ``compile`` the compile options a training
    run compiles with (e.g. the transformer's softmax attention)."""

    Options: type
    task: Callable
    compile: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Example:
    """One row of ``tm2nn demo``'s table of compiled networks: an example file (under
    ``examples/``) and the ``tm2nn`` command lines that show it (``{ex}``: the examples
    folder, ``{out}``: the output folder).  ``commands[0]`` writes the model (a ``.onnx``
    under ``{out}``); the others verify it (``--json``, read for ``ok``, ``n_inputs`` and
    ``mode``).  With no verify command the first one checks itself: its ``--json`` line
    must hold every ``expect`` key with that value, and ``checked`` (formatted with that
    line) says what it checked.  ``label`` names the row (default: the backend's name)."""

    file: str
    commands: tuple[str, ...]
    label: str = ""
    expect: Mapping[str, object] = field(default_factory=dict)
    checked: str = ""


@dataclass(frozen=True)
class Backend:
    """One construction (see the module doc)."""

    name: str
    paper: str
    summary: str
    Options: type
    takes: tuple
    takes_what: str
    compile: Callable
    codec: Codec
    reference: Callable
    stepping: Stepping | None = None
    #: engines beyond torch and onnxruntime: name -> ``factory(compiled) -> run(*arrays,
    #: batch_size)`` for an engine that takes the network's own arrays, or None for one
    #: the codec drives itself (the transformer's index engine)
    fused: Mapping[str, Callable | None] = field(default_factory=dict)
    #: the dense engines its models run on (gd-trace's optimizer runs in torch only)
    dense: tuple[str, ...] = DENSE
    trainer: Trainer | None = None
    #: ``tm2nn train``: the construction's own architecture trained by Adam/SGD
    training: Training | None = None
    analyses: Mapping[str, Callable] = field(default_factory=dict)
    #: the metadata a model file of this backend must carry beyond every model's: what
    #: its rebuild and decoding read, ``"tm2nn.key"`` or ``"tm2nn.key/field/..."`` -> a
    #: kind of the model schema; checked when a model is loaded
    model_keys: Mapping[str, str] = field(default_factory=dict)
    #: extra refusal of IR that ``takes`` admits (gd-trace: a machine too wide for it)
    check_ir: Callable | None = None
    #: ``rebuild(ir, build) -> Model``: the model a saved file describes (default: compile
    #: with the recorded options)
    rebuild_from: Callable | None = None
    #: ``info_rows(compiled) -> [[quantity, this net, the paper's bound]]`` (default: the
    #: model's ``bounds``)
    size_rows: Callable | None = None
    examples: tuple[Example, ...] = ()
    #: what ``tm2nn viz`` draws for this backend's models (see tm2nn.viz)
    pictures: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self):
        unknown = sorted(set(self.analyses) - set(ANALYSES))
        if unknown:
            raise ValueError(f"backend {self.name!r}: unknown analysis {unknown[0]!r} (known: {', '.join(ANALYSES)})")
        if not self.name:
            raise ValueError("a backend needs a name")

    # -- what it is --------------------------------------------------------------------
    @property
    def engines(self) -> tuple[str, ...]:
        """Every engine its models run on."""
        return (*self.dense, *self.fused)

    def has(self, analysis: str) -> bool:
        """Whether it declares ``analysis`` (a name of :data:`ANALYSES`)."""
        if analysis not in ANALYSES:
            raise KeyError(analysis)
        return analysis in self.analyses

    def analysis(self, name: str, others: Callable[[str], list[str]] | None = None) -> Callable:
        """The function of analysis ``name``; a backend without it is a clear error
        (``others(name)`` lists the backends that have it)."""
        if name in self.analyses:
            return self.analyses[name]
        have = (", ".join(others(name)) or "none") if others is not None else "see tm2nn.backends.having"
        refusal = REFUSALS.get(name, "the {name} backend has no %s analysis (backends with one: {others})"
                               % name.replace("_", " "))
        raise Tm2nnError(refusal.format(name=self.name, others=have))

    # -- options and IR ----------------------------------------------------------------
    def options(self, **values):
        """The validated options object (unknown names and bad values are errors)."""
        return make(self.Options, values, f"the {self.name} backend")

    def learn_options(self, **values):
        """The validated learn options (of a backend with a ``trainer``)."""
        return make(self.trainer.Options, values, f"learning with the {self.name} backend")

    def check_source(self, ir) -> None:
        """Refuse IR this backend does not compile, with a clear error."""
        if self.takes and not isinstance(ir, tuple(self.takes)):
            what = type(ir).__name__.lower().replace("gridmachine", "grid machine")
            raise Tm2nnError(f"the {self.name} backend compiles {self.takes_what}; {getattr(ir, 'name', '?')!r} "
                             f"is a {what}")
        if self.check_ir is not None:
            self.check_ir(ir)

    def rebuild(self, ir, build: dict) -> Model:
        """The model a saved file describes: ``build`` is what the model's ``build`` held."""
        if self.rebuild_from is not None:
            return self.rebuild_from(ir, build)
        return self.compile(ir, self.options(**build.get("options", {})))

    def info_rows(self, compiled) -> list:
        """Size rows ``(quantity, this network, the paper's bound)``."""
        if self.size_rows is not None:
            return self.size_rows(compiled)
        return [list(r) for r in compiled.bounds]

    def __repr__(self) -> str:
        return f"<backend {self.name}: {self.summary}>"


__all__ = ["ANALYSES", "BITS", "DENSE", "Backend", "Codec", "Example", "Learned", "Model", "Stepping", "Table", "Trainer", "Training",
           "model_fields"]
