"""The scan of answer cells (autograder.grading.running.judging.scan): what the course's answers need passes; what
reaches the interpreter, the grader or torch's internals is refused, naming the construct and its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.course import Course
from autograder.grading.running.judging import scan
from conftest import REPO, nbgrader_meta, read_notebook


def answer_cells(path: Path) -> dict[str, str]:
    return {nbgrader_meta(c)["grade_id"]: "".join(c["source"]) for c in read_notebook(path)["cells"]
            if c["cell_type"] == "code" and nbgrader_meta(c).get("solution")}


def notebooks() -> list[Path]:
    demo = sorted((REPO / "autograder" / "grading" / "demo").glob("*/*/*.ipynb"))
    readable = []
    for path in demo:
        try:
            read_notebook(path)
            readable.append(path)
        except ValueError:  # gus: a broken upload, not a notebook
            pass
    return sorted((REPO / "solutions").glob("*/*.ipynb")) + readable


def test_no_solution_and_no_answer_of_the_demo_class_is_refused():
    paths = notebooks()
    assignments = len(Course(REPO).assignments())  # every assignment's solutions, and the demo class's 8 readable
    assert len([p for p in paths if "solutions" in p.parts]) == assignments and len(paths) == assignments + 8
    refused = {(p.parent.name, grade_id): scan.problems(source)
               for p in paths for grade_id, source in answer_cells(p).items() if scan.problems(source)}
    assert refused == {}
    assert sum(len(answer_cells(p)) for p in paths) > 60


@pytest.mark.parametrize("source, found", [
    ("import os", "line 1: importing `os`"),
    ("import torch\nimport autograder.grading.running.judging.answer as a", "line 2: importing `autograder.grading.running.judging.answer`"),
    ("from torch._C import _EngineBase", "line 1: importing `torch._C`"),
    ("y = eval('1')", "line 1: `eval`"),
    ("m = torch.load('model.pt')", "line 1: `load`"),
    ("tl = torch\nm = tl.load('model.pt')", "line 2: `load`"),
    ("import numpy as np\na = np.load('a.npy', allow_pickle=True)", "line 2: `load`"),
    ("import sys\nsys.exit()", "line 2: `sys` (other than sys.stdout and sys.stderr)"),
    ("g = globals()", "line 1: `globals`"),
    ("e = getattr(torch.autograd.Variable, '_execution' + '_engine')", "line 1: `getattr` with an attribute name"),
    ("e = getattr(torch.autograd.Variable, '_execution_engine')", "line 1: `getattr` with an attribute name"),
    ("f = getattr\ne = f(torch, 'x')", "line 1: `getattr`"),
    ("r = torch.autograd.Variable._execution_engine.run_backward", "line 1: `_execution_engine`"),
    ("r = torch._C._ImperativeEngine()", "line 1: `_C`"),
    ("import torch.autograd.profiler as p", "line 1: importing `torch.autograd.profiler`"),
    ("code = Cube.backward.__code__", "line 1: the special attribute `__code__`"),
    ("k = ().__class__.__mro__[1].__subclasses__()", "line 1: the special attribute `__class__`"),
    ("b = __builtins__", "line 1: the special name `__builtins__`"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    f = e.__traceback__.tb_frame.f_back",
     "line 4: `f_back`"),
    ("stack = inspect.stack()", "line 1: `inspect`"),
    ("m = torch.nn.modules.module.sys.modules", "line 1: `sys`"),
    ("class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        return 1",
     "line 3: the special method `__torch_function__`"),
    ("class A(metaclass=type):\n    pass", "line 1: a metaclass"),
    ("v = x._version", "line 1: the private attribute `_version`"),
    ("class Cube(torch.autograd.Function):\n    pass\nCube._backward_cls = None", "line 3: the private attribute `_backward_cls`"),
    ("torch.allclose = lambda *a, **k: True", "line 1: changing `torch.allclose`, which the answer did not make"),
    ("F.gelu = torch.relu", "line 1: changing `F.gelu`"),
    ("CONSTANTS['levels'] = 2", "line 1: changing `CONSTANTS['levels']`"),
    ("with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):\n    pass", "line 1: `saved_tensors_hooks`"),
    ("h = torch.hub.load('.', 'model', source='local')", "line 1: `hub`"),
    ("lib = torch.library.Library('aten', 'IMPL')", "line 1: `Library`"),
])
def test_each_construct_that_reaches_the_grader_or_torchs_internals_is_refused_with_its_line(source, found):
    problems = scan.problems(source)
    assert any(p.startswith(found) for p in problems), problems


def test_the_answers_own_things_pass():
    source = '''
import math
import torch.nn.functional as F
from functools import partial

class Layer(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self._scale = torch.nn.Parameter(torch.ones(n))
        self.__doc__ = "a layer"

    def forward(self, x):
        y = x.clone()
        y[0] = getattr(self, "_scale")[0] * math.pi
        return F.relu(y * self._scale)

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.shape = x.shape
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x ** 2

Cube.__name__

@triton.jit
def double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    y = triton.language.load(x_ptr + offsets, mask=offsets < n)
    tl.store(x_ptr + offsets, x + y, mask=offsets < n)
'''
    assert scan.problems(source) == []


def test_a_refusal_names_the_cell_and_what_it_uses():
    message = scan.refusal("cube", scan.problems("import os\nx = eval('1')"))
    assert message.startswith("the grader did not run your answer cell 'cube': it uses line 1: importing `os`")
    assert "line 2: `eval`" in message
