"""pyproject.toml's ranges, constraints.txt's pins, environment.yml and the installed environment agree."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)(?:\s*;\s*(.+))?$")  # name==version, then an optional marker
EDITABLE_INSTALL = "-e .[jupyter,grading,book,test]"


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pins(requirements: list[str], markers: dict | None = None) -> dict[str, str]:
    """{name: version} of ``name==version`` lines; each line's platform marker, if any, into ``markers``."""
    pins = {}
    for requirement in requirements:
        match = PIN.match(requirement.strip())
        assert match, f"not an exact pin: {requirement!r} (every tested version is pinned with ==)"
        assert _name(match[1]) not in pins, f"pinned twice: {match[1]}"
        pins[_name(match[1])] = match[2]
        if markers is not None and match[3]:
            markers[_name(match[1])] = str(Requirement(requirement.strip()).marker)
    return pins


def _pyproject_requirements() -> dict[str, Requirement]:
    """Every requirement of pyproject.toml: the dependencies and every extra's."""
    project = _pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_name(r): Requirement(r) for r in requirements}


def _constraints() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    return _pins([line for line in lines if line.strip() and not line.startswith("#")])


def _environment_yml() -> dict:
    return yaml.safe_load((REPO / "environment.yml").read_text())


def _environment_pip_section() -> list[str]:
    sections = [d["pip"] for d in _environment_yml()["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml should have exactly one pip section"
    return sections[0]


def test_pyproject_names_ranges_and_constraints_pin_each_of_them_inside_its_range():
    requirements = _pyproject_requirements()
    exact = [str(r) for r in requirements.values() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert not exact, f"pyproject.toml takes ranges; exact pins belong in constraints.txt: {exact}"
    assert not [str(r) for r in requirements.values() if not r.specifier], "every dependency has a range"
    pins = _constraints()
    assert set(pins) == set(requirements), "constraints.txt pins exactly the requirements of pyproject.toml"
    outside = {name: f"{pins[name]} not in {r.specifier}" for name, r in requirements.items()
               if not r.specifier.contains(pins[name], prereleases=True)}
    assert not outside, outside


def test_environment_yml_pins_equal_the_constraints():
    pip_section = [r for r in _environment_pip_section() if r.strip() != EDITABLE_INSTALL]
    assert _pins(pip_section) == _constraints()


def test_a_dependency_for_some_platforms_only_has_the_same_marker_in_environment_yml():
    # triton ships for Linux only: conda's pip must not try to install it elsewhere (constraints.txt
    # needs no marker: a constraint only applies to what is installed).
    markers: dict = {}
    _pins([r for r in _environment_pip_section() if r.strip() != EDITABLE_INSTALL], markers)
    wanted = {name: str(r.marker) for name, r in _pyproject_requirements().items()
              if r.marker is not None and "platform_machine" in str(r.marker)}
    assert "triton" in wanted and markers == wanted


def test_environment_yml_installs_this_package():
    assert EDITABLE_INSTALL in [r.strip() for r in _environment_pip_section()], \
        "environment.yml must install autograder with its extras"


def test_make_install_uses_the_constraints():
    makefile = (REPO / "Makefile").read_text()
    assert "-c constraints.txt" in makefile and "'.[jupyter,grading,book,test]'" in makefile


def test_python_versions_agree():
    conda = [d for d in _environment_yml()["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert conda == ["python=3.11"]
    assert _pyproject()["project"]["requires-python"] == ">=3.11"
    assert sys.version_info >= (3, 11)


def test_installed_versions_are_the_pinned_ones():
    wrong = {}
    requirements = _pyproject_requirements()
    for name, version in _constraints().items():
        if requirements[name].marker is not None and not requirements[name].marker.evaluate({"extra": ""}):
            continue  # not for this platform (triton off Linux): nothing installed to compare
        installed = metadata.version(name)
        if installed.split("+")[0] != version:  # torch reports 2.13.0+cpu for the CPU wheel
            wrong[name] = f"pinned {version}, installed {installed}"
    assert not wrong, wrong


def test_ci_runs_the_readme_test_command():
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci == ["make test"]
    assert "make test" in (REPO / "README.md").read_text()


def test_make_test_hands_out_the_longest_files_first_and_each_of_them_exists():
    # xdist's loadfile sorts files by their number of tests unless told not to; then LONGEST_FIRST
    # (conftest.py) is the order the workers get them in, and a renamed file would drop out silently.
    from conftest import LONGEST_FIRST

    recipe = subprocess.run(["make", "-n", "test", "BIN=.venv/bin"], cwd=REPO, capture_output=True, text=True).stdout
    pytest_line = next(line for line in recipe.splitlines() if " -m pytest " in line)
    assert "--dist loadfile" in pytest_line and "--no-loadscope-reorder" in pytest_line, pytest_line
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [path for path in LONGEST_FIRST if not (REPO / path).is_file()] == []


@pytest.mark.parametrize("typed, published", [
    ([], ""),                                          # every assignment: A's default is the grading targets'
    (["A=02_saving_for_backward"], "02_saving_for_backward"),
])
def test_the_editions_hold_every_assignment_unless_some_are_named(typed, published):
    for target, flag in (("student-dist", ""), ("self-study-dist", "--self-study ")):
        # --no-print-directory: under `make test` this make is nested and would end with "Leaving directory"
        dry = subprocess.run(["make", "-n", "--no-print-directory", target, *typed], cwd=REPO,
                             capture_output=True, text=True, check=True)
        [command] = [line for line in dry.stdout.splitlines() if "-m autograder publish" in line]
        assert command.split("publish", 1)[1].split() == (flag + published).split(), command


def test_the_missing_repository_message_names_the_make_variable():
    from autograder.authoring.colab import UNSET

    assert "REPOSITORY=" in UNSET and "--repository" in UNSET


def test_license_citation_and_book_name_the_authors_of_pyproject():
    from autograder.course import Course

    authors = [a["name"] for a in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["authors"]]
    assert Course(REPO).authors == ", ".join(authors)
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and f"Copyright (c) 2026 {authors[0]}" in license_text
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and {"message", "title", "authors"} <= set(citation)
    assert [a["name"] for a in citation["authors"]] == authors and citation["license"] == "MIT"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert citation["version"] == version


def test_the_changelog_has_an_unreleased_section_and_the_current_version():
    changelog = (REPO / "CHANGELOG.md").read_text()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert "## [Unreleased]" in changelog and f"## [{version}]" in changelog


def test_pre_commit_strips_notebook_outputs_and_runs_ruff_at_pinned_versions():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: repo["rev"] for repo in config["repos"] for hook in repo["hooks"]}
    assert set(hooks) == {"nbstripout", "ruff"} and all(re.fullmatch(r"v?\d+\.\d+\.\d+", rev) for rev in hooks.values())
