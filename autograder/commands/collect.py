"""``python -m autograder collect ASSIGNMENT SOURCE``: submissions from an LMS download into grading/."""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.commands import count
from autograder.course import Course
from autograder.grading.records.lms import STUDENT_ID_RULE

HELP = "put downloaded submissions where grading expects them"
DESCRIPTION = ("Copy submissions from an LMS download (zip or folder) into grading/submitted/. Understands Canvas "
               "(a flat zip of name_USERID_FILEID_notebook.ipynb, with _LATE_ marks), Moodle "
               "(Name_USERID_assignsubmission_file_/ folders), Blackboard (NAME_attempt_DATE_notebook.ipynb) and a "
               "folder per student (SOURCE/<student_id>/<notebook>.ipynb); --regexp reads any other layout. LMS "
               "user ids and names are mapped to student ids through the roster's lms_user_id (import it first "
               "with `roster`). When each was handed in comes from the LMS's own record, never a file's date in the "
               "download: Blackboard's file names, nbgrader's timestamp.txt in a student folder, or --times; "
               "Canvas's LATE mark is kept. Of several attempts, the latest is collected. Wrong or missing file names are "
               "reported per student, and so are notebooks collected that cannot be graded (not valid JSON, not a "
               "notebook): grading gives those students 'invalid notebook'. Student ids are checked: "
               f"{STUDENT_ID_RULE}; a file under any other id is not collected. The last line counts the students "
               "collected and those with problems. Exit status: 0 when everything was collected; 1 when anything "
               "was skipped or needs a look (the lines above say what) or nothing was collected; 2 when the source "
               "cannot be read at all.")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("source", type=Path, metavar="SOURCE", help="folder or .zip downloaded from the LMS")
    parser.add_argument("--layout", choices=["canvas", "moodle", "blackboard", "folders"], default=None,
                        help="the download's layout (default: the one that reads most notebooks)")
    parser.add_argument("--regexp", metavar="REGEXP", default=None,
                        help="nbgrader's named_regexp for any other layout, read on each file name (or on its path "
                             "inside the download if REGEXP has a /): named groups student_id (or lms_user_id, or "
                             "email) and file_id; optional timestamp, first_name, last_name, e.g. "
                             r"'(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9-]+)_(?P<file_id>\w+\.ipynb)'")
    parser.add_argument("--times", type=Path, metavar="CSV", default=None,
                        help="when each student handed in, for a download that does not say (Canvas, Moodle): a CSV "
                             "with a column saying who (student_id, lms_user_id, user_id, Identifier, email) and one "
                             "saying when (submitted_at, 'Last modified (submission)', timestamp) or whether late "
                             "(late: true/false). Moodle's grading worksheet is such a file as it is; for Canvas, "
                             "write user_id and submitted_at from its submissions API. Times without a zone are "
                             "this machine's local time. It wins over any time in the download.")


def run(args, course: Course) -> int:
    from autograder.grading.records.collect import collect

    results = collect(course, args.assignment, args.source, layout=args.layout, regexp=args.regexp,
                      times=args.times)
    for r in results:
        print(r.summary())
    collected = sum(bool(r.collected) for r in results)
    attention = [r for r in results if r.needs_attention]
    print(f"{count(collected, 'student')} collected, {len(attention)} with problems")
    untimed = [r for r in results if r.destination and r.handed_in is None]
    if untimed:
        print(unknown_times(untimed), file=sys.stderr)
    invalid = [f"{r.student_id} ({', '.join(r.invalid)})" for r in results if r.invalid]
    if invalid:
        print(f"collected, but not notebooks that can be graded: {', '.join(invalid)}; grading gives them 'invalid "
              "notebook': ask those students to hand in again", file=sys.stderr)
    if not collected:
        print(f"error: no notebook of {args.assignment} was collected from {args.source}: check that it is this "
              "assignment's download, and give its layout with --layout or --regexp (see --help)", file=sys.stderr)
        return 1
    if any(r.skipped_something for r in results):
        print("some files were not collected or need a look (lines above): fix the download or the roster and "
              "collect again; students without a usable notebook are graded 'invalid notebook'", file=sys.stderr)
        return 1
    return 0


def unknown_times(untimed) -> str:
    """What the instructor needs to know of submissions collected without a time (``untimed``: CollectResults)."""
    from autograder.grading.records.handed_in import WHAT_DOWNLOADS_CARRY

    late = [r.student_id for r in untimed if r.marked_late]
    why = WHAT_DOWNLOADS_CARRY.get(untimed[0].layout, "the download carries no submission times")
    text = f"no submission time for {count(len(untimed), 'student')} ({why}): "
    if late:
        text += (f"{', '.join(late)}, marked late by the LMS, count{'s' * (len(late) == 1)} as late by the least "
                 "the late policy counts (its first hour or day); the others count as on time")
    else:
        text += "they count as on time"
    return text + "; to weigh real lateness, give the times with --times CSV (see --help) and collect again"
