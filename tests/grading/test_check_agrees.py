"""check judges a notebook exactly as grade does, and a notebook cannot tell the two apart.

One course copy (the instructor's checkout: solutions/ present). Every assignment's solution
notebook, blank release and a half-done notebook (the first half of the answers filled in; not for the
slowest three, nor for 10), the demo class's notebooks of 01 and a notebook that probes its sandbox are graded with
`grade` (its command line's `main`, once per assignment, in one Python): every solution gets full marks and every
blank none, each test cell decided by the referee. `check` judges every assignment in at least one of them
(``checked_too``: the demo class, the probe, every half-done notebook, 07's solution, the blanks of 01, 09, 10
and 11); each test's verdict must be the same in both. (`check` gives full marks to 09's filled-in notebook in
test_selfcheck.py, and to 10's and 11's in the students' edition in test_publish.py.)

The probe (a given cell put into the copy's 01, so that it runs whole in the examinee too, and made the
probing notebook's Cube) reports, in a failing test's message, everything a process can find out about
where it runs (its command line, interpreter flags and import path, working folder and its contents,
environment, uids, limits, cgroup, host name, network, mounts, /proc, open descriptors, process tree, the
package parts shown, what it can read and write), from the notebook's own process in full and from its
examinee as a digest. check and grade must show the same reports, and neither may read or write the
course's solutions/ or grading/ or the real home.
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
from autograder.grading.running.preparation import WORKING_FOLDERS
from autograder.grading.selfcheck import failure_message
from conftest import REPO, filled_release, nbgrader_meta, solution_answers

pytestmark = pytest.mark.slow

DEMO_STUDENTS = ("ada", "ben", "chen", "dana", "eli", "fay", "ivy")  # gus's file is not a notebook
PROBING_STUDENT = "zed4417"  # grade's id for the probing notebook: nowhere in what it finds
REAL_HOME = os.path.expanduser("~")
SLOW = ("07_gpu_timing", "09_production_pytorch", "11_flash_attention")  # (their solution and blank suffice: they take seconds each)
# No half-done notebook of 10: its blank is checked too, and each of its notebooks runs kernels in the interpreter
HALF_ELSEWHERE = ("10_triton_kernels",)


def checked_too(student: str, assignment: str) -> bool:
    """Whether `check` judges this notebook too (``grade`` judges them all): every assignment in one way at least,
    each kind of notebook in several assignments, not every pair (each run of a solution costs seconds)."""
    return (student not in ("solution", "blank") or (student, assignment) in (
        ("solution", "07_gpu_timing"), ("blank", "01_first_function"), ("blank", "09_production_pytorch"),
        ("blank", "10_triton_kernels"), ("blank", "11_flash_attention")))

# The probe: a given cell (tagged setup: the examinee runs it whole) that makes Cube report what it finds.
PROBE = '''
import hashlib as _hashlib, json as _json, os as _os, resource as _resource, signal as _signal, socket as _socket
import sys as _sys
import multiprocessing as _mp
import multiprocessing.process as _mp_process
import torch as _torch

_COURSE, _HOME = __COURSE__, __HOME__


def _attempt(action):
    try:
        return action()
    except OSError as error:
        return type(error).__name__


def _read(path, size=None):
    return _attempt(lambda: open(path, "rb").read().decode(errors="replace"))


def _listing(path):
    return _attempt(lambda: sorted(_os.listdir(path)))


def _probe():
    """What this process can find out about where it runs, the same wherever check or grade runs it."""
    examinee = __name__ != "__main__"
    cwd = _os.getcwd()
    # What differs from one run to the next by design: the working folder's random name, the uid of the sandbox
    here = _os.path.basename(cwd) if examinee else _os.path.basename(_os.path.dirname(cwd))
    uid = str(_os.getuid()) if _os.getuid() >= 2_000_000 else "<not a sandbox uid>"
    facts = {}
    facts["argv"], facts["orig_argv"], facts["path"] = _sys.argv, _sys.orig_argv, _sys.path
    facts["flags"], facts["warnoptions"], facts["xoptions"] = list(_sys.flags), _sys.warnoptions, _sys._xoptions
    facts["executable"] = [_sys.executable, _sys.prefix, _sys.base_prefix]
    facts["modules"] = [len(_sys.modules), _hashlib.sha256(" ".join(sorted(_sys.modules)).encode()).hexdigest()[:12]]
    facts["main"] = [getattr(_sys.modules["__main__"], "__file__", None), "__mp_main__" in _sys.modules]
    facts["cwd"], facts["files here"] = cwd, _listing(".")
    facts["environment"] = sorted(_os.environ.items())
    facts["environ block"] = _hashlib.sha256(_read("/proc/self/environ").encode()).hexdigest()[:12]
    facts["ids"] = [[str(i) for i in ids] for ids in (_os.getresuid(), _os.getresgid(), _os.getgroups())]
    facts["rlimits"] = {n: _resource.getrlimit(getattr(_resource, n)) for n in sorted(dir(_resource))
                         if n.startswith("RLIMIT_")}
    facts["cgroup"] = _read("/proc/self/cgroup")
    facts["status"] = [line for line in _read("/proc/self/status").splitlines()
                       if line.split(":")[0] in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd",
                                                 "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters", "Threads")]
    facts["host"] = list(_os.uname())
    facts["network"] = [_listing("/sys/class/net"), _attempt(lambda: _socket.socket().close()),
                        _attempt(lambda: _socket.socket(_socket.AF_UNIX).close())]
    mounts = [line.split()[3:] for line in _read("/proc/self/mountinfo").replace(here, "<here>").splitlines()]
    facts["mounts"] = [[m[1], m[m.index("-") + 1]] for m in mounts]
    facts["mount details"] = _hashlib.sha256(repr(mounts).encode()).hexdigest()[:12]
    facts["processes"] = [p for p in _listing("/proc") if p.isdigit()]
    facts["/proc/1/cmdline"] = _read("/proc/1/cmdline")
    facts["descriptors"] = sorted((fd, _attempt(lambda: _os.readlink(f"/proc/self/fd/{fd}")).split(":")[0])
                                  for fd in _listing("/proc/self/fd"))
    facts["multiprocessing"] = [_mp_process.ORIGINAL_DIR, _mp.current_process().name]
    facts["tree"] = [_os.getpid(), _os.getppid(), _os.getpgrp(), _os.getsid(0)]
    mask = _os.umask(0o22)
    _os.umask(mask)
    facts["scheduling"] = [mask, sorted(_os.sched_getaffinity(0)), _os.nice(0), _torch.get_num_threads(),
                           round(_signal.getitimer(_signal.ITIMER_REAL)[0], -1)]
    package = _os.path.dirname(_os.path.dirname(_torch.__file__))  # (site-packages)
    import autograder as _autograder
    mine = _os.path.dirname(_autograder.__file__)
    facts["package"] = [_listing(mine), _listing(_os.path.join(mine, "grading")), _listing(package)[:3]]
    facts["folders"] = {p: _listing(p) for p in ("/", "/tmp", "/dev/shm", "/sys/fs/cgroup", _HOME, _COURSE,
                                                 _COURSE + "/grading", _COURSE + "/grading/.running",
                                                 _COURSE + "/solutions")}
    written = {}
    for path in (".", "/tmp", _HOME, _COURSE, _COURSE + "/solutions", _COURSE + "/grading"):
        written[path] = _attempt(lambda: open(_os.path.join(path, "probe.txt"), "w").write("x"))
    facts["written"] = written
    facts["read"] = _read(_COURSE + "/solutions/01_first_function/01_first_function.ipynb")[:20]
    text = _json.dumps(facts, sort_keys=True).replace(here, "<here>").replace(uid, "<uid>")
    if examinee:  # an error in the examinee reaches the report as its first 300 characters: a digest of each fact
        found = _json.loads(text)
        return "PROBE-E " + " ".join("".join(filter(str.isalnum, k))[:5] + _hashlib.sha256(repr(found[k]).encode())
                                      .hexdigest()[:3] for k in sorted(found))
    return "PROBE " + text


class ProbeCube(_torch.autograd.Function):
    """Cube, right but for its report: the examinee's forward (the referee's check of test_cube_forward says its error)
    and the notebook's backward (the visible part of test_cube_backward fails with it) raise it instead."""

    @staticmethod
    def forward(ctx, x):
        if __name__ != "__main__":
            raise AssertionError(_probe())
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        if __name__ == "__main__":
            raise AssertionError(_probe())
        x, = ctx.saved_tensors
        return 3 * x ** 2 * grad_output
