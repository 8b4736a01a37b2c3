"""The gradebook grades submissions that loop, crash, flood, hog memory, spawn, edit their tests, forge a report or
replay the shipped answers, and every score is one the work earned.

Read course/gradebook.py and course/hidden.py first (the limits; why only the learner's files are taken from a
submission; why the checks are drawn fresh and judged in the gradebook's own process).

Hostile submissions of `sampling.py`, graded on steps 7 (`_accept`) and 8 (`_residual`), each misbehaving in
one or two steps: every misbehaving step scores 0 with a reason that says what happened, every other step is
graded as usual. The limits are small to keep the tests short: 8 seconds a step, 1 GB of memory. What the
sandbox hides and stops (the teacher's clone, other hand-ins, processes left behind) is tests/test_sandbox.py's.
"""

import csv
import ctypes
import os
import sys

import pytest

from course import exercises
from course import gradebook
from course import no_sandbox
from course import sandbox
from conftest import REPO_ROOT

pytestmark = pytest.mark.usefixtures("bubblewrap")  # every hand-in is graded in bubblewrap's sandbox

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
    subprocess.Popen([sys.executable, "-c", "while True: pass"])
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


def test_each_misbehaving_step_scores_0_with_its_reason_and_the_rest_is_graded(tmp_path):
    submissions = [
        submission(tmp_path / "loops", accept=LOOP),
        submission(tmp_path / "crashes_and_floods", accept="    import os\n    os._exit(3)\n",
                   residual="    while True:\n        print('x' * 10000)\n"),
        submission(tmp_path / "edits_its_tests", residual="    return q_row\n", files={
            "tests/test_accept_and_residual.py": "import pytest\n\n@pytest.mark.step8\ndef test_fine():\n    pass\n",
            "tests/conftest.py": "", "classroom.py": "raise SystemExit(0)\n", "course/exercises.py": "GRADED = ()\n"}),
        submission(tmp_path / "spawns_and_hogs", accept=SPAWN,
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
    assert reasons["loops"] == ("step 7: _accept on fresh rows and seeds: case 1 of 40: TimeUp: ran past its share "
                                "of the step's time limit of 8 s")
    assert "step 7: _accept on fresh rows and seeds: the run ended with exit code 3" in reasons["crashes_and_floods"]
    assert "step 8: _residual of fresh rows: printed more than 1024 kB" in reasons["crashes_and_floods"]
    assert reasons["edits_its_tests"].startswith("warning: left out classroom.py (a name of the project's own: "
                                                 "rename it); course/, tests/ (a folder: hand in modules as single")
    assert "; step 8: _residual of fresh rows: case " in reasons["edits_its_tests"]  # its own tests were not run
    assert "step 7: _accept on fresh rows and seeds: case 1 of 40: PermissionError: [Errno 1] Operation not " \
           "permitted" in reasons["spawns_and_hogs"]  # the sandbox starts no process
    assert "MemoryError" in reasons["spawns_and_hogs"]
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as written:
        assert [row[:3] + row[5:7] for row in csv.reader(written)][1:] == [
            [str(s)] + [str(v) for v in scores[os.path.basename(str(s))]] for s in submissions]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".grades.csv")] == []  # no temporary file left


def test_a_check_that_never_ends_costs_only_its_own_points_the_steps_later_checks_run_in_their_share(tmp_path):
    """Step 2 has three checks, attention's two, then causal_mask's. An attention that never returns fails its
    two, each when its share of the step's time is spent (course/probe.check_deadlines: here 0.8 x 6 s / 3), and
    the right causal_mask after them earns its point: the whole step once scored 0, "ran past its time limit"."""
    looping = GPT2 + "\n\ndef attention(q, k, v, mask):  # never returns\n" + LOOP
    rows = gradebook.gradebook([submission(tmp_path / "loops", files={"gpt2.py": looping})], tmp_path / "grades.csv",
                               steps=(2,), time_limit=6)
    assert rows[1][1] == 1, rows[1]
    reasons = rows[1][-1].split("; ")
    late = "TimeUp: ran past its share of the step's time limit of 6 s"
    assert [reason.startswith("step 2: attention ") and reason.endswith(late) for reason in reasons] == [True, True]


