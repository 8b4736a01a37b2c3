"""Grade many submissions, each step in its own process with a time limit and a memory cap, into one CSV file.

Read course/exercises.py first (the steps, the student copy, one step's checks run and read back).

A submission is a folder holding a learner's versions of the files they write (exercises.STUDENT_FILES). It is
never trusted, neither its files nor what its code says:
- only those files are taken from it (and a module of its own the copy does not have, like my_helpers.py),
  into a fresh copy of the teacher's own student copy (the teacher's clean tests and kit; never the
  submission's tests, conftest.py, fixtures or copy of the kit). A file it lacks stays blank
  (NotImplementedError); a submission holding none of them gets a warning, naming the folder they are in;
- it is graded on course/hidden.py's checks, drawn from a fresh seed when the gradebook starts: its child only
  calls its functions and writes down what they return (course/probe.py), and this process compares the
  answers with the reference's. Its score rests on no report, exit code or file the child writes about itself.
Each step of each submission runs in a child process that:
- has a time limit: at the limit the child is stopped WITH every process it started. On POSIX it is started
  in a new session (its own process group), and the whole group is killed (a process that starts a session
  of its own escapes it); on Windows its Job Object is closed;
- has a memory cap: on POSIX `resource.setrlimit(RLIMIT_AS)` in the child before it starts Python (the
  module `resource` exists on POSIX only and is imported there only; macOS refuses the cap, and the
  gradebook then says so and grades with the time limit alone). On Windows the child is put in a Job
  Object (through ctypes) with a memory limit for the whole job and "kill on close": closing the job ends
  every process in it. The child runs a few moments before it joins the job (Popen cannot start it
  suspended), too early to have started anything; if Windows refuses the job, the gradebook says so and
  grades without a memory cap, ending the child's tree with `taskkill /T`;
- has its output read up to a cap: a child that prints more than OUTPUT_CAP bytes is stopped.
A check scores 1 point when every one of its cases gives the reference's answer; grading goes on either way.
Submissions are graded `jobs` at a time (default: the cores), each one's steps one after another.
"""

import csv
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from course import exercises
from course import hidden
from course import replay
from loaders import safe_files

TIME_LIMIT_SECONDS = 120.0
MEMORY_CAP_BYTES = 2 * 1024**3
OUTPUT_CAP = 1024**2  # bytes of output a step may print before it is stopped
KEPT_OUTPUT = 16 * 1024  # bytes of that output kept to explain a crash
ON_WINDOWS = os.name == "nt"


def posix_memory_cap(memory_bytes):
    """A function for Popen's preexec_fn: caps the child's address space. POSIX only (None on Windows, where
    the Job Object caps memory), and None for no cap."""
    if ON_WINDOWS or memory_bytes is None:
        return None

    def cap():
        import resource  # POSIX only: imported in the child, never on Windows

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return cap


class BasicLimits(ctypes.Structure):
    """JOBOBJECT_BASIC_LIMIT_INFORMATION, with fixed-width fields (a DWORD is 4 bytes on every platform)."""

    _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", ctypes.c_uint32), ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", ctypes.c_uint32),
                ("Affinity", ctypes.c_size_t), ("PriorityClass", ctypes.c_uint32), ("SchedulingClass", ctypes.c_uint32)]


