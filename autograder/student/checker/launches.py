"""What a launcher does, seen as it runs: the Triton kernels it launches and what they write, and the torch operations
it runs outside them; and whether that keeps an exercise's contract (assignments 10 and 11).

A kernel exercise requires that its results be written by a Triton kernel the answer defines, the launcher only
allocating, reshaping, making contiguous and finishing what the exercise says it may (the last sum of partial sums).
A launcher that returns a given reference, or computes with torch, gives the right numbers without doing the
exercise, so the numbers alone cannot decide it. ``trace_launcher(function, args)`` runs ``function`` and records,
as plain data (``record``), every torch operation outside the kernels (a ``TorchDispatchMode``), every kernel launch
(Triton's interpreter's ``InterpretedFunction.run``: the kernel, whether an answer cell defined it, the tensors it
was given and those its stores and atomics reached) and torch operations inside a kernel other than the
interpreter's own copies. ``contract_problem`` judges a record: the lineage of each result, back through copies,
views, finishing operations and kernels, must start at a kernel of the answer's and meet no torch computation and no
data made outside torch (Python lists, NumPy arrays). In grading the examinee makes the record and the referee judges
it, with the requirement the test cell states: its failure reads "This exercise requires <requirement>, but <what the
code did>".
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

EVENTS = 2000  # a record keeps at most this many events (an honest launcher runs a few dozen)
ALLOCATING = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
              "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
              "scalar_tensor", "promote_types", "result_type", "arange"}  # what only allocates (or fills a constant)
COPYING = {"clone", "_to_copy", "copy_", "contiguous", "_copy_from", "_copy_from_and_resize", "detach_copy",
           "lift_fresh_copy"}  # what copies its input's values, in another layout or dtype
INTERPRETERS = {"new_empty", "set_", "empty", "copy_"}  # what Triton's interpreter runs inside a launch (its copies)
LIBRARIES = (os.path.dirname(os.path.dirname(torch.__file__)) + os.sep,  # site-packages: torch, triton, ...
             os.path.dirname(__import__("autograder").__file__) + os.sep)  # the course's own package


def trace_launcher(function, args) -> tuple[dict, object]:
    """(``function``'s record, its result or the exception it raised) for ``function(*args)``: see the module's
    docstring. ``args`` are used as given (the caller copies them)."""
    tracer = _Tracer()
    for position, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            tracer.arguments.append(tracer.sid(value))
        else:
            tracer.arguments.append(None)
    try:
        with _launches_seen(tracer), tracer:
            result = function(*args)
    except Exception as error:  # noqa: BLE001 - the student's code failed: the caller says how
        return tracer.record(None), error
    return tracer.record(result), result


class _Tracer(TorchDispatchMode):
    """The events of one call: torch operations (outside and inside kernels) and kernel launches, storages numbered."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.arguments: list = []
        self.storages: dict[int, int] = {}  # a storage's address -> its number
        self.alive: list = []  # the storages seen, kept alive while the call runs (no address is reused meanwhile)
        self.kernel: str | None = None  # the kernel running now
        self.written: set[int] = set()  # the addresses (first, last) of what the running kernel stored
        self.largest = 0  # the most elements of a tensor made outside the kernels

    def sid(self, tensor) -> int | None:
        """The number of ``tensor``'s storage (None for one without elements)."""
        if tensor.numel() == 0:
            return None
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address not in self.storages:
            self.storages[address] = len(self.storages)
            self.alive.append(storage)
        return self.storages[address]

    def add(self, event: dict) -> None:
        if len(self.events) < EVENTS:
            self.events.append(event)
        elif self.events[-1].get("op") != "...":
            self.events.append({"op": "...", "class": "truncated", "reads": [], "writes": []})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if self.kernel is not None:
            if name not in INTERPRETERS:
                self.add({"inside": str(func), "kernel": self.kernel})
            return out
        written = [a for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        values = dict(zip([a.name for a in func._schema.arguments], args)) | (kwargs or {})
        mutated = [values.get(a.name) for a in written]
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        read = [t for t in inputs if not any(t is m for m in mutated)]
        shared = {self.sid(t) for t in inputs}
        made = [t for t in outputs if self.sid(t) not in shared]  # (a view shares its input's storage)
        for t in made:
            self.largest = max(self.largest, t.numel())
        if func.is_view or (not made and not mutated):
            return out  # a view, or what reads only (its result is a Python value): nothing is written
        kind = ("allocates" if name in ALLOCATING else "copies" if name in COPYING else "computes")
        self.add({"op": str(func), "class": kind, "reads": [s for s in map(self.sid, read) if s is not None],
                  "writes": sorted({s for s in map(self.sid, made + [m for m in mutated
                                                                    if isinstance(m, torch.Tensor)]) if s is not None})})
        return out

    def record(self, result) -> dict:
        leaves = result if isinstance(result, (tuple, list)) else [result]
        return {"arguments": self.arguments, "events": self.events, "largest": self.largest,
                "results": [self.sid(r) if isinstance(r, torch.Tensor) else None for r in leaves]}


def _answer_kernel(function) -> bool:
    """Whether a kernel's Python function comes from an answer: in grading, a cell the examinee runs as an answer;
    in a notebook, any cell (the notebook's given cells and answers look alike there)."""
    filename = getattr(getattr(function, "__code__", None), "co_filename", "")
    if filename.startswith("<answer"):
        return True
    return not filename.startswith("<given") and not filename.startswith(LIBRARIES)


@contextlib.contextmanager
def _launches_seen(tracer: _Tracer):
    """Within the block every launch that Triton's interpreter runs is an event of ``tracer``: its kernel, whether an
    answer defined it, the storages of the tensors it was given and of those its stores and atomics reached."""
    interpreter = _interpreter()
    if interpreter is None:
        yield
        return
    run, builder = interpreter.InterpretedFunction.run, interpreter.InterpreterBuilder
    stores = {name: getattr(builder, name) for name in ("create_masked_store", "create_atomic_rmw", "create_atomic_cas")}

    def launch(self, *args, grid, warmup, **kwargs):
        if warmup or tracer.kernel is not None:  # (a launch inside a launch: the interpreter's own business)
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        tensors = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        reads = [s for s in (tracer.sid(t) for t in tensors) if s is not None]
        spans = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes(), tracer.sid(t)) for t in tensors
                 if t.numel()]
        tracer.kernel, tracer.written = self.fn.__name__, set()
        try:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            kernel, tracer.kernel = tracer.kernel, None
            writes = sorted({sid for first, last in tracer.written for start, size, sid in spans
                             if start <= first < start + size or start <= last < start + size})
            names = [str(n) for n in getattr(self, "arg_names", [])][:24]
            tracer.add({"launch": kernel, "answer": _answer_kernel(self.fn), "reads": reads, "writes": writes,
                        "blocks": [n for n in names if n.isupper()], "parameters": names})

    def seen(name):
        original = stores[name]

        def wrapped(self, *args, **kwargs):
            if tracer.kernel is not None:
                # create_masked_store(ptrs, value, mask), create_atomic_rmw(op, ptr, value, mask), create_atomic_cas(ptr, ...)
                pointers, mask = ((args[0], args[2]) if name == "create_masked_store" else
                                  (args[1], args[3]) if name == "create_atomic_rmw" else (args[0], None))
                _written(tracer, pointers.data, getattr(mask, "data", None))
            return original(self, *args, **kwargs)

        return wrapped

    interpreter.InterpretedFunction.run = launch
    for name in stores:
        setattr(builder, name, seen(name))
    try:
        yield
    finally:
        interpreter.InterpretedFunction.run = run
        for name, original in stores.items():
            setattr(builder, name, original)


