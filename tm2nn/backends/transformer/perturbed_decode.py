"""The transformer under a dense parameter perturbation, and attacks on its all-layer margin.

:class:`PerturbedTransformer` evaluates a transformer NetIR (``Embed`` then ``Decode`` with
a prologue and a body of ``Affine``, ``ReLU``, ``Attention``, ``Slice``, ``Concat``) densely
in float64, with one parameter perturbation per batch row: row ``r`` runs the net with
``θ + δ_r``, the same ``δ_r`` at every layer of every decoder step (the weights are shared
across steps, Wei, Chen & Ma Definition D.5).  The emitted torch module cannot do this:
it computes attention values on ``value_rows`` only and keeps histories of the key/value
columns only, which a dense ``δ`` breaks.  With ``δ = 0`` the evaluator gives the emitted
float64 module's taps bit for bit (tests/backends/transformer/test_transformer_margin.py): the unperturbed
affine maps are the emitted module's own, and the hard-max averages as the emitter does.

Hard-max is the paper's (ties averaged, null key/value), with exact equality as the
emitter uses: under a perturbation exact ties break.

Blocks (the unit of the per-layer margin, docs/transformer_margin.md): every ``Affine``
(W, b); every ``Attention`` (Wq, bq, Wk, bk, Wv, bv, K_0, V_0 together); the encoder table
E; the decoder's initial input h_0.  The binary positional codes β are not parameters.

:func:`attack` searches for small flipping perturbations (upper bounds on the margin):
dense random directions with bisection on ε, and a gradient attack on rank-one matrix
directions whose hard-max forward pass is exact and whose backward pass uses a softmax
surrogate (straight-through).  Every reported ε is run again with the exact evaluator
and kept only if it flips.
"""

from __future__ import annotations

import math
import time

import numpy as np

from tm2nn import threads
from tm2nn.backends.transformer.runtime import encode
from tm2nn.devices import torch_device
from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory, memory_limit
from tm2nn.nets import Affine, Attention, Concat, Decode, Embed, ReLU, Slice
from tm2nn.nets.ops import readout_split

#: the decoded fields of a tap group (:mod:`tm2nn.backends.transformer.decoding`)
FIELDS = {"st": "state", "sym1": "symbol read", "pos2": "head", "sym2": "symbol written",
          "cls": "θ_cls readout"}
#: tap groups read as bits / one-hots (a coordinate > 1/2 is on); any other column (θ_cls,
#: values −1, 0, 1) is read as the nearest integer
THRESHOLD_GROUPS = ("st", "sym1", "pos2", "sym2")
#: bisection steps of the random attack, on log ε over [1e-30, 1]·eps_max (0.4 % apart)
RANDOM_BISECTIONS = 14
#: the matrices a rank-one direction may move (the encoder table E moves densely)
MATRICES = ("weight", "wq", "wk", "wv")
ATTN_TENSORS = ("wq", "bq", "wk", "bk", "wv", "bv", "null_key", "null_value")


class UnsupportedNet(Tm2nnError, ValueError):
    """A net this evaluator does not know (not the transformer backend's form)."""


def transformer_parts(net) -> tuple[Embed, Decode]:
    """The ``Embed`` and ``Decode`` ops of a transformer net (refuses any other form)."""
    ops = readout_split(net)[0]  # its readouts (computed from the taps) aside
    kinds = [type(op) for op in ops]
    if kinds != [Embed, Decode] or ops[1].inputs != (ops[0].name,):
        raise UnsupportedNet(f"net {net.name!r}: expected an Embed followed by a Decode (the transformer "
                             f"backend's form), got {[op.kind for op in ops]}")
    return ops[0], ops[1]


def net_of(compiled_or_net):
    """The NetIR of a compiled model (or a net as given); refuses a model whose weights a
    loaded state dict replaced (they are not in its net)."""
    if not hasattr(compiled_or_net, "net"):
        return compiled_or_net
    if getattr(compiled_or_net, "state_dict", None) is not None:
        raise UnsupportedNet("this model's weights were replaced by a loaded state dict, which its net does not "
                             "hold: analyse the net with those weights (module.to_net()) instead")
    return compiled_or_net.net


def _dense(t) -> np.ndarray:
    return t.dense() if hasattr(t, "dense") and not isinstance(t, np.ndarray) else np.asarray(t, dtype=np.float64)


