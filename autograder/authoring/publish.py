"""The student distribution: ``python -m autograder publish`` (``make student-dist``).

Writes a self-contained folder (and a zip of it) holding what students get and nothing else:
``course/`` (the released notebooks), the student's library (``autograder.student`` and the few
modules ``check`` needs to grade a notebook against its visible tests), a README for students,
the environment files (``pyproject.toml``, ``constraints.txt``, ``environment.yml``, ``binder/``)
and a small Makefile. No solution, no hidden test, and none of the instructor's tools that need
them (release, validate, book, timing recorder, the demo class, the grading batch) are in it.

Its Jupyter settings come with its installation, however a student installs it (``make``, pip,
conda, Binder): the edition's ``pyproject.toml`` installs them into the environment's
``etc/jupyter`` (setuptools ``data-files``), where Jupyter reads them however JupyterLab is
started: nbgrader's instructor tools (formgrader, Create Assignment, the course list) and
JupyterLab's news prompt off, and the course's nbgrader settings for the Validate button. Jupyter
reads no configuration from the folder it is started in, and setuptools installs no data files
in an editable install, so the edition is installed as a copy (``pip install '.[jupyter]'``).
The folder is meant to become the class's public repository: the Colab setup cell of every
notebook installs the library from there (see ``autograder.authoring.colab``).

``--self-study`` writes the self-study edition instead: the same, plus ``solutions/`` (model
answers and hidden tests), labelled as such, so ``check`` runs every test.
"""

from __future__ import annotations

import ast
import re
import shutil
import string
from pathlib import Path

from autograder.authoring.colab import add_setup_cell, binder_url, checked_repository, links_table, student_repository
from autograder.authoring.hints import answer_hints, restore_answer_hints, strip_notebook
from autograder.course import Course, CourseError, is_dropping

TEMPLATES = Path(__file__).resolve().parent / "student_edition"
# A student distribution ships the student's library and what `python -m autograder check` needs
# (the course's folders and nbgrader settings, the grading pipeline that runs one notebook): these
# modules and every module they import, found by reading their imports (``_shipped_modules``), so
# a new import is shipped without a list to keep up to date. Of the commands (``autograder.commands``)
# only ``check`` is shipped: the CLI lists what is installed, so the edition's --help shows only it.
STUDENT_ENTRY_POINTS = ("__init__.py", "__main__.py", "cli.py", "course.py", "student", "authoring/nbgrader_config.py",
                        "commands/__init__.py", "commands/check.py", "grading/selfcheck.py",
                        # what cli.py imports before a command that runs notebooks (check's warm process)
                        "grading/records/speed.py", "grading/running/executor.py")
NOT_FOLLOWED = ("cli.py",)
# What students need of the dependencies: the library itself and JupyterLab with nbgrader (the
# Validate button and `check`); not the instructor's cluster, PostgreSQL or test tools.
STUDENT_EXTRAS = ("jupyter",)


def _shipped_modules(package: Path) -> list[Path]:
    """The package's .py files a student distribution needs: the entry points and, at any depth,
    every ``autograder`` module they import (with the ``__init__.py`` of each package on the way)."""
    def files_of(module: str) -> list[Path]:
        parts = module.split(".")[1:]
        if not parts:
            return [package / "__init__.py"]
        relative = Path(*parts)
        candidates = [package / relative.with_suffix(".py"), package / relative / "__init__.py"]
        return [path for path in candidates if path.is_file()]

    todo = [path for entry in STUDENT_ENTRY_POINTS
            for path in ((package / entry).rglob("*.py") if (package / entry).is_dir() else [package / entry])]
    shipped: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in shipped or "__pycache__" in path.parts:
            continue
        shipped.add(path)
        for parent in path.relative_to(package).parents:
            todo.append(package / parent / "__init__.py")
        if path.relative_to(package).as_posix() in NOT_FOLLOWED:
            names = imported_modules(path, module_level_only=True)
        else:
            names = imported_modules(path)
        for name in names:
            todo += files_of(name)
    return sorted(shipped)


