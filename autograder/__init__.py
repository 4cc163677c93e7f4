"""Helpers for the course *Custom autograd Functions in PyTorch*.

``check_function`` compares a custom ``torch.autograd.Function`` with torch's own gradients;
the visible and hidden tests of every assignment call it. ``draw_graph`` pictures the backward
graph autograd records.
"""

from autograder.checker import check_function
from autograder.graph import draw_graph

__all__ = ["check_function", "draw_graph"]
