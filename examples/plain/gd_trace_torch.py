"""Run a tm2nn gd-trace model (Welper §4.4) in plain torch, without tm2nn:

    python examples/plain/gd_trace_torch.py MODEL.safetensors [--input STR ...]

The manifest's network is the loss (21).  The optimizer (22) is not in it (ONNX has no
autograd), so this script runs it from the encodings: input "start" (the start iterate),
"optimizer" (the update), output "readback" (an iterate as the source's configuration);
docs/gd_trace.md, "The model files".  Prints what `tm2nn eval MODEL --input STR --json` does.
"""
import json
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file

F64 = torch.float64
OPS = {"relu": lambda x, i: torch.relu(x[0]), "mul": lambda x, i: x[0] * x[1], "concat": lambda x, i: torch.cat(x),
       "slice": lambda x, i: x[0][i], "stop_gradient": lambda x, i: x[0].detach()}  # + param, affine


def fail(msg):
    print(f"gd_trace_torch: error: {msg}", file=sys.stderr)
    sys.exit(2)


def loss_of(m, arrays):
    """The loss as ``f(ro, params)``: the manifest's ops in order; a weight is dense
    (``key``) or sparse (``rows``, ``cols``, ``vals``), named arrays of the file."""
    a = {k: torch.from_numpy(v).long() if k.endswith((".rows", ".cols")) else torch.from_numpy(v)
         for k, v in arrays.items()}
    for op in m["net"]["ops"]:
        if op["kind"] not in (*OPS, "param", "affine") or op.get("tensors", {}).get("weight", {}).get(
                "layout", "dense") not in ("dense", "coo"):
            fail(f"op {op['name']!r} ({op['kind']}) is not an op of the gd-trace loss")
    idx = {op["name"]: torch.tensor(op["attrs"]["indices"]) for op in m["net"]["ops"] if op["kind"] == "slice"}

    def f(ro, params):
        v = {m["net"]["inputs"][0]["name"]: ro}
        for op in m["net"]["ops"]:
            x, t = [v[i] for i in op["inputs"]], op.get("tensors", {})
            if op["kind"] == "param":
                y = params[op["name"]]
            elif op["kind"] == "affine":
                w, b = t["weight"], a[t["bias"]["key"]] if "bias" in t else 0.0
                y = (a[w["key"]] @ x[0] if w["layout"] == "dense" else torch.zeros(w["shape"][0], dtype=F64)
                     .index_add(0, a[w["rows"]], a[w["vals"]] * x[0][a[w["cols"]]])) + b
            else:
                y = OPS[op["kind"]](x, idx.get(op["name"]))
            v[op["name"]] = y
        return v[m["net"]["outputs"][0]][0]
    return f


def labels(m, name):
    """The labels of a value's dimensions (``{"prefixes", "names"}``: each prefix + each name)."""
    sp = m["spaces"][next(e["space"] for e in m["net"]["inputs"] + m["net"]["ops"] if e["name"] == name)]
    return [p + n for p in sp["prefixes"] for n in sp["names"]] if isinstance(sp, dict) else sp


def cell(label):  # "T1:-3" -> -3
    return int(label.split(":")[1])


def onehot(vals, what):
    i = int(np.argmax(vals))
    if abs(vals[i] - 1) > 1e-6 or np.abs(np.delete(vals, i)).max(initial=0) > 1e-6:
        fail(f"{what} is not one-hot: the iterate is not a configuration")
    return i