def blocks_of(net) -> dict[str, dict[str, np.ndarray]]:
    """``{block: {tensor: dense float64 array}}`` for every parameter block of a
    transformer net, in evaluation order: ``encoder`` (table), ``init`` (h_0), then the
    prologue's and the body's ops as ``prologue/<op>`` and ``body/<op>``."""
    embed, dec = transformer_parts(net)
    out = {"encoder": {"table": np.asarray(embed.table, dtype=np.float64)},
           "init": {"init": np.asarray(dec.init, dtype=np.float64)}}
    for part, sub in (("prologue", dec.prologue), ("body", dec.body)):
        for op in sub.nodes:
            if isinstance(op, Affine):
                out[f"{part}/{op.name}"] = {"weight": _dense(op.weight), "bias": np.asarray(op.bias)}
            elif isinstance(op, Attention):
                out[f"{part}/{op.name}"] = {k: _dense(getattr(op, k)) for k in ATTN_TENSORS}
            elif not isinstance(op, (ReLU, Slice, Concat)):
                raise UnsupportedNet(f"{part} op {op.name!r}: the perturbed evaluator does not know {op.kind} ops")
    return out


class PerturbedTransformer:
    """A dense float64 evaluator of a transformer net with a per-row perturbation.

    ``run(tokens, delta)``: ``tokens`` int64 ``[R, L]`` (:func:`.runtime.encode`), ``delta``
    ``{block: {tensor: [R, *shape]}}`` (missing blocks or tensors: unperturbed) ->
    taps ``[R, T+1, tap_w]``.  Every tensor lives on ``device`` (default: the CPU); the
    tokens are moved there, and random directions are drawn on the CPU and moved (a seed
    gives the same directions on every device)."""

    def __init__(self, compiled_or_net, dtype=None, device=None):
        import torch

        self.torch = torch
        self.dtype = dtype or torch.float64
        self.device = torch_device(device)
        net = net_of(compiled_or_net)
        self.net = net
        self.embed, self.dec = transformer_parts(net)
        self.np_blocks = blocks_of(net)
        self.params = {b: {k: torch.as_tensor(v, dtype=self.dtype, device=self.device) for k, v in ts.items()}
                       for b, ts in self.np_blocks.items()}
        self.shapes = {b: {k: tuple(v.shape) for k, v in ts.items()} for b, ts in self.np_blocks.items()}
        self.steps = int(self.dec.steps)
        self.ties: list | None = None  # a list: record (attention, step, winners) of every hard-max tie
        self.enc_pos = torch.as_tensor(np.asarray(self.embed.positions, dtype=np.float64), dtype=self.dtype,
                                       device=self.device)
        self.dec_pos = torch.as_tensor(np.asarray(self.dec.positions, dtype=np.float64), dtype=self.dtype,
                                       device=self.device)
        body = self.dec.body
        self.tap_space = body.spaces[body.outputs[1]]
        # The unperturbed affine maps are the emitted module's own (same arithmetic, to the
        # last bit); the perturbation terms are added to them.
        from tm2nn.emit.torch_emit import to_torch  # loads torch (as this method does)

        emitted = to_torch(net, self.dtype, self.device).op(self.dec.name)
        self.index, self.affine = {}, {}
        for part, sub, mod in (("prologue", self.dec.prologue, emitted.prologue), ("body", body, emitted.body)):
            for op in sub.nodes:
                if isinstance(op, Slice):
                    self.index[(part, op.name)] = torch.as_tensor(op.indices, dtype=torch.int64, device=self.device)
                elif isinstance(op, Affine):
                    self.affine[(part, op.name)] = mod.op(op.name).fm

    def n_params(self) -> int:
        """Entries of every block (dense): the size of one perturbation."""
        return sum(int(np.prod(s)) for ts in self.shapes.values() for s in ts.values())

    # -- evaluation ----------------------------------------------------------------------------
    def run(self, tokens, delta: dict | None = None, *, surrogate_beta: float | None = None,
            record: dict | None = None, rounding=None):
        """Taps ``[R, T+1, tap_w]``.  A matrix's ``δ`` is ``[R, n_out, n_in]``, or a pair
        ``(a [R, n_out], b [R, n_in])`` for the rank-one ``a bᵀ``.  ``surrogate_beta``:
        hard-max forward values, softmax (inverse temperature ``beta``) gradients through
        the attention weights.  ``record``: filled with every value,
        ``{(step, part, name): [R, n]}``.  ``rounding``: a function applied to every value
        an op produces (and, inside an attention, to Q, K, the scores and the mixed value):
        a finite-precision forward pass (:mod:`.precision`)."""
        torch = self.torch
        tokens = (tokens.to(self.device, torch.int64) if isinstance(tokens, torch.Tensor) else
                  torch.as_tensor(np.asarray(tokens), dtype=torch.int64, device=self.device))
        delta = delta or {}
        rnd = rounding or (lambda t: t)
        ctx = {"delta": delta, "beta": surrogate_beta, "record": record, "round": rnd}
        mem = self._encode(tokens, delta.get("encoder"))
        init = self.params["init"]["init"]
        r = tokens.shape[0]
        x = init.expand(r, -1)
        d = delta.get("init")
        if d is not None and "init" in d:
            x = x + d["init"]
        hist: dict = {}
        o, tap = self._net("prologue", self.dec.prologue, x, mem, hist, 0, ctx)
        taps = [tap]
        for i in range(1, self.steps + 1):
            o, tap = self._net("body", self.dec.body, rnd(o + self.dec_pos[i - 1]), mem, hist, i, ctx)
            taps.append(tap)
        return torch.stack(taps, 1)

    def _encode(self, tokens, d):
        """``Enc_k(x) = (E + ΔE)[:, x_k] + β(k)``: ``[R, L, w]``."""
        torch = self.torch
        tokens = tokens[:, : self.embed.max_len]
        table = self.params["encoder"]["table"]                           # [n_tok, w]
        if d is not None and "table" in d:
            rows = (table + d["table"])                                   # [R, n_tok, w]
            e = torch.gather(rows, 1, tokens[:, :, None].expand(-1, -1, rows.shape[2]))
        else:
            e = table[tokens]
        return e + self.enc_pos[: tokens.shape[1]][None]  # exact: E and β hold 0/1

    def _net(self, part, net, x, mem, hist, step, ctx):
        torch = self.torch
        vals = {net.inputs[0].name: x, net.inputs[1].name: mem}
        rec = ctx["record"]
        for op in net.nodes:
            key = f"{part}/{op.name}"
            if isinstance(op, Affine):
                d = ctx["delta"].get(key)
                h = vals[op.inputs[0]]
                y = self.affine[(part, op.name)](h.t()).t()                  # W h + b
                if d is not None:
                    if "weight" in d:
                        y = y + _mv(d["weight"], h)
                    if "bias" in d:
                        y = y + d["bias"]
            elif isinstance(op, ReLU):
                y = torch.clamp_min(vals[op.inputs[0]], 0.0)
            elif isinstance(op, Slice):
                y = vals[op.inputs[0]].index_select(1, self.index[(part, op.name)])
            elif isinstance(op, Concat):
                y = torch.cat([vals[i] for i in op.inputs], 1)
            elif isinstance(op, Attention):
                y = self._attention(op, key, vals, hist, step, ctx)
            else:  # pragma: no cover - blocks_of refused it
                raise UnsupportedNet(op.kind)
            y = ctx["round"](y)
            vals[op.name] = y
            if rec is not None:
                rec[(step, part, op.name)] = y.detach()
        return vals[net.outputs[0]], vals[net.outputs[1]]

    def _attention(self, op: Attention, key: str, vals, hist, step, ctx):
        """``h + Σ_j a_j V(m_j) + a_0 V_0`` with ``a`` the hard-max (ties averaged, null in
        slot 0) or softmax weights of ``τ_j = Q(h)·K(m_j)``, ``τ_0 = Q(h)·K_0``."""
        torch = self.torch
        p, d = self.params[key], ctx["delta"].get(key) or {}
        h = vals[op.inputs[0]]

        def get(name):
            return p[name], d.get(name)

        if op.is_self:
            src = op.source
            at, m = hist.get(src, (0, None))
            if at < step:  # the history of src at steps 1..i, grown once per step
                new = vals[src][:, None, :]
                m = new if m is None else torch.cat([m, new], 1)              # [R, t, w]
                hist[src] = (step, m)
        else:
            m = vals[op.inputs[1]]                                            # [R, L, w]
        wq, dwq = get("wq")
        bq, dbq = get("bq")
        rnd = ctx["round"]
        q = rnd(h @ wq.T + bq)
        if dwq is not None:
            q = q + _mv(dwq, h)
        if dbq is not None:
            q = q + dbq
        wk, dwk = get("wk")
        bk, dbk = get("bk")
        k = rnd(m @ wk.T + bk)                                                # [R, t, dk]
        if isinstance(dwk, tuple):
            k = k + torch.bmm(m, dwk[1][:, :, None]) * dwk[0][:, None, :]
        elif dwk is not None:
            k = k + torch.einsum("rtn,rkn->rtk", m, dwk)
        if dbk is not None:
            k = k + dbk[:, None, :]
        k0, dk0 = get("null_key")
        k0 = k0 if dk0 is None else k0 + dk0                                  # [dk] or [R, dk]
        s = rnd(torch.bmm(k, q[:, :, None])[:, :, 0])                         # [R, t]
        s0 = rnd((q * k0).sum(-1))                                            # [R]
        if op.mode == "hardmax":
            top = torch.maximum(s.amax(1), s0)
            win = (s == top[:, None]).to(s.dtype)
            w0 = (s0 == top).to(s.dtype)
            n_items = win.sum(1)
            inv = 1.0 / (n_items + w0)
            if self.ties is not None:  # a diagnostic (bench/learning_precision.py --ties)
                self.ties += [(key, step, int(c)) for c in (n_items + w0).tolist() if c > 1]
            # as the emitter: weights win·(1/n); the items' total share Σ_j 1/n is 1 exactly
            # unless the null ties with them (n·(1/n) is not always 1 in floating point)
            share = torch.where(w0 > 0, n_items * inv, (n_items > 0).to(s.dtype))[:, None]
            a, a0 = win * inv[:, None], w0 * inv
            beta = ctx["beta"]
            if beta is not None and torch.is_grad_enabled():  # straight-through surrogate
                soft = torch.softmax(beta * torch.cat([s0[:, None], s], 1), 1)
                soft = soft - soft.detach()  # 0 in the forward pass, softmax's gradient backward
                a0, a, share = a0 + soft[:, 0], a + soft[:, 1:], share + soft[:, 1:].sum(1, keepdim=True)
        else:
            soft = torch.softmax(op.beta * torch.cat([s0[:, None], s], 1), 1)
            a0, a = soft[:, 0], soft[:, 1:]
            share = a.sum(1, keepdim=True)
        mix = rnd(torch.bmm(a[:, None, :], m)[:, 0])                          # Σ_j a_j m_j
        wv, dwv = get("wv")
        bv, dbv = get("bv")
        v0, dv0 = get("null_value")
        out = h + mix @ wv.T + share * bv + a0[:, None] * v0
        if dwv is not None:
            out = out + _mv(dwv, mix)
        if dbv is not None:
            out = out + share * dbv
        if dv0 is not None:
            out = out + a0[:, None] * dv0
        return out

    # -- perturbations -------------------------------------------------------------------------
    def random_directions(self, rows: int, gen, rank_one: bool = False) -> dict:
        """One Gaussian direction per row, scaled to ‖δ_B‖₂ = 1 in every block (dense, or
        with every matrix rank-one ``a bᵀ``)."""
        torch = self.torch

        def draw(k, s):
            if rank_one and k in MATRICES:
                return (torch.randn((rows, s[0]), generator=gen, dtype=self.dtype).to(self.device),
                        torch.randn((rows, s[1]), generator=gen, dtype=self.dtype).to(self.device))
            return torch.randn((rows, *s), generator=gen, dtype=self.dtype).to(self.device)
        return self.normalise({b: {k: draw(k, s) for k, s in ts.items()} for b, ts in self.shapes.items()},
                              project=False)

    def normalise(self, dirs: dict, project: bool = True) -> dict:
        """Scale every block of every row to norm 1 (``project``: into the unit ball).  A
        rank-one ``(a, b)`` has ``‖a bᵀ‖_F = ‖a‖ ‖b‖``: b is made a unit vector first."""
        torch = self.torch
        out = {}
        for blk, ts in dirs.items():
            ts = {k: (t[0] * t[1].norm(dim=1, keepdim=True), t[1] / t[1].norm(dim=1, keepdim=True).clamp_min(1e-300))
                  if isinstance(t, tuple) else t for k, t in ts.items()}
            sq = sum((_lead(t).reshape(_lead(t).shape[0], -1) ** 2).sum(1) for t in ts.values())
            norm = torch.sqrt(sq).clamp_min(1e-300)
            f = (1.0 / norm).clamp_max(1.0) if project else 1.0 / norm
            out[blk] = {k: _scale(t, f) for k, t in ts.items()}
        return out

    @staticmethod
    def scaled(dirs: dict, eps) -> dict:
        """``ε_r · D_r`` per row (``eps``: ``[R]``)."""
        return {b: {k: _scale(t, eps) for k, t in ts.items()} for b, ts in dirs.items()}

    # -- decoded fields ------------------------------------------------------------------------
    def field_mask(self):
        """``[T+1, tap_w]`` bool: the tap coordinates that are decoded.  Everything but
        the written symbol at step 0 (the prologue writes nothing; the decoder ignores it)."""
        torch = self.torch
        mask = torch.ones((self.steps + 1, len(self.tap_space)), dtype=torch.bool, device=self.device)
        for c in self.tap_space.groups.get("sym2", []):
            mask[0, c] = False
        return mask

    def threshold_columns(self):
        """``[tap_w]`` bool: the columns read by "> 1/2" (the others: nearest integer)."""
        torch = self.torch
        return torch.tensor([lab.split(":", 1)[0] in THRESHOLD_GROUPS for lab in self.tap_space.labels],
                            dtype=torch.bool, device=self.device)

    def describe(self, step: int, coord: int) -> dict:
        lab = self.tap_space.labels[coord]
        group = lab.split(":", 1)[0]
        return {"step": int(step), "field": FIELDS.get(group, group), "coordinate": lab}


