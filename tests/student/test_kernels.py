"""Assignment 10's library: the memory guard of Triton's interpreter, and what check_kernel and the tests name.

The kernels are real Triton kernels run by Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET
before anything imports triton). Each mistake is typed into the solution notebook's own cells, as a student
would make it, and the check the notebook's test cell runs must name that mistake (small shapes: the
interpreter is slow).
"""

from __future__ import annotations

import json
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from autograder import check_custom_op, check_function, check_kernel  # noqa: E402
from autograder.authoring.kernel_timings import NOTEBOOK, solution_namespace  # noqa: E402
from autograder.student.checker.diagnoses import explain_known_mistakes, explain_non_finite  # noqa: E402
from autograder.student.checker.kernel_patterns import _grid_stops_there  # noqa: E402
from autograder.student.checker.messages import NOT_DONE  # noqa: E402
from autograder.student.kernels import (  # noqa: E402
    SOFTMAX_NAN, UNGUARDED, OutOfBounds, _missing_internals, guard_memory, interpreted,
    memory_guarded,
)

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")
CELLS = ("setup", "tiles", "bias_gelu_forward", "cell-backward-reference", "bias_gelu_backward",
         "bias_gelu_function", "softmax_forward", "triton_softmax", "bias_gelu_op")


@pytest.fixture(scope="module", autouse=True)
def _guarded():
    assert guard_memory() and guard_memory() and memory_guarded()  # idempotent
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)  # the solution's setup cell turns it on


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, OFF_BY_ONE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    store = offsets <= n if OFF_BY_ONE else offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=store)


@triton.jit
def _rows_kernel(x_ptr, y_ptr, n_columns, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    columns = tl.arange(0, BLOCK)
    offsets = tl.program_id(0) * STRIDE + columns  # a row stride of STRIDE, right when it is n_columns
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=columns < n_columns), mask=columns < n_columns)


@triton.jit
def _sum_unmasked_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n), axis=0))  # masked lanes summed too


def test_an_off_by_one_store_is_an_error_naming_kernel_tensor_and_element_and_writes_nothing():
    # Without the guard, some such sizes corrupt the heap and the process aborts (free(): invalid size).
    for n in (1, 5, 63, 65, 100, 127, 129, 200, 255, 299):  # a partial last block: its lane n is switched on
        x = torch.randn(n)
        y = torch.empty_like(x)
        with pytest.raises(Exception) as caught:
            _double_kernel[(triton.cdiv(n, 64),)](x, y, n, BLOCK=64, OFF_BY_ONE=True)
        assert isinstance(caught.value.__cause__, OutOfBounds) or "OutOfBounds" in str(caught.value)
        assert f"the first at element {n} of `y_ptr` ({n} elements). That is just past its end: is a mask missing, " \
               f"or off by one" in str(caught.value), str(caught.value)
        assert "_double_kernel stored 1 element outside" in str(caught.value)


def test_a_right_kernel_runs_and_a_block_that_reaches_into_a_neighbouring_tensor_is_out_of_bounds():
    x = torch.randn(100)
    y = torch.empty_like(x)
    _double_kernel[(2,)](x, y, 100, BLOCK=64, OFF_BY_ONE=False)
    assert torch.equal(y, 2 * x)
    both = torch.randn(200)  # x is the first half: reading past its end lands inside the second half
    with pytest.raises(Exception, match="element 100 of `x_ptr` \\(100 elements\\)"):
        _double_kernel[(2,)](both[:100], y, 101, BLOCK=64, OFF_BY_ONE=False)


def test_an_access_far_past_the_end_is_said_to_be_a_stride_not_a_mask():
    x, y = torch.randn(6, 10), torch.empty(6, 10)
    _rows_kernel[(6,)](x, y, 10, STRIDE=10, BLOCK=16)
    assert torch.equal(x, y)
    with pytest.raises(Exception) as caught:
        _rows_kernel[(6,)](x, y, 10, STRIDE=16, BLOCK=16)  # row 4 starts at element 64 of 60
    assert ("the first at element 64 of `x_ptr` (60 elements). That is 4 elements past its end, with a gap: not a "
            "mask that is off by one, but offsets that step too far: a row stride") in str(caught.value)


