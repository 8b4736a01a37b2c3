"""tools/time_grading.py: a class of reference submissions graded through the gradebook, each with full marks.

Read tools/time_grading.py first. The time itself is a measurement (the README's grading-time part); these
tests check what it times: folders holding the reference's files, graded, every check passed.
"""

from conftest import REPO_ROOT

from course import exercises
from tools import time_grading


def test_a_reference_submission_holds_the_repositorys_own_versions_of_the_files_a_student_writes(tmp_path):
    [submission] = time_grading.reference_submissions(tmp_path, 1)
    assert sorted(p.relative_to(submission).as_posix() for p in submission.rglob("*.py")) == sorted(exercises.STUDENT_FILES)
    for name in exercises.STUDENT_FILES:
        assert (submission / name).read_bytes() == (REPO_ROOT / name).read_bytes()


def test_the_reference_scores_full_marks_and_the_time_is_measured():
    seconds, rows = time_grading.time_grading(2, jobs=2, steps=(1, 7))
    assert seconds > 0 and len(rows) == 3 and time_grading.full_marks(rows)


def test_full_marks_sees_a_submission_that_lost_a_point():
    header = ["submission", "step1 (of 3)", "step11 rubric", "step12 rubric", "total", "of", "reasons"]
    assert time_grading.full_marks([header, ["a", 3, "", "", 3, 3, ""]])
    assert not time_grading.full_marks([header, ["a", 3, "", "", 3, 3, ""], ["b", 2, "", "", 2, 3, "step 1: ..."]])