#: most bisection steps of the random attack taken per evaluator run (2^depth − 1 ε per row)
SPECULATION_DEPTH = 2


def _speculation_depth(P: PerturbedTransformer, rows: int) -> int:
    """Bisection steps per run: :data:`SPECULATION_DEPTH`, fewer where the batch of
    ``2^depth`` scaled perturbations would not fit in a quarter of the memory limit."""
    per = rows * P.n_params() * 8
    depth = SPECULATION_DEPTH
    while depth > 1 and (2 ** depth + 2) * per > memory_limit() // 4:
        depth -= 1
    return depth


def _scaled_stack(dirs: dict, eps: list) -> dict:
    """``[ε_0 · D; ε_1 · D; …]``: :meth:`PerturbedTransformer.scaled` for each ``ε_s``
    (``[R]``), stacked along the rows (the same products, row by row)."""
    import torch

    e = torch.cat(eps, 0)

    def one(t):
        if isinstance(t, tuple):
            return (torch.cat([t[0]] * len(eps), 0) * e[:, None], torch.cat([t[1]] * len(eps), 0))
        return (t[None] * e.view(len(eps), -1, *([1] * (t.dim() - 1)))).flatten(0, 1)

    return {b: {k: one(t) for k, t in ts.items()} for b, ts in dirs.items()}


