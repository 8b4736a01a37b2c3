"""A teacher's kit for EXERCISES.md: list the steps, make a student copy, grade a step, grade a class, give hints.

Read EXERCISES.md, then course/exercises.py (the steps as data, the student copy, one step graded) and course/gradebook.py
(many submissions under limits) first.

    python classroom.py list                        one line per step: number, title, file, functions (tabs)
    python classroom.py student DIR                 a student copy in a new folder: no answers, no history
    python classroom.py grade 7                     step 7's checks, each with pass/fail and why; exit 0 if all pass
    python classroom.py grade 7 --repo DIR          the same in another copy (a student's; a hand-in: gradebook)
    python classroom.py gradebook SUB1 SUB2 --csv grades.csv     each folder graded in a fresh copy in a sandbox,
                        [--feedback DIR] [--jobs N] [--steps "1,2"]   under limits, on cases drawn fresh
                        [--time_limit S] [--budget S]                 (course/hidden.py, course/sandbox.py;
                        [--memory_limit_mb M]                         without bubblewrap, it refuses unless
                        [--run_untrusted_code_as_me]                  told to run the hand-ins as you)
    python classroom.py hint 7                      step 7's next hint (a counter in the working copy)
    python classroom.py hint 7 --level 2            step 7's hint 2
    python classroom.py tokenizer                   only the four small 124M files step 5 needs, into models/124M
                        [--models_dir DIR]                            (or DIR/124M)

Every command works the same in PowerShell, cmd and a POSIX shell (quote a list: --steps "1,2,3"). The
arguments are fire's, as for main.py (`python classroom.py grade --help`); every one is checked before any
work, and a bad one is one line `error: ...` and exit code 2.

The hints live in course/hints.json, base64-encoded so that a glance at the file spoils nothing (EXERCISES.md
says where to get them, not what they are). The counter of hints seen is .classroom_hints_seen.json in the
working copy (git ignores it).
"""

import base64
import json
import os
import stat
import sys
from pathlib import Path

try:  # the project's files, a few of them the learner's, half written: one that does not parse is one line
    from command_line.flags import as_bool, as_seconds, as_text, as_whole_number, check_models_dir, errors_as_one_line
    from command_line.scripts import as_whole_numbers, check_output_folder, ending_as_one_line, run_script
    from loaders import download
    from loaders import safe_files
    from loaders.weights import shown
    from course import exercises
    from course import gradebook
    from course import sandbox
except SyntaxError as error:
    where = os.path.relpath(error.filename or "?", os.path.dirname(os.path.abspath(__file__)))
    sys.exit(f"error: {where}, line {error.lineno}: {error.msg}; classroom.py imports that file: fix it, then run "
             f"this again")

HINTS_FILE = exercises.REPO / "course" / "hints.json"
SEEN_FILE = ".classroom_hints_seen.json"
TOKENIZER_FILES = ("encoder.json", "vocab.bpe", "hparams.json", "model.ckpt.index")  # 1.5 MB: no weights


def list_steps():
    """Lines `number<TAB>title<TAB>file<TAB>function,function` (file and functions empty for an open step)."""
    return [f"{s.number}\t{s.title}\t{s.file}\t{','.join(s.functions)}" for s in exercises.STEPS]


def hints(number):
    """Step `number`'s hints, decoded, in the order to show them."""
    exercises.step(number)
    encoded = json.loads(HINTS_FILE.read_text(encoding="utf-8")).get(str(number), [])
    return [base64.b64decode(text).decode("utf-8") for text in encoded]


def read_seen(path):
    """{step: how many of its hints were seen} from the counter file at `path` ({} where there is none), read
    as every file of the project is: never through a link; a damaged one is a ValueError naming it."""
    fix = "delete it, and the count of hints seen starts again"
    try:
        with os.fdopen(os.open(path, safe_files.READ_NO_LINK), "rb") as file:
            regular = stat.S_ISREG(os.fstat(file.fileno()).st_mode)
            data = file.read(64 * 1024) if regular else b""
    except FileNotFoundError:
        return {}
    except OSError as error:  # ELOOP: a link, which is never followed
        raise ValueError(f"{path} could not be read ({error.strerror}; a link is never followed): {fix}") from None
    try:
        seen = json.loads(data.decode("utf-8")) if regular else None
    except ValueError:
        seen = None
    if not isinstance(seen, dict) or not all(isinstance(n, int) and not isinstance(n, bool) for n in seen.values()):
        raise ValueError(f"{path} is damaged (not a file of counts like {{\"3\": 1}}): {fix}")
    return seen


def hint(number, level=None, repo=exercises.REPO):
    """The text to show for `hint N [--level L]`: hint L, or the next one not yet seen (counted in repo)."""
    texts = hints(number)
    if not texts:
        return f"Step {number} has no hints: its section in EXERCISES.md says all there is."
    seen_path = Path(repo) / SEEN_FILE
    seen = read_seen(seen_path)
    if level is None:
        level = min(seen.get(str(number), 0) + 1, len(texts))
    if not 1 <= level <= len(texts):
        raise ValueError(f"step {number} has hints 1 to {len(texts)}; got --level {level}")
    seen[str(number)] = max(seen.get(str(number), 0), level)
    safe_files.write_atomically(seen_path, json.dumps(seen, indent=1) + "\n")  # replaces a link, never follows one
    again = "" if seen[str(number)] == level else f" --level {level + 1}"  # plain `hint N` shows the next unseen
    more = "" if level == len(texts) else f" (the next: `python classroom.py hint {number}{again}`)"
    return f"Step {number}, hint {level} of {len(texts)}{more}:\n\n{texts[level - 1]}"


