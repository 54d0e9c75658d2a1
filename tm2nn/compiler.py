"""Orchestration: source -> IR -> passes -> backend -> Compiled -> model files.

``compile`` is the one place that strings the stages together; the CLI and the
tests call it.  Backends receive IR and return a :class:`~tm2nn.backends.base.Compiled`;
they never parse, run interpreters or write files.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

from tm2nn.backends.base import Compiled
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Circuit, GridMachine, Machine

BACKENDS = {"relu-circuit": "tm2nn.backends.relu_circuit", "transformer": "tm2nn.backends.transformer",
            "rcnn": "tm2nn.backends.rcnn", "abbe-sandon": "tm2nn.backends.abbe_sandon",
            "gd-trace": "tm2nn.backends.gd_trace"}
DEFAULT_MAX_GATES = 5_000_000


def backend_module(name: str):
    if name not in BACKENDS:
        raise Tm2nnError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
    return importlib.import_module(BACKENDS[name])


def compile(
    source,
    backend: str = "relu-circuit",
    *,
    format: str | None = None,
    name: str | None = None,
    steps: int | None = None,
    tape: int | None = None,
    origin: int | None = None,
    max_gates: int = DEFAULT_MAX_GATES,
    corrections: bool = True,
    pm_one_output: bool = False,
    attention: str = "hardmax",
    beta: float = 10.0,
    max_input: int | None = None,
) -> Compiled:
    """Compile a source (a path, a Machine or a Circuit) with ``backend``.

    Machines go to the relu-circuit backend through TM -> circuit unrolling, which needs
    ``steps`` (T) and takes ``tape`` (N cells, default 2T+1) and ``origin``.  The
    transformer backend takes line machines, ``steps`` (T), ``attention`` (hardmax or
    softmax) and ``beta`` (the softmax inverse temperature).  The rcnn and gd-trace
    backends take machines, ``steps`` (T) and ``max_input`` (the longest input tape,
    default T).
    """
    from tm2nn.syntax import load

    if backend == "abbe-sandon":
        raise Tm2nnError("the abbe-sandon net is built and trained by 'tm2nn learn LEARNER.circ' (exactly, "
                         "or with --engine float64 --export-before/--export-after for .onnx/.pt models); "
                         "'tm2nn info LEARNER.circ --backend abbe-sandon' gives its size")
    ir = source if isinstance(source, (Machine, Circuit)) else load(source, format, name)
    from tm2nn.backends.abbe_sandon.noisy_learner import NoisyLearner
    from tm2nn.ir import Learner

    if isinstance(ir, Learner):
        raise Tm2nnError(f"{ir.name!r} is a learner (h and g circuits, Abbe & Sandon Lemma 3); the "
                         f"{backend} backend compiles machines and circuits.  Train it with 'tm2nn learn', "
                         f"or compile one of its circuits with --name {ir.h.name} or --name {ir.g.name}")
    if isinstance(ir, NoisyLearner):
        raise Tm2nnError(f"{ir.name!r} is a noisy learner (Abbe & Sandon §4.2, Lemma 6); the {backend} "
                         f"backend compiles machines and circuits.  Train it with 'tm2nn learn', or compile "
                         f"its circuit with --name {ir.h.name}")
    mod = backend_module(backend)
    if backend == "transformer":
        if isinstance(ir, Circuit):
            raise Tm2nnError("the transformer backend compiles machines, not circuits (try --backend relu-circuit)")
        if pm_one_output:
            raise Tm2nnError("--pm-one applies to the relu-circuit backend only")
        return mod.compile(ir, steps=steps, attention=attention, beta=beta, corrections=corrections)
    if backend == "rcnn":
        if isinstance(ir, Circuit):
            raise Tm2nnError("the rcnn backend compiles machines (machine mode), not circuits")
        return mod.compile(ir, steps=steps, max_input=max_input)
    if backend == "gd-trace":
        if isinstance(ir, Circuit):
            raise Tm2nnError("the gd-trace backend compiles machines (Welper §4.4), not circuits")
        return mod.compile(ir, steps=steps, max_input=max_input)
    if backend == "relu-circuit":
        if isinstance(ir, Circuit):
            return mod.compile(ir, corrections=corrections, pm_one_output=pm_one_output)
        return _compile_unrolled(mod, ir, steps, tape, origin, max_gates, corrections, pm_one_output)
    raise Tm2nnError(f"backend {backend!r} cannot compile {type(ir).__name__}")  # pragma: no cover


def unroll_machine(m: Machine, steps, tape=None, origin=None, max_gates: int = DEFAULT_MAX_GATES):
    """TM -> circuit for the relu-circuit backend: ``steps`` is required, the window
    defaults to 2T+1 cells (every run of T steps fits).  Returns (circuit, layout)."""
    from tm2nn.passes.unroll import unroll

    if isinstance(m, GridMachine):
        raise Tm2nnError("the relu-circuit backend unrolls line machines; this is a grid machine")
    if steps is None:
        raise Tm2nnError("compiling a machine to a circuit needs a step bound: pass --steps T")
    n = tape if tape is not None else 2 * steps + 1
    return unroll(m, steps, n, origin=origin, max_gates=max_gates)


def _compile_unrolled(mod, m: Machine, steps, tape, origin, max_gates, corrections, pm_one_output) -> Compiled:
    circuit, layout = unroll_machine(m, steps, tape, origin, max_gates)
    inner = mod.compile(circuit, corrections=corrections, pm_one_output=pm_one_output)
    threshold = inner.output_encoding.get("threshold", 0.5)
    return Compiled(
        backend=inner.backend,
        net=inner.net,
        source=m,
        input_encoding={"kind": "unrolled_tm", "layout": layout.to_json()},
        output_encoding={"kind": "unrolled_tm", "layout": layout.to_json(), "threshold": threshold},
        bounds=inner.bounds,
        options=dict(inner.options, steps=steps, tape=layout.tape, origin=layout.origin, circuit_gates=len(circuit.gates)),
    )


def source_tables(ir) -> dict:
    """The machine's or circuit's symbol and port tables, for the model's metadata."""
    if isinstance(ir, Circuit):
        return {"inputs": list(ir.inputs), "outputs": list(ir.outputs)}
    return {
        "alphabet": list(ir.alphabet), "blank": ir.blank, "states": list(ir.states),
        "start": ir.start, "halting": ir.halting, "tape": ir.tape_kind, "convention": ir.convention,
    }


