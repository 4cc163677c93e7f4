"""Triton kernels on a CPU, for assignment 10: the interpreter, and a check of every memory access.

With ``TRITON_INTERPRET=1`` set before ``triton`` is imported (the notebook does it where there is
no GPU; grading always does), ``@triton.jit`` kernels run on CPU tensors: Triton's interpreter runs
the programs of the grid one after another, each one's block operations in NumPy. It reads and
writes raw memory, as a GPU does: a kernel whose mask is off by one writes past the end of its
output, which on a CPU corrupts the heap and later kills the process (``free(): invalid size``).

``guard_memory()`` makes the interpreter check every load, store and atomic of a kernel against the
tensors that kernel was given, before the access: one outside all of them stops the kernel with an
``OutOfBounds`` error naming the kernel, the tensor and the element, and nothing is read or
written. And the masked lanes of a floating-point ``tl.load`` without ``other=`` hold NaN, not the
interpreter's 0: Triton promises nothing there, and a kernel that adds them up shows it. It wraps
the four memory calls of Triton's interpreter (``load``, ``store``, ``atomic_rmw``, ``atomic_cas`` of
``triton.runtime.interpreter``), its copy of a launch's arguments (``GridExecutor._init_args_hst``) and
its masked load (``InterpreterBuilder.create_masked_load``): private names, the same in triton 3.6.0,
3.7.1 and 3.8.0 (each checked, tests/student/test_kernels.py). On a Triton whose interpreter is built
otherwise it installs nothing and returns False; ``memory_guarded()`` says whether it is on, and
``UNGUARDED`` is what the notebook and ``check_kernel`` then say. Compiled kernels on a GPU are untouched.

``SOFTMAX_NAN`` is what 10's softmax test says of NaN (Exercise 4; its table of wrong derivations is in the
test cell itself, since their negation would hand 05's answer to anyone reading this library); the
timing helpers and records of Exercise 6 live in ``autograder.student.kernel_records`` and are importable
from here too.
"""

from __future__ import annotations

import contextlib
import os
import threading

INTERPRETER_VARIABLE = "TRITON_INTERPRET"
_TRUE = ("1", "true", "on", "yes")
_launch = threading.local()  # the kernel running now: its name and the byte ranges of its tensors


class OutOfBounds(IndexError):
    """A kernel run by Triton's interpreter reached for memory outside every tensor it was given."""


def interpreted() -> bool:
    """Whether Triton kernels run in Triton's interpreter here: asked for, or no CUDA GPU to compile for."""
    if os.environ.get(INTERPRETER_VARIABLE, "0").strip().lower() in _TRUE:
        return True
    import torch

    return not torch.cuda.is_available()


# What the notebook and check_kernel say where kernels are interpreted but guard_memory() could not install.
UNGUARDED = ("out-of-bounds loads and stores are NOT checked here: this Triton's interpreter is not built the way "
             "the course's memory guard knows (triton 3.6 to 3.8), so a mask that is missing or off by one can "
             "silently overwrite memory and crash the notebook later. Grading checks every access (triton 3.7.1).")


def guard_memory() -> bool:
    """Check every memory access of interpreted kernels from now on (idempotent); False where nothing
    is interpreted (a GPU), Triton is missing, or its interpreter is not the one this was written for."""
    if os.environ.get(INTERPRETER_VARIABLE, "0").strip().lower() not in _TRUE:
        return False
    interpreter = _interpreter_module()
    if interpreter is None:
        return False
    import numpy as np

    lighten_interpreter()
    if memory_guarded():
        return True
    if _missing_internals(interpreter):
        return False  # a Triton whose interpreter is built otherwise: unguarded, and the notebook says so
    interpreter._interpreter = _CheckedMemory(interpreter._interpreter)
    original_init, original_call = interpreter.GridExecutor._init_args_hst, interpreter.GridExecutor.__call__

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        names = list(self.arg_names)[:len(args_hst)] + list(kwargs_hst)  # positional, then keywords by name
        ranges = [r for name, arg in zip(names, list(args_hst) + list(kwargs_hst.values()))
                  for r in _ranges(name, arg)]
        _launch.current = (getattr(self.fn, "__name__", "the kernel"), ranges)
        return args_hst, kwargs_hst

    def call(self, *args, **kwargs):
        try:
            return original_call(self, *args, **kwargs)
        finally:
            _launch.current = None

    interpreter.GridExecutor._init_args_hst, interpreter.GridExecutor.__call__ = init_args_hst, call
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if hasattr(builder, "create_masked_load") and hasattr(interpreter, "_get_np_dtype"):
        original_load = builder.create_masked_load

        def create_masked_load(self, pointers, mask, other, *args, **kwargs):
            dtype = interpreter._get_np_dtype(pointers.get_element_ty())
            if other is None and np.issubdtype(dtype, np.floating):  # a GPU promises nothing there: NaN shows it
                other = interpreter.TensorHandle(np.full(np.shape(pointers.data), np.nan, dtype=dtype),
                                                 pointers.get_element_ty())
            return original_load(self, pointers, mask, other, *args, **kwargs)

        builder.create_masked_load = create_masked_load
    return True


