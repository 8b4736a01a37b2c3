"""The teacher's kit does what it promises: its list, a student copy with no answer in it, steps graded alone, hints.

Read EXERCISES.md, course/exercises.py and classroom.py first. The gradebook's limits are tested in
tests/test_gradebook.py.

The strongest claim is independence: a learner's step N is graded on step N's functions alone. The test makes a
student copy (every exercise blank), fills in ONLY step N's reference bodies, and step N must pass; with none
filled in, every check of every step must fail (so the checks can fail at all), but for step 5's two checks of
the empty text, which has no word to merge.
"""

import ast
import base64
import json
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

import classroom
from command_line import scripts
from course import exercises
from loaders.download import DownloadError
from conftest import REPO_ROOT
from test_download import release, server  # noqa: F401 (fixtures: a local server with release files)
from test_main import TINY_HPARAMS, tiny_params, write_hf_folder

EVERY_STEP = " or ".join(f"step{n}" for n in exercises.GRADED)


def run_kit(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, str(cwd / "classroom.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=exercises.child_environment())


@pytest.fixture(scope="module")
def blank_copy(tmp_path_factory):
    return exercises.write_student_copy(REPO_ROOT, tmp_path_factory.mktemp("classroom") / "student")


def test_list_prints_a_tab_separated_line_per_step():
    run = run_kit("list")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 13 and lines[6] == "7\tThe acceptance rule\tsampling.py\t_accept"
    assert lines[10] == "11\tA draft made of the target's first layers\t\t"  # open: no file, no function
    assert [line.split("\t")[0] for line in lines] == [str(n) for n in range(1, 14)]


def test_the_overview_names_every_flag_of_every_command():
    """`python classroom.py --help` (the module docstring's overview) names each command's every flag: it once
    left out the gradebook's --memory_limit_mb and --run_untrusted_code_as_me."""
    import inspect

    overview = run_kit("--help").stdout
    for command in classroom.COMMANDS.values():
        for name, parameter in inspect.signature(command).parameters.items():
            if parameter.default is not inspect.Parameter.empty:
                assert f"--{name}" in overview, f"--{name} of {command.__name__} is not in the overview"


@pytest.mark.parametrize("script", ["classroom.py", "main.py"])
def test_help_whose_reader_has_gone_ends_quietly(script):
    """`python classroom.py --help | head -3`: the reader gone before the help is written ends the run with exit
    code 1 and no traceback (it was a BrokenPipeError's); main.py's help (fire's, written to stderr where stdout
    is no terminal) likewise ends without one."""
    run = subprocess.Popen([sys.executable, str(REPO_ROOT / script), "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=exercises.child_environment())
    run.stdout.close()  # the reader goes away first
    error = run.stderr.read()
    assert run.wait(timeout=60) in (0, 1) and b"Traceback" not in error and b"BrokenPipe" not in error, error
    assert error == b"" or script == "main.py"


def test_a_student_copy_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "homework.txt").write_text("mine")
    run = run_kit("student", str(tmp_path))
    assert run.returncode == 2 and run.stderr.startswith("error:") and "not an empty folder" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["homework.txt"]


def exercise_nodes(source, file):
    tree = ast.parse(source)
    return {name: exercises.find_function(tree, name) for s in exercises.STEPS
            for where, name in exercises.places(s) if where == file}


def test_every_exercise_raises_not_implemented_naming_its_step_and_keeps_its_signature_and_docstring(blank_copy):
    for file in exercises.STUDENT_FILES:
        reference = exercise_nodes((REPO_ROOT / file).read_text(encoding="utf-8"), file)
        student_source = (blank_copy / file).read_text(encoding="utf-8")
        for name, node in exercise_nodes(student_source, file).items():
            assert ast.dump(node.args) == ast.dump(reference[name].args), name
            assert ast.get_docstring(node) == ast.get_docstring(reference[name]), name
            raises = [n for n in ast.walk(node) if isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)]
            assert len(raises) == 1, name
            numbers = exercises.steps_of(file, name)
            assert all(f"{n}" in ast.unparse(raises[0]) for n in numbers), (name, ast.unparse(raises[0]))


def distinctive_lines(file):
    """The lines of `file`'s exercise bodies (without comments) that appear nowhere else in the file: the text
    of the answers. Short lines (`tokens.append(token)`) say nothing and are left out."""
    source = (REPO_ROOT / file).read_text(encoding="utf-8")
    lines = source.splitlines()
    inside = set()
    for first, last, _, _ in exercises.exercise_ranges(source, file):
        inside.update(range(first - 1, last))
    code = [lines[i].split("  #")[0].strip() for i in sorted(inside)]
    outside = "\n".join(line for i, line in enumerate(lines) if i not in inside)
    return {line for line in code if len(line) > 20 and not line.startswith("#") and line not in outside}


def test_no_answer_is_anywhere_in_a_student_copy_not_even_in_its_tests_fixtures_hints_or_history(blank_copy):
    answers = {line: file for file in exercises.STUDENT_FILES for line in distinctive_lines(file)}
    assert len(answers) > 60
    assert not (blank_copy / ".git").exists()
    assert not any((blank_copy / path).exists() for path in exercises.TEACHER_ONLY)
    texts = {}
    for path in blank_copy.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".txt", ".ini", ".json", ".cfg", ".toml"):
            texts[path] = path.read_text(encoding="utf-8", errors="replace")
    hints = json.loads((blank_copy / "course/hints.json").read_text(encoding="utf-8"))
    texts["the hints, decoded"] = "\n".join(base64.b64decode(h).decode() for step in hints.values() for h in step)
    found = [(str(where), answers[line], line) for where, text in texts.items() for line in answers if line in text]
    assert found == []


def test_the_answers_scan_finds_an_answer_left_in_a_test_file(blank_copy, tmp_path):
    """Its teeth: the same scan over the repository's own tests/verifiers.py finds _verify's lines."""
    answers = distinctive_lines("sampling.py")
    text = (REPO_ROOT / "sampling.py").read_text(encoding="utf-8")
    assert answers and all(line in text for line in answers)


def reads_the_tokenizer(number):
    """Whether step `number`'s checks read OpenAI's tokenizer files (step 5's, in tests/test_encoder.py): without
    them those checks skip in a student copy, so a test that counts passes and failures needs them as well."""
    return "tests/test_encoder.py" in exercises.step(number).tests


def test_with_nothing_written_every_check_of_every_step_fails(blank_copy, release_124M_dir):
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", EVERY_STEP, "-q", "-p", "no:cacheprovider",
                          "--timeout=60", f"--junitxml={blank_copy / 'report.xml'}"], cwd=blank_copy,
                         capture_output=True, text=True, env=exercises.child_environment(), timeout=600)
    checks = exercises.read_report(blank_copy / "report.xml")
    assert len(checks) >= 80, run.stdout[-2000:]
    empty_text = [name for name in (check.name for check in checks if check.passed) if name.endswith("[empty]")]
    assert [check.name for check in checks if check.passed] == empty_text  # "" has no word: bpe is never called
    assert len(empty_text) == 2
    assert all("NotImplementedError: Step" in check.reason for check in checks if not check.passed)


