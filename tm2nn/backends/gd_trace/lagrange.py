"""Appendix A's ReLU Lagrange basis on the standard simplex (Welper, *Universality of
Gradient Descent Neural Network Training*).

``S = conv{e_v | v in V}`` is the standard simplex in ``R^V``, ``m = |V|``, and the
corner ``S_v^mu = conv({e_v} u {e_vw^mu | w != v})`` with ``e_vw^mu = (1-mu) e_v + mu e_w``
(§4.2).  Two function families, each a single ReLU layer:

* Lemma A.1: ``l_v^mu(x) = max{0, (n_v^mu)^T x - d_mu}`` with
  ``n_v^mu = 1/(mu m) sum_{w != v} (e_v - e_w)`` and ``d_mu = ((1-mu) m - 1)/(mu m)``.
  It is 1 at ``e_v``, 0 at every ``e_vw^mu`` and on ``S \\ S_v^mu``, affine on ``S_v^mu``.
* Lemma A.2 (``mu = 1/2``): ``l_vw(x) = max{0, n_vw^T x - c} - l_v^{1/2}(x) - l_w^{1/2}(x)``
  with ``n_vw = 4 (e_vw - b)``, ``b`` the barycentre of ``S`` and ``c = 1 - 4/m``.
  It is 1 at ``e_vw = (e_v + e_w)/2``, 0 at every other vertex of every corner, and
  affine on every corner ``S_u``.

Every function takes ``x`` as a numpy array or a torch tensor (last axis = ``V``) and
returns the same kind, so torch autograd differentiates through the ReLUs.  The
``*_all`` forms use the closed forms ``(n_v^mu)^T x = (m x_v - sum x)/(mu m)`` and
``n_vw^T x = 2 (x_v + x_w) - 4 sum(x)/m``; :func:`corner_hyperplane` and
:func:`pair_hyperplane` give the explicit ``(n, d)`` of the lemmas (one ReLU unit each),
and the tests check both forms agree.
"""

from __future__ import annotations

import sys

import numpy as np


def _torch():
    """torch, when it is loaded (a tensor can only come from a loaded torch: numpy inputs
    never load it, nor does importing this module)."""
    return sys.modules.get("torch")


def _is_torch(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _relu(z):
    return _torch().relu(z) if _is_torch(z) else np.maximum(z, 0.0)


def _check_mu(mu: float) -> None:
    if not 0.0 < mu <= 1.0:
        raise ValueError(f"Lemma A.1 needs 0 < mu <= 1, got {mu}")


def corner_hyperplane(m: int, v: int, mu: float = 0.5) -> tuple[np.ndarray, float]:
    """``(n_v^mu, d_mu)`` of Lemma A.1 as an explicit vector and offset."""
    _check_mu(mu)
    n = np.full(m, -1.0 / (mu * m))
    n[v] = (m - 1) / (mu * m)
    return n, ((1.0 - mu) * m - 1.0) / (mu * m)


def pair_hyperplane(m: int, v: int, w: int) -> tuple[np.ndarray, float]:
    """``(n_vw, c)`` of Lemma A.2: ``n_vw = 4 (e_vw - b)``, ``c = 1 - 4/m``."""
    if v == w:
        raise ValueError("Lemma A.2 needs v != w")
    e_vw = np.zeros(m)
    e_vw[v] += 0.5
    e_vw[w] += 0.5
    return 4.0 * (e_vw - 1.0 / m), 1.0 - 4.0 / m


def ell_v(x, v: int, mu: float = 0.5):
    """Lemma A.1's ``l_v^mu(x)``, from the explicit ReLU unit ``max{0, n^T x - d}``."""
    m = x.shape[-1]
    n, d = corner_hyperplane(m, v, mu)
    n = _torch().as_tensor(n, dtype=x.dtype, device=x.device) if _is_torch(x) else n
    return _relu(x @ n - d)


def ell_vw(x, v: int, w: int):
    """Lemma A.2's ``l_vw(x)``, from the explicit units (three ReLUs)."""
    m = x.shape[-1]
    n, c = pair_hyperplane(m, v, w)
    n = _torch().as_tensor(n, dtype=x.dtype, device=x.device) if _is_torch(x) else n
    return _relu(x @ n - c) - ell_v(x, v) - ell_v(x, w)


def ell_v_all(x, mu: float = 0.5):
    """All ``l_v^mu(x)``, ``v in V``, as a vector (last axis ``V``); Lemma A.1 closed form."""
    _check_mu(mu)
    m = x.shape[-1]
    s = x.sum(-1, keepdims=True) if not _is_torch(x) else x.sum(-1, keepdim=True)
    d = ((1.0 - mu) * m - 1.0) / (mu * m)
    return _relu((m * x - s) / (mu * m) - d)


def ell_pair_all(x):
    """The ``m x m`` matrix of ``l_vw(x)`` (Lemma A.2 closed form; diagonal set to 0).

    Only one input point (``x`` of shape ``(m,)``); the matrix is symmetric because
    ``n_vw = n_wv``.
    """
    m = x.shape[-1]
    s = x.sum()
    lv = ell_v_all(x, 0.5)
    if _is_torch(x):
        torch = _torch()
        z = 2.0 * (x[:, None] + x[None, :]) - 4.0 * s / m - (1.0 - 4.0 / m)
        out = torch.relu(z) - lv[:, None] - lv[None, :]
        return out * (1.0 - torch.eye(m, dtype=x.dtype, device=x.device))
    z = 2.0 * (x[:, None] + x[None, :]) - 4.0 * s / m - (1.0 - 4.0 / m)
    out = np.maximum(z, 0.0) - lv[:, None] - lv[None, :]
    np.fill_diagonal(out, 0.0)
    return out


def vertex(m: int, v: int) -> np.ndarray:
    """The simplex vertex ``e_v``."""
    e = np.zeros(m)
    e[v] = 1.0
    return e


def corner_vertex(m: int, v: int, w: int, mu: float = 0.5) -> np.ndarray:
    """``e_vw^mu = (1 - mu) e_v + mu e_w`` (§4.2)."""
    return (1.0 - mu) * vertex(m, v) + mu * vertex(m, w)