'''


def _run(course: Course, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=course.environment(),
                          capture_output=True, text=True, timeout=900)


# Several commands run by the command line's own `main`, one after the other in one Python: what a shell's runs
# of them do, but for the interpreter and the warm process (torch, ~5 s of CPU) started once, not once each.
ONE_PYTHON = """
import contextlib, io, json, sys
from autograder.cli import main
printed = []
for command in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(command)
    printed.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(printed))
"""


def _run_in_one_python(course: Course, commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    ran = subprocess.run([sys.executable, "-c", ONE_PYTHON, json.dumps(commands)], cwd=course.root,
                         env=course.environment(), capture_output=True, text=True, timeout=1800)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return [subprocess.CompletedProcess(command, code, out, err)
            for command, (code, out, err) in zip(commands, json.loads(ran.stdout.splitlines()[-1]), strict=True)]


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
        if assignment not in SLOW + HALF_ELSEWHERE:
            found["half", assignment] = json.dumps(_half(assignment))
    for student in DEMO_STUDENTS:
        found[student, DEMO_ASSIGNMENT] = (DEMO_ROOT / DEMO_ASSIGNMENT / student / f"{DEMO_ASSIGNMENT}.ipynb").read_text()
    return found


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("agree")
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / "course" / folder)
    course = Course(root / "course")
    handed_in = notebooks(course)
    handed_in[PROBING_STUDENT, DEMO_ASSIGNMENT] = with_the_probe(course)
    for (student, assignment), text in handed_in.items():
        folder = course.grading / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(text, encoding="utf-8")
    first_lines = {}  # grade's first line of stderr, for each assignment
    grading = [["grade", assignment] for assignment in course.assignments()] + [["feedback", DEMO_ASSIGNMENT]]
    *grades, feedback = _run_in_one_python(course, grading)
    assert feedback.returncode == 0, feedback.stdout + feedback.stderr
    for assignment, graded in zip(course.assignments(), grades, strict=True):
        assert graded.returncode == 0, graded.stdout + graded.stderr
        first_lines[assignment] = graded.stderr.splitlines()[0]
        # no test cell's points are decided in a student's process (this and the solutions' full marks below
        # are what test_notebooks.py leaves to this file for all but a few assignments)
        assert "every test cell's points (" in graded.stdout + graded.stderr, (assignment, graded.stdout)
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}", "custom-autograd-functions") as gb:
        by_grade = {(s.student.id, a): {g.name: g.auto_score for nb in s.notebooks for g in nb.grades}
                    for a in course.assignments() for s in gb.find_assignment(a).submissions}
    checked = {}
    for (student, assignment), text in handed_in.items():
        if not checked_too(student, assignment):
            continue
        mine = root / "mine" / student / f"{assignment}.ipynb"
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.write_text(text, encoding="utf-8")
        run = _run(course, "check", str(mine), "--json")
        assert run.returncode in (0, 1) and run.stderr == "", (student, assignment, run.stderr)
        checked[student, assignment] = json.loads(run.stdout)
    return course, handed_in, by_grade, checked, first_lines


def _grade_ids_of_tests(course: Course, assignment: str) -> set[str]:
    return set(_points_of_tests(course, assignment))


def _points_of_tests(course: Course, assignment: str) -> dict[str, float]:
    source = json.loads((course.solutions / assignment / f"{assignment}.ipynb").read_text())
    return {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"]) for c in source["cells"]
            if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}


def test_check_and_grade_give_every_test_the_same_verdict(judged):
    course, handed_in, by_grade, checked, _ = judged
    differences = []
    for (student, assignment), report in checked.items():
        tests = _grade_ids_of_tests(course, assignment)
        mine = {t["grade_id"]: t["score"] for t in report["tests"]}
        theirs = {name: score for name, score in by_grade[student, assignment].items() if name in tests}
        assert set(mine) == tests, (student, assignment)
        if mine != theirs:
            differences.append((student, assignment, mine, theirs))
    assert not differences, differences
    # And the set is no trivial one: every assignment, every outcome is there.
    assert {assignment for _, assignment in checked} == set(course.assignments())
    scores = {key: sum(t["score"] for t in r["tests"]) / sum(t["max_score"] for t in r["tests"])
              for key, r in checked.items()}
    assert {k[0] for k, s in scores.items() if s == 1} >= {"solution", "ada"}
    assert {k[0] for k, s in scores.items() if s == 0} >= {"blank"}
    assert sum(0 < s < 1 for s in scores.values()) >= 10


def test_grade_gives_every_solution_full_marks_and_every_blank_none(judged):
    course, _, by_grade, _, _ = judged
    for assignment in course.assignments():
        tests = _grade_ids_of_tests(course, assignment)
        solution = {name: score for name, score in by_grade["solution", assignment].items() if name in tests}
        blank = {name: score for name, score in by_grade["blank", assignment].items() if name in tests}
        assert solution == _points_of_tests(course, assignment), (assignment, solution)
        assert set(blank.values()) == {0}, (assignment, blank)


def _with_probe(notebook: dict, probe: str) -> dict:
    """``notebook`` with the probe as a given cell just before the Cube exercise."""
    at = next(i for i, c in enumerate(notebook["cells"]) if nbgrader_meta(c).get("grade_id") == "cube")
    notebook["cells"].insert(at, {"cell_type": "code", "id": "sandbox-probe", "metadata": {"tags": ["setup"]},
                                  "execution_count": None, "outputs": [], "source": probe})
    return notebook


def with_the_probe(course: Course) -> str:
    """The probing notebook (01 with Cube the probe's), its probe also put into the course's source of 01."""
    probe = PROBE.replace("__COURSE__", repr(str(course.root))).replace("__HOME__", repr(REAL_HOME))
    source = course.solutions / DEMO_ASSIGNMENT / f"{DEMO_ASSIGNMENT}.ipynb"
    source.write_text(json.dumps(_with_probe(json.loads(source.read_text()), probe)))
    answers = solution_answers(REPO, DEMO_ASSIGNMENT)
    answers["cube"] = "Cube = ProbeCube  # the probe's (the cell above)"
    return json.dumps(_with_probe(filled_release(REPO, DEMO_ASSIGNMENT, answers), probe))


def _messages(judged) -> tuple[dict, dict]:
    """What grade's run (the feedback page) and check's run showed of each test of the probing notebook."""
    course, _, _, checked, _ = judged
    autograded = json.loads((course.grading / "autograded" / PROBING_STUDENT / DEMO_ASSIGNMENT /
                             f"{DEMO_ASSIGNMENT}.ipynb").read_text())
    by_grade = {nbgrader_meta(c)["grade_id"]: failure_message(c.get("outputs", [])) for c in autograded["cells"]
                if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}
    return by_grade, {t["grade_id"]: t["message"] for t in checked[PROBING_STUDENT, DEMO_ASSIGNMENT]["tests"]}


def _notebooks_report(message: str) -> dict:
    """What the notebook's own process found (test_cube_backward's message)."""
    [found] = re.findall(r"^AssertionError: PROBE (\{.*\})$", message, re.M)
    return json.loads(found)


def _examinees_report(message: str) -> list[str]:
    """The examinee's digest of what it found (test_cube_forward's message: the referee's check quotes it)."""
    [digest] = re.findall(r"PROBE-E ([\w ]+)", message)
    return digest.split()


def test_a_notebook_and_its_examinee_find_the_same_under_check_and_grade(judged):
    _, _, _, checked, first_lines = judged
    by_grade, by_check = _messages(judged)
    assert by_grade.keys() == by_check.keys()
    in_grade = _notebooks_report(by_grade["test_cube_backward"])
    in_check = _notebooks_report(by_check["test_cube_backward"])
    differ = {k: (in_grade.get(k), in_check.get(k)) for k in in_grade.keys() | in_check.keys()
              if in_grade.get(k) != in_check.get(k)}
    assert not differ, differ
    examinee = _examinees_report(by_grade["test_cube_forward"])
    assert examinee == _examinees_report(by_check["test_cube_forward"])
    assert len(examinee) == len(in_grade), examinee  # every fact, from the examinee too
    # Each run's own messages are the same (their random parts are in neither).
    assert {k: m for k, m in by_grade.items() if "PROBE" not in m} == {k: m for k, m in by_check.items()
                                                                        if "PROBE" not in m}
    # Both say how memory is bounded, the same way (grade on its first line, check in its report).
    memory = checked[PROBING_STUDENT, DEMO_ASSIGNMENT]["memory"]
    assert "for all of a notebook's processes together (a memory cgroup" in memory, memory
    assert first_lines[DEMO_ASSIGNMENT].endswith(f"; memory: {memory}"), first_lines


def test_what_the_probing_notebook_finds(judged):
    """What the probe found (the same in both): the sandbox, and nothing of who runs it or why."""
    course = judged[0]
    by_grade, _ = _messages(judged)
    facts = _notebooks_report(by_grade["test_cube_backward"])
    root = str(course.root)
    # the machine's own top folder is what the notebook sees of "/" (nothing added); its names are the host's and
    # say nothing of check or grade, whatever they are (CI's machine has a /check)
    assert set(facts["folders"]["/"]) <= set(os.listdir("/")), facts["folders"]["/"]
    text = json.dumps({**facts, "folders": {**facts["folders"], "/": "<the machine's top folder>"}})
    # the paths of this checkout and its Python say nothing of check or grade, whatever their folders are called
    # (CI's checkout lies under /check/)
    for installed in sorted({str(REPO), sys.prefix, sys.base_prefix}, key=len,
                            reverse=True):
        text = text.replace(installed, "<installed>")
    assert PROBING_STUDENT not in text and "grade" not in facts["argv"] and "check" not in text, text
    assert facts["argv"] == ["-c"] and facts["orig_argv"][1:3] == ["-P", "-c"], facts["orig_argv"]
    assert facts["main"][0] is None and facts["multiprocessing"][0] == facts["cwd"]
    assert all(os.path.isabs(p) and not p.startswith(root) for p in facts["path"]), facts["path"]
    assert facts["cwd"] == f"{root}/grading/{WORKING_FOLDERS}/<here>/{DEMO_ASSIGNMENT}"
    assert facts["folders"][root + "/grading/" + WORKING_FOLDERS] == ["<here>"]  # no other notebook's folder
    assert facts["descriptors"][:4] == [["0", "/dev/null"], ["1", "/dev/null"], ["2", "/dev/null"], ["3", "socket"]]
    assert all(path.startswith(sys.prefix) or path == "FileNotFoundError" for _, path in facts["descriptors"][4:])
    assert facts["tree"][0] == 1  # PID 1 of its own pid namespace
    assert facts["cgroup"].strip().endswith(":/") and facts["folders"]["/sys/fs/cgroup"] == []
    assert facts["network"][1:] == ["PermissionError", "PermissionError"] and facts["ids"][0] == ["<uid>"] * 3
    for path in (REAL_HOME, root, root + "/solutions", root + "/grading"):
        assert facts["written"][path] in ("OSError", "PermissionError", "FileNotFoundError"), (path, facts)
        assert not os.path.exists(os.path.join(path, "probe.txt"))
    assert facts["read"] in ("FileNotFoundError", "PermissionError") and facts["folders"][root + "/solutions"] in (
        "FileNotFoundError", "PermissionError"), facts
    # grading/ shows only the way down to the notebook's own working folder
    assert facts["folders"][root + "/grading"] == [WORKING_FOLDERS], facts
    # the real home shows nothing but the way down to the Python installation, when that lies inside it
    python = {Path(p).relative_to(REAL_HOME).parts[0] for p in (sys.prefix, sys.base_prefix)
              if Path(p).is_relative_to(REAL_HOME)}
    listed = facts["folders"][REAL_HOME]
    assert listed in ("FileNotFoundError", "PermissionError") or set(listed) <= python, (listed, python)
    assert facts["written"]["."] == facts["written"]["/tmp"] == 1


def test_checks_messages_are_what_the_feedback_page_shows(judged):
    """check reads each failing test's message from the cell's outputs as the feedback page shows them: every
    line of it is on the page (grade's run), and where nothing random is in it, check's run says the same."""
    course, _, _, checked, _ = judged
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