@pytest.mark.parametrize("number", exercises.GRADED)
def test_a_step_passes_with_only_its_own_functions_written_and_every_other_step_blank(number, tmp_path, request):
    if reads_the_tokenizer(number):
        request.getfixturevalue("release_124M_dir")  # skips (fails in CI) without the files, with their reason
    copy = exercises.write_student_copy(REPO_ROOT, tmp_path / "student", keep=(number,))
    checks = exercises.grade(number, copy)
    assert checks and [(c.name, c.reason) for c in checks if not c.passed] == []


def test_grade_prints_each_check_with_its_reason_and_exits_0_only_if_all_pass(blank_copy):
    failing = run_kit("grade", "7", "--repo", str(blank_copy))
    assert failing.returncode == 1
    assert "FAIL  test_accept_keeps_the_guess" in failing.stdout and "NotImplementedError: Step 7" in failing.stdout
    assert failing.stdout.splitlines()[-1] == "step 7: 0 of 1 checks passed"
    passing = run_kit("grade", "7")
    assert passing.returncode == 0 and passing.stdout.startswith("pass  test_accept_keeps_the_guess")


def test_in_a_copy_whose_own_files_do_not_parse_the_kit_still_lists_hints_and_grades_saying_where(tmp_path):
    """A learner mid-way through a step leaves gpt2.py and sampling.py not parsing. `list` and `hint` still run
    (they once ended in a traceback through the gradebook's imports of the checks' reference code); `grade 1`
    fails its check with the file, the line and the error; and a file the kit itself imports (encoder.py, for
    the download limits) is one line naming it, not a traceback."""
    copy = exercises.write_student_copy(REPO_ROOT, tmp_path / "student")
    for name in ("gpt2.py", "sampling.py"):
        with open(copy / name, "a", encoding="utf-8") as file:
            file.write("\ndef half_written(:\n")
    assert run_kit("list", cwd=copy).returncode == 0
    assert run_kit("hint", "1", "--level", "1", cwd=copy).stdout.startswith("Step 1, hint 1 of ")
    checks = exercises.grade(1, copy)
    line = len((copy / "gpt2.py").read_text(encoding="utf-8").splitlines())
    reason = f"collection failure: gpt2.py, line {line}: SyntaxError: invalid syntax"
    assert [check.reason for check in checks] == [reason]
    (copy / "encoder.py").write_text("def half_written(:\n", encoding="utf-8")
    run = run_kit("list", cwd=copy)
    assert run.returncode == 1 and run.stderr.strip() == ("error: encoder.py, line 1: invalid syntax; classroom.py "
                                                          "imports that file: fix it, then run this again")


