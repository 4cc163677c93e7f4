"""Judging a notebook: the referee, its judges, the examinee that answers them, the answer scan and the tamper guard."""
