"""The gradebook side of ``grade``, one module per job (``grade._Grader`` puts them in order).

- ``assignment``: what every job knows of the assignment being graded: nbgrader's settings, the
  gradebook, the folders, the deadline, the notebooks and their points; which students submitted;
- ``resume``: what an earlier run graded: the marker beside each autograded submission, why an
  earlier grade no longer holds, and a student's score read back from the gradebook;
- ``intake``: a submission made ready to run: registered in the gradebook, each notebook read safely,
  prepared as ``check`` prepares it, with nbgrader's bookkeeping;
- ``scoring``: an executed notebook scored: its outputs put back, its points from its verdicts, the
  graded notebook written, and what it adds to the student's row.

All of it runs in the coordinating process only, the one process that writes to the gradebook.
"""
