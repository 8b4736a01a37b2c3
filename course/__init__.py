"""The teacher's kit behind classroom.py: the steps of EXERCISES.md as data, a student copy, the grading.

    exercises.py  the steps (STEPS), a student copy without the answers, one step's checks run and read back
    gradebook.py  many submissions graded, each step in its own process under a time limit and a memory cap
    replay.py     the reference's calls recorded and replayed, so that each step is graded alone
    scenarios.py  the runs of the reference that record those calls
    hidden.py     the gradebook's checks: cases drawn fresh when it grades, judged in the teacher's process
    probe.py      the gradebook's child: a submission's functions called on the cases, what they return written down
    sandbox.py    the sandbox each hand-in runs in (bubblewrap), with limits around it
    no_sandbox.py running a hand-in without one, only when the teacher asks for it by name
    hints.json    each step's hints, base64-encoded so that a glance spoils nothing
    student_readme.md  what a student copy's README opens with
"""
