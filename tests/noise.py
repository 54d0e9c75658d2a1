"""Gaussian noise on a net's affine maps: the stand-in for trained weights of the
construction's shape, shared by the certificate tests of every backend."""

import dataclasses

import numpy as np

from tm2nn.nets import Affine


def noisy_nodes(nodes, scale: float, rng: np.random.Generator) -> tuple:
    """``nodes`` with N(0, scale²) added to every stored weight and bias of each Affine op."""
    def one(op):
        if not isinstance(op, Affine):
            return op
        w = op.weight
        return dataclasses.replace(op, weight=dataclasses.replace(w, vals=w.vals + scale * rng.standard_normal(w.vals.size)),
                                   bias=op.bias + scale * rng.standard_normal(op.bias.size))
    return tuple(one(o) for o in nodes)
