"""The rendered course (make book): Sphinx + MyST-NB, every chapter run, cached, links that resolve.

The book is built once per session (``built_book`` in conftest.py), so every test that reads it is
in this file, what a reader sees in a real browser (math, search, dark mode, folded answers) too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import expect

from autograder.authoring import book as book_module
from autograder.authoring.book import build, server
from autograder.authoring.colab import CELL_ID, REPOSITORY_VARIABLE, binder_url, colab_url
from autograder.course import Course, CourseError
from browsing import Steps
from conftest import CLASS_REPOSITORY, REPO, read_notebook, source

pytestmark = pytest.mark.slow
OVERLAY_SCROLL_BARS = True  # conftest's browser: a scroll bar shows only where the page styles one (macOS, phones)


class Page(HTMLParser):
    """An HTML page's links, images (with alt), element ids, <details> elements and visible text."""

    def __init__(self, path: Path):
        super().__init__()
        self.path, self.links, self.images, self.ids, self.details, self.text = path, [], [], set(), [], []
        self._skip = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs)
        if tag == "details":
            self.details.append(attrs)
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


def _solutions(course: Course) -> list[Path]:
    return [nb for assignment in course.assignments() for nb in course.notebooks(assignment)]


def _page(built_book, solution: Path) -> Path:
    return built_book.output / solution.parent.name / f"{solution.stem}.html"


def _title(solution: Path) -> str:
    return next(line.lstrip("#").strip() for cell in read_notebook(solution)["cells"]
                if cell["cell_type"] == "markdown" for line in source(cell).splitlines() if line.startswith("#"))


def _downloads(built_book, page: Page, suffix: str) -> list[Path]:
    return [(page.path.parent / unquote(link)).resolve() for link in page.links
            if "_downloads/" in link and link.endswith(suffix)]


def test_the_first_build_ran_every_chapter(built_book):
    assert built_book.executed == [f"{s.parent.name}/{s.stem}" for s in _solutions(built_book.course)]


def test_the_footer_names_the_authors_of_pyproject(built_book):
    footer = Page(built_book.output / "index.html").visible_text
    assert built_book.course.authors != "the course's authors"  # read from pyproject.toml
    assert built_book.course.authors in footer and "the course's authors" not in footer


def test_every_chapter_has_a_page_listed_in_the_index_under_its_title(built_book):
    index = Page(built_book.output / "index.html")
    for solution in _solutions(built_book.course):
        page = _page(built_book, solution)
        assert page.is_file(), f"no page for {solution.name}"
        assert f"{solution.parent.name}/{page.name}" in index.links, f"the index does not link {page.name}"
        title = _title(solution).replace("`", "")  # Markdown code in a title is code, not backticks
        assert title in index.visible_text and title in Page(page).visible_text
        assert f"<title>{title}" in page.read_text(encoding="utf-8"), f"{page.name}: wrong <title>"


def test_a_chapter_opens_with_its_title_and_shows_no_setup_cell_and_no_placeholder(built_book):
    """The notebooks' Colab setup cell is not in the book (its Colab link opens the student notebook, which
    has its own), so a chapter opens with its title; no placeholder address anywhere."""
    for solution in _solutions(built_book.course):
        html = _page(built_book, solution).read_text(encoding="utf-8")
        article = html[html.index("<article"):]
        assert article.index("<h1") < article.index('class="cell docutils container"'), f"{solution.name}: not title first"
        text = Page(_page(built_book, solution)).visible_text
        assert "google.colab" not in text and "OWNER/NAME" not in text and "YOUR-ORG" not in text, solution.name


