"""The network IR: typed ops over labelled dimensions, shared by every backend and emitter."""

from tm2nn.nets.grid import GridReadout, MemoryGrid, PatchMap, patch_space
from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.net import Net
from tm2nn.nets.ops import (
           Activation,
           Affine,
           Attention,
           Concat,
           Decode,
           Embed,
           Loop,
           Mul,
           NetIRError,
           Op,
           Param,
           Pick,
           Port,
           ReLU,
           RunReadout,
           Slice,
           StopGradient,
)
from tm2nn.nets.positions import BinaryPositions
from tm2nn.nets.space import Space

__all__ = ["Net", "Port", "Op", "Affine", "ReLU", "Activation", "Concat", "Slice", "Loop", "Attention", "Embed", "Decode", "Param", "StopGradient", "Mul", "RunReadout", "Pick", "BinaryPositions", "PatchMap", "MemoryGrid", "GridReadout", "patch_space", "Space",
           "SparseMatrix", "NetIRError"]
