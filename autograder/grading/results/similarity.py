"""Similar submissions: students' answer cells compared pairwise with copydetect, a ranked HTML report.

Only the cells students answer (nbgrader's solution cells) are compared, never the tests. The
released template's code in them and, by default, the instructor's own solution are boilerplate
(copydetect's term): shared by everyone, so never counted as shared between two students. copydetect
tokenises the code (names and comments do not matter) and compares winnowed fingerprints, as MOSS
does. The report flags pairs for a person to read; it never changes a grade. Similar code to a
small exercise is not proof of copying.
"""

from __future__ import annotations

import html
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap

from autograder.course import Course, CourseError
from autograder.grading.records.submissions import InvalidNotebook, read_submission
from autograder.grading.results.terminal import progress

NOISE_TOKENS = 25   # shorter shared runs are ignored (copydetect's noise threshold)
WINDOW = 1          # winnowing window: 1 keeps every fingerprint, for short answers


@dataclass
class Pair:
    first: str
    second: str
    similarity: tuple[float, float]  # share of each one's answer code found in the other's
    shared_tokens: int
    highlighted: tuple[str, str] = ("", "")  # escaped HTML, shared code marked

    @property
    def score(self) -> float:
        return max(self.similarity)


@dataclass
class Similarity:
    assignment: str
    students: list[str]
    pairs: list[Pair]                       # most similar first, at or above the threshold
    skipped: dict[str, str] = field(default_factory=dict)  # student -> why not compared
    page: Path | None = None


def similarity(course: Course, assignment: str, out: Path, threshold: float = 0.5, top: int = 30,
               ignore_solution: bool = True) -> Similarity:
    """Compare every pair of students' answers to ``assignment``; write the HTML report at ``out``."""
    course.check_assignment(assignment)
    submitted = course.grading / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir()) if submitted.is_dir() else []
    if len(students) < 2:
        raise CourseError(f"fewer than two submissions of {assignment} in {submitted}: collect them first")
    notebooks = [p.name for p in course.notebooks(assignment, released=True)]
    boilerplate_code = "\n".join(_answers(nbformat.read(course.release / assignment / n, as_version=4))
                                 for n in notebooks)
    if ignore_solution:
        boilerplate_code += "\n" + "\n".join(_answers(nbformat.read(p, as_version=4))
                                             for p in course.notebooks(assignment))
    boilerplate = list(_fingerprint("boilerplate", boilerplate_code, []).hashes)
    fingerprints, skipped = {}, {}
    for student in progress(students, "reading answers"):
        try:
            code = "\n".join(_answers(read_submission(submitted / student / assignment / n)) for n in notebooks)
        except (InvalidNotebook, FileNotFoundError) as error:
            skipped[student] = str(error) if isinstance(error, InvalidNotebook) else "no notebook"
            continue
        fingerprints[student] = _fingerprint(student, code, boilerplate)
    pairs = []
    combos = list(itertools.combinations(sorted(fingerprints), 2))
    for a, b in progress(combos, "comparing pairs"):
        shared, ratios, slices = compare_files(fingerprints[a], fingerprints[b])
        if shared and max(ratios) >= threshold:
            pair = Pair(a, b, (float(ratios[0]), float(ratios[1])), int(shared))
            pair.highlighted = (_highlight(fingerprints[a].raw_code, slices[0]),
                                _highlight(fingerprints[b].raw_code, slices[1]))
            pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, -p.shared_tokens, p.first, p.second))
    result = Similarity(assignment, students, pairs[:top], skipped)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(result, threshold, ignore_solution), encoding="utf-8")
    result.page = out
    return result


def _answers(nb) -> str:
    """The code of the notebook's answer cells, each headed by its id (comments are not compared)."""
    parts = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            parts.append(f"# --- {meta.get('grade_id', '?')} ---\n{cell.source}\n")
    return "\n".join(parts)


def _fingerprint(name: str, code: str, boilerplate: list) -> CodeFingerprint:
    import io

    return CodeFingerprint(f"{name}.py", NOISE_TOKENS, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code),
                           language="python")


def _highlight(code: str, slices) -> str:
    """The code as escaped HTML with the shared parts in <mark>."""
    if not len(slices[0]):
        return html.escape(code)
    marked, _ = highlight_overlap(code, slices, "<mark>", "</mark>", escape_html=True)
    return marked


def _page(result: Similarity, threshold: float, ignore_solution: bool) -> str:
    e = html.escape
    ignored = "the released template and the instructor's solution" if ignore_solution else "the released template"
    rows = "".join(
        f'<tr><td>{i}</td><td><a href="#pair-{i}">{e(p.first)} &amp; {e(p.second)}</a></td>'
        f"<td>{100 * p.similarity[0]:.0f}%</td><td>{100 * p.similarity[1]:.0f}%</td><td>{p.shared_tokens}</td></tr>"
        for i, p in enumerate(result.pairs, 1))
    details = "".join(
        f'<section id="pair-{i}"><h2>{i}. {e(p.first)} &amp; {e(p.second)}</h2>'
        f"<p>{100 * p.similarity[0]:.0f}% of {e(p.first)}'s answer code is in {e(p.second)}'s, "
        f"{100 * p.similarity[1]:.0f}% the other way; {p.shared_tokens} shared tokens (marked).</p>"
        f'<div class="side"><div><h3>{e(p.first)}</h3><pre>{p.highlighted[0]}</pre></div>'
        f"<div><h3>{e(p.second)}</h3><pre>{p.highlighted[1]}</pre></div></div></section>"
        for i, p in enumerate(result.pairs, 1))
    skipped = "".join(f"<li>{e(s)}: {e(why)}</li>" for s, why in result.skipped.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Similar submissions: {e(result.assignment)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3em .6em; }}
.side {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }}
pre {{ background: #f6f6f6; padding: .5em; overflow-x: auto; white-space: pre-wrap; }}
mark {{ background: #ffd27f; }}
</style></head><body>
<h1>Similar submissions: {e(result.assignment)}</h1>
<p>Submissions: {len(result.students)}. Their answer cells were compared pairwise with copydetect, ignoring
{ignored} and the tests. Pairs where at least {100 * threshold:.0f}% of one student's answer code is
found in the other's, most similar first. This flags pairs for you to read: similar answers to a
small exercise are not proof of copying, and no grade was changed.</p>
<table><tr><th>#</th><th>pair</th><th>first in second</th><th>second in first</th><th>shared tokens</th></tr>
{rows or '<tr><td colspan="5">no pair above the threshold</td></tr>'}</table>
{f"<h2>Not compared</h2><ul>{skipped}</ul>" if skipped else ""}
{details}
</body></html>
"""
