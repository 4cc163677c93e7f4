"""What the graded edition ships states no graded result: the hints it keeps teach, they do not hand over answers.

A notebook's answers live in its solution-only parts: the solution code (between nbgrader's markers),
the model derivations the instructor grades by hand, and the answer-level hints ("Hint N: the answer"),
which the graded release strips (``autograder.authoring.hints``). Everything else ships, in ``course/``
and in the students' edition: statements, the hints it keeps, worked examples, "Common mistakes",
"What you learned". These tests compare the two, for every notebook:

- **code**: the code the shipped Markdown shows (inline spans, also those a line break wraps, and code blocks;
  ``...`` in it stands for anything, but the code it shows of its own must be at least half of the line it
  matches: ``mask=...`` or ``tl.sum(..., axis=0)`` name an API's argument and hand over no line) is no
  statement of a solution, nor the value one assigns or returns, unless students see that
  code anyway: in a shipped code cell (a worked example, a test's reference), or in the statement of an
  exercise, which says what to write (``forward`` returns ``x.clamp(min=0)``). A statement may not show
  the code of a derivative (in ``backward`` or ``jvp``): deriving it is what is graded;
- **given code**: the shipped code cells (worked examples, demos, the visible parts of tests) show less than half
  of the gradient values any exercise's ``backward`` computes: a demo may share a step with an exercise, not
  solve it (03's demo of trailing ``None`` gradients once returned ``Linear``'s, 04's example of an integer
  output was ``TopK`` with ``k = 1``);
- **maths**: no formula of the shipped Markdown is the result of a gradient formula of the solution-only
  Markdown (what follows its ``=``), compared without notation: ``y_j(g_j - \\sum_i g_i y_i)`` and
  ``y \\odot (g - \\sum_{row} g \\odot y)`` are one formula;
- **hint levels**: an exercise with two hint levels or more ends with the answer level, so that its most
  telling hint is the one the release strips; and no shipped prose sends students to an answer level.

``code_shipped``, ``given_code_solves``, ``maths_shipped`` and ``hint_levels`` find each; the tests at the end show
that each would have caught the hints and code that once handed answers over (issue 34), on copies of today's
notebooks.
"""

from __future__ import annotations

import ast
import re

import pytest

from autograder.course import Course
from autograder.grading.running.judging.referee import hidden_chunks
from conftest import REPO, nbgrader_meta, read_notebook, source

ASSIGNMENTS = Course(REPO).assignments()
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
HINT = re.compile(r"<details>\s*<summary>\s*([^<]*?)\s*</summary>(.*?)</details>", re.S)
ANSWER_LEVEL = re.compile(r"^Hint (\d+): the answer$")
INLINE_CODE = re.compile(r"(?<!`)`((?:[^`\n]|\n(?!\n))+)`(?!`)")  # a span may wrap onto the next line
CODE_BLOCK = re.compile(r"```[a-z]*\n(.*?)```", re.S)
MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$]+)\$", re.S)
EXERCISE = re.compile(r"^## Exercise", re.M)


# ----------------------------------------------------------------------------------------------
# Code


def _normal(node: ast.AST) -> str:
    """``node`` as code, without spaces: the form two spellings of the same code share."""
    return re.sub(r"\s+", "", ast.unparse(node))


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code.strip())
    except SyntaxError:
        return None


def _substantial(node: ast.AST, placeholder: str = "") -> bool:
    """Code that computes something: an operator, an index, or a call with an argument (other than ``...``)."""
    def real(argument):
        return not (isinstance(argument, ast.Name) and argument.id == placeholder)
    return any(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Subscript))
               or (isinstance(n, ast.Call) and any(map(real, n.args + [k.value for k in n.keywords])))
               for n in ast.walk(node))


def _binds(node: ast.AST) -> bool:
    """A statement that stores something (``ctx.constant = constant``): an answer even without an operator."""
    return isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))


