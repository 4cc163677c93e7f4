"""The course author's tools: where the course lives and how nbgrader is run on it.

- ``course``: the course's folders, its nbgrader settings (``nbgrader_config.py``) and
  ``release`` (solutions/ -> course/);
- ``validation``: solutions earn full marks, the blank release none;
- ``book``: the rendered course for self-study;
- ``record_timings``: records assignment 07's reference timings, of the custom Functions in
  ``timed_functions`` (exercise answers: the student distribution does not ship them);
- ``kernel_timings``: records assignment 10's solution kernels on a GPU (run from its notebook's cells).

Authoring may use the student's library; it never imports the grader.
"""
