"""The setup cell under the title of every notebook: on Colab it installs the course's library.

``python -m autograder.authoring.colab`` puts the cell right below the title cell (the first
markdown cell with a ``#`` heading) in every notebook of ``solutions/`` (``make release`` then
carries it into ``course/``), and rewrites the README's table of Colab and Binder links (between
its two markers) for the notebooks of ``course/``. It is idempotent: a notebook that already has
the cell there gets its current text, nothing else changes. The cell does nothing outside
Colab: in the course's own environment (``make lab``, Binder, JupyterHub, the grader) the
library is already installed and ``google.colab`` does not exist.

The library is installed from the student distribution's repository (``python -m autograder
publish`` writes it; never the instructor's repository, which holds the solutions). It is one
setting, used by the setup cell, the README's links, the students' edition and the book:
``$AUTOGRADER_STUDENT_REPOSITORY`` if set, else ``pyproject.toml``'s
``[tool.custom-autograd-course] student-repository``. Until it names a real repository (it ships
with the placeholder ``YOUR-ORG``), no link is written and the setup cell, on Colab, says where a
student gets the notebook that installs the library (never a placeholder address) instead of
installing from nowhere; ``publish`` refuses to write an edition (or takes ``--repository``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
from pathlib import Path

import nbformat

from autograder.course import Course, CourseError

CELL_ID = "colab-setup"
LINKS_BEGIN, LINKS_END = "<!-- notebook links: python -m autograder.authoring.colab -->", "<!-- end of notebook links -->"
DISTRIBUTION = "custom-autograd-course"
REPOSITORY_VARIABLE = "AUTOGRADER_STUDENT_REPOSITORY"
PLACEHOLDER = "YOUR-ORG"  # in the shipped setting: no repository named yet
UNSET = (f"no students' repository is named yet: give its URL (`make student-dist REPOSITORY=https://github.com/"
         f"OWNER/NAME`, or `--repository URL`), or put it in pyproject.toml ([tool.{DISTRIBUTION}] "
         f"student-repository) or in ${REPOSITORY_VARIABLE}, then run `python -m autograder.authoring.colab` "
         "and `make release` (README: Instructors, From clone to class)")


def student_repository(course: Course, required: bool = False) -> str | None:
    """The public repository of the student distribution: $AUTOGRADER_STUDENT_REPOSITORY, else pyproject.toml.

    None while it is the placeholder; with ``required``, a CourseError that says what to set.
    """
    url = os.environ.get(REPOSITORY_VARIABLE)
    settings = course.root / "pyproject.toml"
    if not url and settings.is_file():
        url = tomllib.loads(settings.read_text()).get("tool", {}).get(DISTRIBUTION, {}).get("student-repository", "")
    return checked_repository(url or "", required)


def checked_repository(url: str, required: bool = True) -> str | None:
    """``url`` as a GitHub repository's address (no trailing / or .git); None (or an error) if a placeholder."""
    url = url.strip().rstrip("/").removesuffix(".git")
    if not url or PLACEHOLDER in url:
        if required:
            raise CourseError(UNSET)
        return None
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise CourseError(f"the students' repository must be a GitHub repository's address "
                          f"(https://github.com/OWNER/NAME) for Colab and Binder to open it, not {url!r}")
    return url


def setup_source(repository: str | None) -> str:
    """The setup cell: installs the library from ``repository`` on Colab (None: says where to get it)."""
    if repository is None:
        install = ('    print("This copy of the notebook does not install the course\'s library: open the notebook "\n'
                   '          "from your course\'s students\' repository (its README\'s Open in Colab links).")')
    else:
        install = f'    %pip install --quiet "{DISTRIBUTION} @ git+{repository}"'
    return (
        "# Setup: on Google Colab this installs the course's library; anywhere else it does nothing.\n"
        "try:\n"
        "    import google.colab  # noqa: F401  (exists only on Colab)\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        + install
    )