def _solution_statements(cell_source: str) -> list[tuple[ast.stmt, str, str]]:
    """(statement, class, function) for each statement between a solution cell's markers: the innermost class
    and function around it ("" where there is none)."""
    tree = _parse(cell_source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""))
    lines = set()
    for match in SOLUTION.finditer(cell_source):
        first = cell_source[:match.start(1)].count("\n") + 1
        lines.update(range(first, first + match.group(1).count("\n")))
    classes, functions = {}, {}  # node -> the name of the innermost class / function around it
    for scope, names in ((ast.ClassDef, classes), (ast.FunctionDef, functions)):
        for outer in [n for n in ast.walk(tree) if isinstance(n, scope)]:
            for node in ast.walk(outer):
                names[id(node)] = outer.name
    return [(node, classes.get(id(node), ""), functions.get(id(node), "")) for node in ast.walk(tree)
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return))
            and node.lineno in lines]


def _values(statement: ast.stmt) -> list[ast.AST]:
    """What a statement assigns, returns or evaluates: its value, or each element of a returned tuple."""
    value = getattr(statement, "value", None)
    if value is None:
        return []
    return value.elts if isinstance(value, ast.Tuple) else [value]


def _is_derivative(function: str) -> bool:
    return "backward" in function or function == "jvp"


def _solution_code(cell_source: str) -> tuple[set[str], set[str]]:
    """(every answer, the derivatives' answers) of a solution cell: each statement between the markers and
    the value each assigns or returns (each element of a returned tuple too). The values ``forward``
    returns are left out (the statement defines them); a derivative is what ``backward`` or ``jvp`` runs."""
    answers, derivatives = set(), set()
    for node, _, function in _solution_statements(cell_source):
        if function == "forward" and isinstance(node, ast.Return):
            continue
        value = getattr(node, "value", None)
        parts = [node] + ([value] if isinstance(value, ast.Tuple) else []) + _values(node)
        found = {_normal(p) for p in parts if _substantial(p) or p is node and _binds(node)}
        answers |= found
        if _is_derivative(function):
            derivatives |= found
    return answers, derivatives


def _gradients(cell_source: str) -> dict[str, set[str]]:
    """Each derivative a solution cell writes, by Function: the values its ``backward`` (or ``jvp``) assigns,
    returns or evaluates that compute something from a gradient (a name ``grad...``), as
    ``{"TopK.backward": {...}}``. Statements that only unpack ``ctx`` or pass values on (``f(x, grad_output)``,
    a call of another function with names) are left out."""
    def passes_on(value):
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and all(
            isinstance(a, ast.Name) for a in value.args + [k.value for k in value.keywords])

    found = {}
    for node, cls, function in _solution_statements(cell_source):
        for value in _values(node) if _is_derivative(function) else []:
            if _substantial(value) and not passes_on(value) and any(
                    isinstance(n, ast.Name) and n.id.startswith("grad") for n in ast.walk(value)):
                found.setdefault(f"{cls}.{function}", set()).add(_normal(value))
    return found


def _visible_code(cell: dict, leave_out: frozenset[str] = frozenset()) -> set[str]:
    """Every statement and expression of a shipped code cell's visible part (its hidden tests left out), but
    those of the classes named in ``leave_out``."""
    tree = _parse("".join(chunk for hidden, chunk in hidden_chunks(source(cell)) if not hidden))
    if tree is None:
        return set()
    left_out = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name in leave_out
                for n in ast.walk(c)}
    return {_normal(n) for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.expr)) and id(n) not in left_out}


def _given_code_cells(cells: list[dict]) -> list[dict]:
    """The code cells a notebook gives: every code cell but the students' own answers."""
    return [c for c in cells if c["cell_type"] == "code" and not nbgrader_meta(c).get("solution")]


def _code_cells_show(cells: list[dict]) -> set[str]:
    """Every statement and expression of the shipped code cells (their visible parts): code students see."""
    return set().union(*map(_visible_code, _given_code_cells(cells)))


