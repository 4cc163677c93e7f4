"""What every part of the checker shares: torch references captured at import time, and the shared types.

References to the torch functions the checker relies on are captured when this module is
imported, before any student code runs, so student code that later replaces ``torch.allclose``
and friends cannot fool the checker. Every other module of the checker imports them from here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

import torch

# Captured at import time, before any student code runs (see module docstring).
_Tensor = torch.Tensor
_Function = torch.autograd.Function
# torch's own base classes of a Function, recognised by identity: a Function defined in a module named torch...
# (torchvision, torch_geometric, torch's own tests) is anyone's Function.
_TORCH_BASES = frozenset(_Function.__mro__) | {torch.autograd.function.InplaceFunction,
                                                torch.autograd.function.NestedIOFunction}
_Module = torch.nn.Module
_autograd_grad = torch.autograd.grad
_autograd_backward = torch.autograd.backward
_no_grad = torch.no_grad
_allclose = torch.allclose
_equal = torch.equal
_isclose = torch.isclose
_randn = torch.randn
_rand = torch.rand
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
_cat = torch.cat
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
# A check of code in another dtype (dtype="keep", dtype=torch.float32) compares within these, where the test
# gives no rtol= and atol=: torch.testing.assert_close's defaults for that dtype.
DTYPE_TOLERANCES = {torch.float32: (1.3e-6, 1e-5), torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}
# Devices without float64 (Apple's mps): the checker works in float32 there, with these tolerances at least.
NO_FLOAT64 = ("mps",)
FLOAT32_RTOL, FLOAT32_ATOL = 1e-4, 1e-5


@dataclass
class _Inputs:
    """The example arguments, with the names the student's ``forward`` gives them, and how to treat them.

    ``constants``: positions of tensor arguments that need no gradient (a filter bank, a mask);
    ``optional``: positions of ``forward``'s parameters that have a default (``bias=None``);
    ``undecorated``: the Function's methods written without ``@staticmethod`` or ``@classmethod``;
    ``autograd_in_backward``: backward may call autograd itself (gradient checkpointing);
    ``dtype``: the student's float tensors in the checker's precision (None), as given ("keep"), or in a dtype;
    ``layout``: None (contiguous copies), or one of ``LAYOUTS``: every tensor that can be, laid out so;
    ``grad_layout``: the same for the upstream gradients handed to backward;
    ``strict_gradients``: each gradient must have its input's shape and dtype as backward returns it.
    """

    args: tuple
    names: list[str]
    inplace: bool = False
    constants: frozenset = frozenset()
    optional: frozenset = frozenset()
    undecorated: tuple = ()
    autograd_in_backward: bool = False
    dtype: object = None
    layout: str | None = None
    grad_layout: str | None = None
    strict_gradients: bool = False

    @property
    def device(self):
        """The device of the arguments (of the first tensor among them; the CPU when there is none)."""
        return _device_of(self.args)

    @property
    def tensor_positions(self) -> list[int]:
        """Positions of the float tensors whose gradients are checked (constants are not)."""
        return [i for i, a in enumerate(self.args) if _is_float_tensor(a) and i not in self.constants]

    def working_dtype(self, value):
        """The dtype the student's Function gets the float tensor ``value`` in."""
        return _working_dtype(value, self.dtype)

    def fresh(self, requires=None) -> tuple[tuple, list]:
        """(arguments to call with, leaves to differentiate with respect to), for the student's code and the
        reference alike.

        Float tensors become new leaves in their working dtype (``working_dtype``). Constants become such
        copies; other values pass through. Every tensor stays on its device.
        With ``requires`` (positions), only those leaves require grad. With ``inplace``, the call gets
        a copy of each leaf, so a Function may modify its input in place. With ``layout``, the call
        gets each float tensor laid out so (same values, other strides), its leaf stays contiguous.
        """
        leaves, call = [], []
        for i, a in enumerate(self.args):
            if _is_float_tensor(a):
                value = _in_dtype(a, self.dtype)
                if i in self.constants:
                    call.append(laid_out(value, self.layout))
                    continue
                leaf = value.requires_grad_(requires is None or i in requires)
                leaves.append(leaf)
                call.append(laid_out(leaf.clone() if self.inplace else leaf, self.layout))
            else:
                call.append(_as_float64(a))
        return tuple(call), leaves


class CheckFailure(AssertionError):
    """A check's failure: its message is the explanation a student acts on.

    In IPython (a notebook, JupyterLab's Validate, the grader's kernels) it renders itself
    (``_render_traceback_``, which IPython asks first): the message first, then the test's line that
    failed, without the frames of the checker or of torch. It keeps the name of the built-in it
    extends, so what reads an error's name (nbgrader, the grader, ``check``) reads AssertionError.
    """

    def _render_traceback_(self) -> list[str]:
        return message_first(self)


class NotDone(NotImplementedError):
    """An exercise left as released (its ``raise NotImplementedError()``), found by a check: said as such."""

    def _render_traceback_(self) -> list[str]:
        return message_first(self)


