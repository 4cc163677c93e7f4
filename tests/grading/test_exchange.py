"""JupyterHub's path: nbgrader's exchange, shared by instructor and students, configurable.

The instructor releases an assignment into an exchange folder ($AUTOGRADER_EXCHANGE), a student
(another home folder, nbgrader's own commands, no instructor settings) fetches it, answers and
submits it, the instructor collects and grades it: what JupyterHub does with one shared volume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autograder.authoring.release import release
from autograder.grading.grade import grade
from conftest import filled_release, solution_answers

ASSIGNMENT = "01_first_function"
# nbgrader's command line as in JupyterHub's docker-stacks images, where every user's server runs
# as the OS user `jovyan` and nbgrader takes the student's id from $JUPYTERHUB_USER. Every process
# here runs as root, so nbgrader's reading of the OS user name (and only that) is set to `jovyan`.
AS_JOVYAN = ("import sys, nbgrader.utils; nbgrader.utils.get_osusername = lambda: 'jovyan'; "
             "from nbgrader.apps.nbgraderapp import main; sys.exit(main())")
COURSE_ID = "custom-autograd-functions"


def _student_nbgrader(home, exchange, student: str, *args: str) -> subprocess.CompletedProcess:
    """nbgrader as a student's server runs it: their own folder, the exchange and course id set, nothing else."""
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_CONFIG_PATH", "AUTOGRADER_COURSE_ROOT",
                                                             "AUTOGRADER_EXCHANGE")}
    env.update(JUPYTERHUB_USER=student, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"))
    result = subprocess.run([sys.executable, "-c", AS_JOVYAN, *args, f"--course={COURSE_ID}",
                             f"--Exchange.root={exchange}"], cwd=home, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
def test_release_fetch_submit_collect_and_grade_through_a_shared_exchange(course_copy, tmp_path, monkeypatch):
    exchange = tmp_path / "srv" / "exchange"
    monkeypatch.setenv("AUTOGRADER_EXCHANGE", str(exchange))
    assert course_copy.config().Exchange.root == str(exchange)

    course_copy.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    release(course_copy, [ASSIGNMENT])  # the README's step: answer-level hints left out (answer-hints setting)
    course_copy.nbgrader("release_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    outbound = (exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    assert "Hint 1</summary>" in outbound and "the answer</summary>" not in outbound
    assert (exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    assert not (course_copy.grading / "exchange" / COURSE_ID).exists(), "the exchange is the configured one"

    answers = solution_answers(course_copy.root, ASSIGNMENT)
    for student in ("alice", "bob"):
        home = tmp_path / "home" / student
        home.mkdir(parents=True)
        _student_nbgrader(home, exchange, student, "fetch_assignment", ASSIGNMENT)
        fetched = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        released = json.loads((course_copy.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
        assert json.loads(fetched.read_text()) == released, "students fetch the release, nothing else"
        if student == "alice":  # alice answers everything; bob hands in the blank notebook
            fetched.write_text(json.dumps(filled_release(course_copy.root, ASSIGNMENT, answers)))
        _student_nbgrader(home, exchange, student, "submit", ASSIGNMENT)

    course_copy.nbgrader("collect", ASSIGNMENT, "--log-level=ERROR")
    for student in ("alice", "bob"):
        assert (course_copy.grading / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    rows = {r.student_id: r for r in grade(course_copy, ASSIGNMENT, jobs=1, progress=open(os.devnull, "w"))}
    assert sorted(rows) == ["alice", "bob"]
    assert rows["alice"].status == "graded" and rows["alice"].score == rows["alice"].max_score == 11
    assert rows["bob"].score == 0 and rows["bob"].max_score == 11