def _code_shown(markdown: str) -> list[str]:
    """The code a Markdown text shows: its inline spans (a wrapped one as one line) and the lines of its code
    blocks."""
    shown = [" ".join(m.group(1).split()) for m in INLINE_CODE.finditer(CODE_BLOCK.sub("", markdown))]
    for block in CODE_BLOCK.findall(markdown):
        shown += block.splitlines()
    return [s.strip() for s in shown if s.strip()]


def _shows(shown: str, answer: str) -> bool:
    """Whether code shown in prose is the answer or a part of it. ``...`` in it stands for anything, so long as
    what the code shows of its own is at least half of the answer: a fragment that is mostly ``...`` (``mask=...``,
    ``tl.sum(..., axis=0)``) matches many lines and hands over none of them."""
    placeholder = "_placeholder_"
    tree = _parse(shown.replace("...", placeholder))
    if tree is None or not (_substantial(tree, placeholder) or any(map(_binds, tree.body))):
        return False
    if "..." not in shown:
        return any(_normal(n) == answer for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.expr)))
    own = _normal(tree).split(placeholder)
    return re.search(".*?".join(map(re.escape, own)), answer) is not None and 2 * len("".join(own)) >= len(answer)


def _statements(cells: list[dict]) -> str:
    """The exercises' statements: their Markdown without the hints."""
    return "\n".join(HINT.sub("", source(c)) for c in cells if c["cell_type"] == "markdown"
                     and EXERCISE.search(source(c)))


def code_shipped(solutions: list[dict], shipped: list[dict]) -> list[str]:
    """Where the shipped notebook's Markdown shows the solution notebook's code: 'cell: `shown` is the solution's
    `code`' for each."""
    answers, derivatives = set(), set()
    for cell in solutions:
        if cell["cell_type"] == "code" and nbgrader_meta(cell).get("solution"):
            found, derived = _solution_code(source(cell))
            answers, derivatives = answers | found, derivatives | derived
    stated = {a for shown in _code_shown(_statements(shipped)) for a in answers if _shows(shown, a)}
    secret = answers - _code_cells_show(shipped) - (stated - derivatives)
    return [f"{cell}: `{shown}` is the solution's `{answer}`" for cell, text in _shipped_markdown(shipped)
            for shown in _code_shown(text) for answer in sorted(secret) if _shows(shown, answer)]


def _starting_code(cell_source: str) -> set[str]:
    """The classes a solution cell's classes inherit from: an exercise's own starting code (06's broken
    Functions, whose bugs are the exercise)."""
    tree = _parse(cell_source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""))
    return {ast.unparse(base) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for base in c.bases}


def given_code_solves(solutions: list[dict], shipped: list[dict]) -> list[str]:
    """Where the shipped notebook's code cells (worked examples, demos, the visible parts of tests) show half
    or more of the gradient values of an exercise's ``backward``: 'Function.backward: k of its n gradient
    values in given code (cells): values' for each. A worked example may share one step with an exercise
    (04's ``x * w`` shows the gradient of ``x`` that ``ScaleShift`` returns too, and leaves it the broadcast
    reduction); half of it or more is the exercise solved. The class a solution inherits from is left out."""
    gradients, starting = {}, set()
    for cell in solutions:
        if cell["cell_type"] == "code" and nbgrader_meta(cell).get("solution"):
            gradients.update(_gradients(source(cell)))
            starting |= _starting_code(source(cell))
    given = {cell.get("id", "?"): _visible_code(cell, frozenset(starting)) for cell in _given_code_cells(shipped)}
    found = []
    for function, values in sorted(gradients.items()):
        shown = {value for value in values if any(value in code for code in given.values())}
        if 2 * len(shown) >= len(values):
            cells = ", ".join(cell for cell, code in given.items() if code & shown)
            found.append(f"{function}: {len(shown)} of its {len(values)} gradient values in given code ({cells}): "
                         f"{sorted(shown)}")
    return found