def test_the_gradebook_run_in_a_student_copy_says_so_in_one_line(blank_copy, tmp_path):
    """The gradebook answers its checks with the code of the copy it runs from: in a student copy that code is
    blank, and the teacher is told to grade in their own clone (it was a NotImplementedError's traceback)."""
    hand_in = tmp_path / "alice"
    hand_in.mkdir()
    (hand_in / "gpt2.py").write_bytes((REPO_ROOT / "gpt2.py").read_bytes())
    run = run_kit("gradebook", str(hand_in), "--csv", str(tmp_path / "grades.csv"), "--steps", "1",
                  "--run_untrusted_code_as_me", cwd=blank_copy)
    assert run.returncode != 0, run.stderr
    assert run.stderr.startswith("error: the gradebook answers its checks with the code of "), run.stderr
    assert run.stderr.strip().endswith("a student copy; grade in the teacher's clone, where every step is written")
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "grades.csv").exists()


def test_a_grade_stopped_by_a_check_past_its_time_limit_says_the_later_checks_did_not_run(monkeypatch, capsys):
    """tests/conftest.py stops a run at a check past its time limit (pytest-timeout's failure), so the report
    holds fewer checks than the step has: the count line says why ("0 of 1" alone read as a one-check step)."""
    timed_out = exercises.Check("test_attention", False, "Failed: Timeout (>20.0s) from pytest-timeout.")
    monkeypatch.setattr(classroom.gradebook, "shipped_checks", lambda number, repo: [timed_out])
    monkeypatch.setattr(classroom.exercises, "grade", lambda number, repo: [timed_out])
    assert classroom.print_grade(2, REPO_ROOT) == 1
    assert capsys.readouterr().out.splitlines()[-1] == ("step 2: 0 of 1 checks passed; the run stopped at the check "
                                                        "that ran past its time limit, and the step's checks after it "
                                                        "did not run")


