"""The RCNN filter of Goel et al. (B.2): the numpy reference against the interpreter, the
reachability analysis against real runs, the 5-layer network against the reference (values
in float64 and float32, Jacobians by torch autograd), Lemmas 3 and 4, f̄_head, and the
sizes against the paper's bounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from tests.strategies import machines, sign_grid_machines, tape_inputs
from tm2nn.backends.rcnn.bounds import (
    filter_size,
    paper_bounds,
    sample_machine,
    size_report,
    width_formula,
)
from tm2nn.backends.rcnn.encoding import (
    cell_code,
    from_value,
    grids_from_configs,
    pack,
    to_value,
    unpack,
)
from tm2nn.backends.rcnn.filter_net import K_SHIFT, build_filter, bump_grid
from tm2nn.backends.rcnn.filter_spec import (
    P,
    f_conv,
    f_msg_cases,
    grid_patches,
    jacobian,
    machine_table,
    patch_values,
    run_filter,
)
from tm2nn.backends.rcnn.head import build_head, f_head, f_head_slope
from tm2nn.backends.rcnn.reachable import (
    SETTINGS,
    cell_classes,
    conjunctions,
    domain_patches,
    in_domain,
    reachable_values,
    sample_patches,
)
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.ir import GridMachine, Machine, Rule
from tm2nn.passes.rcnn_form import to_rcnn_form
from tm2nn.syntax import load

SIGNS = ("_", "-", "+")


def seeded_machine(s: int, seed: int) -> GridMachine:
    """A random grid machine over _ - + with exactly ``s`` states (the last one halting
    when ``s > 1``), a rule for most pairs, every move."""
    rng = np.random.default_rng(seed)
    states = tuple(f"q{i}" for i in range(s))
    halting = {states[-1]: "accept"} if s > 1 else {}
    rules = []
    for q in states:
        if q in halting:
            continue
        for a in SIGNS:
            if rng.random() < 0.9:
                rules.append(Rule(q, a, SIGNS[rng.integers(3)], "UDLRS"[rng.integers(5)],
                                  states[rng.integers(s)]))
    return GridMachine(f"seeded{s}", SIGNS, "_", states, states[0], halting, tuple(rules))


def exact(table, patches) -> np.ndarray:
    """The reference values as float64 (the nearest float to the exact value)."""
    return f_conv(patches, table).astype(np.float64) / float(3 ** (table.n_digits - 1))


def check_net_on(net, table, patches):
    """The network equals f̄_Conv2D on ``patches``: to ~1 ulp in float64; in float32 within
    a few ulp, far below the input tolerance, and the digits read back exactly."""
    D = table.n_digits
    want = f_conv(patches, table)
    wv = want.astype(np.float64) / float(3 ** (D - 1))
    y64 = net(patch_values(patches, D, np.float64), np.float64)
    assert np.abs(y64 - wv).max() <= 4e-16
    y32 = net(patch_values(patches, D, np.float32), np.float32)
    err32 = np.abs(y32.astype(np.float64) - wv).max()
    assert err32 <= 4 * 2.0 ** -23 and err32 < net.tolerance / 20
    assert (from_value(y32, D, tol=0.01) == want).all()
    return err32


# ---------------------------------------------------------------------------------------
# the reference f̄_Conv2D, case by case (B.2)
# ---------------------------------------------------------------------------------------
def small_table():
    # st: the no-op first step; a: on '+' write '-', move L into b; on '_' stay into b;
    # b: on '-' move U into a; on '_' write '+' and move R into a
    m = GridMachine("hand", SIGNS, "_", ("st", "a", "b"), "st", {}, (
        Rule("st", "_", "_", "S", "a"), Rule("st", "+", "+", "S", "a"), Rule("st", "-", "-", "S", "a"),
        Rule("a", "+", "-", "L", "b"), Rule("a", "_", "_", "S", "b"),
        Rule("b", "-", "-", "U", "a"), Rule("b", "_", "+", "R", "a"),
    ))
    return machine_table(m), cell_code(m)


def patch(center, u=P, d=P, l=P, r=P, corner=P):
    x = np.full((1, 3, 3), corner, dtype=np.int64)
    x[0, 1, 1], x[0, 0, 1], x[0, 2, 1], x[0, 1, 0], x[0, 1, 2] = center, u, d, l, r
    return x


def test_f_conv_by_hand():
    table, code = small_table()
    D = code.n_digits  # 3 states: 1 state digit, D = 5; a -> -1, b -> +1
    assert D == 5 and code.table.tolist() == [[0], [-1], [1]]
    third, ninth, t27, t81 = 27, 9, 3, 1  # 3^{D-2} … 3^{D-5}
    cmp_plus, cmp_blank = third + ninth, ninth
    head = lambda sym, st: sym * third + ninth + t27 + st * t81  # noqa: E731
    # f̄_msg case 1: a 0 under the padding (first row) or under a memorized cell -> −1/9
    assert f_conv(patch(0), table)[0] == -ninth
    assert f_conv(patch(0, u=third), table)[0] == -ninth
    assert f_conv(patch(0, u=0), table)[0] == 0  # a 0 under a 0: not yet
    # case 2: memory phase above or below
    assert f_conv(patch(-third, d=-ninth), table)[0] == -ninth
    assert f_conv(patch(0, u=-ninth), table)[0] == -ninth
    # case 3: the bottom-right input cell (p below, a fresh working cell 1 on the right)
    assert f_conv(patch(third, r=3 ** 4, d=P, u=third), table)[0] == third + ninth + t27
    assert f_conv(patch(third, r=3 ** 4, d=third), table)[0] == third  # not the bottom row
    assert f_conv(patch(third, r=-third, d=P), table)[0] == third      # not next to W
    # case 4: a compute neighbour
    assert f_conv(patch(3 ** 4, l=cmp_blank), table)[0] == 3 ** 4 + ninth
    # memory phase: the identity
    assert f_conv(patch(-ninth, u=0, d=cmp_plus), table)[0] == -ninth
    # f̄_TM: the head in the centre; a on '+': write '-', move L -> head gone
    assert f_conv(patch(head(1, -1)), table)[0] == -third + ninth
    # a on '_': stay in b -> head kept, state b (+1)
    assert f_conv(patch(head(0, -1)), table)[0] == ninth + t27 + t81
    # head on the right moving left (a on '+' -> b): the centre takes b = γ(x_{0,1})[0]
    # (decision 2; the paper's γ(x_{-1,0}) would read the cell above)
    assert f_conv(patch(cmp_plus, r=head(1, -1), u=cmp_blank), table)[0] == cmp_plus + t27 + t81
    # head below moving up (b on '-' -> a): the centre gets a
    assert f_conv(patch(cmp_blank, d=head(-1, 1)), table)[0] == cmp_blank + t27 - t81
    # head on the left moving right (b on '_' -> a)
    assert f_conv(patch(cmp_plus, l=head(0, 1)), table)[0] == cmp_plus + t27 - t81
    # a head beside that does not come here: nothing
    assert f_conv(patch(cmp_plus, u=head(0, 1)), table)[0] == cmp_plus
    # a halting state / missing rule: stay, rewrite (decision 4): a fixed point
    assert f_conv(patch(head(-1, -1)), table)[0] == head(-1, -1)


def test_jacobian_by_hand():
    table, code = small_table()
    ninth, third = 9, 27
    pts = np.concatenate([patch(0), patch(0, u=third), patch(0, u=0), patch(-ninth),
                          patch(-ninth, u=-ninth, d=-ninth), patch(third, d=-ninth),
                          patch(ninth + third), patch(3 ** 4)])
    J = jacobian(pts, code.n_digits)
    assert J.shape == (8, 9) and (J[:, [0, 1, 2, 3, 5, 6, 7, 8]] == 0).all()
    assert J[:, 4].tolist() == [1, 1, 0, 1, 1, 0, 0, 0]


def test_spec_refuses_bad_input():
    table, code = small_table()
    with pytest.raises(Tm2nnError, match="padding p"):
        f_conv(patch(P), table)
    with pytest.raises(Tm2nnError, match="int64"):
        f_conv(np.zeros((1, 3, 3), dtype=np.int32), table)
    with pytest.raises(Tm2nnError, match="outside"):
        f_conv(patch(3 ** 6), table)
    t4 = machine_table(seeded_machine(4, 0))  # 3 others in 2 state digits: "+ +" is no state
    D = t4.n_digits
    no_state = 3 ** (D - 3) + 3 ** (D - 4) + 3 ** (D - 5) + 3 ** (D - 6)
    with pytest.raises(Tm2nnError, match="name no state"):
        f_conv(patch(no_state), t4)
    with pytest.raises(Tm2nnError, match="grid machines"):
        machine_table(Machine("m", SIGNS, "_", ("a",), "a", {}, ()))


# ---------------------------------------------------------------------------------------
# the network on the whole analysed domain (small s) and on samples (bigger s)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [1, 2, 3, 4])
def test_net_equals_spec_on_all_reachable_patches(s):
    table = machine_table(seeded_machine(s, seed=s))
    net = build_filter(table)
    classes = cell_classes(table.code)
    for setting in SETTINGS:
        pts = domain_patches(table, setting, classes)
        assert len(pts) > 0 and in_domain(pts, table, setting, classes).all()
        check_net_on(net, table, pts)
    # corners are never read: random corners change nothing
    rng = np.random.default_rng(s)
    pts = domain_patches(table, "compute", classes)
    allv = classes.of("C", "H", "P")
    for i, j in ((0, 0), (0, 2), (2, 0), (2, 2)):
        pts[:, i, j] = rng.choice(allv, len(pts))
    check_net_on(net, table, pts)


def sample_domain(table, n, seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([sample_patches(table, setting, n, rng) for setting in SETTINGS])


@pytest.mark.parametrize("s", [8, 16])
def test_net_equals_spec_on_samples_bigger_s(s):
    table = machine_table(sample_machine(s))
    net = build_filter(table)
    check_net_on(net, table, sample_domain(table, 60_000, seed=s))


@settings(max_examples=15, deadline=None)
@given(sign_grid_machines(max_states=6), st.integers(0, 2 ** 31))
def test_net_equals_spec_random_machines(m, seed):
    table = machine_table(m)
    net = build_filter(table)
    check_net_on(net, table, sample_domain(table, 4000, seed))


def torch_jacobian(net, patches, D):
    x = torch.tensor(patch_values(patches, D), requires_grad=True)
    net.torch_module()(x).sum().backward()
    return x.grad.numpy()


@settings(max_examples=15, deadline=None)
@given(sign_grid_machines(max_states=6), st.integers(0, 2 ** 31))
def test_jacobian_by_autograd(m, seed):
    table = machine_table(m)
    net = build_filter(table)
    pts = sample_domain(table, 3000, seed)
    J = torch_jacobian(net, pts, table.n_digits)
    want = jacobian(pts, table.n_digits)
    assert (want[:, 4] == 1).any() and (want[:, 4] == 0).any()
    assert np.array_equal(J, want)


def test_jacobian_by_autograd_whole_memorize_domain():
    table = machine_table(sample_machine(16))
    net = build_filter(table)
    pts = domain_patches(table, "memorize")
    assert np.array_equal(torch_jacobian(net, pts, table.n_digits), jacobian(pts, table.n_digits))


def test_inputs_within_tolerance_give_the_same_output():
    """Every input within net.tolerance of its cell value lands on the same linear piece:
    the value is f̄ (plus slope × offset) and the Jacobian is unchanged."""
    table = machine_table(sample_machine(4))
    net = build_filter(table)
    D = table.n_digits
    pts = sample_domain(table, 5000, seed=3)
    x = patch_values(pts, D)
    rng = np.random.default_rng(0)
    dx = rng.uniform(-0.99, 0.99, x.shape) * net.tolerance
    J = jacobian(pts, D)
    assert np.abs(net(x + dx) - (exact(table, pts) + (J * dx).sum(1))).max() < 1e-12
    assert np.array_equal(torch_jacobian_at(net, x + dx), J)


def torch_jacobian_at(net, x):
    t = torch.tensor(x, requires_grad=True)
    net.torch_module()(t).sum().backward()
    return t.grad.numpy()


def test_outside_the_domain_the_decomposition_can_differ():
    """The additive decomposition relies on the analysed domain: the head-placing pattern
    next to a compute cell (never reachable) is case 3 for f̄ but case 3 + case 4 for the
    network; two heads side by side likewise."""
    table, code = small_table()
    net = build_filter(table)
    D = code.n_digits
    x = patch(27, r=3 ** 4, d=P, u=9)  # M centre, W right, p below, a compute cell above
    assert not in_domain(x, table).any()
    assert f_msg_cases(x, D)[0] == 3
    assert abs(net(patch_values(x, D))[0] - exact(table, x)[0]) > 0.1
    y = patch(9 + 27, u=9 + 3, d=-27 + 9 + 3 + 1)  # heads above and below, both moving here
    assert not in_domain(y, table).any()


# ---------------------------------------------------------------------------------------
# reachability: the analysed domain against the conjunctions, and against real runs
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [2, 5])
def test_conjunctions_cover_every_case_that_fires(s):
    """Each B.2 case that needs two cells fires on the analysed domain only for the
    (centre, neighbour) values :func:`conjunctions` lists."""
    table = machine_table(seeded_machine(s, seed=7))
    classes = cell_classes(table.code)
    D = table.n_digits
    conj = conjunctions(classes, table)
    pts = np.concatenate([domain_patches(table, st_, classes) for st_ in SETTINGS])
    c = pts[:, 1, 1]
    digits = unpack(np.where(c == P, 0, c), D)
    unknown = digits[:, 2] == 0
    cases = f_msg_cases(pts, D)
    pos = {"u": (0, 1), "d": (2, 1), "l": (1, 0), "r": (1, 2)}

    def covered(case, sel):
        ok = np.zeros(len(pts), dtype=bool)
        for cj in conj:
            if cj.case != case:
                continue
            hit = np.isin(c, cj.literals["c"])
            for n, vals in cj.literals.items():
                if n != "c":
                    hit &= np.isin(pts[:, pos[n][0], pos[n][1]], vals)
            ok |= hit
        return ok[sel].all() and sel.any()

    assert covered("msg1", unknown & (cases == 1))
    assert covered("msg2", unknown & (cases == 2))
    assert covered("msg3", unknown & (cases == 3))
    assert covered("msg4", unknown & (cases == 4))
    # f̄_TM: a compute centre whose neighbour's head moves onto it
    moved = (f_conv(pts, table) != c) & (digits[:, 2] == 1) & (digits[:, 3] == 0)
    assert covered("tm", moved)


def run_machine_mode(g: GridMachine, inp: str, max_steps: int, margin=(0, 0, 0, 0)):
    """Write a B.1.2 machine's start configuration into a compute-phase grid, run the
    reference filter and return (table, reference grids, interpreter grids, halted)."""
    run = run_machine(g, inp, max_steps, trace=True)
    confs = [(q, h, dict(c)) for _k, q, h, c in configurations(run)]
    rows = [h[0] for _q, h, _c in confs] + [p[0] for _q, _h, c in confs for p in c]
    cols = [h[1] for _q, h, _c in confs] + [p[1] for _q, _h, c in confs for p in c]
    top, left = min(rows) - margin[0], min(cols) - margin[1]
    window = (top, left, max(rows) - top + 1 + margin[2], max(cols) - left + 1 + margin[3])
    table = machine_table(g)
    want = pack(grids_from_configs(table.code, confs, window))
    extra = 2 if run.halted else 0
    got = run_filter(want[:1], table, len(confs) - 1 + extra)[:, 0]
    return table, got, want, run.halted


def check_machine_mode(table, got, want, halted):
    n = len(want)
    assert np.array_equal(got[:n], want)  # step by step: the interpreter's configurations
    if halted:  # and a halted grid stays put (decision 4)
        assert (got[n:] == want[-1]).all()
    if len(got) > 1:
        seen = np.unique(grid_patches(got[:-1]).reshape(-1, 3, 3), axis=0)
        assert in_domain(seen, table, "compute").all()
    net = build_filter(table)
    D = table.n_digits
    for dt in (np.float32, np.float64):  # the network, recurrently, no rounding between steps
        v = to_value(got[:1], D, dt)
        for k in range(1, len(got)):
            v = net.apply_grid(v, dt)
            assert np.array_equal(from_value(v, D, tol=0.01), got[k:k + 1]), (dt, k)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_machine_mode_matches_interpreter(data):
    m = data.draw(machines(grid=False, max_states=3, max_symbols=3))
    ch = to_rcnn_form(m)
    inp = ch.lower_input(data.draw(tape_inputs(m, max_size=4)))
    margin = tuple(data.draw(st.integers(0, 1)) for _ in range(4))
    check_machine_mode(*run_machine_mode(ch.machine, inp, data.draw(st.integers(0, 80)), margin))


@pytest.mark.parametrize("name, inp", [("bb3.tm", ""), ("bb3.tm", "1"),
                                       ("binary_increment.tm", "1011"), ("palindrome.tm", "101")])
def test_machine_mode_examples(name, inp):
    path = EXAMPLES / name
    if not path.exists():
        pytest.skip(f"{name} is not in examples/")
    ch = to_rcnn_form(load(path))
    table, got, want, halted = run_machine_mode(ch.machine, ch.lower_input(inp), 2000)
    assert halted
    check_machine_mode(table, got, want, halted)
    # the B.1.2 halt: only the answer (if any) in the top-left cell, with the head on it
    last = unpack(got[-1], table.n_digits)
    assert (np.count_nonzero(last[..., 1]) <= 1) and last[..., 3].sum() == 1


def mirrored(m: GridMachine) -> GridMachine:
    flip = {"U": "D", "D": "U", "L": "R", "R": "L", "S": "S"}
    return m.replace(rules=tuple(Rule(r.state, r.read, r.write, flip[r.move], r.next) for r in m.rules))


@settings(max_examples=30, deadline=None)
@given(sign_grid_machines(max_states=4, no_op_first=True), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 2 ** 31), st.integers(1, 40))
def test_handover_places_the_head_and_runs(m, R, C, L, seed, steps):
    """After memorization (every row ±1/3, working columns 1): f̄_msg case 3 puts the head
    on the bottom-right input cell, case 4 spreads the compute phase one cell ahead of the
    head, and f̄_TM runs the machine.  Grid step k + 1 is machine configuration k (the
    interpreter runs the mirrored machine so that the corner is its start cell)."""
    table = machine_table(m)
    D = table.n_digits
    rng = np.random.default_rng(seed)
    syms = rng.choice([-1, 1], (R, C))
    g0 = np.full((1, R, C + L), 3 ** (D - 1), dtype=np.int64)
    g0[0, :, :C] = syms * 3 ** (D - 2)
    text = "/".join("".join("-+"[(syms[R - 1 - i, C - 1 - j] + 1) // 2] for j in range(C))
                    for i in range(R))
    run = run_machine(mirrored(m), text, steps, trace=True)
    confs = []
    for _k, q, h, cells in configurations(run):
        hr, hc = R - 1 - h[0], C - 1 - h[1]
        if not (0 <= hr < R and 0 <= hc < C + L):
            break  # the machine leaves the grid: compare up to here
        confs.append((q, (hr, hc), {(R - 1 - r, C - 1 - c): a for (r, c), a in cells.items()}))
    K = len(confs)
    got = run_filter(g0, table, K)[:, 0]
    corner = np.array([R - 1, C - 1])
    rr, cc = np.indices((R, C + L))
    dist = np.abs(rr - corner[0]) + np.abs(cc - corner[1])
    for k, (q, (hr, hc), cells) in enumerate(confs):
        d = unpack(got[k + 1], D)
        assert np.array_equal(d[..., 2] == 1, dist <= k)  # the compute phase: a growing diamond
        heads = np.argwhere(d[..., 3] == 1)
        assert heads.tolist() == [[hr, hc]]
        assert table.code.states[table.state_index(d[hr, hc, 4:][None])[0]] == q
        sym = np.zeros((R, C + L), dtype=int)
        for (r, c), a in cells.items():
            sym[r, c] = {"-": -1, "+": 1}[a]
        assert np.array_equal(d[..., 1], sym)
    seen = np.unique(grid_patches(got[:K]).reshape(-1, 3, 3), axis=0)
    assert in_domain(seen, table, "handover").all()
    net = build_filter(table)
    v = to_value(got[:1], D, np.float32)
    for k in range(1, K + 1):
        v = net.apply_grid(v, np.float32)
        assert np.array_equal(from_value(v, D, tol=0.01), got[k:k + 1])


# ---------------------------------------------------------------------------------------
# Lemma 3 and Lemma 4 (memorization)
# ---------------------------------------------------------------------------------------
def torch_layer(mod, Z):
    """f_ConvLayer in torch: every 3×3 window of ``Z`` [H, W], padding 1/6."""
    H, W = Z.shape
    zp = torch.nn.functional.pad(Z[None, None], (1, 1, 1, 1), value=1.0 / 6.0)
    win = torch.nn.functional.unfold(zp, 3)[0].T  # [H·W, 9], row-major windows
    return mod(win).reshape(H, W)


def memorize_grid(R, C, L, tau, D, rng):
    g = np.zeros((1, R, C + L), dtype=np.int64)
    g[0, :, C:] = 3 ** (D - 1)
    g[0, :tau - 1, :C] = rng.choice([-1, 1], (tau - 1, C)) * 3 ** (D - 2)
    return g


@pytest.mark.parametrize("R, C, L", [(1, 1, 1), (3, 2, 2), (4, 3, 1), (5, 2, 3)])
def test_lemma3(R, C, L):
    """Goel et al., Lemma 3: rows < τ of ±1/3, the rest 0, working columns 1.  After t
    layers the rows with |a − τ| < t hold −3⁻² (the proof's "3⁻²" with f̄_msg's sign), the
    rest is unchanged; after enough layers every input cell is −3⁻²; and the gradient of
    output (a, b) by input (i, j) is 1 exactly when a = i = τ and b = j."""
    table = machine_table(sample_machine(5))
    D = table.n_digits
    net = build_filter(table)
    mod = net.torch_module()
    rng = np.random.default_rng(R * 10 + C)
    for tau in range(1, R + 1):
        g0 = memorize_grid(R, C, L, tau, D, rng)
        depth = max(tau, R + 1 - tau) + 1
        got = run_filter(g0, table, depth)[:, 0]
        rows = np.arange(1, R + 1)[:, None]
        for t in range(1, depth + 1):
            band = (np.abs(rows - tau) < t) & (np.arange(C + L) < C)[None, :]
            assert (got[t][band] == -3 ** (D - 3)).all()
            assert np.array_equal(got[t][~band], g0[0][~band])
        assert (got[-1][:, :C] == -3 ** (D - 3)).all() and (got[-1][:, C:] == 3 ** (D - 1)).all()
        seen = np.unique(grid_patches(got[:-1]).reshape(-1, 3, 3), axis=0)
        assert in_domain(seen, table, "memorize").all()
        # the network: values (float32, recurrently) and the gradient (float64, autograd)
        v = to_value(g0, D, np.float32)
        for t in range(1, depth + 1):
            v = net.apply_grid(v, np.float32)
            assert np.array_equal(from_value(v, D, tol=0.01), got[t:t + 1])
        X0 = torch.tensor(to_value(g0[0, :, :C], D))

        def rcnn(X, depth=depth):
            Z = torch.cat([X, torch.ones(R, L, dtype=X.dtype)], 1)
            for _ in range(depth):
                Z = torch_layer(mod, Z)
            return Z

        J = torch.autograd.functional.jacobian(rcnn, X0).numpy()  # [R, C+L, R, C]
        want = np.zeros_like(J)
        for b in range(C):
            want[tau - 1, b, tau - 1, b] = 1.0
        assert np.array_equal(J, want)
        # and the reference Jacobian, chained through the layers, says the same
        Jr = np.eye(R * (C + L))
        for t in range(depth):
            Jr = grid_jacobian(got[t], D) @ Jr
        Jr = Jr.reshape(R, C + L, R, C + L)[..., :C]
        assert np.array_equal(Jr, want)


def grid_jacobian(grid, D):
    """d f̄_ConvLayer(X) / dX for one packed grid [H, W], from the per-patch jacobian()."""
    H, W = grid.shape
    pts = grid_patches(grid[None]).reshape(-1, 3, 3)
    Jp = jacobian(pts, D).reshape(H, W, 3, 3)
    J = np.zeros((H * W, H * W))
    for i in range(3):
        for j in range(3):
            a, b = np.nonzero(Jp[:, :, i, j])
            r, c = a + i - 1, b + j - 1
            J[a * W + b, r * W + c] = Jp[a, b, i, j]
    return J


@pytest.mark.parametrize("R, C, L", [(3, 3, 2), (4, 2, 1)])
def test_lemma4_one_sgd_step_memorizes_a_row(R, C, L):
    """Goel et al., Lemma 4: with W's rows < τ memorized and the rest 0, one SGD step on
    the squared loss (η = 1/54) through the filter network and f̄_head writes row τ as
    y·[x, 1]/3 and leaves the other rows alone; the prediction is 0."""
    table = machine_table(sample_machine(3))
    net = build_filter(table)
    mod = net.torch_module()
    head = build_head()
    U2, b2, U1, b1 = (torch.tensor(a) for a in (head.U2, head.b2, head.U1, head.b1))
    rng = np.random.default_rng(R + C)
    d = C - 1
    xs = rng.choice([-1.0, 1.0], (R, d))
    ys = rng.choice([-1.0, 1.0], R)
    depth = R + 2
    for tau in range(1, R + 1):
        Wm = np.zeros((R, C))
        for a in range(tau - 1):
            Wm[a, :d] = ys[a] * xs[a] / 3
            Wm[a, d] = ys[a] / 3
        W = torch.tensor(Wm, requires_grad=True)
        z = torch.tensor(np.append(xs[tau - 1], 1.0))
        Z = torch.cat([W * z[None, :], torch.ones(R, L, dtype=W.dtype)], 1)
        for _ in range(depth):
            Z = torch_layer(mod, Z)
        out = Z[:, :C].reshape(-1, 1)
        f = (torch.relu(out @ U2.T + b2) @ U1.T + b1).sum()
        loss = 0.5 * (ys[tau - 1] - f) ** 2
        loss.backward()
        assert abs(f.item()) < 1e-12
        W_next = Wm - W.grad.numpy() / 54
        want = Wm.copy()
        want[tau - 1, :d] = ys[tau - 1] * xs[tau - 1] / 3
        want[tau - 1, d] = ys[tau - 1] / 3
        assert np.abs(W_next - want).max() < 1e-12


# ---------------------------------------------------------------------------------------
# f̄_head
# ---------------------------------------------------------------------------------------
def test_head():
    head = build_head()
    assert head.d_head <= 6
    x = np.concatenate([np.linspace(-1, 1.5, 50_001), [-1 / 6, 0, 1 / 9, 1 / 6, -1 / 9]])
    assert np.abs(head(x) - f_head(x)).max() < 1e-13
    assert f_head(np.array([-1 / 9, 1 / 9, -1, 1])).tolist() == [0, 0, -1, 1]
    t = torch.tensor([-1 / 9, 0.05, 0.13], dtype=torch.float64, requires_grad=True)
    y = torch.relu(t[:, None] @ torch.tensor(head.U2).T + torch.tensor(head.b2)) @ torch.tensor(head.U1).T
    y.sum().backward()
    assert np.allclose(t.grad.numpy(), f_head_slope(t.detach().numpy())) and t.grad[0] == 18
    # the final answer cell: ±1/3 + 1/9 + 1/27 + any state reads ±1 (B.3)
    for S in (1, 3, 6):
        codes = np.array(np.meshgrid(*[[-1, 1]] * S)).reshape(S, -1).T
        codes = np.concatenate([codes, np.zeros((1, S))])  # the start state
        st_ = codes @ 3.0 ** -np.arange(4, 4 + S)
        for sym in (-1, 1):
            assert np.abs(head(sym / 3 + 1 / 9 + 1 / 27 + st_) - sym).max() < 1e-12


# ---------------------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [2, 4, 8, 16])
def test_sizes_grow_linearly(s):
    net = build_filter(machine_table(sample_machine(s)))
    size = filter_size(net)
    f = width_formula(s)
    assert size["widths"] == [f["V1"], f["V2"], f["V3"], f["V4"], f["V5"]]
    assert size["d_rc"] == 80 * s + 130
    assert size["params_nonzero"] <= 330 * s + 530
    assert size["distinct_values"] <= 24 * s + 72
    d = size["d_rc"]
    assert size["params_dense"] == 3 * d * d + 14 * d + 1
    paper = paper_bounds(s, reachable_values=f["cell_values"])
    assert size["distinct_values"] < paper["cor3_U_on_domain"] < paper["cor3_U"]
    if s >= 8:
        assert d < paper["alg1_d_rc"]
    rep = size_report(net)
    assert rep["head"]["d_head"] == 4 and rep["ours"] == size


def test_sizes_depend_on_s_only():
    widths = set()
    for seed in range(4):
        widths.add(build_filter(machine_table(seeded_machine(6, seed))).widths)
    widths.add(build_filter(machine_table(sample_machine(6))).widths)
    assert widths == {(6, 80 * 6 + 130, 20 * 6 + 34, 8 * 6 + 18, 1)}


def test_labels_and_padded_shapes():
    net = build_filter(machine_table(sample_machine(3)))
    Ws, bs, labs = net.padded()
    d = net.d_rc
    assert [W.shape for W in Ws] == [(d, 9), (d, d), (d, d), (d, d), (1, d)]
    assert all(len(lab) == len(set(lab)) == W.shape[0] for lab, W in zip(labs, Ws))
    assert labs[2][0].startswith("ind:c=") and any(lab.startswith("rule:msg3") for lab in labs[3])
    # the padded net is the same function
    table = machine_table(sample_machine(3))
    x = patch_values(sample_domain(table, 500, 1), table.n_digits)
    h = x
    for i, (W, b) in enumerate(zip(Ws, bs)):
        h = h @ W.T + b
        if i in (1, 3):
            h = np.maximum(h, 0)
    assert np.abs(h[:, 0] - net(x)).max() < 1e-15


def test_float32_limits():
    assert bump_grid(12) >= 2.0 ** -22 > bump_grid(13)
    assert K_SHIFT == 2.0
    for D in range(5, 13):
        g = bump_grid(D)
        assert 3.0 ** -(D - 1) / 32 < g <= 3.0 ** -(D - 1) / 16


def test_reachable_values_per_phase():
    code = cell_code(sample_machine(4))
    classes = cell_classes(code)
    mem = reachable_values(classes, "memorize")
    D = code.n_digits
    assert sorted(mem["unknown"].tolist()) == [-3 ** (D - 2), 0, 3 ** (D - 2), 3 ** (D - 1)]
    assert mem["memory"].tolist() == [-3 ** (D - 3)] and len(mem["head"]) == 0
    cmp_ = reachable_values(classes, "compute")
    assert len(cmp_["compute"]) == 3 and len(cmp_["head"]) == 3 * 4
    hand = reachable_values(classes, "handover")
    assert len(hand["compute"]) == 4 and len(hand["head"]) == 4 * 4
    with pytest.raises(Tm2nnError, match="unknown setting"):
        reachable_values(classes, "train")
    # the domain's values are at least h/2 apart (the bumps' separation), and exactly h/2
    # when a state's code is all +1 (a blank head cell next to p = 1/6)
    for s, gap in ((4, 2.0), (5, 0.5)):
        classes = cell_classes(cell_code(sample_machine(s)))
        D = classes.n_digits
        allv = np.sort(np.concatenate([classes.of("Z", "M", "W", "E", "C", "Cw", "H", "Hw"),
                                       [3 ** (D - 1) / 6]]).astype(float))
        assert np.diff(allv).min() == gap