# ----------------------------------------------------------------------------------------------
# Maths

LAYOUT = re.compile(r"\\(?:big|Big|bigg|Bigg|left|right|textstyle|displaystyle|quad|qquad)(?![a-zA-Z])|\\[,;:! ]")
PRODUCTS = re.compile(r"\\(?:odot|cdot|times)(?![a-zA-Z])")
WRAPPERS = re.compile(r"\\(?:operatorname|mathrm|text|mathbf|mathit)\{([^{}]*)\}")
INDICES = re.compile(r"_(?:\{[^{}]*\}|\\?[A-Za-z0-9]+)")
GRADIENT = re.compile(r"\\partial|\\frac\{d|\\nabla|g_|'")


def _canonical(formula: str) -> str:
    """A formula without its notation: no layout, indices, product signs, brackets or spaces."""
    text = PRODUCTS.sub("", WRAPPERS.sub(r"\1", formula))
    text = INDICES.sub("", text).replace("\\sum", "sum")
    return re.sub(r"[\s(){}\[\]]", "", text)


def _formulas(markdown: str) -> list[list[str]]:
    """Each formula of a text, cut at its ``=`` and at the commas between formulas, as canonical parts."""
    found = []
    for match in MATH.finditer(markdown):
        for formula in re.split(r",(?![^{]*})", LAYOUT.sub(" ", match.group(1) or match.group(2))):
            found.append([_canonical(part) for part in formula.split("=")] + [formula])
    return found


def _results(markdown: str) -> set[str]:
    """What the gradient formulas of a text give: the parts after an ``=``, long enough to be a result."""
    return {part for *parts, formula in _formulas(markdown) if GRADIENT.search(formula)
            for part in parts[1:] if len(part) >= 6}


def maths_shipped(solutions: list[dict], shipped: list[dict]) -> list[str]:
    """Where the shipped Markdown gives a result of the solution-only Markdown: 'cell: formula' for each."""
    results = _results(_solution_only_markdown(solutions))
    return [f"{cell}: {formula.strip()}" for cell, text in _shipped_markdown(shipped)
            for *parts, formula in _formulas(text) if set(parts) & results]


# ----------------------------------------------------------------------------------------------
# Hint levels


def hint_levels(solutions: list[dict], shipped: list[dict]) -> list[str]:
    """Exercises whose last hint level (of two or more) is not the answer, and shipped prose that sends
    students to an answer level."""
    found, answer_levels = [], set()
    for cell in solutions:
        summaries = [summary for summary, _ in HINT.findall(source(cell))] if cell["cell_type"] == "markdown" else []
        if len(summaries) >= 2 and not ANSWER_LEVEL.match(summaries[-1]):
            found.append(f"{cell.get('id')}: its last hint is '{summaries[-1]}', not 'Hint {len(summaries)}: the answer'")
        answer_levels |= {int(ANSWER_LEVEL.match(s)[1]) for s in summaries if ANSWER_LEVEL.match(s)}
    for cell, text in _shipped_markdown(shipped):
        for level in sorted(answer_levels):
            if re.search(rf"\bHint {level}\b", HINT.sub("", text)):
                found.append(f"{cell}: sends students to Hint {level}, the answer level, which this edition leaves out")
    return found


# ----------------------------------------------------------------------------------------------
# The notebooks


def _cells(folder: str, assignment: str) -> list[dict]:
    return read_notebook(REPO / folder / assignment / f"{assignment}.ipynb")["cells"]


def _solution_only_markdown(cells: list[dict]) -> str:
    """The model derivations and the answer-level hints of the solution notebook."""
    parts = [source(c) for c in cells if c["cell_type"] == "markdown" and nbgrader_meta(c).get("solution")]
    parts += [body for c in cells if c["cell_type"] == "markdown" for summary, body in HINT.findall(source(c))
              if ANSWER_LEVEL.match(summary)]
    return "\n".join(parts)