def test_each_check_may_run_until_only_the_later_checks_equal_shares_are_left():
    """probe.check_deadlines' worked example: 3 checks and 9 s for them (CHECKS_SHARE of the step's limit) end
    by 3, 6 and 9 s after the start; the reference's run (no time limit) has no deadlines."""
    from course import probe

    request = {"checks": [{}, {}, {}], "time_limit": 9 / probe.CHECKS_SHARE}
    assert probe.check_deadlines(request, start=100.0) == pytest.approx([103.0, 106.0, 109.0])
    assert probe.check_deadlines({"checks": [{}, {}]}) == [None, None]


def test_modules_a_hand_in_holds_that_are_not_read_are_named_in_a_warning(tmp_path):
    """Only single .py files at the top, named unlike the project's, are read beside the learner's files: a
    module named checks.py (the project's own: the copy's is used) and a package folder are left out, and the
    warning says so and why (it was silent, and the learner's import failed or found the project's module)."""
    hand_in = submission(tmp_path / "alice", files={"checks.py": "", "mypkg/__init__.py": "", "my_helpers.py": "",
                                                    "notes/todo.txt": ""})
    used = {"checks", "checks.py", "gpt2", "gpt2.py"}
    files, refusal, warning = gradebook.handin_files(hand_in, used)
    assert sorted(files) == ["my_helpers.py", "sampling.py"] and refusal == ""
    assert warning == ("warning: left out checks.py (a name of the project's own: rename it); mypkg/ (a folder: "
                       "hand in modules as single files at the top)")
    assert gradebook.handin_files(submission(tmp_path / "bob"), used)[2] == ""


def test_a_sandboxed_reason_names_the_learners_own_folder_and_says_what_filled_the_disk():
    """`grade N` in the sandbox: a reason names the learner's folder, not /handin, and a full disk is the sandbox's
    /tmp, which pytest fills with what a check prints (a learner's prints once ended in a bare Errno 28)."""
    reason = gradebook.in_the_learners_words("skipped: needs encoder.json in /handin/models/124M", "/home/ada/copy")
    assert reason == "skipped: needs encoder.json in /home/ada/copy/models/124M"
    full = gradebook.in_the_learners_words("OSError: [Errno 28] No space left on device", "/home/ada/copy")
    assert full.endswith("(the sandbox's /tmp, 64 MB, was full: it holds what the code prints during a check; print "
                         "less)")


def test_a_submission_that_is_not_a_folder_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        gradebook.gradebook([tmp_path / "missing"], tmp_path / "grades.csv", steps=(7,))
    (tmp_path / "alice.zip").write_bytes(b"PK")  # as a student copy's README allows a learner to hand in
    with pytest.raises(ValueError, match=r"the learner's files \(unpack a ZIP into one first\)$"):
        gradebook.gradebook([tmp_path / "alice.zip"], tmp_path / "grades.csv", steps=(7,))
    assert not (tmp_path / "grades.csv").exists()


@pytest.mark.skipif(sys.maxsize < 2**32, reason="the sizes below are those of a 64-bit Windows")
def test_the_job_object_limits_have_the_layout_of_windows_own_structures():
    """Windows reads the bytes as JOBOBJECT_BASIC_LIMIT_INFORMATION (64 bytes on x64) inside
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION (144 bytes), the memory limit for the whole job at offset 120."""
    assert ctypes.sizeof(no_sandbox.BasicLimits) == 64 and ctypes.sizeof(no_sandbox.ExtendedLimits) == 144
    assert no_sandbox.ExtendedLimits.JobMemoryLimit.offset == 120


GPT2 = (REPO_ROOT / "gpt2.py").read_text(encoding="utf-8")
FORGER = '''
import json, os, sys
for argument in sys.argv:  # pytest's report (the old gradebook read it), then the probe's answers file
    if argument.startswith("--junitxml="):
        with open(argument.split("=", 1)[1], "w") as report:
            report.write('<testsuite><testcase name="test_forged"/></testsuite>')
        os._exit(0)
if os.path.isdir("/answers"):  # the sandbox's answers folder (the probe's command line names it no more)
    with open("/answers/answers.json", "w") as answers:
        json.dump([[{"out": 0.5}] * 100] * 3, answers)
    os._exit(0)
'''
REPLAYED_MHA = '''

def mha(x, c_attn, c_proj, n_head, kv, n_past, mask):  # the shipped calls, replayed: no work of its own
    import sys
    sys.path.insert(0, "tests")
    from step_fixtures import load, mha_stand_in
    return mha_stand_in(load()["forward"]["mha"])(x, c_attn, c_proj, n_head, kv, n_past, mask)
'''
NAIVE_SOFTMAX = '''

def attention(q, k, v, mask):  # right, but exp overflows: the max is not subtracted
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1])) + mask
    weights = np.exp(scores)
    return (weights / weights.sum(-1, keepdims=True)) @ v
'''


