"""Markdown to safe HTML for the pages the grader writes, with maths pre-rendered as MathML.

Feedback pages are opened offline and inside LMSs that strip scripts, so MathJax (what Jupyter and
the book use, `sphinx-mathjax-offline`) cannot run there. Each formula is converted here, once, to
MathML with latex2mathml; browsers draw MathML themselves (Chromium since 109, Firefox, Safari),
with no script and no network. The HTML around it is cleaned by bleach; the MathML is cleaned by
bleach too, against the MathML elements and attributes only (no ``href``, no ``style``, no events),
so a student's ``\\href{javascript:...}`` is as inert as their ``<script>``.

Two levels of trust: the course's own markdown may use the hint markup (``<details>``,
``<summary>``) on top of bleach's safe list; a student's markdown may not (it is shown as text).
A student's markup also keeps no ``id``, ``name`` or ``class``: on nbgrader's formgrader page an
element with a score input's id, or a class its script selects on (``score``, ``full-credit``,
``tabbable``...), would take that input's place (DOM clobbering), and one click would score other answers.

Images a student pasted into a markdown cell (its ``attachments``: a photo of a handwritten
derivation) are shown inline when they are PNG, JPEG, GIF or WebP, from the notebook itself (a
``data:`` URL of the checked bytes: the page fetches nothing); any other attachment is named, not shown.
"""

from __future__ import annotations

import base64
import binascii
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
# What a student's markup keeps: nothing that names an element or that the formgrader's script selects on.
STUDENT_ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "*": ["title"]}
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "*": ["id", "class", "title"], "img": ["src", "alt"]}  # the course's
# Attached images shown inline (as data: URLs of their checked bytes); SVG is left out (it is a document).
SHOWN_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")

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
MAX_TAGS = 5000  # markdown with more tags than this is shown as its text


def render_math(tex: str, display: bool = False) -> str:
    """``tex`` as cleaned MathML; TeX latex2mathml cannot read is shown as its escaped source."""
    try:
        mathml = latex_to_mathml(tex, display="block" if display else "inline")
    except Exception:  # any TeX it cannot convert: the source, readable, is better than nothing
        delimiter = "$$" if display else "$"
        return f'<code class="tex">{html.escape(delimiter + tex + delimiter)}</code>'
    return bleach.clean(mathml, tags=MATHML_TAGS, attributes=_mathml_attribute, strip=True, strip_comments=True)


def _mathml_attribute(tag: str, name: str, value: str) -> bool:
    """MathML's presentation attributes; ``form`` only as MathML means it (an operator's position)."""
    return name in MATHML_ATTRIBUTES and (name != "form" or value in ("prefix", "infix", "postfix"))


class _MathPlaceholders(IPythonRenderer):
    """nbconvert's markdown renderer, with each formula (and attached image) replaced by a placeholder to
    fill in after cleaning."""

    def __init__(self, attachments: dict | None = None):
        super().__init__(escape=False)
        self.nonce = secrets.token_hex(8)  # a student cannot write a placeholder in advance
        self.formulas: dict[str, tuple[str, str]] = {}  # placeholder -> (its text inside a tag, its HTML)
        self.attachments = attachments if isinstance(attachments, dict) else {}
        self.shown: set[str] = set()  # attachments the markdown shows

    def _hold(self, tex: str, display: bool) -> str:
        return self.placeholder(tex, render_math(tex, display))

    def placeholder(self, text: str, shown: str) -> str:
        key = f"math{self.nonce}n{len(self.formulas)}"
        self.formulas[key] = (text, shown)
        return key

    def image(self, text: str, url: str, title: str | None = None) -> str:
        """An attached image inline (``![alt](attachment:name)``); any other image as markdown renders it."""
        if not url.startswith("attachment:"):
            return super().image(text, url, title)
        name = url[len("attachment:"):]
        self.shown.add(name)
        return self.placeholder(name, attached_image(name, self.attachments.get(name)))

    def inline_math(self, body: str) -> str:
        return self._hold(body, display=False)

    def block_math(self, body: str) -> str:
        return self._hold(body, display=True)

    def latex_environment(self, name: str, body: str) -> str:
        return self._hold(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


def attached_image(name: str, bundle) -> str:
    """HTML for attachment ``name`` (its mime bundle): an ``<img>`` of its checked bytes, else a note naming it."""
    shown = html.escape(name)
    for kind in SHOWN_IMAGES:
        data = bundle.get(kind) if isinstance(bundle, dict) else None
        if isinstance(data, list):
            data = "".join(d for d in data if isinstance(d, str))
        try:
            raw = base64.b64decode(re.sub(r"\s+", "", data), validate=True) if isinstance(data, str) else b""
        except (binascii.Error, ValueError):
            raw = b""
        if raw:
            return (f'<img src="data:{kind};base64,{base64.b64encode(raw).decode()}" '
                    f'alt="{html.escape(name, quote=True)}">')
    kinds = ", ".join(html.escape(str(k)) for k in bundle) if isinstance(bundle, dict) and bundle else ""
    why = f"not an image this page can show ({kinds})" if kinds else "not in the notebook"
    return f'<em class="attachment">[attachment "{shown}": {why}]</em>'


def markdown_to_html(source: str, course_markup: bool = False, attachments: dict | None = None) -> str:
    """Markdown to cleaned HTML with MathML maths; ``course_markup`` allows the course's hint blocks.

    Disallowed tags are escaped (shown as text), not dropped, so a student sees what they wrote; markdown
    with over ``MAX_TAGS`` tags is shown as text whole. ``attachments`` (a markdown cell's) are shown
    where the markdown shows them, and listed after it where it does not.
    """
    if source.count("<") > MAX_TAGS:  # bleach's parser takes time quadratic in nesting: 30,000 <div> take minutes
        return f"<pre>{html.escape(source)}</pre>"
    renderer = _MathPlaceholders(attachments)
    rendered = MarkdownWithMath(renderer=renderer).render(source)
    unshown = [name for name in renderer.attachments if name not in renderer.shown]
    if unshown:  # attached but never shown in the text: listed, so the grader sees them too
        rendered += "<p>Attached: " + " ".join(
            renderer.placeholder(str(name), attached_image(str(name), renderer.attachments[name]))
            for name in unshown) + "</p>"
    cleaned = bleach.clean(rendered, tags=COURSE_TAGS if course_markup else STUDENT_TAGS,
                           attributes=ATTRIBUTES if course_markup else STUDENT_ATTRIBUTES,
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
