"""The teacher's kit behind classroom.py: the steps of EXERCISES.md as data, a student copy, the grading.

    exercises.py  the steps (STEPS), a student copy without the answers, one step's checks run and read back
    gradebook.py  many submissions graded, each step in its own process under a time limit and a memory cap
    hints.json    each step's hints, base64-encoded so that a glance spoils nothing
"""
