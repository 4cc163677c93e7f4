"""Hints in levels (issue 27): the answer level ("Hint N: the answer") is left out of what students are
graded on, and kept where the answers are meant to be read (autograder.authoring.hints)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring.hints import answer_hints, has_answer_hints, strip_answer_hints
from autograder.authoring.publish import publish
from autograder.course import Course
from conftest import REPO, source

CLASS_REPOSITORY = "https://github.com/example-class/autograd-2027"

# 05's final formulas, as its answer-level hints state them: a graded release must show none.
FINAL_FORMULAS_05 = [
    r"y_j\big(g_j - \sum_i g_i y_i\big)",                                                  # Softmax's VJP
    r"\operatorname{softmax}(x)_j - [j = t]",                                               # softmax minus one-hot
    "the softmax minus the one-hot",
    r"g_x = r\,\big(g_{\hat x} - \operatorname{mean}(g_{\hat x}) - \hat x \cdot",            # LayerNorm's g_x
    r"g_V = P^\top g_O",                                                                    # the attention gradients
    r"g_S = P \odot \big(g_P - \sum_{\text{row}} g_P \odot P\big)",
    r"g_Q = g_S K / \sqrt d",
    r"g_K = g_S^\top Q / \sqrt d",
]


def _markdown(path: Path) -> str:
    return "\n".join(source(c) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "markdown")


def test_stripping_removes_the_answer_level_and_nothing_else():
    text = ("Do this.\n\n<details><summary>Hint 1</summary>\n\nthink\n\n</details>\n"
            "<details><summary>Hint 2: the answer</summary>\n\n`return x`\n\n</details>\nAfter.")
    assert strip_answer_hints(text) == ("Do this.\n\n<details><summary>Hint 1</summary>\n\nthink\n\n</details>\n"
                                        "After.")
    assert has_answer_hints(text) and not has_answer_hints(strip_answer_hints(text))


@pytest.mark.parametrize("assignment", Course(REPO).assignments())
def test_the_graded_release_holds_no_answer_level_and_the_solutions_keep_it(assignment):
    assert answer_hints(Course(REPO)) == "strip"
    released = _markdown(REPO / "course" / assignment / f"{assignment}.ipynb")
    assert not has_answer_hints(released) and "the answer</summary>" not in released
    assert has_answer_hints(_markdown(REPO / "solutions" / assignment / f"{assignment}.ipynb"))


def test_05s_final_formulas_are_in_its_solutions_and_in_no_graded_release():
    solutions = _markdown(REPO / "solutions" / "05_deriving_backward" / "05_deriving_backward.ipynb")
    assert all(formula in solutions for formula in FINAL_FORMULAS_05)  # the list names real strings
    released = _markdown(REPO / "course" / "05_deriving_backward" / "05_deriving_backward.ipynb")
    assert [f for f in FINAL_FORMULAS_05 if f in released] == []


@pytest.fixture(scope="module")
def editions(tmp_path_factory):
    root = tmp_path_factory.mktemp("editions")
    course = Course(REPO)
    return (publish(course, root / "student-edition", archive=False, repository=CLASS_REPOSITORY),
            publish(course, root / "self-study-edition", self_study=True, archive=False, repository=CLASS_REPOSITORY))


def test_the_students_edition_has_no_answer_level_and_the_self_study_edition_every_level(editions):
    graded, self_study = editions
    for notebook in sorted((graded / "course").glob("*/*.ipynb")):
        text = _markdown(notebook)
        assert not has_answer_hints(text), notebook.name
        assert [f for f in FINAL_FORMULAS_05 if f in text] == [], notebook.name
    for notebook in sorted((self_study / "course").glob("*/*.ipynb")):
        assert has_answer_hints(_markdown(notebook)), notebook.name
    assert all(f in _markdown(self_study / "course" / "05_deriving_backward" / "05_deriving_backward.ipynb")
               for f in FINAL_FORMULAS_05)


@pytest.mark.slow
def test_keep_in_the_setting_keeps_the_answer_level_in_the_release(tmp_path):
    root = tmp_path / "course"
    shutil.copytree(REPO / "solutions" / "01_first_function", root / "solutions" / "01_first_function")
    settings = (REPO / "pyproject.toml").read_text().replace('answer-hints = "strip"', 'answer-hints = "keep"')
    assert 'answer-hints = "keep"' in settings
    (root / "pyproject.toml").write_text(settings)
    course = Course(root)
    result = subprocess.run([sys.executable, "-m", "autograder", "release", "01_first_function"], cwd=root,
                            env=course.environment(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert has_answer_hints(_markdown(root / "course" / "01_first_function" / "01_first_function.ipynb"))


# The backwards of 08's and 09's derivation exercises as the statements and hints once gave them: none may
# appear in any of their Markdown, self-study included (the student derives them).
GIVEN_BACKWARDS_08_09 = {
    "08_torch_func": ["grad_output * x.clamp(-delta, delta)", r"h_\delta'(x) = \operatorname{clamp}",
                      "flip(-1).cumsum(-1).flip(-1)", r"\sum_{i \ge j} g_i", r"= e^{x_i - \mathrm{lse}(x)}",
                      "softmax = torch.exp(x - output.unsqueeze(-1))", r"\sum_i \mathrm{softmax}_i\, t_i"],
    "09_production_pytorch": [r"\mathbb{1}[\,|w| \le 1\,]", "(w.abs() <= 1).to(grad_output.dtype)",
                              r"w_{ij} = g_{ij} / D_{ij}", "-weighted.sum(0)"],
}


@pytest.mark.parametrize("assignment", sorted(GIVEN_BACKWARDS_08_09))
def test_08_and_09_give_no_backward_to_derive_in_statements_or_hints(assignment):
    for folder in ("solutions", "course"):
        text = _markdown(REPO / folder / assignment / f"{assignment}.ipynb")
        assert [given for given in GIVEN_BACKWARDS_08_09[assignment] if given in text] == [], folder
