"""Grade many hand-ins, each step in a sandbox under limits, into one CSV file and a feedback file each.

Read course/exercises.py (the steps, the student copy), course/hidden.py (the checks) and course/sandbox.py
(what a hand-in sees) first.

A hand-in (a submission) is a folder holding a learner's versions of the files they write (exercises.STUDENT_FILES).
Nothing of it is trusted:
- its files are read by the gradebook, never through a link (a hand-in holding a link is refused, the reason
  in its row): regular files of at most FILE_CAP bytes, STUDENT_FILES and modules of its own (my_helpers.py, a
  name the copy does not use; others, and folders, are named in a warning: `left_out`), put into a fresh copy of
  the teacher's student copy. A file it lacks stays blank (NotImplementedError); a hand-in holding none of them
  gets a warning naming where they are;
- it is graded on course/hidden.py's checks, drawn from a fresh seed when the gradebook starts. In the sandbox
  its child only calls its functions and writes down what they return (course/probe.py); this process reads
  the answers back (a regular file, bounded, numbers, arrays and short texts only) and compares them with the
  reference's, computed here from the teacher's clone, which the sandbox does not show;
- every text of it (its folder's name, its error messages) is escaped (loaders/messages.printable) before it
  reaches the terminal, the CSV or the feedback, and a CSV cell never starts as a spreadsheet formula.
Each step runs with a time limit (the sandbox ended whole at the limit; within it each check has its share, so
a check that never ends costs its own points alone: course/probe.check_deadlines), a memory cap for the whole
hand-in and a cap on what it prints (OUTPUT_CAP). A hand-in's steps share its budget (budget_seconds): a hand-in
that sleeps costs the class that much and no more, and the progress line names it. A hand-in that cannot be
graded at all, whatever the reason, gets its row with the reason; the others are graded. Ctrl-C ends every
running step at once. Without bubblewrap the gradebook refuses to run hand-ins, unless the teacher passes
--run_untrusted_code_as_me (course/no_sandbox.py). Hand-ins are graded `jobs` at a time (default: the cores).
"""

import csv
import json
import os
import queue
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import NamedTuple, Optional

from tqdm import tqdm

from command_line.scripts import check_output_folder
from course import exercises
from course import hidden
from course import no_sandbox
from course import probe
from course import replay
from course import sandbox
from loaders import safe_files
from loaders.messages import printable

TIME_LIMIT_SECONDS = 60.0  # a step of the reference takes well under a second
BUDGET_SECONDS = 180.0  # all the steps of one hand-in
MEMORY_CAP_BYTES = 2 * 1024**3
OUTPUT_CAP = 1024**2  # bytes of output a step may print before it is stopped
KEPT_OUTPUT = 16 * 1024  # bytes of that output kept to explain a crash
FILE_CAP = 1024**2  # bytes of one file of a hand-in (a learner's gpt2.py is about 20 kB)
ANSWER_FILES = ("answers.json", "report.xml")  # what a child writes: the probe's answers, pytest's report


class Limits(NamedTuple):
    time: float  # seconds one step may run
    memory: Optional[int]  # bytes of memory for the whole hand-in, or None
    budget: float  # seconds all of a hand-in's steps may run
    sandboxed: bool  # False only when the teacher passed --run_untrusted_code_as_me


def run_limited(process, job, time_limit, stopping, output_cap=OUTPUT_CAP):
    """(return code, the output's first KEPT_OUTPUT bytes, why it was stopped or "") of a started child, under
    the limits: it is ended at `time_limit` seconds, when it prints more than `output_cap` bytes, and when
    `stopping` is set (Ctrl-C). Whatever happens, no process it started is left running."""
    kept, total, flooded = bytearray(), [0], threading.Event()

    def read():
        for chunk in iter(lambda: process.stdout.read(65536), b""):
            total[0] += len(chunk)
            if len(kept) < KEPT_OUTPUT:
                kept.extend(chunk[: KEPT_OUTPUT - len(kept)])
            if total[0] > output_cap:
                flooded.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline, stopped = time.monotonic() + time_limit, ""
    while process.poll() is None:
        if flooded.is_set():
            stopped = f"printed more than {output_cap // 1024} kB"
            break
        if time.monotonic() > deadline:
            stopped = f"ran past its time limit of {time_limit:g} s"
            break
        if stopping.is_set():
            stopped = "stopped: the gradebook was interrupted"
            break
        time.sleep(0.02)
    returncode = process.returncode
    no_sandbox.stop_all(process, job)  # also when it ended by itself: a process it started may still run
    reader.join(timeout=5)
    process.stdout.close()
    return returncode, bytes(kept).decode("utf-8", errors="replace"), stopped


