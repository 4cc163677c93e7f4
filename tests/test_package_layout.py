"""The package's layout: wings and rooms that import only downwards, no circles, no long files (issues 13, 28).

``autograder.course`` is the bottom (every wing finds the course there); above it the wings
student <- authoring <- grading <- commands; inside grading the rooms running <- records <-
results <- the pipeline at grading's top level. Checked on the source (every import statement,
including those inside functions), so an import added anywhere in a module is seen.
"""

from pathlib import Path

import pytest

from autograder.authoring.publish import imported_modules  # the reader publish uses to ship modules

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"
BOTTOM = {"course"}
# What each wing may import from the package (besides itself and the bottom).
ALLOWED = {
    "student": set(),
    "authoring": {"student"},
    "grading": {"student", "authoring"},
    "commands": {"student", "authoring", "grading"},
}
ROOMS = ["running", "records", "results", "top"]  # grading's rooms, lowest first
# running's own rooms, lowest first: moving messages, keeping a notebook confined, judging it, then
# running it (executor, warm, child, kernel, preparation at running's top level).
RUNNING_ROOMS = ["messages", "confinement", "judging", "top"]
MAX_LINES = 500


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def room_of(module: str) -> str:
    """The room of a grading module (``top`` for grade, selfcheck, bench, demo)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in ROOMS else "top"


def running_room_of(module: str) -> str:
    """The room inside ``grading.running`` of one of its modules (``top`` for executor, warm, child, ...)."""
    parts = module.split(".")
    return parts[3] if len(parts) > 3 and parts[3] in RUNNING_ROOMS else "top"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports (``from a import b`` may name a module)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imported_modules(path) if m in files and m != name} for name, path in files.items()}


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


def test_grading_rooms_import_only_downwards():
    offending = []
    for path in sorted((PACKAGE / "grading").rglob("*.py")):
        room = room_of(module_name(path))
        for module in imported_modules(path):
            if wing_of(module) == "grading" and len(module.split(".")) > 2:
                if ROOMS.index(room_of(module)) > ROOMS.index(room):
                    offending.append(f"{path.relative_to(PACKAGE.parent)} ({room}) imports {module} ({room_of(module)})")
    assert not offending, "\n".join(offending)


def test_running_rooms_import_only_downwards():
    """Inside ``grading/running/``: messages <- confinement <- judging <- the modules that run a notebook."""
    offending = []
    for path in sorted((PACKAGE / "grading" / "running").rglob("*.py")):
        room = running_room_of(module_name(path))
        for module in imported_modules(path):
            if module.startswith("autograder.grading.running.") and \
                    RUNNING_ROOMS.index(running_room_of(module)) > RUNNING_ROOMS.index(room):
                offending.append(f"{path.relative_to(PACKAGE.parent)} ({room}) imports {module} ({running_room_of(module)})")
    assert not offending, "\n".join(offending)


def test_running_has_one_room_per_kind_of_work():
    """Issue 39: keeping a notebook confined, judging it and moving messages each have a room of their own."""
    running = PACKAGE / "grading" / "running"
    for room in RUNNING_ROOMS[:-1]:
        assert (running / room / "__init__.py").is_file(), room
    loose = sorted(p.name for p in running.glob("*.py") if p.name != "__init__.py")
    assert loose == ["child.py", "executor.py", "kernel.py", "preparation.py", "warm.py"], loose


def test_the_course_model_is_the_bottom():
    imported = imported_modules(PACKAGE / "course.py")
    assert imported == set(), f"autograder/course.py imports {imported}"


def test_every_module_belongs_to_a_wing_or_is_the_face():
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top_level == ["__init__.py", "__main__.py", "cli.py", "course.py"]
    assert imported_modules(PACKAGE / "cli.py") <= {"autograder.course", "autograder.course.Course",
                                                     "autograder.course.CourseError",
                                                     "autograder.grading.running.executor",
                                                     "autograder.grading.running.executor.warm_up"}, \
        "cli.py only dispatches: each command's arguments live in autograder/commands/"


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Import circles in ``graph`` (module -> modules it imports), each as "a -> b -> a"."""
    state: dict[str, int] = {}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_circles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]  # the check sees one
    cycles = find_cycles(modules())
    assert not cycles, "\n".join(cycles)


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_command_module_has_its_help_arguments_and_run():
    from autograder import cli

    assert cli.available_commands() == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        module = cli._command(name)
        assert module.HELP and module.DESCRIPTION and callable(module.add_arguments) and callable(module.run), name


def test_the_rule_is_seen_by_the_check(tmp_path):
    """The check finds an upward import, also one hidden inside a function."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from autograder.grading.grade import grade\n")
    assert "autograder.grading.grade" in imported_modules(module)
    assert wing_of("autograder.grading.grade") == "grading"
    assert room_of("autograder.grading.grade") == "top" and room_of("autograder.grading.running.executor") == "running"
    assert running_room_of("autograder.grading.running.judging.scan") == "judging"
    assert running_room_of("autograder.grading.running.executor") == "top"