def _github_path(repository: str) -> str:
    return repository.removeprefix("https://github.com/").removesuffix(".git").strip("/")


def colab_url(repository: str, notebook: str, branch: str = "main") -> str:
    """Colab's address for a notebook of a GitHub repository (the student distribution)."""
    return f"https://colab.research.google.com/github/{_github_path(repository)}/blob/{branch}/{notebook}"


def binder_url(repository: str, path: str = "course", branch: str = "main") -> str:
    """mybinder.org's address that builds the repository (binder/) and opens JupyterLab on ``path``."""
    return f"https://mybinder.org/v2/gh/{_github_path(repository)}/{branch}?urlpath=lab/tree/{path}"


def links_table(course: Course, repository: str, assignments: list[str] | None = None) -> str:
    """A Markdown table: each student notebook (of ``assignments``, default all) with its Colab and Binder links."""
    notebooks = sorted(p.relative_to(course.root).as_posix() for p in course.release.glob("*/*.ipynb")
                       if assignments is None or p.parent.name in assignments)
    return "| Assignment | Google Colab | Binder |\n|---|---|---|\n" + "\n".join(
        f"| `{Path(n).stem}` | [Open in Colab]({colab_url(repository, n)}) "
        f"| [Launch Binder]({binder_url(repository, n)}) |" for n in notebooks)


def readme_links(course: Course) -> str:
    """What the README shows between its two markers: the links table, or why there is none yet."""
    repository = student_repository(course)
    if repository is None:
        return ("Colab and Binder links to each notebook appear here once the course names the students' "
                "repository (`student-repository` in `pyproject.toml`: see [From clone to class](#from-clone-to-class)).")
    return links_table(course, repository)


def update_readme_links(course: Course) -> bool:
    """Rewrite what the README holds between its two markers; True if it changed."""
    readme = course.root / "README.md"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(f"({re.escape(LINKS_BEGIN)}\n).*?(\n{re.escape(LINKS_END)})", re.S)
    new = pattern.sub(lambda m: m[1] + readme_links(course) + m[2], text)
    if new == text:
        return False
    readme.write_text(new, encoding="utf-8")
    return True


def title_position(cells: list[dict]) -> int:
    """Where the setup cell goes: right after the title cell (the first markdown cell with a ``#``
    heading), else first. ``cells`` as in a notebook's JSON, without the setup cell."""
    for index, cell in enumerate(cells):
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown" and re.search(r"(?m)^# ", text):
            return index + 1
    return 0


def add_setup_cell(path: Path, repository: str | None) -> bool:
    """Put the setup cell right below the title of ``path``; True if the file changed.

    The notebook's JSON is edited as it is written (key order, indent=1), so the change is the
    one cell and nothing else, whoever else is editing the notebook.
    """
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    cell = {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": [],
            "source": setup_source(repository).splitlines(keepends=True)}
    cells = [c for c in nb["cells"] if c.get("id") != CELL_ID]
    cells.insert(title_position(cells), cell)
    nb["cells"] = cells
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    nbformat.validate(nbformat.reads(new, as_version=4))
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def add_setup_cells(course: Course) -> list[Path]:
    """Put the setup cell below the title of every notebook of ``solutions/``; returns the notebooks changed."""
    repository = student_repository(course)
    return [path for path in sorted(course.solutions.glob("*/*.ipynb")) if add_setup_cell(path, repository)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.colab", description=__doc__.split("\n")[0])
    parser.add_argument("--course", type=Path, default=None, help="the course folder (default: the current one)")
    args = parser.parse_args(argv)
    try:
        course = Course.locate(args.course)
        changed = add_setup_cells(course)
        if (course.root / "README.md").is_file() and update_readme_links(course):
            print("updated the Colab and Binder links of README.md")
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in changed:
        print(f"added the setup cell to {path}")
    print(f"notebooks changed: {len(changed)}; run `make release` to carry the cell into course/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
