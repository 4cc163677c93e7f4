"""The progress bars: a line per student with the count and time left when stderr is a log, not a terminal."""

from __future__ import annotations

import io

from autograder.grading.progress import GradingProgress
from autograder.grading.progress import progress


def test_grading_progress_in_a_log_prints_count_and_time_left():
    out = io.StringIO()
    bar = GradingProgress(4, out)
    bar.advance(1)          # resumed students: counted, not printed
    bar.advance(1, "ada")
    bar.advance(1, "ben")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "2/4" in lines[0] and "ada" in lines[0] and "<" in lines[0]  # elapsed<left
    assert "3/4" in lines[1] and "ben" in lines[1]


def test_progress_off_a_terminal_yields_everything_silently(capsys):
    assert list(progress(range(5), "counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
