"""The exercise steps as data, a student copy without the answers, and one step's checks run and read back.

Read EXERCISES.md first (the steps for a learner); this is what a teacher's kit (classroom.py) builds on.

STEPS is the one list of the steps: EXERCISES.md's table and headings, the tests' markers (`step7` in
pytest.ini) and the kit all follow it, and tests/test_exercises.py checks that they agree. A step names the
file and the functions the learner writes; its checks are the tests marked with its marker, in the test
files it names.

A student copy is the repository's files as the teacher's working tree has them (git's tracked files,
uncommitted edits included, and the new files that are the project's: never the grades, the feedback or the
hand-ins beside it; no history comes along), with every exercise function's body replaced by
`raise NotImplementedError("Step N: ...")` (its signature and docstring kept; the source text is edited in
place, found with `ast`, so comments and formatting elsewhere survive) and without TEACHER_ONLY, the files that
hold an answer (a second verifier, a full-scan lookup, the checks' own wrong versions one slip from the right one).

Grading a step for a learner (`classroom.py grade N`) runs `python -m pytest -m stepN` on the step's test files
in a child process and reads the outcome of each check from the JUnit XML report pytest writes. That report is
the learner's own code speaking, which is fine for practice and never for a grade: the gradebook decides in its
own process, on cases no copy holds (course/hidden.py).
"""

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent  # the repository this kit belongs to
REASON_CAP = 300  # characters of a failed check's reason that `grade N` prints (pytest -m stepN shows all of it)
PER_TEST_TIMEOUT = "--timeout=20"  # a check still running after 20 s fails, and the run stops (tests/conftest.py)


class Step(NamedTuple):
    number: int
    title: str
    file: str  # the file the learner writes in ("" for an open step with no function to write)
    functions: tuple  # functions (Class.method for a method) whose bodies the learner writes; "other.py:name"
    # for one in another file than `file` (step 9: the chain's verifier in sampling.py, the tree's in drafters.py)
    minutes: int  # a time estimate for a learner who has read what the step says to read first
    tests: tuple  # the test files holding the step's checks (marked stepN); () for a step not graded
    part: str = ""  # only this block of the function is the exercise (its first line, as in the source)


STEPS = (
    Step(1, "Layer norm", "gpt2.py", ("layer_norm",), 20, ("tests/test_steps_forward.py",)),
    Step(2, "Causal attention", "gpt2.py", ("attention", "causal_mask"), 30, ("tests/test_steps_forward.py",)),
    Step(3, "Multi-head attention with a KV cache", "gpt2.py", ("mha",), 45, ("tests/test_steps_forward.py",)),
    Step(4, "The whole forward pass", "gpt2.py", ("gpt2",), 45, ("tests/test_steps_forward.py",)),
    Step(5, "The BPE merge loop", "encoder.py", ("Encoder.bpe",), 45, ("tests/test_encoder.py",)),
    Step(6, "Top-p (nucleus) filtering", "model_fn.py", ("logits_to_probs",), 40, ("tests/test_sampling.py",),
         part="if top_p is not None and top_p < 1:"),
    Step(7, "The acceptance rule", "sampling.py", ("_accept",), 15, ("tests/test_accept_and_residual.py",)),
    Step(8, "The residual distribution", "sampling.py", ("_residual",), 15,
         ("tests/test_accept_and_residual.py", "tests/test_steps_rounds.py")),
    Step(9, "Verifying a round, a chain and then a tree", "sampling.py", ("_verify_chain", "drafters.py:_verify_tree"),
         90, ("tests/test_steps_rounds.py",)),
    Step(10, "Measure alpha against K", "lookahead.py", ("tokens_per_round", "predicted_speedup"), 60,
         ("tests/test_benchmark.py",)),
    Step(11, "A draft made of the target's first layers", "", (), 120, ()),
    Step(12, "Tree and batched drafting", "gpt2.py", ("tree_mask", "tree_positions_and_mask", "gpt2"), 120,
         ("tests/test_steps_forward.py",)),
    Step(13, "Prompt lookup, a draft with no model", "drafters.py",
         ("SuffixAutomaton._record_ends", "PromptLookup.lookup"), 60, ("tests/test_steps_rounds.py",)),
)


