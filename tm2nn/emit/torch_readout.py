"""The torch modules of the readouts (:mod:`tm2nn.nets.ops`): :class:`RunReadoutModule`
(the machine's run read off a decoder's taps, Wei, Chen & Ma §4.1 / App. C) and
:class:`PickModule` (one coordinate of one step of a sequence: θ_clsᵀ o_T of the proof of
their Theorem 4.1).  Each is the torch emitter's entry for its op
(:func:`~tm2nn.emit.torch_net.torch_emitter`).

A readout's ``forward`` takes and returns batch-major values (``taps`` ``[B, S+1, w]``,
``tokens`` ``[B, L]``; a ``[B]`` or ``[B, cells]`` result): the net runs it after the
network, on its outputs (:meth:`~tm2nn.emit.torch_net.NetModule.outputs`).  The values are
the ONNX emitter's (:mod:`tm2nn.emit.onnx_readout`) to the bit: the same integer steps, in
int64 (the head's position too: the ONNX graph sums its bits in the model's float type,
exact up to 2^24 cells, beyond any table the torch module can build).
"""

from __future__ import annotations

import torch

from tm2nn.emit.torch_net import OpModule, _bm, torch_emitter
from tm2nn.nets import Pick, RunReadout


def _longs(values) -> torch.Tensor:
    return torch.tensor(tuple(values), dtype=torch.int64)


@torch_emitter(RunReadout)
class RunReadoutModule(OpModule):
    """One field of the run (:class:`tm2nn.nets.RunReadout`); the tap columns and tables
    are int64 buffers (structure, not weights)."""

    def __init__(self, op: RunReadout, dtype: torch.dtype = torch.float32, batch: int = 0) -> None:
        super().__init__(op)
        self.field = op.field
        self.n_symbols = len(op.sym1)
        self.max_steps, self.offset, self.blank = op.max_steps, op.offset, op.blank
        self.missing_rule_counts_step = op.missing_rule_counts_step
        for name in ("st", "sym1", "sym2", "pos2", "bit_values", "source_step", "halts", "halting"):
            self.register_buffer(name, _longs(getattr(op, name)), persistent=False)

    def extra_repr(self) -> str:
        return self._repr(f"field={self.field}, cells={2 * self.offset + 1}, max_steps={self.max_steps}")

    def fm(self, taps: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.forward(_bm(taps, "sequence"), tokens)

    def forward(self, taps: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``taps`` ``[B, S+1, w]``, ``tokens`` ``[B, L]`` -> the field (see the op)."""
        b = self._buffers
        st = taps.index_select(2, b["st"]).argmax(2)                              # [B, S+1]
        loc = ((taps.index_select(2, b["pos2"]) > 0.5).to(torch.int64) * b["bit_values"]).sum(2)
        keep = b["source_step"][st]
        keep[:, 0] = 1                                  # step 0 is source step 0
        src = keep.cumsum(1) - 1                        # the source step of each row
        valid = keep * (src <= self.max_steps)
        index = torch.arange(taps.shape[1], device=taps.device)
        last = (valid * (index + 1)).argmax(1)          # the last valid row
        sym = taps.index_select(2, b["sym1"]).argmax(2)
        stops = b["halts"][st * self.n_symbols + sym] * valid
        first = stops.argmax(1)                         # the first halting row
        any_stop = stops.amax(1)                        # [B] 0/1
        row = torch.where(any_stop.bool(), first, last)[:, None]
        f = self.field
        if f == "head":
            return loc.gather(1, row)[:, 0] - self.offset
        if f == "final_tape":
            return self._tape(taps, tokens, loc, last, index)
        state = st.gather(1, row)[:, 0]
        if f == "state":
            return state
        extra = any_stop * (1 - b["halting"][state]) if self.missing_rule_counts_step else torch.zeros_like(state)
        steps = src.gather(1, row)[:, 0] + extra
        if f == "steps":
            return steps.clamp(max=self.max_steps)
        return any_stop.bool() & (steps <= self.max_steps)

    def _tape(self, taps, tokens, loc, last, index) -> torch.Tensor:
        """The input (cells ``0 .. offset`` at ``offset ..``) overwritten by the last write
        to each cell among decoder steps ``1 .. last`` (step ``i`` writes at ``loc[i - 1]``)."""
        cells = 2 * self.offset + 1
        toks = tokens[:, : self.offset + 1].to(torch.int64)
        start = toks.new_full((toks.shape[0], cells), self.blank)
        start[:, self.offset: self.offset + toks.shape[1]] = toks
        writer = index[1:]                                                        # 1 .. S
        stamp = torch.where(writer[None, :] <= last[:, None], writer[None, :], 0)  # [B, S]
        last_write = torch.zeros_like(start).scatter_reduce(1, loc[:, :-1], stamp, reduce="amax")
        wr = taps.index_select(2, self._buffers["sym2"]).argmax(2)                # [B, S+1]
        return torch.where(last_write > 0, wr.gather(1, last_write), start)


@torch_emitter(Pick)
class PickModule(OpModule):
    """``x[:, step, index]`` of a sequence ``[B, L, w]`` (:class:`tm2nn.nets.Pick`)."""

    def __init__(self, op: Pick, dtype: torch.dtype = torch.float32, batch: int = 0) -> None:
        super().__init__(op)
        self.step, self.index = int(op.step), int(op.index)

    def extra_repr(self) -> str:
        return self._repr(f"step={self.step}, index={self.index}")

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(_bm(x, "sequence"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.step, self.index]