def _written(tracer: _Tracer, pointers, mask) -> None:
    """Note the first and last address a store or atomic reached (its lanes that the mask leaves on)."""
    import numpy as np

    addresses = np.asarray(pointers, dtype=np.uint64).reshape(-1)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(pointers)).reshape(-1)]
    if addresses.size:
        tracer.written.add((int(addresses.min()), int(addresses.max())))


def _interpreter():
    """Triton's interpreter module where kernels run in it (``TRITON_INTERPRET`` set), else None."""
    from autograder.student.kernels import _interpreting_module

    module = _interpreting_module()
    if module is None or not all(hasattr(module, n) for n in ("InterpretedFunction", "InterpreterBuilder")):
        return None
    return module


# --------------------------------------------------------------------------------------------
# The judgement: where each result comes from


def contract_problem(name: str, record: dict, requirement: str, outputs=(), finishing=()) -> str | None:
    """Why ``record`` (``trace_launcher``'s, of ``name``) breaks the contract, in the form "This exercise requires
    <requirement>, but <what name did>", or None. ``outputs`` name the results (``y``, ``mean``); ``finishing``
    names the torch operations the exercise lets the launcher apply to what its kernels wrote (``sum``)."""
    what = _broken(name, record, tuple(outputs), {str(f) for f in finishing})
    return f"This exercise requires {requirement}, but {what}" if what else None