def test_the_masked_lanes_of_a_load_without_other_are_nan_so_a_sum_over_them_shows():
    out = torch.empty(1)
    _sum_unmasked_kernel[(1,)](torch.ones(5), out, 5, BLOCK=8)
    assert torch.isnan(out).all()


def test_the_guard_finds_every_internal_it_wraps_in_this_triton():
    from triton.runtime import interpreter

    assert _missing_internals(interpreter) == []


class _WithoutAtomics:
    """Triton's interpreter memory as a Triton built otherwise might have it: no atomics where the guard looks."""

    def __init__(self, memory) -> None:
        self.load, self.store = memory.load, memory.store


def test_where_the_guard_cannot_install_the_notebook_and_check_kernel_say_accesses_are_not_checked(capsys):
    from triton.runtime import interpreter

    guarded = interpreter._interpreter
    interpreter._interpreter = _WithoutAtomics(guarded._original)
    try:
        assert not memory_guarded() and not guard_memory()
        namespace = solution_namespace(NOTEBOOK, ("setup", "tiles", "bias_gelu_forward"))
        capsys.readouterr()
        setup = "".join(next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["id"] == "setup")["source"])
        exec(setup, namespace)  # noqa: S102 - the notebook's own setup cell, which acts on guard_memory()'s answer
        assert f"WARNING: {UNGUARDED}" in capsys.readouterr().out.splitlines()
        check_kernel(namespace["bias_gelu_forward"], namespace["bias_gelu_reference"], torch.randn(3, 40), torch.randn(40))
        assert capsys.readouterr().out.splitlines() == [f"check_kernel: bias_gelu_forward passes, but {UNGUARDED}"]
    finally:
        interpreter._interpreter = guarded
    assert memory_guarded()


def _mistaken(tmp_path, old: str, new: str) -> dict:
    """The solution notebook's setup, kernels, launchers and Functions, with ``old`` replaced by ``new`` in its
    answers (every answer cell that holds it)."""
    notebook = json.loads(NOTEBOOK.read_text())
    found = False
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and old in source:
            cell["source"] = source.replace(old, new)
            found = True
    assert found, f"{old!r} is not in the solution"
    path = tmp_path / NOTEBOOK.name
    path.write_text(json.dumps(notebook))
    return solution_namespace(path, CELLS)


TILE_ROWS = "rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)"
LOADS = ("x = at_least_float32(tl.load(x_ptr + offsets, mask=inside))\n"
         "    bias = at_least_float32(tl.load(bias_ptr + columns, mask=columns < n_columns))")
