"""The course installs anywhere: the student distribution's wheel, pip-installed into a fresh virtual
environment outside the repository, runs 01's notebook from another folder to the end, and 07's opening cells
(which find its recordings through the installed package; the book's build runs all of 07);
with its `jupyter` extra (what the edition's `make lab` installs), its command line has only the
student's commands and `check` grades a notebook beside JupyterLab's `Untitled.ipynb` as without it;
and JupyterLab started in the edition's folder, as a student starts it, shows no instructor tool and
no news prompt (in headless Chromium).

torch comes from the tested pin (constraints.txt); where a local torch wheel is configured for pip
(as on this project's machines) it installs from that file in seconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from autograder.course import Course
from autograder.authoring.publish import HIDDEN_LAB_PLUGINS, publish
from browsing import Steps
from conftest import CLASS_REPOSITORY, REPO, filled_release, running_jupyter, solution_answers

NOTEBOOKS = ("01_first_function", "07_gpu_timing")
OPENING_CELLS = {"07_gpu_timing": 2}  # code cells run of a notebook not run to the end: its setup and its imports


def _run(command: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@dataclass
class Installed:
    dist: Path    # the edition's folder, as a student's clone holds it
    venv: Path    # a fresh environment with the edition installed as its README says
    python: Path
    env: dict[str, str]  # this machine's environment without the repository's settings, the venv first on PATH


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The edition, its wheel built and pip-installed with its `jupyter` extra into a fresh virtual
    environment: what `pip install '.[jupyter]'` in the edition's folder does (README, Makefile)."""
    root = tmp_path_factory.mktemp("install")
    dist = publish(Course(REPO), root / "student-edition", archive=False, repository=CLASS_REPOSITORY)
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, dist])
    [wheel] = wheels.glob("*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    # The wheel with the extra a student's own machine installs (JupyterLab, nbgrader: `check`, Validate).
    _run([python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", dist / "constraints.txt",
          f"{wheel}[jupyter]"])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AUTOGRADER_COURSE_ROOT") and not k.startswith("JUPYTER")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(dist, venv, python, env)


@pytest.mark.slow
def test_the_wheel_runs_notebook_01_and_07s_opening_in_a_fresh_environment_outside_the_repository(installed,
                                                                                                   tmp_path):
    dist, venv, python, env = installed.dist, installed.venv, installed.python, installed.env

    work = tmp_path / "elsewhere"
    work.mkdir()
    found = _run([python, "-c", "import autograder, torch; print(autograder.__file__); print(torch.__version__)"],
                 cwd=work, env=env).stdout.split()
    assert Path(found[0]).is_relative_to(venv), f"autograder imported from {found[0]}, not the fresh environment"
    assert found[1].split("+")[0] == "2.13.0"

    for assignment in NOTEBOOKS:
        notebook = work / f"{assignment}.ipynb"
        filled = filled_release(REPO, assignment, solution_answers(REPO, assignment))
        if assignment in OPENING_CELLS:
            code = [i for i, c in enumerate(filled["cells"]) if c["cell_type"] == "code"]
            filled["cells"] = filled["cells"][:code[OPENING_CELLS[assignment] - 1] + 1]
        notebook.write_text(json.dumps(filled))
        _run([venv / "bin" / "jupyter-execute", "--inplace", "--timeout=300", notebook.name], cwd=work, env=env)
        executed = json.loads(notebook.read_text())
        errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, errors
    # 07 found its recordings through the installed package: the first code cell after the setup cell says so.
    cells = [c for c in json.loads((work / "07_gpu_timing.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    assert cells[0]["id"] == "colab-setup" and not cells[0]["outputs"]
    printed = "".join("".join(o.get("text", "")) for o in cells[1]["outputs"])
    reference = next(line for line in printed.splitlines() if line.startswith("REFERENCE cpu:"))
    assert not reference.removeprefix("REFERENCE cpu:").strip().startswith("none"), reference
    assert "ILLUSTRATIVE :" in printed and "NOT MEASURED" in printed
    assert not list(work.glob("*.json")), "nothing was read from or written beside the notebook"

    # The edition's folder, as a student's clone holds it, with this environment's `autograder`.
    usage = _run([python, "-m", "autograder", "--help"], cwd=dist, env=env).stdout
    listed = [line.split()[0] for line in usage.split("COMMAND\n", 1)[1].split("\n\n")[0].splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == ["check"], usage
    mine = dist / "course" / "01_first_function" / "01_first_function.ipynb"
    mine.write_text(json.dumps(filled_release(REPO, "01_first_function", solution_answers(REPO, "01_first_function"))))
    check = [python, "-m", "autograder", "check", mine.relative_to(dist)]
    alone = _run(check, cwd=dist, env=env).stdout
    assert "FAIL" not in alone and "PASS" in alone, alone
    (mine.parent / "Untitled.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                            "nbformat_minor": 5}))
    assert _run(check, cwd=dist, env=env).stdout == alone


@pytest.mark.slow
def test_jupyterlab_started_as_a_student_starts_it_shows_no_instructor_tool_and_no_news_prompt(installed, page,
                                                                                               tmp_path):
    """`jupyter lab` in the edition's folder, from the environment its README's pip line made, with a
    student's fresh home (no Jupyter settings of their own) and no JUPYTER_CONFIG_PATH: no Formgrader,
    no Create Assignment, no course list, no "official Jupyter news?" prompt; Validate is there."""
    static = installed.venv / "share" / "jupyter" / "lab" / "static"
    # The plugin turned off is the one that asks (so "no prompt" below is not a check that cannot fail).
    assert any("@jupyterlab/apputils-extension:announcements" in text and "official Jupyter news" in text
               for text in (p.read_text(encoding="utf-8", errors="ignore") for p in static.glob("*.js")))
    env = {**installed.env, "HOME": str(tmp_path / "home")}
    notebook = f"course/{NOTEBOOKS[0]}/{NOTEBOOKS[0]}.ipynb"
    steps = Steps(page, "students-edition")
    with running_jupyter("lab", Course(installed.dist), env, tmp_path / "jupyterlab.log",
                         python=installed.python) as (base, token):
        with steps.step("open a notebook in the edition's JupyterLab"):
            page.goto(f"{base}/lab/tree/{notebook}?token={token}")
            page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
                timeout=120_000)
        with steps.step("the page turns the instructor's plugins and the announcements off"):
            disabled = page.evaluate(
                "JSON.parse(document.getElementById('jupyter-config-data').textContent).disabledExtensions")
            assert set(HIDDEN_LAB_PLUGINS) <= set(disabled), disabled
        with steps.step("no news prompt"):
            expect(page.locator(".Toastify__toast")).to_have_count(0)
            expect(page.get_by_text("official Jupyter news")).to_have_count(0)
        with steps.step("the Validate button, and no Create Assignment panel"):
            expect(page.locator(".jp-NotebookPanel:visible .jp-Toolbar .validate-button")).to_have_count(1)
            expect(page.locator("#nbgrader-create_assignemnt")).to_have_count(0)  # (nbgrader's own spelling)
            expect(page.get_by_title(re.compile("Create Assignment"))).to_have_count(0)
        with steps.step("the Nbgrader menu has the student's tools only"):
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).click()
            items = page.locator(".lm-Menu:visible .lm-Menu-itemLabel").all_inner_texts()
            page.keyboard.press("Escape")
            assert "Assignment List" in items and not {"Formgrader", "Course List"} & set(items), items
        with steps.step("no formgrader on the server"):
            status = page.request.get(f"{base}/formgrader?token={token}").status
            assert status == 404, status


def test_the_instructors_jupyterlab_asks_nothing_about_jupyter_news():
    """`make install` turns JupyterLab's announcements plugin off in the course's environment (issue 40), as the
    students' edition does, so `make lab` opens without the "official Jupyter news?" prompt."""
    page_config = Path(sys.prefix) / "etc" / "jupyter" / "labconfig" / "page_config.json"
    assert page_config.is_file(), f"{page_config} is missing: `make install` writes it"
    disabled = json.loads(page_config.read_text()).get("disabledExtensions", {})
    assert disabled.get("@jupyterlab/apputils-extension:announcements") is True, disabled
