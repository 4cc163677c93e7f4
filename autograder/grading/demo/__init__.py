"""The demo class: made-up submissions of assignment 01 for trying the grading workflow."""