def test_chapters_show_the_answers_folded_and_never_the_hidden_tests(built_book):
    for solution in _solutions(built_book.course):
        cells = read_notebook(solution)["cells"]
        shown, hidden = [], []
        for cell in cells:
            inside = False
            for line in source(cell).splitlines():
                if "### BEGIN HIDDEN TESTS" in line or "### END HIDDEN TESTS" in line:
                    inside = "BEGIN" in line
                elif line.strip():
                    (hidden if inside else shown).append(line.strip())
        page = Page(_page(built_book, solution))
        text = page.visible_text
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        lines = {line.strip() for line in text.splitlines()}
        hidden_only = {line for line in set(hidden) - set(shown) if len(line) > 10}  # not "]" and the like
        leaked = sorted(hidden_only & lines)
        assert not leaked, f"{solution.name}: hidden test lines in the book: {leaked}"
        answer_cells = [cell for cell in cells if cell["cell_type"] == "code"
                        and cell.get("metadata", {}).get("nbgrader", {}).get("solution")]
        written = [cell for cell in cells if cell["cell_type"] == "markdown"
                   and cell.get("metadata", {}).get("nbgrader", {}).get("solution")]  # 05's derivations
        models = [d for d in page.details if "model-answer" in d.get("class", "") and "open" not in d]
        assert len(models) == len(written), f"{solution.name}: {len(models)} folded model answers for {len(written)}"
        answers = [line.strip() for cell in answer_cells for line in source(cell).splitlines()
                   if line.strip() and "### " not in line]
        missing = [line for line in answers if line not in lines]
        assert not missing, f"{solution.name}: answer lines missing from the book: {missing[:3]}"
        folded = [d for d in page.details if "hide" in d.get("class", "") and "open" not in d]
        assert len(folded) == len(answer_cells), f"{solution.name}: {len(folded)} folded answers for {len(answer_cells)}"
        assert "Traceback (most recent call last)" not in text, f"{solution.name}: a cell printed a traceback"


def test_each_chapter_offers_its_student_notebook_with_its_data_and_never_a_solution(built_book):
    course = built_book.course
    solutions = {path.read_bytes() for path in _solutions(course)}
    for solution in _solutions(course):
        released = course.release / solution.parent.name / solution.name
        page = Page(_page(built_book, solution))
        path = f"course/{solution.parent.name}/{solution.name}"
        assert colab_url(CLASS_REPOSITORY, path) in page.links  # the students' repository, never solutions/
        assert binder_url(CLASS_REPOSITORY, path) in page.links
        [notebook] = _downloads(built_book, page, ".ipynb")
        assert notebook.read_bytes() == released.read_bytes()
        [archive] = _downloads(built_book, page, ".zip")
        with zipfile.ZipFile(archive) as zipped:
            inside = {name: zipped.read(name) for name in zipped.namelist()}
        folder = released.parent
        expected = {f"{folder.name}/{p.relative_to(folder).as_posix()}": p.read_bytes()
                    for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts}
        assert inside == expected, f"{archive.name}: {sorted(inside)} instead of {sorted(expected)}"
    every_file = [p for p in built_book.output.rglob("*") if p.is_file() and p.suffix in (".ipynb", ".zip", ".txt")]
    assert not [p for p in every_file if p.read_bytes() in solutions], "a solution notebook is in the book"


def test_every_figure_has_alt_text_with_its_chapter_and_title(built_book):
    images = 0
    for solution in _solutions(built_book.course):
        page = Page(_page(built_book, solution))
        title = _title(solution).replace("`", "")
        for image in page.images:
            assert title in image.get("alt", ""), f"{page.path.name}: an image without alt text naming the chapter: {image}"
            images += 1
    assert images >= len(_solutions(built_book.course))
    first = Page(built_book.output / "01_first_function" / "01_first_function.html")
    assert any(image["alt"].endswith(": backward graph of Net()(x1, x2)") for image in first.images), \
        [image["alt"] for image in first.images]  # the title draw_graph gave that figure


