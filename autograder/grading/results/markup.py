"""Markdown to safe HTML for the pages the grader writes, with maths pre-rendered as MathML.

Feedback pages are opened offline and inside LMSs that strip scripts, so MathJax (what Jupyter and
the book use, `sphinx-mathjax-offline`) cannot run there. Each formula is converted here, once, to
MathML with latex2mathml; browsers draw MathML themselves (Chromium since 109, Firefox, Safari),
with no script and no network. The HTML around it is cleaned by bleach; the MathML is cleaned by
bleach too, against the MathML elements and attributes only (no ``href``, no ``style``, no events),
so a student's ``\\href{javascript:...}`` is as inert as their ``<script>``.

Two levels of trust: the course's own markdown may use the hint markup (``<details>``,
``<summary>``) on top of bleach's safe list; a student's markdown may not (it is shown as text).
"""

from __future__ import annotations

import html
import re
import secrets

import bleach
from bleach.css_sanitizer import CSSSanitizer
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

# What any markdown on a page may use: bleach's safe list and the plain HTML markdown itself produces.
# No images: a student's <img src="https://..."> would make the page fetch (and tell someone it was opened).
STUDENT_TAGS = frozenset(bleach.ALLOWED_TAGS) | {
    "p", "div", "span", "br", "hr", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "sub", "sup",
    "table", "thead", "tbody", "tr", "th", "td", "del", "dl", "dt", "dd"}
# The course's own markdown adds its hint markup (issue 27's convention: <details><summary>Hint N</summary>)
# and its images.
COURSE_TAGS = STUDENT_TAGS | {"details", "summary", "img"}
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "*": ["id", "class", "title"], "img": ["src", "alt"]}

# MathML that latex2mathml writes (MathML Core plus menclose/mfenced), and its presentation attributes.
MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msqrt", "mroot", "mfrac", "msub", "msup",
    "msubsup", "munder", "mover", "munderover", "mmultiscripts", "mprescripts", "none", "mtable", "mtr",
    "mtd", "mstyle", "mpadded", "mphantom", "merror", "menclose", "mfenced", "semantics", "annotation"})
MATHML_ATTRIBUTES = ["display", "mathvariant", "stretchy", "fence", "separator", "separators", "lspace",
                     "rspace", "minsize", "maxsize", "movablelimits", "accent", "accentunder", "linethickness",
                     "columnalign", "rowalign", "rowspacing", "columnspacing", "columnlines", "rowlines",
                     "frame", "width", "height", "depth", "notation", "displaystyle", "scriptlevel", "form",
                     "largeop", "symmetric", "open", "close", "columnspan", "rowspan", "encoding"]
CSS = CSSSanitizer(allowed_css_properties=[])


def render_math(tex: str, display: bool = False) -> str:
    """``tex`` as cleaned MathML; TeX latex2mathml cannot read is shown as its escaped source."""
    try:
        mathml = latex_to_mathml(tex, display="block" if display else "inline")
    except Exception:  # any TeX it cannot convert: the source, readable, is better than nothing
        delimiter = "$$" if display else "$"
        return f'<code class="tex">{html.escape(delimiter + tex + delimiter)}</code>'
    return bleach.clean(mathml, tags=MATHML_TAGS, attributes={"*": MATHML_ATTRIBUTES}, strip=True,
                        strip_comments=True)


class _MathPlaceholders(IPythonRenderer):
    """nbconvert's markdown renderer, with each formula replaced by a placeholder to fill in after cleaning."""

    def __init__(self):
        super().__init__(escape=False)
        self.nonce = secrets.token_hex(8)  # a student cannot write a placeholder in advance
        self.formulas: dict[str, tuple[str, str]] = {}  # placeholder -> (TeX, MathML)

    def _hold(self, tex: str, display: bool) -> str:
        key = f"math{self.nonce}n{len(self.formulas)}"
        self.formulas[key] = (tex, render_math(tex, display))
        return key

    def inline_math(self, body: str) -> str:
        return self._hold(body, display=False)

    def block_math(self, body: str) -> str:
        return self._hold(body, display=True)

    def latex_environment(self, name: str, body: str) -> str:
        return self._hold(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


def markdown_to_html(source: str, course_markup: bool = False) -> str:
    """Markdown to cleaned HTML with MathML maths; ``course_markup`` allows the course's hint blocks.

    Disallowed tags are escaped (shown as text), not dropped, so a student sees what they wrote.
    """
    renderer = _MathPlaceholders()
    rendered = MarkdownWithMath(renderer=renderer).render(source)
    cleaned = bleach.clean(rendered, tags=COURSE_TAGS if course_markup else STUDENT_TAGS, attributes=ATTRIBUTES,
                           css_sanitizer=CSS, strip=False, strip_comments=True)
    if not renderer.formulas:
        return cleaned
    placeholder = re.compile(f"math{renderer.nonce}n[0-9]+")

    def fill(match, part: int, quoted: bool) -> str:
        found = renderer.formulas.get(match.group(0))
        return match.group(0) if found is None else html.escape(found[0], quote=True) if quoted else found[part]

    # Inside a tag (an image's alt, a link's title) a formula stays its escaped TeX; in text it is MathML.
    cleaned = re.sub(r"<[^>]*>", lambda tag: placeholder.sub(lambda m: fill(m, 0, True), tag.group(0)), cleaned)
    return placeholder.sub(lambda m: fill(m, 1, False), cleaned)