def run(m, loss, text):
    """Welper (22) from the start iterate of ``text``; the run report read off the iterates."""
    enc, out, tab = m["encodings"]["input"], m["encodings"]["output"], m["source"]["tables"]
    st, opt, rb = enc["start"], enc["optimizer"], out["readback"]
    S, T, H, RO = (labels(m, st[k]) for k in ("simplex", "tapes", "heads", "read_only"))
    bad = [ch for ch in text if ch not in st["plus"]]
    if bad or len(text) > enc["max_input"]:
        fail(f"input {text!r}: " + (f"{bad[0]!r} is not one of the symbols {' '.join(st['plus'])}" if bad else
                                    f"longer than the {enc['max_input']} cells the model was compiled for"))
    plus = set(st["fixed"]) | {i * st["period"] + o for i, ch in enumerate(text) for o in st["plus"][ch]}
    ro = torch.tensor([1.0 if cell(c) in plus else st["blank"] for c in RO], dtype=F64)
    tapes = sorted({h.split(":")[0][1:] for h in H}, key=int)  # labels T<tape>:<cell>, H<tape>:<cell>
    under = "".join("+" if f"T{j}:{st['cell']}" in RO and st["cell"] in plus else "-" for j in tapes)
    v0 = st["vertex_label"].format(state=st["state"], round=st["round"], symbols=under)
    x = {st["simplex"]: torch.tensor([float(s == v0) for s in S], dtype=F64),
         st["tapes"]: torch.full((len(T),), st["blank"], dtype=F64),  # the writable tapes start blank
         st["heads"]: torch.tensor([float(cell(h) == st["cell"]) for h in H], dtype=F64)}
    for p in x.values():
        p.requires_grad_(True)
    on = {j: [i for i, h in enumerate(H) if h.startswith(f"H{j}:")] for j in tapes}
    work = [i for i, c in enumerate(T) if c.startswith(f"T{rb['tape']}:")]
    src, done = [], 0
    for k in range(out["lowered_steps"] + 1):
        s, t, hd = (x[st[n]].detach().numpy() for n in ("simplex", "tapes", "heads"))
        v = S[onehot(s, f"step {k}: s")]
        heads = {j: cell(H[on[j][onehot(hd[on[j]], f"step {k}: H{j}")]]) for j in tapes}
        if np.abs(np.abs(t) - 1).max() > 1e-6:
            fail(f"step {k}: T is not ±1: the iterate is not a configuration")
        q, halted = v[2:].rsplit("|", 2)[0], v in rb["halting"]
        conf = source(rb, tab["blank"], q, heads[str(rb["tape"])], {cell(T[i]) for i in work if t[i] > 0}) \
            if halted or q in rb["boundary"] else None
        if q in rb["boundary"]:
            src, done = src + [conf], done + 1
        if halted or k == out["lowered_steps"] or done > out["source_steps"]:
            break
        step(loss(ro, x), x, opt, k)
    if halted and q not in tab["halting"]:  # halted on a missing rule: counted or not
        if conf is None:
            fail(f"halted in {q!r}, in the middle of a source step")
        src += [conf] if rb["missing_rule_counts_step"] else []
    if not src:
        fail("no iterate reads back as a configuration of the source machine")
    n = min(len(src) - 1, out["source_steps"])  # cut at source_steps, as the interpreter is
    if len(src) - 1 > n:
        halted = False
    elif n == out["source_steps"] and halted and not rb["missing_rule_counts_step"]:
        halted = src[n][0] in tab["halting"]
    q, head, cells = src[n]
    tape = "".join(cells.get(i, tab["blank"]) for i in range(min(cells), max(cells) + 1)) if cells else ""
    return {"halted": halted, "steps": n, "state": q, "outcome": tab["halting"].get(q, "halt") if halted else None,
            "tape": tape, "head": head, "sigma": len(cells)}


def source(rb, blank, q, head, pluses):
    """A §4.1 configuration -> the source's (state, head, cells), or None mid-step: source
    cell b is the symbol whose code word spells work cells b*w .. b*w + w - 1."""
    q, w = rb["boundary"].get(q, rb["stop"].get(q)), rb["width"]
    if q is None or head % w:
        return None
    blocks = {}
    for c in pluses:
        blocks.setdefault(c // w, ["-"] * w)[c % w] = "+"
    words = {c: a for a, c in rb["code"].items()}
    if any("".join(b) not in words for b in blocks.values()):
        fail("a work-tape block is not a code word")
    return q, head // w, {i: words["".join(b)] for i, b in blocks.items() if words["".join(b)] != blank}


def step(loss, x, opt, k):
    """(22): the Frank-Wolfe param moves to the vertex of the smallest gradient entry (and
    stays if its own is within tol of it), the others take a gradient step."""
    loss.backward()
    fw = opt["frank_wolfe"]
    with torch.no_grad():
        p, g = x[fw["param"]], x[fw["param"]].grad
        best, v = float(g.min()), int(torch.argmax(p))
        u = [v] if float(g[v]) <= best + fw["tol"] else torch.nonzero(g <= best + fw["tol"]).flatten().tolist()
        if len(u) != 1:
            fail(f"step {k}: the Frank-Wolfe vertex is not unique ({u[:5]})")
        p.mul_(1 - fw["alpha"])[u[0]] += fw["alpha"]
        for name, lr in opt["gradient"].items():
            x[name] -= lr * x[name].grad
        for t in x.values():
            t.grad = None


def main(argv):
    if not argv or len(argv) % 2 == 0 or any(a != "--input" for a in argv[1::2]):
        fail("usage: gd_trace_torch.py MODEL.safetensors [--input STR ...]")
    try:
        with safe_open(argv[0], "np") as f:
            m = json.loads((f.metadata() or {})["tm2nn.manifest"])
        arrays = load_file(argv[0])
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        fail(f"{argv[0]}: not a tm2nn .safetensors model ({type(e).__name__}: {e})")
    if m.get("backend") != "gd-trace" or m["encodings"]["input"]["kind"] != "gd_trace":
        fail(f"{argv[0]}: not a gd-trace machine model (backend {m.get('backend')!r})")
    torch.set_num_threads(1)  # the loss's vectors are small: threads cost more than they save
    loss = loss_of(m, arrays)
    for text in argv[2::2] or [""]:
        print(json.dumps(run(m, loss, text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