def fetch_tokenizer_files(models_dir, base_url=None):
    """Download 124M's TOKENIZER_FILES (what step 5's checks read) into models_dir/124M, without the weights."""
    base_url = download.release_base_url(base_url)
    folder = Path(models_dir) / "124M"
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if not (folder / name).is_file():  # a file under its final name is complete (loaders/download.py)
            download.download_file(f"{base_url}/124M/{name}", folder / name, by_hand=TOKENIZER_FILES)
    return folder


def print_grade(number, repo):
    """Print step `number`'s checks in `repo`; return the exit code (0 only if every check passed)."""
    checks = gradebook.shipped_checks(number, repo) if not sandbox.unavailable() else exercises.grade(number, repo)
    shown_reasons = set()
    for check in checks:  # a reason many checks share (step 5's missing files) is printed once
        reason = "" if check.passed else f": {check.reason}" if check.reason not in shown_reasons else " (as above)"
        shown_reasons.add(check.reason)
        print(f"{'pass' if check.passed else 'FAIL'}  {check.name}{reason}")
    passed = sum(check.passed for check in checks)
    stopped = any("from pytest-timeout" in check.reason for check in checks)  # tests/conftest.py stops the run there
    print(f"step {number}: {passed} of {len(checks)} checks passed" + ("; the run stopped at the check that ran past "
          "its time limit, and the step's checks after it did not run" if stopped else ""))
    return 0 if passed == len(checks) else 1


def list_command():
    """One line per step: number, title, file, functions (tab-separated)."""
    print("\n".join(list_steps()))


def student(folder):
    """Write a student copy (no answers, no history) into FOLDER, a new or empty folder."""
    with errors_as_one_line():
        written = exercises.write_student_copy(exercises.REPO, check_output_folder(folder, "FOLDER"))
    print(f"wrote a student copy into {written}: hand it out as it is (it has no git history)")


def grade(step, repo=str(exercises.REPO)):
    """Run step STEP's checks in --repo (default: this copy); exit 0 only if every check passed."""
    with errors_as_one_line():
        code = print_grade(exercises.graded_step(as_whole_number(step, "STEP", 1, 99)).number,
                           Path(as_text(repo, "--repo")))
    if code:
        raise SystemExit(code)


def gradebook_command(*submissions, csv=None, steps=",".join(map(str, exercises.GRADED)),
                      time_limit=gradebook.TIME_LIMIT_SECONDS, memory_limit_mb=gradebook.MEMORY_CAP_BYTES // 1024**2,
                      jobs=os.cpu_count() or 1, feedback=None, budget=gradebook.BUDGET_SECONDS,
                      run_untrusted_code_as_me=False):
    """Grade the submission folders SUBMISSIONS into the CSV file --csv (and one file each into --feedback), each
    in a sandbox (bubblewrap); --run_untrusted_code_as_me grades without one where there is none."""
    with errors_as_one_line():
        if not submissions:
            raise ValueError("name the submission folders: python classroom.py gradebook SUB1 SUB2 --csv grades.csv")
        if csv is None:
            raise ValueError("--csv is needed: the file the grades go into, like --csv grades.csv")
        numbers = as_whole_numbers(steps, "--steps")
        for number in numbers:
            exercises.graded_step(number)
        rows = gradebook.gradebook([as_text(s, "SUBMISSIONS") for s in submissions], as_text(csv, "--csv"), numbers,
                                   as_seconds(time_limit, "--time_limit"),
                                   as_whole_number(memory_limit_mb, "--memory_limit_mb", 64) * 1024**2,
                                   jobs=as_whole_number(jobs, "--jobs", 1, 256),
                                   feedback=None if feedback is None else as_text(feedback, "--feedback"),
                                   budget_seconds=as_seconds(budget, "--budget"),
                                   trust_unsandboxed=as_bool(run_untrusted_code_as_me, "--run_untrusted_code_as_me"))
    print(f"wrote {csv}: {len(rows) - 1} submissions, {len(numbers)} steps each"
          + (f"; one feedback file each in {feedback}" if feedback is not None else ""))


def hint_command(step, level=None):
    """Step STEP's next hint, or hint --level (1 = the first)."""
    with errors_as_one_line():
        text = hint(as_whole_number(step, "STEP", 1, 99), None if level is None else as_whole_number(level, "--level", 1))
    print(text)


def tokenizer(models_dir=str(exercises.REPO / "models")):
    """Download only the four small 124M files step 5 needs (1.5 MB, no weights) into --models_dir/124M."""
    with errors_as_one_line():
        models_dir = as_text(models_dir, "--models_dir")
        check_models_dir(models_dir)  # before any download: an empty one would be the current folder
        folder = fetch_tokenizer_files(models_dir)
    print(f"the tokenizer files are in {folder}")


COMMANDS = {"list": list_command, "student": student, "grade": grade, "gradebook": gradebook_command,
            "hint": hint_command, "tokenizer": tokenizer}


def run(argv):
    """Run the command line `argv` (the command, then its arguments as fire reads them)."""
    if argv[:1] in (["--help"], ["-h"]):
        with ending_as_one_line():  # `| head -3` ends quietly
            print(__doc__.split("\n\n")[2], flush=True)
        return
    with errors_as_one_line():
        if not argv or argv[0] not in COMMANDS:
            given = f"unknown command {shown(argv[0])}" if argv else "no command"
            raise ValueError(f"{given}: the commands are {', '.join(COMMANDS)} (python classroom.py --help)")
    run_script(COMMANDS[argv[0]], argv[1:], f"classroom.py {argv[0]}")


if __name__ == "__main__":
    run(sys.argv[1:])
