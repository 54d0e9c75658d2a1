"""The program engine (``--engine program``): a compiled transformer's decoder for long
runs that does only the work that changes a value (issue 39; docs/transformer.md, "The
program engine").

It is the index engine (:mod:`.index_engine`: the encoder, the prologue, the key indexes,
the chunked, interruptible run) with the decoder body replaced by a
:class:`~.step_program.StepProgram` over exact integer registers, run by
:mod:`.step_kernel`: the rows that compute a new value (identity and duplicate units
skipped, Prop. 3.4's rounds and the transition table's units described by tables built by
running their rows on every value their inputs can take), and each hard-max attention as
one lookup in the key index with ``u`` and the null's margin computed by the net's own
query and key rows.  Same network, same weights, same function; what it cannot run exactly
it refuses with the reason (run that model with ``--engine index`` or torch).
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.transformer.engines import step_kernel as SK
from tm2nn.backends.transformer.engines.decode_kernel import ERR_FULL, ERR_HISTORY, ERR_TAP
from tm2nn.backends.transformer.engines.hardmax_index import FINGER_DEPTH
from tm2nn.backends.transformer.engines.index_engine import IndexEngine, Run
from tm2nn.backends.transformer.engines.step_program import FALLBACK, build_step_program
from tm2nn.engines import EngineRefused


class ProgramEngine(IndexEngine):
    """Built once per compiled network (:meth:`for_net` caches it on the net)."""

    name = "program"

    def __init__(self, net, prefix: bool = True) -> None:
        """``prefix=False`` answers every attention by the branch-and-bound lookup (tests)."""
        super().__init__(net)
        self.sp = build_step_program(net, self.prog)
        p = self.prog
        self.pgeo = np.array([self.sp.scale, p.body.w, p.pos_kind, p.pos_offset, len(p.pos_cols), self.tap_w, int(prefix)],
                             dtype=np.uint64)

    @classmethod
    def for_net(cls, net) -> "ProgramEngine":
        eng = getattr(net, "_program_engine", None)
        if eng is None:
            eng = cls(net)
            object.__setattr__(net, "_program_engine", eng)
        return eng

    def start(self, tokens: np.ndarray, steps: int):
        """The index engine's start (encoder index, prologue, ``tap_0``), then this engine's
        registers and ``s·o_0``."""
        st, tap0 = super().start(tokens, steps)
        b = self.prog.body
        o0 = st.ws[b.o_off:b.o_off + b.w] * self.sp.scale
        if np.any(o0 != np.round(o0)):
            raise EngineRefused(f"the program engine runs integer registers; the prologue's o_0 is not a multiple of "
                                f"1/{self.sp.scale}: run this model with {FALLBACK}")
        st.obuf = o0.copy()
        st.regs = np.zeros(self.sp.n_regs, dtype=np.float64)
        st.a_state = np.zeros((len(self.sp.attn_names), 8))  # the kernel's checkpoints (step_kernel._attend)
        st.a_pat = np.zeros((len(self.sp.attn_names), 2), dtype=np.uint64)
        st.fpath = np.zeros((len(self.prog.indexes), FINGER_DEPTH), dtype=np.uint64)
        st.inc = self._kept_sums()
        return st, tap0

    def _kept_sums(self) -> tuple:
        """The kernel's event-driven state (step_kernel.run_steps, ``inc``): who reads each
        register (rows, weights: the program's own terms, transposed), the rows' kept sums,
        the attentions' last outcomes, whether the sums are kept."""
        sp = self.sp
        n_rows = sp.bias.size
        dst = sp.dst.astype(np.int64)
        if np.unique(dst).size != dst.size:
            raise EngineRefused("the program engine's rows write each register once a step")
        rows = np.repeat(np.arange(n_rows, dtype=np.uint64), np.diff(sp.ptr.astype(np.int64)))
        col = sp.col.astype(np.int64)
        order = np.argsort(col, kind="stable")
        fptr = np.zeros(sp.n_regs + 1, dtype=np.uint64)
        fptr[1:] = np.cumsum(np.bincount(col, minlength=sp.n_regs))
        nv = max([1, *(len(ix.val_cols) for ix in self.prog.indexes)])
        return (fptr, rows[order], sp.w[order].copy(), np.zeros(n_rows),
                np.zeros((len(sp.attn_names), nv + 1), dtype=np.int64), np.zeros(1, dtype=np.uint64))

    def advance(self, st, first: int, n: int, taps: np.ndarray, probes=None, dumps=None) -> None:
        """Decoder steps ``first .. first + n - 1`` into ``taps`` (rows indexed by step)."""
        if probes is not None or dumps is not None:
            raise EngineRefused("the program engine keeps no workspace or attention probe: use --engine index")
        sp, p = self.sp, self.prog
        q, u, suf, st_node, st_s, st_d, vs_out, vbits = st.scratch
        resume = 0
        while n > 0:
            done, status = SK.run_steps(sp.instr, sp.ptr, sp.col, sp.w, sp.bias, sp.relu, sp.dst, sp.a_regs,
                                        st.a_state, st.a_pat, sp.ins_index, sp.ins_key, sp.ins_val, sp.o_reg, sp.tap_reg,
                                        p.ameta, p.fdata, p.idata, st.imeta, st.istate, *st.pools, st.regs, st.obuf,
                                        vs_out, vbits, st.fpath, st.inc, self.pgeo, p.pos_cols, p.pos_table, np.uint64(first),
                                        np.uint64(n), np.uint64(resume), taps, st.err_i, st.err_f)
            if status == SK.NEED_QUERY:  # the branch-and-bound lookup, then the rest of that step
                step, t = int(st.err_i[1]), int(st.err_i[2])
                status = SK.slow_attend(sp.instr[t, 1], sp.a_regs, float(sp.scale), p.ameta, p.fdata, p.idata,
                                        st.imeta, st.istate, *st.pools, st.regs, u, suf, st_node, st_s, st_d, vs_out,
                                        st.inc, st.err_i, st.err_f)
                if status:
                    st.err_i[1] = step
                    self._refuse(status, st)
                n -= step - first
                first, resume = step, t + 1
                continue
            if status:
                self._refuse(status, st)
            break

    def run(self, tokens: np.ndarray, *, steps: int | None = None, progress=None, stop=None,
            probe: bool = False, dump: bool = False) -> Run:
        if probe or dump:
            raise EngineRefused("the program engine keeps no workspace or attention probe: use --engine index")
        return super().run(tokens, steps=steps, progress=progress, stop=stop)

    def _refuse(self, status: int, st) -> None:
        code, step, where, col = (int(v) for v in st.err_i)
        value = float(st.err_f[0])
        names = self.sp.attn_names
        if code == SK.ERR_TIE:
            what = f"attention {names[where]!r}'s top items tie the null key (the output would mix both)"
        elif code == SK.ERR_MULTI:
            what = f"attention {names[where]!r} reads the values of {int(value)} tied items (an average)"
        elif code == SK.ERR_INPUT:
            what = f"input coordinate {col} of the step is {value!r}, not 0 or 1"
        elif code == ERR_HISTORY:
            what = f"a history coordinate (key bit {col}) is {value!r}, not 0 or 1"
        elif code == ERR_TAP:
            what = f"tap column {col} is {value!r}, not 0 or 1 (or θ_cls's -1)"
        else:
            assert code == ERR_FULL, code
            what = "an index is full (more items than decoder steps)"
        raise EngineRefused(f"the program engine computes this network exactly only while every input, key and tap "
                            f"is 0 or 1, no item ties the null key and one item is read where values are read "
                            f"(docs/transformer.md, \"The program engine\"); at decoder step {step} {what}: run this "
                            f"model with {FALLBACK}")


__all__ = ["IndexEngine", "ProgramEngine"]
