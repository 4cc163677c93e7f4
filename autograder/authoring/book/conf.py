"""Sphinx settings for the course's book (``python -m autograder book`` stages the sources and runs Sphinx).

MyST-NB reads and runs the notebooks (cached by jupyter-cache: unchanged code is not run again),
the PyData theme gives search, the sidebar of chapters, the in-page table of contents and the
light/dark switch; sphinx-copybutton puts a copy button on code; sphinx-mathjax-offline copies
MathJax into the site, so formulas render without a network. ``static/`` holds the book's own
CSS and scripts: display equations fitted to the column (book.js), search excerpts when the book
is opened from disk (book-search.js, with the page texts ``page_text_for_search`` writes).
"""

import json
from pathlib import Path

from docutils import nodes
from PIL import Image

project = "Custom autograd Functions in PyTorch"
author = "the course's authors"  # python -m autograder book sets both from pyproject.toml's [project] authors
copyright = "the course's authors"
html_title = project

extensions = ["myst_nb", "sphinx_copybutton", "sphinx-mathjax-offline"]
exclude_patterns = ["student", "**/.ipynb_checkpoints", "jupyter_execute"]  # student/: downloads, not pages

# MyST: $...$ and $$...$$ math, \begin{align} blocks, ::: admonitions.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# Execution: cached; a cell that raises fails the build (with -W every warning does).
nb_execution_mode = "cache"
nb_execution_cache_path = "jupyter_cache"  # python -m autograder book sets the real folder
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# Answer cells carry the hide-input tag: folded behind this button.
nb_code_prompt_show = "Show the model answer"
nb_code_prompt_hide = "Hide the model answer"

html_theme = "pydata_sphinx_theme"
html_theme_options = {
    "navbar_center": [],
    "navbar_persistent": [],
    "navbar_end": ["search-button-field", "theme-switcher"],
    "secondary_sidebar_items": ["page-toc"],
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
    "show_prev_next": True,
    "search_bar_text": "Search the course...",
}
html_sidebars = {"**": ["chapters"]}
templates_path = [str(Path(__file__).parent / "templates")]
html_static_path = [str(Path(__file__).parent / "static")]
html_css_files = ["book.css"]
html_js_files = ["book.js"]
html_copy_source = False  # the only notebooks to download are the student ones, linked on each chapter
html_show_sourcelink = False
html_last_updated_fmt = None
copybutton_exclude = ".linenos, .gp, .go"


def figure_alt_text(app, doctree):
    """Every notebook figure without alt text gets the chapter's title and the figure's own titles.

    The book's kernels write a figure's titles into its PNG's "Title" chunk (see FIGURE_TITLES_CELL
    in autograder/authoring/book/__init__.py).
    """
    title = doctree.next_node(nodes.title)
    chapter = title.astext() if title is not None else app.env.docname
    images = [image for image in doctree.findall(nodes.image) if not image.get("alt")]
    for number, image in enumerate(images, start=1):
        path = Path(app.srcdir, image.get("candidates", {}).get("*", ""))  # set by Sphinx's ImageCollector
        titles = ""
        if path.suffix == ".png" and path.is_file():
            with Image.open(path) as png:
                titles = png.text.get("Title", "")
        image["alt"] = f"Figure {number} of chapter {chapter}" + (f": {titles}" if titles else "")


def images_beside_doctrees(app):
    """MyST-NB writes output images beside the HTML folder (book/../jupyter_execute): keep them in the work folder."""
    folder = Path(app.doctreedir).parent / "jupyter_execute"
    app.env.mystnb_config = app.env.mystnb_config.copy(output_folder=str(folder))


PAGE_TEXTS = "_page_texts"  # each page's body as a script, for search excerpts from disk (static/book-search.js)


def page_text_for_search(app, pagename, templatename, context, doctree):
    """Write each page's body as a script that the search page can load from disk, and give that page the
    script which loads them: browsers refuse the requests Sphinx's search makes for its excerpts from a
    file:// page, but not a script beside it."""
    if pagename == "search":
        app.add_js_file("book-search.js")  # (on this page only)
    elif doctree is not None and context.get("body"):
        path = Path(app.outdir, PAGE_TEXTS, f"{pagename}.js")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"bookPageText({json.dumps(pagename)}, {json.dumps(context['body'])});\n", encoding="utf-8")


def setup(app):
    app.connect("builder-inited", images_beside_doctrees, priority=600)  # after MyST-NB's own (500)
    app.connect("doctree-read", figure_alt_text, priority=600)  # after Sphinx's ImageCollector
    app.connect("html-page-context", page_text_for_search)
