"""Running a compiled transformer: input tapes as token ids (:func:`encode`, the codec's
``encode``), and the taps (one row per decoder step 0..T') from torch, onnxruntime or the
index engine (:mod:`.engines.index_engine`).  :mod:`.decoding` reads the taps back into
the source machine's run (Wei, Chen & Ma 2022, App. C.1's layout of the hidden vector).

A function here that takes ``compiled`` takes the user's handle (``.net``, the
encodings, ``.module()``, ``.runner(engine)``); :func:`encode` needs only the model's data."""

from __future__ import annotations

import numpy as np

from tm2nn import threads
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import check_input
from tm2nn.limits import memory_limit

#: inputs per batch of a torch, onnxruntime or long-run engine run
BATCH = 512
#: the long-run engines (:mod:`.engines`): the index engine and the program engine
LONG_RUN = ("index", "program")


def encode_tokens(enc: dict, texts: list[str]) -> np.ndarray:
    """Input strings -> ``[n, L]`` int64 token ids, padded on the right with the blank
    (a blank cell is what the tape holds there anyway)."""
    index = {a: i for i, a in enumerate(enc["alphabet"])}
    blank = index[enc["blank"]]
    width = max([1, *(len(t) for t in texts)])
    out = np.full((len(texts), width), blank, dtype=np.int64)
    for r, t in enumerate(texts):
        for c, ch in enumerate(t):
            if ch not in index:
                raise Tm2nnError(f"symbol {ch!r} is not in the alphabet "
                                 f"({' '.join(repr(a) for a in enc['alphabet'])})",
                                 file="input", line=1, col=c + 1, snippet=t)
            out[r, c] = index[ch]
    return out


def encode(compiled, texts: list[str]) -> np.ndarray:
    """Token ids ``[n, L]`` of the input tapes of ``compiled``'s source machine, padded
    with the blank (each tape checked against the machine's input alphabet first)."""
    for t in texts:
        check_input(compiled.source, t)
    return encode_tokens(compiled.input_encoding, texts)


def torch_runner(net_or_module, progress=None):
    """``tokens [n, L] -> taps [n, T+1, tap_w]`` with the torch module (float32, no_grad),
    on the module's device (the tokens moved there, the taps back)."""
    import torch

    # tm2nn.emit.torch_emit loads torch: imported here for start-up time
    from tm2nn.emit.torch_emit import loop_progress, module_device, to_torch
    from tm2nn.emit.torch_net import NetModule

    mod = net_or_module if isinstance(net_or_module, NetModule) else to_torch(net_or_module)
    device = module_device(mod)

    def run(tokens: np.ndarray) -> np.ndarray:
        outs = []
        threads.use_torch()  # a decode step is a chain of tiny ops (tm2nn.threads)
        with torch.no_grad(), loop_progress(mod, progress):
            for s in range(0, tokens.shape[0], BATCH):
                outs.append(mod(torch.from_numpy(tokens[s:s + BATCH]).to(device)).cpu().numpy())
        return np.concatenate(outs)
    return run


def run_taps(compiled, texts: list[str], engine: str, progress=None, horizon=None):
    """``[n, T+1, tap_w]`` taps of a compiled transformer on ``texts`` (torch,
    onnxruntime or the index engine).  ``horizon(n_inputs)``, for the index engine only,
    makes the ``stop(taps, n)`` that may end its decode once the taps decide every report
    (:class:`tm2nn.backends.transformer.decoding.Horizon`); the taps are then a list of
    per-input arrays of the steps run."""
    tokens = encode(compiled, texts)
    if engine == "torch":
        return torch_runner(compiled.module(), progress)(tokens)
    if engine in LONG_RUN:
        return index_taps(compiled, tokens, progress, horizon, engine)
    y = compiled.runner(engine)(tokens, batch_size=BATCH)
    return y[0] if isinstance(y, tuple) else y


def index_taps(compiled, tokens: np.ndarray, progress=None, horizon=None, engine: str = "index"):
    """The index engine (:mod:`tm2nn.backends.transformer.engines.index_engine`) or the
    program engine (:mod:`~tm2nn.backends.transformer.engines.program_engine`) on
    ``tokens``, in batches that fit the memory limit (each input's history index and taps
    are counted first)."""
    # the long-run engines load numba: imported here for start-up time
    from tm2nn.backends.transformer.engines.program_engine import IndexEngine, ProgramEngine

    eng = (ProgramEngine if engine == "program" else IndexEngine).for_net(compiled.net)
    per = eng.bytes_per_input(min(tokens.shape[1], eng.prog.embed.max_len))
    size = int(max(1, min(BATCH, memory_limit() // max(1, 2 * per))))
    total = tokens.shape[0] * eng.steps
    out = []
    for s in range(0, tokens.shape[0], size):
        part = tokens[s:s + size]
        report = None if progress is None else \
            (lambda done, steps, s=s, n=part.shape[0]: progress(s * eng.steps + done * n, total))
        run = eng.run(part, progress=report, stop=None if horizon is None else horizon(part.shape[0]))
        out += list(run.taps) if horizon is not None else [run.taps]
    return out if horizon is not None else np.concatenate(out)
