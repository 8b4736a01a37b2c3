"""A teacher's trial of the gradebook with hostile hand-ins: each earns what its work earns and harms no one.

Read course/sandbox.py and course/gradebook.py first. Each hand-in here is the reference's sampling.py with an
attack at import or in `_accept`, graded on step 7 (one point) beside a classmate, bob, who hands in the
reference and must keep his point. Where an attack works without the sandbox, a test shows it does (its teeth):
the same hand-in graded unsandboxed (--run_untrusted_code_as_me) gets what the sandbox denies it.
"""

import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from course import exercises
from course import gradebook
from course import sandbox
from test_run_endings import sigint_as_at_a_terminal

pytestmark = pytest.mark.usefixtures("bubblewrap")

REFERENCE = (REPO_ROOT / "sampling.py").read_text(encoding="utf-8")
ACCEPT_BODY = '''    u = rng.random()  # u ~ U[0, 1)
    return bool(u < q_row[token] / p_row[token]), u  # u < q/p has probability min(1, q/p)
'''
STEAL = '''    import glob, importlib.util, itertools, os
    places = [os.environ.get("PWD", ""), f"/proc/{os.getppid()}/cwd"]
    places += open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")  # the paths in the parent's command line
    on_disk = (os.path.dirname(path) for depth in range(1, 5) for path in glob.glob("/*" * depth + "/sampling.py"))
    for place in itertools.chain(places, on_disk):  # the disk last, as it is found: a whole disk takes a while
        path = os.path.join(place, "sampling.py")
        if place and os.path.isfile(path) and not os.path.realpath(path).startswith("/handin"):
            spec = importlib.util.spec_from_file_location("stolen", path)
            stolen = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(stolen)
            return stolen._accept(q_row, p_row, token, rng)
    raise NotImplementedError("found no reference")
'''


def hand_in(folder, accept=ACCEPT_BODY, at_import=""):
    """A folder holding sampling.py: the reference with `_accept`'s body replaced and code run at import."""
    if ACCEPT_BODY not in REFERENCE:
        pytest.fail("sampling.py's _accept changed: update this test's ACCEPT_BODY")
    folder.mkdir(parents=True)
    (folder / "sampling.py").write_text(at_import + REFERENCE.replace(ACCEPT_BODY, accept), encoding="utf-8")
    return folder


def grade(tmp_path, hand_ins, **options):
    """{folder name: (step 7's points, the reasons)} of the hand-ins graded with bob, on step 7."""
    bob = tmp_path / "hand-ins" / "bob"
    if not bob.exists():
        hand_in(bob)
    rows = gradebook.gradebook([*hand_ins, bob], tmp_path / "grades.csv", steps=(7,), jobs=2,
                               **{"time_limit": 20, **options})
    return {os.path.basename(row[0]): (row[1], row[-1]) for row in rows[1:]}


def unsandboxed(monkeypatch):
    """The gradebook as on a machine without bubblewrap, the teacher having passed --run_untrusted_code_as_me."""
    monkeypatch.setattr(sandbox, "unavailable", lambda: "bubblewrap (bwrap) is not installed")
    return {"trust_unsandboxed": True}


def probes_running():
    """The pids of the gradebook's children (`python -m course.probe`) still running on this machine."""
    return [pid for pid, (_, command) in processes().items() if "course.probe" in command]


def processes():
    """{pid: (its parent's pid, its command line)} of every process running on this machine (a sandbox's too:
    /proc shows them by this namespace's pids)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:  # "pid (name) state ppid ...": the name may hold spaces
                state, parent = file.read().rsplit(")", 1)[1].split()[:2]
            if state in "ZX":  # it has ended (its parent has yet to read its exit code)
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                found[int(pid)] = int(parent), file.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):  # it ended while we looked
            continue
    return found


def descendants(pid):
    """{pid: command line} of the processes `pid` started, and those they started, still running."""
    table, found, todo = processes(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (its_parent, command) in table.items():
            if its_parent == parent and child not in found:
                found[child] = command
                todo.append(child)
    return found


@pytest.fixture
def teacher(tmp_path, monkeypatch):
    """The teacher's shell: the working folder is a clone of the reference (sampling.py in it), PWD says so."""
    folder = tmp_path / "teacher"
    folder.mkdir()
    (folder / "sampling.py").write_text(REFERENCE, encoding="utf-8")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PWD", str(folder))
    return folder


