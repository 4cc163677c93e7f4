"""check judges a notebook exactly as grade does, and a notebook cannot tell the two apart.

One course copy (the instructor's checkout: solutions/ present). Every assignment's solution
notebook, blank release and a half-done notebook (the first half of the answers filled in; not for the
two slowest), the demo class's notebooks of 01 and a notebook that probes its sandbox are graded with `grade` and
checked with `check`; each test's verdict must be the same in both. The probe reports (in a failing
test's message) what it finds of the network, its uid, environment, working folder, /proc, the
paths it can read or write and its home: check and grade must show the same report, and neither
may read or write the course's solutions/ or grading/ or the real home.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.course import Course
from autograder.grading.demo.make_demo import ASSIGNMENT as DEMO_ASSIGNMENT, DEMO_ROOT
from autograder.grading.selfcheck import STUDENT, failure_message
from conftest import REPO, filled_release, nbgrader_meta, solution_answers

pytestmark = pytest.mark.slow

DEMO_STUDENTS = ("ada", "ben", "chen", "dana", "eli", "fay", "ivy")  # gus's file is not a notebook
REAL_HOME = os.path.expanduser("~")
SLOW = ("07_gpu_timing", "09_production_pytorch", "11_flash_attention")  # (their solution and blank suffice: they take seconds each)

PROBE = '''
def _probe():
    import hashlib, json, os, socket, torch
    course = {course!r}
    facts = {{}}
    for family in ("AF_INET", "AF_UNIX"):
        try:
            socket.socket(getattr(socket, family)).close()
            facts[family] = "allowed"
        except OSError as error:
            facts[family] = type(error).__name__
    facts["uid"] = "own" if os.getuid() >= 2_000_000 else os.getuid()
    facts["env"] = sorted(os.environ.items())
    facts["cwd"], facts["home"] = os.getcwd(), os.path.expanduser("~")
    facts["files here"] = sorted(os.listdir("."))
    facts["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    for name in ("/proc/1/cmdline", "/proc/self/environ"):
        with open(name, "rb") as f:
            facts[name] = hashlib.sha256(f.read()).hexdigest()[:16]
    facts["threads"] = torch.get_num_threads()
    for path in (".", "/tmp", "/dev/shm", {home!r}, course, course + "/solutions", course + "/grading"):
        try:
            with open(os.path.join(path, "probe.txt"), "w") as f:
                f.write("x")
            facts["write " + path] = "written"
        except OSError as error:
            facts["write " + path] = type(error).__name__
    for path in (course + "/solutions/01_first_function/01_first_function.ipynb", course + "/grading",
                 course + "/solutions", {home!r}):
        try:
            facts["read " + path] = (sorted(os.listdir(path))[:3] if os.path.isdir(path)
                                     else open(path).read(20))
        except OSError as error:
            facts["read " + path] = type(error).__name__
    return "PROBE " + json.dumps(facts, sort_keys=True)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise AssertionError(_probe())

    @staticmethod
    def backward(ctx, grad_output):
        raise AssertionError(_probe())
'''


def _run(course: Course, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=course.environment(),
                          capture_output=True, text=True, timeout=900)


def _half(assignment: str) -> dict:
    """The release with the first half of the answers filled in (in the notebook's order)."""
    answers = solution_answers(REPO, assignment)
    released = json.loads((REPO / "course" / assignment / f"{assignment}.ipynb").read_text())
    order = [nbgrader_meta(c)["grade_id"] for c in released["cells"] if nbgrader_meta(c).get("solution")]
    return filled_release(REPO, assignment, {g: answers[g] for g in order[: len(order) // 2] if g in answers})


def notebooks(course: Course) -> dict[tuple[str, str], str]:
    """(student, assignment) -> the notebook handed in, as text."""
    found = {}
    for assignment in course.assignments():
        found["solution", assignment] = (course.solutions / assignment / f"{assignment}.ipynb").read_text()
        found["blank", assignment] = (course.release / assignment / f"{assignment}.ipynb").read_text()
        if assignment not in SLOW:
            found["half", assignment] = json.dumps(_half(assignment))
    for student in DEMO_STUDENTS:
        found[student, DEMO_ASSIGNMENT] = (DEMO_ROOT / DEMO_ASSIGNMENT / student / f"{DEMO_ASSIGNMENT}.ipynb").read_text()
    answers = solution_answers(REPO, DEMO_ASSIGNMENT)
    answers["cube"] = PROBE.format(course=str(course.root), home=REAL_HOME)
    found[STUDENT, DEMO_ASSIGNMENT] = json.dumps(filled_release(REPO, DEMO_ASSIGNMENT, answers))  # check's own id
    return found


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("agree")
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / "course" / folder)
    course = Course(root / "course")
    handed_in = notebooks(course)
    for (student, assignment), text in handed_in.items():
        folder = course.grading / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(text, encoding="utf-8")
    for assignment in course.assignments():
        graded = _run(course, "grade", assignment)
        assert graded.returncode == 0, graded.stdout + graded.stderr
    assert _run(course, "feedback", DEMO_ASSIGNMENT).returncode == 0
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}", "custom-autograd-functions") as gb:
        by_grade = {(s.student.id, a): {g.name: g.auto_score for nb in s.notebooks for g in nb.grades}
                    for a in course.assignments() for s in gb.find_assignment(a).submissions}
    checked = {}
    for (student, assignment), text in handed_in.items():
        mine = root / "mine" / student / f"{assignment}.ipynb"
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.write_text(text, encoding="utf-8")
        run = _run(course, "check", str(mine), "--json")
        assert run.returncode in (0, 1) and run.stderr == "", (student, assignment, run.stderr)
        checked[student, assignment] = json.loads(run.stdout)
    return course, handed_in, by_grade, checked


def _grade_ids_of_tests(course: Course, assignment: str) -> set[str]:
    source = json.loads((course.solutions / assignment / f"{assignment}.ipynb").read_text())
    return {nbgrader_meta(c)["grade_id"] for c in source["cells"]
            if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}


def test_check_and_grade_give_every_test_the_same_verdict(judged):
    course, handed_in, by_grade, checked = judged
    differences = []
    for (student, assignment), report in checked.items():
        tests = _grade_ids_of_tests(course, assignment)
        mine = {t["grade_id"]: t["score"] for t in report["tests"]}
        theirs = {name: score for name, score in by_grade[student, assignment].items() if name in tests}
        assert set(mine) == tests, (student, assignment)
        if mine != theirs:
            differences.append((student, assignment, mine, theirs))
    assert not differences, differences
    # And the set is no trivial one: every outcome is there.
    scores = {key: sum(t["score"] for t in r["tests"]) / sum(t["max_score"] for t in r["tests"])
              for key, r in checked.items()}
    assert all(scores["solution", a] == 1 for a in course.assignments())
    assert all(scores["blank", a] == 0 for a in course.assignments())
    assert sum(0 < s < 1 for s in scores.values()) >= 10


def _probe_report(message: str) -> str:
    found = re.findall(r"PROBE \{.*?\}(?=\)|$)", message, re.M)
    assert found, message
    return found[0]


def test_a_notebook_that_probes_its_sandbox_finds_the_same_under_check_and_grade(judged):
    course, _, by_grade, checked = judged
    report = checked[STUDENT, DEMO_ASSIGNMENT]
    autograded = json.loads((course.grading / "autograded" / STUDENT / DEMO_ASSIGNMENT /
                             f"{DEMO_ASSIGNMENT}.ipynb").read_text())
    for test in report["tests"]:
        cell = next(c for c in autograded["cells"] if nbgrader_meta(c).get("grade_id") == test["grade_id"])
        assert test["message"] == failure_message(cell.get("outputs", [])), test["grade_id"]  # shown the same
        assert test["score"] == by_grade[STUDENT, DEMO_ASSIGNMENT][test["grade_id"]]
    [forward] = [t for t in report["tests"] if t["grade_id"] == "test_cube_forward"]
    facts = json.loads(_probe_report(forward["message"]).removeprefix("PROBE "))
    # What the probe found: the sandbox, the same in both.
    root = str(course.root)
    assert facts["AF_INET"] == facts["AF_UNIX"] == "PermissionError" and facts["uid"] == "own"
    assert facts["cwd"] == facts["home"] == str(course.grading / ".staging" / STUDENT / DEMO_ASSIGNMENT)
    for path in (REAL_HOME, root, root + "/solutions", root + "/grading"):
        assert facts["write " + path] in ("OSError", "PermissionError", "FileNotFoundError"), (path, facts)
        assert not os.path.exists(os.path.join(path, "probe.txt"))
    for path in (root + "/solutions/01_first_function/01_first_function.ipynb", root + "/solutions"):
        assert facts["read " + path] in ("FileNotFoundError", "PermissionError"), (path, facts)
    # grading/ shows only the way down to the notebook's own working folder, none of its files
    assert facts["read " + root + "/grading"] in ("FileNotFoundError", "PermissionError", [".staging"]), facts
    # the real home shows nothing but the way down to the Python installation, when that lies inside it
    python = {Path(p).relative_to(REAL_HOME).parts[0] for p in (sys.prefix, sys.base_prefix)
              if Path(p).is_relative_to(REAL_HOME)}
    listed = facts["read " + REAL_HOME]
    assert listed in ("FileNotFoundError", "PermissionError") or set(listed) <= python, (listed, python)
    assert facts["write ."] == facts["write /tmp"] == "written"


def test_checks_messages_are_what_the_feedback_page_shows(judged):
    """check reads each failing test's message from the cell's outputs as the feedback page shows them: every
    line of it is on the page (grade's run), and where nothing random is in it, check's run says the same."""
    course, _, _, checked = judged
    for student in ("blank", "half", "chen", "eli", "fay"):
        page = (course.grading / "feedback" / student / DEMO_ASSIGNMENT / f"{DEMO_ASSIGNMENT}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))
        autograded = json.loads((course.grading / "autograded" / student / DEMO_ASSIGNMENT /
                                 f"{DEMO_ASSIGNMENT}.ipynb").read_text())
        failing = [t for t in checked[student, DEMO_ASSIGNMENT]["tests"] if not t["passed"]]
        assert failing, student
        for test in failing:
            cell = next(c for c in autograded["cells"] if nbgrader_meta(c).get("grade_id") == test["grade_id"])
            message = failure_message(cell.get("outputs", []))
            assert message and all(line in text for line in message.splitlines()), (student, test["grade_id"])
            if student in ("blank", "fay"):  # unfinished, a syntax error: no random value in the message
                assert test["message"] == message, (student, test["grade_id"])
