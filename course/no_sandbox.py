"""Running a hand-in without a sandbox, as the teacher: only when the teacher asks for it by name.

Read course/sandbox.py first: where bubblewrap is missing (macOS, Windows, a Linux without it) the gradebook
refuses to grade unless the teacher passes --run_untrusted_code_as_me. Then each step runs here, as the teacher,
in a child process that:
- is started in a process group of its own (a new session on POSIX), and at its end the whole group is killed
  (a process that starts a session of its own escapes it: only the sandbox's PID namespace stops that);
- has a memory cap: on POSIX `resource.setrlimit(RLIMIT_AS)` in the child before it starts Python (macOS
  refuses the cap: `memory_cap_works` says so, and the gradebook grades with the time limit alone). On Windows
  the child is put in a Job Object (through ctypes) with a memory limit for the whole job and "kill on close":
  closing the job ends every process in it. The child runs a few moments before it joins the job (Popen cannot
  start it suspended); if Windows refuses the job, the step runs without a memory cap and its tree is ended with
  `taskkill /T`.
What it cannot do is hide the teacher's files, environment or terminal from the hand-in's code.
"""

import ctypes
import os
import signal
import subprocess
import sys

from course import exercises

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
