"""``python -m autograder``: the instructor's command line (see ``autograder.cli``)."""

import sys

from autograder.cli import main

# Guarded: grading's worker processes import the main module again, and must not rerun the CLI.
if __name__ == "__main__":
    sys.exit(main())
