"""A CPU stand-in for ``torch.cuda``'s graph API, so that code written for CUDA graphs runs, and is checked, anywhere.

``TOY_CUDA`` has the names CUDA-graph code uses from ``torch.cuda``: ``CUDAGraph`` (with ``replay``),
``graph`` (the capture context), ``Stream``, ``stream``, ``current_stream`` and ``synchronize``. A
function that takes ``cuda=torch.cuda`` runs with ``cuda=TOY_CUDA`` on a CPU and behaves as on a GPU
where it matters:

- capture records the operations run on tensors (a ``TorchDispatchMode``); every tensor made inside the
  capture holds NaN until the first replay, as if the work had not been done (it was, on the CPU, so an
  in-place change of a tensor made before the capture is done once more than on a GPU);
- ``replay()`` runs the recorded operations again on the same tensors, the static inputs as they are
  now, and writes each result into the memory of the tensor the capture made: a result kept from an
  earlier replay is overwritten, as a CUDA graph's output is;
- nothing else is different: no stream, no memory pool, no speed-up (the point of a real graph: one
  launch for all its kernels, instead of one per kernel, is a GPU's).
"""

from __future__ import annotations

import contextlib
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class ToyCUDAGraph:
    """Like ``torch.cuda.CUDAGraph``: filled by ``graph(g)``'s capture, run again by ``replay()``."""

    def __init__(self) -> None:
        self.operations: list[tuple] = []  # (op, args, kwargs, outputs) in the order they ran
        self.made: list[torch.Tensor] = []  # the tensors the capture made (not those an in-place op changed)
        self.replays = 0

    def replay(self) -> None:
        if not self.operations:
            raise RuntimeError("replay() of a graph that captured nothing")
        for op, args, kwargs, outputs in self.operations:
            results = tree_flatten(op(*args, **kwargs))[0]
            for made, result in zip(outputs, results):
                if isinstance(made, torch.Tensor) and not made._is_view():  # a view shares its base's memory
                    made.copy_(result)
        self.replays += 1


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: ToyCUDAGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        given = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = tree_flatten(result)[0]
        self.graph.operations.append((func, args, kwargs or {}, outputs))
        self.graph.made += [t for t in outputs if isinstance(t, torch.Tensor) and not any(t is g for g in given)]
        return result


@contextlib.contextmanager
def graph(cuda_graph: ToyCUDAGraph, pool=None, stream=None):
    """Like ``torch.cuda.graph``: operations inside are recorded into ``cuda_graph``, not done (their results hold
    NaN until the first ``replay``)."""
    if cuda_graph.operations:
        raise RuntimeError("this graph has captured already: make a new CUDAGraph() for another capture")
    with _Recorder(cuda_graph):
        yield cuda_graph
    for made in cuda_graph.made:
        if made.is_floating_point() and not made._is_view():
            made.fill_(float("nan"))


class Stream:
    """Like ``torch.cuda.Stream``: one queue of work (here there is only the CPU, which does the work at once)."""

    def wait_stream(self, other: "Stream") -> None:
        pass

    def synchronize(self) -> None:
        pass


_CURRENT = Stream()


@contextlib.contextmanager
def stream(s: Stream):
    yield s


TOY_CUDA = types.SimpleNamespace(CUDAGraph=ToyCUDAGraph, graph=graph, Stream=Stream, stream=stream,
                                 current_stream=lambda device=None: _CURRENT, synchronize=lambda device=None: None)
