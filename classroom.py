"""A teacher's kit for EXERCISES.md: list the steps, make a student copy, grade a step, grade a class, give hints.

Read EXERCISES.md, then course/exercises.py (the steps as data, the student copy, one step graded) and course/gradebook.py
(many submissions under limits) first.

    python classroom.py list                        one line per step: number, title, file, functions (tabs)
    python classroom.py student DIR                 a student copy in a new folder: no answers, no history
    python classroom.py grade 7                     step 7's checks, each with pass/fail and why; exit 0 if all pass
    python classroom.py grade 7 --repo DIR          the same in another folder (a student copy, a submission)
    python classroom.py gradebook SUB1 SUB2 --csv grades.csv     each folder graded in a fresh copy, under limits
    python classroom.py hint 7                      step 7's next hint (a counter in the working copy)
    python classroom.py hint 7 --level 2            step 7's hint 2
    python classroom.py tokenizer                   only the four small 124M files step 5 needs, into models/124M

Every command works the same in PowerShell, cmd and a POSIX shell (quote a list: --steps "1,2,3"). A bad
argument is one line `error: ...` and exit code 2.

The hints live in course/hints.json, base64-encoded so that a glance at the file spoils nothing (EXERCISES.md
says where to get them, not what they are). The counter of hints seen is .classroom_hints_seen.json in the
working copy (git ignores it).
"""

import argparse
import base64
import json
import os
import sys
from pathlib import Path

from loaders import download
from course import exercises
from course import gradebook

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


def hint(number, level=None, repo=exercises.REPO):
    """The text to show for `hint N [--level L]`: hint L, or the next one not yet seen (counted in repo)."""
    texts = hints(number)
    if not texts:
        return f"Step {number} has no hints: its section in EXERCISES.md says all there is."
    seen_path = Path(repo) / SEEN_FILE
    seen = json.loads(seen_path.read_text(encoding="utf-8")) if seen_path.is_file() else {}
    if level is None:
        level = min(seen.get(str(number), 0) + 1, len(texts))
    if not 1 <= level <= len(texts):
        raise ValueError(f"step {number} has hints 1 to {len(texts)}; got --level {level}")
    seen[str(number)] = max(seen.get(str(number), 0), level)
    seen_path.write_text(json.dumps(seen, indent=1) + "\n", encoding="utf-8")
    more = "" if level == len(texts) else f" (the next: `python classroom.py hint {number}`)"
    return f"Step {number}, hint {level} of {len(texts)}{more}:\n\n{texts[level - 1]}"


def fetch_tokenizer_files(models_dir, base_url=None):
    """Download 124M's TOKENIZER_FILES (what step 5's checks read) into models_dir/124M, without the weights."""
    base_url = download.check_url(base_url or os.environ.get("GPT2_BASE_URL") or download.OPENAI_BASE_URL, "base_url")
    folder = Path(models_dir) / "124M"
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if not (folder / name).is_file():  # a file under its final name is complete (loaders/download.py)
            download.download_file(f"{base_url}/124M/{name}", folder / name)
    return folder


def print_grade(number, repo):
    """Print step `number`'s checks in `repo`; return the exit code (0 only if every check passed)."""
    checks = exercises.grade(number, repo)
    for check in checks:
        print(f"{'pass' if check.passed else 'FAIL'}  {check.name}" + ("" if check.passed else f": {check.reason}"))
    passed = sum(check.passed for check in checks)
    print(f"step {number}: {passed} of {len(checks)} checks passed")
    return 0 if passed == len(checks) else 1


def parser():
    main = argparse.ArgumentParser(prog="python classroom.py", description=__doc__.split("\n")[0])
    commands = main.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="one line per step: number, title, file, functions")
    student = commands.add_parser("student", help="write a student copy into a new folder")
    student.add_argument("folder")
    grade = commands.add_parser("grade", help="run one step's checks")
    grade.add_argument("step", type=int)
    grade.add_argument("--repo", default=str(exercises.REPO), help="the folder to grade (default: this copy)")
    book = commands.add_parser("gradebook", help="grade submission folders into a CSV file")
    book.add_argument("submissions", nargs="+")
    book.add_argument("--csv", required=True, help="the CSV file to write")
    book.add_argument("--steps", default=",".join(map(str, exercises.GRADED)),
                      help='e.g. "1,2,3", quoted (default: all)')
    book.add_argument("--time_limit", type=float, default=gradebook.TIME_LIMIT_SECONDS, help="seconds per step")
    book.add_argument("--memory_limit_mb", type=int, default=gradebook.MEMORY_CAP_BYTES // 1024**2)
    hint_command = commands.add_parser("hint", help="one step's hints, one at a time")
    hint_command.add_argument("step", type=int)
    hint_command.add_argument("--level", type=int, default=None, help="show this hint (1 = the first)")
    tokenizer = commands.add_parser("tokenizer", help="download only the small 124M files step 5 needs")
    tokenizer.add_argument("--models_dir", default=str(exercises.REPO / "models"))
    return main


def run(argv):
    """Run the command line `argv`; return the exit code."""
    arguments = parser().parse_args(argv)
    if arguments.command == "list":
        print("\n".join(list_steps()))
    elif arguments.command == "student":
        folder = exercises.write_student_copy(exercises.REPO, arguments.folder)
        print(f"wrote a student copy into {folder}: hand it out as it is (it has no git history)")
    elif arguments.command == "grade":
        exercises.graded_step(arguments.step)
        return print_grade(arguments.step, Path(arguments.repo))
    elif arguments.command == "gradebook":
        steps = [int(n) for n in arguments.steps.split(",") if n.strip()]
        rows = gradebook.gradebook(arguments.submissions, arguments.csv, steps, arguments.time_limit,
                                   arguments.memory_limit_mb * 1024**2)
        print(f"wrote {arguments.csv}: {len(rows) - 1} submissions, {len(steps)} steps each")
    elif arguments.command == "hint":
        print(hint(arguments.step, arguments.level))
    elif arguments.command == "tokenizer":
        print(f"the tokenizer files are in {fetch_tokenizer_files(arguments.models_dir)}")
    return 0


def main():
    try:
        sys.exit(run(sys.argv[1:]))
    except (ValueError, FileNotFoundError, download.DownloadError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