def _shipped_markdown(cells: list[dict]) -> list[tuple[str, str]]:
    """(cell id, text) of the shipped Markdown cells students read (not the cells of their own answers)."""
    return [(c.get("id", "?"), source(c)) for c in cells if c["cell_type"] == "markdown"
            and not nbgrader_meta(c).get("solution")]


# ----------------------------------------------------------------------------------------------
# Tests


def _notebooks(assignment: str) -> tuple[list[dict], list[dict]]:
    """(the solution notebook's cells, the graded release's cells)."""
    return _cells("solutions", assignment), _cells("course", assignment)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_shipped_markdown_shows_no_solution_code(assignment):
    assert code_shipped(*_notebooks(assignment)) == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_given_code_cells_solve_no_exercise(assignment):
    assert given_code_solves(*_notebooks(assignment)) == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_shipped_markdown_gives_no_result_of_the_solution_only_parts(assignment):
    assert maths_shipped(*_notebooks(assignment)) == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_answer_is_the_last_hint_level_and_no_shipped_prose_sends_students_there(assignment):
    assert hint_levels(*_notebooks(assignment)) == []


def _with(cells: list[dict], cell_id: str, old: str = "", new: str = "") -> list[dict]:
    """A copy of ``cells`` where cell ``cell_id``'s text has ``old`` replaced by ``new`` (or ``new`` added)."""
    changed = []
    for cell in cells:
        text = source(cell)
        if cell.get("id") == cell_id:
            assert old in text, f"{cell_id}: {old!r}"
            text = text.replace(old, new) if old else f"{text}\n\n{new}"
        changed.append(dict(cell, source=text))
    return changed


def _hint(text: str) -> str:
    return f"<details><summary>Hint 1</summary>\n\n{text}\n\n</details>"


# The hints and prose that handed answers over until issue 34, each put back into a copy of today's notebook.
CODE_GIVEN_AWAY = [
    ("03_non_tensor_arguments", "cell-7e7a8245", _hint("`forward` stores `ctx.constant = constant` and returns "
                                                       "`x * constant`."),
     "ctx.constant=constant"),  # MulConstant's Hint 1: the whole solution
    ("02_saving_for_backward", "cell-44e5583d", _hint("Save the result of that comparison, not `x`: "
                                                      "`ctx.save_for_backward(x > 0)`."),
     "ctx.save_for_backward(x>0)"),  # ReLUMask's Hint 1: the line to write
    ("02_saving_for_backward", "cell-44e5583d", "(`grad_output * mask` works)", "grad_output*mask"),  # its statement
    ("09_production_pytorch", "cell-7c6c4e63", "divide by a `torch.where(..., 1.0)`-protected value, then pick.",
     "torch.where(positive,y,1.0)"),  # Common mistakes: Exercise 1's double-where fix
    ("10_triton_kernels", "exercise-1", _hint("Then `h = x + bias[None, :]`, GELU, and one `tl.store` with the "
                                              "same offsets and mask."),
     "h=x+bias[None,:]"),  # BiasGELU forward's Hint 1: the bias's line
    ("10_triton_kernels", "exercise-2", _hint("Then `cdf` $= \\Phi(h)$, `pdf` $= \\varphi(h)$, "
                                              "`grad_h = grad_output * (cdf + h * pdf)`."),
     "grad_h=grad_output*(cdf+h*pdf)"),  # its backward's Hint 1: the gradient's line
]


@pytest.mark.parametrize("assignment, cell_id, text, answer", CODE_GIVEN_AWAY)
def test_solution_code_in_shipped_prose_is_found(assignment, cell_id, text, answer):
    solutions, shipped = _notebooks(assignment)
    found = code_shipped(solutions, _with(shipped, cell_id, new=text))
    assert found and all(line.startswith(f"{cell_id}: ") for line in found)
    assert any(line.endswith(f"`{answer}`") for line in found), found


