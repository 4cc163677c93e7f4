"""No student stops the class: what grading does with a submission it cannot handle.

``grade`` prepares, runs and scores one notebook after another in one process. A notebook that makes
any of those steps raise (whatever is in it, whatever its process sent) must not end the batch with a
traceback: that notebook scores 0 and its student's row and feedback page say why ("invalid
notebook", with the error), and every other student is graded as usual. ``Contained`` adds this to
the grader (``autograder.grading.grade._Grader``); its messages name the exception, never its
traceback.
"""

from __future__ import annotations

from pathlib import Path

from autograder.course import CourseError
from autograder.grading.records.grades import Row, worsen
from autograder.grading.records.submissions import write_problem_notebook
from autograder.grading.running.preparation import remove_working_folder


def outcome(future):
    """A finished task's Execution, or the exception its run raised (its notebook's row then says so); a
    CourseError (the grading set-up is wrong, e.g. a Dask worker that may not start processes) stops the run."""
    try:
        return future.result()
    except CourseError:
        raise
    except Exception as error:
        return error


def why(error: BaseException) -> str:
    """An exception in a few words, for a row and a feedback page."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


class Contained:
    """The grader's ways around a submission that makes it raise (mixed into ``grade._Grader``)."""

    def prepare_or_say_why(self, student: str):
        """``prepare(student)``; a submission that cannot be prepared gets a row saying why and no tasks."""
        try:
            return self.prepare(student)
        except CourseError:
            raise
        except Exception as error:
            return self.unusable(student, f"the grader could not prepare it ({why(error)})"), []

    def finish_task_or_say_why(self, task, execution) -> Row | None:
        """``finish_task``; a notebook whose run or results the grader cannot score (``execution`` may be
        the exception its run raised) scores 0 with a page saying why."""
        remove_working_folder(task.cwd)  # whatever the notebook left there
        try:
            if isinstance(execution, BaseException):
                raise execution
            return self.finish_task(task, execution)
        except Exception as error:
            self.sanitized.pop((task.student_id, task.notebook_id), None)
            problem = f"{task.notebook_id}.ipynb: the grader could not score it ({why(error)})"
            if task.student_id not in self.pending:  # it failed while moving the graded folder into place
                return self.finish_student(task.student_id, self.unusable(task.student_id, problem))
            row, _ = self.pending[task.student_id]
            self.score_zero(row, task.notebook_id, Path(task.graded), problem)
            return self.notebook_done(task.student_id)

    def unusable(self, student: str, problem: str) -> Row:
        """The row of a submission the grader could not handle at all, with its staging folder made ready to
        be finished (``finish_student``): every notebook scores 0 and its page says why."""
        self.pending.pop(student, None)
        assignment = self.assignment
        row = assignment.row(student)
        worsen(row, "invalid notebook", problem)
        staging = assignment.fresh_staging(student)
        try:  # in the gradebook with 0, as grades.csv has it (and so nbgrader makes the student's page)
            with assignment.gradebook() as gb:
                gb.update_or_create_student(student)
                gb.update_or_create_submission(assignment.name, student)
            for notebook_id in assignment.notebook_ids:
                assignment.zero(student, notebook_id)
        except Exception:  # registering it is what failed: `feedback` then gives it a page saying so
            pass
        for notebook_id in assignment.notebook_ids:
            self.sanitized.pop((student, notebook_id), None)
            write_problem_notebook(staging / f"{notebook_id}.ipynb", problem)
        return row
