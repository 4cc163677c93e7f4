"""What every part of the checker shares: torch references captured at import time, and the shared types.

References to the torch functions the checker relies on are captured when this module is
imported, before any student code runs, so student code that later replaces ``torch.allclose``
and friends cannot fool the checker. Every other module of the checker imports them from here.
"""

from __future__ import annotations

import importlib.util
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
_float32 = torch.float32
_device = torch.device
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

# Tracebacks are trimmed to the student's own frames: these folders (torch, Triton where it is installed,
# and the student's library this checker belongs to) are not the student's.
_TRITON = importlib.util.find_spec("triton")  # found without importing it
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                 *(_TRITON.submodule_search_locations or [] if _TRITON else []))

RTOL = 1e-6
ATOL = 1e-8
# Devices without float64 (Apple's mps): the checker works in float32 there, with these tolerances at least.
NO_FLOAT64 = ("mps",)
FLOAT32_RTOL, FLOAT32_ATOL = 1e-4, 1e-5


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
    def device(self):
        """The device of the arguments (of the first tensor among them; the CPU when there is none)."""
        return _device_of(self.args)

    @property
    def tensor_positions(self) -> list[int]:
        """Positions of the float tensors whose gradients are checked (constants are not)."""
        return [i for i, a in enumerate(self.args) if _is_float_tensor(a) and i not in self.constants]

    def fresh(self, requires=None) -> tuple[tuple, list]:
        """(arguments to call with, float64 leaves to differentiate with respect to).

        Float tensors become new float64 leaves (float32 on a device without float64); constants
        become such copies; other values pass through. Every tensor stays on its device. With
        ``requires`` (positions), only those leaves require grad. With ``inplace``, the call gets a
        copy of each leaf, so a Function may modify its input in place.
        """
        leaves, call = [], []
        for i, a in enumerate(self.args):
            if _is_float_tensor(a) and i not in self.constants:
                leaf = _as_float64(a).requires_grad_(requires is None or i in requires)
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
    """Same shape, same device, and values within the tolerances (compared in the checker's precision)."""
    if got.shape != expected.shape or got.device != expected.device:
        return False
    precise = _precise_dtype(expected.device)
    return _allclose(got.detach().to(precise), expected.detach().to(precise), rtol=rtol, atol=atol, equal_nan=True)


def _precise_dtype(device):
    """The dtype the checker computes in on ``device``: float64, or float32 where there is no float64 (mps)."""
    return _float32 if _device(device).type in NO_FLOAT64 else _float64


def _tolerances(check: str, args, rtol: float, atol: float) -> tuple[float, float]:
    """``rtol``, ``atol`` as given, or loosened to float32's where the arguments' device has no float64.

    ``check`` compares values, which meta tensors do not have: it refuses them (check_device is for them).
    """
    device = _device_of(args)
    if device.type == "meta":
        raise RuntimeError(f"{check} compares values, and meta tensors have none: run it on real tensors, and "
                           f"check where a Function makes its tensors with check_device (this is a problem with "
                           f"the test, not with your Function)")
    if _precise_dtype(device) is _float64:
        return rtol, atol
    return max(rtol, FLOAT32_RTOL), max(atol, FLOAT32_ATOL)


def _as_float64(value):
    """A detached copy of a float tensor in the checker's precision (float64, or float32 on mps) on its
    own device, a copy of another tensor, any other value as is."""
    if _is_float_tensor(value):
        return value.detach().to(_precise_dtype(value.device)).clone()
    return value.clone() if isinstance(value, _Tensor) else value


def _device_of(values):
    """The device of the first tensor among ``values`` (the CPU when there is none)."""
    return next((v.device for v in values if isinstance(v, _Tensor)), _device("cpu"))


def _draw(shape, generator, dtype, device):
    """Seeded standard normal numbers of ``shape`` and ``dtype`` on ``device``.

    They are drawn on the CPU (``generator`` is a CPU generator, or None) and then moved, so the same
    seed gives the same numbers on every device, and a tensor the checker draws lives where the
    tensors it stands for live (an upstream gradient on the outputs' device, a tangent on the input's).
    """
    return _randn(shape, generator=generator, dtype=dtype).to(device)
