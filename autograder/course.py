"""Where the course lives on disk, and how to run nbgrader on it with this course's settings.

The bottom of the package: every wing (authoring, grading, the commands) finds the course's
folders, its nbgrader settings and its gradebook here; it imports nothing from them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

CONFIG_DIR = Path(__file__).resolve().parent / "authoring"  # where nbgrader_config.py lives
ROOT_VARIABLE = "AUTOGRADER_COURSE_ROOT"
# What Jupyter, Python and editors leave beside course files (Jupyter's .ipynb_checkpoints, caches,
# backups, hidden files such as .DS_Store or vim's .swp): never part of an assignment, wherever course
# files are copied or compared. Patterns of a file or folder name, as nbgrader's CourseDirectory.ignore.
DROPPINGS = (".*", "__pycache__", "*.pyc", "*~", "Thumbs.db", "desktop.ini")


def is_dropping(relative: Path | str) -> bool:
    """Whether a path (relative to a course folder) is, or is inside, something ``DROPPINGS`` names."""
    return any(fnmatch(part, pattern) for part in Path(relative).parts for pattern in DROPPINGS)


@dataclass(frozen=True)
class Course:
    """A course folder laid out as nbgrader expects, with this repository's folder names.

    The root is always given: the package may be installed anywhere (site-packages, a wheel),
    so it never guesses the course from its own location.
    """

    root: Path

    @classmethod
    def locate(cls, root: Path | str | None = None) -> "Course":
        """The course at ``root`` (``--course``), else ``$AUTOGRADER_COURSE_ROOT``, else the current folder.

        The folder must hold ``solutions/`` (the instructor's course) or ``course/`` (a student
        distribution); anything else is a clear error, not a traceback later.
        """
        chosen = root or os.environ.get(ROOT_VARIABLE) or Path.cwd()
        course = cls(Path(chosen).expanduser().resolve())
        if not (course.solutions.is_dir() or course.release.is_dir()):
            how = ("--course" if root else f"${ROOT_VARIABLE}" if os.environ.get(ROOT_VARIABLE)
                   else "the current folder")
            raise CourseError(f"no course at {course.root} ({how}): it has neither solutions/ nor course/; "
                              f"run from the course's folder, pass --course DIR or set {ROOT_VARIABLE}")
        return course

    @property
    def authors(self) -> str:
        """Who wrote the course: ``[project] authors`` in the course's pyproject.toml, the one setting the book's
        footer, LICENSE and CITATION.cff name (tests check they agree)."""
        import tomllib

        try:
            project = tomllib.loads((self.root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            project = {}
        names = [a["name"] for a in project.get("authors", []) if isinstance(a, dict) and a.get("name")]
        return ", ".join(names) or "the course's authors"

    @property
    def has_solutions(self) -> bool:
        """True for the instructor's course (and a self-study edition); False in a student distribution."""
        return self.solutions.is_dir()

    @property
    def solutions(self) -> Path:
        return self.root / "solutions"

    @property
    def release(self) -> Path:
        return self.root / "course"

    @property
    def grading(self) -> Path:
        return self.root / "grading"

    @property
    def hidden_from_notebooks(self) -> list[Path]:
        """The folders a notebook's sandbox hides, alike when ``grade`` runs it and when ``check`` does."""
        return [self.root, self.grading, self.solutions]

    def assignments(self) -> list[str]:
        """Assignment ids: the folders of ``solutions/`` (``course/`` where there are no solutions), in order."""
        folder = self.solutions if self.has_solutions else self.release
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))

    def notebooks(self, assignment: str, released: bool = False) -> list[Path]:
        folder = (self.release if released else self.solutions) / assignment
        return sorted(folder.glob("*.ipynb"))

    def check_assignment(self, assignment: str) -> None:
        if assignment not in self.assignments():
            known = ", ".join(self.assignments()) or "none"
            folder = self.solutions if self.has_solutions else self.release
            raise CourseError(f"no assignment '{assignment}' in {folder} (known: {known})")

    def environment(self) -> dict[str, str]:
        """Environment for nbgrader: this course's config, and this Python's bin/ first on PATH.

        nbgrader runs ``alembic`` from PATH when it makes a new gradebook; the first one on
        PATH must be the one installed beside this nbgrader.
        """
        env = dict(os.environ)
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
            [str(CONFIG_DIR)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p])
        env[ROOT_VARIABLE] = str(self.root)
        env["PATH"] = _python_bin_first(env.get("PATH", ""))
        return env

    def config(self) -> Config:
        """The settings in ``nbgrader_config.py``, as nbgrader sees them for this course."""
        saved = os.environ.get(ROOT_VARIABLE)
        os.environ[ROOT_VARIABLE] = str(self.root)
        try:
            return PyFileConfigLoader("nbgrader_config.py", path=str(CONFIG_DIR)).load_config()
        finally:
            if saved is None:
                del os.environ[ROOT_VARIABLE]
            else:
                os.environ[ROOT_VARIABLE] = saved

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