def lighten_interpreter() -> bool:
    """Leave out work Triton's interpreter does for nothing, or lane by lane (idempotent; True once done): kernels give
    the same values and raise the same errors, about twice as fast. Installed by ``guard_memory()`` and by grading's
    warm process; nothing where kernels are not interpreted, or where the interpreter is built otherwise.

    - Overflow checks whose result is thrown away: with its default options (``debug`` off) the interpreter still
      redoes every int32 ``+``, ``-`` and ``*`` of a kernel in int64 and compares the result with int32's range, for
      a ``device_assert`` that does nothing unless ``debug`` is on (``TritonSemantic.device_assert``). With
      ``debug`` off, ``sanitize_overflow`` is switched off too: no check is lost (the compiled kernel has none either).
    - Looking up Triton's builtins at every launch and every call of a ``@triton.jit`` helper (``tl.sum`` is one):
      ``_patch_builtin`` lists every member of ``triton.language`` (and of ``tl.tensor``, ``tl.math``, ...) with
      ``inspect.getmembers`` each time, to find the builtins it replaces for the launch. Which names those are
      depends only on the module, so they are listed once; each is still looked up and replaced as before.
    - Building the table of NumPy dtypes at every operation: ``_get_np_dtype`` makes a dict of twenty Triton dtypes
      for each lookup (tens of thousands a check); the answer depends only on the dtype, so it is kept.
    - ``tl.math.erf`` of float32, one Python call of ``math.erf`` per lane (``np.vectorize``: 0.7 ms for a tile of
      8,192 lanes, a fifth of a program of 10's GELU kernels): torch computes it in float64 for the whole tile and
      rounds it to float32, as the interpreter does lane by lane (the same float32 on 30 million values tested, and
      on 0, -0, inf, -inf, NaN and subnormals; ``tests/student/test_interpreter.py``). Out of sight of any torch
      dispatch mode (a checker's count of the tensors a Function creates sees the kernel's, not these). Only where
      torch computes in one thread, as in every grading process (``Limits.threads``); float64 keeps ``math.erf``.
    """
    interpreter = _interpreting_module()
    if interpreter is None or not all(hasattr(interpreter, n) for n in ("interpreter_builder", "_patch_builtin",
                                                                          "_patch_attr")):
        return False
    if getattr(interpreter._patch_builtin, "lightened", False):
        return True
    import dataclasses
    import inspect

    from triton.language.core import is_builtin

    builder = interpreter.interpreter_builder
    options = getattr(builder, "options", None)
    if dataclasses.is_dataclass(options) and not getattr(options, "debug", True) and getattr(
            options, "sanitize_overflow", False):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    patch_attr, names = interpreter._patch_attr, {}

    def replaced(member) -> bool:  # a builtin that an enclosing launch has already replaced (_patch_attr's lambda)
        return getattr(member, "__qualname__", "") == "_patch_attr.<locals>.<lambda>"

    def patch_builtin(package, patch_builder, scope):
        found = names.get(package)
        if found is None:
            found = names[package] = [name for name, member in inspect.getmembers(package)
                                      if is_builtin(member) or replaced(member)]
        for name in found:
            member = getattr(package, name)
            if is_builtin(member):
                patch_attr(package, name, member, patch_builder, scope)

    patch_builtin.lightened = True
    interpreter._patch_builtin = patch_builtin
    if hasattr(interpreter, "_get_np_dtype"):
        interpreter._get_np_dtype = _kept_np_dtypes(interpreter._get_np_dtype)
    builder_class = type(builder)
    if hasattr(builder_class, "create_erf") and hasattr(interpreter, "TensorHandle"):
        builder_class.create_erf = _whole_tile_erf(builder_class.create_erf, interpreter.TensorHandle)
    return True


