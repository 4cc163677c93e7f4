"""Where the course lives on disk, and how to run nbgrader on it with this course's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

CONFIG_DIR = Path(__file__).resolve().parent  # nbgrader_config.py lives beside this file
REPO_ROOT = CONFIG_DIR.parents[1]


@dataclass(frozen=True)
class Course:
    """A course folder laid out as nbgrader expects, with this repository's folder names."""

    root: Path = REPO_ROOT

    @classmethod
    def from_environment(cls) -> "Course":
        """The course at ``$AUTOGRADER_COURSE_ROOT`` if set (as nbgrader_config.py reads it), else this repository."""
        return cls(Path(os.environ.get("AUTOGRADER_COURSE_ROOT") or REPO_ROOT).resolve())

    @property
    def solutions(self) -> Path:
        return self.root / "solutions"

    @property
    def release(self) -> Path:
        return self.root / "course"

    @property
    def grading(self) -> Path:
        return self.root / "grading"

    def assignments(self) -> list[str]:
        """Assignment ids: the folders of ``solutions/``, in course order."""
        return sorted(p.name for p in self.solutions.iterdir() if p.is_dir() and not p.name.startswith("."))

    def notebooks(self, assignment: str, released: bool = False) -> list[Path]:
        folder = (self.release if released else self.solutions) / assignment
        return sorted(folder.glob("*.ipynb"))

    def check_assignment(self, assignment: str) -> None:
        if not (self.solutions / assignment).is_dir():
            known = ", ".join(self.assignments()) or "none"
            raise CourseError(f"no assignment '{assignment}' in {self.solutions} (known: {known})")

    def environment(self) -> dict[str, str]:
        """Environment for nbgrader: this course's config, and this Python's bin/ first on PATH.

        nbgrader runs ``alembic`` from PATH when it makes a new gradebook; the first one on
        PATH must be the one installed beside this nbgrader.
        """
        env = dict(os.environ)
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
            [str(CONFIG_DIR)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p])
        env["AUTOGRADER_COURSE_ROOT"] = str(self.root)
        env["PATH"] = _python_bin_first(env.get("PATH", ""))
        return env

    def config(self) -> Config:
        """The settings in ``nbgrader_config.py``, as nbgrader sees them for this course."""
        saved = os.environ.get("AUTOGRADER_COURSE_ROOT")
        os.environ["AUTOGRADER_COURSE_ROOT"] = str(self.root)
        try:
            return PyFileConfigLoader("nbgrader_config.py", path=str(CONFIG_DIR)).load_config()
        finally:
            if saved is None:
                del os.environ["AUTOGRADER_COURSE_ROOT"]
            else:
                os.environ["AUTOGRADER_COURSE_ROOT"] = saved

    def gradebook(self):
        """Open this course's gradebook (nbgrader's ``Gradebook``), creating it if need be.

        Creating one runs ``alembic`` from PATH, so this Python's bin/ is put first on PATH here too.
        """
        from nbgrader.api import Gradebook
        from nbgrader.coursedir import CourseDirectory

        os.environ["PATH"] = _python_bin_first(os.environ.get("PATH", ""))
        coursedir = CourseDirectory(config=self.config())
        return Gradebook(coursedir.db_url, coursedir.course_id)

    def nbgrader(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run the ``nbgrader`` command line on this course; output is captured."""
        command = [sys.executable, "-m", "nbgrader", *args]
        result = subprocess.run(command, cwd=self.root, env=self.environment(),
                                capture_output=True, text=True)
        if check and result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise CourseError(f"nbgrader {' '.join(args)} failed (exit {result.returncode}):\n{tail}")
        return result


def _python_bin_first(path: str) -> str:
    """``path`` (a PATH value) with this Python's bin/ first, where nbgrader looks for ``alembic``."""
    bin_dir = str(Path(sys.executable).parent)
    return path if path.split(os.pathsep)[0] == bin_dir else os.pathsep.join([bin_dir, path])


class CourseError(Exception):
    """A problem an instructor can fix; the CLI prints it as one clear message."""


def release(course: Course, assignments: list[str] | None = None) -> list[Path]:
    """Generate the student version of each assignment into ``course/`` (no gradebook needed)."""
    written = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        course.nbgrader("generate_assignment", assignment, "--force", "--no-db", "--log-level=WARN")
        written += course.notebooks(assignment, released=True)
    return written