def places(step):
    """[(file, function)] of a step's functions: `step.file` unless the function names its own ("drafters.py:f")."""
    return [tuple(name.split(":")) if ":" in name else (step.file, name) for name in step.functions]


GRADED = tuple(step.number for step in STEPS if step.tests)
STUDENT_FILES = tuple(sorted({file for step in STEPS for file, _ in places(step) if file}))

FEEDBACK_LIST = ".gradebook-feedback.json"  # in a gradebook's feedback folder: the files its last run wrote there
STUDENT_README = "course/student_readme.md"  # a student copy's README.md opens with it (and leaves it out)

# Files a student copy leaves out: each holds an answer, or imports one that does.
TEACHER_ONLY = (
    "tests/verifiers.py",  # a second _verify_tree and _verify_chain
    "tests/test_verify_records.py",  # replays each round with a verifier of its own
    "tests/test_speculative_exactness.py",  # checks the checker with tests/verifiers.py
    "tests/test_tree_sampling.py",
    "tests/test_drafters.py",  # checks lookup against a full scan
    "tools/full_scan_lookup.py",  # brute_force_lookup, a full-scan lookup
    "tools/small_parts.py",  # imports it (lookup_timing)
    "tests/test_step_checks_teeth.py",  # wrong versions one slip from the right one
    "tests/test_logits_and_draws.py",  # plain_logits_to_probs: the textbook top-p, step 6 written out
    "tests/make_step_fixtures.py",  # runs the reference to save its calls (a student copy has none to run)
    "tests/test_classroom.py",
    "tests/test_gradebook.py",
    "tests/test_sandbox.py",  # hand-ins built from the reference's _accept
    "tests/test_readme.py",  # reads tools/worked_round.py
    "tests/test_learning_path.py",  # reads tests/test_readme.py
    "tests/test_pointers.py",  # imports tests/test_learning_path.py
    "tests/test_portability.py",  # likewise
    "tools/worked_round.py",  # a round's rules written out again
    "tools/make_readme_figures.py",  # imports both
)


def step(number):
    """The Step numbered `number`; ValueError naming the steps there are."""
    for candidate in STEPS:
        if candidate.number == number:
            return candidate
    raise ValueError(f"there is no step {number}: the steps are {STEPS[0].number} to {STEPS[-1].number}")


def graded_step(number):
    found = step(number)
    if not found.tests:
        raise ValueError(f"step {number} ({found.title}) is open-ended and not graded: see its rubric in EXERCISES.md")
    return found


# --- the student copy -----------------------------------------------------------------------------------------


def steps_of(file, function):
    """The numbers of the steps in which `function` of `file` is written (gpt2 is steps 4 and 12)."""
    return [s.number for s in STEPS if (file, function) in places(s)]


def find_function(tree, dotted):
    """The FunctionDef of `name` or `Class.name` at the top level of a parsed module."""
    *outer, name = dotted.split(".")
    body = tree.body
    if outer:
        body = next(node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == outer[0])
    return next(node for node in body if isinstance(node, ast.FunctionDef) and node.name == name)


def exercise_ranges(source, file, keep=()):
    """[(first line, last line, indent, message)] (1-based, inclusive) of each exercise body in `file`'s source
    whose steps are not all in `keep`: what `blank_source` replaces."""
    tree, ranges = ast.parse(source), []
    for dotted in sorted({name for s in STEPS for where, name in places(s) if where == file}):
        numbers = steps_of(file, dotted)
        if any(number in keep for number in numbers):
            continue
        node = find_function(tree, dotted)
        part = next((s.part for s in STEPS if s.number in numbers and s.part), "")
        if part:  # only a block of the function: the `if` whose first line is `part`
            lines = source.splitlines()
            node = next(n for n in ast.walk(node) if isinstance(n, ast.If)
                        and lines[n.lineno - 1].strip() == part)
            first, last = node.body[0].lineno, node.body[-1].end_lineno
        else:  # the body after the docstring
            has_docstring = isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            first = node.body[0].end_lineno + 1 if has_docstring else node.body[0].lineno
            last = node.end_lineno
        what = f"this block of {dotted}" if part else dotted
        earlier = ", ".join(str(n) for n in numbers[:-1])
        label = f"Step {numbers[0]}" if len(numbers) == 1 else f"Steps {earlier} and {numbers[-1]}"
        ranges.append((first, last, node.body[0].col_offset, f"{label}: write {what} (see EXERCISES.md)"))
    return sorted(ranges)


