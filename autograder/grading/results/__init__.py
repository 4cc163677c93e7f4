"""What comes out of grading: feedback pages, the class report, LMS exports, similar pairs, terminal tables."""