def imported_modules(path: Path, module_level_only: bool = False) -> set[str]:
    """``autograder`` modules (and ``from autograder.x import y`` candidates) imported by ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else ast.walk(tree)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name == "autograder" or name.startswith("autograder.")}


def publish(course: Course, out: Path, self_study: bool = False, archive: bool = True,
            repository: str | None = None, assignments: list[str] | None = None) -> Path:
    """Write the student distribution (or the self-study edition) of ``course`` into ``out``.

    ``out`` is replaced. Returns ``out``; with ``archive``, ``out.zip`` is written beside it.
    ``repository`` is where the edition will be published (default: the course's setting, which
    must then name one): its notebooks install the library from there on Colab, and its README
    links there. ``assignments`` are the ones released so far (default: all of ``course/``): later
    notebooks build on earlier answers (07 uses 02's SiLU), so a class gets each assignment once
    the ones before it are due.
    """
    if not course.has_solutions or not course.release.is_dir():
        raise CourseError(f"publish needs the instructor's course (solutions/ and course/) at {course.root}")
    repository = checked_repository(repository) if repository else student_repository(course)
    released = sorted(p.name for p in course.release.iterdir() if any(p.glob("*.ipynb")))
    for assignment in assignments or ():
        course.check_assignment(assignment)
        if assignment not in released:
            raise CourseError(f"{assignment} is not released in {course.release}: run `make release` first")
    assignments = sorted(set(assignments or released))
    out = Path(out).resolve()
    package = Path(__file__).resolve().parents[1]
    if out == course.root or out in course.root.parents or out in (course.release, course.solutions, package):
        raise CourseError(f"refusing to replace {out} with the distribution: choose a new folder")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    for assignment in assignments:
        shutil.copytree(course.release / assignment, out / "course" / assignment, ignore=_junk)
        if self_study:
            shutil.copytree(course.solutions / assignment, out / "solutions" / assignment, ignore=_junk)
    for notebook in sorted((out / "course").glob("*/*.ipynb")):
        if self_study:  # every hint level, as in solutions/ (course/ may lack the answer level)
            restore_answer_hints(notebook, course.solutions / notebook.parent.name / notebook.name)
        elif answer_hints(course) == "strip":  # as `make release` made course/ (whatever state course/ is in)
            strip_notebook(notebook)
        add_setup_cell(notebook, repository)  # installs from where this edition is published
    for module in _shipped_modules(package):
        for path in (module, module.with_suffix(".json")):  # a module's own data goes with it (judging/allowed.json)
            if path.is_file():
                target = out / "autograder" / path.relative_to(package)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    for data in (package / "student" / "data").glob("*"):
        (out / "autograder" / "student" / "data").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data, out / "autograder" / "student" / "data" / data.name)
    shutil.copyfile(course.root / "constraints.txt", out / "constraints.txt")
    settings = (course.root / "pyproject.toml").read_text(encoding="utf-8")  # the edition names its own home
    if repository:
        settings = re.sub(r'(?m)^student-repository = ".*"$', f'student-repository = "{repository}"', settings)
    (out / "pyproject.toml").write_text(settings + _students_jupyter(out), encoding="utf-8")
    if (course.root / "binder").is_dir():
        shutil.copytree(course.root / "binder", out / "binder", ignore=_junk)
        requirements = out / "binder" / "requirements.txt"
        if requirements.is_file():  # a copy, with its Jupyter settings (see above)
            requirements.write_text(_not_editable(requirements.read_text(encoding="utf-8")), encoding="utf-8")
    (out / "environment.yml").write_text(_student_environment(course), encoding="utf-8")
    (out / "Makefile").write_text((TEMPLATES / "Makefile").read_text(encoding="utf-8"), encoding="utf-8")
    (out / ".gitignore").write_text((TEMPLATES / "gitignore").read_text(encoding="utf-8"), encoding="utf-8")
    if (course.root / "LICENSE").is_file():
        shutil.copyfile(course.root / "LICENSE", out / "LICENSE")
    (out / "README.md").write_text(_readme(course, self_study, repository, assignments, out.name), encoding="utf-8")
    if archive:
        shutil.make_archive(str(out), "zip", root_dir=out.parent, base_dir=out.name)
    return out


# Off in the students' edition: nbgrader's instructor tools (server extensions and Lab plugins), and
# JupyterLab's announcements (the "get notified about official Jupyter news?" prompt, update checks).
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
HIDDEN_LAB_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list", "@jupyterlab/apputils-extension:announcements")
# The edition's Jupyter settings: its folder -> where in the environment they are installed. A server
# setting in jupyter_server_config.d/ is read after nbgrader's own nbgrader.json (which turns the
# formgrader on) because its name sorts later; page_config.d/ is JupyterLab's, beside page_config.json.
JUPYTER_CONFIG = "jupyter-config"
JUPYTER_FILES = {"jupyter_server_config.d/students_edition.json": "etc/jupyter/jupyter_server_config.d",
                 "labconfig/page_config.d/students_edition.json": "etc/jupyter/labconfig/page_config.d"}


def _students_jupyter(out: Path) -> str:
    """Write the edition's Jupyter settings into ``out``; return the pyproject table that installs them
    (with the course's nbgrader settings, which Validate reads) into the environment's etc/jupyter."""
    import json

    settings = {"jupyter_server_config.d/students_edition.json":
                {"ServerApp": {"jpserver_extensions": {name: False for name in INSTRUCTOR_SERVER_EXTENSIONS}}},
                "labconfig/page_config.d/students_edition.json":
                {"disabledExtensions": {name: True for name in HIDDEN_LAB_PLUGINS}}}
    table = ["", "# The students' edition: its Jupyter settings, installed into the environment's etc/jupyter",
             "# (see autograder/authoring/publish.py).", "[tool.setuptools.data-files]",
             '"etc/jupyter" = ["autograder/authoring/nbgrader_config.py"]']
    for name, folder in JUPYTER_FILES.items():
        path = out / JUPYTER_CONFIG / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings[name], indent=2) + "\n", encoding="utf-8")
        table.append(f'"{folder}" = ["{JUPYTER_CONFIG}/{name}"]')
    return "\n".join(table) + "\n"


def _not_editable(requirements: str) -> str:
    """``-e .[extras]`` made ``.[extras]``: installed as a copy, so its Jupyter settings are installed too."""
    return re.sub(r"(?m)^-e (\.\[[^\]]*\])$", r"\1", requirements)


def _junk(folder: str, names: list[str]) -> list[str]:
    """For shutil.copytree: Jupyter's checkpoints, caches and editors' droppings are not copied."""
    return [n for n in names if is_dropping(n)]


def _student_environment(course: Course) -> str:
    """environment.yml without the instructor's extras: their pins dropped, `.[jupyter]` installed (a copy,
    with its Jupyter settings)."""
    import tomllib

    project = tomllib.loads((course.root / "pyproject.toml").read_text())["project"]
    dropped = {_name(r) for extra, reqs in project.get("optional-dependencies", {}).items()
               if extra not in STUDENT_EXTRAS for r in reqs}
    lines = ["# Conda environment for the course (conda env create -f environment.yml): the tested",
             "# versions of constraints.txt, then the course's library with JupyterLab and nbgrader."]
    for line in (course.root / "environment.yml").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        pin = re.match(r"\s*- ([A-Za-z0-9_.\-]+)==", line)
        if pin and _name(pin[1]) in dropped:
            continue
        lines.append(re.sub(r"-e \.\[[^\]]*\]", f".[{','.join(STUDENT_EXTRAS)}]", line))
    return "\n".join(lines) + "\n"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


# An edition made before the course names its students' repository (``repository`` None): handed out as a zip
# or through JupyterHub, its README and notebooks link nowhere, and it says so.
NO_REPOSITORY = ("This edition names no repository of its own, so it has no Colab or Binder links: work in the "
                 "folder your instructor handed out (a zip, or your class's JupyterHub), as below.")


def _readme(course: Course, self_study: bool, repository: str | None, assignments: list[str], folder: str) -> str:
    """The edition's README; ``folder`` is the edition's folder, the one its zip unpacks to."""
    edition = (TEMPLATES / "SELF_STUDY.md").read_text(encoding="utf-8") if self_study else ""
    template = string.Template((TEMPLATES / "README.md").read_text(encoding="utf-8"))
    if repository is None:
        return template.substitute(notebook_links=NO_REPOSITORY, edition=edition, online_ways="",
                                   get_it=f"cd {folder}  # the folder your instructor's zip unpacks to")
    online = string.Template((TEMPLATES / "ONLINE.md").read_text(encoding="utf-8"))
    return template.substitute(notebook_links=links_table(course, repository, assignments), edition=edition,
                               online_ways=online.substitute(binder=binder_url(repository, "course")),
                               get_it=f"git clone {repository} course-autograd && cd course-autograd")
