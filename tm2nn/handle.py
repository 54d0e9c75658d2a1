""":class:`Compiled`: the model a user holds, what ``tm2nn.compile`` returns and
``tm2nn.load_model`` gives back.

A thin handle above the backends: it wraps the :class:`~tm2nn.backends.protocol.Model` a
backend built (plain data) and calls down only: to the backend's codec and reference
check through the registry, to the emitters for the torch module and the ONNX model, to
:mod:`tm2nn.modelfile` to save, and to :mod:`tm2nn.verify` to verify.  The emitters and
the model files load torch and onnx, so they are imported when first used (``import
tm2nn`` stays light: the import-contract test allows exactly these).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from tm2nn import backends
from tm2nn.backends.protocol import DENSE, Backend, Model, model_fields
from tm2nn.devices import CPU, check_device, check_engine_device, is_cpu, torch_device
from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory
from tm2nn.memwatch import allocation_failure
from tm2nn.options import OptionError
from tm2nn.syntax import native_text
from tm2nn.verify.check import DEFAULT_BUDGET, divergences, verify_compiled

#: Bytes one input's run takes beyond the network's own arrays: its report (a dict of
#: strings), the check against the reference and the text printed (measured: 1.3 KB for
#: a 9-bit circuit's input in ``tm2nn eval --inputs``).
REPORT_BYTES = 1536


@dataclass(eq=False)
class Compiled(Model):
    """A compiled network and how to talk to it (see the module doc).

    ``net`` is the network IR; ``input_encoding`` / ``output_encoding`` are JSON-able
    dicts (a ``"kind"`` plus what it needs) from which a saved model is driven without its
    source; ``bounds`` are size rows next to the paper's; ``options`` the derived sizes;
    ``build`` what rebuilds the model from its source (the validated compile options)."""

    _cache: dict = field(default_factory=dict, init=False, repr=False)
    #: the torch engine's device inside :meth:`on_device` (None: the CPU)
    _device: str | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, model: Model) -> "Compiled":
        """The handle of a backend's model (a handle is returned as it is)."""
        return model if isinstance(model, Compiled) else cls(**model_fields(model))

    def __repr__(self) -> str:
        return (f"<Compiled {self.backend} of {getattr(self.source, 'name', '?')!r}: "
                f"{self.info()['info']['params_nonzero']:,} parameters>")

    @property
    def spec(self) -> Backend:
        """The construction that made this model."""
        return backends.get(self.backend)

    def source_text(self) -> str:
        """The source as tm2nn text (what a model file records and, without a source file,
        what its hash is of): written once per model, a second for a 10^6-gate circuit."""
        if "source_text" not in self._cache:
            self._cache["source_text"] = native_text(self.source)
        return self._cache["source_text"]

    # -- views -----------------------------------------------------------------------------
    def torch(self, device=None, dtype=None):
        """The network as a ``torch.nn.Module`` (a new one per call), built on ``device``
        (default: the CPU; :mod:`tm2nn.devices`) with weights computed in ``dtype`` (default:
        the model's, float32 unless compiled with float64): exact in that dtype, not
        rounded to float32 and cast.  Construction weights are ``nn.Parameter``\\ s with
        ``requires_grad=False`` (the trained ones of a backend that trains have ``True``),
        named after the IR's ops (docs/api.md, "The torch module")."""
        from tm2nn.modelfile.metadata import torch_module

        if self.edited is not None and self.onnx_bytes is not None:
            how = "run it in onnxruntime, or " if "onnxruntime" in self.spec.engines else ""
            raise Tm2nnError(f"its weights are not the construction's ({self.edited}), and the torch module is "
                             f"built from the construction: {how}save the edited weights as .pt", file=self.path)
        if hasattr(device, "is_floating_point") and not hasattr(device, "type"):  # a torch.dtype, given first
            raise TypeError(f"Compiled.torch(device=None, dtype=None) takes the device first: pass dtype={device}")
        where = None if device is None or is_cpu(device) else torch_device(device)
        return torch_module(self, dtype or self.dtype, where)

    @property
    def dtype(self):
        import torch

        return torch.float64 if self.options.get("dtype") == "float64" else torch.float32

    def onnx(self):
        """The model as an ``onnx.ModelProto`` (weights inside, metadata in
        ``metadata_props``)."""
        from tm2nn.modelfile.formats import onnx_of

        return onnx_of(self)

    def save(self, path):
        """Write the model: ``.onnx`` (self-contained), ``.pt`` (a state dict and the
        metadata; ``torch.load(path, weights_only=True)`` reads it) or ``.safetensors``
        (the arrays and a JSON manifest)."""
        from tm2nn.modelfile.formats import save

        return save(self, path)

    def metadata(self) -> dict[str, str]:
        from tm2nn.modelfile.metadata import metadata

        return metadata(self)

    def analysis(self, name: str):
        """The backend's analysis ``name`` (``"certified_margin"``, ``"function_class"``, ...
        : :data:`tm2nn.backends.protocol.ANALYSES`); called with this model where it takes one,
        e.g. ``compiled.analysis("function_class")(compiled)``.  A backend without it is a
        clear error listing the backends that have it."""
        return self.spec.analysis(name, backends.having)

    # -- running ---------------------------------------------------------------------------
    def check_engine(self, engine: str, option: str = "engine") -> None:
        """Refuse an engine this backend does not run on (``option`` names the argument),
        and a fused engine for a model whose weights are not the construction's: the fused
        engines run ``self.net``, which holds the construction's."""
        if engine not in self.spec.engines:
            raise OptionError(f"the {self.backend} backend runs on {', '.join(self.spec.engines)}, "
                              f"not {{{option}}} {engine!r}", option)
        if engine not in DENSE and self.edited is not None:
            where = "onnxruntime" if self.onnx_bytes is not None else "torch"
            raise Tm2nnError(f"its weights are not the construction's ({self.edited}), and the {engine} engine "
                             f"runs the construction's network: run it in {where}", file=self.path)

    def runner(self, engine: str, device=None):
        """``run(*arrays) -> outputs`` for an engine (``torch``, ``onnxruntime`` or a fused
        engine that takes the network's own arrays), built once per model and device.  The
        torch engine runs on ``device`` (default: the one :meth:`on_device` set, else the
        CPU; numpy arrays in and out); every other engine runs on the CPU only and refuses
        another ``device``."""
        self.check_engine(engine)
        if device is None:
            device = self._device if engine == "torch" else None
        dev = check_device(device)
        check_engine_device(engine, dev)
        key = ("runner", engine, dev)
        if key not in self._cache:
            if engine not in DENSE:  # a fused engine of the backend's own
                factory = self.spec.fused.get(engine)
                if factory is None:
                    raise OptionError(f"the {engine} engine has no array runner: run inputs with compiled.run(texts, "
                                      f"engine={engine!r})", "engine")
                self._cache[key] = factory(self)
            elif engine == "torch":
                from tm2nn.emit.torch_emit import run_torch

                module = self.module(dev)
                self._cache[key] = lambda *x, batch_size=4096: run_torch(module, *x, batch_size=batch_size)
            else:
                from tm2nn.emit.onnx_runtime import onnx_session, run_onnx

                sess = onnx_session(self.onnx_bytes if self.onnx_bytes is not None else self.onnx())
                self._cache[key] = lambda *x, batch_size=4096: run_onnx(sess, *x, batch_size=batch_size)
        return self._cache[key]

    def module(self, device=None):
        """The torch module the ``torch`` engine runs on ``device`` (default: the one
        :meth:`on_device` set, else the CPU): built once per device, shared; :meth:`torch`
        gives a fresh one."""
        dev = check_device(self._device if device is None else device)
        key = ("module", dev)
        if key not in self._cache:
            self._cache[key] = self.torch(device=dev)
        return self._cache[key]

    @contextmanager
    def on_device(self, device):
        """Within the block, :meth:`module` and the torch engine's :meth:`runner` called
        without a device (as the backends' codecs and reference checks call them) build
        and run on ``device``; the other engines stay on the CPU.  :meth:`run`,
        :meth:`check` and :meth:`verify` set it from their ``device`` argument.  A device
        this machine does not have is an :class:`~tm2nn.errors.OptionError`."""
        dev = self.checked_device(device)
        previous, self._device = self._device, None if dev == CPU else dev
        try:
            yield
        finally:
            self._device = previous

    @staticmethod
    def checked_device(device, engine: str = "torch") -> str:
        """``device``'s canonical name (None: the CPU), refused in one line when this
        machine does not have it or ``engine`` does not run there (only torch runs off the
        CPU: :func:`tm2nn.devices.check_engine_device`), and ``meta``, which holds shapes
        only (:meth:`torch` builds a module there; nothing runs on it)."""
        dev = check_device(device)
        check_engine_device(engine, dev)
        if dev == "meta":
            raise OptionError("{device} 'meta' holds shapes, not values: a module moves there "
                              "(compiled.torch(device='meta')) but nothing runs on it; use cpu", "device")
        if dev != CPU:
            torch_device(dev)
        return dev

    def encode(self, inputs):
        """The input array the network takes for ``inputs`` (strings, as ``run`` takes
        them): ``torch.from_numpy(compiled.encode(texts))`` feeds ``compiled.torch()``."""
        return self.spec.codec.encode(self, [inputs] if isinstance(inputs, str) else list(inputs))

    def run(self, inputs, engine: str = "torch", progress=None, device=None):
        """Run one input (a string: returns a :class:`~tm2nn.report.Report`) or a batch (a
        list of strings: a list of reports) through ``engine``, the torch engine on
        ``device`` (default: the CPU; the other engines run on the CPU only).  The reports
        are the CLI's ``--json`` reports."""
        single = isinstance(inputs, str)
        texts = [inputs] if single else [str(t) for t in inputs]
        self.check_engine(engine)
        dev = self.checked_device(device, engine)
        check_memory(len(texts) * REPORT_BYTES, f"the reports of {len(texts):,} inputs", ())
        with self.failures(engine), self.on_device(dev):
            reports = self.spec.codec.run(self, texts, engine, progress) if texts else []
        return reports[0] if single else reports

    def check(self, inputs, engine: str = "torch", device=None):
        """Each input's first divergence from the reference when the model runs on
        ``engine`` (the torch engine on ``device``; :func:`tm2nn.verify.check.divergences`):
        ``(what the reference is, [None or a Mismatch per input])``, or None when the
        backend has no reference for this model (a trained net, checked while it trains).
        ``tm2nn eval`` checks its reports with it."""
        self.check_engine(engine)
        dev = self.checked_device(device, engine)
        try:
            checker = self.spec.reference(self)
        except Tm2nnError:
            return None
        with self.failures(engine), self.on_device(dev):
            return divergences(checker, [inputs] if isinstance(inputs, str) else list(inputs), engine)

    @contextmanager
    def failures(self, engine: str | None):
        """A loaded model that fails in its engine (onnxruntime refusing the graph or a
        shape, torch a weight, the decoder its output) is a one-line error naming the file,
        not a traceback; a compiled model's failure is a bug and propagates as it is.  A
        loaded model's float errors (NaN, overflow) are not warned about: what they break
        is reported here, or by the check against the reference."""
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
            if allocation_failure(e):  # torch's or onnxruntime's: the CLI's out-of-memory line
                raise MemoryError(_one_line(e)) from e
            if self.path is None:
                raise
            doing = f"running it in {engine}" if engine else "verifying it"
            raise Tm2nnError(f"{doing} failed: {_one_line(e)}", file=self.path) from None

    def verify(self, inputs=None, *, budget: float | None = None, samples: int | None = None,
               seed: int | None = None, onnx: bool = True, progress=None, engines=None, device=None,
               min_samples: int | None = None):
        """Check the network against the reference interpreter (:func:`tm2nn.verify.verify_compiled`):
        the given ``inputs``, else every input when few enough, else random inputs for
        ``budget`` seconds (at most ``samples``; at least ``min_samples``, even past the
        budget: a check the budget cut after few inputs says so in ``warnings``), on ``engines`` (default: torch and,
        unless ``onnx=False``, onnxruntime).  The torch engine runs on ``device`` (default:
        the CPU); with the default engines onnxruntime still runs on the CPU (the report's
        ``how`` says so), and an explicit engine other than torch refuses another device.
        Returns a :class:`~tm2nn.verify.VerifyReport`."""
        for engine in engines or ():
            check_engine_device(engine, device)
        dev = self.checked_device(device)
        with self.failures(None), self.on_device(dev):
            rep = verify_compiled(self, inputs=inputs, budget=DEFAULT_BUDGET if budget is None else budget,
                                  samples=samples, seed=seed, use_onnx=onnx, progress=progress, engines=engines,
                                  min_samples=min_samples)
        if dev != CPU:
            others = [e for e in rep.engines if e != "torch"]
            rep.how += f"; torch on {dev}" + (f", {' and '.join(others)} on the CPU" if others else "")
        return rep

    def info(self) -> dict:
        """``{"backend", "info", "bounds"}``: the network's sizes (:meth:`tm2nn.nets.Net.info`)
        and the backend's rows next to the paper's bounds (a loaded model's as its file
        records them)."""
        if self.recorded_info is not None:
            return self.recorded_info
        net, info = self._cache.get("info", (None, None))
        if net is not self.net:  # computed once per net (a replaced net is measured again)
            info = backends.model_info(self, self.net_info if net is None else None)
            self._cache["info"] = (self.net, info)
        return info


def _one_line(e: Exception) -> str:
    """An engine's exception in one line: its type and first line (onnxruntime's
    ``[ONNXRuntimeError] : 2 :`` prefix dropped), at most 300 characters."""
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : ", "", str(e).strip())
    line = text.splitlines()[0] if text else ""
    line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line if len(line) <= 300 else line[:297] + "..."
