"""The gradebook grades submissions that loop, crash, flood, hog memory, spawn, edit their tests, forge a report or
replay the shipped answers, and every score is one the work earned.

Read course/gradebook.py and course/hidden.py first (the limits; why only the learner's files are taken from a
submission; why the checks are drawn fresh and judged in the gradebook's own process).

Hostile submissions of `sampling.py`, graded on steps 7 (`_accept`) and 8 (`_residual`), each misbehaving in
one or two steps: every misbehaving step scores 0 with a reason that says what happened, every other step is
graded as usual, and nothing a submission started is left running. The limits are small to keep the tests
short: 8 seconds a step, 1 GB of memory.
"""

import csv
import ctypes
import os
import sys

import pytest

from course import gradebook
from conftest import REPO_ROOT

REFERENCE = (REPO_ROOT / "sampling.py").read_text(encoding="utf-8")
ACCEPT_BODY = '''    u = rng.random()  # u ~ U[0, 1)
    return bool(u < q_row[token] / p_row[token]), u  # u < q/p has probability min(1, q/p)
'''
RESIDUAL_BODY = '''    residual = np.maximum(q_row - p_row, 0.0)  # [n_vocab]
    total = residual.sum()
    return residual / total if total > 0 else q_row
'''
LOOP = "    while True:\n        pass\n"
SPAWN = '''    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    open({pid_file!r}, "w").write(str(child.pid))
    while True:
        pass
'''


def submission(folder, accept=ACCEPT_BODY, residual=RESIDUAL_BODY, files=None):
    """A folder with a sampling.py whose _accept and _residual have the given bodies (and other files)."""
    assert ACCEPT_BODY in REFERENCE and RESIDUAL_BODY in REFERENCE, "sampling.py changed: update this test"
    folder.mkdir()
    (folder / "sampling.py").write_text(REFERENCE.replace(ACCEPT_BODY, accept).replace(RESIDUAL_BODY, residual),
                                        encoding="utf-8")
    for path, text in (files or {}).items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    return folder


def running(pid):
    """Whether process pid still runs (a zombie, killed but not yet reaped by its new parent, does not)."""
    status = f"/proc/{pid}/stat"
    if os.path.exists("/proc"):
        return os.path.exists(status) and open(status).read().split(")")[-1].split()[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_each_misbehaving_step_scores_0_with_its_reason_and_the_rest_is_graded(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    submissions = [
        submission(tmp_path / "loops", accept=LOOP),
        submission(tmp_path / "crashes_and_floods", accept="    import os\n    os._exit(3)\n",
                   residual="    while True:\n        print('x' * 10000)\n"),
        submission(tmp_path / "edits_its_tests", residual="    return q_row\n", files={
            "tests/test_accept_and_residual.py": "import pytest\n\n@pytest.mark.step8\ndef test_fine():\n    pass\n",
            "tests/conftest.py": "", "classroom.py": "raise SystemExit(0)\n", "course/exercises.py": "GRADED = ()\n"}),
        submission(tmp_path / "spawns_and_hogs", accept=SPAWN.format(pid_file=str(pid_file)),
                   residual="    return np.ones(4 * 1024**3 // 8)\n"),
    ]
    rows = gradebook.gradebook(submissions, tmp_path / "grades.csv", steps=(7, 8), time_limit=8,
                               memory_bytes=1024**3, jobs=2)
    assert rows[0] == ["submission", "step7 (of 1)", "step8 (of 1)", "step11 rubric", "step12 rubric", "total", "of",
                       "reasons"]
    scores = {os.path.basename(row[0]): row[1:3] + row[5:7] for row in rows[1:]}
    assert scores == {"loops": [0, 1, 1, 2], "crashes_and_floods": [0, 0, 0, 2], "edits_its_tests": [1, 0, 1, 2],
                      "spawns_and_hogs": [0, 0, 0, 2]}
    reasons = {os.path.basename(row[0]): row[7] for row in rows[1:]}
    assert reasons["loops"] == "step 7: _accept on fresh rows and seeds: ran past its time limit of 8 s"
    assert "step 7: _accept on fresh rows and seeds: the run ended with exit code 3" in reasons["crashes_and_floods"]
    assert "step 8: _residual of fresh rows: printed more than 1024 kB" in reasons["crashes_and_floods"]
    assert reasons["edits_its_tests"].startswith("step 8: _residual of fresh rows: case ")
    assert "step 7: _accept on fresh rows and seeds: ran past its time limit" in reasons["spawns_and_hogs"]
    assert "MemoryError" in reasons["spawns_and_hogs"]
    assert pid_file.exists() and not running(int(pid_file.read_text())), "the looping grandchild was left running"
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as written:
        assert [row[:3] + row[5:7] for row in csv.reader(written)][1:] == [
            [str(s)] + [str(v) for v in scores[os.path.basename(str(s))]] for s in submissions]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".grades.csv")] == []  # no temporary file left


def test_a_submission_that_is_not_a_folder_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        gradebook.gradebook([tmp_path / "missing"], tmp_path / "grades.csv", steps=(7,))
    assert not (tmp_path / "grades.csv").exists()


@pytest.mark.skipif(sys.maxsize < 2**32, reason="the sizes below are those of a 64-bit Windows")
def test_the_job_object_limits_have_the_layout_of_windows_own_structures():
    """Windows reads the bytes as JOBOBJECT_BASIC_LIMIT_INFORMATION (64 bytes on x64) inside
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION (144 bytes), the memory limit for the whole job at offset 120."""
    assert ctypes.sizeof(gradebook.BasicLimits) == 64 and ctypes.sizeof(gradebook.ExtendedLimits) == 144
    assert gradebook.ExtendedLimits.JobMemoryLimit.offset == 120
