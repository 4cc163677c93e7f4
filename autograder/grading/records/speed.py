"""nbgrader's gradebook steps, made cheap enough to run once per notebook in the grading process.

Grading spends most of its coordinating time in nbgrader's own code, not in the notebooks
(measured on the 2-core machine, see README "Where one notebook's time goes"):

- every ``nbgrader.api.Gradebook(...)`` (nbgrader's preprocessors open about seven per
  notebook) builds a new SQLAlchemy engine, so every query is compiled again, each time, and
  checks again that each of its tables exists and that the course is recorded (about twenty
  queries: most of the ~150 a notebook cost);
- every SQLite commit waits for the disk (~30 ms here) in SQLite's default rollback-journal
  mode, and a notebook needs about twenty commits;
- every cell's nbgrader metadata is checked with ``jsonschema.validate``, which checks the
  schema itself again before checking the cell;
- a new gradebook asks the ``alembic`` command (a second Python process) for the schema version;
- ``nbgrader generate_assignment`` as a command starts a Python process that imports nbgrader.

``nbgrader_speedups()`` removes those costs for the time it is active, without changing what is
computed: one engine per database URL (so compiled queries are reused), the tables and the course
checked at the first opening of each gradebook only, SQLite in WAL mode with
``synchronous=NORMAL`` (a commit no longer waits for the disk; the database stays consistent
if the process is killed, and only the last commits can be lost if the machine loses power), a
validator built once per schema (the same checks, the same first error), and alembic's head
revision read in this process. ``sync_assignment()`` is ``nbgrader generate_assignment`` run in
this process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from autograder.course import Course, CourseError

_engines: dict[str, object] = {}


_active = 0


@contextmanager
def nbgrader_speedups():
    """While active, nbgrader's gradebook and metadata checks in this process take the fast paths above."""
    global _active
    import jsonschema
    import nbgrader.api
    import nbgrader.nbgraderformat.common as common

    gradebook = nbgrader.api.Gradebook
    saved = (nbgrader.api.create_engine, nbgrader.api.get_alembic_version, gradebook.__init__, gradebook.close,
             common.jsonschema)
    nbgrader.api.create_engine = _shared_engine
    nbgrader.api.get_alembic_version = _alembic_head
    gradebook.__init__ = _opened_once(saved[2])
    gradebook.close = _close_keeping_engine
    common.jsonschema = _CachedValidation(jsonschema)
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        (nbgrader.api.create_engine, nbgrader.api.get_alembic_version, gradebook.__init__, gradebook.close,
         common.jsonschema) = saved
        if not _active:
            _opened.clear()
            while _engines:
                _engines.popitem()[1].dispose()


_opened: set[tuple[str, str]] = set()  # (database URL, course id) whose tables and course are known to be there


def _opened_once(first_opening):
    """``Gradebook.__init__`` that checks the tables and the course (``first_opening``: nbgrader's own) only the
    first time a gradebook is opened while the speed-ups are active; later openings only connect."""
    def opened(self, db_url: str, course_id: str = "default_course", authenticator=None) -> None:
        from sqlalchemy.orm import scoped_session, sessionmaker

        if (str(db_url), course_id) not in _opened:
            first_opening(self, db_url, course_id, authenticator)
            _opened.add((str(db_url), course_id))
            return
        self.engine = _shared_engine(db_url, echo=False, future=True)
        self.db = scoped_session(sessionmaker(autoflush=True, bind=self.engine, future=True))
        self.course_id, self.authenticator = course_id, authenticator

    return opened


def _shared_engine(url, **kwargs):
    """One SQLAlchemy engine per database URL, kept open while the speed-ups are active."""
    key = str(url)
    if key not in _engines:
        from sqlalchemy import create_engine, event

        engine = create_engine(url, **kwargs)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_without_waiting_for_disk)
        _engines[key] = engine
    return _engines[key]


def _close_keeping_engine(gradebook) -> None:
    """``Gradebook.close()`` without closing the shared engine's connections (closing the last
    connection to a WAL database writes it back to the main file, ~25 ms each time)."""
    gradebook.db.remove()


def _sqlite_without_waiting_for_disk(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _alembic_head() -> str:
    """What ``alembic heads`` prints first for nbgrader's migrations, without starting alembic."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_heads()[0]


class _CachedValidation:
    """``jsonschema`` for nbgrader's metadata checks, with one validator per schema."""

    def __init__(self, jsonschema) -> None:
        self._jsonschema = jsonschema
        self._validators: dict[str, object] = {}  # by the schema's JSON (nbgrader reads it again for each notebook)

    def __getattr__(self, name):
        return getattr(self._jsonschema, name)

    def validate(self, instance, schema) -> None:
        """``jsonschema.validate``: the schema is checked once, then the same best-match error is raised."""
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            cls = self._jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = self._validators[key] = cls(schema)
        error = self._jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


def sync_assignment(course: Course, assignment: str) -> None:
    """``nbgrader generate_assignment ASSIGNMENT --force`` in this process: the gradebook gets the
    assignment's notebooks and tests; the student version goes to a scratch folder (``course/``
    is left exactly as committed)."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.converters.base import NbGraderException

    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    with tempfile.TemporaryDirectory(prefix="autograder-release-") as scratch, nbgrader_speedups():
        config = course.config()
        config.CourseDirectory.release_directory = scratch
        config.CourseDirectory.assignment_id = assignment
        config.Application.log_level = "ERROR"
        app = GenerateAssignment(coursedir=CourseDirectory(config=config), config=config)
        app.force = True
        said = _ErrorLines()
        app.log.addHandler(said)  # nbgrader logs the reason and raises "Please see the above traceback"
        try:
            app.start()
        except NbGraderException as error:
            why = said.lines[-1] if said.lines else str(error)
            raise CourseError(f"nbgrader could not record assignment {assignment} in the gradebook: {why}") from error
        finally:
            app.log.removeHandler(said)


class _ErrorLines(logging.Handler):
    """The error lines nbgrader logs (its exception says only "Please see the above traceback")."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record) -> None:
        line = record.getMessage().strip().splitlines()
        if line and "above traceback" not in line[-1]:
            self.lines.append(line[-1][:300])

