"""Due dates, per-student extensions and late penalties.

``python -m autograder deadline ASSIGNMENT --due ... --extend ben=2d --penalty 10 --per day`` keeps
an assignment's policy in ``grading/deadlines.json``; ``grade`` puts it into nbgrader's gradebook
(the assignment's ``duedate``, each submission's ``extension``) and scores lateness through
nbgrader's own hook, ``AssignLatePenalties`` with a ``LateSubmissionPlugin``: ``LatePenalty`` below
takes a percentage of the score per hour or day started, up to a cap. How late a submission is
comes from its ``timestamp.txt`` (written by ``collect`` from the LMS's record), as in nbgrader. A
submission the LMS marked late without saying when (Canvas's download) counts as late by the least
the policy counts: handed in one second after its deadline and grace (``submission_time``), and
described as "marked late, time unknown".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Bool, Float
from traitlets.config import Config

from autograder.course import Course, CourseError
from autograder.grading.records.handed_in import marked_late

FILE = "deadlines.json"
TIME_UNKNOWN = "marked late, time unknown"  # how late, for a submission the LMS marked late without a time
# How late, for a submission whose download records neither a time nor a late mark (Moodle's download without its
# grading worksheet, student folders without timestamp.txt): unknown, never guessed, and no penalty taken.
TIME_NOT_RECORDED = "time unknown (the download records none: collect --times)"
PERIODS = {"hour": 3600.0, "day": 86400.0}


@dataclass
class Policy:
    """One assignment's deadline and late penalty (no due date: nothing is ever late)."""

    due: str | None = None                                       # ISO 8601, UTC
    extensions: dict[str, float] = field(default_factory=dict)   # student -> hours
    percent: float = 0.0        # of the score, per period started after the due date (and grace)
    per: str = "hour"           # "hour" or "day"
    max_percent: float = 100.0  # the penalty never exceeds this share of the score
    grace_minutes: float = 0.0
    zero: bool = False          # nbgrader's 'zero' method: any late submission scores 0

    @property
    def due_date(self) -> datetime | None:
        return datetime.fromisoformat(self.due) if self.due else None

    def deadline_for(self, student: str) -> datetime | None:
        due = self.due_date
        return due + timedelta(hours=self.extensions.get(student, 0.0)) if due else None

    def key(self, student: str) -> str:
        """What decides this student's lateness and penalty, for the grading marker."""
        return json.dumps([self.due, self.extensions.get(student, 0.0), self.percent, self.per,
                           self.max_percent, self.grace_minutes, self.zero])

    def describe(self) -> str:
        if not self.due:
            return "no due date"
        text = f"due {self.due_date:%Y-%m-%d %H:%M} UTC"
        if self.zero:
            text += "; late work scores 0"
        elif self.percent:
            text += (f"; late penalty {self.percent:g}% of the score per {self.per} started"
                     f"{f', at most {self.max_percent:g}%' if self.max_percent < 100 else ''}")
        else:
            text += "; late work is marked, without a penalty"
        if self.grace_minutes:
            text += f", after {self.grace_minutes:g} minutes' grace"
        if self.extensions:
            text += "; extensions: " + ", ".join(f"{s} +{_duration(h * 3600)}" for s, h in sorted(self.extensions.items()))
        return text


def load(course: Course, assignment: str) -> Policy:
    path = course.grading / FILE
    try:
        saved = json.loads(path.read_text(encoding="utf-8")).get(assignment) if path.exists() else None
    except ValueError as error:
        raise CourseError(f"{path} is not valid JSON ({error}): fix or delete it") from None
    return Policy(**saved) if saved else Policy()


def is_managed(course: Course, assignment: str) -> bool:
    """Whether ``deadline`` was ever used for this assignment (else nbgrader's own due date is left alone)."""
    path = course.grading / FILE
    try:
        return path.exists() and assignment in json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return False


def save(course: Course, assignment: str, policy: Policy) -> None:
    path = course.grading / FILE
    everything = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    everything[assignment] = asdict(policy)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(everything, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)


def parse_due(text: str) -> str:
    """A due date as an instructor types it ('2026-03-15 23:59', with or without a zone) in ISO UTC.

    Without a time zone it is this machine's local time.
    """
    from dateutil.parser import parse

    try:
        moment = parse(text)
    except (ValueError, OverflowError):
        raise CourseError(f"cannot read the due date {text!r}: write it like '2026-03-15 23:59' "
                          "or '2026-03-15T23:59:00+01:00'") from None
    return moment.astimezone(timezone.utc).isoformat()