def test_a_failed_checks_reason_is_its_whole_message_to_the_cap_not_its_first_line(tmp_path):
    """np.testing.assert_allclose's message starts with an empty line: "AssertionError:" alone told a learner
    nothing, and two different failures printed as one ("as above"). Its lines are joined, up to REASON_CAP."""
    import numpy as np

    try:
        np.testing.assert_allclose(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    except AssertionError as error:
        message = f"AssertionError: {error}"
    (tmp_path / "report.xml").write_text(
        f'<testsuite><testcase name="test_rows"><failure message="{escape(message).replace(chr(10), "&#10;")}"/>'
        f"</testcase></testsuite>", encoding="utf-8")  # newlines as pytest writes them in an attribute
    [check] = exercises.read_report(tmp_path / "report.xml")
    assert check.reason.startswith("AssertionError: / Not equal to tolerance rtol=1e-07, atol=0 / Mismatched "
                                   "elements: 1 / 2 (50%) / ")  # then the differences, worded by NumPy's version
    assert len(check.reason) <= exercises.REASON_CAP


def test_grade_refuses_an_open_step_and_a_step_that_does_not_exist():
    assert "open-ended" in run_kit("grade", "11").stderr
    assert "there is no step 14" in run_kit("grade", "14").stderr


def test_pytest_selects_a_steps_checks_by_its_marker(blank_copy):
    """`python -m pytest -m step7` runs the same checks as `classroom.py grade 7`."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", "step7", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    collected = [line.split("::")[-1] for line in run.stdout.splitlines() if "::" in line]
    assert collected == [check.name for check in exercises.grade(7)]


@pytest.mark.parametrize("damage", ["link", "not json", "a list", "a folder"])
def test_the_hint_counter_is_never_read_or_written_through_a_link_and_a_damaged_one_is_named(damage, tmp_path):
    """The counter (.classroom_hints_seen.json) is the learner's file: a link to another file is neither read nor
    written through; a damaged counter is one line naming it and what to do, never a traceback."""
    counter, elsewhere = tmp_path / classroom.SEEN_FILE, tmp_path / "elsewhere.json"
    elsewhere.write_text('{"3": 1}')
    {"link": lambda: counter.symlink_to(elsewhere), "not json": lambda: counter.write_text("{3: 1"),
     "a list": lambda: counter.write_text("[1, 2]"), "a folder": counter.mkdir}[damage]()
    with pytest.raises(ValueError, match=f"{classroom.SEEN_FILE}.*delete it, and the count of hints seen starts"):
        classroom.hint(3, repo=tmp_path)
    assert elsewhere.read_text() == '{"3": 1}'


def test_hints_come_one_at_a_time_and_are_not_in_the_plain_text_of_exercises(tmp_path):
    exercises_md = (REPO_ROOT / "EXERCISES.md").read_text(encoding="utf-8")
    for number in exercises.GRADED:
        for text in classroom.hints(number):
            assert text not in exercises_md and text.split(":")[0] not in exercises_md
    first, second = classroom.hint(3, repo=tmp_path), classroom.hint(3, repo=tmp_path)
    assert first.startswith("Step 3, hint 1 of 3") and second.startswith("Step 3, hint 2 of 3")
    assert classroom.hint(3, level=1, repo=tmp_path).startswith("Step 3, hint 1 of 3 (the next: `python classroom.py "
                                                                 "hint 3 --level 2`)")  # plain `hint 3` shows 3
    with pytest.raises(ValueError, match="hints 1 to 3"):
        classroom.hint(3, level=4, repo=tmp_path)


def test_the_tokenizer_command_fetches_the_four_small_files_and_never_the_weights(server, release, tmp_path):
    """Step 5 without the 500 MB: from a local server standing in for OpenAI's bucket (tests/test_download.py)."""
    folder = classroom.fetch_tokenizer_files(tmp_path / "models", base_url=server.url)
    assert sorted(p.name for p in folder.iterdir()) == sorted(classroom.TOKENIZER_FILES)
    assert all((folder / name).read_bytes() == release[name] for name in classroom.TOKENIZER_FILES)
    assert [r["path"] for r in server.requests] == [f"/124M/{name}" for name in classroom.TOKENIZER_FILES]


def test_a_tokenizer_download_that_fails_names_only_the_four_files_to_fetch_by_hand(server, tmp_path):
    """A server without the files (HTTP 404): the advice lists the four small files, not the release with its
    500 MB of weights, which step 5 does not need."""
    with pytest.raises(DownloadError) as error:
        classroom.fetch_tokenizer_files(tmp_path / "models", base_url=f"{server.url}/elsewhere")
    assert str(error.value).endswith(f"(they are: {', '.join(classroom.TOKENIZER_FILES)})"), error.value


@pytest.mark.parametrize("args, message", [
    (["grde", "1"], "unknown command 'grde'"),
    ([], "no command"),
    (["grade", "7", "--rpo", "x"], "unknown flag --rpo (did you mean --repo?)"),
    (["grade", "seven"], "STEP"),
    (["grade"], "STEP is needed: python classroom.py grade STEP (python classroom.py grade --help says more)"),
    (["list", "extra"], "unexpected argument 'extra': give values as flags; python classroom.py list --help lists "
                        "them"),  # no word of main.py's --prompt
    (["grade", "7", "--repo", "course"], "is not a copy of the repository (no pytest.ini): name one with --repo (a "
                                         "hand-in of the learner's files alone is graded by the gradebook)"),
    (["hint", "3", "--level", "0"], "--level"),
    (["gradebook", "some-folder"], "--csv is needed"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--jobs", "0"], "--jobs"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--steps", "7,11"], "open-ended"),
    (["gradebook", "--csv", "grades.csv"], "name the submission folders"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--time_limit", "-1"], "--time_limit must be a number of "
                                                                                 "seconds > 0"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--time_limit", "0"], "--time_limit"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--budget", "0"], "--budget"),
    (["gradebook", "some-folder", "--csv", "grades.csv", "--run_untrusted_code_as_me", "maybe"],
     "--run_untrusted_code_as_me"),
    (["tokenizer", "--models_dir", ""], "--models_dir is empty"),  # the current folder, after a download
])
def test_every_argument_is_checked_before_any_work_one_line_and_exit_2(args, message, tmp_path):
    """As main.py's flags (fire's syntax, checked by command_line/flags.py before anything runs)."""
    run = run_kit(*args, cwd=REPO_ROOT)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.startswith("error: ") and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert message in run.stderr


