"""python -m autograder.authoring.book (the same as python -m autograder book)."""

import sys

from autograder.authoring.book import main

sys.exit(main())