def child_request(step_request, sandboxed):
    """The request as the child reads it: in the sandbox, step 5's tokenizer files are at sandbox.MODELS."""
    if not sandboxed or "checks" not in step_request:
        return step_request
    checks = [{**check, "shared": {**check["shared"], "models_dir": sandbox.MODELS}} if "models_dir" in
              check.get("shared", {}) else check for check in step_request["checks"]]
    return {**step_request, "checks": checks}


def start_child(tree, folder, step_request, seconds, limits, models_dir):
    """(the child answering `step_request` for the hand-in copied into `tree`, its Job Object or None). The
    request and the answers are in `folder`, this step's own: in the sandbox, only the answers' folder is
    writable."""
    request_path, answers = folder / "request.json", folder / "answers"
    answers.mkdir()
    for name in ANSWER_FILES:  # the only files the child can write outside its /tmp: made here, empty
        (answers / name).touch()
    request_path.write_text(json.dumps(replay.encode(child_request(step_request, limits.sandboxed)),
                                       separators=(",", ":")), encoding="utf-8")
    if limits.sandboxed:
        argv = [sys.executable, "-m", "course.probe", sandbox.REQUEST, f"{sandbox.ANSWERS}/answers.json"]
        models = None if models_dir is None else Path(models_dir) / "124M"
        process = sandbox.start(argv, tree, request_path, answers, exercises.REPO, limits.memory,
                                int(seconds) + 2, None if models is None else models)
        return process, None
    argv = [sys.executable, "-m", "course.probe", str(request_path), str(answers / "answers.json")]
    return no_sandbox.start(argv, tree, limits.memory)


def step_answers(tree, folder, step_request, seconds, limits, models_dir, stopping, time_text=None):
    """(the child's answers to `step_request`, or None; why there are none, or ""). Each check has its share of
    the `seconds` (course/probe.check_deadlines); time_text says what they are, for a check that runs past."""
    time_text = time_text or f"the step's time limit of {seconds:g} s"
    timed_request = {**step_request, "time_limit": seconds, "time_text": time_text}
    process, job = start_child(tree, folder, timed_request, seconds, limits, models_dir)
    returncode, output, stopped = run_limited(process, job, seconds, stopping)
    if stopped:
        return None, stopped
    try:
        return hidden.read_answers(folder / "answers" / "answers.json"), ""
    except ValueError as error:
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        return None, f"the run ended with exit code {returncode} and {error}: {last}"


def ran_past_a_share(answers):
    """Whether a check in the child's answers ran past its share of the time (course/probe.TimeUp)."""
    late = f"{probe.TimeUp.__name__}:"  # how the probe's answers start for a case past its check's deadline
    return isinstance(answers, list) and any(isinstance(answer, dict) and str(answer.get("error", "")).startswith(
        late) for check in answers if isinstance(check, list) for answer in check)


def failed_step(step_request, reason):
    return [exercises.Check(check["name"], False, printable(reason)) for check in step_request["checks"]]


