"""The pins in pyproject.toml, environment.yml and the installed environment agree."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata

import yaml

from conftest import REPO

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)$")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for requirement in requirements:
        match = PIN.match(requirement.strip())
        assert match, f"not an exact pin: {requirement!r} (every dependency is pinned with ==)"
        pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


def _pyproject_pins() -> dict[str, str]:
    project = _pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return _pins(requirements)


def _environment_yml() -> dict:
    return yaml.safe_load((REPO / "environment.yml").read_text())


def _environment_pip_section() -> list[str]:
    sections = [d["pip"] for d in _environment_yml()["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml should have exactly one pip section"
    return sections[0]


def test_environment_yml_pins_equal_pyproject_pins():
    pip_section = [r for r in _environment_pip_section() if r.strip() != "-e ."]
    assert _pins(pip_section) == _pyproject_pins()


def test_environment_yml_installs_this_package():
    assert "-e ." in [r.strip() for r in _environment_pip_section()], "environment.yml must install autograder"


def test_python_versions_agree():
    conda = [d for d in _environment_yml()["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert conda == ["python=3.11"]
    assert _pyproject()["project"]["requires-python"] == ">=3.11"
    assert sys.version_info >= (3, 11)


def test_installed_versions_are_the_pinned_ones():
    wrong = {}
    for name, version in _pyproject_pins().items():
        installed = metadata.version(name)
        if installed.split("+")[0] != version:  # torch reports 2.13.0+cpu for the CPU wheel
            wrong[name] = f"pinned {version}, installed {installed}"
    assert not wrong, wrong


def test_ci_runs_the_readme_test_command():
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci == ["make test"]
    assert "make test" in (REPO / "README.md").read_text()