def test_math_is_served_by_the_book_itself(built_book):
    """MathJax is loaded from _static/ (no CDN), so formulas render offline."""
    page = (built_book.output / "06_checking_gradients" / "06_checking_gradients.html").read_text(encoding="utf-8")
    assert 'src="../_static/mathjax/tex-chtml.js' in page
    assert (built_book.output / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert "cdn." not in page and "jsdelivr" not in page


def test_every_internal_link_resolves(built_book):
    pages = {path: Page(path) for path in built_book.output.rglob("*.html") if "_static" not in path.parts}
    checked = 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # external: Colab, Binder
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            assert target.is_file(), f"{path.name} links {link}, which is not in the book"
            assert built_book.output.resolve() in target.parents, f"{path.name} links {link}, outside the book"
            if parts.fragment and target.suffix == ".html":
                assert {parts.fragment, unquote(parts.fragment)} & pages[target].ids, f"{path.name} links {link}: no such anchor"
            checked += 1
    assert checked > 5 * len(pages)


def test_a_second_build_runs_no_notebook_and_a_change_reruns_only_its_chapter(built_book, tmp_path):
    """Counted from jupyter-cache's records; also: an old generator's book/ is replaced, a hint stays folded."""
    course = _copy_of_the_built_course(built_book, tmp_path)
    output = tmp_path / "book"
    output.mkdir()
    (output / ".autograder-book").write_text("the hand-written generator's marker")
    (output / "01_first_function.html").write_text("an old page")

    again = build(course, output, work=tmp_path / "work")
    assert again.executed == []
    assert not (output / "01_first_function.html").exists() and not (output / ".autograder-book").exists()
    assert (output / "06_checking_gradients" / "06_checking_gradients.html").is_file()

    solution = course.solutions / "01_first_function" / "01_first_function.ipynb"
    notebook = read_notebook(solution)
    code = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code" and cell.get("id") != CELL_ID)
    code["source"] = source(code) + "\nprint('a change')\n"
    hint = {"cell_type": "markdown", "id": "book-test-hint", "metadata": {},
            "source": "<details>\n<summary>Hint</summary>\n\nUse $\\frac{d}{dx} x^3 = 3x^2$.\n\n</details>"}
    notebook["cells"].insert(1, hint)
    solution.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    changed = build(course, output, work=tmp_path / "work")
    assert changed.executed == ["01_first_function/01_first_function"]
    page = Page(output / "01_first_function" / "01_first_function.html")
    assert "a change" in page.visible_text
    hints = [d for d in page.details if "hide" not in d.get("class", "")]
    written = sum(source(c).count("<details>") for c in notebook["cells"] if c["cell_type"] == "markdown")
    assert hints == [{}] * written, f"every hint (the chapter's own and the new one) should be a closed <details>: {hints}"
    html = page.path.read_text(encoding="utf-8")
    assert html.index("<summary>Hint</summary>") < html.index("3x^2") < html.index("</details>", html.index("<summary>Hint"))


def _copy_of_the_built_course(built_book, tmp_path) -> Course:
    """The session's course and work folder (sources, doctrees, cache), to change without harm."""
    for name in ("course", "work"):
        shutil.copytree(built_book.output.parent / name, tmp_path / name)
    return Course(tmp_path / "course")


def _edit_first_cell(course: Course, cell_type: str, text: str) -> None:
    solution = course.solutions / "01_first_function" / "01_first_function.ipynb"
    notebook = read_notebook(solution)
    cell = next(cell for cell in notebook["cells"]
                if cell["cell_type"] == cell_type and cell.get("id") != CELL_ID)  # (the book leaves that one out)
    cell["source"] = source(cell) + text
    solution.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def test_a_build_says_each_page_and_notebook_and_its_kernels_warn_of_nothing(built_book, tmp_path, capfd):
    """Issue 47: a line per page read and the time of each notebook run, instead of Sphinx's screenful; and no
    kernel warning on stderr (ipykernel's about plain TCP came once per chapter: the kernels now get CurveZMQ
    keys). capfd sees the kernels' own stderr, which they inherit."""
    course = _copy_of_the_built_course(built_book, tmp_path)
    _edit_first_cell(course, "code", "\nprint('run again')\n")
    capfd.readouterr()
    built = build(course, tmp_path / "book", ["01_first_function"], work=tmp_path / "work")
    out, err = capfd.readouterr()
    assert built.executed == ["01_first_function/01_first_function"]
    assert "IPKernelApp" not in err and "encryption" not in err, err  # no line of a kernel's own log
    lines = out.splitlines()
    read = {number: re.fullmatch(r" *\[ *(\d+)/(\d+)\] (\S+)", line) for number, line in enumerate(lines)}
    read = {number: match.groups() for number, match in read.items() if match}
    total = int(next(iter(read.values()))[1])
    assert [int(page[0]) for page in read.values()] == list(range(1, total + 1)), lines  # every page, counted
    [first] = [number for number, page in read.items() if page[2] == "01_first_function/01_first_function"]
    ran = [number for number, line in enumerate(lines) if re.fullmatch(r" +ran its notebook in \d+ s", line)]
    assert ran == [first + 1], lines  # under its chapter, the one notebook that ran
    assert "Running Sphinx" not in out and "MdParserConfig" not in out  # Sphinx's own messages are left out


def test_a_warning_fails_the_build(built_book, tmp_path, capsys):
    """A broken link in a chapter's text: Sphinx's warning is an error (no notebook runs: the code is cached)."""
    course = _copy_of_the_built_course(built_book, tmp_path)
    _edit_first_cell(course, "markdown", "\n\nSee [the missing page](no_such_page.md).\n")
    with pytest.raises(CourseError, match="did not build"):
        build(course, tmp_path / "book", ["01_first_function"], work=tmp_path / "work")
    assert "no_such_page" in capsys.readouterr().err


def test_a_cell_that_raises_fails_the_build(built_book, tmp_path):
    course = _copy_of_the_built_course(built_book, tmp_path)
    _edit_first_cell(course, "code", "\nraise RuntimeError('a broken chapter')\n")
    with pytest.raises(CourseError, match="did not build"):
        build(course, tmp_path / "book", ["01_first_function"], work=tmp_path / "work")


def test_a_chapter_runs_again_when_its_data_changes(course_copy):
    """jupyter-cache matches on code only: the hidden cell's digest changes with the data beside the notebook."""
    before = {chapter.assignment: book_module._inputs_digest(chapter) for chapter in book_module.chapters(course_copy)}
    data = course_copy.solutions / "01_first_function" / "table.json"
    data.write_text("[1, 2, 3]")
    after = {chapter.assignment: book_module._inputs_digest(chapter) for chapter in book_module.chapters(course_copy)}
    assert [a for a in before if before[a] != after[a]] == ["01_first_function"]


def test_without_a_students_repository_a_chapter_offers_the_downloads_only(course):
    [chapter] = book_module.chapters(course, ["01_first_function"])
    note = book_module._work_on_it(chapter, None)
    assert "colab" not in note.lower() and "binder" not in note.lower()
    assert "Download the notebook" in note and "Download it with its data files" in note
    assert colab_url(CLASS_REPOSITORY, "course/01_first_function/01_first_function.ipynb") in \
        book_module._work_on_it(chapter, CLASS_REPOSITORY)


def test_a_folder_that_is_not_a_book_is_never_replaced(course, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CourseError, match="not a book built by this command"):
        build(course, tmp_path, work=tmp_path / "work")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_book_command_line_help():
    result = subprocess.run([sys.executable, "-m", "autograder", "book", "--help"], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == 0 and "--output" in result.stdout and REPOSITORY_VARIABLE in result.stdout


def test_the_instructors_guide_is_in_the_book_and_the_readme_links_its_sources(built_book):
    index = Page(built_book.output / "index.html")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name, title in (("grading", "Grading a class"), ("guarantees", "What grading guarantees")):
        assert f"instructors/{name}.html" in index.links and title in index.visible_text
        assert title in Page(built_book.output / "instructors" / f"{name}.html").visible_text
        assert f"](autograder/authoring/book/instructors/{name}.md)" in readme
        assert (REPO / "autograder" / "authoring" / "book" / "instructors" / f"{name}.md").is_file()


def test_reader_uses_the_book_offline(built_book, page):
    """The built book, opened from disk with every network request refused: math, search, dark mode,
    a folded model answer, figures, and every internal link."""
    page.context.route(re.compile(r"^https?://"), lambda route: route.abort())  # offline: only file:// loads
    chapter = built_book.output / "06_checking_gradients" / "06_checking_gradients.html"
    steps = Steps(page, "book")
    assignment = "01_first_function"

    with steps.step("open the index and the chapter on checking gradients"):
        page.goto((built_book.output / "index.html").as_uri())
        page.locator(".bd-sidebar-primary").get_by_role("link", name=re.compile(r"^06 · ")).click()
        page.wait_for_url(chapter.as_uri())

    with steps.step("see formulas rendered as math"):
        article = page.locator("article.bd-article")
        page.locator("article mjx-container").first.wait_for()
        rendered = page.locator("article mjx-container").count()
        assert rendered >= 10, f"only {rendered} formulas rendered"
        text = article.inner_text()
        assert "$$" not in text and "\\frac" not in text and "\\(" not in text, "raw TeX is visible"

    with steps.step("search for a word of that chapter"):
        page.locator(".search-button-field").first.click()
        page.locator("#pst-search-dialog input[name=q]").fill("gradgradcheck")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/search\.html\?q=gradgradcheck"))
        result = page.locator("#search-results a[href*='06_checking_gradients']").first
        result.wait_for()
        # each result with its excerpt, read from the page's text script (book-search.js), not a refused request
        chapter_result = page.locator("#search-results li").filter(has=page.locator("a[href*='06_checking_gradients']"))
        expect(chapter_result.first.locator("p.context")).to_contain_text("gradgradcheck")

    with steps.step("open the result"):
        result.click()
        page.wait_for_url(re.compile(r"06_checking_gradients\.html"))

    with steps.step("switch between light and dark mode"):
        html = page.locator("html")
        background = lambda: page.evaluate("getComputedStyle(document.body).backgroundColor")
        for mode in ("light", "dark"):
            page.locator(".theme-switch-button").first.click()
            page.locator(f".theme-change-button[data-mode={mode}]").first.click()
            expect(html).to_have_attribute("data-theme", mode)
            if mode == "light":
                light = background()
        assert background() != light, f"the page looks the same in dark mode ({light})"

    with steps.step("a model answer is folded until clicked"):
        answer = page.locator("details.hide.above-input").first
        code = answer.locator("pre").first
        answer.scroll_into_view_if_needed()
        expect(code).to_be_hidden()
        answer.locator("summary").click()
        expect(code).to_be_visible()
        assert "class " in code.inner_text() or "def " in code.inner_text()

    with steps.step("see every figure rendered, with alt text"):
        page.goto((built_book.output / "01_first_function" / "01_first_function.html").as_uri())
        figures = page.locator("article img")
        assert figures.count() > 0
        for i in range(figures.count()):
            figures.nth(i).scroll_into_view_if_needed()
            width = figures.nth(i).evaluate("img => img.complete ? img.naturalWidth : 0")
            assert width > 100, f"figure {i + 1} has not rendered (natural width {width})"
            assert figures.nth(i).get_attribute("alt").startswith("Figure ")

    with steps.step("see the hints collapsed"):
        cells = read_notebook(REPO / "solutions" / assignment / f"{assignment}.ipynb")["cells"]  # chapter 01, open above
        written = sum(source(c).count("<details>") for c in cells if c["cell_type"] == "markdown")
        # Hints are the markdown's own <details>; folded answers are MyST-NB's (class "hide").
        hints = page.locator("details:not(.hide):not(.model-answer)")
        assert written and hints.count() == written, f"the chapter shows {hints.count()} hints, its notebook has {written}"
        assert hints.evaluate_all("blocks => blocks.every(b => !b.open)"), "hints should start collapsed"
        expect(hints.first.locator("summary")).to_be_visible()
        hidden = hints.first.locator("p").first
        expect(hidden).to_be_hidden()
        hints.first.locator("summary").click()
        expect(hidden).to_be_visible()

    with steps.step("follow every internal link"):
        pages = [built_book.output / "index.html"] + sorted(p for p in built_book.output.glob("*/*.html")
                                                            if p.parent.name != "_static")
        wanted: dict[Path, set[str]] = {}  # file -> anchors linked in it
        for source_page in pages:
            page.goto(source_page.as_uri())
            hrefs = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")  # resolved
            for link in (href for href in hrefs if href.startswith("file:")):
                target, _, anchor = link.partition("#")
                path = Path(urllib.request.url2pathname(target.removeprefix("file://")))
                assert path.is_file(), f"{source_page.name} links {link}: no such file"
                wanted.setdefault(path, set()).update({urllib.parse.unquote(anchor)} if anchor else set())
        for path, anchors in wanted.items():
            if path.suffix == ".html":
                page.goto(path.as_uri())
                ids = set(page.eval_on_selector_all("[id]", "elements => elements.map(e => e.id)"))
                assert anchors <= ids, f"{path.name} has no anchors {sorted(anchors - ids)}"
        assert len(wanted) > len(pages) and sum(map(len, wanted.values())) > 5 * len(pages)


def test_the_served_book_shows_search_excerpts_and_its_code_fits_the_column(built_book, page):
    """Served over HTTP (`make book-serve`), search shows each result's excerpt as Sphinx fetches it (from disk the
    book gives them itself: see the offline test); and at 1280 px no code or output block of 07 or 10 hides behind
    a sideways scroll bar (issue 40)."""
    http = server(built_book.output, 0)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{http.server_address[1]}"
    page.context.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())  # offline
    page.set_viewport_size({"width": 1280, "height": 900})
    steps = Steps(page, "book-served")
    try:
        with steps.step("search the served book: each result has its excerpt"):
            page.goto(f"{base}/search.html?q=gradgradcheck")
            expect(page.locator("#search-results li p.context").first).to_contain_text("gradgradcheck")
        for chapter in ("07_gpu_timing", "10_triton_kernels"):
            with steps.step(f"every code and output block of {chapter} fits the column"):
                page.goto(f"{base}/{chapter}/{chapter}.html")
                blocks = page.locator("article.bd-article pre")
                assert blocks.count() > 10
                wide = blocks.evaluate_all("blocks => blocks.filter(b => b.scrollWidth > b.clientWidth + 1)"
                                           ".map(b => b.textContent.slice(0, 80))")
                assert not wide, f"{len(wide)} blocks of {chapter} scroll sideways: {wide[:3]}"
    finally:
        http.shutdown()
        http.server_close()


# A laptop's window and a narrow one (issue 47), and a phone's, where book.js sets some formulas smaller and book.css
# shows the scroll bar of those still too wide.
WIDTHS = (1280, 800, 400)
EQUATIONS = """() => {
  const column = document.querySelector("article.bd-article").getBoundingClientRect();
  return [...document.querySelectorAll('article.bd-article mjx-container[display="true"]')].map(box => {
    const edges = box.getBoundingClientRect();
    return {formula: box.querySelector("mjx-assistive-mml")?.textContent.slice(0, 50) ?? "",
            in_column: edges.left >= column.left - 1 && edges.right <= column.right + 1,
            fits: box.scrollWidth <= box.clientWidth + 1,
            scroll_bar: getComputedStyle(box).overflowX === "auto" && box.offsetHeight - box.clientHeight >= 4,
            size: box.firstElementChild.style.fontSize || "100%"};
  });
}"""
NEXT_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def test_every_display_equation_fits_the_column_or_shows_a_scroll_bar(built_book, page):
    """Issue 47: 11's formulas ran past the column at 1280 px with no scroll bar in sight (LayerNorm's dL/db was not
    on screen). Every display formula of every page, folded ones opened, at each width, in a browser whose scroll
    bars show only where the page styles them: inside the column, and either all of it visible or a scroll bar
    under it that takes room (so it is drawn), set no smaller than 80% to fit."""
    steps = Steps(page, "book-equations")
    pages = [path for path in sorted(built_book.output.rglob("*.html")) if "_static" not in path.parts
             and '<div class="math notranslate nohighlight">' in path.read_text(encoding="utf-8")]
    assert len(pages) >= 8, pages
    shown = 0
    for path in pages:
        with steps.step(f"the formulas of {path.stem} at {', '.join(map(str, WIDTHS))} px"):
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            page.goto(path.as_uri())
            page.evaluate("() => MathJax.startup.promise")
            page.evaluate("() => document.querySelectorAll('article details').forEach(block => block.open = true)")
            expected = path.read_text(encoding="utf-8").count('<div class="math notranslate nohighlight">')
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                page.evaluate(NEXT_FRAMES)  # the resize (and toggle) events have run book.js's fitting
                assert page.evaluate("() => innerWidth - document.documentElement.clientWidth") == 0, \
                    "this browser's scroll bars take room even unstyled: an unstyled one would pass for shown"
                equations = page.evaluate(EQUATIONS)
                assert len(equations) == expected, f"{len(equations)} formulas rendered of {expected}"
                cut = [e for e in equations if not (e["in_column"] and (e["fits"] or e["scroll_bar"]))]
                assert not cut, f"{path.name} at {width} px: {len(cut)} formulas cut off: {cut}"
                small = [e for e in equations if float(e["size"].rstrip("%")) < 80]
                assert not small, f"{path.name} at {width} px: formulas set below 80%: {small}"
                shown += len(equations)
    assert shown >= 25 * len(WIDTHS), shown
