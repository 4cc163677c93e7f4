"""Whether a Function's forward or backward used autograd to get its gradient, whatever the path.

A backward that hands a recomputed forward back to autograd derives nothing: ``torch.autograd.grad``,
``.backward()``, ``torch.autograd.Variable._execution_engine.run_backward``, ``torch._C``'s engine,
``torch.func.grad`` or ``vjp``, calling a graph node directly, or forward-mode AD (``torch.func.jvp``,
``forward_ad.make_dual``). Patching one Python function (as the checker does in the student's own
process) misses the others. What every one of them has in common is visible to torch's profiler:
each graph node that runs records an event of the ``BACKWARD_FUNCTION`` scope (``PowBackward0``),
whoever ran it, and forward-mode AD records ``aten::_make_dual``. So the examinee
(``autograder.grading.running.judging.examinee``) runs the student's forward and the engine's backward pass
under the profiler: during forward no node may run, and during backward only the nodes of the graph
the check built (the student's own node, and the copies an in-place check makes), each once.
Torch's own derivative kernels (``aten::softplus_backward``) count too. ``tests/grading/test_examinee.py``
pins these facts on the installed torch, path by path. The examinee also runs each answer cell under a ``Watch``
(no node may run then): an exercise that requires a derived backward (``requires(..., autograd=False)``) fails
where a cell that shares state with it ran autograd, as a derivative fitted at cell time would.

The profiler records the thread that started it: in the examinee no other thread or process can start
(``autograder.grading.running.confinement.one_thread``), so it sees everything an answer runs. A ``Watch``
keeps its state in slots (no attribute can be added to it, ``found`` cannot be shadowed) and opens its
record with a marker of a random name: a record without it is one the profiler did not take whole (an
answer that stopped it and started another), and says so.
"""

from __future__ import annotations

import secrets
from collections import Counter

import torch
from torch._C._profiler import RecordScope

_profile = torch.autograd.profiler.profile  # bound before any student code runs
_record = torch.autograd.profiler.record_function
BACKWARD_SCOPE = int(RecordScope.BACKWARD_FUNCTION.value)
FORWARD_AD = ("aten::_make_dual", "aten::_unpack_dual")


ROOT = "torch::autograd::GraphRoot"  # the node a backward pass from several outputs starts from


def graph_nodes(outputs) -> Counter:
    """The names of the graph nodes behind ``outputs``, each once, and the root the engine adds to a pass from
    several outputs: what one backward pass may run."""
    seen, todo = {}, [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node.name()
        todo += [next_node for next_node, _ in node.next_functions]
    return Counter(seen.values()) + (Counter({ROOT: 1}) if seen else Counter())


class Watch:
    """``with Watch() as watch:`` records what ran; ``watch.found(allowed)`` says how autograd was used, if it was."""

    __slots__ = ("profile", "marker")

    def __enter__(self) -> "Watch":
        self.marker = f"autograder-watch-{secrets.token_hex(8)}"
        self.profile = _profile()
        self.profile.__enter__()
        with _record(self.marker):
            pass
        return self

    def __exit__(self, *exc) -> None:
        self.profile.__exit__(*exc)

    def found(self, allowed: Counter) -> str | None:
        """What ran beyond the ``allowed`` graph nodes, in words, or None."""
        events = self.profile.function_events
        if not any(e.name == self.marker for e in events):
            return "the profiler was stopped while it ran (its record is not whole)"
        ran = Counter(e.name for e in events if e.scope == BACKWARD_SCOPE) - allowed
        if ran:
            return f"autograd ran {', '.join(sorted(ran))}"
        dual = next((e.name for e in events if e.name in FORWARD_AD), None)
        if dual:
            return f"forward-mode AD ran ({dual})"
        kernel = next((e.name for e in events if e.name.startswith("aten::") and "_backward" in e.name), None)
        if kernel:
            return f"torch's own derivative {kernel} ran"
        return None
