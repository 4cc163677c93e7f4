"""What instructor commands draw (rich): a line per student with the time left in a log, a bar on a
terminal, and tables that a log or grep reads as plainly as a person."""

from __future__ import annotations

import io
import re

from autograder.grading.results.terminal import GradingProgress, print_markdown, print_table, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_grading_progress_in_a_log_prints_count_and_time_left():
    out = io.StringIO()
    bar = GradingProgress(4, out)
    bar.advance(1)          # resumed students: counted, not printed
    bar.advance(1, "ada")
    bar.advance(1, "ben")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"grading 2/4 ada \(\d+:\d\d elapsed, \d+:\d\d left\)", lines[0]), lines
    assert re.fullmatch(r"grading 3/4 ben \(\d+:\d\d elapsed, \d+:\d\d left\)", lines[1]), lines


def test_grading_says_first_how_many_at_a_time_and_that_kernel_notebooks_are_slow(course):
    """Issue 47: `grade` of 10 or 11 said nothing before its first notebook ended, a minute later on a busy machine."""
    from autograder.grading.grade import _what_grading_takes

    out = io.StringIO()
    GradingProgress(4, out, _what_grading_takes(course, "11_flash_attention", 4, 2)).close()
    first, second = out.getvalue().splitlines()
    assert first == ("4 submissions of 11_flash_attention: those graded before and unchanged are kept, "
                     "the others graded 2 at a time")
    assert "Triton's interpreter" in second and "takes longer" in second
    slow = [a for a in course.assignments() if "\n" in _what_grading_takes(course, a, 4, 2)]
    assert slow == ["10_triton_kernels", "11_flash_attention"]


def test_grading_progress_on_a_terminal_draws_a_bar_with_count_and_time_left():
    out = Terminal()
    bar = GradingProgress(4, out)
    bar.advance(2, "ada")
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without the terminal's escape codes
    bar.close()
    assert "2/4" in drawn and "ada" in drawn and "left" in drawn and "━" in drawn, drawn
    assert re.search(r"\d:\d\d:\d\d", drawn), drawn  # the time left, as rich's column shows it


def test_progress_off_a_terminal_yields_everything_silently(capsys):
    assert list(progress(range(5), "counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_a_table_in_a_log_is_plain_text_one_row_a_line_never_cut():
    out = io.StringIO()
    long_name = "a_student_with_a_very_long_identifier_" * 5
    print_table(["student", "score", "status"], [["ada", "11 / 11", "graded"],
                                                 [long_name, "3 / 11", "graded; late 4 h 30 min, -3.3 points"]],
                out, right=["score"])
    lines = [line.rstrip() for line in out.getvalue().splitlines() if line.strip()]
    assert "\x1b" not in out.getvalue()
    assert re.fullmatch(r"student\s+score\s+status", lines[0])
    assert re.fullmatch(r"ada\s+11 / 11\s+graded", lines[2]), lines
    assert lines[3].startswith(long_name) and lines[3].endswith("graded; late 4 h 30 min, -3.3 points")
    assert len(lines) == 4  # header, rule, two rows


def test_the_report_summary_is_drawn_as_a_table_on_a_terminal_and_kept_as_markdown_in_a_log():
    summary = "# 01: class report\n\n| exercise | pass rate |\n|---|---|\n| test_cube | 75% |"
    log, terminal = io.StringIO(), Terminal()
    print_markdown(summary, log)
    print_markdown(summary, terminal)
    assert log.getvalue() == summary + "\n"
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    assert "|---|" not in drawn and re.search(r"test_cube\s+75%", drawn) and "───" in drawn, drawn
