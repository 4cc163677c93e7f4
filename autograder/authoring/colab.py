"""The setup cell at the top of every notebook: on Colab it installs the course's library.

``python -m autograder.authoring.colab`` puts the cell first in every notebook of ``solutions/``
(``make release`` then carries it into ``course/``), and rewrites the README's table of Colab
and Binder links (between its two markers) for the notebooks of ``course/``. It is idempotent: a notebook that already
starts with the cell gets its current text, nothing else changes. The cell does nothing outside
Colab: in the course's own environment (``make lab``, Binder, JupyterHub, the grader) the
library is already installed and ``google.colab`` does not exist.

The library is installed from the student distribution's repository (``python -m autograder
publish`` writes it; never the instructor's repository, which holds the solutions), named once,
in ``pyproject.toml``'s ``[tool.custom-autograd-course] student-repository``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

import nbformat

from autograder.authoring.course import Course, CourseError

CELL_ID = "colab-setup"
LINKS_BEGIN, LINKS_END = "<!-- notebook links: python -m autograder.authoring.colab -->", "<!-- end of notebook links -->"
DISTRIBUTION = "custom-autograd-course"


def student_repository(course: Course) -> str:
    """The public repository of the student distribution, from pyproject.toml."""
    pyproject = tomllib.loads((course.root / "pyproject.toml").read_text())
    try:
        return pyproject["tool"][DISTRIBUTION]["student-repository"]
    except KeyError:
        raise CourseError(f"pyproject.toml has no [tool.{DISTRIBUTION}] student-repository") from None


def setup_source(repository: str) -> str:
    return (
        "# Setup: on Google Colab this installs the course's library; anywhere else it does nothing.\n"
        "try:\n"
        "    import google.colab  # noqa: F401  (exists only on Colab)\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        f'    %pip install --quiet "{DISTRIBUTION} @ git+{repository}"'
    )


def _github_path(repository: str) -> str:
    return repository.removeprefix("https://github.com/").removesuffix(".git").strip("/")


def colab_url(repository: str, notebook: str, branch: str = "main") -> str:
    """Colab's address for a notebook of a GitHub repository (the student distribution)."""
    return f"https://colab.research.google.com/github/{_github_path(repository)}/blob/{branch}/{notebook}"


def binder_url(repository: str, path: str = "course", branch: str = "main") -> str:
    """mybinder.org's address that builds the repository (binder/) and opens JupyterLab on ``path``."""
    return f"https://mybinder.org/v2/gh/{_github_path(repository)}/{branch}?urlpath=lab/tree/{path}"


def links_table(course: Course) -> str:
    """The rows of a Markdown table: each student notebook with its Colab and Binder links."""
    repository = student_repository(course)
    notebooks = sorted(p.relative_to(course.root).as_posix() for p in course.release.glob("*/*.ipynb"))
    return "\n".join(f"| `{Path(n).stem}` | [Open in Colab]({colab_url(repository, n)}) "
                     f"| [Launch Binder]({binder_url(repository, n)}) |" for n in notebooks)


def update_readme_links(course: Course) -> bool:
    """Rewrite the links table of the README between its two markers; True if it changed."""
    readme = course.root / "README.md"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(f"({re.escape(LINKS_BEGIN)}\n\\| Assignment[^\n]*\n\\|[-|]*\\|\n).*?(\n{re.escape(LINKS_END)})", re.S)
    new = pattern.sub(lambda m: m[1] + links_table(course) + m[2], text)
    if new == text:
        return False
    readme.write_text(new, encoding="utf-8")
    return True


def add_setup_cell(path: Path, repository: str) -> bool:
    """Make ``path`` start with the setup cell; True if the file changed.

    The notebook's JSON is edited as it is written (key order, indent=1), so the change is the
    one cell and nothing else, whoever else is editing the notebook.
    """
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    cell = {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": [],
            "source": setup_source(repository).splitlines(keepends=True)}
    cells = nb["cells"]
    if cells and cells[0].get("id") == CELL_ID:
        cells[0] = cell
    else:
        cells.insert(0, cell)
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    nbformat.validate(nbformat.reads(new, as_version=4))
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def add_setup_cells(course: Course) -> list[Path]:
    """Put the setup cell first in every notebook of ``solutions/``; returns the notebooks changed."""
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
    print(f"{len(changed)} notebooks changed; run `make release` to carry the cell into course/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
