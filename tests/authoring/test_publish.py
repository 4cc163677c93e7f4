"""The student distribution (python -m autograder publish): no solution or hidden test anywhere in
it, and `check` works there on a filled-in notebook and on a blank one, with the visible tests."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.authoring.colab import (CELL_ID, REPOSITORY_VARIABLE, binder_url, colab_url, setup_source,
                                        title_position)
from autograder.course import Course
from autograder.authoring.publish import NO_REPOSITORY, publish
from conftest import CLASS_REPOSITORY, REPO, filled_release, read_notebook, solution_answers, source

ASSIGNMENT = "01_first_function"
MARKERS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "### END SOLUTION", "### END HIDDEN TESTS")
HIDDEN_TEST_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")  # whole, as nbgrader writes them
SHORTEST_SECRET = 12  # shorter lines ("pass", "return x", "return None", "]") are not telling
# Plain PyTorch lines that a solution and the course's library each need for their own reasons (a
# checkpointing backward and the referee turn gradients on; a timing helper synchronises): not telling.
COMMON_LINES = {"with torch.enable_grad():", "synchronize()", "for _ in range(warmup):"}  # (no answer in a line)
# The checker's own torch math for judging 10 and 11 (checker.pieces, checker.attention_math: what a right launcher
# returns, and the typical mistakes) computes GELU's and attention's derivatives, whose formulas the student notebooks
# state (07 and 10: gelu'(h) = Phi(h) + h phi(h); 11 Section 4: dV, dP, dS, dQ, dK). Lines it shares with a solution
# that say no more than that prose: (A graded answer cannot import the checker's modules: allowed.json.)
COMMON_LINES |= {"return dq, dk, dv", "scale = q.shape[-1] ** -0.5", "cdf = 0.5 * (1 + torch.erf(h / math.sqrt(2)))"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    return publish(Course(REPO), tmp_path_factory.mktemp("published") / "student-edition", repository=CLASS_REPOSITORY)


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _secret_lines() -> set[str]:
    """Every line of a solution region or hidden-test region of solutions/ that the release does not show."""
    released = set()
    for path in (REPO / "course").glob("*/*.ipynb"):
        released |= {line for cell in read_notebook(path)["cells"] for line in _lines(source(cell))}
    secrets = set()
    for path in (REPO / "solutions").glob("*/*.ipynb"):
        for cell in read_notebook(path)["cells"]:
            text = source(cell)
            # A solution cell without markers is replaced whole by nbgrader.
            inside = whole = cell.get("metadata", {}).get("nbgrader", {}).get("solution") and "BEGIN SOLUTION" not in text
            for line in text.splitlines():
                stripped = line.strip()
                if stripped.startswith(("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")):
                    inside = True
                elif stripped.startswith(("### END SOLUTION", "### END HIDDEN TESTS")):
                    inside = whole
                elif inside and len(stripped) >= SHORTEST_SECRET and stripped not in released | COMMON_LINES:
                    secrets.add(stripped)
    return secrets


def _file_lines(path: Path) -> set[str]:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return {line for cell in nb["cells"] for line in _lines(source(cell))}
    return _lines(path.read_bytes().decode("utf-8", errors="ignore"))


def test_the_distribution_holds_no_solution_and_no_hidden_test(dist):
    secrets = _secret_lines()
    assert len(secrets) > 300, "the solutions' lines were not found: the check would be empty"
    files = [p for p in dist.rglob("*") if p.is_file()]
    leaks = {}
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="ignore")
        found = [m for m in MARKERS if m in text] + sorted(secrets & _file_lines(path))
        if found:
            leaks[str(path.relative_to(dist))] = found[:5]
    assert not leaks, leaks
    assert not (dist / "solutions").exists()
    # The zip beside it holds the same files, and nothing more.
    with zipfile.ZipFile(dist.with_suffix(".zip")) as archive:
        names = {n.removeprefix(dist.name + "/") for n in archive.namelist() if not n.endswith("/")}
    assert names == {p.relative_to(dist).as_posix() for p in files}


def test_no_shipped_file_holds_a_hidden_test_marker_whole():
    """Neither of nbgrader's hidden-test markers, beginning or end, is written whole in any file the package ships
    (the grader builds them from their words: protocol.HIDDEN_TESTS_BEGIN, _END) nor in course/: a traceback quoting
    such a line would put a marker on a student's page, which is then refused. (solutions/ holds them, as nbgrader
    needs; the students' edition is checked for every marker in test_the_distribution_holds_no_solution...)"""
    package = REPO / "autograder"
    files = [p for folder in (package, REPO / "course") for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) > 100 and package / "grading" / "running" / "child.py" in files
    holding = {str(p.relative_to(REPO)): [m for m in HIDDEN_TEST_MARKERS if m.encode() in p.read_bytes()]
               for p in files}
    assert {path: found for path, found in holding.items() if found} == {}
    solution = (REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes()
    assert all(m.encode() in solution for m in HIDDEN_TEST_MARKERS), "the markers searched for are nbgrader's own"


def _answer_names() -> set[str]:
    """The classes and functions the exercises ask for: every one a solution cell of solutions/ defines."""
    names = set()
    for path in (REPO / "solutions").glob("*/*.ipynb"):
        for cell in read_notebook(path)["cells"]:
            if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                code = "\n".join(line for line in source(cell).splitlines() if not line.lstrip().startswith(("%", "!")))
                names |= {node.name for node in ast.parse(code).body
                          if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name != "_"}
    return names


def _definitions(path: Path) -> tuple[set[str], list[str]]:
    """(names of the classes and functions ``path`` defines, at any depth; what in it makes a
    custom autograd Function or a custom op: a class based on ``...Function``, ``custom_op``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, makers = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base).split(".")[-1] == "Function" for base in node.bases):
            makers.append(f"class {node.name}")
        if isinstance(node, ast.Attribute) and node.attr in ("custom_op", "register_autograd"):
            makers.append(ast.unparse(node))
    return names, makers


def test_the_distribution_defines_no_exercise_answer(dist):
    """No custom Function or custom op at all (every Function exercise's answer is one), and no class or
    function named as an exercise's answer (measure, crossover_size, numerical_jacobian...), in any
    module shipped; and none imported into the student's modules when they run."""
    answers = _answer_names()
    assert {"Cube", "SiLU", "BiasGELU", "measure", "crossover_size", "numerical_jacobian", "Huber"} <= answers
    modules = sorted((dist / "autograder").rglob("*.py"))
    assert len(modules) > 20 and dist / "autograder" / "student" / "timing.py" in modules
    found = {}
    for path in modules:
        names, makers = _definitions(path)
        named = sorted(n for n in names if n in answers or n.lower() in {a.lower() for a in answers})
        if named or makers:
            found[str(path.relative_to(dist))] = named + makers
    assert not found, found
    probe = ("import importlib, pkgutil, torch, autograder.student as s\n"
             "for m in pkgutil.walk_packages(s.__path__, 'autograder.student.'):\n"
             "    module = importlib.import_module(m.name)\n"
             "    for name, value in vars(module).items():\n"
             "        if isinstance(value, type) and issubclass(value, torch.autograd.Function) "
             "and value is not torch.autograd.Function:\n"
             "            print(m.name, name)\n"
             "print('modules', len(list(pkgutil.walk_packages(s.__path__, 'autograder.student.'))))")
    result = _in_dist(dist, "-c", probe)
    assert result.returncode == 0, result.stderr
    shipped = len(list((dist / "autograder" / "student").rglob("*.py"))) - 1  # all but the package's own __init__
    assert result.stdout.splitlines() == [f"modules {shipped}"], result.stdout


def test_the_distribution_is_what_students_need_and_no_instructor_tool(dist):
    assert sorted(p.name for p in (dist / "course").iterdir()) == Course(REPO).assignments()
    for name in ("README.md", "pyproject.toml", "constraints.txt", "environment.yml", "Makefile",
                 "binder/requirements.txt", "autograder/student/checker/__init__.py",
                 "autograder/student/data/reference_cpu.json", "autograder/grading/running/judging/allowed.json"):
        assert (dist / name).is_file(), name
    shipped = {p.relative_to(dist / "autograder").as_posix() for p in (dist / "autograder").rglob("*.py")}
    for tool in ("authoring/validation.py", "authoring/book/__init__.py", "authoring/record_timings.py",
                 "authoring/timed_functions.py",
                 "authoring/publish.py", "grading/bench.py", "grading/collect.py", "grading/feedback.py",
                 "grading/demo/make_demo.py", "grading/similarity.py", "grading/export.py", "grading/lms.py"):
        assert tool not in shipped
    assert not (dist / "autograder" / "grading" / "demo").exists(), "the demo class holds 01's answers"
    readme = (dist / "README.md").read_text()
    assert colab_url(CLASS_REPOSITORY, "course/07_gpu_timing/07_gpu_timing.ipynb") in readme
    assert binder_url(CLASS_REPOSITORY, "course") in readme and "solutions/" not in readme
    assert f'student-repository = "{CLASS_REPOSITORY}"' in (dist / "pyproject.toml").read_text()
    for notebook in (dist / "course").glob("*/*.ipynb"):  # on Colab, each installs the library from there
        cells = read_notebook(notebook)["cells"]
        [index] = [i for i, cell in enumerate(cells) if cell.get("id") == CELL_ID]
        assert source(cells[index]) == setup_source(CLASS_REPOSITORY), notebook
        assert index == title_position(cells[:index] + cells[index + 1:]) > 0, f"{notebook}: below its title"
    # Installed as a copy (with its Jupyter settings), by conda and by Binder as by make.
    assert "- .[jupyter]" in (dist / "environment.yml").read_text()
    assert ".[jupyter]" in (dist / "binder" / "requirements.txt").read_text().splitlines()
    assert "-e " not in (dist / "environment.yml").read_text() + (dist / "binder" / "requirements.txt").read_text()


def _in_dist(dist: Path, *args: str) -> subprocess.CompletedProcess:
    """Run python from the distribution's folder: its own `autograder` package, not the repository's."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=dist)


def test_the_distribution_imports_its_own_package_and_has_only_the_students_commands(dist):
    where = _in_dist(dist, "-c", "import autograder; print(autograder.__file__)")
    assert Path(where.stdout.strip()) == dist / "autograder" / "__init__.py", where.stderr
    usage = _in_dist(dist, "-m", "autograder", "--help")
    assert usage.returncode == 0, usage.stdout + usage.stderr
    listed = [line.split()[0] for line in usage.stdout.split("COMMAND\n", 1)[1].split("\n\n")[0].splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == ["check"], usage.stdout
    assert "Check your notebooks" in usage.stdout
    for command in ("validate", "release", "grade", "collect", "roster", "demo", "publish", "book"):
        result = _in_dist(dist, "-m", "autograder", command)
        assert result.returncode == 2 and "invalid choice" in result.stderr and "Traceback" not in result.stderr, command


@pytest.mark.slow
def test_check_in_the_distribution_runs_the_visible_tests(dist, tmp_path):
    """A right notebook passes every visible test; the blank one passes none; both say the grader runs more."""
    mine = tmp_path / f"{ASSIGNMENT}.ipynb"
    mine.write_text(json.dumps(filled_release(REPO, ASSIGNMENT, solution_answers(REPO, ASSIGNMENT))))
    right = _in_dist(dist, "-m", "autograder", "check", str(mine))
    assert right.returncode == 0, right.stdout + right.stderr
    lines = right.stdout.splitlines()
    passed = [line for line in lines if line.startswith("PASS")]
    assert len(passed) == 5 and not any(line.startswith("FAIL") for line in lines), right.stdout
    assert "PASS  2/2  test_cube_backward" in right.stdout and "score: 11 / 11" in right.stdout
    assert "The grader runs more" in right.stdout

    blank = _in_dist(dist, "-m", "autograder", "check", f"course/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    assert blank.returncode == 1, blank.stdout + blank.stderr
    assert "score: 0 / 11" in blank.stdout and "5 failed" in blank.stdout
    assert "replace `raise NotImplementedError()` with your code" in blank.stdout
    assert "The grader runs more" in blank.stdout
    for output in (right.stdout, blank.stdout):
        assert "BEGIN HIDDEN" not in output and "torch.randn(4, 5)" not in output

    untitled = dist / "course" / ASSIGNMENT / "Untitled.ipynb"  # JupyterLab's "+" in the assignment's folder
    untitled.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    try:
        again = _in_dist(dist, "-m", "autograder", "check", f"course/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    finally:
        untitled.unlink()
    assert (again.returncode, again.stdout) == (blank.returncode, blank.stdout), again.stdout + again.stderr


@pytest.mark.slow
def test_make_check_reports_failing_tests_without_makes_error_line(dist, tmp_path):
    """`make check` on a blank notebook: check's own FAIL lines and score, and no "*** [...] Error" line of make's,
    which reads like a crash; a notebook check cannot read stays make's error. (BIN: this environment's python;
    STAMP: a fresh file, so make's install step, which would pip install, is up to date.)"""
    stamp = tmp_path / "installed"
    stamp.touch()
    make = ["make", "--no-print-directory", "check", f"BIN={Path(sys.executable).parent}", f"STAMP={stamp}"]
    blank = subprocess.run([*make, f"NB=course/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"], cwd=dist, capture_output=True,
                           text=True)
    assert blank.returncode == 0 and "score: 0 / 11" in blank.stdout and "5 failed" in blank.stdout, blank.stdout
    assert "***" not in blank.stdout + blank.stderr and "Error" not in blank.stderr, blank.stderr
    missing = subprocess.run([*make, "NB=course/no_such.ipynb"], cwd=dist, capture_output=True, text=True)
    assert missing.returncode == 2 and "] Error 2" in missing.stderr, missing.stdout + missing.stderr


@pytest.mark.slow
@pytest.mark.parametrize("assignment, score, passed", [("10_triton_kernels", "18 / 18", 6),
                                                       ("11_flash_attention", "27 / 27", 8)])
def test_check_of_the_triton_kernels_runs_in_the_distribution(dist, tmp_path, assignment, score, passed):
    """10's and 11's kernels run in the distribution's grader too: Triton's interpreter, the memory guard,
    check_kernel, 11's check_attention_forward and check_attention_backward."""
    mine = tmp_path / f"{assignment}.ipynb"
    mine.write_text(json.dumps(filled_release(REPO, assignment, solution_answers(REPO, assignment))))
    right = _in_dist(dist, "-m", "autograder", "check", str(mine))
    assert right.returncode == 0 and f"score: {score}" in right.stdout and f"{passed} passed, 0 failed" in right.stdout, (
        right.stdout + right.stderr)


def test_publishing_without_a_students_repository_makes_an_edition_without_links_and_says_what_to_set(
        tmp_path, monkeypatch):
    """The README's `make student-dist A=...` works on a fresh clone (issue 40): an edition to hand out as a zip or on
    JupyterHub, whose README says it has no Colab or Binder links and links nowhere; the command says what to set."""
    monkeypatch.delenv(REPOSITORY_VARIABLE, raising=False)
    result = subprocess.run([sys.executable, "-m", "autograder", "publish", "01_first_function",
                             "--out", str(tmp_path / "edition")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "no Colab or Binder links" in result.stderr and "REPOSITORY=" in result.stderr, result.stderr
    readme = (tmp_path / "edition" / "README.md").read_text()
    assert NO_REPOSITORY in readme and "colab.research.google.com" not in readme and "mybinder" not in readme
    assert "YOUR-ORG" not in readme
    assert sorted(p.name for p in (tmp_path / "edition" / "course").iterdir()) == ["01_first_function"]
    # The README's `cd` names the folder the zip unpacks to.
    unpacked = {name.split("/")[0] for name in zipfile.ZipFile(tmp_path / "edition.zip").namelist()}
    assert unpacked == {"edition"} and "\n  cd edition  # the folder your instructor's zip unpacks to\n" in readme


def test_a_class_gets_the_assignments_released_so_far_and_nothing_later(tmp_path):
    first = ["01_first_function", "02_saving_for_backward"]
    dist = publish(Course(REPO), tmp_path / "edition", archive=False, repository=CLASS_REPOSITORY, assignments=first)
    assert sorted(p.name for p in (dist / "course").iterdir()) == first
    readme = (dist / "README.md").read_text()
    assert colab_url(CLASS_REPOSITORY, "course/02_saving_for_backward/02_saving_for_backward.ipynb") in readme
    assert "course/07_gpu_timing" not in readme and readme.count("[Open in Colab]") == 2
    result = subprocess.run([sys.executable, "-m", "autograder", "publish", "no_such_assignment", "--repository",
                             CLASS_REPOSITORY, "--out", str(tmp_path / "other")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and "no_such_assignment" in result.stderr and not (tmp_path / "other").exists()


def test_the_edition_has_a_gitignore_a_license_and_no_instructor_tools_in_jupyter(dist, tmp_path):
    """Its Jupyter settings, laid out where its pyproject installs them (the environment's etc/jupyter),
    as Jupyter's own readers see them: the formgrader, Create Assignment, the course list and the news
    prompt off, Validate and the assignment list on. (In a real JupyterLab in a browser: test_install.py.)"""
    import tomllib

    ignored = (dist / ".gitignore").read_text().split()
    assert {".venv/", "grading/", "*.egg-info/", "__pycache__/", ".ipynb_checkpoints/"} <= set(ignored)
    assert (dist / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    installed = tomllib.loads((dist / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    prefix = tmp_path / "environment"
    for folder, files in installed.items():
        (prefix / folder).mkdir(parents=True, exist_ok=True)
        for name in files:
            (prefix / folder / Path(name).name).write_bytes((dist / name).read_bytes())
    assert (prefix / "etc/jupyter/nbgrader_config.py").is_file()  # the course's settings, for Validate
    nbgrader_own = Path(sys.prefix, "etc/jupyter/jupyter_server_config.d/nbgrader.json")  # turns the formgrader on
    (prefix / "etc/jupyter/jupyter_server_config.d" / nbgrader_own.name).write_bytes(nbgrader_own.read_bytes())
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(prefix / "etc/jupyter")}
    servers = subprocess.run([sys.executable, "-c", (
        "import json; from jupyter_server.extension.config import ExtensionConfigManager; "
        f"print(json.dumps(ExtensionConfigManager(read_config_path=[{str(prefix / 'etc/jupyter')!r}])"
        ".get_jpserver_extensions()))")], env=env, capture_output=True, text=True, check=True)
    enabled = json.loads(servers.stdout)
    assert enabled["nbgrader.server_extensions.formgrader"] is False and enabled["nbgrader.server_extensions.course_list"] is False
    assert enabled["nbgrader.server_extensions.validate_assignment"] and enabled["nbgrader.server_extensions.assignment_list"]
    lab = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], env=env, capture_output=True, text=True)
    listed = lab.stdout + lab.stderr
    disabled = listed.split("Disabled extensions:")[1] if "Disabled extensions:" in listed else ""
    assert all(p in disabled for p in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                                       "@jupyter/nbgrader:course-list", "@jupyterlab/apputils-extension:announcements")), \
        listed[-2000:]
    assert "validate-assignment" not in disabled
    makefile = (dist / "Makefile").read_text()
    assert "JUPYTER_CONFIG_PATH" not in makefile and "-e " not in makefile  # the settings come with the install


def test_the_editions_readme_names_every_target_of_its_makefile(dist):
    import re

    targets = re.findall(r"(?m)^([a-z][\w-]*):", (dist / "Makefile").read_text())
    assert targets == ["install", "lab", "check"]
    readme = (dist / "README.md").read_text()
    assert [t for t in targets if f"make {t}" not in readme] == []
