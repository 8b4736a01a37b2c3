"""Writing files safely: a fresh file renamed into place (never through a link), and a lock between two runs.

Nothing to read before it (it needs only Python's os); read it before loaders/download.py, which locks each
download with `file_lock` and creates its NAME.part with CREATE_NEW, as `written_atomically` creates its file.
speed/calibration.py's costs file, the Hub cache (loaders/hub.py), and the figures and tables of show.py and tools/
are written with them.

1. `written_atomically(path)`: what is written goes into a new file that this run creates (O_CREAT | O_EXCL: the
   name did not exist, so there is no link to follow) in the folder of `path`, and is renamed over `path` once
   it is complete (os.replace: atomic, and a link at `path` is replaced, never written through). So a file under
   its final name is never half-written, and a link left in a folder (`r_table.json.part` -> a file elsewhere)
   never carries a write outside it.
2. `file_lock(path, ...)`: two runs filling one folder at once (two terminals, a shared lab machine) take turns
   per file: the first creates `path.lock` (O_CREAT | O_EXCL, so only one can) holding its process id, host and
   how long it may hold it; the second waits, with a message, for at most its own deadline, and then finds the
   file done. A lock left by a run that was killed never blocks for ever: it is stale as soon as its process is
   gone (same host), or once the time its owner wrote in it has passed (any host).
3. `new_folders(path)` before making a folder and `remove_if_empty(them)` after a failure: a run takes away only
   the folders it made and left empty, never one the user had or one holding a file.
"""

import json
import os
import secrets
import socket
import stat
import sys
import time
from contextlib import contextmanager
from itertools import takewhile
from pathlib import Path

# Open a new file for writing: fails if the name exists (even as a dangling link), so nothing is followed.
# O_BINARY: Windows would otherwise translate "\n" in what os.fdopen(..., "wb") writes.
CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
# Open to read, never through a link, and without waiting for a writer if a named pipe stands there
READ_NO_LINK = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def create_fresh_file(folder, name):
    """(file descriptor, path) of a new empty file `.NAME.<random>.tmp` in `folder`, made by this call (O_EXCL),
    with the permissions a new file gets (0o666 less the umask)."""
    while True:
        path = Path(folder) / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(path, CREATE_NEW, 0o666), path
        except FileExistsError:  # 48 random bits met an existing name: try another
            continue


@contextmanager
def written_atomically(path, mode="wb", encoding=None, newline=None):
    """Inside: a file object to write `path`'s new contents into (mode, encoding and newline as for open). On a
    normal exit it is renamed over `path` (atomic; a link at `path` is replaced, not followed); on an error it
    is removed and `path` stays as it was. An OSError of the writing (a full disk), which names no file, is
    given `path`'s name, so that its one-line error says which file could not be written.

        with written_atomically("grades.csv", "w", encoding="utf-8", newline="") as file:
            csv.writer(file).writerows(rows)
    """
    path = Path(path)
    descriptor, temporary = create_fresh_file(path.parent, path.name)
    try:
        with os.fdopen(descriptor, mode, encoding=encoding, newline=newline) as file:
            yield file
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:
            error.filename = str(path)
        raise


def write_atomically(path, data, encoding="utf-8"):
    """Write `data` (str or bytes) as the whole of `path` through written_atomically; return `path`."""
    text = isinstance(data, str)
    with written_atomically(path, "w" if text else "wb", encoding=encoding if text else None) as file:
        file.write(data)
    return Path(path)


def save_figure(figure, path, **savefig_options):
    """matplotlib's figure.savefig(path), through written_atomically (the format from the name's suffix)."""
    with written_atomically(path) as file:
        figure.savefig(file, format=Path(path).suffix.lstrip(".").lower() or None, **savefig_options)


# ------------------------------------------------------------------------------------------------------------
# A lock between runs: path.lock, made with O_EXCL
# ------------------------------------------------------------------------------------------------------------


class LockTimeout(RuntimeError):
    """Another run held the lock for longer than this run may wait; the message names the lock and the owner."""