def test_a_span_that_a_line_break_wraps_is_read_whole():
    """Markdown wraps long lines, inline code included (10's forward Hint 1 once gave its grid that way)."""
    solutions, shipped = _notebooks("10_triton_kernels")
    wrapped = _hint("Then `grad_h = grad_output *\n(cdf + h * pdf)`.")
    shown = "exercise-2: `grad_h = grad_output * (cdf + h * pdf)` is the solution's"
    assert code_shipped(solutions, _with(shipped, "exercise-2", new=wrapped)) == [
        f"{shown} `grad_h=grad_output*(cdf+h*pdf)`", f"{shown} `grad_output*(cdf+h*pdf)`"]


def test_a_fragment_that_is_mostly_wildcard_hands_over_nothing_and_one_that_is_mostly_its_own_code_does():
    """``mask=...`` and ``tl.sum(..., axis=0)`` match a dozen of 10's solution lines and give none of them; a
    line with only its mask left out gives that line."""
    solutions, shipped = _notebooks("10_triton_kernels")
    named = _hint("Load with `mask=...` and `other=0.0`, and reduce with `tl.sum(..., axis=0)`.")
    assert code_shipped(solutions, _with(shipped, "exercise-4", new=named)) == []
    store = "`tl.store(grad_x_ptr + offsets, grad_h.to(grad_x_ptr.dtype.element_ty), mask=...)`"
    assert code_shipped(solutions, _with(shipped, "exercise-4", new=_hint(store))) == [
        f"exercise-4: {store} is the solution's `tl.store(grad_x_ptr+offsets,grad_h.to(grad_x_ptr.dtype.element_ty),"
        "mask=inside)`"]


def test_a_graded_result_in_other_notation_is_found():
    """05's "What you learned" gave softmax's VJP in vector notation; the answer-level hint and the model
    derivation write it with indices."""
    solutions, shipped = _notebooks("05_deriving_backward")
    told = r"softmax's is $y \odot (g - \sum_{\text{row}} g \odot y)$"
    assert maths_shipped(solutions, _with(shipped, "cell-ad5dc152", new=told)) == [
        r"cell-ad5dc152: y \odot (g - \sum_{\text{row}} g \odot y)"]


def test_a_last_hint_that_is_not_the_answer_level_and_prose_sending_students_to_the_answer_are_found():
    solutions, shipped = _notebooks("06_checking_gradients")  # 06's "Hint 2: the five bugs" was never stripped
    renamed = _with(solutions, "cell-3f987d23", "Hint 2: the answer", "Hint 2: the five bugs")
    assert hint_levels(renamed, shipped) == [
        "cell-3f987d23: its last hint is 'Hint 2: the five bugs', not 'Hint 2: the answer'"]
    solutions, shipped = _notebooks("05_deriving_backward")  # 05's first cell: "Hint 2 only if you are stuck"
    told = "Each exercise has hints, collapsed: try first, then open *Hint 1*, and *Hint 2* only if you are stuck."
    assert hint_levels(solutions, _with(shipped, "cell-06b58938", new=told)) == [
        "cell-06b58938: sends students to Hint 2, the answer level, which this edition leaves out"]


def test_code_a_statement_asks_for_and_code_students_see_anyway_are_not_answers_to_hide():
    """03's LinearLayer statement shows how to initialise (``torch.empty(...).uniform_(-k, k)``): what to write,
    not a result; 01's worked ReLU shows ``grad_output.clone()``. A statement may not show a derivative, though."""
    solutions, shipped = _notebooks("03_non_tensor_arguments")
    assert code_shipped(solutions, _with(shipped, "cell-2dee0e5a", new="Use `torch.empty(...).uniform_(-k, k)`.")) == []
    found = code_shipped(solutions, _with(shipped, "cell-91a0b8eb", new="`grad_bias = grad_output.sum(0)`"))
    shown = "cell-91a0b8eb: `grad_bias = grad_output.sum(0)` is the solution's"
    assert found == [f"{shown} `grad_bias=grad_output.sum(0)`", f"{shown} `grad_output.sum(0)`"]


