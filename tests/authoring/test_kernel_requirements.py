"""10's and 11's kernel exercises state their requirement once, next to their tests, and say it in their prose.

Each requirement is a string a test cell assigns (``FORWARD_REQUIRES = "that a Triton kernel of your answer compute
y, ..."``) and passes to its checks (``requires=``), which quote it when it is broken ("This exercise requires <it>,
but ..."). The exercise's "How it is checked" paragraph says the same words. Every kernel check names the outputs it
judges (``outputs=``: ``y``, ``grad_bias``, never "result 1") and passes a requirement.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from conftest import REPO

NOTEBOOKS = [REPO / "solutions" / "10_triton_kernels" / "10_triton_kernels.ipynb",
             REPO / "solutions" / "11_flash_attention" / "11_flash_attention.ipynb"]
CHECKS = {"check_kernel": ("outputs", "requires"), "check_backward_kernel": ("names", "requires"),
          "check_attention_forward": ("requires",), "check_attention_backward": ("requires",)}


def _cells(path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _words(text: str) -> str:
    """Text as the prose and a string compare: without backticks and line breaks."""
    return re.sub(r"\s+", " ", text.replace("`", "")).strip()


def _requirements(path) -> list[tuple[str, str, str]]:
    """(test cell, requirement's name, its text) for each requirement a test cell of ``path`` states."""
    found = []
    for cell in _cells(path):
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if not cell["metadata"].get("nbgrader", {}).get("grade"):
            continue
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith(
                    "_REQUIRES"):
                found.append((grade_id, node.targets[0].id, ast.literal_eval(node.value)))
    return found


def _exercise_prose(path, test_id: str) -> str:
    """The markdown of the exercise whose test cell is ``test_id``: the last "## Exercise" cell before it."""
    prose = ""
    for cell in _cells(path):
        if cell["cell_type"] == "markdown" and "## Exercise" in "".join(cell["source"]):
            prose = "".join(cell["source"])
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == test_id:
            return prose
    raise AssertionError(f"no test cell {test_id}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_requirement_is_stated_once_and_said_in_its_exercises_prose(path):
    requirements = _requirements(path)
    assert len(requirements) >= 3
    names = [name for _, name, _ in requirements]
    assert len(names) == len(set(names)), names  # once
    for test_id, name, text in requirements:
        assert text.startswith("that "), (name, text)
        prose = _words(_exercise_prose(path, test_id))
        assert f"requires {_words(text)}" in prose, (test_id, name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_kernel_check_names_its_outputs_and_its_requirement(path):
    checked = 0
    for cell in _cells(path):
        if not cell["metadata"].get("nbgrader", {}).get("grade"):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECKS:
                keywords = {k.arg for k in node.keywords}
                assert set(CHECKS[node.func.id]) <= keywords, (cell["metadata"]["nbgrader"]["grade_id"],
                                                               ast.unparse(node)[:120])
                checked += 1
    assert checked >= 8
