"""What every part of the checker shares: torch references captured at import time, and the shared types.

References to the torch functions the checker relies on are captured when this module is
imported, before any student code runs, so student code that later replaces ``torch.allclose``
and friends cannot fool the checker. Every other module of the checker imports them from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

# Captured at import time, before any student code runs (see module docstring).
_Tensor = torch.Tensor
_Function = torch.autograd.Function
_Module = torch.nn.Module
_autograd_grad = torch.autograd.grad
_no_grad = torch.no_grad
_allclose = torch.allclose
_equal = torch.equal
_isclose = torch.isclose
_randn = torch.randn
_zeros_like = torch.zeros_like
_ones_like = torch.ones_like
_float64 = torch.float64
_Generator = torch.Generator
_engine_module = torch.autograd
_engine_run_backward = torch.autograd._engine_run_backward
_enable_grad = torch.enable_grad
_stack = torch.stack
_randperm = torch.randperm
_vmap = torch.func.vmap
_func_vjp = torch.func.vjp
_dual_level = torch.autograd.forward_ad.dual_level
_make_dual = torch.autograd.forward_ad.make_dual
_unpack_dual = torch.autograd.forward_ad.unpack_dual
_torch_compile = torch.compile
_compiler_reset = torch.compiler.reset

# Tracebacks are trimmed to the student's own frames: these folders (torch, and the student's
# library this checker belongs to) are not the student's.
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RTOL = 1e-6
ATOL = 1e-8


@dataclass
class _Inputs:
    """The example arguments, with the names the student's ``forward`` gives them, and how to treat them.

    ``constants``: positions of tensor arguments that need no gradient (a filter bank, a mask);
    ``optional``: positions of ``forward``'s parameters that have a default (``bias=None``);
    ``undecorated``: the Function's methods written without ``@staticmethod`` or ``@classmethod``;
    ``autograd_in_backward``: backward may call autograd itself (gradient checkpointing).
    """

    args: tuple
    names: list[str]
    inplace: bool = False
    constants: frozenset = frozenset()
    optional: frozenset = frozenset()
    undecorated: tuple = ()
    autograd_in_backward: bool = False

    @property
    def tensor_positions(self) -> list[int]:
        """Positions of the float tensors whose gradients are checked (constants are not)."""
        return [i for i, a in enumerate(self.args) if _is_float_tensor(a) and i not in self.constants]

    def fresh(self, requires=None) -> tuple[tuple, list]:
        """(arguments to call with, float64 leaves to differentiate with respect to).

        Float tensors become new float64 leaves; constants become float64 copies; other values pass
        through. With ``requires`` (positions), only those leaves require grad. With ``inplace``,
        the call gets a copy of each leaf, so a Function may modify its input in place.
        """
        leaves, call = [], []
        for i, a in enumerate(self.args):
            if _is_float_tensor(a) and i not in self.constants:
                leaf = a.detach().to(_float64).clone().requires_grad_(requires is None or i in requires)
                leaves.append(leaf)
                call.append(leaf.clone() if self.inplace else leaf)
            else:
                call.append(_as_float64(a))
        return tuple(call), leaves


@dataclass
class _Report:
    """Problems found so far, in the order a student should read them."""

    title: str
    problems: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def raise_if_any(self) -> None:
        if self.problems:
            count = len(self.problems)
            head = f"{self.title}: {count} problem{'s' if count > 1 else ''} found."
            body = "\n".join("- " + p.replace("\n", "\n  ") for p in self.problems)
            raise AssertionError(f"{head}\n{body}")


class _StudentError(Exception):
    """Student code raised; ``message`` already explains it in course terms."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _HandedBackToAutograd(RuntimeError):
    """Raised inside a student's backward that calls autograd itself."""


@dataclass
class _Case:
    """One way the loss can use the outputs: which outputs, with which random upstream gradients."""

    used: list[int]
    upstream: list
    when: str = ""  # how a message describes this case ("" when all outputs are used)
    several_outputs: bool = False


# --------------------------------------------------------------------------------------------
# Small helpers on tensors


def _is_float_tensor(value) -> bool:
    return isinstance(value, _Tensor) and value.is_floating_point()


def _graph_node(outputs):
    """The backward node ``apply`` recorded for these outputs (shared by all of them), or None."""
    return next((o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None), None)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _close(got, expected, rtol, atol) -> bool:
    return got.shape == expected.shape and _allclose(got.detach().to(_float64),
                                                     expected.detach().to(_float64),
                                                     rtol=rtol, atol=atol, equal_nan=True)


def _as_float64(value):
    """A detached float64 copy of a float tensor, a copy of another tensor, any other value as is."""
    if _is_float_tensor(value):
        return value.detach().to(_float64).clone()
    return value.clone() if isinstance(value, _Tensor) else value
