"""The values of a call's tensors, looked for in whatever form a Function keeps them (``kept``'s other half).

A Function that keeps its input outside ``save_for_backward`` need not keep a tensor: ``x.tolist()`` on ``ctx``,
``x.numpy().tobytes()`` in a closure, ``str(x.tolist())`` or ``float.hex`` strings in a module-level dict, numpy
scalars, a copy as a numpy array, the bits as integers. ``CallValues`` holds the values of a call's inputs and outputs
(every finite element that is not a whole number, by the tensor it comes from) and reads the numbers an object holds
itself (``numbers``) without running code of the student's (the builtin types' own methods, the buffer protocol);
``held`` says whose values a place's numbers carry: two of a tensor's values, or its one value, besides the numbers
the call was given.
"""

from __future__ import annotations

import collections
import re

import numpy
import torch

_VALUES = 100_000  # elements of each tensor of the call whose values are looked for
_TEXT = 1_000_000  # characters of a string, bytes of a bytes object, elements of an array read at most
_CLOSE = 1e-6  # a number within this relative distance of a value of the call is that value (a string may round it)
_NUMBER = re.compile(r"[-+]?0[xX][0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?[pP][-+]?\d+|[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


class CallValues:
    """The values of a call's tensors (its inputs and outputs) that a kept object may carry in another form: every
    element that is finite and not a whole number (the first ``_VALUES`` of each tensor), by the tensor it comes from;
    ``numbers(obj)`` reads the numbers an object holds itself, ``held(...)`` says whether they carry a tensor's
    values: two of them, or its one value."""

    def __init__(self, tensors: list[tuple[str, object]], others: list) -> None:
        found, origin, self.labels, self.need = [], [], [], []
        for label, tensor in tensors:
            try:
                flat = tensor.detach().reshape(-1)[:_VALUES].to("cpu", dtype=torch.float64).numpy()
            except (RuntimeError, TypeError, NotImplementedError):  # meta, complex, sparse: no values to look for
                continue
            flat = numpy.unique(flat[numpy.isfinite(flat) & (flat != numpy.round(flat))])
            if flat.size:
                found.append(flat)
                origin.append(numpy.full(flat.size, len(self.labels)))
                self.labels.append(label)
                self.need.append(min(2, flat.size))
        self.values = numpy.concatenate(found) if found else numpy.zeros(0)
        order = numpy.argsort(self.values, kind="stable")
        self.values = self.values[order]
        self.origin = numpy.concatenate(origin)[order] if found else numpy.zeros(0, dtype=int)
        self.others = [float(o) for o in others if isinstance(o, (int, float)) and not isinstance(o, bool)]

    def __bool__(self) -> bool:
        return bool(self.values.size)

    def numbers(self, obj) -> "numpy.ndarray | None":
        """The numbers ``obj`` holds itself, as float64 (a float, a numpy scalar or array, the bits of an integer,
        the numbers a string writes, the floats in a bytes object), or None."""
        kind = type(obj)
        if kind is bool or obj is None:
            return None
        if isinstance(obj, float):
            return numpy.array([float.__float__(obj)])
        if isinstance(obj, int):
            return _bits(numpy.array([int.__int__(obj)], dtype=object)) if abs(int.__int__(obj)) >= 2**32 else None
        if isinstance(obj, str):
            return _parsed(str.__str__(obj)[:_TEXT])
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return _reinterpreted(bytes(obj[:_TEXT]))
        if kind.__module__ == "numpy" and hasattr(kind, "dtype"):  # a numpy scalar or array
            try:
                array = numpy.asarray(obj).reshape(-1)[:_TEXT]
            except (TypeError, ValueError):
                return None
            if array.dtype.kind == "f":
                return array.astype(numpy.float64)
            if array.dtype.kind in "iu" and array.dtype.itemsize == 8:
                return array.view(numpy.float64)
            if array.dtype.kind in "SUO":
                return None
        return None

    def held(self, read: list) -> str | None:
        """Which tensor's values the numbers ``read`` (a list of ``numbers``' arrays) carry, in words, or None."""
        read = [r for r in read if r is not None and r.size]
        if not (read and self.values.size):
            return None
        candidates = numpy.concatenate(read)
        candidates = candidates[numpy.isfinite(candidates)]
        for other in self.others:  # (a number the call was given is not a value of its tensors)
            candidates = candidates[numpy.abs(candidates - other) > 1e-9 * abs(other)]
        right = numpy.searchsorted(self.values, candidates).clip(0, self.values.size - 1)
        left = (right - 1).clip(0)
        nearest = numpy.where(numpy.abs(self.values[left] - candidates) < numpy.abs(self.values[right] - candidates),
                              left, right)
        close = numpy.abs(self.values[nearest] - candidates) <= _CLOSE * numpy.abs(self.values[nearest])
        matched = numpy.unique(nearest[close])
        for k, label in enumerate(self.labels):
            if numpy.count_nonzero(self.origin[matched] == k) >= self.need[k]:
                return label
        return None


def _bits(integers) -> "numpy.ndarray":
    """Integers as the float64 numbers whose bits they are."""
    fits = [int(i) % 2**64 for i in integers]
    return numpy.array(fits, dtype=numpy.uint64).view(numpy.float64)


def _parsed(text: str) -> "numpy.ndarray":
    """The numbers a string writes, in decimal or as ``float.hex`` writes them."""
    found = []
    for token in _NUMBER.findall(text)[:_VALUES]:
        try:
            found.append(float.fromhex(token) if "x" in token.lower() else float(token))
        except (ValueError, OverflowError):
            pass
    return numpy.array(found, dtype=numpy.float64)


def _reinterpreted(data: bytes) -> "numpy.ndarray":
    """The float64 and float32 numbers whose bytes ``data`` holds (from its start)."""
    parts = [numpy.frombuffer(data[:len(data) // 8 * 8], dtype=numpy.float64),
             numpy.frombuffer(data[:len(data) // 4 * 4], dtype=numpy.float32).astype(numpy.float64)]
    return numpy.concatenate(parts)


def form_of(objects: list) -> str:
    """How kept values are held, in a student's words."""
    kinds = {type(o) for o in objects}
    if any(issubclass(k, (list, tuple, set, frozenset, collections.deque, dict)) for k in kinds):
        return "as numbers in a container"
    if all(issubclass(k, float) and k.__module__ == "builtins" for k in kinds):
        return "as Python floats"
    if any(issubclass(k, str) for k in kinds):
        return "written in a string"
    if any(issubclass(k, (bytes, bytearray, memoryview)) for k in kinds):
        return "as bytes"
    if any(issubclass(k, int) for k in kinds):
        return "as the bits of integers"
    if any(k.__module__ == "numpy" for k in kinds):
        return "as numpy numbers"
    return "in another form"