def _lead(t):
    """The part of a direction that carries its norm (a rank-one pair's ``a``)."""
    return t[0] if isinstance(t, tuple) else t


def _scale(t, f):
    """``f_r · t_r`` per row (a rank-one pair: its ``a``)."""
    if isinstance(t, tuple):
        return (t[0] * f[:, None], t[1])
    return t * f.view(-1, *([1] * (t.dim() - 1)))


def _mv(d, h):
    """``ΔW h`` per row: ``d`` dense ``[R, o, i]`` or rank-one ``(a, b)``."""
    if isinstance(d, tuple):
        return d[0] * (d[1] * h).sum(1, keepdim=True)
    return (d @ h[:, :, None])[:, :, 0]


def _map(fn, *dss) -> dict:
    """Apply ``fn`` tensor by tensor across directions of one structure."""
    out: dict = {}
    for b, ts in dss[0].items():
        out[b] = {}
        for k, t in ts.items():
            if isinstance(t, tuple):
                out[b][k] = tuple(fn(*(d[b][k][i] for d in dss)) for i in range(len(t)))
            else:
                out[b][k] = fn(*(d[b][k] for d in dss))
    return out


def _flat(ds: dict) -> list:
    return [x for ts in ds.values() for t in ts.values() for x in (t if isinstance(t, tuple) else (t,))]