def blank_source(source, file, keep=()):
    """`source` with each exercise body of `file` (except those of the steps in `keep`) replaced by one line,
    `raise NotImplementedError("Step N: ...")`; every other line as it was."""
    lines = source.splitlines(keepends=True)
    for first, last, indent, message in reversed(exercise_ranges(source, file, keep)):
        lines[first - 1 : last] = [" " * indent + f"raise NotImplementedError({message!r})\n"]
    return "".join(lines)


def tracked_files(repo):
    """{relative path: bytes} of the project's files in `repo` as they are now on disk: in a git repository, the
    files git tracks (`git ls-files --cached`: an uncommitted edit comes along), and the untracked ones it does
    not ignore that are the project's (`not_the_projects`: a new test comes along, the grades, the feedback and
    the hand-ins in the clone do not); elsewhere (an unpacked archive, a student copy) every file but
    `not_the_projects`'."""
    repo = Path(repo)
    if (repo / ".git").exists():
        untracked = {name for name in git_files(repo, "--others", "--exclude-standard")
                     if not not_the_projects(repo, repo / name)}
        paths = sorted(git_files(repo, "--cached") | untracked)
        return {path: (repo / path).read_bytes() for path in paths if (repo / path).is_file()}  # deleted: left out
    return {path.relative_to(repo).as_posix(): path.read_bytes() for path in sorted(repo.rglob("*"))
            if path.is_file() and not not_the_projects(repo, path)}


def git_files(repo, *which):
    """The set of paths `git ls-files -z *which` lists in the git repository `repo`."""
    try:
        run = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *which], capture_output=True)
    except FileNotFoundError:
        raise ValueError(f"{repo} is a git repository, and listing its files needs git, which is not on the "
                         f"PATH: install git (or add it to the PATH) and run this again") from None
    if run.returncode != 0:
        raise ValueError(f"git ls-files failed in {repo}: {run.stderr.decode(errors='replace').strip()}")
    return {name for name in run.stdout.decode("utf-8").split("\0") if name}


def not_the_projects(repo, path):
    """Whether a file under `repo` that git does not track is no part of the project: a link, caches, hidden
    folders (.venv, .git), a virtual environment, the models, a CSV of grades at the top, the gradebook's feedback
    (a folder holding FEEDBACK_LIST), or anything in a folder that holds its own copy of an exercise file (a
    submission, another student copy, the teacher's answers)."""
    parts = path.relative_to(repo).parts
    if path.is_symlink() or set(parts) & {"__pycache__", "models"} or any(part.startswith(".") for part in parts):
        return True
    if len(parts) == 1:
        return path.suffix == ".csv"
    folders = [repo.joinpath(*parts[:i]) for i in range(1, len(parts))]
    names = {Path(file).name for file in STUDENT_FILES} | {FEEDBACK_LIST}
    return any((folder / "pyvenv.cfg").exists() or any((folder / name).exists() for name in names)
               for folder in folders)


def student_files(repo, keep=()):
    """{relative path: bytes} of a student copy of `repo`: TEACHER_ONLY left out, the exercises blanked (but
    those of the steps in `keep`, which tests use to fill in one step at a time)."""
    files = {path: data for path, data in tracked_files(repo).items() if path not in TEACHER_ONLY}
    if STUDENT_README in files and "README.md" in files:  # the copy's own opening: check, hints, what to hand in
        files["README.md"] = files.pop(STUDENT_README) + files["README.md"]
    for file in STUDENT_FILES:
        files[file] = blank_source(files[file].decode("utf-8"), file, keep).encode("utf-8")
    return files