COLUMNS = "columns = tl.program_id(1) * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)"
OFFSETS = "offsets = rows[:, None] * n_columns + columns[None, :]"
AXIS_0 = "column_sums = tl.sum(tl.where(inside, grad_h, 0.0), axis=0)"
MISTAKES = [  # small shapes: 13 rows make two forward row programs, 1100 columns two column programs (tiles 8 x 1024);
    # 37 x 300 two backward row programs and two column programs (tiles 32 x 256)
    # launcher, shape, old, new, what the message must say
    ("bias_gelu_forward", (13, 1000), "inside = (rows[:, None] < n_rows)", "inside = (rows[:, None] <= n_rows)",
     "the first at element 13,000 of `x_ptr` (13,000 elements). That is just past its end: is a mask missing"),
    ("bias_gelu_forward", (13, 1000), 'triton.cdiv(n_rows, meta["BLOCK_ROWS"])', 'n_rows // meta["BLOCK_ROWS"]',
     "never written in the last 5 rows (of 13), and right everywhere else: the grid stops short of the end"),
    ("bias_gelu_forward", (13, 1100), 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])',
     'n_columns // meta["BLOCK_COLUMNS"]', "never written in the last 76 columns (of 1,100)"),
    ("bias_gelu_forward", (5, 100), 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])',
     'n_columns // meta["BLOCK_COLUMNS"]', "is NaN everywhere: no program wrote it"),
    ("bias_gelu_forward", (13, 1000), OFFSETS, "offsets = rows[:, None] * BLOCK_COLUMNS + columns[None, :]",
     "is right on one row of 1,000 columns, but goes out of bounds (bias_gelu_forward_kernel loaded 288 elements "
     "outside the tensors it was given, the first at element 13,000 of `x_ptr` (13,000 elements)) on 13 rows"),
    ("bias_gelu_forward", (13, 1100), TILE_ROWS, TILE_ROWS.replace(".to(tl.int64) * BLOCK_ROWS", ".to(tl.int64)"),
     "never written in the last 4 rows (of 13), and right everywhere else (new tensors hold NaN here, so NaN means "
     "never written). That is not a grid that stops short"),
    ("bias_gelu_forward", (13, 1100), COLUMNS, COLUMNS.replace("program_id(1) * BLOCK_COLUMNS", "program_id(1) * BLOCK_ROWS"),
     "the blocks overlap, so no program reaches the end. Program i's columns start at i * BLOCK_COLUMNS"),
    ("bias_gelu_forward", (13, 1100), "    x = x.contiguous()\n    y = torch.empty_like(x)",
     "    y = torch.empty_like(x)", "is right on contiguous tensors, but gives wrong values when `x` is not contiguous"),
    ("bias_gelu_forward", (13, 1100, "float16"), LOADS, LOADS.replace("at_least_float32(", "("),
     "tl.math.erf and tl.exp take float32 or float64 only"),
    ("bias_gelu_forward", (13, 1100, "float16"), "y = torch.empty_like(x)", "y = torch.empty(x.shape, device=x.device)",
     "bias_gelu_forward's y is torch.float32, expected torch.float16"),
    ("bias_gelu_backward", (37, 300), "grad_bias.sum(0)", "grad_bias.sum(1)",
     "grad_bias has shape [2], expected [300]: summed over the wrong axis?"),
    ("bias_gelu_backward", (37, 300), AXIS_0, AXIS_0.replace("axis=0", "axis=1"),
     "two blocks of different shapes meet (a store, a mask, or arithmetic). A sum over the wrong axis does that"),
    ("bias_gelu_backward_atomic", (37, 300), AXIS_0, AXIS_0.replace("axis=0", "axis=1"),
     "failed (InterpreterError: ValueError(\"Cannot broadcast"),
    ("bias_gelu_backward", (37, 300), AXIS_0, "column_sums = tl.sum(grad_h, axis=0)",
     "grad_bias is NaN everywhere. Either the sums took in masked lanes"),
    ("bias_gelu_backward", (37, 300), 'grid = (triton.cdiv(n_rows, BACKWARD_TILE["BLOCK_ROWS"])',
     'grid = (n_rows // BACKWARD_TILE["BLOCK_ROWS"]', "grad_x is never written in the last 5 rows (of 37)"),
    ("bias_gelu_backward", (37, 300), OFFSETS, "offsets = rows[:, None] * BLOCK_COLUMNS + columns[None, :]",
     "is right on one row of 300 columns, but is wrong on 37 rows: the rows after the first are reached in the "
     "wrong place"),
    ("bias_gelu_backward", (37, 300), "x, grad_output = x.contiguous(), grad_output.contiguous()",
     "x = x.contiguous()", "gives wrong values when `grad_output` is not contiguous (here a slice of a wider "
                           "tensor: its rows lie 303 elements apart in memory, not 300)"),
    ("bias_gelu_backward_atomic", (37, 300), "torch.zeros(n_columns, dtype=wide, device=x.device) if atomic",
     "torch.empty(n_columns, dtype=wide, device=x.device) if atomic",
     "or tl.atomic_add added into a tensor that was not zero (new tensors, torch.empty, hold NaN here"),
    ("bias_gelu_backward_atomic", (37, 300), "tl.atomic_add(grad_bias_ptr + columns, column_sums, mask=in_columns)",
     "tl.store(grad_bias_ptr + columns, column_sums, mask=in_columns)",
     "holds only the last 5 rows' sum: the programs along the rows overwrote each other's sums (tl.store) instead "
     "of adding them (tl.atomic_add)"),
    ("bias_gelu_backward_atomic", (37, 300), "(grad_bias if atomic else grad_bias.sum(0))",
     "(2 * grad_bias if atomic else grad_bias.sum(0))", "grad_bias is twice the right value"),
]


