"""The package's three wings import only downwards: student <- authoring <- grading (issue 13).

The student's library must work in a notebook that has neither the course's sources nor the
grader; authoring tools never need the grader. Checked on the source (every import statement,
including those inside functions), so an import added anywhere in a module is seen.
"""

from pathlib import Path

import pytest

from autograder.authoring.publish import imported_modules  # the reader publish uses to ship modules

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"
# What each wing may import from the package (besides itself).
ALLOWED = {
    "student": set(),
    "authoring": {"student"},
    "grading": {"student", "authoring"},
}


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


@pytest.mark.parametrize("wing", sorted(ALLOWED))
def test_a_wing_imports_nothing_from_a_wing_above_it(wing):
    files = sorted((PACKAGE / wing).rglob("*.py"))
    assert files, f"no modules in autograder/{wing}"
    offending = []
    for path in files:
        for module in imported_modules(path):
            target = wing_of(module)
            # The face (``import autograder``) re-exports the student's library: fine above it.
            face = module == "autograder" and wing == "student"
            if face or (target not in (None, wing) and target not in ALLOWED[wing]):
                offending.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert not offending, "\n".join(offending)


def test_every_module_belongs_to_a_wing_or_is_the_face():
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top_level == ["__init__.py", "__main__.py", "cli.py"]


def test_the_rule_is_seen_by_the_check(tmp_path):
    """The check finds an upward import, also one hidden inside a function."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from autograder.grading.grade import grade\n")
    assert "autograder.grading.grade" in imported_modules(module)
    assert wing_of("autograder.grading.grade") == "grading"
