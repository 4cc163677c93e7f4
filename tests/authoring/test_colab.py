"""The Colab setup cell: first in every notebook, from one script, idempotent; README links agree."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from autograder.authoring.colab import (CELL_ID, PLACEHOLDER, REPOSITORY_VARIABLE, add_setup_cells, binder_url,
                                        colab_url, setup_source, student_repository, update_readme_links)
from autograder.course import Course, CourseError
from conftest import REPO, read_notebook, source

CLASS = "https://github.com/example-class/autograd-2027"


def test_every_notebook_starts_with_the_setup_cell_for_the_students_repository():
    expected = setup_source(student_repository(Course(REPO)))
    notebooks = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("course/*/*.ipynb"))
    assert len(notebooks) >= 14
    for path in notebooks:
        first = read_notebook(path)["cells"][0]
        assert (first["id"], first["cell_type"], source(first), first["outputs"]) == (CELL_ID, "code", expected, []), path
        assert "nbgrader" not in first["metadata"], "a plain cell: nothing to grade, nothing locked"
    assert "import google.colab" in expected and "%pip install" in expected and "solutions" not in expected


def test_the_repository_is_one_setting_and_the_placeholder_makes_no_link(tmp_path, monkeypatch):
    monkeypatch.delenv(REPOSITORY_VARIABLE, raising=False)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    course = Course(tmp_path)
    assert PLACEHOLDER in (tmp_path / "pyproject.toml").read_text() and student_repository(course) is None
    with pytest.raises(CourseError, match="student-repository"):
        student_repository(course, required=True)
    placeholder_cell = setup_source(None)
    assert "%pip install --quiet" not in placeholder_cell and "print(" in placeholder_cell
    (tmp_path / "pyproject.toml").write_text((tmp_path / "pyproject.toml").read_text().replace(
        f"https://github.com/{PLACEHOLDER}/custom-autograd-course-student", CLASS + ".git"))
    assert student_repository(course) == CLASS
    monkeypatch.setenv(REPOSITORY_VARIABLE, "https://github.com/someone/fork/")
    assert student_repository(course) == "https://github.com/someone/fork"  # the variable wins
    monkeypatch.setenv(REPOSITORY_VARIABLE, "https://gitlab.com/someone/fork")
    with pytest.raises(CourseError, match="GitHub"):
        student_repository(course)


def test_the_script_is_idempotent_and_only_inserts_one_cell(tmp_path):
    for folder in ("solutions",):
        shutil.copytree(REPO / folder, tmp_path / folder)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    course = Course(tmp_path)
    assert add_setup_cells(course) == [], "the committed notebooks already have the cell"
    path = tmp_path / "solutions" / "01_first_function" / "01_first_function.ipynb"
    with_cell = path.read_text()
    nb = json.loads(with_cell)
    del nb["cells"][0]
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    assert add_setup_cells(course) == [path]
    assert path.read_text() == with_cell, "the cell goes back exactly, nothing else changes"
    assert add_setup_cells(course) == []


def test_without_a_repository_the_readme_has_no_broken_link():
    readme = (REPO / "README.md").read_text()
    assert student_repository(Course(REPO)) is None, "the shipped setting is the placeholder"
    assert "colab.research.google.com/github/" not in readme and "mybinder.org/v2/gh/" not in readme
    assert PLACEHOLDER + "/" not in readme


def test_the_script_writes_the_readme_links_for_the_notebooks_of_course(tmp_path, monkeypatch):
    """Once the repository is named, and when an assignment is added, the script brings the table up to date."""
    monkeypatch.delenv(REPOSITORY_VARIABLE, raising=False)
    shutil.copytree(REPO / "course", tmp_path / "course")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    course = Course(tmp_path)
    assert not update_readme_links(course)
    monkeypatch.setenv(REPOSITORY_VARIABLE, CLASS)
    assert update_readme_links(course)
    readme = (tmp_path / "README.md").read_text()
    linked = set(re.findall(r"https://colab\.research\.google\.com/github/\S+?\.ipynb", readme))
    notebooks = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("course/*/*.ipynb"))
    assert len(notebooks) >= 9 and linked == {colab_url(CLASS, n) for n in notebooks}
    assert all(binder_url(CLASS, n) in readme for n in notebooks) and "solutions/" not in " ".join(linked)
    shutil.copytree(tmp_path / "course" / "09_production_pytorch", tmp_path / "course" / "10_next")
    (tmp_path / "course" / "10_next" / "09_production_pytorch.ipynb").rename(tmp_path / "course" / "10_next" / "10_next.ipynb")
    assert update_readme_links(course)
    readme = (tmp_path / "README.md").read_text()
    assert colab_url(CLASS, "course/10_next/10_next.ipynb") in readme
    assert readme.count("[Open in Colab]") == len(notebooks) + 1
    assert not update_readme_links(course)