def parse_extension(text: str) -> tuple[str, float]:
    """``STUDENT=DURATION`` (``ben=2d``, ``ada=36h``, ``eli=90m``, ``fay=0`` to remove) -> (student, hours)."""
    found = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\d+(?:\.\d+)?)\s*([dhm]?)\s*", text)
    if not found:
        raise CourseError(f"cannot read the extension {text!r}: write STUDENT=DURATION, e.g. ben=2d, ada=36h, eli=90m")
    student, amount, unit = found.groups()
    return student, float(amount) * {"d": 24.0, "h": 1.0, "m": 1 / 60, "": 1.0}[unit]


class LatePenalty(LateSubmissionPlugin):
    """nbgrader's late-submission hook: a percentage of the score per hour or day started, capped."""

    percent = Float(0.0, help="percent of the score taken per period started after the due date").tag(config=True)
    period_seconds = Float(3600.0, help="the period: 3600 for per hour, 86400 for per day").tag(config=True)
    max_percent = Float(100.0, help="the largest share of the score taken").tag(config=True)
    grace_seconds = Float(0.0, help="lateness forgiven before the penalty starts").tag(config=True)
    zero = Bool(False, help="any late submission scores 0 (nbgrader's 'zero' method)").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        return penalty(score, total_seconds_late, self.percent, self.period_seconds, self.max_percent,
                       self.grace_seconds, self.zero)


def penalty(score: float, seconds_late: float, percent: float, period_seconds: float, max_percent: float,
            grace_seconds: float, zero: bool) -> float | None:
    """The points taken from ``score`` for ``seconds_late`` (None: no penalty)."""
    late = seconds_late - grace_seconds
    if late <= 0:
        return None
    if zero:
        return score
    if not percent:
        return None
    periods = math.ceil(late / period_seconds)
    return score * min(max_percent, percent * periods) / 100


def nbgrader_config(policy: Policy) -> Config:
    """Settings that make nbgrader's AssignLatePenalties use this policy."""
    config = Config()
    config.AssignLatePenalties.plugin_class = LatePenalty
    config.LatePenalty.percent = float(policy.percent)
    config.LatePenalty.period_seconds = PERIODS[policy.per]
    config.LatePenalty.max_percent = float(policy.max_percent)
    config.LatePenalty.grace_seconds = float(policy.grace_minutes) * 60
    config.LatePenalty.zero = bool(policy.zero)
    return config


def record_due_date(gradebook, assignment: str, policy: Policy) -> None:
    """The due date into nbgrader's gradebook (naive UTC, as nbgrader stores it)."""
    due = policy.due_date
    gradebook.update_or_create_assignment(assignment, duedate=due.astimezone(timezone.utc).replace(tzinfo=None)
                                          if due else None)


def record_extension(gradebook, assignment: str, student: str, policy: Policy) -> None:
    """The student's extension into their submission in nbgrader's gradebook (none: removed)."""
    gradebook.grant_extension(assignment, student, hours=policy.extensions.get(student, 0.0))


def submission_time(folder: Path, policy: Policy, student: str, recorded: datetime | None) -> datetime | None:
    """The submission time nbgrader gets (naive UTC): the recorded one (``timestamp.txt``), else, for a
    submission in ``folder`` the LMS marked late without a time, one second past the student's deadline
    and grace: late by the least the policy counts. None: on time (no time, and not marked late)."""
    deadline = policy.deadline_for(student)
    if recorded or deadline is None or not _late_without_time(folder):
        return recorded
    return (deadline + timedelta(minutes=policy.grace_minutes, seconds=1)).astimezone(timezone.utc).replace(tzinfo=None)


def lateness(folder: Path, seconds: float, due: bool = True) -> str:
    """How late the submission in ``folder`` is, for grades.csv: ``describe_lateness``, TIME_UNKNOWN, or, when
    there is a deadline (``due``) and the LMS recorded neither a time nor a late mark, TIME_NOT_RECORDED."""
    if seconds > 0 and _late_without_time(folder):
        return TIME_UNKNOWN
    if due and not (folder / "timestamp.txt").exists() and marked_late(folder) is None:
        return TIME_NOT_RECORDED
    return describe_lateness(seconds)


def _late_without_time(folder: Path) -> bool:
    return not (folder / "timestamp.txt").exists() and bool(marked_late(folder))


def describe_lateness(seconds: float) -> str:
    """'' when on time, else how late, e.g. '1 day 2 h', '3 h 5 min', '40 min'."""
    return _duration(seconds) if seconds > 0 else ""


def _duration(seconds: float) -> str:
    minutes = math.ceil(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} day{'s' * (days != 1)}" if days else "", f"{hours} h" if hours else "",
             f"{minutes} min" if minutes and not days else ""]
    return " ".join(p for p in parts if p) or "0 min"