def test_every_score_is_one_the_work_earned_forged_reports_and_replayed_answers_score_0(tmp_path):
    """Graded on steps 2, 3 and 8: the reference earns every point; a submission whose sampling.py writes a
    passing report (or answers file) and exits 0 when imported earns none; an mha that replays the shipped
    calls earns no point of step 3 (the cases are drawn fresh); an attention without the max subtracted earns
    step 2's other two points, not the one at scores near 200; a sampling.py that imports a module of its own
    is graded as it ran for the learner; files handed in one folder too deep earn a warning that names it."""
    reference = submission(tmp_path / "reference", files={"gpt2.py": GPT2})
    forger = submission(tmp_path / "forger", files={"gpt2.py": GPT2 + FORGER})
    (forger / "sampling.py").write_text(FORGER + REFERENCE, encoding="utf-8")
    replayer = submission(tmp_path / "replayer", files={"gpt2.py": GPT2 + REPLAYED_MHA})
    naive = submission(tmp_path / "naive", files={"gpt2.py": GPT2 + NAIVE_SOFTMAX})
    helped = submission(tmp_path / "helped", residual="    return my_helpers.residual(q_row, p_row)\n",
                        files={"my_helpers.py": "import numpy as np\n\n\ndef residual(q_row, p_row):\n" + RESIDUAL_BODY})
    (helped / "sampling.py").write_text("import my_helpers\n" + (helped / "sampling.py").read_text(), encoding="utf-8")
    nested = tmp_path / "nested"
    nested.mkdir()
    submission(nested / "homework")
    feedback = tmp_path / "feedback"
    rows = gradebook.gradebook([reference, forger, replayer, naive, helped, nested], tmp_path / "grades.csv",
                               steps=(2, 3, 8), time_limit=30, jobs=2, feedback=feedback)
    assert rows[0][:4] == ["submission", "step2 (of 3)", "step3 (of 1)", "step8 (of 1)"]
    scores = {os.path.basename(row[0]): row[1:4] + row[6:8] for row in rows[1:]}
    assert scores == {"reference": [3, 1, 1, 5, 5], "forger": [0, 0, 0, 0, 5], "replayer": [3, 0, 1, 4, 5],
                      "naive": [2, 1, 1, 4, 5], "helped": [0, 0, 1, 1, 5], "nested": [0, 0, 0, 0, 5]}
    reasons = {os.path.basename(row[0]): row[8] for row in rows[1:]}
    assert reasons["reference"] == ""
    assert "never passed" in reasons["replayer"] and reasons["replayer"].startswith("step 3: mha")
    assert reasons["naive"] == "step 2: attention at scores near 200 (a softmax safe from overflow): case 1 of 2: " \
                               "NaN where the reference is finite"
    assert reasons["nested"].startswith("warning: it holds none of") and "they are in homework" in reasons["nested"]
    files = sorted(path.name for path in feedback.iterdir() if path.name != exercises.FEEDBACK_LIST)
    assert files == ["001-reference.txt", "002-forger.txt", "003-replayer.txt", "004-naive.txt", "005-helped.txt",
                     "006-nested.txt"]
    naive_feedback = (feedback / "004-naive.txt").read_text(encoding="utf-8")
    assert naive_feedback.startswith(f"{naive}: 4 of 5 points\n\nstep 2: 2 of 3\n  pass  attention in a fresh")
    assert "  FAIL  attention at scores near 200" in naive_feedback


def test_a_csv_or_feedback_path_that_cannot_be_written_is_refused_before_any_grading(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook, "run_limited", lambda *a, **k: pytest.fail("a step was graded"))
    student = submission(tmp_path / "student")
    with pytest.raises(ValueError, match="does not exist"):
        gradebook.gradebook([student], tmp_path / "missing" / "grades.csv", steps=(7,))
    (tmp_path / "notes").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        gradebook.gradebook([student], tmp_path / "grades.csv", steps=(7,), feedback=tmp_path / "notes")