class ExtendedLimits(ctypes.Structure):
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION: the basic limits, I/O counters (6 counts), the memory limits."""

    _fields_ = [("BasicLimitInformation", BasicLimits), ("IoInfo", ctypes.c_uint64 * 6),
                ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]


JOB_OBJECT_LIMIT_JOB_MEMORY, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x200, 0x2000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9  # the JOBOBJECTINFOCLASS of ExtendedLimits


def windows_job(process, memory_bytes):
    """A Job Object holding `process`, with a memory limit and kill-on-close; None if Windows refuses one."""
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.CreateJobObjectW.restype = ctypes.c_void_p
    kernel32.SetInformationJobObject.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32]
    kernel32.AssignProcessToJobObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    job = kernel32.CreateJobObjectW(None, None)
    limits = ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_JOB_MEMORY | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    limits.JobMemoryLimit = memory_bytes
    if job and kernel32.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.byref(limits),
                                                ctypes.sizeof(limits)) \
            and kernel32.AssignProcessToJobObject(job, int(process._handle)):
        return job
    print(f"note: Windows refused a Job Object (error {ctypes.get_last_error()}): this step runs without a memory "
          f"cap", file=sys.stderr)
    return None


def start(command, cwd, memory_bytes):
    """(the child, its Windows Job Object or None): in its own process group (a session on POSIX), under the
    memory cap."""
    common = dict(cwd=cwd, env=exercises.child_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT)
    if ON_WINDOWS:
        process = subprocess.Popen(command, creationflags=subprocess.CREATE_NEW_PROCESS_GROUP, **common)
        return process, None if memory_bytes is None else windows_job(process, memory_bytes)
    return subprocess.Popen(command, start_new_session=True, preexec_fn=posix_memory_cap(memory_bytes), **common), None


def stop_all(process, job=None):
    """Kill the child and every process it started (its process group on POSIX; its Job Object, or its tree,
    on Windows)."""
    if ON_WINDOWS and job is not None:
        ctypes.WinDLL("kernel32").CloseHandle(ctypes.c_void_p(job))  # kill-on-close: every process of the job
    elif ON_WINDOWS:
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], capture_output=True)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group's id is the child's pid (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass  # every process of the group has ended already
    process.kill()
    process.wait()


def run_limited(command, cwd, time_limit, memory_bytes, output_cap=OUTPUT_CAP):
    """(return code, the output's first KEPT_OUTPUT bytes, why it was stopped or ""), running `command` under
    the limits. Whatever happens, no process it started is left running."""
    process, job = start(command, cwd, memory_bytes)
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
        time.sleep(0.05)
    returncode = process.returncode
    stop_all(process, job)  # also when it ended by itself: a process it started may still run
    reader.join(timeout=5)
    process.stdout.close()
    return returncode, bytes(kept).decode("utf-8", errors="replace"), stopped


def step_answers(tree, scratch, step_request, time_limit, memory_bytes):
    """(the child's answers to `step_request` in the folder `tree`, or None; why there are none, or ""). The
    request and the answers are files in `scratch`, this submission's own folder beside its tree."""
    number = step_request["step"]
    request_path, answers_path = Path(scratch) / f"step{number}-request.json", Path(scratch) / f"step{number}-answers.json"
    request_path.write_text(json.dumps(replay.encode(step_request), separators=(",", ":")), encoding="utf-8")
    command = [sys.executable, "-m", "course.probe", str(request_path), str(answers_path)]
    returncode, output, stopped = run_limited(command, tree, time_limit, memory_bytes)
    if stopped:
        return None, stopped
    try:
        return hidden.read_answers(answers_path), ""
    except ValueError as error:
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        return None, f"the run ended with exit code {returncode} and {error}: {last[:200]}"


def grade_step(tree, scratch, step_request, expected, time_limit, memory_bytes):
    """[Check] of one step of a submission: its child's answers judged against the reference's, here."""
    answers, why_none = step_answers(tree, scratch, step_request, time_limit, memory_bytes)
    if answers is None:
        return [exercises.Check(check["name"], False, why_none) for check in step_request["checks"]]
    return hidden.judge(step_request, expected, answers)


def submission_tree(template, submission, folder):
    """A copy of the teacher's student copy `template` in `folder`, with the submission's own STUDENT_FILES and
    any module of its own at its top (my_helpers.py: a name the copy does not use), as it ran for the learner.
    Returns a warning ("" if none): a submission holding none of the files graded is most likely misplaced."""
    shutil.copytree(template, folder)
    submission, taken = Path(submission), []
    for file in exercises.STUDENT_FILES:
        if (submission / file).is_file():
            shutil.copyfile(submission / file, Path(folder) / file)
            taken.append(file)
    used = {path.stem for path in Path(template).iterdir()} | {path.name for path in Path(template).iterdir()}
    for module in sorted(submission.glob("*.py")):
        if module.stem not in used and module.is_file():
            shutil.copyfile(module, Path(folder) / module.name)
    if taken:
        return ""
    nested = sorted({path.parent.relative_to(submission).as_posix() for file in exercises.STUDENT_FILES
                     for path in submission.rglob(Path(file).name) if path.parent != submission})
    where = f" (they are in {', '.join(nested)}: hand in the files themselves, at the top)" if nested else ""
    return f"warning: it holds none of {', '.join(exercises.STUDENT_FILES)}{where}"


def check_outputs(csv_path, feedback):
    """Before any grading: the CSV's folder exists, and the feedback folder is one (made if missing)."""
    folder = Path(csv_path).parent
    if not folder.is_dir():
        raise ValueError(f"--csv {csv_path}: the folder {folder} does not exist; make it, or name another file")
    if Path(csv_path).is_dir():
        raise ValueError(f"--csv {csv_path} is a folder: name a file, like grades.csv")
    if feedback is not None:
        if Path(feedback).exists() and not Path(feedback).is_dir():
            raise ValueError(f"--feedback {feedback} is a file: name a folder for one feedback file per submission")
        if not Path(feedback).parent.is_dir():
            raise ValueError(f"--feedback {feedback}: the folder {Path(feedback).parent} does not exist")
        Path(feedback).mkdir(exist_ok=True)


def memory_cap_works(memory_bytes):
    """Whether this system lets the child's memory be capped (macOS refuses RLIMIT_AS since macOS 12): a child
    that does nothing is started under the cap."""
    if ON_WINDOWS:
        return True
    try:
        subprocess.run([sys.executable, "-c", ""], preexec_fn=posix_memory_cap(memory_bytes), check=False)
    except subprocess.SubprocessError:  # the cap raised in the child before Python started
        return False
    return True


def header(steps, points):
    rubrics = [f"step{n} rubric" for n in (11, 12)]
    return ["submission", *(f"step{n} (of {points[n]})" for n in steps), *rubrics, "total", "of", "reasons"]


def feedback_text(submission, steps, checks, warning):
    """One submission's feedback: each step, each check, pass or why not."""
    total = sum(c.passed for n in steps for c in checks[n])
    lines = [f"{submission}: {total} of {sum(len(checks[n]) for n in steps)} points", *([warning] if warning else [])]
    for n in steps:
        lines.append(f"\nstep {n}: {sum(c.passed for c in checks[n])} of {len(checks[n])}")
        lines += [f"  {'pass' if c.passed else 'FAIL'}  {c.name}" + ("" if c.passed else f": {c.reason}")
                  for c in checks[n]]
    return "\n".join(lines) + "\n"


def gradebook(submissions, csv_path, steps=exercises.GRADED, time_limit=TIME_LIMIT_SECONDS,
              memory_bytes=MEMORY_CAP_BYTES, repo=exercises.REPO, jobs=None, feedback=None, seed=None):
    """Grade every submission folder on `steps` (course/hidden.py's checks, drawn from `seed`, or a fresh one)
    in copies of `repo`'s student copy, `jobs` submissions at a time (default: the cores); write the CSV (a
    row per submission: its folder, a step's points, the rubric columns left to the teacher, the total, its
    maximum, the reasons) and, with `feedback`, one text file per submission there. Returns the rows."""
    for number in steps:
        exercises.graded_step(number)
    missing = [str(s) for s in submissions if not Path(s).is_dir()]
    if missing:
        raise ValueError(f"not a folder: {', '.join(missing)}; a submission is a folder holding the learner's files")
    models_dir = hidden.tokenizer_folder(repo)
    if 5 in steps and models_dir is None:
        raise ValueError("step 5 needs OpenAI's tokenizer files in models/124M or $GPT2_MODELS_DIR/124M: run "
                         "`python classroom.py tokenizer` (1.5 MB), then grade again")
    check_outputs(csv_path, feedback)
    if memory_bytes is not None and not memory_cap_works(memory_bytes):
        print("note: this system refuses a memory cap (RLIMIT_AS): memory is not capped, the time limit holds",
              file=sys.stderr)
        memory_bytes = None
    seed = secrets.randbits(63) if seed is None else seed
    requests = {n: hidden.request(n, seed, models_dir) for n in steps}
    expected = {n: hidden.expected_answers(requests[n]) for n in steps}
    points = {n: len(requests[n]["checks"]) for n in steps}
    scratch = Path(tempfile.mkdtemp(prefix="gradebook-"))
    try:
        template = exercises.write_student_copy(repo, scratch / "template")
        with tqdm(total=len(submissions) * len(steps), desc="grading", unit="step") as bar:
            def grade_one(i, submission):
                own = scratch / f"submission-{i}"
                own.mkdir()
                warning = submission_tree(template, submission, own / "tree")
                if warning:
                    tqdm.write(f"{submission}: {warning}", file=sys.stderr)
                checks = {}
                for number in steps:
                    checks[number] = grade_step(own / "tree", own, requests[number], expected[number], time_limit,
                                                memory_bytes)
                    bar.update()
                exercises.remove_tree(own)
                return checks, warning

            with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
                graded = list(pool.map(grade_one, range(len(submissions)), submissions))
        rows = [header(steps, points)]
        for i, (submission, (checks, warning)) in enumerate(zip(submissions, graded)):
            scores = [sum(c.passed for c in checks[n]) for n in steps]
            reasons = [warning] if warning else []
            reasons += [f"step {n}: {c.name}: {c.reason}" for n in steps for c in checks[n] if not c.passed]
            rows.append([str(submission), *scores, "", "", sum(scores), sum(points.values()), "; ".join(reasons)])
            if feedback is not None:
                name = f"{i + 1:03d}-{Path(submission).resolve().name}.txt"
                (Path(feedback) / name).write_text(feedback_text(submission, steps, checks, warning), encoding="utf-8")
        with safe_files.written_atomically(Path(csv_path), "w", encoding="utf-8", newline="") as out:
            csv.writer(out).writerows(rows)  # a fresh file renamed into place: never half a file, never through a link
    finally:
        exercises.remove_tree(scratch)
    return rows