def handin_files(submission, used):
    """({name: bytes} of the files taken from the hand-in folder `submission`, a refusal or "", a warning or "").
    Each is read here, never through a link, and only if it is a regular file of at most FILE_CAP bytes; a
    module of its own is taken if its name is not in `used` (the names at the top of the student copy)."""
    submission, files = Path(submission), {}
    names = list(exercises.STUDENT_FILES)
    names += sorted(path.name for path in submission.glob("*.py") if path.stem not in used and path.name not in used)
    for name in names:
        path = submission / name
        if path.is_symlink():
            return {}, f"refused: {name} is a link (to {os.readlink(path)}): hand in the files themselves", ""
        if not path.exists():
            continue
        try:
            with os.fdopen(os.open(path, safe_files.READ_NO_LINK), "rb") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    return {}, f"refused: {name} is not a regular file", ""
                data = file.read(FILE_CAP + 1)
        except OSError as error:
            return {}, f"refused: {name} could not be read ({error.strerror})", ""
        if len(data) > FILE_CAP:
            return {}, f"refused: {name} is larger than {FILE_CAP // 1024} kB", ""
        files[name] = data
    if any(name in files for name in exercises.STUDENT_FILES):
        return files, "", left_out(submission, names)
    names = {Path(file).name for file in exercises.STUDENT_FILES}
    nested = sorted({Path(folder).relative_to(submission).as_posix() for folder, _, found in os.walk(submission)
                     if names & set(found) and Path(folder) != submission})  # os.walk follows no link
    where = f" (they are in {', '.join(nested)}: hand in the files themselves, at the top)" if nested else ""
    return files, "", f"warning: it holds none of {', '.join(exercises.STUDENT_FILES)}{where}"


def left_out(submission, taken):
    """A warning naming the hand-in's modules that are not taken (`taken`: the names read), or "": a module named as
    one of the project's own files (the copy's is used), and a folder of modules (a package: only single files at
    the top are read). A learner's import of either would fail, or find the project's module instead."""
    def holds_modules(folder):  # os.walk follows no link
        return any(name.endswith(".py") for _, _, found in os.walk(folder) for name in found)

    named = sorted(path.name for path in Path(submission).glob("*.py") if path.name not in taken)
    folders = sorted(f"{path.name}/" for path in Path(submission).iterdir()
                     if path.is_dir() and not path.is_symlink() and holds_modules(path))
    notes = ([f"{', '.join(named)} (a name of the project's own: rename it)"] if named else []) + \
        ([f"{', '.join(folders)} (a folder: hand in modules as single files at the top)"] if folders else [])
    return f"warning: left out {'; '.join(notes)}" if notes else ""


def submission_tree(template, files, folder):
    """A copy of the teacher's student copy `template` in `folder`, with the hand-in's `files` written over it."""
    shutil.copytree(template, folder)
    for name, data in files.items():
        (Path(folder) / name).write_bytes(data)


class QueuedBar:
    """What a grading thread calls of the progress bar (`update`, `write`), queued for the main thread, which
    alone touches the tqdm bar (`show_queued`): a worker left holding tqdm's lock once hung a Ctrl-C'd gradebook."""

    def __init__(self):
        self.events = queue.SimpleQueue()

    def update(self):
        self.events.put(None)

    def write(self, text, file=None):  # (always stderr: the only file the gradebook writes progress to)
        self.events.put(text)


class MainThreadBar(tqdm):
    """tqdm without its monitor thread: a Ctrl-C that lands inside the main thread's refresh leaves tqdm's lock
    held (refresh has no try/finally), harmless to the main thread that holds it, but the bar's close waits for
    the monitor thread, which would wait for the lock for ever."""

    monitor_interval = 0


def show_queued(queued, bar):
    """Show on the tqdm `bar` what the grading threads queued on `queued` (a QueuedBar) so far."""
    while True:
        try:
            event = queued.events.get_nowait()
        except queue.Empty:
            return
        bar.update() if event is None else bar.write(event, file=sys.stderr)