def test_step_5_stops_before_grading_with_one_line_when_the_tokenizer_files_are_nowhere(tmp_path, monkeypatch):
    """The README's teacher has models/124M in the clone and no GPT2_MODELS_DIR; without either, the gradebook
    says how to get the files instead of giving everyone a 0."""
    monkeypatch.delenv("GPT2_MODELS_DIR", raising=False)
    monkeypatch.setattr(gradebook, "run_limited", lambda *a, **k: pytest.fail("a step was graded"))
    with pytest.raises(ValueError, match=r"python classroom.py tokenizer"):
        gradebook.gradebook([submission(tmp_path / "student")], tmp_path / "grades.csv", steps=(5,), repo=tmp_path)


def test_step_5_finds_the_tokenizer_files_in_the_teachers_models_folder_and_the_reference_scores_1(tmp_path,
                                                                                                    monkeypatch):
    from conftest import models_dir
    from course import exercises

    source = models_dir() / "124M"
    if not (source / "encoder.json").is_file():
        pytest.skip(f"needs OpenAI's tokenizer files in {source}")
    teacher = exercises.write_student_copy(REPO_ROOT, tmp_path / "teacher", keep=exercises.GRADED)
    (teacher / "models" / "124M").mkdir(parents=True)
    for name in ("encoder.json", "vocab.bpe"):
        (teacher / "models" / "124M" / name).write_bytes((source / name).read_bytes())
    monkeypatch.delenv("GPT2_MODELS_DIR", raising=False)
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "encoder.py").write_bytes((REPO_ROOT / "encoder.py").read_bytes())
    rows = gradebook.gradebook([reference], tmp_path / "grades.csv", steps=(5,), repo=teacher)
    assert rows[1][1:2] == [1], rows[1]


def test_a_system_that_refuses_the_memory_cap_is_graded_unsandboxed_with_the_time_limit_and_a_note(tmp_path,
                                                                                                   monkeypatch, capsys):
    """macOS 12 and later reject setrlimit(RLIMIT_AS) (and have no bubblewrap: the teacher passed
    --run_untrusted_code_as_me): the cap fails in the child before Python starts (here made to fail the same
    way), which once ended the gradebook in a traceback."""
    resource = pytest.importorskip("resource")  # POSIX only: Windows caps memory with a Job Object

    def refuse(*args):
        raise ValueError("current limit exceeds maximum limit")

    monkeypatch.setattr(sandbox, "unavailable", lambda: "bubblewrap runs on Linux only (this is darwin)")
    monkeypatch.setattr(resource, "setrlimit", refuse)  # the forked child runs the parent's resource module
    rows = gradebook.gradebook([submission(tmp_path / "student")], tmp_path / "grades.csv", steps=(8,),
                               trust_unsandboxed=True)
    assert rows[1][1] == 1
    assert "memory is not capped, the time limit holds" in capsys.readouterr().err


@pytest.mark.parametrize("written, why", [(None, "it wrote no answers"), ("[" * 100000, "could not be read"),
                                          ('[[{"out": {"dtype": "O", "shape": [1], "base64": ""}}]]',
                                           "could not be read")])
def test_answers_a_child_wrote_are_read_as_numbers_or_refused_with_a_reason(written, why, tmp_path):
    """A child's answers file is the submission's to write: missing, nested past Python's recursion limit, or
    holding an array of objects, it is a ValueError that becomes the reason, never a crash or an object."""
    from course import hidden

    path = tmp_path / "answers.json"
    if written is not None:
        path.write_text(written)
    with pytest.raises(ValueError, match=why):
        hidden.read_answers(path)


@pytest.mark.parametrize("seed", range(6))
def test_a_residual_without_the_zero_total_guard_fails_step_8_whatever_the_seed(seed, monkeypatch):
    """Equal rows leave a residual of total 0 (the reference returns q). Drawn at random they came in 5 seeds
    of 40, so the gradebook once gave this slip the point in 5 runs of 6; step 8's check now always holds
    them. The reference passes on the same seeds (the check is not simply failing everything)."""
    from course import hidden
    from course import probe
    import numpy as np
    import sampling

    request = hidden.request(8, seed)
    expected = hidden.expected_answers(request)
    assert hidden.judge(request, expected, hidden.through_json(probe.observe(request)))[0].passed

    def unguarded(q_row, p_row):
        with np.errstate(invalid="ignore"):
            residual = np.maximum(q_row - p_row, 0.0)
            return residual / residual.sum()

    monkeypatch.setattr(sampling, "_residual", unguarded)
    judged = hidden.judge(request, expected, hidden.through_json(probe.observe(request)))[0]
    assert not judged.passed and "NaN where the reference is finite" in judged.reason