def write_student_copy(repo, folder, keep=()):
    """Write a student copy of `repo` into `folder`, which must not exist or be empty; returns its Path. A copy
    cut short (a full disk, Ctrl-C) is taken back, every file and folder it made, so that the same command can
    be run again: the folder was new or empty, so nothing else is touched."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder} exists and is not an empty folder: name a new folder for the student copy")
    made = []  # what this copy made, in order: folders (each after the one holding it) and files

    def make_folder(path):  # path, and each folder above it that is missing, the outermost first
        for missing in reversed([above for above in (path, *path.parents) if not above.exists()]):
            missing.mkdir()
            made.append(missing)

    try:
        make_folder(folder)
        for path, data in student_files(repo, keep).items():
            target = folder / path
            make_folder(target.parent)
            made.append(target)
            target.write_bytes(data)
    except BaseException:
        for path in reversed(made):  # the innermost first: each folder is empty when its turn comes
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            elif path.exists() or path.is_symlink():
                path.unlink()
        raise
    return folder


# --- grading one step -----------------------------------------------------------------------------------------


class Check(NamedTuple):
    name: str
    passed: bool
    reason: str  # one line: why it failed or was skipped ("" when it passed)


def pytest_arguments(number):
    """pytest's arguments for step N's checks: its marker on the step's test files."""
    return ["-m", f"step{number}", *graded_step(number).tests, "-q", "-p", "no:cacheprovider", PER_TEST_TIMEOUT]


def pytest_command(number, report, *extra):
    """The child's command line: step N's checks, a JUnit report into `report`."""
    return [sys.executable, "-m", "pytest", *pytest_arguments(number), f"--junitxml={report}", *extra]


def child_environment():
    """The environment of a grading child: no bytecode files written into the graded folder, one BLAS thread."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def read_report(report):
    """[Check] from a JUnit XML report; a test skipped counts as failed (a step passes with no skips)."""
    checks = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = case.get("name")
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            checks.append(Check(name, True, ""))
            continue
        lines = [line.strip() for line in (outcome.get("message") or outcome.text or outcome.tag).splitlines()]
        lines = [line for line in lines if line] or [outcome.tag]
        if lines == ["collection failure"]:  # a test file that did not import: say which file and line, and why
            lines[0] += import_error_text(outcome.text or "")
        text = " / ".join(lines)  # all of it, to the cap: "AssertionError:" alone says nothing (assert_allclose's)
        checks.append(Check(name, False, f"{'skipped: ' if outcome.tag == 'skipped' else ''}{text}"[:REASON_CAP]))
    return checks


def import_error_text(traceback):
    """": gpt2.py, line 203: SyntaxError: invalid syntax" from the traceback of a test file that failed to import
    (pytest marks the error's lines "E "): the last file and line it names, and the error; "" if it has none."""
    lines = [line[1:].strip() for line in traceback.splitlines() if line.startswith("E ") and line[1:].strip()]
    places = [re.match(r'File "(.+)", line (\d+)', line) for line in lines]
    place = next((found for found in reversed(places) if found), None)
    where = "" if place is None else f"{Path(place[1]).name}, line {place[2]}: "
    return f": {where}{lines[-1]}" if lines else ""


def check_copy(repo):
    """Path(repo), if it is a copy of the repository (it has pytest.ini); else a ValueError saying what to name."""
    if not (Path(repo) / "pytest.ini").is_file():
        raise ValueError(f"{repo} is not a copy of the repository (no pytest.ini): name one with --repo (a "
                         f"hand-in of the learner's files alone is graded by the gradebook)")
    return Path(repo)


def grade(number, repo=REPO):
    """[Check] of step `number` in the folder `repo`, run in a child process (no limits: for a learner's own
    copy; classroom's gradebook adds them). A run that ends without a report is one failed check saying why."""
    repo = check_copy(repo)
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        report = Path(scratch) / "report.xml"
        run = subprocess.run(pytest_command(number, report), cwd=repo, env=child_environment(),
                             capture_output=True, text=True, errors="replace")
        return checks_or_crash(report, run.returncode, run.stdout + run.stderr)


def checks_or_crash(report, returncode, output):
    """The report's checks; or, when there is none (a crash, a collection error, nothing selected), one failed
    check whose reason is the run's last line of output."""
    try:
        checks = read_report(report) if Path(report).is_file() and Path(report).stat().st_size else []
    except ElementTree.ParseError:  # a report cut short (a crash while pytest wrote it)
        checks = []
    if not checks:
        last = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
        checks = [Check("the run", False, f"ended with exit code {returncode} and no check run: {last.strip()[:200]}")]
    return checks


def remove_tree(folder):
    """shutil.rmtree that also removes read-only files (Windows refuses to delete them otherwise)."""
    def make_writable_and_retry(function, path, _):
        os.chmod(path, 0o700)
        function(path)

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=make_writable_and_retry)
    else:  # the same handler, under its old name
        shutil.rmtree(folder, onerror=make_writable_and_retry)
