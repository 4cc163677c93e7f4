"""The class's records: roster, collected submissions, deadlines, grades.csv, what a grade depends on."""
