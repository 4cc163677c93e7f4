"""The Colab setup cell: right below the title of every notebook, from one script, idempotent, never a
placeholder address; README links agree."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from autograder.authoring.colab import (CELL_ID, PLACEHOLDER, REPOSITORY_VARIABLE, add_setup_cells, binder_url,
                                        colab_url, setup_source, student_repository, title_position,
                                        update_readme_links)
from autograder.course import Course, CourseError
from conftest import REPO, read_notebook, source

CLASS = "https://github.com/example-class/autograd-2027"


def setup_cell(cells: list[dict]) -> tuple[int, dict]:
    """(position, cell) of a notebook's one setup cell."""
    [(index, cell)] = [(i, c) for i, c in enumerate(cells) if c.get("id") == CELL_ID]
    return index, cell


def test_every_notebook_has_the_setup_cell_right_below_its_title():
    expected = setup_source(student_repository(Course(REPO)))
    notebooks = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("course/*/*.ipynb"))
    assert len(notebooks) >= 14
    for path in notebooks:
        cells = read_notebook(path)["cells"]
        index, cell = setup_cell(cells)
        assert (cell["cell_type"], source(cell), cell["outputs"]) == ("code", expected, []), path
        assert "nbgrader" not in cell["metadata"], "a plain cell: nothing to grade, nothing locked"
        title = cells[index - 1] if index else None
        assert title and title["cell_type"] == "markdown" and source(title).startswith("# "), f"{path}: not below the title"
        assert all("OWNER/NAME" not in source(c) for c in cells), path
    assert "import google.colab" in expected and "solutions" not in expected


def test_the_setup_cell_never_shows_a_placeholder_address():
    for cell in (setup_source(None), setup_source(CLASS)):
        assert "OWNER" not in cell and PLACEHOLDER not in cell and "NAME" not in cell
    assert "%pip install" not in setup_source(None) and "students' repository" in setup_source(None)
    assert f"%pip install --quiet \"custom-autograd-course @ git+{CLASS}\"" in setup_source(CLASS)


def test_the_repository_is_one_setting_and_the_placeholder_makes_no_link(tmp_path, monkeypatch):
    monkeypatch.delenv(REPOSITORY_VARIABLE, raising=False)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    course = Course(tmp_path)
    assert PLACEHOLDER in (tmp_path / "pyproject.toml").read_text() and student_repository(course) is None
    with pytest.raises(CourseError, match="student-repository"):
        student_repository(course, required=True)
    placeholder_cell = setup_source(None)
    assert "%pip install --quiet" not in placeholder_cell and "print(" in placeholder_cell
    assert "OWNER/NAME" not in placeholder_cell
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
    index, cell = setup_cell(nb["cells"])
    del nb["cells"][index]
    assert title_position(nb["cells"]) == index == 1
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    assert add_setup_cells(course) == [path]
    assert path.read_text() == with_cell, "the cell goes back exactly, nothing else changes"
    nb["cells"].insert(0, cell)  # where an earlier version put it: above the title
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    assert add_setup_cells(course) == [path]
    assert path.read_text() == with_cell, "moved below the title"
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
