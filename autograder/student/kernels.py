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
its masked load (``InterpreterBuilder.create_masked_load``), the same in triton 3.6 and 3.7; compiled
kernels on a GPU are untouched.
"""

from __future__ import annotations

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


def guard_memory() -> bool:
    """Check every memory access of interpreted kernels from now on (idempotent); False where nothing
    is interpreted (a GPU), Triton is missing, or its interpreter is not the one this was written for."""
    if os.environ.get(INTERPRETER_VARIABLE, "0").strip().lower() not in _TRUE:
        return False
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    import numpy as np

    memory = getattr(interpreter, "_interpreter", None)
    if isinstance(memory, _CheckedMemory):
        return True
    if not all(hasattr(memory, name) for name in ("load", "store", "atomic_rmw", "atomic_cas")) or not hasattr(
            getattr(interpreter, "GridExecutor", None), "_init_args_hst"):
        return False  # a Triton whose interpreter is built otherwise (written for 3.6 and 3.7): unguarded
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
    return (f"out of bounds: {kernel} {verb} {elements} outside the tensors it was given, the first at element "
            f"{(address - start) // size:,} of `{name}` ({numel:,} elements). Offsets reach past a tensor when a "
            f"mask is missing or off by one (offsets <= n instead of offsets < n), when a stride or block offset is "
            f"wrong, or when a non-contiguous tensor is read as if it were contiguous.")


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
# Timing on a GPU (assignment 10, Exercise 6) and the reference records shipped with the course

# A record of the course's solution kernels, written by ``python -m autograder.authoring.kernel_timings``
# on a GPU; until one is shipped, the notebook shows the H200 measurement of a hand-written pair.
SOLUTION_RECORD = "kernels_cuda.json"
EVIDENCE_RECORD = "kernels_h200_hand_written_pair.json"


def time_bias_gelu(function, sizes, device="cuda", name: str = "your BiasGELU", repeats: int = 20,
                   calls: int = 10, blocks: int = 3) -> list[dict]:
    """Forward+backward of ``function(x, bias)`` (float32, rows of 1024) against the built-in F.gelu(x + bias),
    and ``copy_`` (forward), at each size: one row per variant and size.

    With 07's helpers (``autograder.student.timing``): the same workloads, calls and byte counts, and
    ``throughput_seconds`` both ways: ``latency_seconds`` is one call between two synchronised clock reads
    (median of ``repeats``), ``throughput_seconds`` ``calls`` calls back to back. ``fraction_of_copy_*``
    divides the achieved bandwidth (model bytes / time) by copy_'s at the same size. Torch's deterministic
    mode is off meanwhile (its NaN fill of new tensors would be timed too).
    """
    import torch

    from autograder.student import timing

    synchronize = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    variants = [timing.variant(timing.COPY), timing.variant("built-in F.gelu(x + bias)"),
                timing.Variant("bias_gelu", name, function)]
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    rows = []
    try:
        for elements in sizes:
            x, bias, grad_output = timing.workload_tensors(elements, device)
            measured = []
            for variant in variants:
                pass_ = "forward" if variant.workload == "copy" else "forward+backward"
                call = timing.timed_call(variant, x, bias, grad_output, pass_)
                call()  # compiles the kernels for this size before any clock starts
                synchronize()
                measured.append({"variant": variant.name, "pass": pass_, "elements": elements,
                                 "bytes": timing.model_bytes(variant, x, bias, pass_),
                                 "latency_seconds": timing.throughput_seconds(call, synchronize, 1, repeats),
                                 "throughput_seconds": timing.throughput_seconds(call, synchronize, calls, blocks)})
            copy = measured[0]
            for row in measured:
                for kind in ("latency", "throughput"):
                    row[f"fraction_of_copy_{kind}"] = (row["bytes"] / row[f"{kind}_seconds"]) / (
                        copy["bytes"] / copy[f"{kind}_seconds"])
            rows += measured
            del x, bias, grad_output
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return rows


def reference_timings(folder=None) -> dict:
    """The record Exercise 6 shows without a GPU: the solution kernels' if one is shipped, else the hand-written
    pair measured on an H200 (each says what was measured, on what, by which code)."""
    import json
    from pathlib import Path

    from autograder.student.timing import DATA_DIR

    folder = Path(folder or DATA_DIR)
    path = folder / SOLUTION_RECORD if (folder / SOLUTION_RECORD).is_file() else folder / EVIDENCE_RECORD
    return json.loads(path.read_text(encoding="utf-8"))


def plot_kernel_share(ax, record: dict, aim: float = 0.85) -> None:
    """The share of copy_'s bandwidth that a record's Triton kernels reach, by size (latency where it has both)."""
    rows = [r for r in record["rows"] if r["variant"] == record["kernels_variant"]]
    ax.semilogx([r["elements"] for r in rows], [r.get("fraction_of_copy", r.get("fraction_of_copy_latency")) for r in rows],
                marker="o", label=record["kernels_variant"])
    ax.axhline(aim, color="gray", ls=":", label=f"the solution's aim: {aim:.0%} of copy_")
    ax.set(xlabel="elements (float32)", ylabel="share of copy_'s bandwidth", ylim=(0, 1.05),
           title=f"forward+backward on {record['device_name']} (recorded)")
    ax.legend(fontsize=8)


def timing_lines(record: dict) -> list[str]:
    """A record's provenance and its forward+backward rows, as lines to print."""
    lines = [f"{record['what']}", f"measured on {record['device_name']} with torch {record['torch_version']}, "
             f"triton {record['triton_version']}, {record['date'][:10]} ({record['source']})"]
    for row in record["rows"]:
        if "latency_seconds" in row:
            lines.append(f"  {row['variant']:28} {row['elements']:>11,} elements: latency {row['latency_seconds'] * 1e6:8.1f} us "
                         f"({row['fraction_of_copy_latency']:4.0%} of copy_), throughput "
                         f"{row['throughput_seconds'] * 1e6:8.1f} us ({row['fraction_of_copy_throughput']:4.0%})")
        else:
            lines.append(f"  {row['variant']:28} {row['elements']:>11,} elements: {row['seconds'] * 1e6:8.1f} us "
                         f"({row['fraction_of_copy']:4.0%} of copy_)")
    return lines
