"""Assignment 10's library: the memory guard of Triton's interpreter, and check_kernel's explanations.

The kernels are real Triton kernels run by Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET
before anything imports triton). check_kernel is tried on the solution notebook's own kernels with one
mistake typed in each, as a student would make it, and must name that mistake.
"""

from __future__ import annotations

import json

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from autograder import check_kernel  # noqa: E402
from autograder.authoring.kernel_timings import NOTEBOOK, solution_namespace  # noqa: E402
from autograder.student.kernels import OutOfBounds, guard_memory, interpreted  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")


@pytest.fixture(scope="module", autouse=True)
def _guarded():
    assert guard_memory() and guard_memory()  # idempotent
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)  # the solution's setup cell turns it on


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, OFF_BY_ONE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    store = offsets <= n if OFF_BY_ONE else offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=store)


@triton.jit
def _sum_unmasked_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n), axis=0))  # masked lanes summed too


def test_an_off_by_one_store_is_an_error_naming_kernel_tensor_and_element_and_writes_nothing():
    # Without the guard, some of these sizes corrupt the heap and the process aborts (free(): invalid size).
    for n in [n for n in range(1, 300) if n % 64]:  # a partial last block: its lane n is switched on
        x = torch.randn(n)
        y = torch.empty_like(x)
        with pytest.raises(Exception) as caught:
            _double_kernel[(triton.cdiv(n, 64),)](x, y, n, BLOCK=64, OFF_BY_ONE=True)
        assert isinstance(caught.value.__cause__, OutOfBounds) or "OutOfBounds" in str(caught.value)
        assert f"the first at element {n} of `y_ptr` ({n} elements)" in str(caught.value), str(caught.value)
        assert "_double_kernel stored 1 element outside" in str(caught.value)


def test_a_right_kernel_runs_and_a_block_that_reaches_into_a_neighbouring_tensor_is_out_of_bounds():
    x = torch.randn(100)
    y = torch.empty_like(x)
    _double_kernel[(2,)](x, y, 100, BLOCK=64, OFF_BY_ONE=False)
    assert torch.equal(y, 2 * x)
    both = torch.randn(200)  # x is the first half: reading past its end lands inside the second half
    with pytest.raises(Exception, match="element 100 of `x_ptr` \\(100 elements\\)"):
        _double_kernel[(2,)](both[:100], y, 101, BLOCK=64, OFF_BY_ONE=False)


def test_the_masked_lanes_of_a_load_without_other_are_nan_so_a_sum_over_them_shows():
    out = torch.empty(1)
    _sum_unmasked_kernel[(1,)](torch.ones(5), out, 5, BLOCK=8)
    assert torch.isnan(out).all()


