"""The sandbox each hand-in runs in: bubblewrap, a namespace sandbox that needs no root, with limits around it.

Read course/gradebook.py first (what runs in it: the probe, one step of one hand-in).

A hand-in's code runs as the teacher. Without a sandbox it can read the teacher's clone (the reference is one
import away, through /proc/<ppid>/cwd or a search of the disk), write into it and into the other hand-ins, leave
processes behind and files in /tmp. Autograders grade in containers for this reason (Otter-Grader and Gradescope
use Docker); on Linux, bubblewrap (`bwrap`, Debian/Ubuntu's package `bubblewrap`, used by Flatpak) makes the same
kind of sandbox from the kernel's namespaces, without root and without a daemon. Inside, the hand-in sees:
- /handin: its own copy (the teacher's student copy with the hand-in's files), read-only, as the working folder;
- /request.json read-only, and the files in /answers (answers.json, report.xml), the only files outside /tmp
  it can write (each a file the gradebook made, bound alone: it can make no new one there), read back after;
- the Python and the packages it runs with, read-only (the interpreter's folders; /usr; the 124M folder at
  /models/124M for step 5's tokenizer files), and nothing else of the disk: not the teacher's clone, home or other hand-ins;
- a private /tmp and /dev/shm (tmpfs of TMP_BYTES each, gone with the sandbox; the rest read-only, bwrap's
  own / and /dev included), an empty environment but for
  ENVIRONMENT, no network, its own hostname, its own process IDs (/proc shows only its own processes, and when
  the sandbox's first process ends the kernel ends every other one: setsid and double forks do not escape);
- no new processes: a seccomp filter (`bwrap --seccomp`) refuses fork, vfork and every clone that is not a
  thread, so the memory cap on the one process (RLIMIT_AS) caps the whole hand-in; RLIMIT_CPU caps its CPU
  time, RLIMIT_FSIZE the size of any file it writes, RLIMIT_NOFILE its open files.
Where bubblewrap is missing or the kernel refuses it (`unavailable` says why), the gradebook refuses to grade
unless the teacher says, with --run_untrusted_code_as_me, that hand-ins may run as them.
"""

import os
import platform
import shutil
import site
import struct
import subprocess
import sys
from pathlib import Path

TMP_BYTES = 64 * 1024**2  # the size of the sandbox's /tmp, and of its /dev/shm
FILE_BYTES = 65 * 1024**2  # the largest file the hand-in may write (RLIMIT_FSIZE): the answers' cap and a little
OPEN_FILES = 256  # RLIMIT_NOFILE
ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONUTF8": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
HANDIN, REQUEST, ANSWERS, MODELS = "/handin", "/request.json", "/answers", "/models"
INSTALL = "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`)"

# --- the seccomp filter: threads yes, processes no --------------------------------------------------------
# A classic BPF program over `struct seccomp_data` {int nr; u32 arch; u64 ip; u64 args[6]}, as bwrap --seccomp
# takes it. Each instruction is (code, jump if true, jump if false, k).
LOAD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06
ALLOW, ERRNO, KILL = 0x7FFF0000, 0x00050000, 0x80000000
EPERM, ENOSYS, CLONE_THREAD = 1, 38, 0x00010000
ARCHES = {  # machine: (AUDIT_ARCH_*, fork, vfork, clone, clone3; None where the call does not exist)
    "x86_64": (0xC000003E, 57, 58, 56, 435),
    "aarch64": (0xC00000B7, None, None, 220, 435),
}


def no_processes_filter(machine=None):
    """The seccomp program (bytes) that lets a process start threads but no process: fork and vfork fail with
    EPERM, clone3 with ENOSYS (glibc then starts its threads with clone), clone without CLONE_THREAD with EPERM.
    A system call of another architecture (x86_64's 32-bit ones) kills the process."""
    arch, fork, vfork, clone, clone3 = ARCHES[machine or platform.machine()]
    refused = [nr for nr in (fork, vfork) if nr is not None]
    program = [(LOAD, 0, 0, 4), (JUMP_EQUAL, 1, 0, arch), (RETURN, 0, 0, KILL), (LOAD, 0, 0, 0)]
    if arch == ARCHES["x86_64"][0]:  # the x32 calls (nr | 0x40000000) are refused as a whole
        program += [(JUMP_AT_LEAST, 0, 1, 0x40000000), (RETURN, 0, 0, ERRNO | EPERM)]
    for nr in refused:
        program += [(JUMP_EQUAL, 0, 1, nr), (RETURN, 0, 0, ERRNO | EPERM)]
    program += [(JUMP_EQUAL, 0, 1, clone3), (RETURN, 0, 0, ERRNO | ENOSYS),
                (JUMP_EQUAL, 1, 0, clone), (RETURN, 0, 0, ALLOW),
                (LOAD, 0, 0, 16),  # args[0], clone's flags (its low 32 bits: little-endian)
                (JUMP_ANY_BIT, 0, 1, CLONE_THREAD), (RETURN, 0, 0, ALLOW), (RETURN, 0, 0, ERRNO | EPERM)]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)


# --- what the sandbox sees --------------------------------------------------------------------------------