# Given code that solved an exercise until issue 34, put back into a copy of today's notebook: 03's demo of
# trailing Nones (Linear's three gradients), 04's example of an integer output (TopK with k = 1), 02's memory
# comparison (SiLU's backward).
LINEAR_SKETCH = '''
class LinearSketch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        return x @ weight.T if bias is None else x @ weight.T + bias

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output @ weight, grad_output.T @ x, None


class LinearSketchExtra(LinearSketch):
    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output @ weight, grad_output.T @ x, grad_output.sum(0)
'''
MAX_LAST_DIM = '''
class MaxLastDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=-1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(index)
        ctx.x_shape = x.shape
        return values, index

    @staticmethod
    def backward(ctx, grad_values, grad_index):
        (index,) = ctx.saved_tensors
        grad_x = torch.zeros(ctx.x_shape, dtype=grad_values.dtype, device=grad_values.device)
        return grad_x.scatter(-1, index.unsqueeze(-1), grad_values.unsqueeze(-1))
'''
SILU_NAIVE = '''
class SiLUNaiveWithBackward(SiLUNaive):
    @staticmethod
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        return grad_output * s * (1 + x * (1 - s))
'''
GIVEN_CODE_SOLVED = [
    ("03_non_tensor_arguments", "cell-acd56ed7", LINEAR_SKETCH, "Linear.backward: 3 of its 3"),
    ("04_multiple_inputs_and_outputs", "cell-d80c2f65", MAX_LAST_DIM, "TopK.backward: 1 of its 2"),
    ("02_saving_for_backward", "cell-c624450e", SILU_NAIVE, "SiLU.backward: 1 of its 1"),
]


@pytest.mark.parametrize("assignment, cell_id, code, found", GIVEN_CODE_SOLVED)
def test_given_code_that_solves_an_exercise_is_found(assignment, cell_id, code, found):
    solutions, shipped = _notebooks(assignment)
    assert given_code_solves(solutions, shipped) == []
    told = given_code_solves(solutions, _with(shipped, cell_id, new=code))
    assert len(told) == 1 and told[0].startswith(f"{found} gradient values in given code ({cell_id}): "), told


def test_the_code_an_exercise_fixes_is_no_answer_and_a_worked_example_may_share_one_step():
    """06's Exercise 2 gives five broken Functions to fix: ``BrokenPow``'s backward holds ``FixedPow``'s
    gradient in the wrong place. Inherited, it is the exercise's starting code; from a class of its own, the
    same code gives the answer away. 04's ``MulNoReduce`` shows the gradient of ``x`` that ``ScaleShift``
    returns too, one of its three: the broadcast reductions, the exercise, are left to the student."""
    solutions, shipped = _notebooks("06_checking_gradients")
    assert given_code_solves(solutions, shipped) == []
    unrelated = _with(solutions, "fixed_functions", "class FixedPow(BrokenPow):",
                      "class FixedPow(torch.autograd.Function):")
    assert given_code_solves(unrelated, shipped) == [
        "FixedPow.backward: 1 of its 1 gradient values in given code (cell-6c565685): ['grad_output*p*x**(p-1)']"]
    solutions, shipped = _notebooks("04_multiple_inputs_and_outputs")
    scale_shift = _gradients(source(next(c for c in solutions if c.get("id") == "scale_shift")))["ScaleShift.backward"]
    assert len(scale_shift) == 3 and scale_shift & _code_cells_show(shipped) == {"grad_output*w"}
    assert given_code_solves(solutions, shipped) == []
