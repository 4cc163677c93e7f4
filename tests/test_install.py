"""The course installs anywhere: the student distribution's wheel, pip-installed into a fresh virtual
environment outside the repository, runs the notebooks of 01 and 07 from another folder to the end;
with its `jupyter` extra (what the edition's `make lab` installs), its command line has only the
student's commands and `check` grades a notebook beside JupyterLab's `Untitled.ipynb` as without it.

torch comes from the tested pin (constraints.txt); where a local torch wheel is configured for pip
(as on this project's machines) it installs from that file in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import Course
from autograder.authoring.publish import publish
from conftest import CLASS_REPOSITORY, REPO, filled_release, solution_answers

NOTEBOOKS = ("01_first_function", "07_gpu_timing")


def _run(command: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_the_wheel_runs_notebooks_01_and_07_in_a_fresh_environment_outside_the_repository(tmp_path):
    dist = publish(Course(REPO), tmp_path / "student-edition", archive=False, repository=CLASS_REPOSITORY)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, dist])
    [wheel] = wheels.glob("*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    # The wheel with the extra a student's own machine installs (JupyterLab, nbgrader: `check`, Validate).
    _run([python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", dist / "constraints.txt",
          f"{wheel}[jupyter]"])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOGRADER_COURSE_ROOT", "JUPYTER_CONFIG_PATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    work = tmp_path / "elsewhere"
    work.mkdir()
    found = _run([python, "-c", "import autograder, torch; print(autograder.__file__); print(torch.__version__)"],
                 cwd=work, env=env).stdout.split()
    assert Path(found[0]).is_relative_to(venv), f"autograder imported from {found[0]}, not the fresh environment"
    assert found[1].split("+")[0] == "2.13.0"

    for assignment in NOTEBOOKS:
        notebook = work / f"{assignment}.ipynb"
        notebook.write_text(json.dumps(filled_release(REPO, assignment, solution_answers(REPO, assignment))))
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
