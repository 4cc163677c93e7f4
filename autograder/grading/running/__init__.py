"""Running a student's notebook safely: sandbox, limits, the forked processes, the referee, the tamper guard."""