def test_a_blank_hand_in_finds_no_reference_through_proc_its_environment_or_the_disk(tmp_path, teacher, monkeypatch):
    """The sandbox shows no /proc of the gradebook, no PWD and no disk but its own copy: 0 points. Unsandboxed,
    the same hand-in imports the teacher's sampling.py through PWD and earns the point."""
    thief = hand_in(tmp_path / "hand-ins" / "thief", accept=STEAL)
    graded = grade(tmp_path, [thief])
    assert graded["thief"] == (0, "step 7: _accept on fresh rows and seeds: case 1 of 40: NotImplementedError: "
                                  "found no reference")
    assert graded["bob"] == (1, "")
    assert grade(tmp_path / "unsandboxed", [thief], **unsandboxed(monkeypatch))["thief"] == (1, "")


def test_a_hand_in_changes_nothing_outside_its_sandbox_and_leaves_no_process_file_or_output_behind(
        tmp_path, teacher, capfd):
    """At import it plants files in the teacher's folder, its own copy, the other hand-ins and the probe; fills
    /tmp and /dev/shm; writes a fake "wrote grades.csv" to the gradebook's terminal; forks, starts a session
    and forks again. Afterwards the teacher's folder, bob's hand-in, /tmp and /dev/shm are as they were, no
    process of it runs, the terminal shows none of it, and both are graded on their work."""
    token = f"planted-{os.getpid()}-{time.monotonic_ns()}"
    attack = f'''import os, time
for target in [os.environ.get("PWD", "."), f"/proc/{{os.getppid()}}/cwd", ".", "..", "../bob", "course"]:
    try:
        open(os.path.join(target, "{token}"), "w").write("x")
    except OSError:
        pass
for folder in ("/tmp", "/dev/shm"):
    try:
        with open(folder + "/{token}", "wb") as big:
            for _ in range(200):
                big.write(bytes(2**20))
    except OSError:
        pass
for fd in (1, 2):
    try:
        open(f"/proc/{{os.getppid()}}/fd/{{fd}}", "w").write("wrote grades.csv {token}\\n")
    except OSError:
        pass
try:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(60)
        os._exit(0)
except OSError:
    pass
'''
    vandal, _ = hand_in(tmp_path / "hand-ins" / "vandal", at_import=attack), hand_in(tmp_path / "hand-ins" / "bob")
    before = {path: path.read_bytes() for path in (tmp_path / "hand-ins").rglob("*") if path.is_file()}
    graded = grade(tmp_path, [vandal])
    assert graded == {"vandal": (1, ""), "bob": (1, "")}
    assert sorted(os.listdir(teacher)) == ["sampling.py"]
    assert {path: path.read_bytes() for path in (tmp_path / "hand-ins").rglob("*") if path.is_file()} == before
    assert [f"{folder}/{token}" for folder in ("/tmp", "/dev/shm") if os.path.exists(f"{folder}/{token}")] == []
    assert probes_running() == []
    assert token not in capfd.readouterr().err


def test_one_hand_in_that_writes_huge_numbers_lone_surrogates_or_has_a_latin_1_name_stops_no_one(tmp_path):
    """An error text holding a lone surrogate and a terminal escape; answers written straight into the answers
    file with 10**400 in them; a folder named in Latin-1 with an escape code (a ZIP from Windows). Each earns 0
    with its reason, escaped; the CSV and the feedback are written, bob keeps his point."""
    raiser = hand_in(tmp_path / "hand-ins" / "raiser", accept='    raise ValueError("\\ud800 \\x1b[2J")\n')
    forger = hand_in(tmp_path / "hand-ins" / "forger", at_import='''import json, os
if os.path.isdir("/answers"):
    json.dump([[{"out": [True, 10**400, 0.5]}] * 40], open("/answers/answers.json", "w"))
    os._exit(0)
''')
    latin_1 = tmp_path / "hand-ins" / os.fsdecode(b"caf\xe9\x1b[2J")
    hand_in(latin_1, accept='    raise ValueError("blank")\n')
    graded = grade(tmp_path, [raiser, forger, latin_1], feedback=tmp_path / "feedback")
    assert graded["raiser"] == (0, "step 7: _accept on fresh rows and seeds: case 1 of 40: ValueError: \\ud800 "
                                   "\\x1b[2J")
    assert graded["forger"][0] == 0 and "its answers could not be read (ValueError)" in graded["forger"][1]
    assert graded["caf\\udce9\\x1b[2J"][0] == 0 and graded["bob"] == (1, "")
    with open(tmp_path / "grades.csv", encoding="utf-8", newline="") as written:
        assert len(list(csv.reader(written))) == 5
    assert len(list((tmp_path / "feedback").glob("*.txt"))) == 4
    assert all(text.isprintable() or text == "\n" for path in (tmp_path / "feedback").glob("*.txt")
               for text in path.read_text(encoding="utf-8"))


