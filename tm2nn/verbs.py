"""The verbs that live in modules of their own, each an ``add_parser(sub)`` that sets the
verb's ``handler``: ``sweep`` (docs/sweep.md), ``export`` (docs/api.md, "In TransformerLens")
and ``train`` (docs/learning.md).  ``tm2nn margin MODEL_FILE`` (docs/relu_circuit.md, "A
certificate for any weights") is :func:`tm2nn.margin_command.model_margin`.  The CLI adds
them with one call, so a new verb costs cli.py nothing."""

from __future__ import annotations

from tm2nn import export_command, train_command
from tm2nn.margin_command import model_margin
from tm2nn.sweep import command as sweep_command

__all__ = ["add_parsers", "model_margin"]


def add_parsers(sub) -> None:
    """Add every verb of its own module to ``sub`` (argparse's subparsers)."""
    for module in (sweep_command, export_command, train_command):
        module.add_parser(sub)
