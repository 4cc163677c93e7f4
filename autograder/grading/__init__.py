"""The instructor's grading: from the LMS download to grades, feedback and a report.

Three rooms, imported only downwards (``running`` <- ``records`` <- ``results`` <- this level):

- ``running``: running a student's notebook safely: ``sandbox``, ``confinement`` (limits, the
  sandbox mode), ``executor`` (a fresh process per notebook, forked from the ``warm`` one) with
  its ``child`` and message ``protocol``, the ``referee`` (its ``judges``, the student's side
  ``answer``, values on the ``wire``, and ``referee_process``) that decides test cells where student
  code cannot reach, the ``tamper`` guard, ``kernel`` (set-up of every
  grading kernel) and ``preparation`` (the cells that run, tests put back: shared by ``grade`` and
  ``check``);
- ``records``: the class's records: ``roster``, ``collect`` and ``lms`` (downloads in),
  ``submissions`` (a submitted file read safely), ``deadlines``, ``grades`` (grades.csv), ``scores``
  (a test cell's points in the gradebook, from its verdict),
  ``fingerprint`` (what a grade depends on) and ``speed`` (nbgrader's gradebook steps made cheap);
- ``results``: what comes out: ``feedback``, ``report``, ``export``, ``similarity`` and ``terminal``
  (tables and progress bars);
- here: ``grade`` (the pipeline: nbgrader's own steps around the parallel executor; its gradebook side's
  jobs in ``grader``: the ``assignment``, ``resume``, ``intake`` and ``scoring``), ``selfcheck``
  (``check NOTEBOOK``), ``bench`` (against sequential ``nbgrader autograde``) and ``demo``.

Every step finds the course through ``autograder.course``.
"""