@pytest.mark.parametrize("launcher, shape, old, new, named", MISTAKES, ids=[f"{m[0]}: {m[3][:60]}" for m in MISTAKES])
def test_check_kernel_names_the_mistake_in_a_wrong_kernel(tmp_path, launcher, shape, old, new, named):
    namespace = _mistaken(tmp_path, old, new)
    rows, columns, dtype = *shape[:2], getattr(torch, shape[2] if len(shape) > 2 else "float32")
    args = [torch.randn(rows, columns, dtype=dtype), torch.randn(columns, dtype=dtype)]
    if launcher != "bias_gelu_forward":
        args.append(torch.randn(rows, columns, dtype=dtype))
    reference = namespace["bias_gelu_reference" if launcher == "bias_gelu_forward" else "bias_gelu_backward_reference"]
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.float16 else {}
    outputs = ("y",) if launcher == "bias_gelu_forward" else ("grad_x", "grad_bias")
    with pytest.raises(AssertionError) as caught:
        check_kernel(namespace[launcher], reference, *args, outputs=outputs, **tolerance)
    assert named in str(caught.value), str(caught.value)


def test_check_kernel_passes_the_solution_and_names_a_wrong_axis_inside_square_tiles(tmp_path):
    namespace = solution_namespace()
    x, bias, grad_output = torch.randn(13, 1100), torch.randn(1100), torch.randn(13, 1100)
    check_kernel(namespace["bias_gelu_forward"], namespace["bias_gelu_reference"], x, bias)
    for launcher in ("bias_gelu_backward", "bias_gelu_backward_atomic"):
        check_kernel(namespace[launcher], namespace["bias_gelu_backward_reference"], x, bias, grad_output)
    half = [t.half() for t in (x, bias, grad_output)]
    check_kernel(namespace["bias_gelu_backward"], namespace["bias_gelu_backward_reference"], *half, rtol=1e-2, atol=1e-2)
    # With square tiles a sum over the wrong axis fits the shapes: only the values say so.
    square = _mistaken(tmp_path, AXIS_0, AXIS_0.replace("axis=0", "axis=1"))
    square["BACKWARD_TILE"] = {"BLOCK_ROWS": 16, "BLOCK_COLUMNS": 16, "num_warps": 4}
    with pytest.raises(AssertionError, match="summed over the wrong axis of each tile"):
        check_kernel(square["bias_gelu_backward"], square["bias_gelu_backward_reference"], torch.randn(40, 70),
                     torch.randn(70), torch.randn(40, 70))


@triton.jit
def _write_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * BLOCK + offsets, mask=offsets < n)
    if MODE == 0:  # every program stores the same elements: a race
        tl.store(y_ptr + offsets, x, mask=offsets < n)
    elif MODE == 1:  # every program adds into the same elements with atomics: no race
        tl.atomic_add(y_ptr + offsets, x, mask=offsets < n)
    elif MODE == 2:  # each program its own elements: no race
        tl.store(y_ptr + tl.program_id(0) * BLOCK + offsets, x, mask=offsets < n)
    else:  # a load, an addition and a store: right in the interpreter, a race on a GPU
        tl.store(y_ptr + offsets, tl.load(y_ptr + offsets, mask=offsets < n) + x, mask=offsets < n)
    tl.dot(tl.reshape(x, (4, 4)), tl.reshape(x, (4, 4)))


