"""The instructor's grading: from the LMS download to grades, feedback and a report.

- ``collect``, ``roster``: submissions and the class list in;
- ``grade``: the pipeline (nbgrader's own steps around a parallel executor), with
  ``executor`` and ``warm`` (the forked, pre-warmed processes cells run in), ``kernel`` (set-up of
  every grading kernel), ``tamper`` (the tamper guard) and ``restore`` (tests put back);
- ``feedback``, ``report``: what goes back to students and what the instructor reads;
- ``selfcheck``: ``check NOTEBOOK``, one notebook graded locally the same way;
- ``bench``: this grader against sequential ``nbgrader autograde``; ``demo``: the demo class.

Grading uses ``autograder.authoring.course`` for the course's folders and settings.
"""