def _mistaken(tmp_path, old: str, new: str) -> dict:
    """The solution notebook's setup, tiles, kernels and launchers, with ``old`` replaced by ``new`` in its answers."""
    notebook = json.loads(NOTEBOOK.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and old in source:
            cell["source"] = source.replace(old, new)
            break
    else:
        raise AssertionError(f"{old!r} is not in the solution")
    path = tmp_path / NOTEBOOK.name
    path.write_text(json.dumps(notebook))
    return solution_namespace(path)


MISTAKES = [
    ("bias_gelu_forward", "(37, 1000)", "inside = (rows[:, None] < n_rows)", "inside = (rows[:, None] <= n_rows)",
     "the first at element 37,000 of `x_ptr` (37,000 elements). Offsets reach past a tensor when a mask is missing "
     "or off by one"),
    ("bias_gelu_forward", "(37, 1000)", 'triton.cdiv(n_rows, meta["BLOCK_ROWS"])', 'n_rows // meta["BLOCK_ROWS"]',
     "never written in the last 5 rows (of 37), and right everywhere else: the grid stops short of the end"),
    ("bias_gelu_forward", "(37, 1100)", 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])',
     'n_columns // meta["BLOCK_COLUMNS"]', "never written in the last 76 columns (of 1100)"),
    ("bias_gelu_forward", "(5, 100)", 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])',
     'n_columns // meta["BLOCK_COLUMNS"]', "is NaN everywhere: no program wrote it"),
    ("bias_gelu_backward", "(37, 1000)", "grad_bias.sum(0)", "grad_bias.sum(1)",
     "result 1 has shape [2], expected [1000]: summed over the wrong axis?"),
    ("bias_gelu_backward", "(37, 1000)", "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=0)",
     "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=1)",
     "two blocks of different shapes meet (a store, or arithmetic). A sum over the wrong axis does that"),
    ("bias_gelu_backward", "(37, 1000)", "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=0)",
     "column_sums = tl.sum(grad_h, axis=0)", "result 1 is NaN everywhere. Either the sums took in masked lanes"),
    ("bias_gelu_backward", "(37, 1000)", 'grid = (triton.cdiv(n_rows, BACKWARD_TILE["BLOCK_ROWS"])',
     'grid = (n_rows // BACKWARD_TILE["BLOCK_ROWS"]', "result 0 is never written in the last 5 rows (of 37)"),
    ("bias_gelu_backward_atomic", "(37, 1000)", "torch.zeros_like(bias) if atomic", "torch.empty_like(bias) if atomic",
     "or tl.atomic_add added into a tensor that was not zero (new tensors, torch.empty, hold NaN here"),
    ("bias_gelu_backward_atomic", "(37, 1000)", "tl.atomic_add(grad_bias_ptr + columns, column_sums, mask=in_columns)",
     "tl.store(grad_bias_ptr + columns, column_sums, mask=in_columns)",
     "holds only the last 5 rows' sum: the programs along the rows overwrote each other's sums (tl.store) instead "
     "of adding them (tl.atomic_add)"),
    ("bias_gelu_backward_atomic", "(37, 1000)", "return grad_x, grad_bias if atomic", "return grad_x, 2 * grad_bias if atomic",
     "result 1 is twice the right value"),
]


@pytest.mark.parametrize("launcher, shape, old, new, named", MISTAKES, ids=[f"{m[0]}: {m[3]}" for m in MISTAKES])
def test_check_kernel_names_the_mistake_in_a_wrong_kernel(tmp_path, launcher, shape, old, new, named):
    namespace = _mistaken(tmp_path, old, new)
    rows, columns = eval(shape)  # noqa: S307 - the table above
    args = [torch.randn(rows, columns), torch.randn(columns)]
    if launcher != "bias_gelu_forward":
        args.append(torch.randn(rows, columns))
    reference = namespace["bias_gelu_reference" if launcher == "bias_gelu_forward" else "bias_gelu_backward_reference"]
    with pytest.raises(AssertionError) as caught:
        check_kernel(namespace[launcher], reference, *args)
    assert named in str(caught.value), str(caught.value)


def test_check_kernel_passes_the_solution_and_names_a_wrong_axis_inside_square_tiles(tmp_path):
    namespace = solution_namespace()
    x, bias, grad_output = torch.randn(37, 1000), torch.randn(1000), torch.randn(37, 1000)
    check_kernel(namespace["bias_gelu_forward"], namespace["bias_gelu_reference"], x, bias)
    for launcher in ("bias_gelu_backward", "bias_gelu_backward_atomic"):
        check_kernel(namespace[launcher], namespace["bias_gelu_backward_reference"], x, bias, grad_output)
    # With square tiles a sum over the wrong axis fits the shapes: only the values say so.
    square = _mistaken(tmp_path, "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=0)",
                       "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=1)")
    square["BACKWARD_TILE"] = {"BLOCK_ROWS": 16, "BLOCK_COLUMNS": 16, "num_warps": 4}
    with pytest.raises(AssertionError, match="summed over the wrong axis of each tile"):
        check_kernel(square["bias_gelu_backward"], square["bias_gelu_backward_reference"], torch.randn(40, 70),
                     torch.randn(70), torch.randn(40, 70))