def _whole_tile_erf(lane_by_lane, handle):
    """The interpreter's ``create_erf`` (``lane_by_lane``), float32 tiles computed at once by torch (see above)."""
    import numpy as np
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    def create_erf(self, arg):
        if getattr(arg.data, "dtype", None) != np.float32 or torch.get_num_threads() != 1:
            return lane_by_lane(self, arg)  # (torch's threads, woken for each tile, cost more than they save)
        with _disable_current_modes():
            tile = torch.tensor(arg.data, dtype=torch.float64).erf_().to(torch.float32).numpy()
        return handle(tile.reshape(np.shape(arg.data)), arg.dtype.scalar)

    return create_erf


def _kept_np_dtypes(np_dtype_of):
    """``np_dtype_of`` (the interpreter's ``_get_np_dtype``), each scalar dtype's answer kept after the first: a
    block's is its element's, a pointer's (or a block of pointers') is uint64, as there."""
    import numpy as np
    import triton.language as tl

    kept, address = {}, np.dtype(np.uint64)

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):
            return address
        try:
            return kept[scalar]
        except (KeyError, TypeError):
            found = np_dtype_of(scalar)
            with contextlib.suppress(TypeError):
                kept[scalar] = found
            return found

    return np_dtype


def memory_guarded() -> bool:
    """Whether ``guard_memory()`` is on in this process: every access of an interpreted kernel is checked."""
    interpreter = _interpreter_module()
    return interpreter is not None and isinstance(getattr(interpreter, "_interpreter", None), _CheckedMemory)


def _interpreter_module():
    """Triton's interpreter module, or None where Triton is not installed."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return None
    return interpreter


def _missing_internals(interpreter) -> list[str]:
    """The private names of Triton's interpreter the guard wraps that this Triton lacks (none in 3.6.0 to 3.8.0)."""
    memory = getattr(interpreter, "_interpreter", None)
    missing = [f"_interpreter.{name}" for name in ("load", "store", "atomic_rmw", "atomic_cas")
               if not hasattr(memory, name)]
    return missing + [name for name in ("GridExecutor._init_args_hst", "GridExecutor.__call__")
                      if not hasattr(getattr(interpreter, "GridExecutor", None), name.split(".")[1])]


def _ranges(name: str, arg) -> list[tuple[str, int, int, int, int]]:
    """(name, first byte, end byte, elements, element size) of each tensor in a kernel argument."""
    if isinstance(arg, (tuple, list)):
        return [r for a in arg for r in _ranges(name, a)]
    if not hasattr(arg, "data_ptr"):
        base = getattr(arg, "base", None)  # a tensor descriptor: its tensor
        return _ranges(name, base) if hasattr(base, "data_ptr") else []
    size = arg.element_size()
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(arg.shape, arg.stride())) if arg.numel() else 0
    return [(name, arg.data_ptr(), arg.data_ptr() + extent * size, arg.numel(), size)]


def _check(verb: str, pointers, mask, size: int) -> None:
    """Raise OutOfBounds unless every active lane of ``pointers`` lies in one tensor of the launch: a block of
    pointers comes from one base pointer, so lanes that reach into a neighbouring tensor are out of bounds too."""
    current = getattr(_launch, "current", None)
    if current is None:
        return
    import numpy as np

    kernel, ranges = current
    addresses = np.asarray(pointers, dtype=np.uint64).reshape(-1)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(pointers)).reshape(-1)]
    if not addresses.size:
        return
    inside = [(addresses >= start) & (addresses + size <= end) for _, start, end, _, _ in ranges]
    counts = [int(lanes.sum()) for lanes in inside]
    best = max(range(len(ranges)), key=counts.__getitem__) if ranges else None
    if best is not None and counts[best] == addresses.size:
        return
    outside = addresses if best is None or counts[best] == 0 else addresses[~inside[best]]
    raise OutOfBounds(_where(kernel, verb, int(outside[0]), len(outside),
                             ranges if best is None or counts[best] == 0 else [ranges[best]]))


def _where(kernel: str, verb: str, address: int, count: int, ranges) -> str:
    """What went out of bounds, said of the tensor nearest to it: '... the first at element 37,000 of `y_ptr`
    (37,000 elements)'."""
    if not ranges:
        return f"out of bounds: {kernel} {verb} memory, but it was given no tensor"
    name, start, end, numel, size = min(ranges, key=lambda r: abs(address - min(max(address, r[1]), r[2] - 1)))
    elements = f"{count} element{'s' if count > 1 else ''}"
    index = (address - start) // size
    return (f"out of bounds: {kernel} {verb} {elements} outside the tensors it was given, the first at element "
            f"{index:,} of `{name}` ({numel:,} elements). {_likely_cause(index, numel)}")


