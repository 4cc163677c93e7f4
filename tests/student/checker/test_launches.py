"""A kernel exercise's contract, checked by what the launcher does (``checker.launches``): its results written by a
Triton kernel of the answer, the launcher only allocating, reshaping and finishing what the exercise lets it.

Real launchers run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET): 10's solution, and launchers that
give the right numbers without doing the exercise (torch code, a given reference, NumPy, a kernel that copies what
torch computed). Where the answer's kernels are told from the notebook's given ones, the launcher runs as the grader's
examinee runs it (``answer.answer``, a JSON round trip) and the referee judges it.
"""

from __future__ import annotations

import json

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from autograder import check_kernel  # noqa: E402
from autograder.authoring.kernel_timings import NOTEBOOK, solution_namespace  # noqa: E402
from autograder.grading.running.judging import answer, referee  # noqa: E402
from autograder.student.checker.kernels import check_backward_kernel  # noqa: E402
from autograder.student.checker.launches import _answer_kernel, contract_problem, trace_launcher  # noqa: E402
from autograder.student.kernels import interpreted  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")
REQUIRES = "that a Triton kernel of your answer compute y"
BROKEN = f"This exercise requires {REQUIRES}, but "

CHEATS = {  # launcher source (10's names in scope): what its failure must say after "but "
    "return F.gelu(x + bias)":
        "launcher computes y, or what its kernels read, with torch (aten.add.Tensor, aten.gelu.default) and launches "
        "no Triton kernel",
    "return bias_gelu_reference(x, bias)": "launcher computes y, or what its kernels read, with torch",
    "y = bias_gelu_forward(x, bias)\n    return F.gelu(x + bias)": "launcher computes y, or what its kernels read, with torch",
    "import numpy as np\n    return torch.from_numpy(np.maximum(x.numpy() + bias.numpy(), 0))":
        "launcher hands its kernels, or returns as y, data made outside torch and the kernels",
    "y = torch.empty_like(x)\n    copy_kernel[(triton.cdiv(x.numel(), 1024),)](F.gelu(x + bias), y, x.numel(), BLOCK=1024)\n"
    "    return y": "launcher computes y, or what its kernels read, with torch (aten.add.Tensor, aten.gelu.default)",
    "y = torch.zeros_like(x)\n    bias_gelu_forward(x, bias)\n    return y":
        "no kernel of your answer writes y: it is allocated (aten.zeros_like.default) and never written by a kernel",
    "return x.clone()": "launcher launches no Triton kernel: y is a copy of argument 1",
}


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.fixture(scope="module")
def ten():
    namespace = solution_namespace(NOTEBOOK, ("setup", "tiles", "bias_gelu_forward", "cell-backward-reference",
                                              "bias_gelu_backward", "softmax_forward", "triton_softmax"))
    namespace["copy_kernel"] = _copy_kernel
    yield namespace
    torch.use_deterministic_algorithms(False)  # the solution's setup cell turns it on


def _launcher(namespace: dict, body: str):
    exec(f"def launcher(x, bias):\n    {body}\n", namespace)  # noqa: S102 - the test's own source
    return namespace.pop("launcher")


def test_the_solution_keeps_the_contract_with_its_partial_sums_and_its_atomics(ten):
    x, bias, grad_output = torch.randn(13, 300), torch.randn(300), torch.randn(13, 300)
    check_kernel(ten["bias_gelu_forward"], ten["bias_gelu_reference"], x, bias, outputs=("y",), requires=REQUIRES)
    for launcher, finishing in (("bias_gelu_backward", ("sum",)), ("bias_gelu_backward_atomic", ())):
        check_kernel(ten[launcher], ten["bias_gelu_backward_reference"], x, bias, grad_output,
                     outputs=("grad_x", "grad_bias"), requires=REQUIRES, finishing=finishing)


@pytest.mark.parametrize("body, says", CHEATS.items(), ids=[b.replace("\n", " ")[:70] for b in CHEATS])
def test_a_launcher_that_gets_the_numbers_another_way_breaks_the_contract(ten, body, says):
    launcher = _launcher(ten, body)
    with pytest.raises(AssertionError) as caught:
        check_kernel(launcher, ten["bias_gelu_reference"], torch.randn(13, 300), torch.randn(300), outputs=("y",),
                     requires=REQUIRES, strided=False)
    assert str(caught.value).startswith(BROKEN + says), str(caught.value)


def test_the_partial_sums_may_be_added_up_only_where_the_exercise_says_and_only_after_the_kernel(ten):
    x, bias, grad_output = torch.randn(37, 300), torch.randn(300), torch.randn(37, 300)
    with pytest.raises(AssertionError, match=r"computes grad_bias, or what its kernels read, with torch \(aten.sum"):
        check_kernel(ten["bias_gelu_backward"], ten["bias_gelu_backward_reference"], x, bias, grad_output,
                     outputs=("grad_x", "grad_bias"), requires=REQUIRES)  # no finishing allowed
    summed_first = _launcher(ten, "return bias_gelu_forward(x, bias.reshape(1, -1).sum(0))")
    with pytest.raises(AssertionError, match=r"computes y, or what its kernels read, with torch \(aten.sum"):
        check_kernel(summed_first, ten["bias_gelu_reference"], x, bias, outputs=("y",), requires=REQUIRES,
                     finishing=("sum",), strided=False)