def test_a_hand_in_of_links_is_refused_before_anything_is_copied_or_run(tmp_path):
    """Links to the teacher's sampling.py (the README puts the hand-ins inside the clone) or to a classmate's
    would earn full marks with no code run: the gradebook refuses them, saying so in the row."""
    to_reference = tmp_path / "hand-ins" / "linker"
    to_reference.mkdir(parents=True)
    (to_reference / "sampling.py").symlink_to(REPO_ROOT / "sampling.py")
    to_bob = tmp_path / "hand-ins" / "copier"
    to_bob.mkdir()
    (to_bob / "sampling.py").symlink_to("../bob/sampling.py")
    graded = grade(tmp_path, [to_reference, to_bob])
    assert graded["linker"] == (0, f"step 7: _accept on fresh rows and seeds: refused: sampling.py is a link (to "
                                   f"{REPO_ROOT / 'sampling.py'}): hand in the files themselves")
    assert graded["copier"][0] == 0 and "refused: sampling.py is a link (to ../bob/sampling.py)" in graded["copier"][1]
    assert graded["bob"] == (1, "")


def test_a_hand_in_that_sleeps_costs_its_budget_and_no_more_and_the_progress_line_names_it(tmp_path, capsys):
    """time.sleep at import: each step would run to its limit (3 s here). Its budget, 4 s for steps 7 and 8,
    runs out in step 8, which the progress line says; bob is graded as usual."""
    sleeper = hand_in(tmp_path / "hand-ins" / "sleeper", at_import="import time\ntime.sleep(600)\n")
    bob = hand_in(tmp_path / "hand-ins" / "bob")
    started = time.monotonic()
    rows = gradebook.gradebook([sleeper, bob], tmp_path / "grades.csv", steps=(7, 8), time_limit=3,
                               budget_seconds=4, jobs=2)
    assert time.monotonic() - started < 60  # the budget (4 s) and the start, not 2 x 3 s a step times retries
    assert rows[1][1:3] == [0, 0] and rows[2][1:3] == [1, 1]
    assert "step 7: _accept on fresh rows and seeds: case 1 of 40: TimeUp: ran past its share of the step's time " \
           "limit of 3 s" in rows[1][-1]
    assert "step 8: _residual of fresh rows: case 1 of 15: TimeUp: ran past its share of its time budget of 4 s " \
           "(all its steps together)" in rows[1][-1]
    assert "sleeper: its time budget of 4 s ran out (all its steps together), at step 8" in capsys.readouterr().err


