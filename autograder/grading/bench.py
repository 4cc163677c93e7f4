"""``make bench-grade``: this course's grader against plain sequential ``nbgrader autograde``.

Both grade the same N generated submissions of assignment 01 (copies of the demo class: right,
partly right, typical bugs, a syntax error) in two throwaway copies of the course, in the same
run. Setting up the gradebook is left out of both times. The scores must be identical.

    python -m autograder bench --students 40

(A ``python -m autograder`` subcommand, not ``python -m autograder.grading.bench``: the worker processes
import a ``-m`` main module again unless it is a package's ``__main__``, and that would cost
every notebook the import of nbgrader.)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.authoring.course import Course
from autograder.grading.demo.make_demo import ASSIGNMENT, demo_notebooks
from autograder.grading.grade import _sync_gradebook, grade


def _course_with_submissions(source: Course, root: Path, students: int) -> tuple[Course, list[str]]:
    course = Course(root)
    for folder in ("solutions", "course"):
        shutil.copytree(source.root / folder, root / folder)
    variants = {name: text for name, text in demo_notebooks(source).items() if text.rstrip().endswith("}")}
    names = sorted(variants)
    ids = []
    for i in range(students):
        variant = names[i % len(names)]
        student = f"s{i:03d}-{variant}"
        folder = course.grading / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(variants[variant], encoding="utf-8")
        ids.append(student)
    return course, ids


def _scores(course: Course, students: list[str]) -> dict[str, float | None]:
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        found = {}
        for student in students:
            try:
                found[student] = float(gb.find_submission(ASSIGNMENT, student).score)
            except Exception:
                found[student] = None
        return found


def bench(source: Course, students: int = 40, jobs: int | None = None, out=sys.stdout) -> dict:
    """Time both graders on the same submissions; return the times, the ratio and any score differences."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as ours_dir, \
            tempfile.TemporaryDirectory(prefix="bench-nbgrader-") as theirs_dir:
        ours, ids = _course_with_submissions(source, Path(ours_dir), students)
        theirs, _ = _course_with_submissions(source, Path(theirs_dir), students)
        _sync_gradebook(ours, ASSIGNMENT)
        theirs.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")

        print(f"grading {students} submissions of {ASSIGNMENT} with plain `nbgrader autograde` (sequential) ...",
              file=out, flush=True)
        started = time.monotonic()
        theirs.nbgrader("autograde", ASSIGNMENT, "--log-level=ERROR", check=False)
        nbgrader_seconds = time.monotonic() - started

        print(f"grading the same {students} with `python -m autograder grade` ...", file=out, flush=True)
        started = time.monotonic()
        grade(ours, ASSIGNMENT, jobs=jobs, progress=open("/dev/null", "w"))
        ours_seconds = time.monotonic() - started

        ours_scores, theirs_scores = _scores(ours, ids), _scores(theirs, ids)
        differences = {s: (ours_scores[s], theirs_scores[s]) for s in ids if ours_scores[s] != theirs_scores[s]}
    ratio = nbgrader_seconds / ours_seconds
    print(f"nbgrader autograde: {nbgrader_seconds:7.1f} s  ({nbgrader_seconds / students:.2f} s per notebook)", file=out)
    print(f"autograder grade:   {ours_seconds:7.1f} s  ({ours_seconds / students:.2f} s per notebook)", file=out)
    print(f"speed-up:           {ratio:7.1f}x", file=out)
    if differences:
        print(f"SCORES DIFFER for {len(differences)} students (ours, nbgrader): {differences}", file=out)
    else:
        print(f"scores identical for all {students} students", file=out)
    return {"nbgrader_seconds": nbgrader_seconds, "ours_seconds": ours_seconds, "ratio": ratio,
            "differences": differences}
