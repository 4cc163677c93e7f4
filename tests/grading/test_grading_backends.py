"""Grading with a PostgreSQL gradebook (a real server the test starts) and on a local Dask cluster."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.course import Course
from autograder.grading.demo.make_demo import ASSIGNMENT, DEMO_ROOT
from conftest import REPO
from test_grading import EXPECTED, autograder, grades_csv

POSTGRES_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(*command: str, **kwargs) -> subprocess.CompletedProcess:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` user when we are root."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run(prefix + list(command), check=True, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL server on localhost with an empty database; its SQLAlchemy URL."""
    if not POSTGRES_BIN:
        pytest.skip("PostgreSQL server not installed (make test installs Debian's postgresql)")
    bin_dir = Path(POSTGRES_BIN[-1])
    base = Path(tempfile.mkdtemp(prefix="autograder-pg-", dir="/tmp"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    port = _free_port()
    _as_postgres(str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres")
    _as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "start",
                 "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1")
    try:
        _as_postgres(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "gradebook")
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/gradebook"
    finally:
        _as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _demo_course(root: Path) -> Course:
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / folder)
    return Course(root)


# Three of the demo class (full marks, a wrong sign, a file that is not a notebook): what a backend stores and
# schedules is the same for each student; the whole class's scores are test_grading.py's.
STUDENTS = ("ada", "dana", "gus")
SCORES = {student: EXPECTED["scores"][student] for student in STUDENTS}
GRADABLE = sum(score is not None for score in SCORES.values())


def _download(root: Path) -> Path:
    """A download folder with those three students' files."""
    for student in STUDENTS:
        shutil.copytree(DEMO_ROOT / ASSIGNMENT / student, root / "download" / student)
    return root / "download"


def _assert_demo_grades(course: Course) -> None:
    rows = grades_csv(course)
    assert sorted(rows) == sorted(STUDENTS)
    for student, expected in SCORES.items():
        assert float(rows[student]["score"]) == (expected or 0), student
        assert rows[student]["status"] == ("graded" if expected is not None else "invalid notebook")


@pytest.mark.slow
def test_postgresql_gradebook(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_DB_URL", postgres_url)
    course = _demo_course(tmp_path / "course")
    autograder(course, "collect", ASSIGNMENT, str(_download(tmp_path)))
    autograder(course, "grade", ASSIGNMENT)
    _assert_demo_grades(course)
    assert not (course.grading / "gradebook.db").exists(), "the SQLite gradebook was not used"
    with Gradebook(postgres_url) as gb:  # the grades live in PostgreSQL
        assert gb.find_submission(ASSIGNMENT, "ada").score == 11
        assert gb.find_submission(ASSIGNMENT, "dana").score == EXPECTED["scores"]["dana"]
    autograder(course, "feedback", ASSIGNMENT)
    report = autograder(course, "report", ASSIGNMENT)
    assert f"students graded: {len(STUDENTS)}" in report.stdout  # gus too, with 0
    autograder(course, "grade", ASSIGNMENT)  # resuming reads the PostgreSQL gradebook too
    _assert_demo_grades(course)


@pytest.mark.slow
def test_dask_cluster(tmp_path):
    import dask
    from distributed import LocalCluster

    course = _demo_course(tmp_path / "course")
    autograder(course, "collect", ASSIGNMENT, str(_download(tmp_path)))
    # Workers fork a process per notebook, which Dask allows once workers are not daemons.
    with dask.config.set({"distributed.worker.daemon": False}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = autograder(course, "grade", ASSIGNMENT, "--scheduler", cluster.scheduler_address)
        # The scheduler's log shows each readable notebook computed on the cluster.
        computed = {entry[0] for entry in cluster.scheduler.transition_log
                    if str(entry[0]).startswith("run_task-") and entry[2] == "memory"}
    _assert_demo_grades(course)
    assert f"{GRADABLE} graded, 1 invalid notebook" in result.stdout
    assert len(computed) == GRADABLE, computed