def grade_handin(submission, own, template, requests, expected, limits, models_dir, stopping, bar):
    """({step: [Check]}, a warning or "") of one hand-in, graded in the folder `own` (removed after)."""
    used = {path.stem for path in Path(template).iterdir()} | {path.name for path in Path(template).iterdir()}
    files, refusal, warning = handin_files(submission, used)
    if refusal:
        return {n: failed_step(requests[n], refusal) for n in requests}, ""
    own.mkdir()
    submission_tree(template, files, own / "tree")
    checks, deadline = {}, time.monotonic() + limits.budget
    for number, step_request in requests.items():
        seconds = min(limits.time, deadline - time.monotonic())
        if stopping.is_set() or seconds <= 0:
            why = "not run: the gradebook was interrupted" if stopping.is_set() else \
                f"not run: the hand-in's time budget of {limits.budget:g} s was spent"
            checks[number] = failed_step(step_request, why)
            bar.update()
            continue
        folder = own / f"step{number}"
        folder.mkdir()
        short = seconds < limits.time  # the budget, not the step's limit, is what this step has left
        budget = f"its time budget of {limits.budget:g} s"
        answers, why_none = step_answers(own / "tree", folder, step_request, seconds, limits, models_dir, stopping,
                                         f"{budget} (all its steps together)" if short else None)
        if short and (why_none.startswith("ran past") or ran_past_a_share(answers)):
            ran_out = f"{budget} ran out (all its steps together)"
            why_none = why_none and ran_out
            bar.write(f"{printable(submission)}: {ran_out}, at step {number}", file=sys.stderr)
        checks[number] = failed_step(step_request, why_none) if answers is None else \
            hidden.judge(step_request, expected[number], answers)
        bar.update()
    exercises.remove_tree(own)
    return checks, warning


def shipped_checks(number, repo, time_limit=600.0, memory_bytes=MEMORY_CAP_BYTES):
    """[Check] of step `number`'s shipped tests (`classroom.py grade N`) on the folder `repo`, run as the
    gradebook runs a hand-in: in the sandbox, through the probe, under the limits. The report is the learner's
    code speaking (fine for practice, never for a grade); what matters is that it runs the way a grade does."""
    repo = exercises.check_copy(repo)
    limits = Limits(time_limit, memory_bytes, time_limit, sandboxed=True)
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        folder, stopping = Path(scratch), threading.Event()
        process, job = start_child(Path(repo), folder, {"pytest": exercises.pytest_arguments(number)}, time_limit,
                                   limits, hidden.tokenizer_folder(repo))
        try:
            returncode, output, stopped = run_limited(process, job, time_limit, stopping)
        except KeyboardInterrupt:
            no_sandbox.stop_all(process, job)
            raise
        checks = exercises.checks_or_crash(folder / "answers" / "report.xml", returncode, stopped or output)
    return [check._replace(reason=in_the_learners_words(check.reason, repo)) for check in checks]


def in_the_learners_words(reason, repo):
    """A sandboxed check's reason as the learner can act on it: their own folder, not the sandbox's name for it
    ("needs ... in /handin/models/124M"), and a full disk said to be the sandbox's /tmp, which holds what pytest
    captures of the checks' printing."""
    reason = reason.replace(sandbox.HANDIN, str(repo))
    if "No space left on device" in reason:
        reason += (f" (the sandbox's /tmp, {sandbox.TMP_BYTES // 1024**2} MB, was full: it holds what the code "
                   f"prints during a check; print less)")
    return reason


def check_outputs(csv_path, feedback):
    """Before any grading: the CSV's folder exists and a file can be written in it (the CSV is written there
    last, after minutes of grading), and the feedback folder is one (made if missing) that can be written in."""
    folder = Path(csv_path).parent
    if not folder.exists():
        raise ValueError(f"--csv {csv_path}: the folder {folder} does not exist; make it, or name another file")
    check_output_folder(folder, "--csv")  # a file can be made in it (and a file where a folder belongs is said so)
    if Path(csv_path).is_dir():
        raise ValueError(f"--csv {csv_path} is a folder: name a file, like grades.csv")
    if feedback is not None:
        if Path(feedback).exists() and not Path(feedback).is_dir():
            raise ValueError(f"--feedback {feedback} is a file: name a folder for one feedback file per submission")
        if not Path(feedback).parent.is_dir():
            raise ValueError(f"--feedback {feedback}: the folder {Path(feedback).parent} does not exist")
        Path(feedback).mkdir(exist_ok=True)
        check_output_folder(feedback, "--feedback")