def test_ctrl_c_stops_the_gradebook_within_seconds_with_exit_130_and_nothing_left_running(tmp_path):
    """Ctrl-C once the hand-in's step runs (its probe started by this gradebook, not another's): exit 130 within
    seconds and none of the gradebook's processes left. Should it not stop, the failure shows where each of its
    threads was (faulthandler's dump on SIGUSR1) and what it wrote. The gradebook gets SIGINT's default action
    back first (`sigint_as_at_a_terminal`: without it, in a test run started with &, the dump showed a gradebook
    still waiting for its step, 30 s after the signal)."""
    if os.name == "nt":
        pytest.skip("Ctrl-C is sent as SIGINT here; Windows has no such signal to send")
    sleeper = hand_in(tmp_path / "sleeper", at_import="import time\ntime.sleep(600)\n")
    dump_on_sigusr1 = ("import faulthandler, runpy, signal, sys; faulthandler.register(signal.SIGUSR1); "
                       "sys.argv = sys.argv[1:]; sys.path.insert(0, sys.argv[0].rpartition('/')[0]); "
                       "runpy.run_path(sys.argv[0], run_name='__main__')")  # python classroom.py, as a teacher runs it
    run = subprocess.Popen([sys.executable, "-c", dump_on_sigusr1, str(REPO_ROOT / "classroom.py"), "gradebook",
                            str(sleeper), "--csv", str(tmp_path / "grades.csv"), "--steps", "7"], cwd=tmp_path,
                           stderr=subprocess.PIPE, preexec_fn=sigint_as_at_a_terminal)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(run.stderr.read().decode(errors="replace")), daemon=True)
    reader.start()
    started, its_own = time.monotonic(), {}
    while not any("course.probe" in command for command in its_own.values()) and time.monotonic() < started + 60:
        time.sleep(0.1)  # until the hand-in's step has started
        its_own = descendants(run.pid)
    run.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    try:
        code = run.wait(timeout=30)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGUSR1)
        time.sleep(2)
        run.kill()
        reader.join(timeout=5)
        pytest.fail(f"still running 30 s after Ctrl-C, sent {stopped - started:.1f} s after the start, when it ran "
                    f"{its_own}; its threads and output:\n{''.join(errors)}")
    assert (code, time.monotonic() - stopped < 10) == (130, True)
    reader.join(timeout=5)
    assert "".join(errors).strip().endswith("Interrupted.")
    assert {pid: command for pid, (_, command) in processes().items() if pid in its_own} == {}


def test_without_bubblewrap_the_gradebook_refuses_in_one_line_unless_told_to_run_the_code_as_the_teacher(
        tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    assert sandbox.unavailable().startswith("bubblewrap (bwrap) is not installed: install bubblewrap")
    monkeypatch.setattr(gradebook, "run_limited", lambda *a, **k: pytest.fail("a step ran"))
    with pytest.raises(ValueError, match="the gradebook refuses, unless you pass --run_untrusted_code_as_me"):
        gradebook.gradebook([hand_in(tmp_path / "bob")], tmp_path / "grades.csv", steps=(7,))
    assert not (tmp_path / "grades.csv").exists()


def test_a_second_run_replaces_the_feedback_files_of_the_first_and_keeps_the_teachers_own(tmp_path):
    feedback = tmp_path / "feedback"
    feedback.mkdir()
    (feedback / "notes.txt").write_text("the teacher's own notes")
    alice = hand_in(tmp_path / "hand-ins" / "alice")
    grade(tmp_path, [alice], feedback=feedback)
    assert sorted(p.name for p in feedback.glob("*.txt")) == ["001-alice.txt", "002-bob.txt", "notes.txt"]
    carol = hand_in(tmp_path / "again" / "carol")
    gradebook.gradebook([carol], tmp_path / "grades.csv", steps=(7,), feedback=feedback)
    assert sorted(p.name for p in feedback.glob("*.txt")) == ["001-carol.txt", "notes.txt"]
    assert (feedback / "notes.txt").read_text() == "the teacher's own notes"


def test_grade_n_runs_a_hand_in_as_the_gradebook_does_so_a_teachers_spot_check_shows_what_it_saw(tmp_path):
    """An _accept that works only when the command line names pytest: `classroom.py grade 7` (the probe, in the
    sandbox) and the gradebook both fail it for the same reason. Run by plain pytest, as grade N once ran it,
    it passes: the spot check misled."""
    cheat = '    import sys\n    if "pytest" not in " ".join(sys.argv):\n        raise NotImplementedError("not pytest")\n'
    copy = exercises.write_student_copy(REPO_ROOT, tmp_path / "copy")
    (copy / "sampling.py").write_text(REFERENCE.replace(ACCEPT_BODY, cheat + ACCEPT_BODY), encoding="utf-8")
    spot_check = gradebook.shipped_checks(7, copy)
    assert [(c.passed, c.reason.endswith("NotImplementedError: not pytest")) for c in spot_check] == [(False, True)]
    graded = grade(tmp_path, [hand_in(tmp_path / "hand-ins" / "cheat", accept=cheat + ACCEPT_BODY)])
    assert graded["cheat"] == (0, "step 7: _accept on fresh rows and seeds: case 1 of 40: NotImplementedError: "
                                  "not pytest")
    assert all(check.passed for check in exercises.grade(7, copy))  # plain pytest: the cheat passes


def test_inside_the_sandbox_only_the_answer_files_tmp_and_dev_shm_can_be_written_and_those_within_their_size(
        tmp_path):
    """A script run as the gradebook runs a hand-in tries every place: its copy, the root, /dev, /usr, a new
    file beside the answers, then 100 MB into /tmp. Only the answer files the gradebook made, /tmp and
    /dev/shm take writes, and /tmp holds TMP_BYTES at most (its tmpfs is full after that)."""
    handin, answers = tmp_path / "handin", tmp_path / "answers"
    handin.mkdir()
    answers.mkdir()
    (answers / "answers.json").touch()
    (tmp_path / "request.json").write_text("{}")
    (handin / "try.py").write_text('''import os
for path in ("/handin/x", "/x", "/dev/x", "/usr/x", "/answers/new", "/answers/answers.json", "/tmp/x", "/dev/shm/x"):
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as error:
        print("refused", path, error.strerror)
written = 0
try:
    with open("/tmp/big", "wb") as big:
        for _ in range(100):
            big.write(bytes(2**20))
            written += 2**20
except OSError as error:
    print("stopped", error.strerror)
print("tmp took", written // 2**20, "MB")
''')
    descriptor = sandbox.filter_descriptor()
    try:
        run = subprocess.run(sandbox.command([sys.executable, "try.py"], handin, tmp_path / "request.json", answers,
                                             REPO_ROOT, descriptor), pass_fds=(descriptor,), capture_output=True,
                             text=True, timeout=60)
    finally:
        os.close(descriptor)
    lines = run.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("wrote")] == ["/answers/answers.json", "/tmp/x",
                                                                              "/dev/shm/x"], run.stdout + run.stderr
    assert "stopped No space left on device" in lines
    assert int(lines[-1].split()[2]) <= sandbox.TMP_BYTES // 2**20
    assert (answers / "answers.json").read_text() == "x" and sorted(os.listdir(answers)) == ["answers.json"]