@pytest.mark.parametrize("mode, race", [(0, {"tensor": "y_ptr", "element": 0, "program": [1, 0, 0]}), (1, None),
                                        (2, None), (3, {"tensor": "y_ptr", "element": 0, "program": [1, 0, 0]})])
def test_watch_launches_finds_two_programs_writing_one_element_and_counts_tl_dot(mode, race):
    from triton.runtime import interpreter

    from autograder.student.kernels import watch_launches

    call = interpreter.GridExecutor.__call__
    with watch_launches() as watch:
        _write_kernel[(3,)](torch.randn(48), torch.zeros(48), 16, BLOCK=16, MODE=mode)
    assert watch.watching and watch.launches == [{"kernel": "_write_kernel", "dots": 3, "race": race}]
    assert interpreter.GridExecutor.__call__ is call  # put back after the block
    _write_kernel[(3,)](torch.randn(48), torch.zeros(48), 16, BLOCK=16, MODE=mode)
    assert len(watch.launches) == 1


def test_watch_launches_watches_nothing_where_kernels_are_not_interpreted(monkeypatch):
    from autograder.student.kernels import watch_launches

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with watch_launches() as watch:
        pass
    assert not watch.watching and watch.launches == []


def test_strided_false_leaves_the_non_contiguous_copies_out(tmp_path):
    # For a launcher meant for contiguous tensors only: the same mistake as above passes then.
    namespace = _mistaken(tmp_path, "    x = x.contiguous()\n    y = torch.empty_like(x)", "    y = torch.empty_like(x)")
    check_kernel(namespace["bias_gelu_forward"], namespace["bias_gelu_reference"], torch.randn(13, 1100),
                 torch.randn(1100), strided=False)


def test_a_grid_stops_short_only_at_a_multiple_of_a_block_less_than_one_block_from_the_end():
    assert _grid_stops_there(32, 37) and _grid_stops_there(1024, 1100)  # 8 (or 32) rows; 1024 columns
    assert not _grid_stops_there(12, 37) and not _grid_stops_there(1026, 2100)  # blocks that overlap


SOFTMAX_Y = "y = at_least_float32(tl.load(y_ptr + offsets, mask=inside, other=0.0))"


def _softmax_mistakes() -> dict:
    """The table of wrong derivations that 10's softmax test cell defines (its lines before ``x = randn``)."""
    [cell] = [c for c in json.loads(NOTEBOOK.read_text())["cells"]
              if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "test_triton_softmax"]
    definitions = "".join(cell["source"]).split("\nx = randn(")[0]
    namespace = {"torch": torch}
    exec(definitions, namespace)  # noqa: S102 - the course's own notebook
    return namespace["SOFTMAX_BACKWARD_MISTAKES"]


@pytest.mark.parametrize("old, new, named", [
    (SOFTMAX_Y, SOFTMAX_Y.replace(", other=0.0", ""), "Load y and grad_output with other=0.0"),
    ("y * (grad_output - tl.sum(grad_output * y, axis=0))", "y * grad_output", "the sum over the row is missing"),
    ("y * (grad_output - tl.sum(grad_output * y, axis=0))", "y * (tl.sum(grad_output * y, axis=0) - grad_output)",
     "its sign is flipped"),
])
def test_the_softmax_test_names_masked_lanes_and_wrong_derivations_before_check_function(tmp_path, old, new, named):
    softmax = _mistaken(tmp_path, old, new)["TritonSoftmax"]
    with pytest.raises(AssertionError) as caught:  # as the visible test cell runs them, in order
        explain_non_finite(softmax, (torch.randn(6, 10),), *SOFTMAX_NAN)
        explain_known_mistakes(softmax, (torch.randn(4, 6),), _softmax_mistakes())
    assert named in str(caught.value), str(caught.value)


