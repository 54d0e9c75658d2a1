"""Run a tm2nn ONNX model with numpy and onnxruntime alone: no tm2nn (docs/onnx_plain.md).

    python examples/plain/run_onnx.py MODEL.onnx --input STR [--input STR ...] [--inputs FILE]

prints one JSON report per input and exits as `tm2nn eval MODEL.onnx --input STR --json` does
(0; 1 if a machine did not halt within the model's bound; 2 on bad input).  Everything it
needs is in the model's metadata: tm2nn.input_encoding and tm2nn.output_encoding.
"""
import argparse
import json
import sys

import numpy as np
import onnxruntime as ort


def fail(msg):  # bad input: one line, exit code 2 (as tm2nn)
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def check(texts, alphabet, longest=None):
    for t in texts:
        bad = [c for c in t if c not in alphabet]
        if bad:
            fail(f"input {t!r}: symbol {bad[0]!r} is not in the alphabet ({' '.join(map(repr, alphabet))})")
        if longest is not None and len(t) > longest:
            fail(f"input {t!r} is longer than the model's {longest} cells")


def span(cells, blank):  # ARCHITECTURE.md: tape = leftmost to rightmost non-blank cell
    nz = [i for i, a in enumerate(cells) if a != blank]
    return "".join(cells[nz[0]:nz[-1] + 1]) if nz else "", len(nz)


def bits(sess, ein, eout, texts):  # relu-circuit circuits (0/1) and abbe-sandon (±1): bits in, bits out
    check(texts, "01 _")
    x = [[c == "1" for c in t if c in "01"] for t in texts]
    if any(len(r) != len(ein["names"]) for r in x):
        fail(f"the model reads {len(ein['names'])} bits ({' '.join(ein['names'])})")
    x = np.array(x, np.float32)
    if ein["kind"] == "pm1":
        x = 2 * x - 1  # Abbe & Sandon's Theorem 4 net reads bits as ±1
    y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    thr = eout.get("threshold", 0.0 if eout["kind"] == "sign" else 0.5)
    return [{"outputs": "".join("1" if v > thr else "0" for v in row)} for row in y]


def unrolled(sess, ein, eout, texts):  # relu-circuit machines: one-hot window in, configuration out
    lay = eout["layout"]
    A, N, o, Q, blank = lay["alphabet"], lay["tape"], lay["origin"], lay["states"], lay["blank"]
    check(texts, A, N - o)
    x = np.zeros((len(texts), N, len(A)), np.float32)
    for b, t in enumerate(texts):
        cells = [blank] * o + list(t) + [blank] * (N - o - len(t))
        x[b, np.arange(N), [A.index(a) for a in cells]] = 1
    y = sess.run(None, {sess.get_inputs()[0].name: x.reshape(len(texts), -1)})[0] > eout["threshold"]
    out, p = [], N * len(A) + N
    for row in y:  # tape[i]:a (one-hot), head[i], state:q, halted, steps (LSB first), overflow
        tape, sigma = span([A[k] for k in row[:N * len(A)].reshape(N, -1).argmax(1)], blank)
        q, over = Q[int(row[p:p + len(Q)].argmax())], bool(row[-1])
        steps = sum(1 << i for i, v in enumerate(row[p + len(Q) + 1:-1]) if v)
        halted = bool(row[p + len(Q)]) and not over
        head = None if over else int(row[N * len(A):p].argmax()) - o
        rep = {"halted": halted, "steps": steps, "state": q, "outcome": lay["halting"].get(q, "halt") if halted
               else None, "tape": tape, "head": head, "sigma": sigma}
        out.append({**rep, "overflow": True} if over else rep)
    return out


def tokens(sess, ein, eout, texts):  # transformer: token ids in; the readout outputs the report's fields
    A, blank = ein["alphabet"], ein["blank"]
    check(texts, A)
    x = np.full((len(texts), max([1, *map(len, texts)])), A.index(blank), np.int64)
    for b, t in enumerate(texts):
        x[b, :len(t)] = [A.index(a) for a in t]
    r = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"tape": x})))
    out = []
    for b in range(len(texts)):
        q, halted = eout["layout"]["states"][r["state"][b]], bool(r["halted"][b])
        tape, sigma = span([A[k] for k in r["final_tape"][b]], blank)
        out.append({"halted": halted, "steps": int(r["steps"][b]), "state": q, "outcome": eout["halting"].get(
            q, "halt") if halted else None, "tape": tape, "head": int(r["head"][b]), "sigma": sigma})
    return out


