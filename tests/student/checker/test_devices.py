"""The checker on the device it is given (``autograder.student.checker``) and ``check_device`` on meta tensors.

On a CPU every entry point passes the right Functions of ``autograder.authoring.device_cases`` and
fails the wrong ones; a Function that makes a tensor without ``device=`` is right on a CPU, and
``check_device`` finds it anyway, on meta tensors. The tests marked ``gpu`` run the same cases on
CUDA, where those Functions must fail with a message that says what they did
(``python -m autograder.authoring.gpu_check`` runs them on a GPU).
"""

from __future__ import annotations

import pytest
import torch

from autograder import check_device, check_function
from autograder.authoring import device_cases
from autograder.authoring.device_cases import Exp, ExpOnesOnCpu, TopK, TopKZerosOnCpu
from autograder.student.checker.core import _upstream
from autograder.student.checker.devices import device_problem, device_record
from autograder.student.checker.messages import _device_mistake
from autograder.student.checker.references import _precise_dtype
from autograder.student.checker.transforms import draw_payload

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_mps = pytest.mark.skipif(not torch.backends.mps.is_available(), reason="needs an Apple mps device")
META = torch.device("meta")


def _failure(call) -> str:
    with pytest.raises(AssertionError) as error:
        call()
    return str(error.value)


# --------------------------------------------------------------------------------------------
# Every entry point, right and wrong Functions


def _agree(rows) -> None:
    wrong = [f"{r['entry']}, {r['case']}: expected {r['expected']}, {r['outcome']}: {r['message'][:300]}"
             for r in rows if not r["ok"]]
    assert not wrong, "\n".join(wrong)


def test_every_entry_point_on_the_cpu_passes_right_functions_and_fails_wrong_ones():
    rows = device_cases.run_cases("cpu")
    _agree(rows)
    assert len(rows) == len(device_cases.CASES)
    # on a CPU the device mistakes are right (every tensor is a CPU tensor), except under check_device's meta tensors
    assert [r["case"] for r in rows if r["outcome"] == "failed"] == [
        c.what for c in device_cases.CASES if c.fails and not c.device_mistake]


@pytest.mark.gpu
@needs_cuda
def test_every_entry_point_on_cuda_passes_right_functions_and_fails_wrong_ones_saying_why():
    rows = device_cases.run_cases("cuda")
    _agree(rows)
    assert [r["case"] for r in rows if r["outcome"] == "failed"] == [c.what for c in device_cases.CASES if c.fails]


@pytest.mark.gpu
@needs_mps
def test_every_entry_point_on_mps_passes_right_functions_and_fails_wrong_ones():
    _agree(device_cases.run_cases("mps"))


# --------------------------------------------------------------------------------------------
# check_device: device mistakes found on a CPU, with meta tensors


def test_check_device_finds_a_backward_that_returns_cpu_zeros_on_a_machine_without_a_gpu():
    x = torch.randn(3, 4, 6)
    check_function(TopKZerosOnCpu, lambda x, k: torch.topk(x, k), x, 3)  # right values on a CPU: unseen there
    message = _failure(lambda: check_device(TopKZerosOnCpu, x, 3))
    assert message.startswith("TopKZerosOnCpu: your backward returned a CPU tensor; the input is on meta")
    assert "device=x.device" in message and "zeros_like" in message and "stand for a GPU" in message
    check_device(TopK, x, 3)


def test_check_device_names_the_line_that_mixed_the_devices():
    message = _failure(lambda: check_device(ExpOnesOnCpu, torch.randn(5)))
    assert "your backward made a CPU tensor; the input is on meta" in message
    assert "torch.ones(y.shape, dtype=y.dtype)" in message, "the student's line, as the checker shows it elsewhere"


class PositionsOnCpu(torch.autograd.Function):  # as 04's CentreOfMassOnCpu: made on one line, used on the next
    @staticmethod
    def forward(ctx, p):
        ctx.n = p.shape[-1]
        return (torch.arange(ctx.n, dtype=p.dtype, device=p.device) * p).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        positions = torch.arange(ctx.n, dtype=grad.dtype)  # no device=
        return grad.unsqueeze(-1) * positions