def python_folders(teachers_clone):
    """The folders the interpreter runs from (its installation, its virtual environment, its site-packages),
    leaving out any that holds the teacher's clone (an installation above it would show the clone). A virtual
    environment inside the clone (the README's .venv) is shown, and nothing else of the clone."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  str(Path(sys.executable).resolve().parent.parent), *site.getsitepackages()}
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        candidates.add(site.getusersitepackages())
    clone = Path(teachers_clone).resolve()
    folders = {Path(c).resolve() for c in candidates if os.path.isdir(c)}
    folders = {f for f in folders if f != clone and f not in clone.parents}  # a .venv inside the clone: itself only
    return sorted(f for f in folders if not any(other in f.parents for other in folders))  # the outermost


def system_mounts():
    """bwrap arguments for the system's own programs and libraries: /usr read-only; /bin, /lib, ... as the links
    into /usr they are on a merged-/usr system, else read-only too; the dynamic linker's cache."""
    arguments = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            arguments += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            arguments += ["--ro-bind", name, name]
    for name in ("/etc/ld.so.cache", "/etc/alternatives"):
        if os.path.exists(name):
            arguments += ["--ro-bind", name, name]
    return arguments


def command(argv, handin, request, answers, teachers_clone, seccomp, models=None):
    """The bwrap command line running `argv` in the sandbox: `handin` at HANDIN (read-only, the working folder),
    `request` at REQUEST, each file of the folder `answers` in ANSWERS (writable), `models` (a 124M folder: the tokenizer
    files) at MODELS/124M. The
    seccomp program is read from the file descriptor `seccomp` (`start` passes it to the child)."""
    arguments = ["--unshare-all", "--die-with-parent", "--new-session", "--hostname", "handin",
                 "--clearenv", *(part for key, value in ENVIRONMENT.items() for part in ("--setenv", key, value)),
                 *system_mounts(), "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
                 "--size", str(TMP_BYTES), "--tmpfs", "/dev/shm"]
    for folder in python_folders(teachers_clone):  # after /tmp's tmpfs, which would hide a clone's .venv in /tmp
        arguments += ["--ro-bind", str(folder), str(folder)]
    arguments += ["--ro-bind", str(handin), HANDIN, "--ro-bind", str(request), REQUEST]
    for file in sorted(Path(answers).iterdir()):  # each file, not the folder: no new file, the disk not filled
        arguments += ["--bind", str(file), f"{ANSWERS}/{file.name}"]
    if models is not None:
        arguments += ["--ro-bind", str(models), f"{MODELS}/124M", "--setenv", "GPT2_MODELS_DIR", MODELS]
    arguments += ["--remount-ro", "/", "--remount-ro", "/dev"]  # bwrap's own tmpfs: memory no cap would count
    return [shutil.which("bwrap") or "bwrap", *arguments, "--chdir", HANDIN, "--seccomp", str(seccomp), "--", *argv]


def limits(memory_bytes, cpu_seconds):
    """A function for Popen's preexec_fn: the hand-in's resource limits, set before bwrap starts (and so
    inherited by everything in the sandbox). memory_bytes None: no memory cap."""
    def apply():
        import resource  # Linux only, as bubblewrap is

        for kind, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_seconds),
                            (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_NOFILE, OPEN_FILES),
                            (resource.RLIMIT_CORE, 0)):
            if value is not None:
                resource.setrlimit(kind, (value, value))

    return apply


def filter_descriptor():
    """A file descriptor holding the seccomp program, at offset 0, for bwrap to read (the caller closes it)."""
    read_end, write_end = os.pipe()
    os.write(write_end, no_processes_filter())  # far under a pipe's 64 kB buffer
    os.close(write_end)
    return read_end


def unavailable():
    """"" when a sandbox can be made here, else one line saying why not and what to do."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap, the sandbox hand-ins are graded in, runs on Linux only (this is {sys.platform})"
    if platform.machine() not in ARCHES:
        return f"the sandbox's seccomp filter knows {' and '.join(ARCHES)} only (this is {platform.machine()})"
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL}"
    descriptor = filter_descriptor()
    try:
        trial = subprocess.run(["bwrap", "--unshare-all", "--die-with-parent", *system_mounts(), "--seccomp", str(descriptor),
                                "--", "/bin/sh", "-c", "true"], pass_fds=(descriptor,), capture_output=True,
                               text=True, errors="replace", timeout=60)
    finally:
        os.close(descriptor)
    if trial.returncode != 0:
        why = (trial.stderr.strip().splitlines() or ["no message"])[-1]
        return (f"bubblewrap cannot make a sandbox here ({why[:200]}): the kernel must allow unprivileged user "
                f"namespaces (Ubuntu 24.04: an AppArmor profile for bwrap, or sysctl kernel.apparmor_restrict_"
                f"unprivileged_userns=0)")
    return ""


def start(argv, handin, request, answers, teachers_clone, memory_bytes, cpu_seconds, models=None):
    """The running sandbox (a Popen, its output a pipe, in a session of its own so that the gradebook can end it
    whole) running `argv` as `command` describes, under `limits`: memory_bytes of address space (None: no cap)
    and cpu_seconds of CPU time."""
    descriptor = filter_descriptor()
    try:
        return subprocess.Popen(command(argv, handin, request, answers, teachers_clone, descriptor, models),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                pass_fds=(descriptor,), start_new_session=True,
                                preexec_fn=limits(memory_bytes, cpu_seconds))
    finally:
        os.close(descriptor)  # the child holds its own copy