def process_is_alive(pid):
    """Whether a process `pid` runs on this machine (Linux, macOS: signal 0; Windows: OpenProcess, since
    os.kill there would end the process)."""
    if pid == os.getpid():
        return True
    if os.name == "nt":
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return False
        try:
            return kernel32.WaitForSingleObject(handle, 0) == 0x102  # WAIT_TIMEOUT: still running
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it runs, as another user
        return True
    return True


def read_lock(lock):
    """The owner a lock file names ({"pid": int, "host": str, "until": seconds since the epoch}), or None if it
    says nothing readable (a lock being written this instant, a link, a pipe, not one of ours)."""
    try:
        with os.fdopen(os.open(lock, READ_NO_LINK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            owner = json.loads(file.read(1000))
    except (OSError, ValueError):
        return None
    kinds = {"pid": int, "host": str, "until": (int, float)}
    good = isinstance(owner, dict) and all(isinstance(owner.get(key), kind) for key, kind in kinds.items())
    return owner if good and 0 < owner["pid"] < 2**31 else None


def lock_is_stale(lock, owner):
    """A lock is stale when its process is gone (on this host), once the time its owner wrote has passed, or if
    it has said nothing readable for 10 seconds since it was made."""
    if owner is None:
        try:
            return time.time() - os.lstat(lock).st_mtime > 10
        except OSError:
            return False
    if owner["host"] == socket.gethostname() and not process_is_alive(owner["pid"]):
        return True
    return time.time() > owner["until"]


def remove_stale_lock(lock, owner):
    """Remove `lock` if it still holds what `owner` was read from (another waiter may have replaced it since):
    renamed to a fresh name first, so two waiters never both remove it."""
    aside = lock.with_name(f"{lock.name}.{secrets.token_hex(6)}.stale")
    try:
        os.rename(lock, aside)
    except OSError:
        return  # another waiter moved it first
    if read_lock(aside) != owner:  # it was taken afresh between our reading and our renaming: give it back
        try:
            os.link(aside, lock)
        except OSError:
            pass
    os.unlink(aside)


@contextmanager
def file_lock(path, hold_seconds, wait_seconds, what=None):
    """Inside: this run alone works on `path` (among runs that take this lock), through `path`.lock.

    hold_seconds: the longest this run may hold it (written into the lock; after that another run may take it);
    wait_seconds: the longest to wait for another run's lock, with a message on stderr, before LockTimeout.
    """
    lock = Path(f"{path}.lock")
    started = time.monotonic()
    said = False
    while True:
        try:
            descriptor = os.open(lock, CREATE_NEW, 0o644)
        except FileExistsError:
            owner = read_lock(lock)
            if lock_is_stale(lock, owner):
                remove_stale_lock(lock, owner)
                continue
            waited = time.monotonic() - started
            who = f"process {owner['pid']} on {owner['host']}" if owner else "another run"
            if waited > wait_seconds:
                raise LockTimeout(f"{who} is still working on {what or path} after {waited:.0f} s of waiting (see "
                                  f"{lock}): run again once it is done, or delete {lock} if no run uses it") from None
            if not said:
                print(f"waiting for {who}, which is working on {what or path} (at most {wait_seconds:g} s)",
                      file=sys.stderr)
                said = True
            time.sleep(min(0.2, max(0.01, wait_seconds - waited)))
            continue
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "until": time.time() + hold_seconds}
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(owner, file)
        break
    try:
        yield
    finally:
        if read_lock(lock) == owner:  # ours still: release it (a stale-judged lock may have been taken by now)
            os.unlink(lock)


def new_folders(folder):
    """The folders that making `folder` (with its parents) would create, deepest first; [] if it exists."""
    return list(takewhile(lambda path: not path.exists(), (folder, *folder.parents)))


def remove_if_empty(folders):
    """Remove each of `folders` (deepest first) while it is empty: what a failed download made and left empty.
    A folder that holds anything (a .part file to resume, another run's file) is kept, and so are its parents."""
    for folder in folders:
        try:
            folder.rmdir()  # removes an empty folder only
        except FileNotFoundError:
            continue  # another run removed it already
        except OSError:
            return  # not empty: it and its parents stay