def rcnn(sess, ein, eout, texts):  # the start grid from its table; every filter step's grid decoded
    g, d = ein["start_grid"], eout["decode"]
    check(texts, list(g["symbols"]), ein["max_input"])
    (r0, c0), w, N = g["origin"], d["block"], eout["source_steps"]
    grid = np.full((len(texts), g["rows"], g["cols"]), g["blank"], np.int64)
    for b, t in enumerate(texts):
        cells = [v for a in t for v in g["symbols"][a]]
        grid[b, r0, c0:c0 + len(cells)] = cells
    grid[:, r0, c0] += g["head"]
    states = sess.run(None, {"grid": (grid / g["scale"]).astype(g["dtype"])})[0]
    s = states.astype(np.float64) * g["scale"]
    n = np.rint(s).astype(np.int64)
    if np.abs(s - n).max() > d["tolerance"]:
        sys.exit("error: a grid is not a B.1.1 code")  # exit code 1: not the construction's net
    digits = []
    for _ in range(d["digits"]):  # balanced ternary, least significant first
        digits.append((n + 1) % 3 - 1)
        n = (n - digits[-1]) // 3
    digits = np.stack(digits[::-1])  # [D, batch, steps, rows, cols]
    sym, head, st = digits[d["digit"]["symbol"]], digits[d["digit"]["head"]], digits[d["digit"]["state"]:]
    pad = -c0 % w  # blank columns on the left, so that blocks (source cells) start at multiples of w
    out = []
    for b in range(len(texts)):
        configs, halted = [], False  # (state, head column, tape row) of each source configuration
        for k in range(states.shape[1]):
            rows, cols = np.nonzero(head[b, k] == 1)
            if len(rows) != 1:
                break  # the head walked off the window: a run that had not halted
            key = "".join("-0+"[x + 1] for x in st[:, b, k, rows[0], cols[0]])
            if key in d["source_states"]:
                configs.append((d["source_states"][key], int(cols[0]), sym[b, k, r0]))
            elif key in d["halted_states"]:
                halted = True
                break
        if halted and configs[-1][0] not in d["halting"] and d["missing_rule_counts_step"]:
            configs.append(configs[-1])  # the counted step that found no rule
        steps = len(configs) - 1
        if steps > N:  # cut at the step bound, as the interpreter is
            steps, halted = N, False
        elif steps == N and halted and not d["missing_rule_counts_step"]:  # it would not look for a rule
            halted = configs[N][0] in d["halting"]
        q, col, row = configs[steps]
        blocks = np.concatenate([np.zeros(pad, np.int64), row, np.zeros(-(pad + len(row)) % w, np.int64)])
        words = ["".join(d["blank_word"][j] if x == 0 else "-0+"[x + 1] for j, x in enumerate(blk))
                 for blk in blocks.reshape(-1, w)]
        tape, sigma = span([d["words"][x] for x in words], d["blank"])
        h = (col - c0) // w
        out.append({"halted": halted, "steps": steps, "state": q, "outcome": d["halting"].get(q, "halt")
                    if halted else None, "tape": tape, "head": [0, h] if d["grid"] else h, "sigma": sigma})
    return out


RUN = {"bits": bits, "pm1": bits, "unrolled_tm": unrolled, "tokens": tokens, "rcnn_grid": rcnn}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", help="an input (repeatable; default: one empty input)")
    ap.add_argument("--inputs", help="a file of inputs, one per line")
    a = ap.parse_args()
    try:
        texts = (a.input or []) + (open(a.inputs).read().splitlines() if a.inputs else [])
        sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    except Exception as e:  # no inputs file, or not an ONNX model
        fail(f"{str(e).splitlines()[0]}")
    meta = sess.get_modelmeta().custom_metadata_map
    ein, eout = (json.loads(meta.get(k, "{}")) for k in ("tm2nn.input_encoding", "tm2nn.output_encoding"))
    run = RUN.get(ein.get("kind"))
    if run is None:  # gd-trace's ONNX model is its loss (docs/gd_trace.md), not a run
        fail(f"{a.model}: no runnable tm2nn encoding ({ein.get('kind')!r})")
    try:
        reports = run(sess, ein, eout, texts or [""])
    except KeyError as e:
        fail(f"{a.model}: its metadata lacks {e} (written by an older tm2nn? compile it again)")
    for rep in reports:
        print(json.dumps(rep))
    sys.exit(1 if any(r.get("halted") is False or r.get("overflow") for r in reports) else 0)


if __name__ == "__main__":
    main()
