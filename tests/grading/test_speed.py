"""What makes grading fast, counted (never timed): which processes a run starts, which notebooks it executes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from autograder import cli
from autograder.grading import grade as grading
from autograder.grading.demo.make_demo import ASSIGNMENT, DEMO_ROOT
from autograder.grading.records.grades import GRADES_CSV


@pytest.fixture
def counted(monkeypatch):
    """Counts of every subprocess this process starts (nbgrader's command line, alembic...) and of
    every notebook grading executes."""
    counts = {"subprocesses": [], "notebooks": []}

    class CountedPopen(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            counts["subprocesses"].append(args)
            super().__init__(args, *rest, **kwargs)

    def counted_execute(cells, cwd, *rest, **kwargs):
        counts["notebooks"].append(cwd)
        return real_execute(cells, cwd, *rest, **kwargs)

    real_execute = grading.execute
    monkeypatch.setattr(subprocess, "Popen", CountedPopen)
    monkeypatch.setattr(grading, "execute", counted_execute)
    return counts


@pytest.mark.slow
def test_a_second_grade_run_with_nothing_changed_starts_no_nbgrader_and_runs_no_notebook(
        course_copy, counted, monkeypatch, capsys):
    for student in ("ada", "chen"):
        shutil.copytree(DEMO_ROOT / ASSIGNMENT / student, course_copy.grading / "submitted" / student / ASSIGNMENT)
    monkeypatch.setenv("AUTOGRADER_COURSE_ROOT", str(course_copy.root))

    # The first run makes the gradebook and records the assignment in it, in this process.
    assert cli.main(["grade", ASSIGNMENT]) == 0
    assert counted["subprocesses"] == []
    assert len(counted["notebooks"]) == 2
    first = (course_copy.grading / GRADES_CSV).read_text()
    assert "ada,01_first_function,11,11,graded" in first and "chen,01_first_function,9,11,graded" in first

    counted["notebooks"].clear()
    assert cli.main(["grade", ASSIGNMENT]) == 0
    assert counted["subprocesses"] == [] and counted["notebooks"] == []
    assert (course_copy.grading / GRADES_CSV).read_text() == first
    assert "2 graded" in capsys.readouterr().out


def test_the_command_line_parses_grade_without_importing_torch():
    """The warm process imports torch while the command imports nbgrader: the command itself must not
    (it did once, through the `book` command's module, which costs every `grade` about 2 s of CPU)."""
    code = ("import sys; from autograder import cli; cli.build_parser().parse_args(['grade', 'x']); "
            "import autograder.grading.grade; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
