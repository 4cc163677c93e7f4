"""The demo's own workspace: a course folder of its own, so that the demo class never meets a real one.

``python -m autograder demo`` grades the demo class in ``build/demo/`` beside the course: assignment 01's
``solutions/`` and ``course/`` copied there, with a ``grading/`` of its own (gradebook, deadline, feedback,
reports, exports). The course's own ``grading/``, where a real class is graded, is never touched: no demo
student appears in its ``grades.csv``, and the demo's deadline and penalties apply to no real student.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from autograder.course import Course, is_dropping
from autograder.grading.demo.make_demo import ASSIGNMENT

WORKSPACE = Path("build") / "demo"  # under the course's root; `make clean` removes build/ too


def demo_workspace(course: Course) -> Course:
    """A fresh copy of the demo's course in ``course.root / WORKSPACE`` (anything of an earlier demo removed)."""
    root = course.root / WORKSPACE
    shutil.rmtree(root, ignore_errors=True)
    for folder in (course.solutions, course.release):
        shutil.copytree(folder / ASSIGNMENT, root / folder.name / ASSIGNMENT,
                        ignore=lambda _, names: [n for n in names if is_dropping(n)])
    if (course.root / "pyproject.toml").is_file():  # who wrote the course, for the feedback pages' footer
        shutil.copyfile(course.root / "pyproject.toml", root / "pyproject.toml")
    return Course(root)
