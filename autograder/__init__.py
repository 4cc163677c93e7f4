"""Helpers for the course *Custom autograd Functions in PyTorch*.

``check_function`` compares a custom ``torch.autograd.Function`` with torch's own gradients;
the visible and hidden tests of every assignment call it (``check_forward`` checks forward alone,
for the tests of forward). ``draw_graph`` pictures the backward graph autograd records.

The package has three wings, by who uses them: ``autograder.student`` (what notebooks import),
``autograder.authoring`` (the course's folders, release, validation, the book) and
``autograder.grading`` (the instructor's pipeline). ``python -m autograder`` is the command line.

``check_function``, ``check_forward`` and ``draw_graph`` are loaded on first use (they import
torch), so the command line and the grading process, which never call them, start without torch.
"""

__all__ = ["check_built_on", "check_callable", "check_custom_op", "check_device", "check_forward", "check_function", "check_kernel",
           "check_saved", "check_values", "check_with", "draw_graph", "requires"]


def __getattr__(name: str):
    if name in __all__:
        import autograder.student

        value = getattr(autograder.student, name)
        globals()[name] = value  # from now on an ordinary attribute (the tamper guard records it)
        return value
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