def test_check_device_says_its_line_is_where_the_stray_tensor_met_the_inputs_not_where_it_was_made():
    message = _failure(lambda: check_device(PositionsOnCpu, torch.rand(3, 5)))
    assert "your backward made a CPU tensor" in message
    assert "(the tensors met in backward, line " in message, message
    assert message.endswith(": return grad.unsqueeze(-1) * positions)"), message


class ForwardReturnsCpu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.zeros(x.shape)  # made on the CPU, whatever x's device

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class NeedsValues(torch.autograd.Function):
    """Right on any device, but its forward reads a value (.item()), which meta tensors do not have."""

    @staticmethod
    def forward(ctx, x):
        return x * x.abs().max().item()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def test_check_device_reports_forward_outputs_and_passes_code_that_needs_values():
    message = _failure(lambda: check_device(ForwardReturnsCpu, torch.randn(3)))
    assert "your forward returned a CPU tensor; the input is on meta" in message
    check_device(NeedsValues, torch.randn(3))  # says nothing about devices: passes (the docstring says so)
    record = device_record(NeedsValues, [torch.randn(3)])
    assert record["stage"] == "forward" and "meta" in record["error"]
    assert device_problem("NeedsValues", record) is None


def test_check_device_refuses_what_is_not_a_function_class():
    assert "not a subclass of torch.autograd.Function" in _failure(lambda: check_device(lambda x: x, torch.randn(3)))


# --------------------------------------------------------------------------------------------
# What the checker draws follows the tensors it stands for


def test_upstream_gradients_and_transform_payloads_live_on_the_outputs_and_inputs_device():
    outputs = [torch.empty(2, 3, device="meta", dtype=torch.float32), torch.empty(4, device="meta")]
    drawn = _upstream(outputs, [0, 1], 0)
    assert [(u.device, u.dtype, list(u.shape)) for u in drawn] == [(META, torch.float32, [2, 3]),
                                                                  (META, torch.float32, [4])]
    args = [torch.empty(5, device="meta", dtype=torch.float64), 2.0]
    for kind in ("vmap", "forward_ad", "double_backward", "compile"):
        payload = draw_payload(kind, args, [torch.empty(5, device="meta", dtype=torch.float64, requires_grad=True)],
                               torch.Generator().manual_seed(0))
        tensors = [t for values in payload.values() for t in values if isinstance(t, torch.Tensor)]
        assert tensors and {t.device for t in tensors} == {META}, kind


def test_the_same_seed_draws_the_same_numbers_whatever_the_device():
    cpu = _upstream([torch.empty(3, 2, dtype=torch.float64)], [0], 5)[0]
    assert torch.equal(cpu, torch.randn(3, 2, generator=torch.Generator().manual_seed(1239), dtype=torch.float64))


def test_value_checks_refuse_meta_tensors_and_point_to_check_device():
    with pytest.raises(RuntimeError, match="meta tensors have none.*check_device"):
        check_function(Exp, torch.exp, torch.randn(3, device="meta"))


def test_the_checker_works_in_float32_only_on_a_device_without_float64():
    assert _precise_dtype(torch.device("cpu")) == _precise_dtype(torch.device("cuda:0")) == torch.float64
    assert _precise_dtype(torch.device("mps")) == torch.float32


# --------------------------------------------------------------------------------------------
# Torch's device errors, read


def _raised(call) -> str:
    with pytest.raises(RuntimeError) as error:
        call()
    return str(error.value)


# As the H200 (torch 2.11.0+cu130) printed them for a Function that made a CPU tensor in backward
# (recordings/h200-2026-11-26/EVIDENCE.md, section 2).
ON_CUDA = ["Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
           "invalid gradient at index 0 - expected device cuda:0 but got cpu"]


def test_torch_s_errors_for_two_devices_are_read_as_the_other_device():
    meta = torch.randn(3, device="meta")
    on_this_torch = [_raised(lambda: meta + torch.ones(3)), _raised(lambda: torch.cat([meta, torch.ones(3)]))]
    for text in on_this_torch:
        assert _device_mistake(text, META) == "cpu", text
    for text in ON_CUDA:
        assert _device_mistake(text, torch.device("cuda:0")) == "cpu", text
    assert _device_mistake("size mismatch", META) is None
    assert _device_mistake(ON_CUDA[0], torch.device("cpu")) == "cuda:0", "a CUDA tensor made for CPU inputs"
