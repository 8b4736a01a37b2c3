"""How long a class takes to grade: N copies of the reference, every graded step, through the gradebook (a tool).

Read course/gradebook.py first (each step of each submission in a child process under limits, `jobs`
submissions at a time). This times what a teacher waits for after `python classroom.py gradebook ...`: N
submission folders, each holding this repository's own versions of the files a student writes (the reference,
so every check must pass), graded on every graded step, and checks that each scored full marks.

    python tools/time_grading.py                        # 40 submissions, --jobs = the cores
    python tools/time_grading.py --submissions 8 --jobs 1

Step 5 reads OpenAI's tokenizer files from $GPT2_MODELS_DIR/124M or models/124M (`python classroom.py
tokenizer` fetches them). The figures command writes its table into the README (`python
tools/make_readme_figures.py --only grading-time`); the time is a whole run's, on whatever else the machine does.
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's root: python tools/...

from command_line.flags import as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import run_script  # noqa: E402
from course import exercises, gradebook  # noqa: E402
from tools.machine import load_average  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def reference_submissions(folder, n):
    """n submission folders in `folder`, each with the repository's own STUDENT_FILES: the reference's work."""
    paths = []
    for i in range(n):
        submission = Path(folder) / f"reference-{i + 1:03d}"
        for name in exercises.STUDENT_FILES:
            (submission / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, submission / name)
        paths.append(submission)
    return paths


def time_grading(n=40, jobs=None, steps=exercises.GRADED):
    """(seconds, the gradebook's rows): n reference submissions graded on `steps`, `jobs` at a time."""
    with tempfile.TemporaryDirectory(prefix="time-grading-") as folder:
        submissions = reference_submissions(folder, n)
        start = time.perf_counter()
        rows = gradebook.gradebook(submissions, Path(folder) / "grades.csv", steps, jobs=jobs)
        seconds = time.perf_counter() - start
    return seconds, rows


def full_marks(rows):
    """Whether every submission's total is its maximum (the columns "total" and "of" of the gradebook's rows)."""
    total, maximum = rows[0].index("total"), rows[0].index("of")
    return all(row[total] == row[maximum] for row in rows[1:])


def grading_table(n=40, jobs=None):
    """The README's part: the time to grade n reference submissions, and that each got full marks."""
    jobs = jobs or os.cpu_count() or 1
    load = load_average()
    seconds, rows = time_grading(n, jobs)
    if not full_marks(rows):
        raise SystemExit(f"the reference lost points in the gradebook: {[row[-1] for row in rows[1:]][:3]}")
    return ["| submissions | steps each | jobs | wall time | each | all full marks | load average at the start |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            f"| {n} | {len(exercises.GRADED)} | {jobs} | {seconds / 60:.1f} min | {seconds / n:.1f} s | yes | {load:.2f} |"]


def main(submissions=40, jobs=None):
    """Grade copies of the reference as a class's hand-ins and print the time.

    Args:
        submissions: how many copies of the reference are graded.
        jobs: how many are graded at a time (default: the cores).
    """
    with errors_as_one_line():
        n = as_whole_number(submissions, "--submissions", 1, 10_000)
        jobs = None if jobs is None else as_whole_number(jobs, "--jobs", 1, 256)
        table = grading_table(n, jobs)  # the gradebook's own refusals (step 5 without its files, ...) are one line
    print("\n".join(table))


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/time_grading.py")