def test_the_gradebook_command_grades_folders_into_a_csv_with_feedback(tmp_path, bubblewrap):
    """The README's command, with --steps quoted, --jobs and --feedback: the reference's files earn every point."""
    reference = tmp_path / "alice"
    reference.mkdir()
    (reference / "sampling.py").write_bytes((REPO_ROOT / "sampling.py").read_bytes())
    run = run_kit("gradebook", str(reference), "--csv", str(tmp_path / "grades.csv"), "--steps", "7,8", "--jobs", "2",
                  "--feedback", str(tmp_path / "feedback"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"wrote {tmp_path / 'grades.csv'}: 1 submissions, 2 steps each")
    lines = (tmp_path / "grades.csv").read_text(encoding="utf-8").splitlines()
    assert lines[1].startswith(f"{reference},1,1,,,2,2,")
    assert (tmp_path / "feedback" / "001-alice.txt").read_text(encoding="utf-8").startswith(f"{reference}: 2 of 2")


def git(folder, *args):
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=teacher", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def test_the_copy_carries_the_working_tree_uncommitted_edits_and_new_files_but_not_ignored_ones(tmp_path):
    """A teacher edits EXERCISES.md and adds a test without committing: both reach the students (git archive
    HEAD once left them out, silently); what .gitignore names does not."""
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("grades.csv\n")
    (tmp_path / "EXERCISES.md").write_text("committed\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "start")
    (tmp_path / "EXERCISES.md").write_text("edited, not committed\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_new.py").write_text("new\n")
    (tmp_path / "grades.csv").write_text("alice,1\n")
    files = exercises.tracked_files(tmp_path)
    assert files == {".gitignore": b"grades.csv\n", "EXERCISES.md": b"edited, not committed\n",
                     "tests/test_new.py": b"new\n"}


def test_in_a_git_clone_the_grades_feedback_hand_ins_and_links_beside_the_project_stay_out_of_the_copy(tmp_path):
    """The README grades a class from the clone's top: `gradebook submissions/* --csv grades.csv --feedback
    feedback`. None of that is committed or ignored, and the student copy (which the gradebook also grades every
    hand-in in) once carried it all: each hand-in could read the others and their grades. Untracked files go
    through exercises.not_the_projects as in a copy made without git: a new test still comes along."""
    git(tmp_path, "init", "-q")
    (tmp_path / "gpt2.py").write_text("tracked\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "start")
    outside = tmp_path.parent / f"{tmp_path.name}-answer.py"
    outside.write_text("the teacher's answer, elsewhere\n")
    for path, text in [("tests/test_new.py", "new\n"), ("grades.csv", "alice,1\n"),
                       ("submissions/alice/gpt2.py", "alice's\n"), ("submissions/alice/notes.txt", "alice's\n"),
                       ("feedback/001-alice.txt", "alice: 1 of 2\n"),
                       (f"feedback/{exercises.FEEDBACK_LIST}", '["001-alice.txt"]\n'),
                       ("answers/gpt2.py", "the teacher's\n")]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "answer.py").symlink_to(outside)
    assert sorted(exercises.tracked_files(tmp_path)) == ["gpt2.py", "tests/test_new.py"]


def test_a_copy_made_without_git_leaves_out_venvs_grades_and_other_students_code(tmp_path):
    """An unpacked ZIP with the teacher's .venv, a grades.csv and a submissions/ folder beside the project."""
    for path in ["gpt2.py", "tests/test_x.py", ".venv/pyvenv.cfg", ".venv/lib/site.py", "venv/pyvenv.cfg",
                 "venv/x.py", "grades.csv", "submissions/alice/gpt2.py", "submissions/alice/notes.txt",
                 "models/124M/encoder.json", "tests/__pycache__/x.pyc"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    assert sorted(exercises.tracked_files(tmp_path)) == ["gpt2.py", "tests/test_x.py"]


def test_without_git_on_the_path_the_error_names_git(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="needs git, which is not on the PATH"):
        exercises.tracked_files(tmp_path)


def same_signature_functions(folder):
    """[(path, function name, step, exercise function, its file)] of the functions defined at the top of any .py file under
    `folder` whose parameters are those of an exercise function (not a method) other than that function itself.
    Files that are no part of the project are passed over as the kit passes them (exercises.not_the_projects): a
    virtual environment in the folder, as the README's set-up makes one, holds other Pythons' syntax."""
    signatures = {}
    for s in exercises.STEPS:
        for file, name in exercises.places(s):
            if "." in name:
                continue
            node = exercises.find_function(ast.parse((REPO_ROOT / file).read_text(encoding="utf-8")), name)
            signatures.setdefault(tuple(a.arg for a in node.args.args), []).append((s.number, file, name))
    found = []
    for path in sorted(path for path in folder.rglob("*.py") if not exercises.not_the_projects(folder, path)):
        relative = path.relative_to(folder).as_posix()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                for number, file, name in signatures.get(tuple(a.arg for a in node.args.args), []):
                    if (relative, node.name) != (file, name):
                        found.append((relative, node.name, number, name, file))
    return found


def answering(folder, seed=7):
    """The functions of same_signature_functions(folder) that pass every hidden check of their step when put in
    place of the exercise function: an answer, under any name, that a student could paste."""
    import importlib.util

    from course import hidden, probe

    leaks, requests = [], {}
    for i, (relative, name, number, exercise, file) in enumerate(same_signature_functions(folder)):
        if number not in requests:
            requests[number] = hidden.request(number, seed)
            requests[number] = (requests[number], hidden.expected_answers(requests[number]))
        spec = importlib.util.spec_from_file_location(f"candidate_{i}", folder / relative)
        candidate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(candidate)
        with probe.patched(file[:-3], {exercise: getattr(candidate, name)}):
            request, expected = requests[number]
            answers = hidden.through_json(probe.observe(request))
        if all(check.passed for check in hidden.judge(request, expected, answers)):
            leaks.append((relative, name, number))
    return leaks


def test_no_function_in_a_student_copy_answers_a_step_under_another_name(blank_copy):
    """The line scan above finds an answer copied line by line; this finds one written differently: any
    function of the copy with an exercise's parameters is put in its place and run on the step's hidden checks."""
    assert answering(blank_copy) == []


def test_the_answer_scan_finds_the_textbook_top_p_that_a_test_file_of_the_repository_holds():
    """Its teeth: tests/test_logits_and_draws.py's plain_logits_to_probs is step 6 written out (so a student copy
    leaves that file out)."""
    assert ("tests/test_logits_and_draws.py", "plain_logits_to_probs", 6) in answering(REPO_ROOT)


def test_a_student_copys_readme_opens_with_how_to_check_a_step_get_hints_and_hand_in(blank_copy):
    """The teacher's README opens with a 2 GB download and the whole suite; a student's says what they run and
    what they hand in, then the project's README follows (the exercises link into it)."""
    readme = (blank_copy / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("# Your copy of the exercises\n")
    for text in ["`python classroom.py grade N`", "`python classroom.py hint N`", "`python classroom.py tokenizer`",
                 "**Hand in**", *(f"`{file}`" for file in exercises.STUDENT_FILES)]:
        assert text in readme.split("\n---\n")[0], text
    assert readme.endswith((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert not (blank_copy / exercises.STUDENT_README).exists()


def test_grade_5_without_the_tokenizer_files_says_once_how_to_get_them(blank_copy):
    """Step 5's checks all skip for the same reason when the files are missing: it is printed once, and it
    names `python classroom.py tokenizer`."""
    env = {key: value for key, value in exercises.child_environment().items() if key not in ("GPT2_MODELS_DIR", "CI")}
    run = subprocess.run([sys.executable, str(REPO_ROOT / "classroom.py"), "grade", "5", "--repo", str(blank_copy)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 1
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) > 10 and run.stdout.count("`python classroom.py tokenizer` fetches them") == 1, run.stdout
    assert f"in {blank_copy / 'models' / '124M'}: " in run.stdout and "/handin" not in run.stdout  # the learner's
    assert sum(line.endswith("(as above)") for line in failed) > 10


def test_a_run_that_reaches_a_blank_function_of_a_student_copy_ends_in_one_line_naming_its_step(blank_copy, tmp_path,
                                                                                              release_124M_dir):
    """The README's first command in a student copy: main.py on random weights reaches the tokenizer, whose BPE
    (step 5) is blank, and says so in one line, exit code 1, not a traceback ending in NotImplementedError."""
    tiny = write_hf_folder(tmp_path / "tiny", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    run = subprocess.run([sys.executable, "main.py", "--drafter", "lookup", "--n_tokens_to_generate", "5",
                          "--target_model_size", str(tiny)], cwd=blank_copy, capture_output=True, text=True,
                         timeout=300, env=exercises.child_environment())
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1:] == ["error: Step 5: write Encoder.bpe (see EXERCISES.md): this run needs it, "
                                            "and this copy's is still blank (`python classroom.py grade 5` checks it "
                                            "once written)"], run.stderr


def test_only_a_student_copys_blank_ends_in_one_line_any_other_not_implemented_keeps_its_traceback(capsys):
    """Its teeth: a NotImplementedError that is no blank's ("Step N: write ... (see EXERCISES.md)") is a bug,
    raised on as it came; a blank of two steps names the first to grade."""
    with pytest.raises(NotImplementedError, match="not yet"):
        with scripts.ending_as_one_line():
            raise NotImplementedError("not yet")
    with pytest.raises(SystemExit) as ended:
        with scripts.ending_as_one_line():
            raise NotImplementedError("Steps 7 and 9: write this block of speculative_sampling (see EXERCISES.md)")
    assert ended.value.code == 1 and "`python classroom.py grade 7`" in capsys.readouterr().err
    for file in exercises.STUDENT_FILES:  # every blank the kit makes, in the form the ending knows
        for *_, message in exercises.exercise_ranges((REPO_ROOT / file).read_text(encoding="utf-8"), file):
            blank = scripts.BLANK_STEP.fullmatch(message)
            assert blank and int(blank[1]) == min(int(n) for n in re.findall(r"\d+", message.split(":")[0])), message


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a folder no one may write in")
def test_a_csv_that_could_not_be_written_is_refused_before_any_grading(tmp_path):
    """The CSV is written after the whole class is graded: a folder no file can be made in (/proc, even for
    root) is refused first, in one line, not after minutes of grading (it was)."""
    hand_in = tmp_path / "hand-in"
    hand_in.mkdir()
    run = run_kit("gradebook", str(hand_in), "--csv", "/proc/grades.csv", "--steps", "1")
    assert run.returncode == 2 and run.stderr.startswith("error: --csv /proc: nothing can be written in /proc (")
    assert len(run.stderr.strip().splitlines()) == 1 and "step" not in run.stdout, (run.stdout, run.stderr)


@pytest.mark.parametrize("existed", [False, True], ids=["new folder", "empty folder"])
def test_a_student_copy_cut_short_is_taken_back_so_the_command_can_run_again(tmp_path, monkeypatch, existed):
    """A full disk after 40 files: the copy's files and folders are removed again (the folder itself too, if the
    copy made it), not left half-written for the next `classroom.py student` to refuse as 'not an empty folder';
    run again, the copy is whole."""
    import errno
    from course import exercises as kit

    folder = tmp_path / "student"
    if existed:
        folder.mkdir()
    real_write, written = Path.write_bytes, []

    def write_bytes(path, data):
        if len(written) == 40:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written.append(path)
        return real_write(path, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    with pytest.raises(OSError, match="No space left"):
        kit.write_student_copy(REPO_ROOT, folder)
    assert (folder.is_dir() and not any(folder.iterdir())) if existed else not folder.exists()
    monkeypatch.undo()
    kit.write_student_copy(REPO_ROOT, folder)
    assert (folder / "EXERCISES.md").is_file() and (folder / "course" / "hints.json").is_file()


def test_a_student_copy_under_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "a-file").write_text("mine")
    run = run_kit("student", str(tmp_path / "a-file" / "copy"))
    assert run.returncode == 2 and run.stderr.startswith("error: FOLDER ") and "is a file" in run.stderr, run.stderr


def test_a_csv_under_a_file_is_said_to_be_under_a_file(tmp_path):
    """--csv FILE/grades.csv: the folder it names is a file (it was said not to exist)."""
    (tmp_path / "a-file").write_text("mine")
    hand_in = tmp_path / "hand-in"
    hand_in.mkdir()
    run = run_kit("gradebook", str(hand_in), "--csv", str(tmp_path / "a-file" / "grades.csv"), "--steps", "1")
    assert run.returncode == 2 and "a-file is a file" in run.stderr and "does not exist" not in run.stderr, run.stderr


def test_a_mirror_in_the_environment_that_is_no_web_address_is_named_as_the_variable(tmp_path, monkeypatch):
    """GPT2_BASE_URL=notaurl: the error names GPT2_BASE_URL, where the user set it (it said "base_url")."""
    monkeypatch.setenv("GPT2_BASE_URL", "notaurl")
    with pytest.raises(ValueError, match=r"^GPT2_BASE_URL must be an http:// or https:// URL; got 'notaurl'"):
        classroom.fetch_tokenizer_files(tmp_path / "models")
