"""The scan of answer cells (autograder.grading.running.judging.scan): what an answer names must be on the
allow-list (``judging/allowed.py``); everything else is refused, naming what it used and its line.

What it costs honest students is measured on three sets, each scanned as the grader scans it (through
``examinee.program``, with what the notebook's given cells bind): every solution cell of every assignment,
every answer of the demo class, and a corpus of honest answers (``tests/grading/honest_answers/``).

How the corpus was built: for every exercise (grade id) of every assignment, one to four answers written by
hand, as students and published code write Functions, not copied from the solutions. The styles come from
reading published code: the 15 Functions of torch's ``torch/testing/_internal/autograd_function_db.py``
(setup_context with ``inputs[0]``, ``save_for_forward(*inputs)``, ``vmap`` with ``info.batch_size``,
``new_zeros(ctx.x_shape)``, a class attribute read through the class, ``@once_differentiable``), the
memory-efficient Swish Functions of timm, EfficientNet-PyTorch and mmdetection (``ctx.saved_variables[0]``,
``x.mul(...)``, ``super(Cls, self).__init__()``, a parameter named ``input``), torch's "Extending PyTorch"
Linear and MulConstant, torch.library's custom_op tutorial (``register_fake`` and ``register_autograd`` by
name and as methods), and Triton's tutorials (matmul with ``tl.dot`` and ``autotune``, fused softmax,
layer norm: ``x_ptr.dtype.element_ty``, ``tl.range``, masks, the partial sums added up by a kernel of their
own; fused attention: block pointers and ``tl.advance``, ``exp2`` with log2(e) folded in, keys loaded
transposed, helper ``@triton.jit`` functions). Each file marks a cell with ``# %% <grade id>``;
``extra_triton_styles.py`` holds Triton and torch.library code in styles no assignment's answers use
(``tl.dot`` with ``autotune``, a fused linear operator), scanned with the course's usual imports. The
answers are right, not only allowed: once, by hand (2026-11-27), each of 01-10's was put in its
assignment's solution notebook (the k-th answer of every exercise in the k-th notebook, 27 notebooks) and
judged by ``check`` as ``grade`` judges: full marks in all 27, after ten answers that lost points were
corrected; each of 11's 14 answers alone in place of its exercise's solution cell (14 notebooks, then the
first and the second answers of every exercise together, 2 more): full marks in all, after two that lost
points were corrected (``tl.dot(p, v, acc)`` into a float64 ``acc`` without ``out_dtype``; log2(e)
multiplied into the kernel's float ``scale`` argument, a float32 scalar, rather than into the float64
scores, which the float64 checks find). The extra cells' kernels matched torch on Triton's CPU interpreter
(their ``autotune``, which needs a GPU, was not run).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from autograder.course import Course
from autograder.grading.running.judging import examinee, scan
from autograder.grading.running.judging.referee import trusted_cells
from conftest import REPO, nbgrader_meta, read_notebook

CORPUS = Path(__file__).parent / "honest_answers"
# What the scans must cover: an assignment, a notebook or an answer that they skip by mistake shows as a count
# that is off. (The guarantees state these numbers: test_the_numbers_the_guarantees_state_are_the_ones_measured_here.)
ASSIGNMENTS, SOLUTION_CELLS, DEMO_NOTEBOOKS, DEMO_ANSWERS = 11, 54, 8, 8 * 4
HONEST_ANSWERS = 107


def answer_cells(path: Path) -> dict[str, str]:
    return {nbgrader_meta(c)["grade_id"]: "".join(c["source"]) for c in read_notebook(path)["cells"]
            if c["cell_type"] == "code" and nbgrader_meta(c).get("solution")}


def solution(assignment: str) -> Path:
    return REPO / "solutions" / assignment / f"{assignment}.ipynb"


def refused(assignment: str, answers: dict[str, str]) -> dict[str, str]:
    """The grader's scan of ``answers`` (grade id -> source) in ``assignment``'s notebook: grade id -> why refused."""
    cells = [{"cell_type": "code", "answer_id": grade_id, "source": source} for grade_id, source in answers.items()]
    steps = scan.screen(examinee.program(trusted_cells(read_notebook(solution(assignment))), cells))
    assert {s["grade_id"] for s in steps if s["kind"] == "answer" and s["source"] is not None} | \
        {s["grade_id"] for s in steps if s.get("refused")} == set(answers)
    return {s["grade_id"]: s["why"] for s in steps if s.get("refused")}


def demo_notebooks() -> list[Path]:
    readable = []
    for path in sorted((REPO / "autograder" / "grading" / "demo").glob("*/*/*.ipynb")):
        try:
            read_notebook(path)
            readable.append(path)
        except ValueError:  # gus: a broken upload, not a notebook
            pass
    return readable


def corpus() -> list[tuple[str, str, str]]:
    """(file's assignment, grade id, source) for every cell of the honest corpus."""
    cells = []
    for path in sorted(CORPUS.glob("*.py")):
        chunks = re.split(r"^# %% (\S+)\n", path.read_text(), flags=re.M)
        cells += [(path.stem, grade_id, source) for grade_id, source in zip(chunks[1::2], chunks[2::2])]
    return cells


def test_no_solution_and_no_answer_of_the_demo_class_is_refused():
    assignments = Course(REPO).assignments()
    scanned = 0
    for assignment in assignments:
        answers = answer_cells(solution(assignment))
        assert refused(assignment, answers) == {}, assignment
        scanned += len(answers)
    demo = demo_notebooks()
    assert len(demo) == DEMO_NOTEBOOKS
    for path in demo:
        answers = answer_cells(path)
        assert refused(path.parent.parent.name, answers) == {}, path
        scanned += len(answers)
    assert (len(assignments), scanned) == (ASSIGNMENTS, SOLUTION_CELLS + DEMO_ANSWERS)


def test_every_answer_of_the_honest_corpus_passes_and_it_answers_every_exercise():
    cells = corpus()
    by_assignment: dict[str, list[tuple[str, str]]] = {}
    for assignment, grade_id, source in cells:
        ast.parse(source)  # real Python: a cell that is not would pass the scan for nothing
        by_assignment.setdefault(assignment, []).append((grade_id, source))
    problems = {}
    for assignment, answers in by_assignment.items():
        if solution(assignment).is_file():
            for grade_id, source in answers:  # one at a time: a grade id has several answers
                problems.update({f"{assignment}/{grade_id}: {k}": v for k, v in refused(assignment, {grade_id: source}).items()})
        else:  # no assignment's (extra_triton_styles): the course's usual imports
            problems.update({f"{assignment}/{grade_id}": scan.problems(source) for grade_id, source in answers
                             if scan.problems(source)})
    assert problems == {}
    exercises = {(a, g) for a in Course(REPO).assignments() for g in answer_cells(solution(a))}
    assert exercises <= {(a, g) for a, g, _ in cells}  # every exercise of every assignment has honest answers
    assert len(cells) == HONEST_ANSWERS and len(exercises) == SOLUTION_CELLS


def problems_of(source: str, given: str = "") -> list[str]:
    known = scan.Known.course().given(given) if given else None
    return scan.problems(source, known)


# Each: the answer's source, then the start of what the scan must say (what is refused, and its line).
HOSTILE = [
    # The three seen from outside (issue 39).
    ('import typing\ndef f(a: "__import__(\'os\').system(\'id\')"):\n    pass\ntyping.get_type_hints(f)',
     "line 2: a string in an annotation"),
    ('import typing\ndef f(a: "x"):\n    pass\nhints = typing.get_type_hints(f)', "line 4: `typing.get_type_hints`"),
    ('from torch.utils.benchmark import Timer\nt = Timer(stmt="print(1)")', "line 1: importing `torch.utils.benchmark.Timer`"),
    ("t = torch.utils.benchmark.Timer(stmt='1').timeit(1)", "line 1: `torch.utils`"),
    ("i = torch.functional.operator.attrgetter('__self__')(print).__import__", "line 1: `torch.functional`"),
    # Strings that would become code or an attribute.
    ("from __future__ import annotations", "line 1: `from __future__ import ...`"),
    ("from typing import Optional\ndef f(x) -> Optional['Tensor']:\n    return x", "line 2: a string in an annotation"),
    ("y = '{0.__class__.__mro__}'.format(x)", "line 1: a format string whose fields name attributes or indexes"),
    ("y = '{x[0]}'.format_map(d)", "line 1: a format string whose fields name attributes or indexes"),
    ("y = '{0:{1.real}}'.format(x, z)", "line 1: a format string whose fields name attributes or indexes"),
    ("y = text.format(x)", "line 1: `.format` other than on a string written out"),
    ("y = str.format('{0.__class__}', x)", "line 1: `.format` other than on a string written out"),
    ("import operator\ng = operator.attrgetter('f_globals')(f)", "line 2: `operator.attrgetter`"),
    ("a = getattr(x, '__glo' + 'bals__')", "line 1: `getattr` with an attribute name that is not written out"),
    ("import functools\nc = functools.reduce(getattr, ['real'], x)", "line 2: `getattr` with an attribute name"),
    ("T = type(Cube)('X', (torch.Tensor,), {'__torch_function__': f})", "line 1: `type` other than for type(x).__name__"),
    ("d = {'__torch_function__': f}", "line 1: a string naming the special attribute `__torch_function__`"),
    ("d = dict(__reduce__=f)", "line 1: the keyword argument `__reduce__`"),
    ("import typing\nr = typing.ForwardRef('x')", "line 2: `typing.ForwardRef`"),
    ("import dataclasses\nC = dataclasses.make_dataclass('C', ['a'])", "line 2: `dataclasses.make_dataclass`"),
    ("cu = torch.jit.CompilationUnit('def f(x): return x')", "line 1: `torch.jit`"),
    ("k = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.int32, is_pure=True, pack=1)",
     "line 1: `triton.language.inline_asm_elementwise`"),
    # The interpreter through attributes: frames, code, tracebacks, classes.
    ("g = (i for i in [])\nf = g.gi_frame.f_back.f_globals", "line 2: the attribute `gi_frame`"),
    ("class A:\n    def __init__(self):\n        self.gi_frame = 1\ng = (i for i in [1])\nf = g.gi_frame",
     "line 5: the attribute `gi_frame`"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    f = e.__traceback__.tb_frame", "line 4: the special attribute `__traceback__`"),
    ("k = ().__class__.__base__.__subclasses__()", "line 1: `__class__` other than for x.__class__.__name__"),
    ("s = print.__self__", "line 1: the special attribute `__self__`"),
    ("b = __builtins__", "line 1: the special name `__builtins__`"),
    ("code = Cube.backward.__code__", "line 1: the special attribute `__code__`"),
    ("x.__dict__['a'] = 1", "line 1: changing `x.__dict__['a']`, which the answer did not make"),
    ("class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        return 1",
     "line 3: the special method `__torch_function__`"),
    ("class A(metaclass=type):\n    pass", "line 1: a metaclass"),
    ("match x:\n    case torch.Tensor(grad_fn=g):\n        pass", "line 2: the attribute `grad_fn`"),
    # Modules reached through attribute chains, or used as values.
    ("a = np.ctypeslib.as_array(p)", "line 1: `numpy.ctypeslib`"),
    ("a = np.lib.format.read_array(f)", "line 1: `numpy.lib`"),
    ("e = torch._C._ImperativeEngine()", "line 1: `torch._C`"),
    ("m = torch.nn\ns = m.modules.module.sys", "line 1: the module `torch.nn` used as a value"),
    ("m = torch.nn.modules.module.sys.modules", "line 1: `torch.nn.modules`"),
    ("import numpy\nf(numpy)", "line 2: the module `numpy` used as a value"),
    ("c = triton.language.extra.cuda", "line 1: `triton.language.extra`"),
    ("e = torch.cuda.jiterator._create_jit_fn('x')", "line 1: `torch.cuda.jiterator`"),
    ("torch.utils.data.dataloader.python_multiprocessing.current_process().daemon = False", "line 1: `torch.utils`"),
    ("import sys\nm = sys.modules['os']", "line 2: `sys.modules`"),
    ("objs = gc.get_objects()", "line 1: `gc.get_objects`"),  # gc, as 02's given cells import it
    # What the checks measure, files, threads, compiling, torch's own operators.
    ("n = x.grad_fn.next_functions", "line 1: the attribute `grad_fn`"),
    ("h = x.register_hook(lambda g: g * 0)", "line 1: the attribute `register_hook`"),
    ("with torch.autograd.graph.saved_tensors_hooks(f, g):\n    pass", "line 1: `torch.autograd.graph`"),
    ("r = torch.autograd.Variable._execution_engine.run_backward", "line 1: the private attribute `_execution_engine`"),
    ("v = x._version", "line 1: the private attribute `_version`"),
    ("class Cube(torch.autograd.Function):\n    pass\nCube._backward_cls = None", "line 3: the private attribute `_backward_cls`"),
    ("s = x.untyped_storage()", "line 1: the attribute `untyped_storage`"),
    ("p = a.ctypes.data", "line 1: the attribute `ctypes`"),
    ("m = torch.load('model.pt')", "line 1: `torch.load`"),
    ("a = np.load('a.npy', allow_pickle=True)", "line 1: `numpy.load`"),
    ("f = open('/etc/passwd')", "line 1: `open`"),
    ("y = eval('1')", "line 1: `eval`"),
    ("g = torch.compile(f, backend='eager')", "line 1: `torch.compile`"),
    ("torch.set_num_threads(8)", "line 1: `torch.set_num_threads`"),
    ("import threading", "line 1: importing `threading`"),
    ("import torch\nimport autograder.grading.running.judging.answer as a",
     "line 2: importing `autograder.grading.running.judging.answer`"),
    ("torch.library.register_kernel('aten::mul.Tensor', 'cpu', f)", "line 1: `torch.library.register_kernel` for the operator"),
    ("reg = torch.library.register_kernel\nreg('aten::mul.Tensor', 'cpu', f)", "line 1: `torch.library.register_kernel` other than called"),
    ("name = 'aten::sin'\ntorch.library.register_autograd(name, b)", "line 2: `torch.library.register_autograd` for an operator named"),
    ("lib = torch.library.Library('aten', 'IMPL')", "line 1: `torch.library.Library`"),
    ("op = torch.ops.aten.mul.default", "line 1: `torch.ops.aten`"),
    ("torch.ops.load_library('x.so')", "line 1: `torch.ops.load_library`"),
    # Changing what the answer did not make.
    ("torch.allclose = lambda *a, **k: True", "line 1: changing `torch.allclose`, which the answer did not make"),
    ("import torch\ntorch.Tensor.add = f", "line 2: changing `torch.Tensor.add`"),
    ("setattr(torch, 'allclose', f)", "line 1: changing `setattr(torch, 'allclose', f)`"),
    ("CONSTANTS['levels'] = 2", "line 1: changing `CONSTANTS['levels']`"),
]


@pytest.mark.parametrize("source, found", HOSTILE)
def test_each_way_past_the_allow_list_is_refused_with_its_line(source, found):
    given = "import gc" if "gc." in source else ""
    problems = problems_of(source, given)
    assert any(p.startswith(found) for p in problems), problems


def test_the_answers_own_things_and_the_course_s_idioms_pass():
    source = '''
import math
import torch.nn.functional as F
from functools import partial
from typing import Literal, Optional


class Layer(torch.nn.Module):
    def __init__(self, n, mode: Literal["sum", "mean"] = "sum"):
        super().__init__()
        self._scale = torch.nn.Parameter(torch.ones(n))
        self.__doc__ = "a layer"
        self.register_buffer("running", torch.zeros(n))

    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = x.clone()
        y[0] = getattr(self, "_scale")[0] * math.pi + self.running[0]
        return F.relu(y * self._scale)

    def __repr__(self):
        return "{}({:.2f})".format(type(self).__name__, float(self._scale.sum())) + self.__class__.__qualname__


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.shape = x.shape
        if type(x) is not torch.Tensor or x.__class__ != torch.Tensor:
            raise TypeError(f"{type(x).__name__}: not a tensor")
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x ** 2


Cube.__name__
if __name__ == "__main__":
    print(Cube.apply(torch.ones(2)), file=sys.stderr)


@torch.library.custom_op("mylib::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mylib.twice.default(x) if False else 2 * x


torch.library.register_fake(twice)(lambda x: torch.empty_like(x))


@triton.jit
def double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    y = triton.language.load(x_ptr + offsets, mask=offsets < n)
    tl.store(x_ptr + offsets, (x + y).to(x_ptr.dtype.element_ty), mask=offsets < n)
'''
    assert problems_of(source, "import sys") == []


def test_a_name_bound_two_ways_passes_the_rules_of_both():
    # F is the given torch.nn.functional; the answer also makes it a Function: F.apply is not a name of F's module.
    assert problems_of("F = Square\ny = F.apply(x)") == ["line 2: `torch.nn.functional.apply`"]
    # A builtin the answer also binds: getattr used as a value is refused wherever it is.
    assert problems_of("f(getattr)\ndef f(getattr):\n    return getattr(x, y)")[0].startswith("line 1: `getattr`")
    # A parameter named input (published code's habit) is a value and a harmless builtin: it passes.
    assert problems_of("def forward(ctx, input):\n    return input.clamp(min=0)") == []


def test_a_name_no_cell_binds_is_left_to_fail_when_run():
    # Not a builtin, not bound by the given cells or the answer: the examinee says NameError (and why). Its
    # attributes are a value's.
    assert problems_of("y = helper(x).shape") == []
    assert problems_of("y = helper.gi_frame") == ["line 1: the attribute `gi_frame`"]


def test_a_refusal_names_the_cell_and_what_it_uses():
    message = scan.refusal("cube", scan.problems("import os\nx = eval('1')"))
    assert message.startswith("the grader did not run your answer cell 'cube': it uses line 1: importing `os`")
    assert "line 2: `eval`" in message and "Answers may use torch's tensor operations" in message


# What honest code sometimes does that the scan refuses: the cost of the allow-list (said in guarantees.md).
HONEST_BUT_REFUSED = [
    ("from __future__ import annotations", "`from __future__ import ...`"),
    ("def f(x) -> 'torch.Tensor':\n    return x", "a string in an annotation"),
    ("def extra_repr(self):\n    return '{eps}'.format(**self.__dict__)", "the special attribute `__dict__`"),
    ("def fake(x):\n    torch._check(x.dim() == 2)\n    return x", "`torch._check`"),
    ("@torch.compile\ndef f(x):\n    return x", "`torch.compile`"),
    ("import matplotlib.pyplot as plt", "importing `matplotlib.pyplot`"),
    ("def reduce(x, type):\n    return x.sum() if type == 'sum' else x.mean()", "`type` other than"),
    ("%timeit f(x)", "the attribute `run_line_magic`"),  # (the examinee has no get_ipython: it failed before too)
]


@pytest.mark.parametrize("source, found", HONEST_BUT_REFUSED)
def test_what_an_honest_answer_loses_is_named_in_the_refusal(source, found):
    assert any(found in p for p in scan.problems(source)), scan.problems(source)


def test_the_scan_resolves_names_with_what_the_given_cells_bound():
    notebook = read_notebook(solution("10_triton_kernels"))
    known = scan.Known()
    for cell in trusted_cells(notebook)["cells"]:
        if cell["kind"] == "given":
            known = known.given(cell["source"], bool(cell.get("setup")))
    # 10's setup cell imports triton inside a try: the examinee runs it whole, so tl is triton.language.
    assert known.names["tl"] == {"triton.language"} and known.names["F"] == {"torch.nn.functional"}
    assert scan.problems("y = tl.inline_asm_elementwise", known) == ["line 1: `triton.language.inline_asm_elementwise`"]
    assert scan.problems("b = guard_memory", known) == ["line 1: `autograder.student`"]
    assert json.dumps(sorted(known.names["triton_op"])) == '["torch.library.triton_op"]'


def test_the_numbers_the_guarantees_state_are_the_ones_measured_here():
    stated = " ".join((REPO / "autograder" / "authoring" / "book" / "instructors" / "guarantees.md").read_text().split())
    data = json.loads((REPO / "autograder" / "grading" / "running" / "judging" / "allowed.json").read_text())
    solutions = sum(len(answer_cells(solution(a))) for a in Course(REPO).assignments())
    demo = sum(len(answer_cells(p)) for p in demo_notebooks())
    extra = sum(1 for assignment, _, _ in corpus() if not solution(assignment).is_file())
    for claim in (f"{sum(map(len, data['modules'].values())):,} names of {len(data['modules'])} modules",
                  f"torch's tensor operations, functions, dtypes and constants ({len(data['modules']['torch'])} names",
                  f"{len(data['attributes']):,} names, less hooks", f"Builtins: {len(data['builtins'])}, not",
                  f"refuses {len(HOSTILE)} routes", f"`test_scan.py`: {len(HOSTILE)} routes",
                  f"the eleven assignments ({solutions}) and every answer of the demo class ({demo}) pass",
                  f"do {len(corpus())} honest answers", f"at least one for each of the {solutions} exercises",
                  f"and {extra} more in other Triton styles",
                  f"the {len(corpus()) - extra} answers to 01-11 scored full marks"):
        assert claim in stated, claim
