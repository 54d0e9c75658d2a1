"""Pictures of machines, circuits and compiled networks (``tm2nn viz``, docs/viz.md):
space-time diagrams (interpreter next to the network's decoded run, divergences
outlined), weight heatmaps with the network IR's dimension labels, the transformer's
attention, and circuit layering."""

from .attention import attention_weights, draw_attention
from .layers import draw_layers
from .render import check_out, save
from .runs import divergences, interpreter_run, net_run
from .spacetime import draw_spacetime, spacetime_png
from .weights import affine_layers, draw_weights

KINDS = ("spacetime", "weights", "attention", "layers")

__all__ = ["KINDS", "affine_layers", "attention_weights", "check_out", "divergences", "draw_attention",
           "draw_layers", "draw_spacetime", "draw_weights", "interpreter_run", "net_run", "save",
           "spacetime_png"]
