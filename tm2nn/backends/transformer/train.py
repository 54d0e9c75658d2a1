"""``tm2nn train --backend transformer`` (issue 38): the encoder-decoder transformer of
Wei, Chen & Ma §4.1 / App. C, compiled with softmax attention (App. C's remark; β the
``--beta`` compile option) and trained in its own parametrisation
(:mod:`tm2nn.training.params`: every affine entry with ``mask="all"``, the construction's
stored entries with ``"wiring"``; attention matrices, embedding and initial decoder input
train their stored entries).

**Teacher forcing.**  §4.1's decoder step is ``(o_i, tap_i) = body(o_{i-1} + β(i),
memory)`` (:class:`tm2nn.nets.Decode`).  In training, step ``i`` gets the teacher's
``o_{i-1}`` instead of its own: the construction's decoder output on the same input, whose
taps decode to the interpreter's run at every step (checked when the teacher is computed;
a construction that is not exact on the drawn inputs at this β is an error).  The loss is
the mean squared error of every step's tap (the decoder's per-step outputs: state, symbol
written, head move as position bits) against the teacher's.

**Errors** are free-running, as ``verify`` runs the model: the current weights as a model of
the construction's shape, run by the backend's reference check (:mod:`.reference`), which
compares the decoded configuration with the interpreter's at every step.  The per-step error
is the share of teacher-forced steps whose rounded tap differs from the teacher's.
"""

from __future__ import annotations

import torch

from tm2nn.backends.protocol import Model, model_fields
from tm2nn.emit.torch_emit import to_torch
from tm2nn.emit.torch_seq import DecodeModule
from tm2nn.errors import Tm2nnError
from tm2nn.training.loop import Task
from tm2nn.training.params import frozen, trainable


def teacher_input(o_teacher: torch.Tensor, i: int) -> torch.Tensor:
    """What decoder step ``i`` reads under teacher forcing: the teacher's ``o_{i-1}`` (§4.1:
    step i computes ``body(o_{i-1} + β(i), memory)``); ``o_teacher[k]`` is the o fed to step k + 1."""
    return o_teacher[i - 1]


def _decoder(module) -> DecodeModule:
    found = [m for m in module.modules() if isinstance(m, DecodeModule)]
    if len(found) != 1:
        raise Tm2nnError("the transformer net has no single decoder loop to teacher-force")
    return found[0]


def training(compiled: Model, opts, extra) -> Task:
    """The :class:`~tm2nn.training.loop.Task` of a compiled transformer (module doc)."""
    teacher_mod = compiled.torch(dtype=torch.float64)
    module = to_torch(trainable(compiled.net, opts.mask), torch.float64)
    params, ref, masks, fan_in = {}, {}, {}, {}
    for name, p in module.named_parameters():
        if name.endswith("positions"):  # Bin(i)'s placement: a computed code, not a weight (docs/transformer.md)
            continue
        p.requires_grad_(True)
        params[name] = p
        ref[name] = p.detach().clone()
        fan_in[name] = max(1, p.shape[-1] if p.dim() > 1 else p.numel())
        if opts.mask == "wiring":
            masks[name] = ref[name] != 0
    dec, tdec = _decoder(module), _decoder(teacher_mod)
    checker = compiled.spec.reference(compiled)
    memo: dict = {}

    def teach(texts: list[str]):
        """Per input: (tokens, the teacher's o_0..o_{T-1} [T, width], its taps [T+1, tap])."""
        new = [t for t in dict.fromkeys(texts) if t not in memo]
        if new:
            wrong = [r for r in checker.check("torch", new, checker.prepare(new))[0] if r is not None]
            if wrong:
                raise Tm2nnError(f"the construction is not exact on {len(wrong)} of the drawn inputs at this "
                                 "softmax beta (first: step {0}, {1}): raise --beta".format(*wrong[0][:2]))
            x = torch.as_tensor(compiled.spec.codec.encode(compiled, new))
            outs = []
            real = tdec.step

            def record(i, o, mem, ctx):
                out = real(i, o, mem, ctx)
                outs.append(o)
                return out
            tdec.step = record
            try:
                with torch.no_grad():
                    taps = teacher_mod(x)
            finally:
                del tdec.step
            os_ = torch.stack(outs)  # [T, width, batch]: the o fed to steps 1..T
            for k, t in enumerate(new):
                memo[t] = (x[k], os_[:, :, k], taps[k])
        rows = [memo[t] for t in texts]
        return (torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows], dim=2),
                torch.stack([r[2] for r in rows]))

    def forced(x, o_teacher):
        real = DecodeModule.step

        def step(i, o, mem, ctx):
            return real(dec, i, teacher_input(o_teacher, i), mem, ctx)
        dec.step = step
        try:
            return module(x)
        finally:
            del dec.step

    def loss(texts: list[str]) -> torch.Tensor:
        x, o_t, taps_t = teach(texts)
        return ((forced(x, o_t) - taps_t) ** 2).mean()

    def model() -> Model:
        m = Model(**{**model_fields(compiled), "net": frozen(module.to_net(), compiled.net), "net_info": None})
        m.edited = "trained weights (tm2nn train)"
        return m

    def errors(texts: list[str]):
        x, o_t, taps_t = teach(texts)
        with torch.no_grad():
            got = forced(x, o_t)
        step_bad = ((got > 0.5) != (taps_t > 0.5)).any(dim=2)
        m = model()
        from_model = compiled.spec.reference(type(compiled).of(m))  # the handle type the session gave
        res = from_model.check("torch", texts, from_model.prepare(texts))[0]
        return sum(r is not None for r in res), int(step_bad.sum()), int(step_bad.numel()), len(texts)

    return Task(params, ref, loss, errors, model, fan_in, masks, {},
                what=f"{len(params)} tensors, teacher-forced over {dec.steps} decoder steps, softmax "
                     f"beta {compiled.options.get('beta', compiled.build['options'].get('beta'))}")