def test_a_python_folder_under_tmp_is_shown_above_the_sandboxs_own_tmp(tmp_path, monkeypatch):
    """A learner's clone in /tmp, its .venv with it: the sandbox mounts a fresh /tmp of its own, and the folders
    the interpreter runs from must be mounted after it, or every hand-in fails with "bwrap: execvp
    /tmp/.../.venv/bin/python: No such file or directory" (found by the README's set-up in a clone under /tmp).
    Here a folder under /tmp, shown as one of the interpreter's, holds a file the sandboxed Python reads."""
    folder = Path(tempfile.mkdtemp(prefix="venv-", dir="/tmp"))
    try:
        (folder / "marker").write_text("seen")
        python_folders = sandbox.python_folders
        monkeypatch.setattr(sandbox, "python_folders", lambda clone: [*python_folders(clone), folder])
        handin, answers = tmp_path / "handin", tmp_path / "answers"
        handin.mkdir()
        answers.mkdir()
        (tmp_path / "request.json").write_text("{}")
        script = f"print(open({str(folder / 'marker')!r}).read())"
        descriptor = sandbox.filter_descriptor()
        try:
            run = subprocess.run(sandbox.command([sys.executable, "-c", script], handin, tmp_path / "request.json",
                                                 answers, REPO_ROOT, descriptor), pass_fds=(descriptor,),
                                 capture_output=True, text=True, timeout=60)
        finally:
            os.close(descriptor)
        assert run.stdout == "seen\n", run.stdout + run.stderr
    finally:
        shutil.rmtree(folder)


def test_a_virtual_environment_inside_the_teachers_clone_is_shown_and_nothing_else_of_the_clone(tmp_path,
                                                                                                monkeypatch):
    """The README makes .venv inside the clone (CI too): the sandbox must run its Python, and show no other file
    of the clone. An installation that holds the clone is left out (it would show the clone)."""
    clone = tmp_path / "clone"
    venv = clone / ".venv"
    (venv / "lib" / "site-packages").mkdir(parents=True)
    for name in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix"):
        monkeypatch.setattr(sys, name, str(venv))
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sandbox.site, "getsitepackages", lambda: [str(venv / "lib" / "site-packages")])
    monkeypatch.setattr(sandbox.site, "ENABLE_USER_SITE", False)
    assert sandbox.python_folders(clone) == [venv]
    assert venv not in sandbox.python_folders(venv / "lib")  # an installation holding the clone would show it