CheckFailure.__name__, NotDone.__name__ = "AssertionError", "NotImplementedError"


def message_first(error: BaseException) -> list[str]:
    """``error`` as IPython shows it, message first: 'AssertionError: ...', then the line of the test (or of the
    student's code) that raised it, the innermost frame outside torch, IPython and this package."""
    return [f"{type(error).__name__}: {error}" + (f"\n\n(raised by {where})" if (where := _raised_by(error)) else "")]


def _raised_by(error: BaseException) -> str:
    """'Cell In[5], line 3: check_function(Cube, cube, x)' for the innermost frame that is not a library's."""
    import traceback

    ipython = os.path.dirname(os.path.abspath(_ipython_file())) if _ipython_file() else None
    library = _LIBRARY_DIRS + ((ipython,) if ipython else ())
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(library)]
    if not frames:
        return ""
    frame = frames[-1]
    where = f'"{frame.filename}"'
    try:
        from IPython import get_ipython

        label = get_ipython().compile.format_code_name(frame.filename)
        where = " ".join(label) if label else where
    except Exception:  # noqa: BLE001 - no IPython, or one without cell names: the file's name will do
        pass
    return f"{where}, line {frame.lineno}" + (f": {frame.line.strip()}" if frame.line else "")


def _ipython_file() -> str | None:
    module = sys.modules.get("IPython")
    return getattr(module, "__file__", None)


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
            raise CheckFailure(f"{head}\n{body}")


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


def _tolerances(check: str, args, rtol, atol, dtype=None) -> tuple[float, float]:
    """The tolerances a check compares within: ``rtol``, ``atol`` where given, else the defaults for the
    least precise dtype the student's code works in (``DTYPE_TOLERANCES``; the checker's own in float64),
    loosened to float32's where the arguments' device has no float64.

    ``check`` compares values, which meta tensors do not have: it refuses them (check_device is for them).
    """
    device = _device_of(args)
    if device.type == "meta":
        raise RuntimeError(f"{check} compares values, and meta tensors have none: run it on real tensors, and "
                           f"check where a Function makes its tensors with check_device (this is a problem with "
                           f"the test, not with your Function)")
    if dtype is not None and dtype != "keep" and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise RuntimeError(f"{check}(..., dtype={dtype!r}): dtype is None, \"keep\" or a floating-point torch dtype "
                           f"(this is a problem with the test, not with your Function)")
    dtypes = [_working_dtype(a, dtype) for a in args if _is_float_tensor(a)]
    least = max(dtypes, key=lambda d: DTYPE_TOLERANCES.get(d, (0.0, 0.0)), default=_float64)
    default_rtol, default_atol = DTYPE_TOLERANCES.get(least, (RTOL, ATOL))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if _precise_dtype(device) is _float64:
        return rtol, atol
    return max(rtol, FLOAT32_RTOL), max(atol, FLOAT32_ATOL)


def _working_dtype(value, dtype):
    """The dtype a check hands the float tensor ``value`` to student code in: the checker's precision (None),
    its own ("keep"), or ``dtype``."""
    if dtype is None:
        return _precise_dtype(value.device)
    return value.dtype if dtype == "keep" else dtype


def _in_dtype(value, dtype):
    """A detached copy of the float tensor ``value`` in its working dtype (``_working_dtype``)."""
    return value.detach().to(_working_dtype(value, dtype)).clone()


# Non-contiguous versions of the inputs, in the order a check tries them: the same values, other strides.
SLICE, TRANSPOSED = "a slice", "a transposed view"
LAYOUTS = (SLICE, TRANSPOSED)
_PAD = 3  # columns of NaN beside each row of a slice: a kernel that reads past a row's end reads NaN


def laid_out(value, layout, pad: float = float("nan")):
    """``value`` (a float tensor of two or more dimensions) as ``layout`` lays it out, differentiably: the same
    values in memory of other strides; ``value`` itself when it cannot be (fewer dimensions, a single row).

    A slice: the first columns of a wider tensor, so each row starts ``stride(-2)`` elements after the last,
    more than its length (``x[:, :n]``); a transposed view: the transpose of a contiguous tensor, so a row's
    elements are ``stride(-1)`` apart (``y.mT``). ``pad`` fills the columns beside a slice's rows.
    """
    if layout is None or not can_lay_out(value, layout):
        return value
    if layout == SLICE:
        beside = value.new_full((*value.shape[:-1], _PAD), pad).detach()
        return _cat([value, beside], -1)[..., :value.shape[-1]]
    return value.mT.contiguous().mT


def can_lay_out(value, layout) -> bool:
    """Whether ``laid_out`` makes ``value`` non-contiguous."""
    if not _is_float_tensor(value) or value.dim() < 2 or value.shape[-2] < 2:
        return False
    return layout == SLICE or value.shape[-1] > 1


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