def header(steps, points):
    rubrics = [f"step{n} rubric" for n in (11, 12)]
    return ["submission", *(f"step{n} (of {points[n]})" for n in steps), *rubrics, "total", "of", "reasons"]


def feedback_text(shown_name, steps, checks, warning):
    """One hand-in's feedback: each step, each check, pass or why not (every reason already printable)."""
    total = sum(c.passed for n in steps for c in checks[n])
    lines = [f"{shown_name}: {total} of {sum(len(checks[n]) for n in steps)} points", *([warning] if warning else [])]
    for n in steps:
        lines.append(f"\nstep {n}: {sum(c.passed for c in checks[n])} of {len(checks[n])}")
        lines += [f"  {'pass' if c.passed else 'FAIL'}  {c.name}" + ("" if c.passed else f": {c.reason}")
                  for c in checks[n]]
    return "\n".join(lines) + "\n"


def cell(text):
    """A CSV cell that a spreadsheet shows as text: one that would start a formula (=, +, -, @) gets a quote."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") else text


def write_feedback(folder, texts):
    """Write {file name: text} into `folder`, replacing the files the gradebook's last run wrote there (listed in
    exercises.FEEDBACK_LIST; a file the teacher put there is never touched), each file written atomically."""
    listing = Path(folder) / exercises.FEEDBACK_LIST
    try:
        earlier = json.loads(listing.read_text(encoding="utf-8")) if listing.is_file() else []
    except (OSError, ValueError):
        earlier = []
        print(f"note: {listing} is damaged: the earlier run's feedback files are left as they are", file=sys.stderr)
    for name in earlier if isinstance(earlier, list) else []:
        path = Path(folder) / str(name)
        if path.parent == Path(folder) and name not in texts and path.is_file() and not path.is_symlink():
            path.unlink()
    for name, text in texts.items():
        safe_files.write_atomically(Path(folder) / name, text)
    safe_files.write_atomically(listing, json.dumps(sorted(texts), indent=1) + "\n")


def check_limits(time_limit, budget_seconds, memory_bytes, trust_unsandboxed):
    """Limits, checked before any work; sandboxed unless bubblewrap is missing and the teacher said to run the
    hand-ins unsandboxed (ValueError if bubblewrap is missing and they did not)."""
    for value, flag in ((time_limit, "--time_limit"), (budget_seconds, "--budget")):
        if not value > 0:
            raise ValueError(f"{flag} must be a number of seconds above 0; got {value!r}")
    why_not = sandbox.unavailable()
    if why_not and not trust_unsandboxed:
        raise ValueError(f"{why_not}. Without a sandbox a hand-in's code runs as you and can read and change all "
                         f"you can: the gradebook refuses, unless you pass --run_untrusted_code_as_me")
    if why_not:
        print(f"note: no sandbox ({why_not}): the hand-ins run as you, as you asked", file=sys.stderr)
        if memory_bytes is not None and not no_sandbox.memory_cap_works(memory_bytes):
            print("note: this system refuses a memory cap (RLIMIT_AS): memory is not capped, the time limit holds",
                  file=sys.stderr)
            memory_bytes = None
    return Limits(float(time_limit), memory_bytes, float(budget_seconds), not why_not)


def gradebook(submissions, csv_path, steps=exercises.GRADED, time_limit=TIME_LIMIT_SECONDS,
              memory_bytes=MEMORY_CAP_BYTES, repo=exercises.REPO, jobs=None, feedback=None, seed=None,
              budget_seconds=BUDGET_SECONDS, trust_unsandboxed=False):
    """Grade every hand-in folder on `steps` (course/hidden.py's checks, drawn from `seed`, or a fresh one) in
    copies of `repo`'s student copy, each in its sandbox, `jobs` hand-ins at a time (default: the cores); write
    the CSV (a row per hand-in: its folder, a step's points, the rubric columns left to the teacher, the total,
    its maximum, the reasons) and, with `feedback`, one text file per hand-in there. Returns the rows."""
    for number in steps:
        exercises.graded_step(number)
    missing = [printable(s) for s in submissions if not Path(s).is_dir()]
    if missing:
        unpack = " (unpack a ZIP into one first)" if any(str(s).lower().endswith(".zip") for s in missing) else ""
        raise ValueError(f"not a folder: {', '.join(missing)}; a submission is a folder holding the learner's "
                         f"files{unpack}")
    models_dir = hidden.tokenizer_folder(repo)
    if 5 in steps and models_dir is None:
        raise ValueError("step 5 needs OpenAI's tokenizer files in $GPT2_MODELS_DIR/124M or models/124M: run "
                         "`python classroom.py tokenizer` (1.5 MB), then grade again")
    check_outputs(csv_path, feedback)
    limits = check_limits(time_limit, budget_seconds, memory_bytes, trust_unsandboxed)
    seed = secrets.randbits(63) if seed is None else seed
    try:  # drawn and answered by the code of the copy this runs from: the teacher's, every step written
        requests = {n: hidden.request(n, seed, models_dir) for n in steps}
        expected = {n: hidden.expected_answers(requests[n]) for n in steps}
    except NotImplementedError as error:
        raise ValueError(f"the gradebook answers its checks with the code of {exercises.REPO}, which says "
                         f"\"{error}\": a student copy; grade in the teacher's clone, where every step is written") \
            from None
    points = {n: len(requests[n]["checks"]) for n in steps}
    scratch, stopping = Path(tempfile.mkdtemp(prefix="gradebook-")), threading.Event()
    try:
        template = exercises.write_student_copy(repo, scratch / "template")
        with MainThreadBar(total=len(submissions) * len(steps), desc="grading", unit="step") as shown:
            bar = QueuedBar()  # the threads' progress, shown by this one

            def grade_one(i, submission):
                try:
                    checks, warning = grade_handin(submission, scratch / f"submission-{i}", template, requests,
                                                   expected, limits, models_dir, stopping, bar)
                except Exception as error:  # a hand-in that breaks the gradebook's own work: its row says how
                    why = f"the gradebook could not grade it: {type(error).__name__}: {error}"
                    checks, warning = {n: failed_step(requests[n], why) for n in steps}, ""
                warning = printable(warning, 400)  # it may name the hand-in's folders
                if warning:
                    bar.write(f"{printable(submission)}: {warning}", file=sys.stderr)
                return checks, warning

            with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
                try:  # (the submits too: Ctrl-C among them must stop those already running)
                    futures = [pool.submit(grade_one, i, s) for i, s in enumerate(submissions)]
                    while wait(futures, timeout=0.1).not_done:  # the threads' progress shown meanwhile
                        show_queued(bar, shown)
                    graded = [future.result() for future in futures]
                except KeyboardInterrupt:  # every running step ends within moments; then the pool closes
                    stopping.set()
                    raise
                finally:
                    show_queued(bar, shown)
        rows, texts = [header(steps, points)], {}
        for i, (submission, (checks, warning)) in enumerate(zip(submissions, graded)):
            scores, shown_name = [sum(c.passed for c in checks[n]) for n in steps], printable(submission, 300)
            reasons = [warning] if warning else []
            reasons += [f"step {n}: {c.name}: {c.reason}" for n in steps for c in checks[n] if not c.passed]
            rows.append([cell(shown_name), *scores, "", "", sum(scores), sum(points.values()), "; ".join(reasons)])
            texts[f"{i + 1:03d}-{printable(Path(submission).resolve().name, 80)}.txt".replace("/", "_")] = \
                feedback_text(shown_name, steps, checks, warning)
        with safe_files.written_atomically(Path(csv_path), "w", encoding="utf-8", newline="") as out:
            csv.writer(out).writerows(rows)  # a fresh file renamed into place: never half a file, never through a link
        if feedback is not None:
            write_feedback(feedback, texts)
    finally:
        exercises.remove_tree(scratch)
    return rows
