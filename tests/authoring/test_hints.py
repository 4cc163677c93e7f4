"""Every exercise offers progressive hints, collapsed, in Markdown that renders inside them."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, nbgrader_meta, read_notebook, source

# The assignments reworked for hints (issue 17); the others join this list when they get theirs.
WITH_HINTS = ["01_first_function", "02_saving_for_backward", "03_non_tensor_arguments",
              "04_multiple_inputs_and_outputs", "06_checking_gradients", "07_gpu_timing"]
DETAILS = re.compile(r"<details>(.*?)</details>", re.S)
SUMMARY = re.compile(r"^<summary>Hint \d[^<]*</summary>\n\n.+\n\n$", re.S)


def _exercises(cells: list[dict]) -> list[tuple[str, str]]:
    """(first solution grade_id, statement) for each "## Exercise" Markdown cell."""
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and re.search(r"^## Exercise", source(cell), re.M):
            following = [nbgrader_meta(c).get("grade_id") for c in cells[i + 1:] if nbgrader_meta(c).get("solution")]
            found.append((following[0] if following else "?", source(cell)))
    return found


@pytest.mark.parametrize("assignment", WITH_HINTS)
def test_every_exercise_has_collapsed_progressive_hints(assignment):
    for folder in ("solutions", "course"):
        cells = read_notebook(REPO / folder / assignment / f"{assignment}.ipynb")["cells"]
        exercises = _exercises(cells)
        assert exercises, f"{folder}/{assignment}: no '## Exercise' cell found"
        for grade_id, statement in exercises:
            blocks = DETAILS.findall(statement)
            assert blocks, f"{folder}/{assignment}, exercise before '{grade_id}': no <details> hint"
            assert statement.count("<details") == len(blocks), f"{assignment} '{grade_id}': unbalanced <details>"
            assert "<details open" not in statement, f"{assignment} '{grade_id}': hints must start collapsed"
            for number, block in enumerate(blocks, start=1):
                # Blank lines around the body let JupyterLab and nbconvert render its Markdown and maths.
                assert SUMMARY.match(block), f"{assignment} '{grade_id}', hint {number}: want '<summary>Hint N...</summary>', a blank line, the text, a blank line"
                assert f"Hint {number}" in block.split("</summary>")[0], f"{assignment} '{grade_id}': hints should be numbered 1, 2, ..."