@triton.jit
def _torch_inside_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) * _ONES.sum().item())


_ONES = torch.ones(4)


def test_torch_run_inside_a_kernel_is_named():
    def launcher(x):
        y = torch.empty_like(x)
        _torch_inside_kernel[(1,)](x, y, BLOCK=16)
        return y

    record, result = trace_launcher(launcher, (torch.randn(16),))
    assert torch.is_tensor(result)
    assert contract_problem("launcher", record, REQUIRES, ("y",)) == (
        BROKEN + "launcher runs torch inside a kernel (aten._local_scalar_dense.default, aten.sum.default): a kernel "
                 "computes with tl.* only")


def test_a_kernel_counts_as_the_answers_where_an_answer_cell_defined_it():
    def defined_in(filename: str):
        return compile("def kernel(): pass", filename, "exec").co_consts[0]

    assert _answer_kernel(type("F", (), {"__code__": defined_in("<answer bias_gelu_forward>")})())
    assert not _answer_kernel(type("F", (), {"__code__": defined_in("<given>")})())
    assert not _answer_kernel(type("F", (), {"__code__": defined_in(torch.__file__)})())
    assert _answer_kernel(type("F", (), {"__code__": defined_in("/tmp/ipykernel_1/123.py")})())  # a notebook's cell


GIVEN_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def doubling_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)
'''
ANSWER = '''
import torch


def doubled(x):  # the answer launches the notebook's own kernel: right numbers, no kernel of its own
    y = torch.empty_like(x)
    doubling_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y
'''


def test_in_grading_a_result_written_by_a_kernel_the_notebook_gives_is_not_the_answers():
    namespace = {}
    exec(compile(GIVEN_KERNEL, "<given>", "exec"), namespace)  # noqa: S102 - as the examinee runs a given cell
    exec(compile(ANSWER, "<answer doubled>", "exec"), namespace)  # noqa: S102 - ... and an answer cell
    cells = [{"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_kernel"},
             {"kind": "test", "grade_id": "t", "source": "check_kernel(doubled, lambda x: 2 * x, torch.randn(100), "
                                                          f"outputs=('y',), requires={REQUIRES!r})"}]

    def ask(requests):
        return [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace))) for r in requests]

    judged, failure = referee.Referee(cells, ["doubled"], ask).judge_cell("t")
    assert judged == 1 and failure.startswith(
        BROKEN + "no kernel of your answer writes y: it is written by doubling_kernel, a kernel the notebook gives, "
                 "not your answer's"), failure


def test_a_functions_backward_is_checked_like_a_launcher(ten):
    def gradient(x, grad_output):
        y = torch.softmax(x, -1)
        return [y * (grad_output - (grad_output * y).sum(-1, keepdim=True))]

    x, grad_output = torch.randn(6, 10), torch.randn(6, 10)
    check_backward_kernel(ten["TritonSoftmax"], gradient, x, grad_output, names=("grad_x",), requires=REQUIRES)

    class TorchSoftmax(torch.autograd.Function):  # the given forward, and a backward in torch
        @staticmethod
        def forward(ctx, x):
            y = ten["softmax_forward"](x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad_output):
            (y,) = ctx.saved_tensors
            return y * (grad_output - (grad_output * y).sum(-1, keepdim=True))

    with pytest.raises(AssertionError) as caught:
        check_backward_kernel(TorchSoftmax, gradient, x, grad_output, names=("grad_x",), requires=REQUIRES)
    assert str(caught.value).startswith(BROKEN + "TorchSoftmax.backward computes grad_x, or what its kernels read, "
                                                 "with torch (aten."), str(caught.value)


def test_the_record_is_plain_data_and_says_which_tensors_each_launch_wrote(ten):
    record, _ = trace_launcher(ten["bias_gelu_backward"], (torch.randn(37, 300), torch.randn(300), torch.randn(37, 300)))
    assert json.loads(json.dumps(record)) == record
    [launch] = [e for e in record["events"] if "launch" in e]
    x, bias, grad_output = record["arguments"]
    grad_x, grad_bias = record["results"]
    assert launch["launch"] == "bias_gelu_backward_kernel" and launch["answer"]
    assert set(launch["reads"]) >= {x, bias, grad_output} and grad_x in launch["writes"]
    assert {"BLOCK_ROWS", "BLOCK_COLUMNS", "ATOMIC"} <= set(launch["blocks"])
    assert [e["op"] for e in record["events"] if "op" in e and e["class"] == "computes"] == ["aten.sum.dim_IntList"]
    assert record["largest"] == 37 * 300
