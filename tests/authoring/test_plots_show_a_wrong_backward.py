"""The plots that compare a student's gradient with torch's show a wrong backward as wrong (issue 34).

Each plot runs in its notebook's own cells, once with the instructor's answer and once with a backward
that forgets ``grad_output``: with the answer the two curves agree; with the forgetful one they visibly
differ, as the caption says, although with an upstream gradient of ones (what the plots used before)
they would have agreed.
"""

from __future__ import annotations

import matplotlib
import torch

from conftest import REPO, read_notebook, source

matplotlib.use("Agg")


def _cells(assignment: str) -> dict[str, str]:
    return {c.get("id"): source(c) for c in read_notebook(REPO / "solutions" / assignment / f"{assignment}.ipynb")["cells"]
            if c["cell_type"] == "code"}


def _run(assignment: str, cell_ids: list[str], namespace: dict | None = None) -> dict:
    """The namespace after running the notebook's cells ``cell_ids`` in order (figures closed)."""
    import matplotlib.pyplot as plt

    cells, namespace = _cells(assignment), dict(namespace or {})
    for cell_id in cell_ids:
        exec(compile(cells[cell_id], cell_id, "exec"), namespace)  # noqa: S102  (our own notebook)
    plt.close("all")
    return namespace


def _forgetful(function, derivative):
    """``function`` with a backward that returns its local derivative without multiplying by grad_output."""
    def backward(ctx, grad_output):
        (saved,) = ctx.saved_tensors
        return (derivative(saved),) + (None,) * (len(ctx.needs_input_grad) - 1)
    return type(f"Forgetful{function.__name__}", (function,), {"backward": staticmethod(backward)})


def test_01s_sqrt_plot_separates_a_backward_that_forgets_grad_output():
    right = _run("01_first_function", ["cell-01e86ade", "sqrt", "cell-c0b2bcf1"])
    assert torch.allclose(right["mine"], right["torchs"])
    forgetful = _forgetful(right["Sqrt"], lambda y: 1 / (2 * y))
    wrong = _run("01_first_function", ["cell-c0b2bcf1"], {**right, "Sqrt": forgetful})
    assert (wrong["mine"] - wrong["torchs"]).abs().max() > 1  # visibly apart on the plot's scale
    assert (wrong["mine"] > 0).all() and (wrong["torchs"] < 0).any()  # "above zero everywhere", no waves
    grid = torch.linspace(0.05, 4, 200, requires_grad=True)  # the old plot's all-ones upstream gradient:
    (ones,) = torch.autograd.grad(forgetful.apply(grid).sum(), grid)
    (truth,) = torch.autograd.grad(torch.sqrt(grid).sum(), grid)
    assert torch.allclose(ones, truth)  # the forgetful backward matched


def test_03s_clamp_plot_separates_a_backward_that_forgets_grad_output():
    right = _run("03_non_tensor_arguments", ["cell-6ab4c5c2", "clamp", "cell-dd117f84"])
    assert torch.allclose(right["mine"], right["torchs"])
    forgetful = _forgetful(right["Clamp"], lambda x: ((x >= -1.0) & (x <= 1.5)).float())
    wrong = _run("03_non_tensor_arguments", ["cell-dd117f84"], {**right, "Clamp": forgetful})
    assert (wrong["mine"] - wrong["torchs"]).abs().max() > 1
    assert set(wrong["mine"].unique().tolist()) == {0.0, 1.0}  # "flat steps instead of waves"
    grid = torch.linspace(-2, 2, 401, requires_grad=True)
    (ones,) = torch.autograd.grad(forgetful.apply(grid, -1.0, 1.5).sum(), grid)
    (truth,) = torch.autograd.grad(grid.clamp(-1.0, 1.5).sum(), grid)
    assert torch.equal(ones, truth)


def test_04s_topk_plot_gives_each_selected_entry_its_own_upstream_gradient():
    right = _run("04_multiple_inputs_and_outputs", ["cell-009f4c18", "top_k", "cell-7035001c", "cell-d7732d54"])
    x, indices = right["x"], right["indices"]
    assert x.grad[indices].tolist() == [4.0, 3.0, 2.0, 1.0]  # the largest entry receives 4, the next 3, ...
    assert x.grad.count_nonzero() == 4

    class ScattersOnes(right["TopK"]):
        @staticmethod
        def backward(ctx, grad_values, grad_indices):
            (indices,) = ctx.saved_tensors
            ones = torch.ones_like(grad_values)
            return torch.zeros(ctx.x_shape, dtype=ones.dtype).scatter(-1, indices, ones), None

    wrong = _run("04_multiple_inputs_and_outputs", ["cell-d7732d54"], {**right, "TopK": ScattersOnes})
    assert wrong["x"].grad[wrong["indices"]].tolist() == [1.0, 1.0, 1.0, 1.0]  # visibly not 4, 3, 2, 1
    grads = []
    for function in (right["TopK"], ScattersOnes):  # with values.sum(), the old plot's loss, they agree
        leaf = x.detach().clone().requires_grad_()
        function.apply(leaf, 4)[0].sum().backward()
        grads.append(leaf.grad)
    assert torch.equal(*grads)