def metadata(compiled: Compiled, source_sha256: str) -> dict[str, str]:
    """ARCHITECTURE.md's ``metadata_props`` for a compiled model."""
    from tm2nn import __version__

    info = compiled.net.info()
    info.pop("widths", None)
    return {
        "tm2nn.version": __version__,
        "tm2nn.backend": compiled.backend,
        "tm2nn.source_sha256": source_sha256,
        "tm2nn.source_name": compiled.source.name,
        "tm2nn.input_encoding": json.dumps(compiled.input_encoding, sort_keys=True),
        "tm2nn.output_encoding": json.dumps(compiled.output_encoding, sort_keys=True),
        "tm2nn.tables": json.dumps(source_tables(compiled.source), sort_keys=True),
        "tm2nn.options": json.dumps(compiled.options, sort_keys=True),
        "tm2nn.info": json.dumps(info, sort_keys=True),
        "tm2nn.bounds": json.dumps(compiled.bounds),
    }


def sha256_of(path: str | Path | None, ir=None) -> str:
    if path is not None and Path(path).is_file():
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return hashlib.sha256(repr(ir).encode()).hexdigest()


def onnx_model(compiled: Compiled, source_sha256: str):
    """The compiled net as an ONNX model with its metadata, plus what the backend adds to
    the graph (its ``finish_onnx(model, compiled)``, e.g. the transformer's decoded outputs)."""
    from tm2nn.emit.onnx_emit import to_onnx

    model = to_onnx(compiled.net, metadata(compiled, source_sha256))
    finish = getattr(backend_module(compiled.backend), "finish_onnx", None)
    return finish(model, compiled) if finish else model


def save(compiled: Compiled, out: str | Path, source_sha256: str) -> Path:
    """Write the model: ``.onnx`` (self-contained ONNX) or ``.pt`` (torch module + metadata)."""
    out = Path(out)
    meta = metadata(compiled, source_sha256)
    if out.suffix == ".onnx":
        from tm2nn.emit.onnx_emit import save_onnx

        save_onnx(onnx_model(compiled, source_sha256), out)
    elif out.suffix == ".pt":
        import io

        import torch

        from tm2nn.emit.torch_emit import to_torch
        from tm2nn.fileio import write_atomic

        buf = io.BytesIO()
        torch.save({"module": to_torch(compiled.net), "metadata": meta}, buf)
        write_atomic(out, buf.getvalue())
    else:
        raise Tm2nnError(f"output must end in .onnx or .pt, got {out.name!r}")
    return out
