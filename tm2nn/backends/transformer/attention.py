"""Building attention ops by label (Wei, Chen & Ma §4.1: linear Q, K, V, null K_0, V_0).

``rows`` of a query/key map is a list of ``({label: weight}, bias)``, one per coordinate
of Q(h) / K(h); the ±1 bit encodings ``2h - 1`` of App. C are ``({lab: 2}, -1)``.
"""

from __future__ import annotations

import numpy as np

from tm2nn.nets import Attention, Space, SparseMatrix


def _map(rows: list, space: Space) -> tuple[SparseMatrix, np.ndarray]:
    r, c, v = [], [], []
    b = np.zeros(len(rows))
    for i, (ws, bias) in enumerate(rows):
        for lab, w in ws.items():
            r.append(i)
            c.append(space.index(lab))
            v.append(float(w))
        b[i] = bias
    return SparseMatrix((len(rows), len(space)), np.array(r, dtype=np.int64),
                        np.array(c, dtype=np.int64), np.array(v)), b


def pm_bits(labels: list[str]) -> list:
    """Rows ``2h_lab - 1`` for each label (a bit as ±1)."""
    return [({lab: 2.0}, -1.0) for lab in labels]


def attention(name: str, inputs: tuple[str, ...], h: Space, mem: Space, q_rows: list, k_rows: list,
              values: dict, value_bias: dict, null_key: list[float], *, mode: str, beta: float,
              cite: str, history: bool = False) -> Attention:
    """``values``: ``{(h_label, mem_label): w}``; ``value_bias``: ``{h_label: b}``; V_0 = 0."""
    if len(q_rows) != len(k_rows) or len(null_key) != len(q_rows):
        raise ValueError(f"{name}: Q, K and K_0 widths differ")
    wq, bq = _map(q_rows, h)
    wk, bk = _map(k_rows, mem)
    r = [h.index(o) for (o, _i) in values]
    c = [mem.index(i) for (_o, i) in values]
    wv = SparseMatrix((len(h), len(mem)), np.array(r, dtype=np.int64), np.array(c, dtype=np.int64),
                      np.array(list(values.values()), dtype=np.float64))
    bv = np.zeros(len(h))
    for o, b in value_bias.items():
        bv[h.index(o)] = b
    return Attention(name, inputs, wq=wq, bq=bq, wk=wk, bk=bk, wv=wv, bv=bv,
                     null_key=np.array(null_key, dtype=np.float64), null_value=np.zeros(len(h)),
                     mode=mode, beta=beta, history=history, cite=cite)