def _likely_cause(index: int, numel: int) -> str:
    """What reaches element ``index`` of a tensor of ``numel`` elements: a mask (just past the end) or offsets."""
    if index < 0:
        return "That is before its first element: an offset is negative (a block or row that starts too early?)"
    if index == numel:
        return ("That is just past its end: is a mask missing, or off by one (offsets <= n instead of offsets < n)? "
                "Or do the offsets step too far from one row to the next (the row stride)?")
    return (f"That is {index - numel:,} elements past its end, with a gap: not a mask that is off by one, but offsets "
            f"that step too far: a row stride that is not the tensor's (row r starts r * n_columns elements in), "
            f"or a block that starts at the wrong place")


def _itemsize(dtype) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


class _CheckedMemory:
    """Triton's interpreter memory calls (its C++ module ``_interpreter``), each checked first."""

    def __init__(self, original) -> None:
        self._original = original

    def __getattr__(self, name: str):
        return getattr(self._original, name)

    def load(self, pointers, mask, other, dtype):
        _check("loaded", pointers, mask, _itemsize(dtype))
        return self._original.load(pointers, mask, other, dtype)

    def store(self, pointers, value, mask):
        _check("stored", pointers, mask, value.dtype.itemsize)
        return self._original.store(pointers, value, mask)

    def atomic_rmw(self, operation, pointers, value, mask, semantic):
        _check("updated (atomic)", pointers, mask, value.dtype.itemsize)
        return self._original.atomic_rmw(operation, pointers, value, mask, semantic)

    def atomic_cas(self, pointers, compare, value, semantic):
        _check("updated (atomic)", pointers, None, value.dtype.itemsize)
        return self._original.atomic_cas(pointers, compare, value, semantic)


# --------------------------------------------------------------------------------------------
# What assignment 10's softmax test names (Exercise 4): the typical wrong backwards, and NaN from masked lanes


SOFTMAX_NAN = (  # explain_non_finite's situation, forward's advice and backward's, for rows of 10 (16 lanes)
    "on rows of 10 columns (blocks of 16 lanes, the last 6 masked)",
    "In forward, the masked lanes must load -inf (other=-float('inf')): they then never win the maximum, and "
    "exp(-inf) = 0 adds nothing to the sum.",
    "NaN where torch's gradient is finite most likely comes from the masked lanes: a tl.load with a mask and no "
    "other= holds NaN there in this notebook (and anything at all on a GPU), and tl.sum adds it in. Load y and "
    "grad_output with other=0.0, so that the lanes past the row's end add nothing to the row's sum. (Or some "
    "element of grad_x was never written: new tensors hold NaN here.)",
)


# The timing helpers of Exercise 6 and the shipped records (moved to their own module; importable from here too).
from autograder.student.kernel_records import (  # noqa: E402
    EVIDENCE_RECORD, SOLUTION_RECORD, graph_replay, plot_kernel_share, reference_timings, tile_lines, time_bias_gelu,
    timing_lines,
)


# --------------------------------------------------------------------------------------------
# What interpreted kernels did (assignment 11): how many tl.dot each launch ran, and races between its programs

class LaunchWatch:
    """What ``watch_launches`` saw: one dict per kernel launch, in order (``launches``), and whether it could
    watch at all (``watching``: False outside Triton's interpreter, or where it is built otherwise)."""

    def __init__(self, watching: bool) -> None:
        self.watching, self.launches, self.now = watching, [], None


