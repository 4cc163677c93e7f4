"""The Colab setup cell: first in every notebook, from one script, idempotent; README links agree."""

from __future__ import annotations

import json
import re
import shutil

from autograder.authoring.colab import (CELL_ID, add_setup_cells, binder_url, colab_url, setup_source,
                                        student_repository, update_readme_links)
from autograder.authoring.course import Course
from conftest import REPO, read_notebook, source


def test_every_notebook_starts_with_the_setup_cell_for_the_students_repository():
    expected = setup_source(student_repository(Course(REPO)))
    notebooks = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("course/*/*.ipynb"))
    assert len(notebooks) >= 14
    for path in notebooks:
        first = read_notebook(path)["cells"][0]
        assert (first["id"], first["cell_type"], source(first), first["outputs"]) == (CELL_ID, "code", expected, []), path
        assert "nbgrader" not in first["metadata"], "a plain cell: nothing to grade, nothing locked"
    assert "import google.colab" in expected and "%pip install" in expected and "solutions" not in expected


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


def test_readme_links_open_the_student_notebooks_of_the_students_repository():
    readme = (REPO / "README.md").read_text()
    repository = student_repository(Course(REPO))
    linked = set(re.findall(r"https://colab\.research\.google\.com/github/\S+?\.ipynb", readme))
    notebooks = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("course/*/*.ipynb"))
    assert linked == {colab_url(repository, n) for n in notebooks}
    for n in notebooks:
        assert binder_url(repository, n) in readme
    assert "solutions/" not in " ".join(linked)


def test_the_script_rewrites_the_readme_links_for_the_notebooks_of_course(tmp_path):
    """When an assignment is added, `python -m autograder.authoring.colab` brings the table up to date."""
    shutil.copytree(REPO / "course", tmp_path / "course")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    course = Course(tmp_path)
    assert not update_readme_links(course)
    shutil.copytree(tmp_path / "course" / "09_production_pytorch", tmp_path / "course" / "10_next")
    (tmp_path / "course" / "10_next" / "09_production_pytorch.ipynb").rename(tmp_path / "course" / "10_next" / "10_next.ipynb")
    assert update_readme_links(course)
    readme = (tmp_path / "README.md").read_text()
    assert colab_url(student_repository(course), "course/10_next/10_next.ipynb") in readme
    assert readme.count("[Open in Colab]") == (REPO / "README.md").read_text().count("[Open in Colab]") + 1
