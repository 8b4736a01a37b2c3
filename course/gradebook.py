"""Grade many submissions, each step in its own process with a time limit and a memory cap, into one CSV file.

Read course/exercises.py first (the steps, the student copy, one step's checks run and read back).

A submission is a folder holding a learner's versions of the files they write (exercises.STUDENT_FILES). It is
never trusted: only those files are taken from it, into a fresh copy of the teacher's own student copy (the
teacher's clean tests, fixtures and kit; never the submission's tests, conftest.py, fixtures or copy of the
kit). A file it lacks stays blank (NotImplementedError). Each step then runs in a child process that:
- has a time limit: at the limit the child is stopped WITH every process it started. On POSIX it is started
  in a new session (its own process group), and the whole group is killed (a process that starts a session
  of its own escapes it); on Windows its Job Object is closed;
- has a memory cap: on POSIX `resource.setrlimit(RLIMIT_AS)` in the child before it starts Python (the
  module `resource` exists on POSIX only and is imported there only). On Windows the child is put in a Job
  Object (through ctypes) with a memory limit for the whole job and "kill on close": closing the job ends
  every process in it. The child runs a few moments before it joins the job (Popen cannot start it
  suspended), too early to have started anything; if Windows refuses the job, the gradebook says so and
  grades without a memory cap, ending the child's tree with `taskkill /T`;
- has its output read up to a cap: a child that prints more than OUTPUT_CAP bytes is stopped.
A step scores 1 when every check passed, else 0 with a one-line reason; grading goes on either way.
"""

import csv
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

from course import exercises
from loaders import safe_files

TIME_LIMIT_SECONDS = 120.0
MEMORY_CAP_BYTES = 2 * 1024**3
OUTPUT_CAP = 1024**2  # bytes of output a step may print before it is stopped
KEPT_OUTPUT = 16 * 1024  # bytes of that output kept to explain a crash
ON_WINDOWS = os.name == "nt"


def posix_memory_cap(memory_bytes):
    """A function for Popen's preexec_fn: caps the child's address space. POSIX only (None on Windows, where
    the Job Object caps memory)."""
    if ON_WINDOWS:
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
        return process, windows_job(process, memory_bytes)
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


def grade_step(tree, number, time_limit, memory_bytes):
    """(score 0 or 1, reason) of step `number` in the folder `tree`."""
    with tempfile.TemporaryDirectory(prefix="gradebook-report-") as scratch:
        report = Path(scratch) / "report.xml"
        # --capture=no: what the checks print comes to the gradebook, which reads it up to OUTPUT_CAP
        command = exercises.pytest_command(number, report, "--capture=no")
        returncode, output, stopped = run_limited(command, tree, time_limit, memory_bytes)
        if stopped:
            return 0, stopped
        checks = exercises.checks_or_crash(report, returncode, output)
    failed = [check for check in checks if not check.passed]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return 0, f"{failed[0].name}: {failed[0].reason}{more}"
    return 1, ""


def submission_tree(template, submission, folder):
    """A copy of the teacher's student copy `template` in `folder`, with the submission's own STUDENT_FILES."""
    shutil.copytree(template, folder)
    for file in exercises.STUDENT_FILES:
        if (Path(submission) / file).is_file():
            shutil.copyfile(Path(submission) / file, Path(folder) / file)
    return folder


def gradebook(submissions, csv_path, steps=exercises.GRADED, time_limit=TIME_LIMIT_SECONDS,
              memory_bytes=MEMORY_CAP_BYTES, repo=exercises.REPO):
    """Grade every submission folder on `steps` with the teacher's repository `repo`; write the CSV (a row per
    submission: its folder, a column per step, the total, the reasons); return the rows."""
    for number in steps:
        exercises.graded_step(number)
    missing = [str(s) for s in submissions if not Path(s).is_dir()]
    if missing:
        raise ValueError(f"not a folder: {', '.join(missing)}; a submission is a folder holding the learner's files")
    rows = [["submission", *(f"step{n}" for n in steps), "total", "reasons"]]
    scratch = Path(tempfile.mkdtemp(prefix="gradebook-"))
    try:
        template = exercises.write_student_copy(repo, scratch / "template")
        with tqdm(total=len(submissions) * len(steps), desc="grading", unit="step") as bar:
            for i, submission in enumerate(submissions):
                tree = submission_tree(template, submission, scratch / f"submission-{i}")
                scores, reasons = [], []
                for number in steps:
                    bar.set_postfix_str(f"{Path(submission).name} step {number}")
                    score, reason = grade_step(tree, number, time_limit, memory_bytes)
                    scores.append(score)
                    if reason:
                        reasons.append(f"step {number}: {reason}")
                    bar.update()
                rows.append([str(submission), *scores, sum(scores), "; ".join(reasons)])
                exercises.remove_tree(tree)
        with safe_files.written_atomically(Path(csv_path), "w", encoding="utf-8", newline="") as out:
            csv.writer(out).writerows(rows)  # a fresh file renamed into place: never half a file, never through a link
    finally:
        exercises.remove_tree(scratch)
    return rows