def test_check_function_says_nan_where_a_masked_lane_was_used_not_a_pattern_it_cannot_see(tmp_path):
    softmax = _mistaken(tmp_path, SOFTMAX_Y, SOFTMAX_Y.replace(", other=0.0", ""))
    with pytest.raises(AssertionError) as caught:
        check_function(softmax["TritonSoftmax"], softmax["softmax_reference"], torch.randn(6, 10))
    assert "It holds NaN where torch's gradient is finite" in str(caught.value)
    assert "grad_output" not in str(caught.value).split("wrong.")[1].split("For a random")[0], str(caught.value)


FAKE = "return x.new_empty(x.shape)  # what the launcher returns: contiguous, whatever x's strides"


@pytest.mark.parametrize("old, new, named", [
    (FAKE, "return torch.empty_like(x)", "course::bias_gelu's fake (register_fake) does not match the operator: for "
                                         "its output, the operator returns strides (7, 1), its fake (1, 5)"),
    ("return bias_gelu_backward_op(x, bias, grad_output)", "return bias_gelu_backward(x, bias, grad_output)",
     "course::bias_gelu fails opcheck's test_aot_dispatch_dynamic: a kernel was launched on a fake tensor"),
    ("    return bias_gelu_forward(x, bias)\n", "    raise NotImplementedError()\n", NOT_DONE),
])
def test_check_custom_op_names_a_dishonest_fake_a_launch_in_backward_and_an_exercise_not_done(tmp_path, old, new,
                                                                                               named):
    namespace = _mistaken(tmp_path, old, new)
    x = torch.randn(7, 5, dtype=torch.float64).t()  # as the visible test: transposed
    with pytest.raises((AssertionError, NotImplementedError)) as caught:
        check_custom_op(namespace["bias_gelu_op"], x.detach().requires_grad_(), torch.randn(7, dtype=torch.float64,
                                                                                            requires_grad=True))
    assert named in str(caught.value), str(caught.value)
    assert "scroll up" not in str(caught.value)


def test_check_custom_op_passes_the_solutions_honest_fakes_on_a_transposed_input():
    namespace = solution_namespace(NOTEBOOK, CELLS)
    x, bias, grad_output = torch.randn(7, 5, dtype=torch.float64).t(), torch.randn(7, dtype=torch.float64), torch.randn(
        5, 7, dtype=torch.float64)
    check_custom_op(namespace["bias_gelu_op"], x.detach().requires_grad_(), bias.detach().requires_grad_())
    check_custom_op(namespace["bias_gelu_backward_op"], x, bias, grad_output)


def test_on_the_courses_pieces_a_launch_in_backward_is_still_found_and_a_broken_launcher_costs_nothing(tmp_path):
    """Exercise 5 runs on the course's own launchers (``on_pieces``): they raise, as a launch does, on the fake
    tensors opcheck traces with, so a backward formula that calls the launcher is named; a broken launcher of
    Exercise 1 is not used."""
    from autograder.student.checker.pieces import on_pieces

    x = torch.randn(7, 5, dtype=torch.float64).t()
    bias = torch.randn(7, dtype=torch.float64)
    launched = _mistaken(tmp_path, "return bias_gelu_backward_op(x, bias, grad_output)",
                         "return bias_gelu_backward(x, bias, grad_output)")
    with on_pieces(launched["bias_gelu_op"], "bias_gelu_forward", "bias_gelu_backward"):
        with pytest.raises(AssertionError, match="a kernel was launched on a fake tensor"):
            check_custom_op(launched["bias_gelu_op"], x.detach().requires_grad_(), bias.detach().requires_grad_())
    broken = _mistaken(tmp_path, 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])', 'n_columns // meta["BLOCK_COLUMNS"]')
    with on_pieces(broken["bias_gelu_op"], "bias_gelu_forward", "bias_gelu_backward"):
        check_custom_op(broken["bias_gelu_op"], x.detach().requires_grad_(), bias.detach().requires_grad_())
    assert broken["bias_gelu_forward"].__name__ == "bias_gelu_forward"  # the student's, put back after the block
    assert "bias_gelu_forward_kernel" in broken["bias_gelu_forward"].__code__.co_names
