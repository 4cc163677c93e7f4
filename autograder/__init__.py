"""Helpers for the course *Custom autograd Functions in PyTorch*.

``check_function`` compares a custom ``torch.autograd.Function`` with torch's own gradients;
the visible and hidden tests of every assignment call it. ``draw_graph`` pictures the backward
graph autograd records.

The package has three wings, by who uses them: ``autograder.student`` (what notebooks import),
``autograder.authoring`` (the course's folders, release, validation, the book) and
``autograder.grading`` (the instructor's pipeline). ``python -m autograder`` is the command line.
"""

from autograder.student import check_function, draw_graph

__all__ = ["check_function", "draw_graph"]
