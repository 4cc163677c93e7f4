"""Functions a test may hand to a student's function by name (``numerical_jacobian(named("exp"), x)``).

A hidden test that passes a function to the student's code cannot send that function's code to
the student's process (the grader's referee sends data only): it names one of these instead, with
tensor arguments, and both processes build the same function from the name.
"""

from __future__ import annotations



def _torch():
    import torch  # on first use: the grader's own process never imports torch

    return torch


FUNCTIONS = {
    "exp": lambda: _torch().exp,
    "sin": lambda: _torch().sin,
    "cube": lambda: (lambda x: x ** 3),
    "cube_sum": lambda: (lambda x: (x ** 3).sum()),
    "gram": lambda: (lambda x: x @ x.T),
    "matmul_sin": lambda a: (lambda x: a @ x.sin()),
    "exp_reshape": lambda *shape: (lambda x: x.exp().reshape(*shape)),
    "squares_and_product": lambda: (lambda x: _torch().stack([(x ** 2).sum(), x[0] * x[1] * x[2]])),
}


class Named:
    """A function of ``FUNCTIONS`` by name, with its arguments: callable, and sendable as data."""

    def __init__(self, name: str, *args) -> None:
        if name not in FUNCTIONS:
            raise ValueError(f"no named function {name!r} (known: {', '.join(FUNCTIONS)})")
        self.name, self.args, self.function = name, args, FUNCTIONS[name](*args)

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"named({self.name!r})"


def named(name: str, *args) -> Named:
    """The function ``name`` of ``FUNCTIONS`` (built from ``args``), for a test to hand to a student's function."""
    return Named(name, *args)