class _Writes:
    """One launch's stores and atomics, program by program: the first element that two programs both write, at
    least one of them without an atomic, is a race (on a GPU the programs run at the same time)."""

    def __init__(self, kernel: str, ranges: list) -> None:
        import numpy as np

        self.kernel, self.ranges, self.dots, self.race, self.program = kernel, ranges, 0, None, None
        self.before = {False: np.empty(0, np.uint64), True: np.empty(0, np.uint64)}  # earlier programs': plain, atomic
        self.current: dict[bool, list] = {False: [], True: []}

    def wrote(self, program: tuple, pointers, mask, atomic: bool) -> None:
        import numpy as np

        if program != self.program:
            for kind, parts in self.current.items():
                if parts:
                    self.before[kind] = np.union1d(self.before[kind], np.concatenate(parts))
            self.current, self.program = {False: [], True: []}, program
        addresses = np.asarray(pointers, dtype=np.uint64).reshape(-1)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(pointers)).reshape(-1)]
        clash = np.isin(addresses, self.before[False])
        if not atomic:
            clash |= np.isin(addresses, self.before[True])
        if self.race is None and clash.any():
            self.race = self._where(int(addresses[clash][0]), program)
        self.current[atomic].append(addresses)

    def _where(self, address: int, program: tuple) -> dict:
        for name, start, end, size in self.ranges:
            if start <= address < end:
                return {"tensor": name, "element": (address - start) // size, "program": list(program)}
        return {"tensor": "memory", "element": address, "program": list(program)}

    def summary(self) -> dict:
        return {"kernel": self.kernel, "dots": self.dots, "race": self.race}


@contextlib.contextmanager
def watch_launches():
    """Within the block, every kernel launch that Triton's interpreter runs is recorded, in ``LaunchWatch.launches``,
    as ``{"kernel": name, "dots": how many tl.dot its programs ran, "race": None or {"tensor": argument name,
    "element": index, "program": the program that wrote it second}}``. A race is an element that two programs of
    one launch both write, one of them at least with a plain ``tl.store`` (two ``tl.atomic_add`` do not race): the
    interpreter runs programs one after another, so the last write wins quietly; a GPU runs them at the same time.

    Assignment 11 reads it to find a query gradient whose programs overwrite each other, and whether a causal
    kernel skips the tiles its mask removes whole (fewer ``tl.dot``). It wraps, for the block only, Triton's
    interpreter's launch (``GridExecutor.__call__``), its ``tl.dot``, store and atomics
    (``InterpreterBuilder.create_dot``, ``create_masked_store``, ``create_atomic_rmw``, ``create_atomic_cas``) and
    reads the running program's index (``interpreter_builder.grid_idx``), the same in triton 3.6 and 3.7."""
    interpreter = _interpreting_module()
    builder = getattr(interpreter, "InterpreterBuilder", None)
    names = ("create_dot", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if not (all(hasattr(builder, n) for n in names) and hasattr(getattr(interpreter, "GridExecutor", None), "__call__")
            and hasattr(interpreter, "interpreter_builder")):
        yield LaunchWatch(False)
        return
    watch = LaunchWatch(True)
    originals = {n: getattr(builder, n) for n in names}
    original_call = interpreter.GridExecutor.__call__

    def program() -> tuple:
        return tuple(getattr(interpreter.interpreter_builder, "grid_idx", None) or ())

    def call(self, *args, **kwargs):
        named = zip(list(self.arg_names)[:len(args)] + list(kwargs), list(args) + list(kwargs.values()))
        watch.now = _Writes(getattr(self.fn, "__name__", "a kernel"), [_span(n, t) for n, t in named if hasattr(t, "data_ptr")])
        try:
            return original_call(self, *args, **kwargs)
        finally:
            watch.launches.append(watch.now.summary())
            watch.now = None

    def create_dot(self, *args, **kwargs):
        if watch.now is not None:
            watch.now.dots += 1
        return originals["create_dot"](self, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        if watch.now is not None:
            watch.now.wrote(program(), ptrs.data, mask.data, atomic=False)
        return originals["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def create_atomic_rmw(self, operation, ptr, value, mask, *args, **kwargs):
        if watch.now is not None:
            watch.now.wrote(program(), ptr.data, None if mask is None else mask.data, atomic=True)
        return originals["create_atomic_rmw"](self, operation, ptr, value, mask, *args, **kwargs)

    def create_atomic_cas(self, ptr, *args, **kwargs):
        if watch.now is not None:
            watch.now.wrote(program(), ptr.data, None, atomic=True)
        return originals["create_atomic_cas"](self, ptr, *args, **kwargs)

    replaced = {"create_dot": create_dot, "create_masked_store": create_masked_store,
                "create_atomic_rmw": create_atomic_rmw, "create_atomic_cas": create_atomic_cas}
    for name, function in replaced.items():
        setattr(builder, name, function)
    interpreter.GridExecutor.__call__ = call
    try:
        yield watch
    finally:
        for name, function in originals.items():
            setattr(builder, name, function)
        interpreter.GridExecutor.__call__ = original_call


def _span(name: str, tensor) -> tuple[str, int, int, int]:
    """(name, first byte, end byte, element size) of a tensor argument: what a race's address is named by."""
    size = tensor.element_size()
    last = sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride())) if tensor.numel() else -1
    return name, tensor.data_ptr(), tensor.data_ptr() + (last + 1) * size, size


def _interpreting_module():
    """Triton's interpreter module, where kernels run in it (TRITON_INTERPRET set); else None."""
    if os.environ.get(INTERPRETER_VARIABLE, "0").strip().lower() not in _TRUE:
        return None
    try:
        from triton.runtime import interpreter
    except ImportError:
        return None
    return interpreter