def _broken(name: str, record: dict, outputs: tuple, finishing: set) -> str | None:
    events = [e for e in record.get("events", []) if isinstance(e, dict)]
    inside = sorted({str(e["inside"]) for e in events if "inside" in e})
    if inside:
        return f"{name} runs torch inside a kernel ({', '.join(inside[:3])}): a kernel computes with tl.* only"
    launches = [e for e in events if "launch" in e]
    origin = _lineage(record, events, finishing)
    results = list(record.get("results", []))
    labels = [outputs[k] if k < len(outputs) else ("its result" if len(results) == 1 else f"its output {k + 1}")
              for k in range(len(results))]
    for label, sid in zip(labels, results):
        if sid is None:
            continue
        made = origin(sid)
        if made["torch"]:
            where = "" if launches else " and launches no Triton kernel"
            return f"{name} computes {label}, or what its kernels read, with torch ({', '.join(made['torch'][:4])}){where}"
        if made["outside"]:
            return (f"{name} hands its kernels, or returns as {label}, data made outside torch and the kernels (a "
                    f"tensor from Python or NumPy values)")
        if not made["kernel"]:
            if not launches:
                return f"{name} launches no Triton kernel: {label} is {made['source']}"
            return f"no kernel of your answer writes {label}: it is {made['source']}"
    return None


def _lineage(record: dict, events: list, finishing: set):
    """A function of a storage's number: where its values came from, as ``{"kernel": written by an answer's kernel
    (through copies and finishing operations), "torch": the torch computations they passed through, "outside": data
    made outside torch, "source": what it is otherwise, in words}``."""
    arguments = {sid: k for k, sid in enumerate(record.get("arguments", [])) if sid is not None}
    writer: dict[int, int] = {}  # a storage -> the event that last wrote it, before event i
    before: list[dict[int, int]] = []
    for i, event in enumerate(events):
        before.append(dict(writer))
        for sid in event.get("writes", []):
            writer[sid] = i
    done: dict = {}

    def of(sid: int, at: dict) -> dict:
        i = at.get(sid)
        key = (sid, i)
        if key in done:
            return done[key]
        done[key] = {"kernel": False, "torch": [], "outside": False, "source": "being traced"}  # (no cycles)
        if i is None:
            found = ({"kernel": False, "torch": [], "outside": False, "source": f"a copy of argument {arguments[sid] + 1}"}
                     if sid in arguments else {"kernel": False, "torch": [], "outside": True, "source": "data from outside"})
        else:
            found = _event_origin(events[i], [of(s, before[i]) for s in events[i].get("reads", [])], finishing)
        done[key] = found
        return found

    return lambda sid: of(sid, writer)


def _event_origin(event: dict, inputs: list[dict], finishing: set) -> dict:
    torch_ops = sorted({op for i in inputs for op in i["torch"]})
    outside = any(i["outside"] for i in inputs)
    if "launch" in event:
        return {"kernel": bool(event.get("answer")), "torch": torch_ops, "outside": outside,
                "source": f"written by {event['launch']}, " + ("a kernel of your answer" if event.get("answer")
                                                               else "a kernel the notebook gives, not your answer's")}
    op, kind = str(event.get("op")), event.get("class")
    if kind == "allocates":
        return {"kernel": False, "torch": [], "outside": False, "source": f"allocated ({op}) and never written by a kernel"}
    if kind == "truncated":
        return {"kernel": False, "torch": ["more than the record holds"], "outside": False, "source": "unknown"}
    kernel = any(i["kernel"] for i in inputs)
    if kind == "copies" or (_base(op) in finishing and kernel):
        source = inputs[0]["source"] if inputs else f"made by {op}"
        return {"kernel": kernel, "torch": torch_ops, "outside": outside, "source": source}
    return {"kernel": kernel, "torch": sorted(set(torch_ops) | {op}), "outside": outside, "source": f"computed by {op}"}


def _base(op: str) -> str:
    """``aten.sum.dim_IntList`` -> ``sum``."""
    parts = op.split(".")
    return parts[1] if len(parts) > 1 else op


def kernels_launched(record: dict) -> list[dict]:
    """The launches of a record: ``{"launch": kernel, "answer": bool, "blocks": its upper-case parameters, ...}``."""
    return [e for e in record.get("events", []) if isinstance(e, dict) and "launch" in e]
