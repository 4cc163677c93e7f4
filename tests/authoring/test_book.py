"""The rendered course (make book): every chapter run and rendered, figures embedded, links that resolve."""

from __future__ import annotations

import base64
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from autograder.authoring.book import build
from autograder.authoring.course import CourseError
from conftest import REPO, read_notebook, source

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """An HTML page's links, images, element ids and visible text."""

    def __init__(self, path: Path):
        super().__init__()
        self.path, self.links, self.images, self.ids, self.text = path, [], [], set(), []
        self._skip = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)

    @property
    def visible_text(self) -> str:
        return "".join(self.text)


def _solutions(course) -> list[Path]:
    return [nb for assignment in course.assignments() for nb in course.notebooks(assignment)]


@pytest.fixture(scope="session")
def book(course, tmp_path_factory) -> Path:
    """The whole course rendered once into a temporary folder."""
    output = tmp_path_factory.mktemp("book") / "book"
    build(course, output)
    return output


def test_every_chapter_has_a_page_listed_in_the_index(course, book):
    index = Page(book / "index.html")
    for solution in _solutions(course):
        page = book / f"{solution.stem}.html"
        assert page.is_file(), f"no page for {solution}"
        assert page.name in index.links, f"the index does not link {page.name}"
        title = next(line.lstrip("#").strip() for cell in read_notebook(solution)["cells"]
                     if cell["cell_type"] == "markdown" for line in source(cell).splitlines() if line.startswith("#"))
        assert title in index.visible_text and title in Page(page).visible_text


def test_student_notebooks_are_linked_copies_of_the_release(course, book):
    index = Page(book / "index.html")
    for solution in _solutions(course):
        released = course.release / solution.parent.name / solution.name
        if not released.is_file():
            continue  # an assignment in the making: its chapter says "not released yet"
        link = f"notebooks/{solution.parent.name}/{solution.name}"
        assert link in index.links and link in Page(book / f"{solution.stem}.html").links
        assert (book / link).read_bytes() == released.read_bytes()


def test_chapters_link_previous_index_and_next_in_course_order(course, book):
    pages = [f"{solution.stem}.html" for solution in _solutions(course)]
    for i, name in enumerate(pages):
        links = set(Page(book / name).links)
        assert "index.html" in links
        neighbours = {pages[j] for j in (i - 1, i + 1) if 0 <= j < len(pages)}
        assert neighbours <= links, f"{name} lacks a link to {neighbours - links}"
        assert not (set(pages) - neighbours - {name}) & links, f"{name} links chapters that are not its neighbours"


def test_every_figure_is_embedded(course, book):
    """Every plt.show() of a solution gives a PNG inside its page; no image is a separate file."""
    for solution in _solutions(course):
        page = Page(book / f"{solution.stem}.html")
        shows = sum(source(cell).count("plt.show()") for cell in read_notebook(solution)["cells"]
                    if cell["cell_type"] == "code")
        pngs = [src for src in page.images if src.startswith("data:image/png;base64,")]
        assert len(pngs) >= shows, f"{page.path.name}: {len(pngs)} embedded figures for {shows} plt.show() calls"
        assert pngs == page.images, f"{page.path.name} has images that are not embedded PNGs"
        for png in pngs:
            assert base64.b64decode(png.split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_every_internal_link_resolves(book):
    pages = {path: Page(path) for path in book.glob("*.html")}
    checked = 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # external
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.is_file(), f"{path.name} links {link}, which is not in the book"
            assert book.resolve() in target.parents, f"{path.name} links {link}, outside the book"
            if parts.fragment and target.suffix == ".html":  # browsers match the id as written, then decoded
                assert {parts.fragment, unquote(parts.fragment)} & pages[target].ids, f"{path.name} links {link}: no such anchor"
            checked += 1
    assert checked > 2 * len(pages)


def test_chapters_show_the_answers_but_not_the_hidden_tests(course, book):
    for solution in _solutions(course):
        cells = read_notebook(solution)["cells"]
        shown, hidden = [], []
        for cell in cells:
            inside = False
            for line in source(cell).splitlines():
                if "### BEGIN HIDDEN TESTS" in line or "### END HIDDEN TESTS" in line:
                    inside = "BEGIN" in line
                elif line.strip():
                    (hidden if inside else shown).append(line.strip())
        text = Page(book / f"{solution.stem}.html").visible_text
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        lines = {line.strip() for line in text.splitlines()}
        hidden_only = {line for line in set(hidden) - set(shown) if len(line) > 10}  # not "]" and the like
        leaked = sorted(hidden_only & lines)
        assert not leaked, f"{solution.name}: hidden test lines in the book: {leaked}"
        answers = [line.strip() for cell in cells if cell.get("metadata", {}).get("nbgrader", {}).get("solution")
                   for line in source(cell).splitlines() if line.strip() and "### " not in line]
        missing = [line for line in answers if line not in lines]
        assert not missing, f"{solution.name}: answer lines missing from the book: {missing[:3]}"


def test_a_folder_that_is_not_a_book_is_never_replaced(course, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CourseError, match="not a book built by this command"):
        build(course, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_book_command_line_help():
    result = subprocess.run([sys.executable, "-m", "autograder.authoring.book", "--help"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0 and "--output" in result.stdout