def _or_zeros(g, t):
    return g if g is not None else t.new_zeros(t.shape)


def _unit_blocks(g: dict) -> dict:
    """Scale every block of every row to norm 1 over all its tensors (a gradient step)."""
    out = {}
    for b, ts in g.items():
        parts = [x for t in ts.values() for x in (t if isinstance(t, tuple) else (t,))]
        norm = sum((x.reshape(x.shape[0], -1) ** 2).sum(1) for x in parts).sqrt().clamp_min(1e-300)
        out[b] = _map(lambda x, norm=norm: x / norm.view(-1, *([1] * (x.dim() - 1))), {b: ts})[b]
    return out


def _first_wrong(wrong) -> tuple[int, int]:
    """(step, coordinate) of the first wrong decoded coordinate of one row ``[T+1, w]``."""
    idx = np.argwhere(np.asarray(wrong))
    return int(idx[0, 0]), int(idx[0, 1])


def attack(compiled, texts: list[str], eps_max: float = 1.0, method: str = "random", trials: int = 8,
           steps: int = 60, seed: int = 0, eps0: float | None = None, surrogate_beta: float = 4.0,
           target: str = "fields", device=None, deadline: float | None = None) -> dict:
    """The smallest ε found such that moving every parameter block by ≤ ε (ℓ2, dense, one
    θ + δ shared by all decoder steps) changes a decoded field (state, head, symbol read,
    symbol written) of some step of some input in ``texts``.  An upper bound on the
    per-layer all-layer margin: every reported ε was seen to flip with the exact
    evaluator (``inf`` if nothing flipped up to ``eps_max``).

    * ``method="random"``: ``trials`` Gaussian directions per input (per block norm 1),
      bisection on ε along each;
    * ``method="gradient"``: ``trials`` random starts per input, then ``steps`` projected
      normalised-gradient steps on the direction, maximising the wrong-side amount of
      the worst decoded coordinate over all steps (a soft-min), with ε shrunk after a
      step that flips and grown after one that does not (as :mod:`tm2nn.verify.margin_toolkit`).
      Every matrix moves by a rank-one ``a bᵀ`` (``‖a bᵀ‖_F = ‖a‖‖b‖``; a single
      input's cheapest change of one layer is rank-one, and the backward pass then costs
      O(n_out + n_in) per matrix instead of O(n_out n_in)); biases, null key/value, E and
      h_0 move densely.  The forward pass is the exact hard-max; gradients through the
      attention weights come from a softmax surrogate with inverse temperature
      ``surrogate_beta`` (straight-through: its forward contribution is exactly 0).

    ``target="cls"`` attacks the classification instead (a model with the θ_cls readout):
    a flip is the last step's ``θ_clsᵀ o_T'`` changing sign, ``(y − 1/2)·F(x, θ + δ) ≤ 0`` of
    eq. (2.1) with F = θ_clsᵀ o_T' ∈ {−1, +1}: an upper bound on ρ of the binary classifier.

    ``device``: where the evaluator's tensors live (default: the CPU).

    The inputs are attacked in chunks that fit in memory (a quarter of the limit, at least
    one input), the first of one input.  With ``deadline`` (a ``time.perf_counter()``
    value) no chunk starts after it and a running one stops its bisections or gradient
    steps there (every reported ε is still confirmed); ``inputs_done`` of ``inputs``,
    ``iterations_done`` of ``iterations`` say what it cut.

    Returns ``eps``, the ``input``, the decoder ``step``, the ``field`` and tap
    ``coordinate`` that flipped, ``per_input`` (inf for an input not attacked) and
    ``seconds``."""
    import torch

    threads.use_torch()  # small tensors (tm2nn.threads)
    texts = list(texts)
    t0 = time.perf_counter()
    with torch.no_grad() if method == "random" else torch.enable_grad():
        P = PerturbedTransformer(compiled, device=device)
        check_memory(attack_memory(P, trials, method),  # one input: the least a chunk holds
                     f"the {method} attack on one input x {trials:,} trials ({P.n_params():,} "
                     "parameters per perturbation)", ("trials",))
        fit = max(1, int(memory_limit() // 4 // max(1, attack_memory(P, trials, method))))
        parts, done, size = [], 0, 1
        while done < len(texts):
            if deadline is not None and parts and time.perf_counter() >= deadline:
                break  # the first chunk always runs (it stops its own iterations there)
            chunk = texts[done:done + min(size, fit)]
            t1 = time.perf_counter()
            parts.append(_attack(compiled, chunk, float(eps_max), method, int(trials), int(steps), int(seed) + done,
                                 eps0, float(surrogate_beta), target, device, P=P, deadline=deadline))
            done += len(chunk)
            rate = len(chunk) / max(time.perf_counter() - t1, 1e-6)
            left = math.inf if deadline is None else deadline - time.perf_counter()
            size = int(max(1, min(size * 4, rate * min(left, 30.0))))
    out = min(parts, key=lambda r: r["eps"])
    out = dict(out, per_input=np.concatenate([r["per_input"] for r in parts]
                                            + [np.full(len(texts) - done, math.inf)]),
               inputs=len(texts), inputs_done=done, trials=trials,
               iterations=parts[0]["iterations"], iterations_done=min(r["iterations_done"] for r in parts),
               rows=sum(r["rows"] for r in parts), seconds=time.perf_counter() - t0)
    return out


def attack_memory(P: PerturbedTransformer, rows: int, method: str) -> int:
    """Bytes an attack plans to hold, float64 per row: random, dense directions and one
    perturbation; gradient, rank-one directions, their gradients and best copies, and
    the autograd graph (every value of every decoder step)."""
    if method == "random":
        return rows * P.n_params() * 8 * 3
    factors = sum(sum(s) if k in MATRICES else int(np.prod(s)) for ts in P.shapes.values() for k, s in ts.items())
    body = P.dec.body
    values = sum(len(body.spaces[op.name]) for op in body.nodes)
    return rows * 8 * (6 * factors + 4 * (P.steps + 1) * values * max(1, P.steps // 4))


def _attack(compiled, texts, eps_max, method, trials, steps, seed, eps0, beta, target="fields", device=None,
            P=None, deadline=None) -> dict:
    import torch

    if method not in ("random", "gradient"):
        raise ValueError(f"unknown attack method {method!r} (random, gradient)")
    if target not in ("fields", "cls"):
        raise ValueError(f"unknown attack target {target!r} (fields, cls)")
    cls = compiled.output_encoding.get("cls_column")
    if target == "cls" and cls is None:
        raise UnsupportedNet("target='cls' attacks the θ_cls readout: compile with cls_readout=True")
    t0 = time.perf_counter()
    P = P if P is not None else PerturbedTransformer(compiled, device=device)
    rows = len(texts) * trials

    def late() -> bool:
        return deadline is not None and time.perf_counter() >= deadline
    check_memory(attack_memory(P, rows, method),
                 f"the {method} attack on {len(texts):,} inputs x {trials:,} trials ({P.n_params():,} "
                 "parameters per perturbation)", ("samples", "trials"))
    tokens = torch.as_tensor(encode(compiled, texts)).repeat_interleave(trials, 0).to(P.device)
    with torch.no_grad():
        ref = P.run(tokens[::trials]).repeat_interleave(trials, 0)        # [R, T+1, w]
    thr = P.threshold_columns()
    want = ref > 0.5
    sign = want.to(P.dtype) * 2 - 1
    mask = P.field_mask()
    if target == "cls":  # only F(x) = θ_clsᵀ o_T', read by its sign
        mask = torch.zeros_like(mask)
        mask[-1, int(cls)] = True

    def wrong(taps):
        """Decoded differently: a bit or one-hot coordinate on the other side of 1/2, or
        another column (θ_cls) half a unit or more from its exact integer value; for
        ``target="cls"``, θ_clsᵀ o_T' on the other side of 0."""
        if target == "cls":
            return (taps * ref.sign() <= 0) & mask
        return torch.where(thr, (taps > 0.5) != want, (taps - ref).abs() >= 0.5) & mask

    def right_side(taps):  # > 0: decoded as in the exact run (the gradient attack's objective)
        if target == "cls":
            return taps * ref.sign()
        return torch.where(thr, sign * (taps - 0.5), 0.5 - (taps - ref).abs())

    gen = torch.Generator().manual_seed(seed)
    best = torch.full((rows,), math.inf, dtype=P.dtype, device=P.device)
    if method == "random":
        dirs = best_dirs = P.random_directions(rows, gen)
        hi = torch.full((rows,), eps_max, dtype=P.dtype, device=P.device)
        lo = hi * 1e-30
        iterations = RANDOM_BISECTIONS
        depth = _speculation_depth(P, rows)
        # The bisection on log ε, ``depth`` of its steps per evaluator run: every ε the next
        # steps can try (the tree of midpoints, 2^depth − 1 per row, each computed as the
        # one-step-at-a-time loop computes it) is evaluated in one batch of rows, then the
        # steps are taken.  The rows are independent, so lo and hi end bit for bit as one
        # step per run leaves them; the first batch also carries ε = eps_max (ok_hi).
        ok_hi, done_it = None, 0
        while done_it < RANDOM_BISECTIONS and not late():  # late: hi still flips, a looser bound
            d = min(depth, RANDOM_BISECTIONS - done_it)
            tree = [(lo, hi)]
            for j in range(2 ** d - 1):  # node j's children: 2j+1 (it flipped), 2j+2 (it did not)
                a, b = tree[j]
                mid = torch.sqrt(a * b)
                tree[j] = (a, b, mid)
                if 2 * j + 1 < 2 ** d - 1:
                    tree += [(a, mid), (mid, b)]
            eps = [t[2] for t in tree] + ([hi] if ok_hi is None else [])
            taps = P.run(tokens.repeat(len(eps), 1), _scaled_stack(dirs, eps))
            flips = wrong(taps.view(len(eps), rows, *taps.shape[1:])).flatten(2).any(2)   # [len(eps), R]
            if ok_hi is None:
                ok_hi = flips[-1]
            node = torch.zeros(rows, dtype=torch.int64, device=P.device)
            mids = torch.stack([t[2] for t in tree])                        # [nodes, R]
            for _ in range(d):
                mid = mids.gather(0, node[None])[0]
                f = flips.gather(0, node[None])[0]
                hi = torch.where(f, mid, hi)
                lo = torch.where(f, lo, mid)
                node = 2 * node + torch.where(f, 1, 2)
            done_it += d
        if ok_hi is None:  # past the deadline before any run
            ok_hi = wrong(P.run(tokens, P.scaled(dirs, hi))).flatten(1).any(1)
        best = torch.where(ok_hi, hi, best)
    else:
        dirs = P.random_directions(rows, gen, rank_one=True)
        start = float(eps0) if eps0 and math.isfinite(eps0) else eps_max / 8
        eps = torch.full((rows,), min(start, eps_max), dtype=P.dtype, device=P.device)
        best_dirs = _map(lambda t: t.clone(), dirs)

        def keep_best(f):
            nonlocal best
            better = f & (eps < best)
            best = torch.where(better, eps, best)
            for dst, src in zip(_flat(best_dirs), _flat(dirs)):
                dst[better] = src[better]

        iterations, done_it = steps, 0
        for it in range(steps):
            if late():
                break
            done_it += 1
            gamma = 0.02 + 0.18 * 0.5 * (1 + math.cos(math.pi * it / max(steps, 1)))
            leaves = _map(lambda t: t.detach().requires_grad_(True), dirs)
            taps = P.run(tokens, P.scaled(leaves, eps), surrogate_beta=beta)
            margin = torch.where(mask, right_side(taps), torch.full_like(taps, 1e9)).flatten(1)
            with torch.no_grad():
                f = wrong(taps).flatten(1).any(1)
                keep_best(f)
            soft = 0.05 * torch.logsumexp(-margin / 0.05, 1)  # a soft max of the wrong-side amounts
            flat = _flat(leaves)
            grads = iter(torch.autograd.grad(soft.sum(), flat, allow_unused=True))
            with torch.no_grad():
                g = _map(lambda t, grads=grads: _or_zeros(next(grads), t), leaves)
                g = _unit_blocks(g)
                dirs = P.normalise(_map(lambda t, u: t + 0.2 * u, leaves, g), project=True)
                eps = torch.where(f, eps * (1 - gamma), eps * (1 + gamma)).clamp(max=eps_max)
        with torch.no_grad():  # the final iterate
            keep_best(wrong(P.run(tokens, P.scaled(dirs, eps))).flatten(1).any(1))
    # Confirm every reported ε with the exact evaluator, and find where it flips.
    with torch.no_grad():
        fin = torch.isfinite(best)
        e = torch.where(fin, best, torch.zeros_like(best))
        w = wrong(P.run(tokens, P.scaled(best_dirs, e)))
        seen = w.flatten(1).any(1) & fin
        best = torch.where(seen, best, torch.full_like(best, math.inf))
    per_input = best.view(len(texts), trials).min(1).values
    out = {"method": method, "eps": math.inf, "input": None, "step": None, "field": None, "coordinate": None,
           "per_input": per_input.cpu().numpy(), "trials": trials, "rows": rows,
           "iterations": iterations, "iterations_done": done_it}
    if torch.isfinite(best).any():
        r = int(torch.argmin(best))
        step, coord = _first_wrong(w[r].cpu().numpy())
        out.update(eps=float(best[r]), input=texts[r // trials], **P.describe(step, coord))
    out["seconds"] = time.perf_counter() - t0
    return out
